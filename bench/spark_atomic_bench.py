"""Atomic micro-batches against per-task transactions (issue 29 item 2): the exactly-once ``tidelog`` sink in a
streaming query, ``atomicBatches=true`` (the driver ends every task's transaction) and ``false`` (each task commits
its own), side by side, interleaved, best of ``--repeat`` runs each.

One ``tidelog serve``, one local[N] SparkSession. The source topic (``--records`` x ``--value-size`` B over
``--partitions`` partitions) is read by a streaming query (``maxOffsetsPerTrigger`` = records / ``--batches``,
``availableNow``) writing to a new topic with ``exactlyOnce=true``. Per mode it reports:

* throughput (rows/s over the whole query) and its ratio atomic / per-task (the goal: ≥ 0.9);
* the end-to-end latency of a micro-batch: Spark's ``triggerExecution`` duration (planning, the tasks' writes, the
  driver's commit; p50 and max over the batches);
* the **LSO hold time**: how long read_committed readers of an output partition are held back by an open
  transaction. A thread polls ListOffsets (latest, both isolation levels) of every output partition every
  ``--poll-ms``; an interval during which LSO < high watermark is a hold; reported as mean and max hold and the
  share of the query's time some partition was held (resolution: the poll interval).

Usage::

    .venv/bin/python bench/spark_atomic_bench.py --records 400000 --batches 4 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_bench import produce, start_broker
from tidelog.protocol.api_keys import ApiKey
from tidelog.spark.fetcher import Connection


class LsoWatcher(threading.Thread):
    """Polls (high watermark, LSO) of ``topic``'s partitions; records the intervals with LSO < high watermark."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, poll_s: float) -> None:
        super().__init__(daemon=True)
        host, port = bootstrap.rsplit(":", 1)
        self.conn = Connection(host, int(port), 10.0)
        self.topic, self.partitions, self.poll_s = topic, partitions, poll_s
        self.stop_event = threading.Event()
        self.holds: list[float] = []
        self.any_held_s = 0.0
        self.t0 = self.t1 = 0.0

    def _latest(self, isolation: int) -> list[int]:
        body = {"replica_id": -1, "isolation_level": isolation, "topics": [{"name": self.topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1, "max_num_offsets": 1}
            for p in range(self.partitions)]}]}
        res = self.conn.request(ApiKey.LIST_OFFSETS, self.conn.version(ApiKey.LIST_OFFSETS, 7), body)
        out = [0] * self.partitions
        for p in res["topics"][0]["partitions"]:
            out[p["partition_index"]] = int(p["offset"])
        return out

    def run(self) -> None:
        since: list[float | None] = [None] * self.partitions
        self.t0 = last = time.monotonic()
        while not self.stop_event.is_set():
            hw, lso = self._latest(0), self._latest(1)
            now = time.monotonic()
            held = [lso[p] < hw[p] for p in range(self.partitions)]
            if any(held):
                self.any_held_s += now - last
            last = now
            for p in range(self.partitions):
                start = since[p]
                if held[p] and start is None:
                    since[p] = now
                elif not held[p] and start is not None:
                    self.holds.append(now - start)
                    since[p] = None
            time.sleep(self.poll_s)
        self.t1 = time.monotonic()
        self.conn.close()


def run_query(spark: Any, bootstrap: str, src: str, n: int, args: Any, atomic: bool, tag: str,
              root: Path) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    dst = f"bench-atomic-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(dst, args.partitions, 1)])[dst].result(30)
    watcher = LsoWatcher(bootstrap, dst, args.partitions, args.poll_ms / 1000.0)
    watcher.start()
    t0 = time.perf_counter()
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(max(1, n // args.batches)))
         .load().select("key", "value")
         .writeStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("exactlyOnce", "true").option("atomicBatches", str(atomic).lower())
         .option("kafka.transaction.timeout.ms", "600000")
         .option("checkpointLocation", str(root / f"ck-{tag}")).trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t0
    watcher.stop_event.set()
    watcher.join()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    lat = [p["durationMs"]["triggerExecution"] / 1000.0 for p in q.recentProgress if p["numInputRows"]]
    admin.delete_topics([dst])[dst].result(60)
    return {"dt": dt, "latency": lat, "holds": watcher.holds,
            "held_share": watcher.any_held_s / max(1e-9, watcher.t1 - watcher.t0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--poll-ms", type=float, default=5.0)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="tidelog-atomic-bench-"))
    proc, bootstrap = start_broker(root / "data")
    try:
        n = args.records
        produce(bootstrap, "src", n, args.value_size, args.partitions)
        from pyspark.sql import SparkSession

        from tidelog.spark import register

        spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("tidelog-atomic-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(args.cores))
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.streaming.pollingDelay", "10ms")
                 .config("spark.python.authenticate.socketTimeout", "300s")  # a loaded machine
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        best: dict[bool, dict[str, Any]] = {}
        for r in range(args.repeat):
            for atomic in ((True, False) if r % 2 == 0 else (False, True)):  # interleaved, alternating first
                res = run_query(spark, bootstrap, "src", n, args, atomic, f"{r}-{int(atomic)}", root)
                name = "atomic" if atomic else "per-task"
                print(f"run {r} {name}: {n / res['dt']:,.0f} rows/s ({res['dt']:.1f} s), batch p50 "
                      f"{statistics.median(res['latency']):.2f} s, LSO holds {len(res['holds'])}", flush=True)
                if atomic not in best or res["dt"] < best[atomic]["dt"]:
                    best[atomic] = res
        spark.stop()
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{n:,} records x {args.value_size} B, {args.partitions} partitions, {args.batches} micro-batches, "
          f"local[{args.cores}], best of {args.repeat}\n")
    print("| mode | rows/s | batch latency p50 / max (s) | LSO hold mean / max (s) | time some partition held |")
    print("|---|---:|---:|---:|---:|")
    for atomic in (False, True):
        res = best[atomic]
        holds = res["holds"] or [0.0]
        print(f"| {'atomic' if atomic else 'per-task'} | {n / res['dt']:,.0f} | "
              f"{statistics.median(res['latency']):.2f} / {max(res['latency']):.2f} | "
              f"{statistics.mean(holds):.3f} / {max(holds):.3f} | {100 * res['held_share']:.0f} % |")
    ratio = best[False]["dt"] / best[True]["dt"]
    print(f"\natomic / per-task throughput: {ratio:.2f}x (goal ≥ 0.9x)")


if __name__ == "__main__":
    main()
