"""The sink's encoder (``tidelog.client.columnar``: murmur2, assign_partitions, RecordAccumulator): the C and
Python versions agree byte for byte, the records decode back to the input, and murmur2 equals an independent
implementation (kafka-python's)."""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest

from tidelog.client.columnar import (
    RECORD_BATCH_HEADER_SIZE,
    CRecordAccumulator,
    PyRecordAccumulator,
    c_assign_partitions,
    c_murmur2,
    py_assign_partitions,
    py_murmur2,
)
from tidelog.records.batch import parse_records

pa = pytest.importorskip("pyarrow")

needs_c = pytest.mark.skipif(CRecordAccumulator is None, reason="the C extension is not built")


def _col(values: list[bytes | None], slice_from: int = 0) -> tuple[Any, Any, Any, int]:
    """An Arrow binary column as the encoder takes it; ``slice_from`` > 0 makes a sliced array (offset != 0)."""
    arr = pa.array([b"pad"] * slice_from + values, pa.binary()).slice(slice_from)
    validity, offsets, data = arr.buffers()
    return (validity if arr.null_count else None, offsets, data if data is not None else b"", arr.offset)


def _random_bytes(rng: random.Random, null_rate: float = 0.2, big: bool = False) -> bytes | None:
    if rng.random() < null_rate:
        return None
    n = rng.choice([0, 1, 3, 4, 5, 63, 64, 200] + ([70_000] if big else []))
    return rng.randbytes(n)


def test_murmur2_equals_kafka_python() -> None:
    try:
        from kafka.partitioner.default import murmur2 as reference
    except ImportError:
        from kafka.partitioner import murmur2 as reference  # type: ignore[no-redef]
    rng = random.Random(1)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"k1", b"hello world"] + [rng.randbytes(rng.randrange(64))
                                                                           for _ in range(300)]
    for k in keys:
        want = reference(k) & 0xFFFFFFFF
        assert py_murmur2(k) & 0xFFFFFFFF == want, k
        if c_murmur2 is not None:
            assert c_murmur2(k) == py_murmur2(k), k


