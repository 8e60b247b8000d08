"""The cleaner's C per-batch loops (``tidelog.storage._cleanwalk``) against the pure-Python path, which stays the
reference: random logs cleaned once with the C functions and once with them disabled must give byte-identical
segment files, identical offset maps and identical CleanResult stats; malformed records inside a valid CRC must
raise the same exception with the same message in both paths."""

from __future__ import annotations

import hashlib
import random
import struct
from array import array
from pathlib import Path

import pytest
from cleanup_helpers import NOW, TP, compact_config, open_log

from tidelog.records.batch import build_batch, build_control_batch, decode_batch
from tidelog.records.crc import crc32c
from tidelog.records.header import (
    LOG_APPEND_TIME,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    parse_header_tuple,
)
from tidelog.records.varint import encode_unsigned, encode_varint, encode_varlong
from tidelog.storage.cleaner import CleanerConfig, CleanResult, LogCleaner, batch_filter, build_map
from tidelog.storage.cleaner.batch_filter import _Filter
from tidelog.storage.log import PartitionLog
from tidelog.storage.offset_map import OffsetMap

#: each C hook is a global of the module that calls it: disabling it there is what runs the Python path
C_HOOKS = [(build_map, "c_put_records"), (batch_filter, "c_filter_records")]
C_FUNCS = [(module, name) for module, name in C_HOOKS if getattr(module, name) is not None]

pytestmark = pytest.mark.skipif(
    not C_FUNCS, reason="tidelog.storage._cleanwalk is not built (or TIDELOG_PURE_PYTHON is set)"
)

