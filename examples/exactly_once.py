"""Kafka -> Spark -> Kafka exactly once, through a crash, started with one command::

    .venv/bin/python examples/exactly_once.py

1. starts ``tidelog serve`` on 127.0.0.1 with a fresh data directory and produces 3,000 orders (JSON) to the
   topic ``orders`` (3 partitions);
2. a Structured Streaming query reads ``orders``, adds the tax to each order and writes it to ``orders-taxed``
   with the exactly-once ``tidelog`` sink (``exactlyOnce=true``: each task writes its part of a micro-batch in
   one Kafka transaction that also commits the batch id, and with ``atomicBatches``, the default, the driver
   commits all of a micro-batch's transactions once every task succeeded), 300 orders per micro-batch;
3. in the middle of the run (after 3 micro-batches, aimed at a moment when a task's transaction is open) the
   broker is killed (SIGKILL), the query is stopped, and the broker is started again on the same data
   directory;
4. the query resumes from its checkpoint and finishes; then every order of ``orders-taxed`` is read with a
   ``read_committed`` consumer and checked: each input order appears exactly once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")
ORDERS = 3_000
PER_BATCH = 300


def _drain(stream: Any) -> None:
    for _ in stream:  # keep reading the broker's log so that it never blocks on a full pipe
        pass


def start_broker(data_dir: Path, port: int = 0) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(data_dir), "--override", "tidelog.metrics.listener=off"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _STARTED.search(line)
        if m:
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc, int(m.group(1))
    raise RuntimeError("tidelog serve did not start")


def read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every record value of ``topic`` up to its end (the last stable offset for read_committed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    parts = list(c.list_topics(topic, timeout=30).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    values: list[bytes] = []
    at_end: set[int] = set()
    while len(at_end) < len(parts):
        msg = c.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(msg.error())
            at_end.add(msg.partition())
            continue
        values.append(msg.value())
    c.close()
    return values


def transaction_open(bootstrap: str, topic: str) -> bool:
    """Records of an open transaction are in the log: the high watermark is past the last stable offset (read
    after it, so that a transaction committed between the two reads does not count)."""
    from confluent_kafka import Consumer, TopicPartition

    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "isolation.level": isolation})
        ends.append([c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)])
        c.close()
    return any(hw > lso for hw, lso in zip(ends[0], ends[1]))


def main() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="tidelog-eos-"))
    broker, port = start_broker(root / "data")
    try:
        broker = run(root, broker, port)
    finally:
        broker.terminate()
        broker.wait(60)
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, broker: subprocess.Popen[str], port: int) -> subprocess.Popen[str]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("orders-taxed", 3, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(ORDERS):
        p.produce("orders", key=f"order-{i}", value=json.dumps({"id": i, "amount": 10 + i % 90}))
    p.flush(60)
    print(f"produced {ORDERS} orders to 'orders'")

    # local[2,2]: a task that fails is tried again once (what a cluster's spark.task.maxFailures does)
    spark: Any = (SparkSession.builder.master("local[2,2]").appName("tidelog-exactly-once")
                  .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                  .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    register(spark)
    checkpoint = str(root / "checkpoint")

    def query(trigger: dict[str, Any]) -> Any:
        return (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", "orders").option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(PER_BATCH)).load()
                .selectExpr("key", "from_json(CAST(value AS STRING), 'id INT, amount INT') AS o")
                .selectExpr("key", "to_json(named_struct('id', o.id, 'amount', o.amount, "
                            "'total', round(o.amount * 1.2, 2))) AS value")
                .writeStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
                .option("topic", "orders-taxed").option("exactlyOnce", "true")
                .option("checkpointLocation", checkpoint).trigger(**trigger).start())

    # -- run 1: after 3 micro-batches, the broker is killed (SIGKILL) while a task's transaction is open,
    #    the query is stopped, and the broker is started again on the same data directory and port
    q = query({"processingTime": "200 milliseconds"})
    commits = root / "checkpoint" / "commits"
    while len(list(commits.glob("[0-9]*")) if commits.exists() else []) < 3:
        time.sleep(0.05)
    deadline = time.monotonic() + 10  # aim the kill at an open transaction (best effort: they are short)
    while not transaction_open(bootstrap, "orders-taxed") and time.monotonic() < deadline:
        pass
    broker.kill()
    broker.wait()
    q.stop()
    done = len(list(commits.glob("[0-9]*")))
    print(f"run 1: broker killed (SIGKILL) in the middle of micro-batch {done}, query stopped "
          f"({done} micro-batches committed)")
    broker, _ = start_broker(root / "data", port)
    print("broker restarted on the same data directory")

    # -- run 2: resumes from the checkpoint and processes everything that is left
    q = query({"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    batches = sorted(int(f.name) for f in commits.glob("[0-9]*"))
    print(f"run 2: resumed from the checkpoint at micro-batch {done}, finished at micro-batch {batches[-1]}")
    spark.stop()

    committed = [json.loads(v) for v in read_all(bootstrap, "orders-taxed", "read_committed")]
    everything = read_all(bootstrap, "orders-taxed", "read_uncommitted")
    ids = [o["id"] for o in committed]
    print(f"\n'orders-taxed' read with read_committed: {len(committed)} orders, {len(set(ids))} distinct")
    print(f"  missing: {len(set(range(ORDERS)) - set(ids))}, duplicated: {len(ids) - len(set(ids))}, "
          f"totals right: {all(o['total'] == round(o['amount'] * 1.2, 2) for o in committed)}")
    if len(everything) > len(committed):
        print(f"  read_uncommitted sees {len(everything)}: the records of the transaction the kill interrupted are "
              "in the log, aborted")
    else:
        print(f"  read_uncommitted sees {len(everything)} too (the kill fell between two transactions)")
    ok = sorted(ids) == list(range(ORDERS))
    print("exactly once: " + ("yes" if ok else "NO"))
    if not ok:
        sys.exit(1)
    return broker


if __name__ == "__main__":
    main()
