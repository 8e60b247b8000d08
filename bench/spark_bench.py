"""Spark read/write throughput: ``tidelog`` (from a running broker), ``tidelog-log`` (from its data directory),
Spark's JSON-lines and Parquet readers on the same records, and the ``tidelog`` sink.

One SparkSession (local[N]), one ``tidelog serve`` on 127.0.0.1. Every read is forced with the ``noop`` sink
(all columns materialised, nothing written). Usage::

    .venv/bin/python bench/spark_bench.py --records 10000000 --value-size 100

Prints a Markdown table. The read rows are repeated (``--repeat`` rounds, each running every row once in an order
rotated by one per round) and the best of each is reported, with its ratio to Spark's Parquet reader. The isolation rows read a topic written in transactions (``--txn-size`` records each,
every ``--abort-every``-th aborted) with ``read_uncommitted`` and ``read_committed`` side by side. The producer line is confluent-kafka producing the same records straight to the
broker (the reference for the sink).

``--sink`` runs only the sink comparison (issue 15) and the source rows it is measured against, side by side:
the source (raw fetch) on the plain topic and on the transactional topic at both isolation levels, then the sink
(Parquet → broker) at-least-once with ``produceClient=librdkafka`` (the old path) and ``raw`` (the new one), and
exactly-once with both. Every row also reports the CPU seconds of this process tree (driver, Spark's JVM and
its Python workers, the broker): on a machine shared with other work, rows per CPU second is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
           "--data-dir", str(data_dir), "--log-level", "INFO",
           "--override", "tidelog.metrics.listener=127.0.0.1:0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _STARTED.search(line)
        if m:
            # keep draining the log so the broker never blocks on a full pipe
            import threading

            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            return proc, f"127.0.0.1:{m.group(1)}"
    raise RuntimeError("tidelog serve did not start")


def produce(bootstrap: str, topic: str, n: int, value_size: int, partitions: int,
            first_timestamp: int | None = None) -> float:
    """``n`` records round-robin over ``partitions``; with ``first_timestamp``, record i has CreateTime
    ``first_timestamp + i`` ms (else the producer's clock)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # records stamped in the past (first_timestamp) would be deleted by time retention (7 days) while the bench runs
    config = {"retention.ms": "-1"} if first_timestamp is not None else {}
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
    pad = "x" * value_size
    t0 = time.perf_counter()
    for i in range(n):
        v = f"{i:012d}{pad}"[:value_size]
        while True:
            try:
                if first_timestamp is None:
                    p.produce(topic, value=v, key=f"k{i % 1000}", partition=i % partitions)
                else:
                    p.produce(topic, value=v, key=f"k{i % 1000}", partition=i % partitions,
                              timestamp=first_timestamp + i)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(300) == 0
    return time.perf_counter() - t0


def produce_transactional(bootstrap: str, topic: str, n: int, value_size: int, partitions: int,
                          per_txn: int, abort_every: int) -> int:
    """``n`` records in transactions of ``per_txn`` records; every ``abort_every``-th transaction is aborted (0:
    none). Returns the number of committed records."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "transactional.id": f"{topic}-bench"})
    p.init_transactions(60)
    pad = "x" * value_size
    committed = 0
    for t, first in enumerate(range(0, n, per_txn)):
        p.begin_transaction()
        last = min(n, first + per_txn)
        for i in range(first, last):
            v = f"{i:012d}{pad}"[:value_size]
            while True:
                try:
                    p.produce(topic, value=v, key=f"k{i % 1000}", partition=i % partitions)
                    break
                except BufferError:
                    p.poll(0.01)
        if abort_every and t % abort_every == abort_every - 1:
            assert p.flush(120) == 0  # abort_transaction purges what is not sent yet: write all, then abort
            p.abort_transaction(120)
        else:
            p.commit_transaction(120)
            committed += last - first
    return committed


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system CPU seconds of process ``root`` (default: this one) and all its descendants, including
    children already reaped (their times are in their parents' cutime/cstime)."""
    root = os.getpid() if root is None else root
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid ... utime(14) stime(15) cutime(16) cstime(17), 1-based from pid
        stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


BROKER_PID: list[int] = []
"""The broker's pid (set by main), for the broker's share of the CPU seconds."""
BROKER_CPU: dict[str, float] = {}


def _cpu_pair() -> tuple[float, float]:
    return tree_cpu_seconds(), (tree_cpu_seconds(BROKER_PID[0]) if BROKER_PID else 0.0)


def timed(label: str, df: Any, n: int, results: list[tuple[str, int, float]],
          cpu: dict[str, float] | None = None) -> None:
    c0, b0 = _cpu_pair()
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    dt = time.perf_counter() - t0
    results.append((label, n, dt))
    if cpu is not None:
        c1, b1 = _cpu_pair()
        cpu[label] = c1 - c0
        BROKER_CPU[label] = b1 - b0
    print(f"{label}: {n / dt:,.0f} rows/s ({dt:.1f}s)", flush=True)


def sink_rows(spark: Any, bootstrap: str, parquet: str, n: int, partitions: int,
              results: list[tuple[str, int, float]], cpu: dict[str, float], repeat: int) -> None:
    """The sink, Parquet → broker, four ways (best of ``repeat`` each, in rotating order)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    cases = [
        ("tidelog sink, at-least-once, produceClient=librdkafka (old)", {"produceClient": "librdkafka"}),
        ("tidelog sink, at-least-once, produceClient=raw (new)", {"produceClient": "raw"}),
        ("tidelog sink, exactly-once, produceClient=raw", {"produceClient": "raw", "exactlyOnce": "true"}),
        ("tidelog sink, exactly-once, produceClient=librdkafka", {"produceClient": "librdkafka",
                                                                  "exactlyOnce": "true"}),
    ]
    for _, opts in cases:
        if "exactlyOnce" in opts:
            # one transaction spans one task's write: on a loaded machine the librdkafka path's tasks can take
            # longer than librdkafka's default 60 s (the coordinator would abort them); 10 min, below the
            # broker's transaction.max.timeout.ms (15 min)
            opts["kafka.transaction.timeout.ms"] = "600000"
    best: dict[str, tuple[float, float, float]] = {}
    for r in range(repeat):
        for i in range(len(cases)):
            label, opts = cases[(i + r) % len(cases)]
            topic = f"bench-sink-{r}-{i}"
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
            c0, b0 = _cpu_pair()
            t0 = time.perf_counter()
            try:
                (spark.read.parquet(parquet).select("key", "value").write.mode("append").format("tidelog")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).options(**opts).save())
            except Exception as exc:  # report the other rows all the same
                print(f"{label}: FAILED ({str(exc).strip().splitlines()[-1][:300]})", flush=True)
                continue
            dt = time.perf_counter() - t0
            c1, b1 = _cpu_pair()
            dc, db = c1 - c0, b1 - b0
            print(f"{label}: {n / dt:,.0f} rows/s ({dt:.1f}s, {dc:.1f} CPU s of which the broker {db:.1f})",
                  flush=True)
            if label not in best or dt < best[label][0]:
                best[label] = (dt, dc, db)
            admin.delete_topics([topic])[topic].result(60)  # keep the disk use bounded
    for label, _ in cases:
        if label in best:
            dt, dc, db = best[label]
            results.append((label, n, dt))
            cpu[label] = dc
            BROKER_CPU[label] = db


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--txn-records", type=int, default=None,
                    help="records of the transactional topic of the isolation rows (default: --records)")
    ap.add_argument("--txn-size", type=int, default=100_000, help="records per transaction")
    ap.add_argument("--abort-every", type=int, default=10, help="abort every n-th transaction (0: none)")
    ap.add_argument("--sink", action="store_true", help="only the sink comparison and its source rows (issue 15)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of the read rows, the sink rows (--sink) and the pushdown rows (--pushdown): each "
                         "round runs every row once, in an order rotated by one per round; the best is reported")
    ap.add_argument("--pushdown", action="store_true",
                    help="only the filter pushdown comparison (issue 29): the last 1 %% of the topic by timestamp")
    ap.add_argument("--pushdown-trace", action="store_true", help="--pushdown: also where a pushed query's time goes")
    ap.add_argument("--reads-only", action="store_true",
                    help="only the interleaved read rows (raw fetch, tidelog-log, Parquet and the floor rows): no "
                         "librdkafka, JSON lines, transactional or sink rows")
    ap.add_argument("--no-floor", action="store_true",
                    help="without the floor rows (PySpark's Python data source path on in-memory Arrow batches)")
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = Path(args.workdir or tempfile.mkdtemp(prefix="tidelog-spark-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    data_dir = root / "data"
    proc, bootstrap = start_broker(data_dir)
    BROKER_PID.append(proc.pid)
    BOOTSTRAP.append(bootstrap)
    results: list[tuple[str, int, float]] = []
    cpu: dict[str, float] = {}
    try:
        n = args.records
        if args.pushdown:
            pushdown_rows(bootstrap, data_dir, n, args)
            return
        dt = produce(bootstrap, "bench", n, args.value_size, args.partitions)
        results.append(("confluent-kafka producer → broker (reference)", n, dt))
        print(f"produce: {n / dt:,.0f} rows/s", flush=True)

        from pyspark.sql import SparkSession

        from tidelog.spark import register

        spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("tidelog-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(args.cores))
                 .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        kafka = (spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", "bench").load())
        log = spark.read.format("tidelog-log").option("subscribe", "bench").load(str(data_dir))
        # the same records as JSON lines and Parquet (values are ASCII, so they survive as strings)
        if not args.sink and not args.reads_only:
            log.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition",
                           "offset", "timestamp", "timestampType").write.mode("overwrite").json(str(root / "json"))
        log.write.mode("overwrite").parquet(str(root / "parquet"))
        json_schema = ("key string, value string, topic string, partition int, offset long, timestamp timestamp, "
                       "timestampType int")

        if args.sink:
            timed("tidelog source (raw fetch), plain topic", kafka, n, results, cpu)
            tn = args.txn_records if args.txn_records is not None else n
            committed = produce_transactional(bootstrap, "bench-txn", tn, args.value_size, args.partitions,
                                              args.txn_size, args.abort_every)
            for iso in ("read_uncommitted", "read_committed"):
                df = (spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", "bench-txn").option("kafka.isolation.level", iso).load())
                timed(f"tidelog source (raw fetch), {iso}, transactional topic",
                      df, committed if iso == "read_committed" else tn, results, cpu)
            sink_rows(spark, bootstrap, str(root / "parquet"), n, args.partitions, results, cpu, args.repeat)
        if not args.sink:
            other_rows(spark, bootstrap, data_dir, root, kafka, log, json_schema, n, args, results)
        spark.stop()
    finally:
        proc.terminate()
        proc.wait(60)
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    report(args, results, cpu)


PUSHDOWN_T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


PUSHDOWN_MODES = (("without pushdown", False, True), ("pushdown, one task per range (before)", True, False),
                  ("pushdown, small ranges packed (packPartitions)", True, True))
"""(label, spark.sql.python.filterPushdown.enabled, the sources' packPartitions option)."""


def pushdown_rows(bootstrap: str, data_dir: Path, n: int, args: Any) -> None:
    """``WHERE timestamp >= <the last 1 %>`` on both sources: without filter pushdown
    (``spark.sql.python.filterPushdown.enabled``), with it and one task per range (``packPartitions=false``, the
    plan before small ranges were packed) and with it as planned by default; every round runs all six rows, in an
    order rotated by one each round, best of ``--repeat``. The per-row times are printed too, so the spread shows.
    ``--pushdown-trace`` adds where one pushed query's time goes (planning, ListOffsets, tasks)."""
    import datetime

    from pyspark.sql import SparkSession

    from tidelog.spark import register

    dt = produce(bootstrap, "bench", n, args.value_size, args.partitions, first_timestamp=PUSHDOWN_T0)
    print(f"produce: {n / dt:,.0f} rows/s", flush=True)
    spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("tidelog-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(args.cores))
             .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    cut = n - n // 100
    since = datetime.datetime.fromtimestamp((PUSHDOWN_T0 + cut) / 1000, datetime.UTC)
    where = f"timestamp >= timestamp '{since.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    rows_plan = [(fmt, mode) for fmt in ("tidelog", "tidelog-log") for mode in PUSHDOWN_MODES]
    best: dict[tuple[str, str], float] = {}
    tasks: dict[tuple[str, str], int] = {}

    def query(fmt: str, mode: tuple[str, bool, bool]) -> Any:
        _label, pushdown, packed = mode
        spark.conf.set("spark.sql.python.filterPushdown.enabled", str(pushdown).lower())
        reader = spark.read.format(fmt).option("subscribe", "bench").option("packPartitions", str(packed).lower())
        reader = (reader.option("kafka.bootstrap.servers", bootstrap) if fmt == "tidelog"
                  else reader.option("path", str(data_dir)))
        return reader.load().where(where)

    floors = pushdown_floors(spark, n - cut, args.value_size)
    query("tidelog", PUSHDOWN_MODES[2]).count()  # warm up: the session's first Python workers and JIT
    plan: list[tuple[str, Any]] = [(f"{fmt}|{mode[0]}", (fmt, mode)) for fmt, mode in rows_plan]
    plan += [(f"floor|{label}", make) for label, make in floors]
    for r in range(args.repeat):
        for i in range(len(plan)):
            key, what = plan[(i + r) % len(plan)]
            fmt, label = key.split("|", 1)
            df = what() if fmt == "floor" else query(*what)
            t0 = time.perf_counter()
            rows = df.count()
            secs = time.perf_counter() - t0
            assert rows == n - cut, (rows, n - cut)
            if (fmt, label) not in tasks:
                tasks[(fmt, label)] = df.rdd.getNumPartitions()
            print(f"{fmt}, {label}: {rows:,} rows in {secs:.2f}s", flush=True)
            best[(fmt, label)] = min(best.get((fmt, label), float("inf")), secs)
    if args.pushdown_trace:
        pushdown_trace(spark, query, n)
    spark.stop()
    print(f"\n{n:,} records, {args.value_size} B values, {args.partitions} partitions, local[{args.cores}]: "
          f"WHERE {where} (the last 1 %), best of {args.repeat}, interleaved; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n")
    print("| source | " + " | ".join(f"{m[0]} (s)" for m in PUSHDOWN_MODES) + " | tasks | speed-up before | speed-up |")
    print("|---|" + "---:|" * (len(PUSHDOWN_MODES) + 3))
    for fmt in ("tidelog", "tidelog-log"):
        times = [best[(fmt, m[0])] for m in PUSHDOWN_MODES]
        ntasks = "/".join(str(tasks[(fmt, m[0])]) for m in PUSHDOWN_MODES)
        print(f"| {fmt} | " + " | ".join(f"{x:.2f}" for x in times)
              + f" | {ntasks} | {times[0] / times[1]:.1f}x | {times[0] / times[2]:.1f}x |")
    print(f"\nThe floor: Spark's own fixed cost for a one-task count() of the same {n - cut:,} rows, and the "
          "speed-up against each source's full read had the pushed query cost only that:\n")
    print("| floor | seconds | tasks | tidelog packed / floor | ceiling for tidelog (full / floor) |")
    print("|---|---:|---:|---:|---:|")
    full, packed = best[("tidelog", PUSHDOWN_MODES[0][0])], best[("tidelog", PUSHDOWN_MODES[2][0])]
    for label, _ in floors:
        x = best[("floor", label)]
        print(f"| {label} | {x:.2f} | {tasks[('floor', label)]} | {packed / x:.2f} | {full / x:.1f}x |")


def pushdown_floors(spark: Any, rows: int, value_size: int) -> list[tuple[str, Any]]:
    """Spark's own fixed cost for a one-task ``count()`` of ``rows`` rows, on the bench's session: ``spark.range``
    (no Python at all) and a Python data source that reads nothing, yielding one prebuilt Arrow batch of the Kafka
    schema with ``rows`` rows of ``value_size``-byte values (the Python worker and the Arrow hand-off of the same
    bytes as the pushed query). The rows are counted like the pushed query's (``count()``)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tidelog.spark.arrow import BASE_DDL

    class FloorReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(rows)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            from tidelog.spark.arrow import arrow_schema

            k = int(partition.value)
            cols = [pa.array([b"k1"] * k, pa.binary()), pa.array([b"x" * value_size] * k, pa.binary()),
                    pa.array(["bench"] * k, pa.string()), pa.array([0] * k, pa.int32()),
                    pa.array(range(k), pa.int64()),
                    pa.array(range(k), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.array([0] * k, pa.int32())]
            yield pa.RecordBatch.from_arrays(cols, schema=arrow_schema(False))

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "tidelog-bench-floor"

        def schema(self) -> str:
            return BASE_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    spark.dataSource.register(FloorSource)
    return [("spark.range(rows).count() (no Python, one task)", lambda: spark.range(0, rows, 1, 1)),
            ("a Python data source yielding the rows, prebuilt, in one task",
             lambda: spark.read.format("tidelog-bench-floor").load())]


def pushdown_trace(spark: Any, query: Any, n: int) -> None:
    """Where one pushed query's time goes: the driver-side planning (Spark's analysis and the Python planning worker
    that runs ``pushFilters`` and ``partitions()``, timed as ``df.rdd`` which plans without running), the source's
    own ListOffsets round trips (timed here directly), and the rest (the tasks and count's final stage)."""
    from tidelog.spark.kafka_source import KafkaMetadata
    from tidelog.spark.options import SourceOptions

    for fmt in ("tidelog", "tidelog-log"):
        for mode in PUSHDOWN_MODES[1:]:
            plans, runs = [], []
            for _ in range(3):
                df = query(fmt, mode)
                t0 = time.perf_counter()
                df.rdd.getNumPartitions()
                plans.append(time.perf_counter() - t0)
                df = query(fmt, mode)
                t0 = time.perf_counter()
                df.count()
                runs.append(time.perf_counter() - t0)
            print(f"trace {fmt}, {mode[0]}: planning {min(plans):.2f}s, planning + run {min(runs):.2f}s",
                  flush=True)
    opts = SourceOptions.parse({"kafka.bootstrap.servers": BOOTSTRAP[0], "subscribe": "bench"}, streaming=False)
    t0 = time.perf_counter()
    meta = KafkaMetadata(opts)
    tps = meta.topic_partitions(opts)
    marks = meta.watermarks(tps)
    meta.offsets_for_times({tp: PUSHDOWN_T0 + n - n // 100 for tp in tps})
    meta.close()
    print(f"trace: the driver's metadata (Metadata, {2 * len(marks)} ListOffsets for watermarks, one by "
          f"timestamp) {time.perf_counter() - t0:.3f}s", flush=True)


FLOOR_ROWS_PER_BATCH = 65536
"""Rows per Arrow batch of the floor sources (the columnar readers' ``COLUMNAR_BATCH_ROWS``)."""


def floor_sources() -> tuple[Any, Any]:
    """Two trivial Python data sources, the floor of PySpark's Python data source path: ``read()`` yields
    ``pyarrow.RecordBatch``es built in memory (no I/O, no decoding: one shared value buffer, only the offset
    column is new per batch). ``tidelog-floor`` has the schema of ``tidelog``/``tidelog-log`` (without headers, as
    by default); ``tidelog-floor2`` only ``offset long, value binary``. Options: ``rows`` (total),
    ``partitions`` (Spark partitions, the rows split evenly), ``valueSize``, ``rowsPerBatch``.

    Defined in the script (``__main__``), so cloudpickle ships the classes to the Python workers by value."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorPartition(InputPartition):
        def __init__(self, first: int, count: int) -> None:
            self.first, self.count = first, count

    class FloorReader(DataSourceReader):
        def __init__(self, options: Any, narrow: bool) -> None:
            self.rows = int(options.get("rows", "1000000"))
            self.parts = int(options.get("partitions", "4"))
            self.value_size = int(options.get("valueSize", "100"))
            self.per_batch = int(options.get("rowsPerBatch", str(FLOOR_ROWS_PER_BATCH)))
            self.narrow = narrow

        def partitions(self) -> list[Any]:
            step = -(-self.rows // self.parts)
            return [FloorPartition(i, min(step, self.rows - i)) for i in range(0, self.rows, step)]

        def read(self, partition: Any) -> Any:
            import numpy as np
            import pyarrow as pa

            from tidelog.spark.arrow import arrow_schema

            full = arrow_schema(False)
            n = self.per_batch
            vs = self.value_size
            values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(0, (n + 1) * vs, vs,
                                                                                           dtype=np.int32)),
                                                            pa.py_buffer(b"x" * (n * vs))])
            if self.narrow:
                schema = pa.schema([full.field("offset"), full.field("value")])
                rest: list[Any] = [values]
            else:
                schema = full
                keys = pa.array([f"k{i % 1000}".encode() for i in range(n)], pa.binary())
                stamps = pa.array(np.full(n, 1_767_225_600_000_000, dtype=np.int64)).cast(full.field("timestamp").type)
                rest = [keys, values, pa.repeat(pa.scalar("bench", pa.string()), n),
                        pa.repeat(pa.scalar(0, pa.int32()), n), stamps, pa.repeat(pa.scalar(0, pa.int32()), n)]
            first, end = partition.first, partition.first + partition.count
            while first < end:
                k = min(n, end - first)
                offsets = pa.array(np.arange(first, first + k, dtype=np.int64))
                cols = [c.slice(0, k) for c in rest]
                if self.narrow:
                    arrays = [offsets, cols[0]]
                else:
                    arrays = [cols[0], cols[1], cols[2], cols[3], offsets, cols[4], cols[5]]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
                first += k

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "tidelog-floor"

        def schema(self) -> str:
            from tidelog.spark.arrow import ddl

            return ddl(False)

        def reader(self, schema: Any) -> Any:
            return FloorReader(self.options, narrow=False)

    class NarrowFloorSource(FloorSource):
        @classmethod
        def name(cls) -> str:
            return "tidelog-floor2"

        def schema(self) -> str:
            return "offset long, value binary"

        def reader(self, schema: Any) -> Any:
            return FloorReader(self.options, narrow=True)

    return FloorSource, NarrowFloorSource


BOOTSTRAP: list[str] = []
READ_CPU: dict[str, float] = {}
"""The least CPU seconds (this process tree: driver, Spark's JVM, its Python workers, the broker) of each read row."""


def print_ratios(args: Any, reads: list[tuple[str, Any]], runs: dict[str, list[float]],
                 best: dict[str, float]) -> None:
    parquet = best["Spark Parquet (upper reference)"]
    print(f"\nagainst Spark's Parquet reader on the same rows (best of {args.repeat}, interleaved; every run: "
          + "; ".join(f"{label} {'/'.join(f'{x:.1f}' for x in runs[label])}s" for label, _ in reads)
          + "):", flush=True)
    for label, _ in reads:
        if not label.startswith("Spark "):
            print(f"  {label}: {parquet / best[label]:.2f}x", flush=True)
    pcpu = READ_CPU["Spark Parquet (upper reference)"]
    print("\n| read | best rows/s | against Parquet | least CPU s | rows per CPU s against Parquet |")
    print("|---|---:|---:|---:|---:|")
    n = args.records
    for label, _ in reads:
        print(f"| {label} | {n / best[label]:,.0f} | {parquet / best[label]:.2f}x | {READ_CPU[label]:.1f} | "
              f"{pcpu / READ_CPU[label]:.2f}x |", flush=True)
    print(f"load average (1, 5, 15 min) at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)


def other_rows(spark: Any, bootstrap: str, data_dir: Path, root: Path, kafka: Any, log: Any, json_schema: str,
               n: int, args: Any, results: list[tuple[str, int, float]]) -> None:
    """Every read path, the isolation levels on all three, JSON and Parquet, and the sink (the default run).

    The plain reads (both ``tidelog`` paths, ``tidelog-log``, JSON lines, Parquet) run ``--repeat`` rounds; each
    round runs every row once, in an order rotated by one per round (no row always goes first, or always follows
    the same neighbour), and the best of each row is reported: on a shared machine single runs differ by 2x."""
    reads = [
        ("tidelog (Kafka protocol, broker; raw fetch)", kafka),
        ("tidelog (Kafka protocol, broker; fetchClient=librdkafka)",
         spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", "bench").option("fetchClient", "librdkafka").load()),
        ("tidelog-log (data directory)", log),
        ("Spark JSON lines", None),
        ("Spark Parquet (upper reference)", spark.read.parquet(str(root / "parquet"))),
    ]
    if args.reads_only:
        reads = [r for r in reads if "librdkafka" not in r[0] and "JSON" not in r[0]]
        # the same read in fewer, larger tasks (one per partition here): the per-task cost of the Python source path
        reads.insert(2, ("tidelog-log, maxBytesPerPartition=1 GiB",
                         spark.read.format("tidelog-log").option("subscribe", "bench")
                         .option("maxBytesPerPartition", str(1 << 30)).load(str(data_dir))))
    else:
        reads[3] = ("Spark JSON lines", spark.read.schema(json_schema).json(str(root / "json")))
    if not args.no_floor:
        # the floor: PySpark's Python data source path itself, on Arrow batches built in memory, as many Spark
        # partitions as the tidelog-log read has
        for src in floor_sources():
            spark.dataSource.register(src)
        parts = log.rdd.getNumPartitions()
        opts = {"rows": str(n), "partitions": str(parts), "valueSize": str(args.value_size)}
        reads.insert(3, ("floor: Python data source, in-memory Arrow, tidelog's schema",
                         spark.read.format("tidelog-floor").options(**opts).load()))
        reads.insert(4, ("floor: Python data source, in-memory Arrow, (offset, value) only",
                         spark.read.format("tidelog-floor2").options(**opts).load()))
    best: dict[str, float] = {}
    runs: dict[str, list[float]] = {}
    for r in range(args.repeat):
        for i in range(len(reads)):
            label, df = reads[(i + r) % len(reads)]
            c0 = tree_cpu_seconds()
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            dt = time.perf_counter() - t0
            dc = tree_cpu_seconds() - c0
            runs.setdefault(label, []).append(dt)
            best[label] = min(best.get(label, float("inf")), dt)
            READ_CPU[label] = min(READ_CPU.get(label, float("inf")), dc)
            print(f"{label} (round {r + 1}): {n / dt:,.0f} rows/s ({dt:.1f}s, {dc:.1f} CPU s)", flush=True)
    for label, _ in reads:
        if label.startswith("Spark "):
            continue  # reported after the transactional rows, as before
        results.append((label, n, best[label]))
    if args.reads_only:
        for label, _ in reads:
            if label.startswith("Spark "):
                results.append((label, n, best[label]))
        print_ratios(args, reads, runs, best)
        return

    # transactions: the same reads of a transactional topic at both isolation levels, side by side
    tn = args.txn_records if args.txn_records is not None else n
    committed = produce_transactional(bootstrap, "bench-txn", tn, args.value_size, args.partitions,
                                      args.txn_size, args.abort_every)
    for path, fmt in (("raw fetch", "tidelog"), ("librdkafka", "tidelog"), ("data directory", "tidelog-log")):
        best_iso: dict[str, float] = {}
        # twice, in alternating order, best of two: neither level profits from going second (warm caches)
        for iso in ("read_uncommitted", "read_committed", "read_committed", "read_uncommitted"):
            r = spark.read.format(fmt).option("subscribe", "bench-txn")
            if fmt == "tidelog":
                r = r.option("kafka.bootstrap.servers", bootstrap).option("kafka.isolation.level", iso)
                if path == "librdkafka":
                    r = r.option("fetchClient", "librdkafka")
                df = r.load()
            else:
                df = r.option("isolationLevel", iso).load(str(data_dir))
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            best_iso[iso] = min(best_iso.get(iso, float("inf")), time.perf_counter() - t0)
        for iso in ("read_uncommitted", "read_committed"):
            rows = committed if iso == "read_committed" else tn
            label = f"{fmt} ({path}), {iso}, transactional topic"
            results.append((label, rows, best_iso[iso]))
            print(f"{label}: {rows / best_iso[iso]:,.0f} rows/s ({best_iso[iso]:.1f}s, best of 2)", flush=True)
    for label, _ in reads:
        if label.startswith("Spark "):
            results.append((label, n, best[label]))
    print_ratios(args, reads, runs, best)

    t0 = time.perf_counter()
    (spark.read.parquet(str(root / "parquet")).select("key", "value").write.mode("append").format("tidelog")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", "bench-sink").save())
    dt = time.perf_counter() - t0
    results.append(("tidelog sink (Parquet → broker)", n, dt))
    print(f"sink: {n / dt:,.0f} rows/s", flush=True)


def report(args: Any, results: list[tuple[str, int, float]], cpu: dict[str, float]) -> None:
    print(f"\n{args.records:,} records, {args.value_size} B values, {args.partitions} partitions, "
          f"local[{args.cores}]\n")
    if cpu:
        print("| path | rows | seconds | rows/s | CPU seconds (all processes) | of which the broker | rows per CPU "
              "second |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    else:
        print("| path | rows | seconds | rows/s |")
        print("|---|---:|---:|---:|")
    for label, rows, secs in results:
        if cpu:
            c = cpu.get(label)
            b = BROKER_CPU.get(label)
            extra = f" {c:.1f} | {b:.1f} | {rows / c:,.0f} |" if c and b is not None else " | | |"
            print(f"| {label} | {rows:,} | {secs:.1f} | {rows / secs:,.0f} |{extra}")
        else:
            print(f"| {label} | {rows:,} | {secs:.1f} | {rows / secs:,.0f} |")
    by_label = {label: (rows, secs) for label, rows, secs in results}
    print("\nread_committed against read_uncommitted over the same transactional log (rows/s counts only the rows "
          "returned: aborted records are not rows; log speed = read_uncommitted seconds / read_committed seconds):")
    for label, (rows, secs) in by_label.items():
        if ", read_committed," in label:
            base = by_label.get(label.replace("read_committed", "read_uncommitted"))
            if base:
                print(f"  {label.split(',')[0]}: rows/s {rows / secs / (base[0] / base[1]):.2f}x, "
                      f"log speed {base[1] / secs:.2f}x")
    sinks = {label: secs for label, _, secs in results if label.startswith("tidelog sink,")}
    if sinks:
        old = sinks.get("tidelog sink, at-least-once, produceClient=librdkafka (old)")
        new = sinks.get("tidelog sink, at-least-once, produceClient=raw (new)")
        eos = sinks.get("tidelog sink, exactly-once, produceClient=raw")
        if old and new:
            print(f"\nat-least-once sink, raw against librdkafka: {old / new:.2f}x rows/s", end="")
            co, cn = cpu.get("tidelog sink, at-least-once, produceClient=librdkafka (old)"), \
                cpu.get("tidelog sink, at-least-once, produceClient=raw (new)")
            print(f", {co / cn:.2f}x rows per CPU second" if co and cn else "")
        if new and eos:
            print(f"exactly-once (raw) against at-least-once (raw): {new / eos:.2f}x rows/s", end="")
            ce, cn = cpu.get("tidelog sink, exactly-once, produceClient=raw"), \
                cpu.get("tidelog sink, at-least-once, produceClient=raw (new)")
            print(f", {cn / ce:.2f}x rows per CPU second" if ce and cn else "")


if __name__ == "__main__":
    main()