CODECS = (0, 0, 0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd


def pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    for module, name in C_FUNCS:
        monkeypatch.setattr(module, name, None)


# ============================================================================================ random logs


class LogWriter:
    """Random v2 batches with explicit offsets (appended as a follower: no leader-side rewriting)."""

    def __init__(self, rng: random.Random, key_space: int) -> None:
        self.rng = rng
        self.key_space = key_space
        self.next_offset = 0
        self.sequences: dict[int, int] = {}
        self.open_txn = False

    def key(self) -> bytes | None:
        rng = self.rng
        if rng.random() < 0.04:
            return None
        k = rng.randrange(self.key_space)
        return b"" if k == 0 else rng.choice([b"key-%d" % k, b"K" * (k % 97) + b"-%d" % k])

    def value(self) -> bytes | None:
        rng = self.rng
        if rng.random() < 0.12:
            return None
        return rng.randbytes(rng.choice([0, 1, 10, 100, 100, 300, 9000]))

    def batch(self, ts: int) -> bytes:
        rng = self.rng
        n = rng.choice([1, 1, 2, 5, 10, 50, 200])
        recs = []
        delta = -1
        for _ in range(n):
            delta += 1 if rng.random() < 0.9 else rng.choice([2, 40])
            headers = [("h", b"x" * rng.randrange(4))] if rng.random() < 0.1 else []
            t = ts + rng.choice([0, 0, 1, 7, -5, 100_000, -(10**8), 10**9])
            recs.append((self.key(), self.value(), headers, t, delta))
        codec = rng.choice(CODECS)
        kw: dict[str, object] = {}
        if rng.random() < 0.15:
            kw = {"timestamp_type": LOG_APPEND_TIME, "max_timestamp": ts + rng.randrange(1000)}
        elif rng.random() < 0.1:  # written by an earlier cleaning: a delete horizon in the past or the future
            kw = {"delete_horizon_ms": rng.choice([NOW - 10, NOW + 500, NOW + 10**7])}
        roll = rng.random()
        if roll < 0.08 and not self.open_txn:
            pid = 50
            kw.update(producer_id=pid, producer_epoch=0, is_transactional=True)
            self.open_txn = True
        elif roll < 0.35:
            pid = rng.choice([7, 8, 9])
            kw.update(producer_id=pid, producer_epoch=0)
        else:
            pid = NO_PRODUCER_ID
        if pid != NO_PRODUCER_ID:
            seq = self.sequences.get(pid, 0)
            kw["base_sequence"] = seq
            self.sequences[pid] = seq + delta + 1
        else:
            kw["base_sequence"] = NO_SEQUENCE
        out = build_batch(recs, base_offset=self.next_offset, compression=codec, **kw)  # type: ignore[arg-type]
        self.next_offset += delta + 1 + (rng.choice([1, 3]) if rng.random() < 0.05 else 0)
        return out

    def end_txn(self, ts: int) -> bytes:
        marker = build_control_batch(self.rng.choice([0, 1]), 50, 0, 3, self.next_offset, ts)
        self.next_offset += 1
        self.open_txn = False
        return marker

    def write(self, plog: PartitionLog, batches: int, ts: int) -> None:
        for i in range(batches):
            plog.append_as_follower(self.batch(ts + i))
            if self.open_txn and self.rng.random() < 0.3:
                plog.append_as_follower(self.end_txn(ts + i))
        if self.open_txn:
            plog.append_as_follower(self.end_txn(ts + batches))


def map_state(m: OffsetMap) -> tuple[object, ...]:
    digests, offsets, slots = m.buffers()
    return bytes(digests), offsets.tobytes(), slots, m.size, m.latest_offset, m.lookups, m.probes


def result_state(r: CleanResult) -> dict[str, object]:
    return {f: getattr(r, f) for f in r.__slots__ if f != "seconds"}


def files_of(plog: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(plog.dir.iterdir()) if p.is_file()}


def run_scenario(root: Path, seed: int, key_space: int, dedupe: int, pure: bool, monkeypatch: pytest.MonkeyPatch):
    """Write a random log, clean it until done, write more, clean twice more (the second time past every
    delete horizon); the states after each round."""
    with monkeypatch.context() as mp:
        if pure:
            pure_python(mp)
        rng = random.Random(seed)
        plog = open_log(root, compact_config(segment_bytes=16 * 1024, segment_index_bytes=10 * 1024 * 1024))
        writer = LogWriter(rng, key_space)
        states: list[tuple[object, ...]] = []
        cleaner_ = LogCleaner(CleanerConfig(dedupe_buffer_size=dedupe), lambda: {TP: plog})
        offset_map = OffsetMap(cleaner_.config.map_memory_per_thread(), cleaner_.config.io_buffer_load_factor)
        try:
            for phase, now in enumerate((NOW, NOW + 100, NOW + 10**8)):
                writer.write(plog, rng.randrange(25, 70), NOW + phase * 1000)
                plog.roll(now_ms=NOW)
                plog.high_watermark = plog.log_end_offset
                for _ in range(200):
                    r = cleaner_.clean_filthiest(offset_map, now)
                    if r is None:
                        break
                    states.append((phase, result_state(r), map_state(offset_map)))
            plog.flush()
            return states, files_of(plog)
        finally:
            plog.close()


@pytest.mark.parametrize(
    ("seed", "key_space", "dedupe"),
    [
        (1, 30, 1 << 20),  # small key space: heavy compaction
        (2, 10**6, 1 << 20),  # large key space: almost everything survives
        (3, 400, 24 * 300),  # a map too small for one round: several rounds
        (4, 2000, 24 * 1000),
        (5, 5, 1 << 16),
    ],
)
def test_c_and_python_clean_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, key_space: int, dedupe: int
) -> None:
    c_states, c_files = run_scenario(tmp_path / "c", seed, key_space, dedupe, False, monkeypatch)
    py_states, py_files = run_scenario(tmp_path / "py", seed, key_space, dedupe, True, monkeypatch)
    assert len(c_states) >= 3
    assert any(s[1]["batches_rewritten"] for s in c_states)  # records were removed, batches rebuilt
    assert c_states == py_states
    assert c_files.keys() == py_files.keys()
    for name in c_files:
        assert c_files[name] == py_files[name], name
    if dedupe < 24 * 1000:
        assert max(sum(1 for s in c_states if s[0] == phase) for phase in range(3)) > 1  # several rounds


# ============================================================================================ the map


def test_md5_is_rfc_1321() -> None:
    from tidelog.storage import _cleanwalk

    rng = random.Random(9)
    for n in [*range(0, 140), 1000, 65536, 100_003]:
        data = rng.randbytes(n)
        assert _cleanwalk.md5(data) == hashlib.md5(data).digest()
    assert _cleanwalk.md5(b"abc").hex() == "900150983cd24fb0d6963f7d28e17f72"  # RFC 1321 A.5


def records_region(recs: list[tuple[bytes | None, bytes | None, int]]) -> tuple[bytes, int]:
    """The records bytes of ``(key, value, offset delta)`` triples, uncompressed."""
    batch = build_batch([(k, v, (), NOW, d) for k, v, d in recs])
    return batch[61:], len(recs)


