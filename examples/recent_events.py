"""The last hour of a day of events, with and without filter pushdown (issue 29), started with one command::

    .venv/bin/python examples/recent_events.py

1. starts ``tidelog serve`` on 127.0.0.1 with a fresh data directory (and its Prometheus ``/metrics``);
2. produces 200,000 events spread over one day of event time (CreateTime) to ``events`` (3 partitions);
3. asks both sources for the events of the last hour of partitions 0 and 1 (``WHERE timestamp >= ... AND
   partition IN (0, 1)``), once with ``spark.sql.python.filterPushdown.enabled`` off and once on, and prints the
   rows, the seconds and, through the broker, the bytes it sent (``tidelog_topic_bytes_out``); then the pushed
   filters as ``explain("formatted")`` shows them.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")
_METRICS = re.compile(r"metrics listening url=(http://[^ ]*/metrics)")
EVENTS = 200_000
DAY_MS = 86_400_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(data_dir), "--override", "tidelog.metrics.listener=127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    metrics = ""
    for line in proc.stdout:
        m = _METRICS.search(line)
        if m:
            metrics = m.group(1)
        m = _STARTED.search(line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            return proc, f"127.0.0.1:{m.group(1)}", metrics
    raise RuntimeError("tidelog serve did not start")


def produce(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 3, 1)])["events"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "enable.idempotence": True})
    for i in range(EVENTS):
        while True:
            try:
                p.produce("events", key=b"user-%d" % (i % 500), value=b'{"event": %d, "pad": "%s"}' % (i, b"x" * 60),
                          partition=i % 3, timestamp=BASE_MS + i * DAY_MS // EVENTS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def bytes_out(metrics: str) -> float:
    text = urllib.request.urlopen(metrics, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tidelog_topic_bytes_out_total{") and 'topic="events"' in line)


def main() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="tidelog-recent-"))
    proc, bootstrap, metrics = start_broker(root / "data")
    try:
        produce(bootstrap)
        print(f"produced {EVENTS:,} events over one day of event time to 'events'")
        from pyspark.sql import SparkSession

        from tidelog.spark import register

        spark = (SparkSession.builder.master("local[2]").appName("recent-events").config("spark.ui.enabled", "false")
                 .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        since = datetime.datetime.fromtimestamp((BASE_MS + DAY_MS - 3_600_000) / 1000, datetime.UTC)
        where = f"timestamp >= '{since:%Y-%m-%d %H:%M:%S}' AND partition IN (0, 1)"
        print(f"WHERE {where}")

        def load(fmt: str) -> Any:
            r = spark.read.format(fmt).option("subscribe", "events")
            if fmt == "tidelog":
                return r.option("kafka.bootstrap.servers", bootstrap).load()
            return r.option("path", str(root / "data")).load()

        for fmt in ("tidelog", "tidelog-log"):
            for pushdown in ("false", "true"):
                spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
                before = bytes_out(metrics)
                t0 = time.perf_counter()
                rows = load(fmt).where(where).count()
                secs = time.perf_counter() - t0
                sent = f", broker sent {(bytes_out(metrics) - before) / 1e6:.2f} MB" if fmt == "tidelog" else ""
                print(f"  {fmt:<11} pushdown {pushdown:<5}: {rows:,} events in {secs:.2f} s{sent}")
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        plan = spark._jvm.PythonSQLUtils.explainString(load("tidelog").where(where)._jdf.queryExecution(), "formatted")
        print("\n".join(line for line in plan.splitlines() if line.startswith(("PushedFilters", "Condition"))))
        spark.stop()
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
