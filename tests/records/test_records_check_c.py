"""The C record walker (tidelog.records._recwalk) against the pure-Python one (batch._walk_records).

Both walk the records area of a batch; they must agree on every input: pass/fail, exception class and, since
both report positions relative to the records area, the exact message.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.records import CompressionType, RecordError, RecordSpec, build_batch, decompress
from tidelog.records.batch import RECORD_BATCH_OVERHEAD, _walk_records

recwalk = pytest.importorskip("tidelog.records._recwalk", reason="the optional C extension is not built")


def outcome(fn, *args) -> tuple[type | None, str]:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except RecordError as exc:
        return type(exc), str(exc)
    return None, ""


def assert_agree(area: bytes, count: int, consecutive: bool) -> tuple[type | None, str]:
    py = outcome(_walk_records, area, 0, len(area), count, consecutive)
    c = outcome(recwalk.check_records, area, count, consecutive)
    assert c == py, f"C {c} != Python {py} for count={count} consecutive={consecutive} area={area.hex()}"
    # the same walk over a window of a larger buffer (how check_record_structure calls it: no copy)
    padded = bytearray(b"\xa5" * 13 + area + b"\x80" * 7)
    assert outcome(recwalk.check_records, padded, count, consecutive, 13, 13 + len(area)) == py
    assert outcome(recwalk.check_records, memoryview(padded)[13 : 13 + len(area)], count, consecutive) == py
    return py


def records_area(batch: bytes | bytearray) -> bytes:
    codec = struct.unpack_from(">h", batch, 21)[0] & 7
    payload = bytes(batch[RECORD_BATCH_OVERHEAD:])
    return decompress(codec, payload, 1 << 24) if codec else payload


_values = st.none() | st.binary(max_size=80) | st.binary(min_size=60, max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=70)), max_size=3)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 6),
    data=st.data(),
    mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=0, max_size=4),
    count_delta=st.sampled_from([0, 0, 0, -1, 1, -7, 1000]),
    consecutive=st.booleans(),
    truncate=st.sampled_from([0, 0, 0, 1, 2, 5]),
)
def test_c_and_python_walkers_agree_on_mutated_records(n, data, mutations, count_delta, consecutive,
                                                       truncate) -> None:  # type: ignore[no-untyped-def]
    values = data.draw(st.lists(_values, min_size=n, max_size=n))
    hdrs = data.draw(_headers)
    deltas = data.draw(st.sampled_from(["index", "gaps", "big"]))
    recs = [
        RecordSpec(b"k%d" % i, v, hdrs, 10**12 if i % 2 else 0,
                   i if deltas == "index" else i * 3 if deltas == "gaps" else i * 70_000)
        for i, v in enumerate(values)
    ]
    area = bytearray(records_area(build_batch(recs, now_ms=0)))
    for where, byte in mutations:
        area[where % len(area)] = byte
    if truncate:
        del area[-truncate:]
    assert_agree(bytes(area), max(-1, n + count_delta), consecutive)


@settings(max_examples=1500, deadline=None)
@given(area=st.binary(max_size=64), count=st.integers(-2, 10), consecutive=st.booleans())
def test_c_and_python_walkers_agree_on_random_bytes(area: bytes, count: int, consecutive: bool) -> None:
    assert_agree(area, count, consecutive)


@settings(max_examples=300, deadline=None)
@given(
    body=st.lists(st.sampled_from([b"\x00", b"\x01", b"\x02", b"\x0c", b"\x7f", b"\x80", b"\xff", b"\xfe\x01",
                                   b"\x80\x80\x80\x80\x01", b"\xff\xff\xff\xff\x0f", b"\xff" * 10, b"\x80" * 9 + b"\x01"]),
                  max_size=14),
    count=st.integers(0, 3),
    consecutive=st.booleans(),
)
def test_c_and_python_walkers_agree_on_varint_edge_cases(body: list[bytes], count: int, consecutive: bool) -> None:
    """Multi-byte, over-long, 32-bit-overflowing varints and varlongs in every field position."""
    area = b"".join(body)
    assert_agree(area, count, consecutive)
    # the same fields inside a record whose length varint claims exactly the bytes that follow
    framed = bytes([min(len(area), 63) << 1]) + area[:63]
    assert_agree(framed, 1, consecutive)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_valid_batches_pass_both(codec: CompressionType) -> None:
    recs = [RecordSpec(b"k" * (i * 37), b"v" * (i * 101), [(f"h{i}", b"x" * i)] * (i % 3), None, None)
            for i in range(50)]
    area = records_area(build_batch(recs, compression=codec, now_ms=5))
    assert assert_agree(area, 50, True) == (None, "")


def test_bad_arguments_are_type_and_value_errors() -> None:
    with pytest.raises(TypeError):
        recwalk.check_records(b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        recwalk.check_records("not a buffer", 0, False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad range"):
        recwalk.check_records(b"abc", 0, False, 2, 5)
    with pytest.raises(ValueError, match="bad range"):
        recwalk.check_records(b"abc", 0, False, 2, 1)
    recwalk.check_records(b"abc", 0, False, 3)  # empty area, no records: fine
    recwalk.check_records(b"abc", 0, False, 1, 1)


def test_large_batches_release_the_gil() -> None:
    """A walk of a large records area lets other threads run (only observable as it not deadlocking and
    staying correct while another thread works; timing is not asserted)."""
    recs = [(b"key-%d" % i, b"v" * 100) for i in range(20_000)]
    batch = build_batch(recs, now_ms=0)
    assert len(batch) > recwalk.RELEASE_GIL_BYTES
    stop = threading.Event()
    ticks = [0]

    def spin() -> None:
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        for _ in range(20):
            recwalk.check_records(batch, len(recs), False, RECORD_BATCH_OVERHEAD)
        with pytest.raises(RecordError, match="remain after the last"):
            recwalk.check_records(batch, len(recs) - 1, False, RECORD_BATCH_OVERHEAD)
    finally:
        stop.set()
        t.join()


def test_bytearray_stays_exported_during_the_walk() -> None:
    """The buffer is held for the whole call: a bytearray being walked cannot be resized under it."""
    area = bytearray(records_area(build_batch([(b"k", b"v")] * 3, now_ms=0)))
    recwalk.check_records(area, 3, False)
    area.append(0)  # released afterwards
    with pytest.raises(RecordError):
        recwalk.check_records(area, 3, False)


@pytest.mark.parametrize("value,expect", [("1", "None"), ("yes", "None"), ("0", "builtin"), ("", "builtin")])
def test_env_var_forces_the_python_walker(value: str, expect: str) -> None:
    env = dict(os.environ, TIDELOG_PURE_PYTHON=value)
    out = subprocess.run(
        [sys.executable, "-c",
         "from tidelog.records import batch; w = batch._c_check_records; "
         "print('None' if w is None else type(w).__name__.split('_')[0])"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    assert out == expect
