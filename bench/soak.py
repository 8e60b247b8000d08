"""Soak: does a broker stay bounded under hours of mixed work? (issue 17)

Runs a mixed workload against one broker and then against 3 brokers with a real ZooKeeper (Debian's
``zookeeper`` package, as cluster_bench), each for ``--minutes`` (default 30), and samples every ``--interval``
seconds, per broker:

* **RSS** (MiB, the process tree) and **open file descriptors** (``/proc/<pid>/fd``);
* **event-loop lag**: ``tidelog_event_loop_lag_max_seconds`` from the broker's ``/metrics`` (the worst lateness
  of a 100 ms timer on its loop over the last 5 s);
* **p99 latency** of a probe producer (one record every 50 ms, ``acks=all``, delivery-report latency) over the
  sample's window.

The workload (confluent-kafka, one thread each): a producer at ``--rate`` records/s of 1 KiB into ``soak-data``
(6 partitions, ``retention.ms`` 30 s and 1 MiB segments, Kafka's smallest, so retention deletes segments all the time); a
consumer group of two members reading it, one member replaced every 15 s (a rebalance each time); topic churn
(every 5 s a 3-partition topic is created, written and read, and the previous one deleted); and the probe.

Writes ``<out>.csv`` and ``<out>.png`` (the four series over time, one line per broker) and exits 1 if any series
**grows without bound**: after a warm-up (the first quarter), the mean of the last quarter may exceed the mean of
the second quarter by at most 25 % plus a slack (RSS 48 MiB, fds 24, loop lag 100 ms, p99 100 ms). A leak shows
as steady growth, which this catches on a run long enough for the quarters to differ; noise of a loaded machine
stays within the slack.

Needs the ``bench`` extra (``pip install -e '.[bench]'``: matplotlib for the plot)::

    .venv/bin/python bench/soak.py                      # 30 min on one broker, then 30 min on 3
    .venv/bin/python bench/soak.py --minutes 5 --modes single
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _cluster_harness import ClusterBroker, ZooKeeper, kill_all, poll_until
from peers import HOST, ROOT, free_port, rss_mib

SERIES = ("rss_mib", "fds", "loop_lag_ms", "p99_ms")
SLACK = {"rss_mib": 48.0, "fds": 24.0, "loop_lag_ms": 100.0, "p99_ms": 100.0}
GROWTH = 1.25


@dataclass
class Sample:
    mode: str
    t: float  # seconds since the mode's start
    broker: int
    rss_mib: float
    fds: float
    loop_lag_ms: float
    p99_ms: float


@dataclass
class Counters:
    produced: int = 0
    delivery_errors: int = 0
    consumed: int = 0
    rebalances: int = 0
    topics_created: int = 0
    topics_deleted: int = 0
    errors: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(what)


class Workload:
    """The mixed clients, each a thread, until stop is set."""

    def __init__(self, bootstrap: str, rf: int, rate: int, stop: threading.Event) -> None:
        self.bootstrap = bootstrap
        self.rf = rf
        self.rate = rate
        self.stop = stop
        self.counters = Counters()
        self.latencies: list[float] = []  # probe latencies (s) since the last sample
        self._lat_lock = threading.Lock()
        self.threads = [threading.Thread(target=self._guard(f), name=f.__name__, daemon=True)
                        for f in (self._produce, self._group, self._topic_churn, self._probe)]

    def _guard(self, f: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                f()
            except Exception as e:  # a client thread dying is a finding, not a reason to stop sampling
                self.counters.error(f"{f.__name__}: {e!r}")
        return run

    def start(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic("soak-data", 6, self.rf, config={"retention.ms": "30000", "segment.bytes": "1048576"}),
                  NewTopic("soak-probe", 1, self.rf)]
        for f in admin.create_topics(topics, request_timeout=60).values():
            f.result(90)
        for t in self.threads:
            t.start()

    def take_latencies(self) -> list[float]:
        with self._lat_lock:
            out, self.latencies = self.latencies, []
        return out

    def _produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})
        c = self.counters
        payload = os.urandom(1024)

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                c.delivery_errors += 1
                c.error(f"produce: {err}")

        tick = 0.05
        per_tick = max(1, round(self.rate * tick))
        next_at = time.monotonic()
        while not self.stop.is_set():
            for i in range(per_tick):
                p.produce("soak-data", payload, key=str(i).encode(), on_delivery=report)
            c.produced += per_tick
            p.poll(0)
            next_at += tick
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        p.flush(30)

    def _group(self) -> None:
        from confluent_kafka import Consumer

        def member() -> Any:
            m = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "soak-readers",
                          "auto.offset.reset": "latest", "session.timeout.ms": 10000,
                          "on_commit": lambda err, _parts: err and self.counters.error(f"commit: {err}")})
            m.subscribe(["soak-data"], on_assign=lambda *_: self._rebalanced())
            return m

        members = [member(), member()]
        replaced_at = time.monotonic()
        while not self.stop.is_set():
            for m in members:
                for msg in m.consume(500, 0.1):
                    if msg.error() is None:
                        self.counters.consumed += 1
            if time.monotonic() - replaced_at > 15:  # group churn: the oldest member leaves, a new one joins
                members.pop(0).close()
                members.append(member())
                replaced_at = time.monotonic()
        for m in members:
            m.close()

    def _rebalanced(self) -> None:
        self.counters.rebalances += 1

    def _topic_churn(self) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        previous: str | None = None
        n = 0
        while not self.stop.wait(5):
            n += 1
            name = f"soak-tmp-{n}"
            try:
                admin.create_topics([NewTopic(name, 3, self.rf)], request_timeout=30)[name].result(60)
                self.counters.topics_created += 1
                # a producer per topic, without auto-creation: a long-lived one keeps refreshing the metadata of
                # every topic it wrote to, and its Metadata requests would re-create the deleted ones (Kafka too)
                p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "allow.auto.create.topics": False})
                for i in range(100):
                    p.produce(name, b"x" * 100, partition=i % 3)
                if p.flush(30):
                    self.counters.error(f"churn: {name} not flushed")
                c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"soak-churn-{n}",
                              "enable.auto.commit": False})
                c.assign([TopicPartition(name, i, 0) for i in range(3)])
                got, deadline = 0, time.monotonic() + 30
                while got < 100 and time.monotonic() < deadline:
                    got += sum(1 for m in c.consume(100, 0.5) if m.error() is None)
                c.close()
                if got != 100:
                    self.counters.error(f"churn: read {got}/100 from {name}")
                if previous is not None:
                    admin.delete_topics([previous], request_timeout=30)[previous].result(60)
                    self.counters.topics_deleted += 1
                previous = name
            except Exception as e:
                self.counters.error(f"churn {name}: {e!r}")

    def _probe(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0})

        delivered = threading.Event()

        def report(err: Any, _msg: Any, sent: float) -> None:
            if err is None:
                with self._lat_lock:
                    self.latencies.append(time.monotonic() - sent)
            else:
                self.counters.error(f"probe: {err}")
            delivered.set()

        # one record in flight: poll until its delivery report (a report is only seen during poll, so polling
        # once per period would add up to a period to every latency), then wait out the rest of the 50 ms
        while not self.stop.is_set():
            sent = time.monotonic()
            delivered.clear()
            p.produce("soak-probe", b"probe", on_delivery=lambda err, msg, s=sent: report(err, msg, s))
            while not delivered.is_set() and not self.stop.is_set():
                p.poll(0.05)
            self.stop.wait(max(0.0, sent + 0.05 - time.monotonic()))
        p.flush(30)


def _loop_lag_ms(metrics_port: int) -> float:
    try:
        text = urllib.request.urlopen(f"http://{HOST}:{metrics_port}/metrics", timeout=10).read().decode()
    except OSError:
        return float("nan")
    for line in text.splitlines():
        if line.startswith("tidelog_event_loop_lag_max_seconds "):
            return float(line.split()[-1]) * 1000
    return float("nan")


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))] * 1000


def run_mode(mode: str, root: Path, minutes: float, interval: float, rate: int) -> tuple[list[Sample], Counters]:
    n = 1 if mode == "single" else 3
    overrides = {"log.retention.check.interval.ms": "5000", "group.initial.rebalance.delay.ms": "0"}
    zk = None
    if n > 1:
        zk = ZooKeeper(root)
        zk.start()
        overrides.update({"zookeeper.connect": zk.connect, "default.replication.factor": "3",
                          "offsets.topic.replication.factor": "3", "min.insync.replicas": "2"})
    brokers: list[tuple[ClusterBroker, int]] = []
    for i in range(1, n + 1):
        metrics_port = free_port()
        b = ClusterBroker(i, root / mode, dict(overrides, **{"tidelog.metrics.listener": f"{HOST}:{metrics_port}"}))
        b.start()
        brokers.append((b, metrics_port))
    for b, _ in brokers:
        poll_until(f"broker {b.id} listening", b.listening, 120, interval=0.1)
    stop = threading.Event()
    work = Workload(",".join(b.bootstrap for b, _ in brokers), n, rate, stop)
    work.start()
    samples: list[Sample] = []
    t0 = time.monotonic()
    end = t0 + minutes * 60
    print(f"[{mode}] {n} broker(s), {minutes:g} min, a sample every {interval:g} s", flush=True)
    try:
        while time.monotonic() < end:
            time.sleep(max(0.0, min(interval, end - time.monotonic())))  # the sampling period itself
            t = time.monotonic() - t0
            p99 = _p99(work.take_latencies())
            for b, mport in brokers:
                b.listening()  # raises if a broker died
                assert b.proc is not None
                samples.append(Sample(mode, round(t, 1), b.id, round(rss_mib(b.proc.pid), 1), _fds(b.proc.pid),
                                      round(_loop_lag_ms(mport), 1), round(p99, 1)))
            last = samples[-n:]
            print(f"[{mode}] t={t:6.0f}s rss={'/'.join(f'{s.rss_mib:.0f}' for s in last)} MiB "
                  f"fds={'/'.join(str(s.fds) for s in last)} lag={'/'.join(f'{s.loop_lag_ms:.0f}' for s in last)} ms "
                  f"p99={p99:.1f} ms produced={work.counters.produced} consumed={work.counters.consumed} "
                  f"topics={work.counters.topics_created}/{work.counters.topics_deleted} "
                  f"rebalances={work.counters.rebalances}", flush=True)
    finally:
        stop.set()
        for th in work.threads:
            th.join(60)
        for b, _ in brokers:
            b.stop()
        if zk is not None:
            zk.stop()
    return samples, work.counters


def unbounded(samples: list[Sample]) -> list[str]:
    """Series whose last-quarter mean exceeds the second quarter's by more than GROWTH x + SLACK."""
    out = []
    keys = sorted({(s.mode, s.broker) for s in samples})
    for mode, broker in keys:
        rows = [s for s in samples if s.mode == mode and s.broker == broker]
        q = len(rows) // 4
        if q < 2:
            continue
        for name in SERIES:
            second = [getattr(s, name) for s in rows[q:2 * q] if getattr(s, name) == getattr(s, name)]
            last = [getattr(s, name) for s in rows[-q:] if getattr(s, name) == getattr(s, name)]
            if not second or not last:
                continue
            a, b = statistics.fmean(second), statistics.fmean(last)
            if b > a * GROWTH + SLACK[name]:
                out.append(f"{mode} broker {broker} {name}: {a:.1f} -> {b:.1f}")
    return out


