from __future__ import annotations

import gc
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records.batch import build_batch
from tidelog.records.header import BatchHeader
from tidelog.storage.config import LogConfig
from tidelog.storage.file_handles import FileRegion
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_names import filename_prefix, offset_from_filename


def batch(base: int, n: int = 1, ts: int = 1000, value_size: int = 10) -> bytes:
    """A CreateTime batch of ``n`` records at ``base`` whose timestamps are ts, ts+1, ..."""
    return build_batch([(b"k", b"v" * value_size, (), ts + i) for i in range(n)], base_offset=base)


def append(seg: LogSegment, data: bytes) -> BatchHeader:
    h = BatchHeader.parse(data)
    seg.append(h.last_offset, h.max_timestamp, h.last_offset, data)
    return h


def test_file_names_are_20_digits(tmp_path: Path) -> None:
    assert filename_prefix(42) == "00000000000000000042"
    assert offset_from_filename("00000000000000000042.log.deleted") == 42
    with pytest.raises(ValueError):
        offset_from_filename("42.log")
    seg = LogSegment(tmp_path, 42, LogConfig())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000042.index",
        "00000000000000000042.log",
        "00000000000000000042.timeindex",
    ]
    seg.close()


def test_index_bytes_follow_kafka_append_rule(tmp_path: Path) -> None:
    """Expected entries computed by hand from LogSegment.append: before counting a batch, if the bytes since
    the last entry exceed index.interval.bytes, index (batch last offset -> batch start position) and
    (max timestamp so far -> its batch's last offset), then reset the counter."""
    config = LogConfig(index_interval_bytes=150)
    seg = LogSegment(tmp_path, 100, config)
    # (base, n records, first ts) chosen so timestamps go up and down
    plan = [(100, 2, 5000), (102, 1, 4000), (103, 3, 6000), (106, 1, 5500), (107, 2, 7000), (109, 1, 100)]
    sizes, positions, headers = [], [], []
    pos = 0
    for base, n, ts in plan:
        data = batch(base, n, ts, value_size=40)
        headers.append(append(seg, data))
        positions.append(pos)
        sizes.append(len(data))
        pos += len(data)
    # replay the rule by hand
    expected_offset, expected_time = [], []
    since, max_ts, max_off = 0, -1, -1
    for h, p, size in zip(headers, positions, sizes):
        if h.max_timestamp > max_ts:
            max_ts, max_off = h.max_timestamp, h.last_offset
        if since > 150:
            expected_offset.append(struct.pack(">ii", h.last_offset - 100, p))
            if not expected_time or max_ts > struct.unpack(">qi", expected_time[-1])[0]:
                expected_time.append(struct.pack(">qi", max_ts, max_off - 100))
            since = 0
        since += size
    assert 2 <= len(expected_offset) < len(plan)  # the rule actually skips some batches
    seg.on_becoming_inactive()
    # the final time entry: max timestamp so far, if larger than the last entry
    if max_ts > struct.unpack(">qi", expected_time[-1])[0]:
        expected_time.append(struct.pack(">qi", max_ts, max_off - 100))
    seg.close()
    assert (tmp_path / "00000000000000000100.index").read_bytes() == b"".join(expected_offset)
    assert (tmp_path / "00000000000000000100.timeindex").read_bytes() == b"".join(expected_time)
    # the same worked out by hand: batch sizes 157, 109, 205, 109, 157, 109 at positions 0, 157, 266, 471,
    # 580, 737; the counter exceeds 150 before batches 1, 3 and 5
    assert [len(batch(b, n, t, value_size=40)) for b, n, t in plan] == [157, 109, 205, 109, 157, 109]
    assert b"".join(expected_offset) == struct.pack(">6i", 2, 157, 6, 471, 9, 737)
    assert b"".join(expected_time) == struct.pack(">qiqiqi", 5001, 1, 6002, 5, 7001, 8)


def test_recover_rebuilds_identical_indexes(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=100)
    seg = LogSegment(tmp_path, 0, config)
    ts = [50, 40, 60, 60, 90, 10, 95, 93]
    off = 0
    for t in ts:
        append(seg, batch(off, 2, t))
        off += 2
    seg.on_becoming_inactive()
    offset_bytes = seg.offset_index.entries_list()
    time_bytes = seg.time_index.entries_list()
    assert seg.recover() == 0
    assert seg.offset_index.entries_list() == offset_bytes
    assert seg.time_index.entries_list() == time_bytes
    seg.close()


