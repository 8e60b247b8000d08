"""End-to-end pipeline on tidelog + PySpark, started with one command::

    .venv/bin/python examples/pipeline.py

1. starts ``tidelog serve`` on 127.0.0.1 with a fresh data directory;
2. a generator thread produces click events (JSON, event time inside) to the topic ``events``;
3. a Structured Streaming job reads ``events`` with ``format("tidelog")``, counts events per action in 1-minute
   event-time windows (with a watermark) and writes the counts to the compacted topic ``window-counts``
   (key = window start + action; append mode: a window is written once the watermark closes it);
4. a batch job reads the broker's data directory with ``format("tidelog-log")`` for a historical report, and the
   latest window counts from the compacted topic with ``format("tidelog")``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")
EVENTS = 20_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
ACTIONS = ["view", "click", "add_to_cart", "purchase"]


def _drain(stream: Any) -> None:
    for _ in stream:  # keep reading the broker's log so that it never blocks on a full pipe
        pass


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(data_dir), "--override", "tidelog.metrics.listener=127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _STARTED.search(line)
        if m:
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc, f"127.0.0.1:{m.group(1)}"
    raise RuntimeError("tidelog serve did not start")


def generate(bootstrap: str, done: threading.Event) -> None:
    """20,000 events over 10 minutes of event time, a few of them late (out of order)."""
    from confluent_kafka import Producer

    rnd = random.Random(42)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "enable.idempotence": True})
    for i in range(EVENTS):
        t = BASE_MS + i * 30  # 30 ms apart: 10 minutes in total
        if rnd.random() < 0.02:
            t -= rnd.randint(1_000, 20_000)  # late event
        event = {"user": f"u{rnd.randint(1, 500)}", "action": rnd.choices(ACTIONS, [70, 20, 7, 3])[0], "ts": t}
        p.produce("events", key=event["user"], value=json.dumps(event), timestamp=t)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    done.set()


def main() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="tidelog-pipeline-"))
    data_dir = root / "data"
    proc, bootstrap = start_broker(data_dir)
    try:
        run(bootstrap, data_dir, root)
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)


def run(bootstrap: str, data_dir: Path, root: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tidelog.spark import register

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic("events", 3, 1),
        NewTopic("window-counts", 1, 1, config={"cleanup.policy": "compact"}),
    ])
    for f in futures.values():
        f.result(30)

    spark: Any = (SparkSession.builder.master("local[2]").appName("tidelog-pipeline")
                  .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                  .config("spark.sql.shuffle.partitions", "2")
                  .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    done = threading.Event()
    gen = threading.Thread(target=generate, args=(bootstrap, done), daemon=True)

    # --- streaming job: event-time windows -> compacted topic
    events = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "events").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "5000").load())
    parsed = (events.select(F.from_json(F.col("value").cast("string"),
                                        "user string, action string, ts long").alias("e"))
              .select("e.*", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")))
    counts = (parsed.withWatermark("event_time", "30 seconds")
              .groupBy(F.window("event_time", "1 minute"), "action").count())
    out = counts.select(
        F.concat_ws("|", F.date_format("window.start", "HH:mm"), "action").alias("key"),
        F.to_json(F.struct(F.col("window.start").alias("start"), "action", "count")).alias("value"),
    )
    query = (out.writeStream.format("tidelog").outputMode("append")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", "window-counts")
             .option("checkpointLocation", str(root / "checkpoint")).start())
    gen.start()
    done.wait(300)
    query.processAllAvailable()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    print(f"streaming job: {sum(p['numInputRows'] for p in batches)} events in {len(batches)} micro-batches")

    # --- the latest count per window, from the compacted topic (last value per key wins)
    latest = (spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "window-counts").load()
              .select(F.col("key").cast("string").alias("key"), "offset",
                      F.from_json(F.col("value").cast("string"),
                                  "start timestamp, action string, count long").alias("v"))
              .groupBy("key").agg(F.max_by("v", "offset").alias("v"))
              .select(F.date_format("v.start", "HH:mm").alias("minute"), "v.action", "v.count"))
    print("\nwindow counts (topic window-counts, latest value per key), first 3 minutes:")
    (latest.groupBy("minute").pivot("action", ACTIONS).sum("count").orderBy("minute").limit(3).show())

    # --- historical report straight from the log directory, no broker involved
    hist = (spark.read.format("tidelog-log").option("subscribe", "events").load(str(data_dir))
            .select("partition", "offset", "timestamp",
                    F.from_json(F.col("value").cast("string"), "user string, action string").alias("e")))
    print("historical report from the log directory (tidelog-log):")
    (hist.groupBy("e.action")
     .agg(F.count("*").alias("events"), F.countDistinct("e.user").alias("users"),
          F.min("timestamp").alias("first"), F.max("timestamp").alias("last"))
     .orderBy(F.desc("events")).show(truncate=False))
    per_partition = hist.groupBy("partition").agg(F.count("*").alias("records"), F.max("offset").alias("last_offset"))
    per_partition.orderBy("partition").show()
    spark.stop()


if __name__ == "__main__":
    main()
