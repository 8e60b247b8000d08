"""Transaction benchmark (issue 14): what transactions cost, measured side by side in one run on one broker.

    .venv/bin/python bench/txn_bench.py            # about 2-3 minutes
    .venv/bin/python bench/txn_bench.py --quick    # under a minute

One ``tidelog serve`` (the live work tree's ``.venv``, a fresh data dir under ``bench/.work/runs/txn-<time>/``),
clients are confluent-kafka (librdkafka) in this process, 1 KiB values, no keys, no compression, ``linger.ms=5``,
``acks=all``:

* **produce**: idempotent vs transactional, the same producer settings; the transactional producer commits every
  100 ms (``--commit-ms``), as Kafka's published ~3 % overhead figure assumes. Each run produces for
  ``--seconds`` to a fresh 1-partition topic; its rate is the records over the time from the first ``produce`` to
  the last delivery report (idempotent) or to the last ``commit_transaction`` returning (transactional). Runs
  alternate (idem, txn, txn, idem, ...), best of ``--repeats`` each, since interference on a shared machine only
  lowers a number.
* **consume**: read_committed vs read_uncommitted, reading the first transactional topic from the beginning to its
  end (a COMMIT marker every 100 ms in it), after one untimed read; alternating, best of ``--repeats``.
* **commit latency**: ``--txns`` transactions of one 1 KiB record each, back to back: p50 / p99 / max of the
  ``commit_transaction`` call (the record's flush, EndTxn) and of the whole transaction (begin, produce, commit);
  on the one node, then on 3 brokers in ZooKeeper mode (``bench/_cluster_harness.py``: a ZooKeeper and three
  ``tidelog serve``, RF 3, ``min.insync.replicas=2``; ``--no-cluster`` skips it).

The table prints both sides and the ratio; everything is also written to ``results.json`` in the run dir.
Goals (issue 14): transactional / idempotent produce >= 0.95 (Kafka: about 0.97), read_committed /
read_uncommitted consume >= 0.95.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cluster_harness import Cluster, ZooKeeper, kill_all
from peers import Tidelog, free_port

ROOT = Path(__file__).resolve().parent.parent
VALUE = bytes(range(256)) * 4  # 1 KiB


def producer_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True,
            "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20}


def produce_idempotent(bootstrap: str, topic: str, seconds: float) -> tuple[int, float]:
    """Produce for ``seconds``, then flush: (records, seconds from the first produce to the last delivery)."""
    from confluent_kafka import Producer

    p = Producer(producer_conf(bootstrap))
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            p.produce(topic, VALUE, partition=0)
            n += 1
        except BufferError:
            p.poll(0.001)
        p.poll(0)
    assert p.flush(120) == 0
    return n, time.perf_counter() - t0


def produce_transactional(bootstrap: str, topic: str, seconds: float,
                          commit_ms: float) -> tuple[int, float, list[float]]:
    """Transactions of ``commit_ms`` each for ``seconds``: (records, seconds from the first produce to the last
    commit_transaction returning, the time each commit_transaction call took: its flush, EndTxn and the wait)."""
    from confluent_kafka import Producer

    p = Producer({**producer_conf(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    n = 0
    commits: list[float] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        p.begin_transaction()
        until = time.perf_counter() + commit_ms / 1000
        while time.perf_counter() < until:
            try:
                p.produce(topic, VALUE, partition=0)
                n += 1
            except BufferError:
                p.poll(0.001)
            p.poll(0)
        tc = time.perf_counter()
        p.commit_transaction(60)
        commits.append(time.perf_counter() - tc)
    return n, time.perf_counter() - t0, commits


def consume(bootstrap: str, topic: str, n: int, isolation: str) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                  "queued.min.messages": 200000})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    t0 = None
    deadline = time.monotonic() + 120
    while got < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{isolation}: read {got} of {n}")
        msgs = c.consume(10000, 0.5)
        if msgs and t0 is None:
            t0 = time.perf_counter()
        got += sum(1 for m in msgs if not m.error())
    dt = time.perf_counter() - t0
    c.close()
    assert got == n, (got, n)
    return dt


def commit_latency(bootstrap: str, topic: str, txns: int) -> tuple[list[float], list[float]]:
    from confluent_kafka import Producer

    p = Producer({**producer_conf(bootstrap), "linger.ms": 0,
                  "transactional.id": f"bench-lat-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    commit, whole = [], []
    for i in range(txns + 5):
        t0 = time.perf_counter()
        p.begin_transaction()
        p.produce(topic, VALUE, partition=0)
        t1 = time.perf_counter()
        p.commit_transaction(30)
        t2 = time.perf_counter()
        if i >= 5:  # the first few warm up the connections to the coordinator and the leader
            commit.append(t2 - t1)
            whole.append(t2 - t0)
    return commit, whole


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]  # nearest rank


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 1 minute)")
    ap.add_argument("--seconds", type=float, help="length of each produce run (default 8, quick 3)")
    ap.add_argument("--repeats", type=int, help="runs per side (default 3, quick 2)")
    ap.add_argument("--txns", type=int, help="transactions for the commit latency (default 500, quick 150)")
    ap.add_argument("--commit-ms", type=float, default=100.0)
    ap.add_argument("--no-cluster", action="store_true",
                    help="skip the commit latency on 3 brokers in ZooKeeper mode (needs Debian's zookeeper, kazoo)")
    ap.add_argument("--keep", action="store_true", help="keep the run dir's data")
    args = ap.parse_args()
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    repeats = args.repeats or (2 if args.quick else 3)
    txns = args.txns or (150 if args.quick else 500)

    run = ROOT / "bench" / ".work" / "runs" / time.strftime("txn-%Y%m%d-%H%M%S")
    run.mkdir(parents=True)
    broker = Tidelog(port=free_port(), data_dir=run / "data", log_path=run / "broker.log")
    why = broker.available()
    if why:
        raise SystemExit(f"tidelog not available: {why}")
    t_start = time.monotonic()
    load0 = os.getloadavg()
    broker.start()
    results: dict[str, Any] = {"seconds_per_run": seconds, "repeats": repeats, "txns": txns,
                               "commit_ms": args.commit_ms, "value_bytes": len(VALUE), "load_start": load0}
    idem: list[float] = []  # msg/s per run
    txn: list[float] = []
    txn_counts: list[int] = []
    stalls: list[float] = []  # commit_transaction calls of the produce runs
    # broker CPU µs per record, per run
    cpu: dict[str, list[float]] = {"idem": [], "txn": [], "read_committed": [], "read_uncommitted": []}
    rc: list[float] = []
    ru: list[float] = []
    try:
        consume_topic, consume_n = "", 0
        for r in range(repeats):
            for side in ("idem", "txn") if r % 2 == 0 else ("txn", "idem"):
                topic = f"bench-{side}-{r}"
                broker.create_topic(topic, 1)
                cpu0 = broker.cpu_seconds()
                if side == "idem":
                    n, dt = produce_idempotent(broker.bootstrap, topic, seconds)
                    idem.append(n / dt)
                else:
                    n, dt, commits = produce_transactional(broker.bootstrap, topic, seconds, args.commit_ms)
                    txn.append(n / dt)
                    txn_counts.append(len(commits))
                    stalls += commits
                    if not consume_topic:
                        consume_topic, consume_n = topic, n
                cpu[side].append((broker.cpu_seconds() - cpu0) / n * 1e6)
                print(f"  produce {side:4} run {r + 1}: {n / dt:,.0f} msg/s, broker {cpu[side][-1]:.2f} µs CPU/record",
                      flush=True)
        results["produce_msg_s"] = {"idempotent": idem, "transactional": txn, "transactions": txn_counts,
                                    "commit_calls_s": stalls,
                                    "broker_cpu_us_per_record": {k: cpu[k] for k in ("idem", "txn")}}

        consume(broker.bootstrap, consume_topic, consume_n, "read_uncommitted")  # warm-up: page cache, connections
        for r in range(repeats):
            order = ("read_committed", "read_uncommitted") if r % 2 == 0 else ("read_uncommitted", "read_committed")
            for iso in order:
                cpu0 = broker.cpu_seconds()
                rate = consume_n / consume(broker.bootstrap, consume_topic, consume_n, iso)
                (rc if iso == "read_committed" else ru).append(rate)
                cpu[iso].append((broker.cpu_seconds() - cpu0) / consume_n * 1e6)
                print(f"  consume {iso} run {r + 1}: {rate:,.0f} msg/s, broker {cpu[iso][-1]:.3f} µs CPU/record",
                      flush=True)
        results["consume_msg_s"] = {"records": consume_n, "read_committed": rc, "read_uncommitted": ru,
                                    "broker_cpu_us_per_record": {k: cpu[k] for k in ("read_committed",
                                                                                     "read_uncommitted")}}

        broker.create_topic("bench-latency", 1)
        commit, whole = commit_latency(broker.bootstrap, "bench-latency", txns)
        results["commit_latency_s"] = commit
        results["transaction_latency_s"] = whole
        results["broker_cpu_s"] = broker.cpu_seconds()
    finally:
        broker.stop()
        results["load_end"] = os.getloadavg()
        results["seconds"] = time.monotonic() - t_start
        (run / "results.json").write_text(json.dumps(results, indent=1))
        if not args.keep:
            shutil.rmtree(run / "data", ignore_errors=True)

    cluster_commit: list[float] = []
    why_not = "--no-cluster" if args.no_cluster else ZooKeeper.available()
    if why_not is None:
        cluster = Cluster(run / "cluster", {"min.insync.replicas": "2", "auto.create.topics.enable": "false",
                                            "zookeeper.session.timeout.ms": "6000"})
        try:
            cluster.start()
            cluster.create_topic("bench-latency", 3)
            cluster_commit, _ = commit_latency(cluster.bootstrap, "bench-latency", txns)
        finally:
            kill_all()
            if not args.keep:
                shutil.rmtree(run / "cluster", ignore_errors=True)
        results["cluster_commit_latency_s"] = cluster_commit
        (run / "results.json").write_text(json.dumps(results, indent=1))

    kib = len(VALUE) / 1e6
    rows = [
        (f"produce 1 KiB, 1 partition, msg/s (best of {repeats})", f"{max(idem):,.0f}", f"{max(txn):,.0f}",
         f"{max(txn) / max(idem):.3f}x"),
        ("produce 1 KiB, MB/s", f"{max(idem) * kib:.1f}", f"{max(txn) * kib:.1f}", ""),
        ("produce: broker CPU µs per record (median)", f"{statistics.median(cpu['idem']):.2f}",
         f"{statistics.median(cpu['txn']):.2f}", f"{statistics.median(cpu['txn']) / statistics.median(cpu['idem']):.3f}x"),
        (f"consume 1 KiB, msg/s (best of {repeats})", f"{max(ru):,.0f}", f"{max(rc):,.0f}",
         f"{max(rc) / max(ru):.3f}x"),
        ("consume: broker CPU µs per record (median)", f"{statistics.median(cpu['read_uncommitted']):.3f}",
         f"{statistics.median(cpu['read_committed']):.3f}",
         f"{statistics.median(cpu['read_committed']) / statistics.median(cpu['read_uncommitted']):.3f}x"),
    ]
    print(f"\nbroker: tidelog (live work tree); {seconds:.0f} s produce runs of 1 KiB records, commit every "
          f"{args.commit_ms:.0f} ms ({statistics.median(txn_counts):.0f} transactions per run); consume of "
          f"{consume_n:,} records; load average {load0[0]:.1f} -> {results['load_end'][0]:.1f}; "
          f"{results['seconds']:.0f} s; {run}")
    print(f"{'metric':46} | {'idempotent / read_uncommitted':>29} | {'transactional / read_committed':>30} | ratio")
    for label, a, b, ratio in rows:
        print(f"{label:46} | {a:>29} | {b:>30} | {ratio}")
    print(f"\ncommit_transaction calls of the produce runs (flush of ~{args.commit_ms:.0f} ms of records + EndTxn): "
          f"p50 {pct(stalls, .5) * 1e3:.1f} ms, p99 {pct(stalls, .99) * 1e3:.1f} ms")
    print(f"commit latency, {txns} transactions of one 1 KiB record, one node:")
    print(f"  commit_transaction    p50 {pct(commit, .5) * 1e3:7.2f} ms   p99 {pct(commit, .99) * 1e3:7.2f} ms   "
          f"max {max(commit) * 1e3:7.2f} ms")
    print(f"  begin..commit         p50 {pct(whole, .5) * 1e3:7.2f} ms   p99 {pct(whole, .99) * 1e3:7.2f} ms   "
          f"max {max(whole) * 1e3:7.2f} ms")
    if cluster_commit:
        print(f"commit latency on 3 brokers (ZooKeeper mode, RF 3, min.insync.replicas 2, acks=all), {txns} "
              f"transactions:\n  commit_transaction    p50 {pct(cluster_commit, .5) * 1e3:7.2f} ms   "
              f"p99 {pct(cluster_commit, .99) * 1e3:7.2f} ms   max {max(cluster_commit) * 1e3:7.2f} ms")
    else:
        print(f"commit latency on 3 brokers: not measured ({why_not})")


if __name__ == "__main__":
    main()
