"""Kafka -> Spark -> database exactly once, the seeds' pattern, started with one command::

    .venv/bin/python examples/results_and_offsets.py

"Store the processing result and the offset in one database transaction": a Structured Streaming query reads
payments from the topic ``payments`` and, in ``foreachBatch``, adds each micro-batch's totals per user to a
SQLite table AND stores the next offset of every partition the batch read, in ONE SQLite transaction. The query
starts from the offsets stored in the database (``startingOffsets``), not from a Spark checkpoint, so the
database alone says what has been processed.

1. starts ``tidelog serve`` on 127.0.0.1 and produces 2,000 payments (2 partitions);
2. run 1 is a child process that crashes (``os._exit``) in its third micro-batch, after writing that batch's
   totals but before the database transaction commits;
3. run 2 starts from the offsets in the database, with a fresh checkpoint, and processes the rest;
4. the totals in the database are compared with totals computed straight from the input: nothing lost, nothing
   counted twice.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")
PAYMENTS = 2_000
CRASH_IN_BATCH = 2


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(data_dir), "--override", "tidelog.metrics.listener=off"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _STARTED.search(line)
        if m:
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc, f"127.0.0.1:{m.group(1)}"
    raise RuntimeError("tidelog serve did not start")


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN / COMMIT below
    db.execute("CREATE TABLE IF NOT EXISTS totals (user TEXT PRIMARY KEY, payments INTEGER, amount INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS offsets (topic TEXT, partition INTEGER, next_offset INTEGER, "
               "PRIMARY KEY (topic, partition))")
    return db


def stored_offsets(db: sqlite3.Connection) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for topic, partition, offset in db.execute("SELECT topic, partition, next_offset FROM offsets"):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def stream(bootstrap: str, db_path: Path, checkpoint: Path, crash: bool) -> None:
    """One run of the query: from the database's offsets to the end of the topic (Trigger.AvailableNow)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tidelog.spark import register

    spark: Any = (SparkSession.builder.master("local[2]").appName("tidelog-results-and-offsets")
                  .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                  .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    register(spark)
    with open_db(db_path) as db:
        start = stored_offsets(db)
    print(f"  starting offsets from the database: {json.dumps(start) if start else 'none (earliest)'}")

    def save(batch: Any, batch_id: int) -> None:
        rows = batch.select("partition", "offset", F.col("value").cast("string").alias("v")).collect()
        if not rows:
            return
        totals: dict[str, list[int]] = {}
        next_offsets: dict[int, int] = {}
        for r in rows:
            p = json.loads(r.v)
            t = totals.setdefault(p["user"], [0, 0])
            t[0] += 1
            t[1] += p["amount"]
            next_offsets[r.partition] = max(next_offsets.get(r.partition, 0), r.offset + 1)
        db = open_db(db_path)  # foreachBatch runs in a thread of its own: a connection per batch
        db.execute("BEGIN")
        for user, (n, amount) in totals.items():
            db.execute("INSERT INTO totals VALUES (?, ?, ?) ON CONFLICT (user) DO UPDATE SET "
                       "payments = payments + excluded.payments, amount = amount + excluded.amount",
                       (user, n, amount))
        if crash and batch_id == CRASH_IN_BATCH:
            print(f"  crash in micro-batch {batch_id}: totals written, transaction not committed")
            sys.stdout.flush()
            os._exit(3)
        for partition, offset in next_offsets.items():
            db.execute("INSERT OR REPLACE INTO offsets VALUES ('payments', ?, ?)", (partition, offset))
        db.execute("COMMIT")
        print(f"  micro-batch {batch_id}: {len(rows)} payments; stored offsets {json.dumps(stored_offsets(db))}")
        db.close()

    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", "payments")
         .option("startingOffsets", json.dumps(start) if start else "earliest")
         .option("maxOffsetsPerTrigger", "400").load()
         .writeStream.foreachBatch(save).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    spark.stop()


def main() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if len(sys.argv) == 5 and sys.argv[1] == "--run":  # a run of the query, in a process of its own
        stream(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), crash=True)
        return
    root = Path(tempfile.mkdtemp(prefix="tidelog-db-"))
    broker, bootstrap = start_broker(root / "data")
    try:
        run(bootstrap, root)
    finally:
        broker.terminate()
        broker.wait(60)
        shutil.rmtree(root, ignore_errors=True)


def run(bootstrap: str, root: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("payments", 2, 1)])["payments"].result(30)
    rnd = random.Random(7)
    expected: dict[str, list[int]] = {}
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(PAYMENTS):
        user, amount = f"user{rnd.randint(1, 20):02d}", rnd.randint(1, 500)
        e = expected.setdefault(user, [0, 0])
        e[0] += 1
        e[1] += amount
        p.produce("payments", key=user, value=json.dumps({"id": i, "user": user, "amount": amount}))
    p.flush(60)
    print(f"produced {PAYMENTS} payments to 'payments'")
    db_path = root / "results.db"

    print("run 1 (a process of its own):")
    child = subprocess.run([sys.executable, __file__, "--run", bootstrap, str(db_path), str(root / "ck1")],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    print(child.stdout, end="")
    print(f"  exit code {child.returncode}")
    db = open_db(db_path)
    n = db.execute("SELECT COALESCE(SUM(payments), 0) FROM totals").fetchone()[0]
    print(f"database after the crash: {n} payments counted, offsets {json.dumps(stored_offsets(db))}")
    db.close()

    print("run 2 (fresh checkpoint, offsets from the database):")
    stream(bootstrap, db_path, root / "ck2", crash=False)

    db = open_db(db_path)
    got = {u: [n, a] for u, n, a in db.execute("SELECT user, payments, amount FROM totals")}
    counted = sum(n for n, _ in got.values())
    print(f"database: {counted} payments counted for {len(got)} users (input: {PAYMENTS} for {len(expected)})")
    print("totals per user equal the input's: " + ("yes" if got == expected else "NO"))
    if got != expected:
        sys.exit(1)


if __name__ == "__main__":
    main()