@pytest.mark.parametrize("min_delta", [-(1 << 31), 0, 3, 7, 1 << 31])
def test_put_records_matches_put_many(min_delta: int) -> None:
    rng = random.Random(min_delta & 0xFFFF)
    recs = [(None if rng.random() < 0.1 else b"k%d" % rng.randrange(12), b"v", d) for d in range(10)]
    region, count = records_region(recs)
    base = 1000
    c_map, py_map = OffsetMap(24 * 16), OffsetMap(24 * 16)
    assert c_map.put_records(build_map.c_put_records, b"xx" + region + b"yy", 2, 2 + len(region), count, base,
                             min_delta)
    py_map.put_many([k for k, _, d in recs if k is not None and d >= min_delta],
                    [base + d for k, _, d in recs if k is not None and d >= min_delta])
    assert map_state(c_map) == map_state(py_map)


def test_put_records_overflow_keeps_the_keys_before() -> None:
    recs = [(b"k%d" % i, b"v", i) for i in range(10)]
    region, count = records_region(recs)
    c_map, py_map = OffsetMap(24 * 8, load_factor=0.75), OffsetMap(24 * 8, load_factor=0.75)
    with pytest.raises(OverflowError, match="offset map is full"):
        c_map.put_records(build_map.c_put_records, region, 0, len(region), count, 0, -1)
    with pytest.raises(OverflowError, match="offset map is full"):
        py_map.put_many([k for k, _, _ in recs], [d for _, _, d in recs])
    assert map_state(c_map) == map_state(py_map)
    assert c_map.size == 6


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_filter_batches_c_and_python(monkeypatch: pytest.MonkeyPatch, codec: int) -> None:
    """_Filter.apply on random batches (LogAppendTime, horizons past and future, producer batches, offset gaps,
    headers, timestamps far from the base) with the C filter and without: same bytes, counts, horizon, map."""
    from test_cleaner_filter import random_batch

    rng = random.Random(100 + codec)
    for _round in range(40):
        batches = []
        offset = rng.choice([0, 10**9])
        for _ in range(rng.randint(1, 8)):
            data = random_batch(rng, offset, codec)
            batches.append(data)
            offset = parse_header_tuple(data)[0] + parse_header_tuple(data)[6] + 1
        m = OffsetMap(24 * rng.choice([40, 200]))
        for data in batches:
            for r in decode_batch(data)[1]:
                if r.key is not None and rng.random() < 0.7 and not m.full:
                    m.put(r.key, r.offset)
        last_offsets = {7: offset - 1, 8: parse_header_tuple(batches[0])[0] + parse_header_tuple(batches[0])[6]}
        now = NOW + rng.choice([0, 2 * 10**6])
        outcomes = []
        m.lookups = m.probes = 0
        for pure in (False, True):
            with monkeypatch.context() as mp:
                if pure:
                    pure_python(mp)
                flt = _Filter(m, now, 1000, last_offsets)
                out = []
                for data in batches:
                    buf = b"pad" + data
                    res = flt.apply(buf, 3, parse_header_tuple(buf, 3))
                    out.append((None if res[0] is None else bytes(res[0]), type(res[0]), *res[1:]))
                outcomes.append((out, flt.min_horizon, map_state(m)))
                m.lookups = m.probes = 0
        assert outcomes[0] == outcomes[1]


# ============================================================================================ malformed records


uvarint = encode_unsigned  # the unsigned varint the cleaner writes (test data only)


def record(body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return encode_varint(n) + body


def body(key: bytes | None, value: bytes | None, delta: int = 0, ts: bytes = b"\x00") -> bytes:
    def field(b: bytes | None) -> bytes:
        return encode_varint(-1) if b is None else encode_varint(len(b)) + b

    return b"\x00" + ts + encode_varint(delta) + field(key) + field(value) + b"\x00"


def with_records(region: bytes, count: int, base_offset: int, last_delta: int) -> bytes:
    """A valid batch header (and CRC) around an arbitrary records region."""
    template = bytearray(build_batch([(b"k", b"v", (), NOW)], base_offset=base_offset, last_offset_delta=last_delta))
    header = template[:61]
    struct.pack_into(">i", header, 8, 49 + len(region))
    struct.pack_into(">i", header, 57, count)
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + region))
    return bytes(header) + region


