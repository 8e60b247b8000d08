"""KIP-848 vs classic: do the members whose partitions do not move keep consuming while a member joins?

One ``tidelog serve``; a topic of ``--partitions`` (100) partitions preloaded with 100-byte records; ``--members``
(10) confluent-kafka consumers (one process each), each throttled to ``--rate`` records/s so that the machine's CPU
is not what is measured; once every member consumes steadily, an 11th member joins. Per partition and per 100 ms,
each member reports what it consumed. Run side by side in one go:

* ``consumer``: ``group.protocol=consumer`` (KIP-848, broker-side ``uniform`` assignor, incremental);
* ``classic``: the classic protocol with the eager ``range`` assignor (every member stops at a rebalance).

Measured over the original members (all of which keep most of their partitions under KIP-848): records they
consumed in the ``--window`` seconds after the join / in the ``--window`` seconds before it (all members, and the
worst member), and the longest pause of a member after the join (100 ms resolution).

Usage::

    .venv/bin/python bench/kip848_bench.py [--members 10] [--partitions 100] [--rate 1500] [--window 4]

Prints a table: protocol | partitions kept by their owner | records before / after | after/before (all, worst
member) | longest pause of a member (ms).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import BROKERS, free_port

BUCKET_S = 0.1


def member_main(bootstrap: str, group: str, topic: str, protocol: str, rate: int) -> None:
    """A member process: consumes at most ``rate`` records/s; prints one JSON line per 100 ms bucket."""
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": True, "auto.commit.interval.ms": 1000, "fetch.wait.max.ms": 50,
                            # a throttled consumer keeps its prefetch queue full; librdkafka pauses every fetcher
                            # during an incremental revoke and then backs off fetch.queue.backoff.ms (1 s by
                            # default) on a full queue: a client-side pause that would hide the broker's behaviour
                            "fetch.queue.backoff.ms": 20, "queued.max.messages.kbytes": 1024}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"partition.assignment.strategy": "range", "session.timeout.ms": 10000,
                     "heartbeat.interval.ms": 500})
    c = Consumer(conf)
    c.subscribe([topic])
    per_bucket = max(int(rate * BUCKET_S), 1)
    bucket_end = time.monotonic() + BUCKET_S
    counts: dict[int, int] = {}
    taken = 0
    while True:
        now = time.monotonic()
        if now >= bucket_end:
            parts = sorted(tp.partition for tp in c.assignment())
            sys.stdout.write(json.dumps({"t": time.time(), "counts": counts, "parts": parts}) + "\n")
            sys.stdout.flush()
            counts, taken = {}, 0
            bucket_end = now + BUCKET_S
        if taken >= per_bucket:
            time.sleep(max(bucket_end - time.monotonic(), 0))  # librdkafka heartbeats from its own threads
            continue
        m = c.poll(max(min(bucket_end - time.monotonic(), 0.05), 0))
        if m is None or m.error():
            continue
        counts[m.partition()] = counts.get(m.partition(), 0) + 1
        taken += 1


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, rate: int) -> None:
        self.buckets: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--member", bootstrap, group, topic, protocol, str(rate)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.buckets.append(json.loads(line))
            except ValueError:
                pass

    def parts(self) -> list[int]:
        return self.buckets[-1]["parts"] if self.buckets else []

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _owners(members: list[Member], at: float) -> dict[int, int]:
    """partition -> index of the member owning it at time ``at`` (last bucket at or before ``at``)."""
    out: dict[int, int] = {}
    for i, m in enumerate(members):
        last = None
        for b in m.buckets:
            if b["t"] <= at:
                last = b
        for p in (last or {}).get("parts", []):
            out[p] = i
    return out


def run(protocol: str, bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    group = f"bench-{protocol}-{int(time.time())}"
    members = [Member(bootstrap, group, topic, protocol, args.rate) for _ in range(args.members)]
    try:
        deadline = time.monotonic() + 90
        while True:
            owned = [p for m in members for p in m.parts()]
            busy = all(m.buckets and sum(m.buckets[-1]["counts"].values()) > 0 for m in members)
            if sorted(owned) == list(range(args.partitions)) and busy:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{protocol}: the group never settled: {len(owned)} partitions owned "
                                 f"({len(set(owned))} distinct), members consuming: "
                                 f"{[sum(m.buckets[-1]['counts'].values()) if m.buckets else None for m in members]}")
            time.sleep(0.2)
        time.sleep(args.window + 1)  # steady consumption before the join
        t_join = time.time()
        joiner = Member(bootstrap, group, topic, protocol, args.rate)
        time.sleep(args.window + 0.5)
        t_end = time.time()
        joiner.stop()
    finally:
        for m in members:
            m.stop()
    before, after = _owners(members, t_join - 0.05), _owners(members, t_end - 0.3)
    unmoved = {p for p, i in before.items() if after.get(p) == i}
    got_before = got_after = 0
    worst_ratio = float("inf")
    longest_gap = 0.0
    for m in members:
        b_n = a_n = 0
        last = t_join
        for b in m.buckets:
            n = sum(b["counts"].values())
            if t_join - args.window <= b["t"] < t_join:
                b_n += n
            elif t_join <= b["t"] < t_join + args.window:
                a_n += n
                if n:
                    longest_gap = max(longest_gap, b["t"] - last)
                    last = b["t"]
        longest_gap = max(longest_gap, min(t_end, t_join + args.window) - last)
        got_before += b_n
        got_after += a_n
        if b_n:
            worst_ratio = min(worst_ratio, a_n / b_n)
    if os.environ.get("KIP848_BENCH_TRACE"):
        for i, m in enumerate(members):
            row = [(round(b["t"] - t_join, 1), sum(b["counts"].values()), len(b["parts"])) for b in m.buckets
                   if t_join - 1 <= b["t"] < t_join + args.window]
            print(f"{protocol} member {i}: {row}", file=sys.stderr)
    return {"protocol": protocol, "unmoved": len(unmoved), "before": got_before, "after": got_after,
            "ratio": got_after / got_before if got_before else float("nan"), "worst": worst_ratio,
            "gap_ms": longest_gap * 1000}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        member_main(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rate", type=int, default=1500, help="records/s per member")
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--protocols", default="consumer,classic")
    args = ap.parse_args()
    os.environ.setdefault("TIDELOG_SERVE_ARGS", "-o group.initial.rebalance.delay.ms=0 "
                                                "-o group.consumer.min.heartbeat.interval.ms=500 "
                                                "-o group.consumer.heartbeat.interval.ms=1000")
    root = Path(tempfile.mkdtemp(prefix="kip848bench-"))
    broker = BROKERS["tidelog"](port=free_port(), data_dir=root / "data", log_path=root / "broker.log")
    why = broker.available()
    if why:
        raise SystemExit(why)
    broker.start()
    try:
        from confluent_kafka import Producer

        topic = "kip848-bench"
        broker.create_topic(topic, args.partitions)
        total = int(args.members * args.rate * (2 * args.window + 20) * 1.5)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
        payload = b"x" * 100
        for i in range(total):
            while True:
                try:
                    p.produce(topic, payload, partition=i % args.partitions)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(120)
        rows = [run(proto, broker.bootstrap, topic, args) for proto in args.protocols.split(",")]
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.members} members x {args.rate} rec/s over {args.partitions} partitions; one member joins; "
          f"window {args.window}s before / after the join\n")
    print("| protocol | partitions kept by their owner | records before | records after | after/before "
          "| worst member | longest member pause ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['protocol']} | {r['unmoved']}/{args.partitions} | {r['before']} | {r['after']} | "
              f"{r['ratio']:.2f} | {r['worst']:.2f} | {r['gap_ms']:.0f} |")


if __name__ == "__main__":
    main()
