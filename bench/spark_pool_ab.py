"""The raw read of a packed pushed task outside Spark, with and without the per-task connection pool (issue 29).

Reads the last 1 % of the topic ``bench`` (4 partitions of 2.5 M records, as ``bench/spark_bench.py --pushdown
--records 10000000 --workdir DIR`` leaves it in ``DIR/data``) the way one packed task does: 4 ranges of 25,000
records one after the other; 12 interleaved rounds, best and median of each. Usage::

    .venv/bin/python bench/spark_pool_ab.py DIR/data
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import spark_bench as sb
from tidelog.spark.fetcher import ConnectionPool, read_range_raw

RANGES = [(p, 2_475_000, 2_500_000) for p in range(4)]


def run(client: dict[str, str], pooled: bool) -> float:
    pool = ConnectionPool() if pooled else None
    t0 = time.perf_counter()
    rows = 0
    try:
        for p, s, e in RANGES:
            for b in read_range_raw(client, "bench", p, s, e, fail_on_data_loss=True, poll_timeout_ms=30_000,
                                    pool=pool):
                rows += b.num_rows
    finally:
        if pool is not None:
            pool.close()
    assert rows == sum(e - s for _, s, e in RANGES), rows
    return time.perf_counter() - t0


def main() -> None:
    proc, bs = sb.start_broker(Path(sys.argv[1]))
    try:
        client = {"bootstrap.servers": bs}
        res: dict[bool, list[float]] = {False: [], True: []}
        for i in range(12):
            for pooled in ((False, True) if i % 2 else (True, False)):
                res[pooled].append(run(client, pooled))
        for k in (False, True):
            xs = sorted(res[k])
            print(f"| {'one pool per task' if k else 'a connection per range (before)'} | {xs[0] * 1000:.1f} | "
                  f"{xs[len(xs) // 2] * 1000:.1f} |")
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
