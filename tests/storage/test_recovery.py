"""Crash tests: damage the files of a log that was not closed cleanly, reopen, check what survives."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records.batch import build_batch, decode_records
from tidelog.records.header import BatchHeader, iter_batch_headers
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog
from tidelog.storage.segment import LogSegment

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2500, index_interval_bytes=180)


def write_log(d: Path, batches: int = 40, seed: int = 0) -> list[tuple[str, int, BatchHeader, bytes]]:
    """Append batches, then abandon the log as a crash would (no close, no trim, no final index entries).

    Returns (segment file name, position, header, batch bytes) for every batch, in order.
    """
    rng = random.Random(seed)
    lg = PartitionLog.open(d, CONFIG, now_ms=NOW)
    for i in range(batches):
        n = rng.randint(1, 4)
        recs = [
            (
                b"key%d" % i,
                bytes(rng.randrange(256) for _ in range(rng.randint(0, 60))),
                (),
                NOW + rng.randint(-50, 50),
            )
            for _ in range(n)
        ]
        lg.append_as_leader(build_batch(recs), leader_epoch=1, now_ms=NOW)
    lg.wait_for_background_flushes()
    out = []
    for seg in lg.segments:
        data = seg.log_path.read_bytes()
        for pos, h in iter_batch_headers(data):
            out.append((seg.log_path.name, pos, h, data[pos : pos + h.size]))
        seg.close_handlers()  # crash: the descriptors go away, nothing is trimmed or finalised
    return out


def reopen(d: Path, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(d, CONFIG, now_ms=NOW, **kwargs)  # type: ignore[arg-type]


def check_prefix(lg: PartitionLog, expected: list[tuple[str, int, BatchHeader, bytes]]) -> None:
    """The log holds exactly ``expected`` (byte for byte), offsets and indexes are right."""
    want_leo = expected[-1][2].next_offset if expected else 0
    assert lg.log_end_offset == want_leo
    got = lg.read(0, 1 << 30).read_bytes() if want_leo else b""
    assert got == b"".join(e[3] for e in expected)
    for _, _, h, raw in expected:
        # every surviving batch is found through the indexes, for each of its offsets
        for off in (h.base_offset, h.last_offset):
            info = lg.read(off, 1)
            assert info.first_batch_offset == h.base_offset
            assert info.read_bytes() == raw
        assert [r.offset for r in decode_records(raw)][-1] == h.last_offset
    # the indexes equal a rebuild from the .log
    for seg in lg.segments:
        offsets, times = seg.offset_index.entries_list(), seg.time_index.entries_list()
        seg.recover()
        assert seg.offset_index.entries_list() == offsets
        assert seg.time_index.entries_list() == times[: len(seg.time_index.entries_list())]
        assert seg.time_index.entries_list()[:-1] == times[: seg.time_index.entries - 1]
    # and the log keeps working
    nxt = lg.append_as_leader(build_batch([(b"k", b"after", (), NOW)]), now_ms=NOW)
    assert nxt.first_offset == want_leo


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), cut=st.floats(0.0, 1.0))
def test_cut_active_segment_at_random_point(
    tmp_path_factory: pytest.TempPathFactory, seed: int, cut: float
) -> None:
    d = tmp_path_factory.mktemp("cut") / "t-0"
    batches = write_log(d, seed=seed)
    active = batches[-1][0]
    path = d / active
    size = path.stat().st_size
    cut_at = int(size * cut)
    os.truncate(path, cut_at)
    survivors = [b for b in batches if b[0] != active or b[1] + b[2].size <= cut_at]
    lg = reopen(d)
    check_prefix(lg, survivors)
    lg.close()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), garbage=st.binary(min_size=1, max_size=300))
def test_garbage_appended_to_active_segment(
    tmp_path_factory: pytest.TempPathFactory, seed: int, garbage: bytes
) -> None:
    d = tmp_path_factory.mktemp("junk") / "t-0"
    batches = write_log(d, seed=seed)
    with open(d / batches[-1][0], "ab") as f:
        f.write(garbage)
    lg = reopen(d)
    check_prefix(lg, batches)
    assert (d / batches[-1][0]).stat().st_size == sum(b[2].size for b in batches if b[0] == batches[-1][0])
    lg.close()


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    which=st.floats(0.0, 1.0, exclude_max=True),
    where=st.floats(0.0, 1.0, exclude_max=True),
)
def test_corrupt_byte_truncates_there_and_deletes_later_segments(
    tmp_path_factory: pytest.TempPathFactory, seed: int, which: float, where: float
) -> None:
    d = tmp_path_factory.mktemp("flip") / "t-0"
    batches = write_log(d, seed=seed)
    victim = int(len(batches) * which)
    name, pos, h, _ = batches[victim]
    # a byte the CRC or the framing covers: batchLength, magic, crc, or anything from attributes on.
    # (baseOffset and partitionLeaderEpoch are outside the CRC: Kafka cannot detect damage there either.)
    candidates = [*range(8, 12), *range(16, h.size)]
    offset_in_batch = candidates[int(len(candidates) * where)]
    with open(d / name, "r+b") as f:
        f.seek(pos + offset_in_batch)
        byte = f.read(1)[0]
        f.seek(pos + offset_in_batch)
        f.write(bytes([byte ^ 0xFF]))
    lg = reopen(d)
    check_prefix(lg, batches[:victim])
    later = sorted({b[0] for b in batches if b[0] > name})
    assert not any((d / n).exists() for n in later)
    lg.close()


def test_clean_reopen_skips_and_unclean_recovers_from_recovery_point(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    batches = write_log(d)
    names = sorted({b[0] for b in batches})
    assert len(names) >= 3
    # damage in an early segment goes unnoticed below the recovery point ...
    first_seg_batches = [b for b in batches if b[0] == names[0]]
    with open(d / names[0], "r+b") as f:
        f.seek(first_seg_batches[-1][1] + 30)
        f.write(b"\x00\x01\x02")
    last_base = int(names[-1].split(".")[0])
    lg = reopen(d, recovery_point=last_base)
    assert lg.recovered_segments == 1
    assert lg.log_end_offset == batches[-1][2].next_offset
    assert lg.recovery_point == last_base
    lg.close()
    # ... and is found when recovering from 0 (everything after it is gone)
    lg = reopen(d, recovery_point=0)
    assert lg.log_end_offset == first_seg_batches[-1][2].base_offset
    assert len(lg.segments) == 1
    lg.close()


@pytest.mark.parametrize("damage", ["delete", "garble", "truncate_odd", "zero_length"])
@pytest.mark.parametrize("kind", [".index", ".timeindex"])
def test_missing_or_corrupt_indexes_are_rebuilt_even_after_clean_shutdown(
    tmp_path: Path, damage: str, kind: str
) -> None:
    d = tmp_path / "t-0"
    lg = PartitionLog.open(d, CONFIG, now_ms=NOW)
    rng = random.Random(5)
    for _ in range(40):
        lg.append_as_leader(
            build_batch([(b"k", bytes(rng.randint(0, 80)), (), NOW + rng.randint(0, 99))]), now_ms=NOW
        )
    segs = [
        (s.base_offset, s.offset_index.entries_list(), s.time_index.entries_list()) for s in lg.segments[:-1]
    ]
    lg.close()
    target = d / f"{segs[0][0]:020d}{kind}"
    assert target.stat().st_size > 8
    if damage == "delete":
        target.unlink()
    elif damage == "garble":
        data = bytearray(target.read_bytes())
        data[0:12] = b"\x7f" * 12  # first entry far beyond the others
        target.write_bytes(bytes(data))
    elif damage == "truncate_odd":
        os.truncate(target, target.stat().st_size - 3)
    else:
        os.truncate(target, 0)
    calls: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment, *a: object, **k: object) -> int:
        calls.append(self.base_offset)
        return original(self, *a, **k)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LogSegment, "recover", spy)
        lg = PartitionLog.open(d, CONFIG, clean_shutdown=True, now_ms=NOW)
    if damage == "zero_length" and kind == ".timeindex":
        # an empty time index is a valid (if useless) index; Kafka keeps it too
        assert calls == []
    else:
        assert calls == [segs[0][0]]
        seg = lg.segments[0]
        assert seg.offset_index.entries_list() == segs[0][1]
        assert seg.time_index.entries_list() == segs[0][2]
    lg.close()


def test_preallocated_indexes_after_crash_are_usable(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    batches = write_log(d)
    active = batches[-1][0].replace(".log", ".index")
    assert (d / active).stat().st_size == CONFIG.segment_index_bytes  # still preallocated
    # a clean-shutdown open trusts the files: the zero tail is not mistaken for entries
    lg = reopen(d, clean_shutdown=True)
    check_prefix(lg, batches)
    lg.close()


def test_leftover_files_are_cleaned_up(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    batches = write_log(d)
    (d / "00000000000000000003.log.deleted").write_bytes(b"x")
    (d / "00000000000000000003.index.deleted").write_bytes(b"x")
    (d / "00000000000000000005.log.cleaned").write_bytes(b"x")
    (d / "00000000000000099999.index").write_bytes(b"\x00" * 8)  # index without a log
    (d / "00000000000000099999.timeindex").write_bytes(b"\x00" * 12)
    lg = reopen(d)
    names = {p.name for p in d.iterdir()}
    assert not any(n.endswith((".deleted", ".cleaned")) for n in names)
    assert "00000000000000099999.index" not in names
    check_prefix(lg, batches)
    lg.close()


def test_swap_file_replaces_the_segments_it_covers(tmp_path: Path) -> None:
    """A cleaner crash after writing ``.swap``: the swapped segment replaces the range it covers."""
    d = tmp_path / "t-0"
    batches = write_log(d)
    names = sorted({b[0] for b in batches})
    # the "cleaned" version of the first two segments: the batches of the first one only
    first, second = names[0], names[1]
    cleaned = b"".join(b[3] for b in batches if b[0] == first)
    keep_last = [b for b in batches if b[0] == second][-1]
    cleaned += keep_last[3]  # retain the last batch of the second segment, as compaction would
    (d / (first + ".swap")).write_bytes(cleaned)
    (d / (first.replace(".log", ".index") + ".swap")).write_bytes(b"\x00" * 8)
    lg = reopen(d)
    names_after = sorted(p.name for p in d.glob("*.log"))
    assert first in names_after and second not in names_after
    assert not list(d.glob("*.swap"))
    expected = [b for b in batches if b[0] == first] + [keep_last] + [b for b in batches if b[0] > second]
    # offsets are kept, only the middle of the second segment is gone
    got = [h.base_offset for _, h in iter_batch_headers(lg.read(0, 1 << 30).read_bytes())]
    assert got == [b[2].base_offset for b in expected]
    lg.close()


def test_log_start_checkpoint_beyond_the_log_starts_afresh(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = reopen(d, log_start_offset=500)
    assert (lg.log_start_offset, lg.log_end_offset) == (500, 500)
    assert [p.name for p in d.glob("*.log")] == ["00000000000000000500.log"]
    lg.close()
    batches = write_log(tmp_path / "u-0", batches=5)
    lg = reopen(tmp_path / "u-0", log_start_offset=10_000)
    assert (lg.log_start_offset, lg.log_end_offset) == (10_000, 10_000)
    assert batches and [p.name for p in (tmp_path / "u-0").glob("*.log")] == ["00000000000000010000.log"]
    lg.close()


def test_recovery_copies_survive_a_second_crash(tmp_path: Path) -> None:
    """Recover, crash again during use, recover again: the result is still the valid prefix."""
    d = tmp_path / "t-0"
    batches = write_log(d, seed=3)
    os.truncate(d / batches[-1][0], batches[-1][1] + 5)
    lg = reopen(d)
    for seg in lg.segments:
        seg.close_handlers()
    backup = tmp_path / "copy-0"
    shutil.copytree(d, backup)
    lg2 = reopen(backup)
    check_prefix(lg2, batches[:-1])
    lg2.close()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    damage=st.sampled_from(["none", "cut", "garbage", "flip", "huge_length", "offsets_go_back"]),
    where=st.floats(0.0, 1.0, exclude_max=True),
    chunk=st.sampled_from([300, 1000, 1 << 20]),
)
def test_the_c_recovery_scan_matches_the_python_loop(
    tmp_path_factory: pytest.TempPathFactory, seed: int, damage: str, where: float, chunk: int
) -> None:
    """``scan_batches`` (C) and the Python loop of ``LogSegment.recover`` truncate at the same byte and build the
    same indexes and callbacks, whatever the damage, with read chunks smaller and larger than the batches."""
    import struct

    import tidelog.storage.segment_recovery as segment_module  # the recovery scan

    if segment_module._c_scan_batches is None:
        pytest.skip("the optional C extension is not in use")
    root = tmp_path_factory.mktemp("scan")
    rng = random.Random(seed)
    (root / "src").mkdir()
    seg = LogSegment(root / "src", 0, LogConfig(index_interval_bytes=150))
    base = 0
    for _ in range(rng.randint(1, 25)):
        n = rng.randint(1, 5)
        data = build_batch(
            [(b"k", bytes(rng.randrange(256) for _ in range(rng.randint(0, 400))), (), NOW + rng.randint(-9, 9))
             for _ in range(n)],
            base_offset=base,
            partition_leader_epoch=rng.randint(0, 3),
        )
        h = BatchHeader.parse(data)
        seg.append(h.last_offset, h.max_timestamp, h.last_offset, data)
        base = h.last_offset + 1 + rng.choice([0, 0, 3])
    seg.close()
    raw = bytearray((root / "src" / "00000000000000000000.log").read_bytes())
    at = int(len(raw) * where)
    if damage == "cut":
        del raw[at:]
    elif damage == "garbage":
        raw += bytes(rng.randrange(256) for _ in range(rng.randint(1, 100)))
    elif damage == "flip":
        raw[at] ^= 0x5A
    elif damage in ("huge_length", "offsets_go_back"):
        positions = [p for p, _ in iter_batch_headers(bytes(raw))]
        p = positions[int(len(positions) * where)]
        if damage == "huge_length":
            struct.pack_into(">i", raw, p + 8, rng.choice([2**31 - 1, -5, 10, len(raw)]))
        else:
            struct.pack_into(">q", raw, p, -1)  # outside the CRC: only the offset order check sees it
    results = []
    for mode in ("c", "python"):
        d = root / mode
        d.mkdir()
        (d / "00000000000000000000.log").write_bytes(raw)
        seen: list[tuple[int, tuple]] = []
        original = segment_module._c_scan_batches
        read_chunk = segment_module.RECOVERY_READ_CHUNK
        try:
            if mode == "python":
                segment_module._c_scan_batches = None
            segment_module.RECOVERY_READ_CHUNK = chunk
            s = LogSegment(d, 0, LogConfig(index_interval_bytes=150))
            truncated = s.recover(on_header=lambda pos, fields, out=seen: out.append((pos, tuple(fields))))
        finally:
            segment_module._c_scan_batches = original
            segment_module.RECOVERY_READ_CHUNK = read_chunk
        results.append(
            (truncated, s.size, s.offset_index.entries_list(), s.time_index.entries_list(), seen,
             s.max_timestamp_and_offset, s._bytes_since_last_index_entry)
        )
        s.close()
    assert results[0] == results[1]
