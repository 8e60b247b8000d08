"""Group benchmark: rebalance time of a 10-member group joining, and committed offsets per second.

Side by side with the peer brokers of the broker benchmark (``bench/peers.py``; run ``bench/setup.sh`` first).
Clients are confluent-kafka. Usage::

    .venv/bin/python bench/group_bench.py [--brokers tidelog,tansu,noida] [--members 10] [--seconds 5]

* rebalance: a topic with ``members`` partitions; ``members`` consumers subscribe at once (one thread each); the
  time from the first ``subscribe`` until every member owns exactly one partition. The first rebalance of an
  Empty group waits ``group.initial.rebalance.delay.ms``; tidelog runs with 0 here so the number is the
  protocol work (set TIDELOG_SERVE_ARGS to change it).
* commits: one consumer commits 10 partitions synchronously in a loop; offsets committed per second.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import BROKERS, free_port


def _commit_loop(c: Any, topic: str, partitions: int, seconds: float, tp_cls: Any) -> float:
    try:
        c.commit(offsets=[tp_cls(topic, p, 0) for p in range(partitions)], asynchronous=False)  # warm up
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            n += 1
            c.commit(offsets=[tp_cls(topic, p, n) for p in range(partitions)], asynchronous=False)
        return n * partitions / (time.perf_counter() - t0)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="tidelog,tansu,noida")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    os.environ.setdefault("TIDELOG_SERVE_ARGS", "-o group.initial.rebalance.delay.ms=0")
    rows = []
    for name in args.brokers.split(","):
        cls = BROKERS[name]
        root = Path(tempfile.mkdtemp(prefix=f"groupbench-{name}-"))
        broker = cls(port=free_port(), data_dir=root / "data", log_path=root / "broker.log")
        why = broker.available()
        if why:
            rows.append((name, "n/a", "n/a", why))
            continue
        try:
            broker.start()
            rb_times = []  # each run: a fresh group on a fresh topic created beforehand
            for _ in range(3):
                t = f"rb-{time.time_ns()}"
                broker.create_topic(t, args.members)
                rb_times.append(_rebalance_on(broker.bootstrap, t, args.members))
            rate = _commits_on(broker.bootstrap, "cm-topic", broker, args.seconds)
            rows.append((name, f"{min(rb_times):.2f} / {sorted(rb_times)[1]:.2f}", f"{rate:,.0f}", ""))
        except Exception as exc:
            rows.append((name, "error", "error", repr(exc)[:80]))
        finally:
            broker.stop()
            shutil.rmtree(root, ignore_errors=True)
    print(f"| broker | {args.members}-member join: best / median s | committed offsets/s | note |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")


def _rebalance_on(bootstrap: str, topic: str, members: int) -> float:
    from confluent_kafka import Consumer

    group = f"rb-g-{time.time_ns()}"
    stop = threading.Event()
    owned: dict[int, list[int]] = {}
    lock = threading.Lock()
    consumers = [
        Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 10000,
                  "heartbeat.interval.ms": 500, "enable.auto.commit": False})
        for _ in range(members)
    ]

    def run(i: int, c: Any) -> None:
        c.subscribe([topic])
        while not stop.is_set():
            c.poll(0.05)
            with lock:
                owned[i] = [tp.partition for tp in c.assignment()]

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(consumers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    elapsed = float("nan")
    try:
        while time.perf_counter() - t0 < 120:
            with lock:
                parts = sorted(p for ps in owned.values() for p in ps)
                done = len(owned) == members and all(len(ps) == 1 for ps in owned.values())
            if done and parts == list(range(members)):
                elapsed = time.perf_counter() - t0
                break
            time.sleep(0.01)  # sampling interval of the measurement
    finally:
        stop.set()
        for t in threads:
            t.join()
        for c in consumers:
            c.close()
    return elapsed


def _commits_on(bootstrap: str, topic: str, broker: Any, seconds: float, partitions: int = 10) -> float:
    from confluent_kafka import Consumer, TopicPartition

    broker.create_topic(topic, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cm-g-{time.time_ns()}", "enable.auto.commit": False})
    return _commit_loop(c, topic, partitions, seconds, TopicPartition)


if __name__ == "__main__":
    main()