GOOD = record(body(b"a", b"1"))
MALFORMED = {
    "truncated length varint": (GOOD + b"\x80", 2),
    "truncated timestamp": (GOOD + record(b"\x00\x80\x80\x80\x80\x80"), 2),
    "length past the end": (GOOD + record(body(b"b", b"2"), 40), 2),
    "length too small": (GOOD + record(b"\x00\x00\x00\x00\x00", 5), 2),
    "key past the record end": (GOOD + record(b"\x00\x00\x02" + encode_varint(30) + b"abc" + b"\x00\x00"), 2),
    "key to the record end": (GOOD + record(b"\x00\x00\x02" + encode_varint(3) + b"abc"), 2),
    "null key at the record end": (GOOD + record(b"\x00\x00\x02\x01\x00\x00")[:-2] + b"\x01", 2),
    "count too large": (GOOD + GOOD, 3),
    "count too small": (GOOD + GOOD + GOOD, 2),
    "trailing bytes": (GOOD + b"\x00\x00", 1),
    "overlong varint key length": (GOOD + record(b"\x00\x00\x02\xff\xff\xff\xff\xff\x01abc\x00\x00"), 2),
    "overlong timestamp": (GOOD + record(b"\x00" + b"\xff" * 10 + b"\x01\x02\x02" + b"ab\x02v\x00"), 2),
    "timestamp past the record end": (GOOD + record(b"\x00" + b"\xff" * 8, 9) + body(b"c", b"x"), 2),
    "offset delta overlong": (GOOD + record(b"\x00\x00" + b"\x81" * 5 + b"\x01\x02a\x02v\x00"), 2),
    "multi-byte value length": (GOOD + record(body(b"q", b"z" * 200)), 2),
    "huge timestamp": (GOOD + record(b"\x00" + encode_varlong(2**63 - 1) + b"\x02\x02q\x02v\x00"), 2),
}


def clean_outcome(tmp: Path, batch: bytes, monkeypatch: pytest.MonkeyPatch, pure: bool) -> object:
    with monkeypatch.context() as mp:
        if pure:
            pure_python(mp)
        plog = open_log(tmp, compact_config())
        try:
            plog.append_as_follower(build_batch([(b"a", b"0", (), NOW)], base_offset=0))
            plog.append_as_follower(batch)
            plog.append_as_follower(build_batch([(b"a", None, (), NOW)], base_offset=50))
            plog.roll(now_ms=NOW)
            plog.high_watermark = plog.log_end_offset
            c = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 16), lambda: {TP: plog})
            try:
                r = c.clean_filthiest(OffsetMap(1 << 16), NOW)
            except Exception as exc:  # the outcome compared
                return type(exc), str(exc)
            return result_state(r) if r else None, files_of(plog)
        finally:
            plog.close()


def filter_outcome(batch: bytes, offset_map: OffsetMap, monkeypatch: pytest.MonkeyPatch, pure: bool) -> object:
    with monkeypatch.context() as mp:
        if pure:
            pure_python(mp)
        flt = _Filter(offset_map, NOW, 1000, {})
        try:
            out = flt.apply(batch, 0, parse_header_tuple(batch, 0))
        except Exception as exc:
            return type(exc), str(exc)
        return bytes(out[0]) if out[0] is not None else None, out[1:], flt.min_horizon


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("codec", [0, 4])
def test_malformed_records_fail_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, codec: int
) -> None:
    region, count = MALFORMED[case]
    if codec:
        from tidelog.records.compression import compress

        batch = bytearray(with_records(compress(codec, region), count, 10, 3))
        batch[22] |= codec  # attributes low byte (offset 21..22)
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
        batch = bytes(batch)
    else:
        batch = with_records(region, count, 10, 3)
    c = clean_outcome(tmp_path / "c", batch, monkeypatch, False)
    py = clean_outcome(tmp_path / "py", batch, monkeypatch, True)
    assert c == py
    m = OffsetMap(1 << 12)
    m.put_many([b"a", b"q", b"c"], [11, 5, 100])
    before = map_state(m)
    c = filter_outcome(batch, m, monkeypatch, False)
    py = filter_outcome(batch, m, monkeypatch, True)
    assert c == py
    assert map_state(m)[:5] == before[:5]


def test_malformed_cases_do_fail() -> None:
    """The table above is mostly errors (a table of accepted batches would test nothing)."""
    failing = 0
    for region, count in MALFORMED.values():
        try:
            batch_filter._scan_records(region, 0, len(region), count)
        except Exception:
            failing += 1
    assert failing >= len(MALFORMED) - 3


def test_offsets_buffer_must_match() -> None:
    region, count = records_region([(b"a", b"b", 0)])
    with pytest.raises(ValueError, match="do not match"):
        build_map.c_put_records(bytearray(32), array("q", [-1]), 2, 1, 0, -1, region, 0, len(region), count, 0, 0)
