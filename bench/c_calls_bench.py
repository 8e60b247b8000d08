"""CPU time of the C calls on the append path, without the kernel's side: for A/B of changes to the C extensions'
code or layout (issue 26 item 4 split them into several files per extension; storage_bench's append rows include
the page-cache writes, whose CPU time varies by 10 % and more on a loaded machine, which hides the C's share).

Per batch shape (uncompressed v2 batches of 100 B or 1 KiB records): ``_segment.write_stamped(fd, batch, 0, 0, 2)``
to ``/dev/null`` (the leader fast path's write: one writev, then the CRC-32C and the record walk through
``_recwalk``'s capsule), ``_recwalk.crc32c`` and ``_recwalk.check_records`` (the produce-time walk). Microseconds
of process CPU time per call, best of ``--rounds``.

    .venv/bin/python bench/c_calls_bench.py
    .venv/bin/python bench/c_calls_bench.py --tidelog-rev e9c0c18      # e9c0c18 vs HEAD, side by side
    .venv/bin/python bench/c_calls_bench.py --tidelog-rev HEAD,e9c0c18  # the other order
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from functools import partial

from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import emit, parse_revs, print_side_by_side, run_in_each

SHAPES = ((1 << 20, 1024), (1 << 20, 100), (16 << 10, 100))


def _batch(total: int, record: int) -> bytes:
    from tidelog.records import build_batch

    rng = random.Random(total + record)
    n = max(1, total // (record + 20))
    return bytes(build_batch([(b"key-%06d" % i, rng.randbytes(record)) for i in range(n)],
                             now_ms=1_700_000_000_000))


def _best_us(fn: Callable[[], object], reps: int, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time_ns()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time_ns() - t) / reps / 1000)
    return best


def measure(rounds: int) -> dict[str, float]:
    from tidelog.records import _recwalk
    from tidelog.storage import _segment

    figures: dict[str, float] = {}
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        for total, record in SHAPES:
            b = _batch(total, record)
            count = int.from_bytes(b[57:61], "big")
            reps = max(20, (32 << 20) // len(b))
            shape = f"{len(b) >> 10} KiB, {record} B records"
            figures[f"write_stamped + check 2, {shape} (us)"] = _best_us(
                partial(_segment.write_stamped, fd, b, 0, 0, 2), reps, rounds)
            figures[f"crc32c, {shape} (us)"] = _best_us(partial(_recwalk.crc32c, b), reps, rounds)
            figures[f"check_records, {shape} (us)"] = _best_us(
                partial(_recwalk.check_records, b, count, False, 61, len(b)), reps, rounds)
    finally:
        os.close(fd)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds per call (best of)")
    add_rev_argument(ap, what="Each runs this script in a child interpreter; the figures are printed side by side")
    args = ap.parse_args()
    if args.tidelog_rev:
        results = run_in_each(__file__, sys.argv[1:], parse_revs(args.tidelog_rev))
        names = {k for _, figs in results for k in (figs or {})}
        print_side_by_side("C calls of the append path, us per call (after/before > 1: the last is faster)",
                           results, dict.fromkeys(names, False))
        return 0 if all(figs for _, figs in results) else 1
    figures = measure(args.rounds)
    for name, us in figures.items():
        print(f"{name:55s} {us:9.2f}")
    emit(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