def plot(samples: list[Sample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {"rss_mib": "RSS (MiB)", "fds": "open file descriptors", "loop_lag_ms": "event-loop lag, max of 5 s (ms)",
              "p99_ms": "probe produce p99, acks=all (ms)"}
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True)
    for ax, name in zip(axes.flat, SERIES):
        for mode, broker in sorted({(s.mode, s.broker) for s in samples}):
            rows = [s for s in samples if s.mode == mode and s.broker == broker]
            if name == "p99_ms" and broker != rows[0].broker:
                continue
            label = f"{mode}" if name == "p99_ms" else f"{mode} b{broker}"
            ax.plot([s.t / 60 for s in rows], [getattr(s, name) for s in rows], label=label, linewidth=1)
        ax.set_title(titles[name])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="per mode")
    ap.add_argument("--modes", default="single,cluster", help="single, cluster or both (comma separated)")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--rate", type=int, default=1000, help="records/s of 1 KiB into soak-data")
    ap.add_argument("--out", default=str(ROOT / "bench" / "soak"), help="writes OUT.csv and OUT.png")
    ap.add_argument("--keep", action="store_true", help="keep the data and log directory")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidelog-soak-"))
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: (kill_all(), os._exit(2)))
    samples: list[Sample] = []
    counters: dict[str, Counters] = {}
    try:
        for mode in args.modes.split(","):
            got, counters[mode] = run_mode(mode.strip(), root, args.minutes, args.interval, args.rate)
            samples += got
    finally:
        kill_all()
        if args.keep:
            print(f"data and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "t", "broker", *SERIES])
        for s in samples:
            w.writerow([s.mode, s.t, s.broker, *(getattr(s, k) for k in SERIES)])
    plot(samples, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")
    for mode, c in counters.items():
        print(f"[{mode}] produced {c.produced}, delivery errors {c.delivery_errors}, consumed {c.consumed}, "
              f"rebalances {c.rebalances}, topics created/deleted {c.topics_created}/{c.topics_deleted}")
        for e in c.errors[:10]:
            print(f"[{mode}]   error: {e}")
    for mode in counters:
        for name in SERIES:
            vals = [getattr(s, name) for s in samples if s.mode == mode and getattr(s, name) == getattr(s, name)]
            if vals:
                print(f"[{mode}] {name}: min {min(vals):.1f} median {statistics.median(vals):.1f} max {max(vals):.1f}")
    grew = unbounded(samples)
    if grew:
        print("UNBOUNDED: " + "; ".join(grew))
        raise SystemExit(1)
    print("bounded: no series grew past its limit")


if __name__ == "__main__":
    main()