def _roll_args(seg: LogSegment, **over: int) -> dict[str, int]:
    args = {
        "segment_bytes": 10_000,
        "segment_ms": 1_000_000,
        "messages_size": 100,
        "max_timestamp_in_messages": 1000,
        "max_offset_in_messages": seg.base_offset + 10,
        "now_ms": 0,
    }
    args.update(over)
    return args


def test_should_roll_each_condition(tmp_path: Path) -> None:
    seg = LogSegment(
        tmp_path, 0, LogConfig(segment_index_bytes=8 * 3, index_interval_bytes=0), now_ms=0, roll_jitter_ms=0
    )
    assert not seg.should_roll(**_roll_args(seg))
    data = batch(0, 1, 1000)
    append(seg, data)
    size = len(data)
    assert not seg.should_roll(**_roll_args(seg))
    # 1. size > segment.bytes - incoming size
    assert seg.should_roll(**_roll_args(seg, segment_bytes=size + 99))
    assert not seg.should_roll(**_roll_args(seg, segment_bytes=size + 100))
    # 2. time waited (incoming max ts - first batch max ts) > segment.ms - jitter
    assert seg.should_roll(**_roll_args(seg, segment_ms=100, max_timestamp_in_messages=1101))
    assert not seg.should_roll(**_roll_args(seg, segment_ms=100, max_timestamp_in_messages=1100))
    seg.roll_jitter_ms = 10
    assert seg.should_roll(**_roll_args(seg, segment_ms=100, max_timestamp_in_messages=1091))
    seg.roll_jitter_ms = 0
    # 5. relative offset overflow
    assert seg.should_roll(**_roll_args(seg, max_offset_in_messages=2**31))
    assert not seg.should_roll(**_roll_args(seg, max_offset_in_messages=2**31 - 1))
    # 4. the time index is full one entry early: 2 slots, one kept for the final entry of an inactive segment
    append(seg, batch(1, 1, 1001))
    assert seg.time_index.entries == 1 and seg.time_index.is_full()
    assert not seg.offset_index.is_full()
    assert seg.should_roll(**_roll_args(seg))
    seg.close()

    # 3. full offset index (4 entries) while the time index is not (equal timestamps add one entry only)
    (tmp_path / "b").mkdir()
    seg2 = LogSegment(
        tmp_path / "b",
        0,
        LogConfig(segment_index_bytes=36, index_interval_bytes=0),
        now_ms=0,
        roll_jitter_ms=0,
    )
    for i in range(5):
        assert not seg2.should_roll(**_roll_args(seg2))
        append(seg2, batch(i, 1, 1000))
    assert seg2.offset_index.entries == 4 and seg2.offset_index.is_full()
    assert seg2.time_index.entries == 1 and not seg2.time_index.is_full()
    assert seg2.should_roll(**_roll_args(seg2))
    seg2.close()


def test_time_roll_without_timestamps_uses_create_time(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, LogConfig(), now_ms=1000, roll_jitter_ms=0)
    data = build_batch([(b"k", b"v", (), -1)], base_offset=0, max_timestamp=-1)
    append(seg, data)
    assert seg.rolling_based_timestamp == -1
    assert seg.should_roll(**_roll_args(seg, segment_ms=100, now_ms=1101, max_timestamp_in_messages=-1))
    assert not seg.should_roll(**_roll_args(seg, segment_ms=100, now_ms=1100, max_timestamp_in_messages=-1))
    seg.close()


def _filled(
    tmp_path: Path, n: int = 20, interval: int = 200
) -> tuple[LogSegment, list[tuple[int, BatchHeader]]]:
    seg = LogSegment(tmp_path, 10, LogConfig(index_interval_bytes=interval))
    out = []
    off = 10
    for i in range(n):
        data = batch(off, 1 + i % 3, 1000 + 10 * i, value_size=20 + i)
        out.append((seg.size, BatchHeader.parse(data)))
        append(seg, data)
        off += 1 + i % 3
    return seg, out


