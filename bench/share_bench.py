"""Share group vs classic consumer: consume throughput of 100-byte records on one partition (issue 27).

One ``tidelog serve`` (``share.auto.offset.reset=earliest``); a one-partition topic preloaded with ``--records``
100-byte records; then, side by side in one run, in this process:

* ``classic``: a confluent-kafka ``Consumer`` (classic group, ``auto.offset.reset=earliest``) reads them all;
* ``share``: a confluent-kafka ``ShareConsumer`` (implicit acknowledgement: every poll accepts the previous poll's
  records, piggy-backed on the next ShareFetch; ``max.poll.records`` ``--max-records``) reads them all.

Each is timed from its first record to its last (group join excluded). Prints records/s of each and share/classic.

Usage::

    .venv/bin/python bench/share_bench.py [--records 200000] [--max-records 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import BROKERS, free_port


def _classic(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "classic-" + uuid.uuid4().hex[:6],
                  "auto.offset.reset": "earliest", "enable.auto.commit": True})
    c.subscribe([topic])
    got, t0 = 0, 0.0
    try:
        while got < n:
            msgs = c.consume(1000, 1.0)
            if msgs and not t0:
                t0 = time.perf_counter()
            got += sum(1 for m in msgs if m.error() is None)
        return got / (time.perf_counter() - t0)
    finally:
        c.close()


def _share(bootstrap: str, topic: str, n: int, max_records: int) -> float:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "share-" + uuid.uuid4().hex[:6],
                       "max.poll.records": max_records})
    c.subscribe([topic])
    got, t0 = 0, 0.0
    try:
        while got < n:
            msgs = c.poll(1.0)
            if len(msgs) and not t0:
                t0 = time.perf_counter()
            got += sum(1 for m in msgs if m.error() is None)
        rate = got / (time.perf_counter() - t0)
        c.commit_sync(30)
        return rate
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--max-records", type=int, default=2000)
    args = ap.parse_args()
    os.environ.setdefault("TIDELOG_SERVE_ARGS", "-o share.auto.offset.reset=earliest")
    root = Path(tempfile.mkdtemp(prefix="sharebench-"))
    broker = BROKERS["tidelog"](port=free_port(), data_dir=root / "data", log_path=root / "broker.log")
    why = broker.available()
    if why:
        raise SystemExit(why)
    broker.start()
    try:
        from confluent_kafka import Producer

        topic = "share-bench"
        broker.create_topic(topic, 1)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
        payload = b"x" * 100
        for _ in range(args.records):
            while True:
                try:
                    p.produce(topic, payload, partition=0)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(120)
        classic = _classic(broker.bootstrap, topic, args.records)
        share = _share(broker.bootstrap, topic, args.records, args.max_records)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.records} records of 100 B on one partition; share max.poll.records {args.max_records}\n")
    print("| consumer | records/s | vs classic |")
    print("|---|---|---|")
    print(f"| classic Consumer | {classic:,.0f} | 1.00 |")
    print(f"| ShareConsumer (implicit acks) | {share:,.0f} | {share / classic:.2f} |")


if __name__ == "__main__":
    main()
