"""The columnar decoder (``tidelog.client.columnar``): the C and Python builders give the rows
``parse_records`` gives, in Arrow layout, and reject exactly what it rejects."""

from __future__ import annotations

import random
import struct
from typing import Any

import pyarrow as pa
import pytest

from tidelog.client.columnar import CColumnBuilder, PyColumnBuilder
from tidelog.records.batch import RecordSpec, build_batch, parse_records
from tidelog.records.errors import RecordError
from tidelog.records.header import RECORD_BATCH_OVERHEAD

BUILDERS = [PyColumnBuilder] + ([CColumnBuilder] if CColumnBuilder is not None else [])


def _rows(cols: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    n, offs, stamps, types, kv, kn, ko, kd, vv, vn, vo, vd = cols

    def binary(valid: Any, nulls: int, o: bytes, d: bytes) -> list[Any]:
        buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(o), pa.py_buffer(d)]
        arr = pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)
        arr.validate(full=True)
        return arr.to_pylist()

    keys = binary(kv, kn, ko, kd)
    values = binary(vv, vn, vo, vd)
    o = struct.unpack(f"<{n}q", offs)
    t = struct.unpack(f"<{n}q", stamps)
    ty = struct.unpack(f"<{n}i", types)
    return list(zip(o, t, ty, keys, values, strict=True))


def _random_batch(rng: random.Random, base: int) -> tuple[bytes, list[RecordSpec]]:
    recs = []
    for i in range(rng.randint(1, 40)):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 1, 5, 200]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 3, 100, 300]))
        headers = [("h", b"v"), ("n", None)] if rng.random() < 0.3 else []
        recs.append(RecordSpec(key, value, headers, 1_700_000_000_000 + rng.randint(-5000, 5000), i))
    return build_batch(recs, base_offset=base), recs


def _expected(data: bytes, count: int, base: int, base_ts: int, lat: int | None, ts_type: int, filt: Any) -> list:
    recs = parse_records(data, count, base, base_ts, lat)
    if filt is not None:
        lo, hi, s, e = filt
        recs = [r for r in recs if lo <= r.offset < hi and (s is None or r.timestamp >= s)
                and (e is None or r.timestamp < e)]
    return [(r.offset, r.timestamp * 1000, ts_type, r.key, r.value) for r in recs]


@pytest.mark.parametrize("builder_cls", BUILDERS)
def test_same_rows_as_parse_records_across_batches(builder_cls: Any) -> None:
    rng = random.Random(7)
    b = builder_cls()
    want: list[tuple[Any, ...]] = []
    base = 0
    for j in range(30):
        batch, recs = _random_batch(rng, base)
        data = memoryview(batch)[RECORD_BATCH_OVERHEAD:]
        (base_ts,) = struct.unpack_from(">q", batch, 27)
        lat = 1_700_000_123_000 if j % 5 == 0 else None
        ts_type = 1 if lat is not None else 0
        filt = (base + 3, base + 20, None, None) if j % 3 == 0 else None
        if j % 7 == 0:
            filt = (0, 2**63 - 1, 1_700_000_000_000 - 1000, 1_700_000_000_000 + 2000)
        args = (filt is not None, *(filt or (0, 0, None, None)))
        added = b.add(data, len(recs), base, base_ts, lat, ts_type, *args)
        exp = _expected(bytes(data), len(recs), base, base_ts, lat, ts_type, filt)
        assert added == len(exp)
        want.extend(exp)
        assert b.rows == len(want)
        base += len(recs)
    cols = b.finish()
    assert _rows(cols) == want
    assert b.rows == 0
    assert b.finish()[0] == 0


@pytest.mark.parametrize("builder_cls", BUILDERS)
def test_malformed_records_add_nothing(builder_cls: Any) -> None:
    rng = random.Random(11)
    b = builder_cls()
    good, recs = _random_batch(rng, 0)
    assert b.add(memoryview(good)[RECORD_BATCH_OVERHEAD:], len(recs), 0, 0, None, 0, False, 0, 0, None, None) > 0
    before = _rows(b.finish())
    b.add(memoryview(good)[RECORD_BATCH_OVERHEAD:], len(recs), 0, 0, None, 0, False, 0, 0, None, None)
    rejected = 0
    for trial in range(400):
        data = bytearray(good[RECORD_BATCH_OVERHEAD:])
        count = len(recs)
        kind = trial % 4
        if kind == 0:
            data = data[: rng.randrange(len(data))]
        elif kind == 1:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 2:
            count += rng.choice([-1, 1, 5])
        else:
            data += bytes([rng.randrange(256)])
        try:
            exp = _expected(bytes(data), count, 0, 0, None, 0, None)
        except RecordError:
            exp = None
        except (OverflowError, ValueError):
            continue
        n0 = b.rows
        added = b.add(bytes(data), count, 0, 0, None, 0, False, 0, 0, None, None)
        if exp is None:
            rejected += 1
            assert added == -1, trial
            assert b.rows == n0
        else:
            assert added == len(exp), trial
    assert rejected > 100
    # what was accepted before the rejections is intact
    rows = _rows(b.finish())
    assert rows[: len(before)] == before


def test_c_and_python_builders_give_identical_buffers() -> None:
    if CColumnBuilder is None:
        pytest.skip("C extension not built")
    rng = random.Random(3)
    c, p = CColumnBuilder(), PyColumnBuilder()
    base = 0
    for _ in range(20):
        batch, recs = _random_batch(rng, base)
        data = batch[RECORD_BATCH_OVERHEAD:]
        for b in (c, p):
            b.add(data, len(recs), base, 1_700_000_000_000, None, 0, False, 0, 0, None, None)
        base += len(recs)
    assert c.nbytes == p.nbytes
    co, po = c.finish(), p.finish()
    assert co[:6] == po[:6] and co[6:8] == po[6:8] and co[9:] == po[9:]
    # validity bitmaps: equal on the bits of the rows
    n = co[0]
    for i in (4, 8):
        if co[i] is None or po[i] is None:
            assert co[i] is po[i] is None
        else:
            assert all(((co[i][j >> 3] >> (j & 7)) & 1) == ((po[i][j >> 3] >> (j & 7)) & 1) for j in range(n))


@pytest.mark.parametrize("builder_cls", BUILDERS)
def test_many_finishes_of_growing_and_shrinking_size(builder_cls: Any) -> None:
    """The C builder hands its column buffers over at ``finish()`` (no copy) and sizes the next ones from the last
    (issue 29): rows after many finishes of very different sizes, and buffers that are not shared between them."""
    rng = random.Random(17)
    b = builder_cls()
    base = 0
    kept: list[tuple[tuple[Any, ...], list[tuple[Any, ...]]]] = []
    for size in (1, 40, 3, 200, 0, 1, 120, 2, 2, 60):
        want: list[tuple[Any, ...]] = []
        for _ in range(size):
            batch, recs = _random_batch(rng, base)
            data = bytes(memoryview(batch)[RECORD_BATCH_OVERHEAD:])
            (base_ts,) = struct.unpack_from(">q", batch, 27)
            assert b.add(data, len(recs), base, base_ts, None, 0, False, 0, 0, None, None) == len(recs)
            want.extend(_expected(data, len(recs), base, base_ts, None, 0, None))
            base += len(recs)
        cols = b.finish()
        assert all(isinstance(x, bytes) for i, x in enumerate(cols) if i not in (0, 4, 5, 8, 9)), cols
        assert _rows(cols) == want
        kept.append((cols, want))
    # every batch handed over earlier still holds its own rows (no buffer was reused under it)
    for cols, want in kept:
        assert _rows(cols) == want