def test_translate_offset_and_read_limits(tmp_path: Path) -> None:
    seg, batches = _filled(tmp_path)
    for target in range(10, batches[-1][1].next_offset):
        pos, h = seg.translate_offset(target)  # type: ignore[misc]
        want = next((p, b) for p, b in batches if b.last_offset >= target)
        assert (pos, h.base_offset) == (want[0], want[1].base_offset)
    assert seg.translate_offset(batches[-1][1].next_offset) is None

    p3, h3 = batches[3]
    sizes = [b.size for _, b in batches]
    # exactly two whole batches fit
    region = seg.read(h3.base_offset + h3.last_offset_delta, sizes[3] + sizes[4])
    assert region is not None and (region.position, region.length) == (p3, sizes[3] + sizes[4])
    assert region.first_offset == h3.base_offset
    # one byte short: only one batch, never a partial one
    region = seg.read(h3.base_offset, sizes[3] + sizes[4] - 1)
    assert region is not None and region.length == sizes[3]
    # smaller than the first batch: the first batch whole (KIP-74) or nothing
    region = seg.read(h3.base_offset, 1)
    assert region is not None and region.length == sizes[3]
    region = seg.read(h3.base_offset, 1, min_one_batch=False)
    assert region is not None and region.length == 0
    # bounded by a max position or a max offset at batch granularity
    region = seg.read(h3.base_offset, 10**6, max_position=batches[6][0])
    assert region is not None and region.length == batches[6][0] - p3
    region = seg.read(h3.base_offset, 10**6, max_offset=batches[6][1].base_offset)
    assert region is not None and region.length == batches[6][0] - p3
    data = region.read_bytes()
    assert BatchHeader.parse(data).base_offset == h3.base_offset
    assert seg.read(batches[-1][1].next_offset, 100) is None
    seg.close()


@settings(max_examples=40, deadline=None)
@given(
    timestamps=st.lists(st.integers(0, 500), min_size=1, max_size=25),
    target=st.integers(-5, 520),
    start=st.integers(0, 30),
)
def test_find_offset_by_timestamp_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, timestamps: list[int], target: int, start: int
) -> None:
    seg = LogSegment(tmp_path_factory.mktemp("s"), 0, LogConfig(index_interval_bytes=50))
    headers = []
    for i, ts in enumerate(timestamps):
        headers.append(append(seg, batch(i, 1, ts)))
    found = seg.find_offset_by_timestamp(target, start)
    want = next((h for h in headers if h.max_timestamp >= target and h.last_offset >= start), None)
    if want is None:
        assert found is None
    else:
        assert found is not None and found[1].base_offset == want.base_offset
    seg.close()


def test_truncate_to_cuts_at_batch_boundary(tmp_path: Path) -> None:
    seg, batches = _filled(tmp_path, n=30, interval=100)
    idx_before = seg.offset_index.entries_list()
    target_pos, target = batches[17]
    removed = seg.truncate_to(target.base_offset + target.last_offset_delta)  # inside batch 17
    assert seg.size == target_pos and removed > 0
    assert seg.read_next_offset() == target.base_offset
    assert seg.offset_index.entries_list() == [e for e in idx_before if e[0] < target.last_offset]
    assert seg.max_timestamp_so_far == batches[16][1].max_timestamp
    # appends continue and indexes stay consistent with a rebuild
    append(seg, batch(target.base_offset, 1, 5))
    entries = seg.offset_index.entries_list()
    seg.recover()
    assert seg.offset_index.entries_list() == entries
    assert seg.truncate_to(0) > 0 and seg.size == 0
    assert seg.offset_index.entries == 0 and seg.max_timestamp_so_far == -1
    seg.close()