@needs_c
@pytest.mark.parametrize("seed", range(5))
def test_assign_partitions_c_equals_python(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(1, 300)
    keys = [_random_bytes(rng) for _ in range(n)]
    key = _col(keys, slice_from=rng.randrange(3))
    counts = array("i", [rng.randrange(1, 9) for _ in range(3)])
    topics = array("i", [rng.randrange(3) for _ in range(n)])
    sticky = array("i", [rng.randrange(c) for c in counts])
    base = array("i", [0, counts[0], counts[0] + counts[1]])
    parts = [rng.randrange(counts[topics[i]]) if rng.random() < 0.5 else None for i in range(n)]
    parr = pa.array(parts, pa.int32())
    pbufs = parr.buffers()
    explicit = (pbufs[0] if parr.null_count else None, pbufs[1], parr.offset)
    for args in [(n, key, counts, topics, explicit, sticky, base), (n, key, counts[:1], None, None, sticky, base),
                 (n, None, counts, topics, explicit, sticky, base)]:
        c_slots, c_bad = c_assign_partitions(*args)
        p_slots, p_bad = py_assign_partitions(*args)
        assert (c_slots, c_bad) == (p_slots, p_bad)
        assert c_bad == -1
    # the rule itself, row by row
    slots = array("i")
    slots.frombytes(c_assign_partitions(n, key, counts, topics, explicit, sticky, base)[0])
    for i in range(n):
        t = topics[i]
        if parts[i] is not None:
            p = parts[i]
        elif keys[i] is not None:
            p = (py_murmur2(keys[i]) & 0x7FFFFFFF) % counts[t]
        else:
            p = sticky[t]
        assert slots[i] == base[t] + p


@needs_c
def test_assign_partitions_reports_the_first_bad_explicit_partition() -> None:
    parr = pa.array([0, 1, 5, -1], pa.int32())
    explicit = (None, parr.buffers()[1], 0)
    args = (4, None, array("i", [2]), None, explicit, array("i", [0]), array("i", [0]))
    assert c_assign_partitions(*args)[1] == 2
    assert py_assign_partitions(*args)[1] == 2


def _rows(batches: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
    out: dict[int, list[tuple[Any, ...]]] = {}
    for slot, buf, count, base_ts, max_ts in batches:
        recs = parse_records(bytes(buf[RECORD_BATCH_HEADER_SIZE:]), count, 0, base_ts, None)
        assert [r.offset for r in recs] == list(range(count))
        assert max(r.timestamp for r in recs) == max_ts
        out.setdefault(slot, []).extend(
            (r.key, r.value, [(k.encode("utf-8", "surrogateescape"), v) for k, v in r.headers], r.timestamp)
            for r in recs)
    return out


@needs_c
@pytest.mark.parametrize("seed", range(6))
def test_accumulator_c_equals_python_and_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    limit = rng.choice([50, 1000, 100_000])
    c_acc, p_acc = CRecordAccumulator(limit), PyRecordAccumulator(limit)
    c_out: list[Any] = []
    p_out: list[Any] = []
    expected: dict[int, list[tuple[Any, ...]]] = {}
    now = 1_700_000_000_000
    for _ in range(4):
        n = rng.randrange(0, 200)
        keys = [_random_bytes(rng) for _ in range(n)]
        values = [_random_bytes(rng, 0.1, big=seed == 0) for _ in range(n)]
        hdrs = [None if rng.random() < 0.3 else [(rng.choice(["a", "bé", ""]).encode(), _random_bytes(rng))
                                                 for _ in range(rng.randrange(3))] for _ in range(n)]
        lst = pa.array([None if h is None else [{"key": k.decode(), "value": v} for k, v in h] for h in hdrs],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
        hk, hv = lst.values.flatten()
        lv, lo = lst.buffers()[:2]
        headers = (lv if lst.null_count else None, lo, lst.offset, _col(hk.to_pylist()),
                   _col(hv.to_pylist()))
        slots = array("i", [rng.randrange(5) for _ in range(n)])
        off = rng.randrange(3)
        args = (n, slots, _col(keys, off), _col(values), headers, now)
        c_out += c_acc.add(*args)
        p_out += p_acc.add(*args)
        assert c_acc.pending == p_acc.pending
        for i in range(n):
            expected.setdefault(slots[i], []).append((keys[i], values[i], hdrs[i] or [], now))
        now += rng.randrange(0, 5)
    c_out += c_acc.finish()
    p_out += p_acc.finish()
    assert c_acc.pending == 0
    assert sorted((s, bytes(b), c, t, m) for s, b, c, t, m in c_out) == \
        sorted((s, bytes(b), c, t, m) for s, b, c, t, m in p_out)
    got = _rows(sorted(c_out, key=lambda x: x[0]))
    # batches of a slot come out in order (sealing keeps the order): concatenated, they are the slot's rows
    assert got == expected
    for _, buf, count, _, _ in c_out:
        assert count == 1 or len(buf) - RECORD_BATCH_HEADER_SIZE <= limit


def test_accumulator_refuses_bad_input() -> None:
    for cls in [PyRecordAccumulator] + ([CRecordAccumulator] if CRecordAccumulator is not None else []):
        acc = cls(1000)
        with pytest.raises(ValueError):
            acc.add(1, array("i", [-1]), None, _col([b"x"]), None, 0)
        with pytest.raises(ValueError):
            cls(0)
    if CRecordAccumulator is not None:
        bad = (None, array("i", [0, 10]).tobytes(), b"abc", 0)  # offset past the data
        with pytest.raises(ValueError):
            CRecordAccumulator(1000).add(1, array("i", [0]), None, bad, None, 0)
        with pytest.raises(ValueError):  # offsets buffer too short for the rows
            CRecordAccumulator(1000).add(3, array("i", [0, 0, 0]), None, _col([b"x"]), None, 0)
