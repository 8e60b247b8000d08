"""Cost of the produce-time record check (``check_record_structure``) at two depths, per batch.

* **lengths**: walk the record length varints only; the lengths must tile the records area and their number
  must be recordsCount. Cheapest, but a record whose key/value/header lengths lie inside it still passes.
* **fields** (what ``check_record_structure`` does): additionally walk each record's fields and check every
  length stays inside the record and the fields fill it exactly, so a batch that passes always decodes.
* ``decode_records`` (builds Record objects) for reference, and the CRC-32C of the same bytes.

The **fields** walk is timed twice: ``fields py`` is the pure-Python walker (``TIDELOG_PURE_PYTHON=1``),
``fields C`` the optional C extension ``tidelog.records._recwalk`` (``-`` when it is not built).

Usage: ``.venv/bin/python bench/record_check_bench.py``. Prints microseconds per batch (best of N).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from tidelog.records import CompressionType, build_batch, check_record_structure, decode_records
from tidelog.records import batch as batch_module
from tidelog.records.batch import MIN_RECORD_SIZE
from tidelog.records.crc import crc32c
from tidelog.records.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.header import RECORD_BATCH_OVERHEAD, validate_batch_tuple
from tidelog.records.varint import decode_varint


def lengths_only(data: bytes, pos: int, n: int, count: int) -> None:
    """The shallower depth, kept here for the comparison only."""
    if count * MIN_RECORD_SIZE > n - pos:
        raise InvalidRecordError("count too large for the records area")
    try:
        for _ in range(count):
            length, pos = decode_varint(data, pos)  # through the varint module (the walks inline 1-2 byte ones)
            if length < MIN_RECORD_SIZE - 1:
                raise CorruptRecordError("record too short")
            pos += length
            if pos > n:
                raise CorruptRecordError("record runs past the batch")
    except IndexError:
        raise CorruptRecordError("truncated") from None
    if pos != n:
        raise InvalidRecordError("bytes after the last record")


def batch(total: int, record: int, codec: int = 0) -> bytes:
    rng = random.Random(total + record)
    n = max(1, total // (record + 20))
    return build_batch([(b"key-%06d" % i, rng.randbytes(record)) for i in range(n)], compression=codec,
                       now_ms=1_700_000_000_000)


def best_us(fn: Callable[[], object], budget_s: float = 1.0) -> float:
    fn()
    reps = 1
    while True:
        t0 = time.process_time()
        for _ in range(reps):
            fn()
        dt = time.process_time() - t0
        if dt > 0.02:
            break
        reps *= 2
    best = dt / reps
    end = time.process_time() + budget_s
    while time.process_time() < end:
        t0 = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - t0) / reps)
    return best * 1e6


def main() -> None:
    cases = [
        ("16 KiB, 100 B records", batch(16 * 1024, 100)),
        ("16 KiB, 1 KiB records", batch(16 * 1024, 1024)),
        ("1 MiB, 100 B records", batch(1 << 20, 100)),
        ("1 MiB, 1 KiB records", batch(1 << 20, 1024)),
        ("16 KiB, 100 B records, zstd", batch(16 * 1024, 100, CompressionType.ZSTD)),
        ("16 KiB, 100 B records, lz4", batch(16 * 1024, 100, CompressionType.LZ4)),
    ]
    print(f"{'batch':32} {'records':>7} {'crc32c':>9} {'lengths':>9} {'fields py':>10} {'fields C':>9} "
          f"{'py/C':>6} {'decode':>10}  (us/batch)")
    for label, b in cases:
        measure(label, b)


def measure(label: str, b: bytes) -> None:
    h = validate_batch_tuple(b)
    count = h[12]
    view = memoryview(b)  # the broker hands the log a memoryview into the request frame
    crc = best_us(lambda: crc32c(view[21:]))
    c_walk = batch_module._load_c_walker()
    batch_module._c_check_records = None
    fields_py = best_us(lambda: check_record_structure(view, 0, h))
    batch_module._c_check_records = c_walk
    fields_c = best_us(lambda: check_record_structure(view, 0, h)) if c_walk is not None else float("nan")
    if h[5] & 7:
        lengths = float("nan")
    else:
        n = len(b) - RECORD_BATCH_OVERHEAD
        lengths = best_us(lambda: lengths_only(bytes(view[RECORD_BATCH_OVERHEAD:]), 0, n, count))
    dec = best_us(lambda: decode_records(b, verify_crc=False))
    print(f"{label:32} {count:7d} {crc:9.1f} {lengths:9.1f} {fields_py:10.1f} {fields_c:9.1f} "
          f"{fields_py / fields_c:5.0f}x {dec:10.1f}")

if __name__ == "__main__":
    main()