def test_rename_and_delete(tmp_path: Path) -> None:
    seg, _ = _filled(tmp_path, n=3)
    seg.rename_suffix(".deleted")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000010.index.deleted",
        "00000000000000000010.log.deleted",
        "00000000000000000010.timeindex.deleted",
    ]
    assert seg.read(10, 100) is not None  # the descriptor survives the rename
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_region_keeps_file_open_after_segment_close(tmp_path: Path) -> None:
    seg, _ = _filled(tmp_path, n=3)
    region = seg.read(10, 10**6)
    assert isinstance(region, FileRegion)
    fd = region.fd
    expected = region.read_bytes()
    identity = (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    seg.delete()
    assert (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == identity  # still open: the region holds the handle
    assert region.read_bytes() == expected
    del region
    gc.collect()
    # closed: the descriptor is gone, or (another thread of the test run opened a file meanwhile) names another file
    try:
        after = os.fstat(fd)
    except OSError:
        return
    assert (after.st_dev, after.st_ino) != identity, "the segment's file is still open after the region went"


def test_largest_timestamp_reloaded_after_reopen(tmp_path: Path) -> None:
    seg, batches = _filled(tmp_path, n=12, interval=100)
    want = max(b.max_timestamp for _, b in batches)
    seg.close()
    again = LogSegment(tmp_path, 10, LogConfig(index_interval_bytes=100))
    again.sanity_check()
    assert again.max_timestamp_so_far == want
    assert again.rolling_based_timestamp == batches[0][1].max_timestamp
    assert again.read_next_offset() == batches[-1][1].next_offset
    again.close()


@pytest.mark.parametrize("chunk", [61, 100, 333, 4096])
def test_chunked_header_scans_and_recovery_match_per_batch_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    import tidelog.storage.header_scan as header_scan_mod
    import tidelog.storage.segment_recovery as recovery_mod
    from tidelog.storage.header_scan import read_header_at

    config = LogConfig(index_interval_bytes=150)
    seg = LogSegment(tmp_path, 0, config)
    off = 0
    for i, n in enumerate([1, 3, 1, 7, 2, 1, 40, 1, 2, 5]):
        append(seg, batch(off, n, 100 + 3 * i, value_size=7 * (i % 4)))
        off += n
    # the reference: one 61-byte pread per header
    expected = []
    pos = 0
    while (h := read_header_at(seg.fd, pos, seg.size)) is not None:
        expected.append((pos, h))
        pos += h.size
    offset_entries = seg.offset_index.entries_list()
    time_entries = seg.time_index.entries_list()
    monkeypatch.setattr(header_scan_mod, "HEADER_SCAN_CHUNK", chunk)
    monkeypatch.setattr(recovery_mod, "RECOVERY_READ_CHUNK", chunk)
    assert list(seg.iter_headers()) == expected
    assert list(seg.iter_headers(expected[3][0], expected[7][0])) == expected[3:7]
    for target in range(off):
        want = next((p, h) for p, h in expected if h.last_offset >= target)
        assert seg.translate_offset(target) == want
        region = seg.read(target, 1)
        assert region is not None and (region.position, region.length) == (want[0], want[1].size)
        two = seg.read(target, 10**6)
        assert two is not None and two.position + two.length == seg.size
    assert seg.read_next_offset() == off
    assert seg.recover() == 0
    assert seg.offset_index.entries_list() == offset_entries
    assert seg.time_index.entries_list()[: len(time_entries)] == time_entries
    # a flipped byte in the middle of a batch that straddles chunks: recovery cuts there, as before
    p6, h6 = expected[6]
    with open(seg.log_path, "r+b") as f:
        f.seek(p6 + h6.size - 5)
        byte = f.read(1)
        f.seek(p6 + h6.size - 5)
        f.write(bytes([byte[0] ^ 0x55]))
    size = seg.size
    assert seg.recover() == size - p6
    assert seg.size == p6 and seg.read_next_offset() == h6.base_offset
    seg.close()


@pytest.mark.parametrize("use_c", [True, False])
def test_append_parts_stamp_writes_base_offset_and_epoch_without_touching_the_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_c: bool
) -> None:
    """``stamp=(base_offset, epoch)``: the batch reaches the file with those two fields replaced (C
    write_stamped or the Python writev fallback), the caller's bytes stay as they were, and a failing
    ``check`` leaves nothing behind."""
    import tidelog.storage.segment as segment_module

    if use_c:
        if segment_module._c_write_stamped is None:
            pytest.skip("the optional C extension is not in use")
    else:
        monkeypatch.setattr(segment_module, "_c_write_stamped", None)
    seg = LogSegment(tmp_path, 100, LogConfig())
    first = batch(0, n=3)
    for data in (first, bytearray(first), memoryview(first)):
        before = bytes(data)
        size = seg.size
        pos = seg.append_parts(102 + size, 1002, 102 + size, (data,), None, (100 + size, 7))
        assert pos == size and seg.size == size + len(before)
        assert bytes(data) == before
        written = seg.log_path.read_bytes()[pos:]
        expect = bytearray(before)
        struct.pack_into(">q", expect, 0, 100 + size)
        struct.pack_into(">i", expect, 12, 7)
        assert written == bytes(expect)
    size = seg.size

    def fail() -> None:
        raise RuntimeError("bad crc")

    with pytest.raises(RuntimeError):
        seg.append_parts(10_000, 1002, 10_000, (first,), fail, (9_998, 7))
    assert seg.size == size and os.path.getsize(seg.log_path) == size
    seg.close()
