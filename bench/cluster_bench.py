"""Cluster benchmark: a real ZooKeeper and 3 real `tidelog serve` brokers in ZooKeeper mode (issue 7).

    .venv/bin/python bench/cluster_bench.py [--quick] [--failovers N] [--session-timeout-ms MS]
                                            [--only throughput|failover] [--loadgen rdkafka|python]

1. Produce throughput on the same cluster with the same load, side by side: a topic with RF=3 produced
   with acks=all (min.insync.replicas=2) against a topic with RF=1 produced with acks=1; 100 B and 1 KiB
   values, 1 partition, a fixed number of messages per run from librdkafka's rdkafka_performance (or, with
   --loadgen python, a confluent-kafka Producer in a child process). The two configurations alternate
   (A B A B ...), each run on a fresh topic; the table shows the medians and the ratio RF=3/RF=1.
2. Failover: an idempotent acks=all producer (confluent-kafka, its own process) writes continuously to an
   RF=3 topic; the partition leader is killed with SIGKILL and the benchmark records, from its own kazoo
   session, when the killed broker's ZooKeeper session expires (/brokers/ids/<id> disappears), when a new
   leader is written to the partition's state znode, when the surviving brokers' Metadata names it, and when
   the producer gets its first acknowledgement after that; then it restarts the killed broker and waits until it is back in the ISR. Repeated N times;
   p50/p99/max. For kill -9 the dominant term is the ZooKeeper session timeout: nothing can move the
   leadership before the dead broker's session expires.

Everything runs on 127.0.0.1 in bench/.work/runs/cluster-<time>/ (data dirs removed unless --keep;
results.json kept). Every process started here is killed at the end, on Ctrl-C and on errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cluster_harness import Cluster, ProcessExited, ZooKeeper, kill_all, kill_group, track
from broker_bench import RdkafkaPerf, Result, Run, machine_busy_seconds, run_bounded
from peers import ROOT, WORK, _proc_tree
from tidelog_revs import snapshot_tidelog

# the two produce configurations compared: key -> (label, replication factor, acks, topic configs)
CONFIGS: dict[str, tuple[str, int, str, dict[str, str]]] = {
    "rf1": ("RF=1 acks=1", 1, "1", {}),
    "rf3": ("RF=3 acks=all", 3, "-1", {"min.insync.replicas": "2"}),
}


logging.getLogger("kazoo.client").setLevel(logging.ERROR)  # its retries while ZooKeeper starts are expected


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------
# child-process workers (this file run with --worker ...)


def worker_produce(a: argparse.Namespace) -> int:
    """Fallback load generator: produce a.count values of a.size bytes to partition 0 as fast as the
    Producer takes them; prints one JSON line (delivered, failed, seconds from first send to last report)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": a.bootstrap,
            "acks": a.acks,
            "linger.ms": 5,
            "batch.size": 65536,
            "enable.idempotence": False,
            "queue.buffering.max.kbytes": 65536,
            "message.timeout.ms": 60000,
        }
    )
    value = b"x" * a.size
    counts = {"ok": 0, "failed": 0}

    def cb(err: Any, _msg: Any) -> None:
        counts["failed" if err else "ok"] += 1

    t0 = time.monotonic()
    for i in range(a.count):
        while True:
            try:
                p.produce(a.topic, value, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.005)
        if i % 2000 == 0:
            p.poll(0)
    left = p.flush(a.timeout)
    secs = time.monotonic() - t0
    print(
        json.dumps({"delivered": counts["ok"], "failed": counts["failed"] + left, "seconds": secs}),
        flush=True,
    )
    return 0


def worker_failover_producer(a: argparse.Namespace) -> int:
    """Idempotent acks=all producer at a.rate msg/s to partition 0 until stdin closes. Prints, per poll that
    served delivery reports, `a T N MAXOFF` (T = CLOCK_MONOTONIC of the first report, shared with the
    parent), `e T NAME` per failed delivery, and `d PRODUCED ACKED FAILED` after the final flush."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": a.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 300000,
            **json.loads(a.config_json),  # -X KEY=VALUE
        }
    )
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = sys.stdout
    batch: list[Any] = []  # [t_first, n, max_offset] of the reports served by the current poll
    totals = {"acked": 0, "failed": 0}

    def cb(err: Any, msg: Any) -> None:
        t = time.monotonic()
        if err is not None:
            totals["failed"] += 1
            out.write(f"e {t:.6f} {err.name()}\n")
            return
        totals["acked"] += 1
        if not batch:
            batch.extend([t, 0, -1])
        batch[1] += 1
        batch[2] = max(batch[2], msg.offset())

    def emit() -> None:
        if batch:
            out.write(f"a {batch[0]:.6f} {batch[1]} {batch[2]}\n")
            batch.clear()
        out.flush()

    pad = b"." * max(0, a.size - 12)
    sent = 0
    t0 = time.monotonic()
    while not stop.is_set():
        due = min(int((time.monotonic() - t0) * a.rate) - sent, 1000)
        for _ in range(max(0, due)):
            try:
                p.produce(a.topic, b"%012d" % sent + pad, partition=0, on_delivery=cb)
            except BufferError:
                break
            sent += 1
        p.poll(0.002)
        emit()
    left = p.flush(120)
    emit()
    out.write(f"d {sent} {totals['acked']} {totals['failed'] + left}\n")
    out.flush()
    return 0


# --------------------------------------------------------------------------------------------------------
# load generators for the throughput part


class PythonLoad:
    name = "confluent-kafka Producer in a child process (Python)"

    def produce(
        self, bootstrap: str, topic: str, partitions: int, size: int, acks: str, count: int, timeout: float
    ) -> tuple[Result, Run]:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "produce",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--size",
            str(size),
            "--acks",
            acks,
            "--count",
            str(count),
            "--timeout",
            str(timeout),
        ]
        run = run_bounded(cmd, timeout + 30)
        r = Result(loadgen_cpu_s=run.cpu_s, wall_s=run.wall_s)
        lines = [ln for ln in run.out.splitlines() if ln.startswith("{")]
        if not lines:
            r.note = "no result: " + (run.out + run.err).strip()[-300:]
            return r, run
        d = json.loads(lines[-1])
        r.msgs, r.errors, r.seconds = d["delivered"], d["failed"], d["seconds"]
        r.msgs_per_s = r.msgs / r.seconds if r.seconds else 0.0
        r.mb_per_s = r.msgs * size / r.seconds / 1e6 if r.seconds else 0.0
        if r.errors:
            r.note = f"{r.errors} failed deliveries"
        return r, run


def rdkafka_loadgen() -> RdkafkaPerf | None:
    """rdkafka_performance as bench/broker_bench.py builds it (bench/loadgen/build_rdkafka_perf.sh)."""
    try:
        r = subprocess.run(
            ["bash", str(ROOT / "bench" / "loadgen" / "build_rdkafka_perf.sh")],
            capture_output=True,
            text=True,
            timeout=1200,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"rdkafka_performance unavailable: {exc}")
        return None
    path = Path(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else None
    if path is None or not path.exists():
        log(f"rdkafka_performance unavailable (build_rdkafka_perf.sh exit {r.returncode}): {r.stderr[-500:]}")
        return None
    return RdkafkaPerf(path, WORK / "bin" / "latency_producer")


# --------------------------------------------------------------------------------------------------------
# 1. produce throughput, RF=3 acks=all vs RF=1 acks=1


def wakeups(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` and its descendants: how often the process went to
    sleep and was woken (an event loop blocking in epoll_wait and woken by a socket counts one). Unlike CPU
    seconds, the machine's other load hardly moves it (issue 30)."""
    total = 0
    for p in _proc_tree(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            total += int(line.split()[1])
                            break
            except OSError:
                continue
    return total


def _broker_wakeups(cluster: Cluster) -> dict[int, int]:
    return {bid: wakeups(b.proc.pid) for bid, b in cluster.brokers.items() if b.running and b.proc is not None}


def _listening_ports(pid: int) -> set[int]:
    """TCP ports ``pid`` listens on (its socket inodes matched against /proc/net/tcp's LISTEN rows)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        ports = set()
        for table in ("tcp", "tcp6"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A" and cols[9] in inodes:
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    except OSError:
        return set()
    return ports


def _scrape(port: int) -> dict[str, float]:
    """The replication series of one broker's /metrics: its Fetch requests handled (the followers' fetches, on a
    leader) and its replica fetchers' requests and empty answers, keyed by name and source broker."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except (OSError, ValueError):
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith('tidelog_requests_total{api="Fetch"}'):
            out["fetch"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith(("tidelog_replica_fetcher_requests{", "tidelog_replica_fetcher_empty_responses{")):
            name = "fetcher_requests" if "_requests{" in line else "fetcher_empty"
            source = line.split('source="', 1)[1].split('"', 1)[0]
            key = f"{name}:{source}"
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class _MetricsPorts:
    """Each broker's metrics port (``tidelog.metrics.listener=127.0.0.1:0``: any free port, found from /proc as
    the broker's listening port that is not its Kafka port), looked up again after a restart."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ports: dict[tuple[int, int], int] = {}

    def scrape(self) -> dict[int, dict[str, float]]:
        out = {}
        for bid, b in self.cluster.brokers.items():
            if not b.running or b.proc is None:
                continue
            key = (bid, b.proc.pid)
            if key not in self.ports:
                others = _listening_ports(b.proc.pid) - {b.port}
                if len(others) != 1:
                    continue
                self.ports[key] = others.pop()
            out[bid] = _scrape(self.ports[key])
        return out


def _replication_counts(before: dict[int, dict[str, float]], after: dict[int, dict[str, float]], leader: int,
                        followers: list[int]) -> dict[str, Any]:
    """Follower fetch rounds of one run: the Fetch requests the leader handled, and per follower the requests
    its fetcher sent to the leader and the answers that carried no records (None where a revision has no such
    series)."""
    def delta(bid: int, key: str) -> float | None:
        a, b = after.get(bid, {}).get(key), before.get(bid, {}).get(key, 0.0)
        return None if a is None else a - b

    return {
        "leader_fetches": delta(leader, "fetch"),
        "follower_rounds": [delta(f, f"fetcher_requests:{leader}") for f in followers],
        "follower_empty": [delta(f, f"fetcher_empty:{leader}") for f in followers],
    }


def bench_throughput(
    cluster: Cluster, loadgen: Any, sizes: list[int], counts: dict[int, int], repeats: int, timeout: float,
    producer: dict[str, int] | None = None,
) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict]]] = {str(s): {k: [] for k in CONFIGS} for s in sizes}
    metrics = _MetricsPorts(cluster)
    # warm-up (not recorded): first connections, imports on the brokers' first produce/replication paths
    for key, (_label, rf, acks, cfg) in CONFIGS.items():
        topic = f"warmup-{key}"
        cluster.create_topic(topic, rf, cfg)
        loadgen.produce(cluster.bootstrap, topic, 1, 100, acks, 20000, timeout)
    for size in sizes:
        for rep in range(repeats):
            for key, (label, rf, acks, cfg) in CONFIGS.items():  # A B A B ...: same order every repeat
                topic = f"tp-{key}-{size}b-r{rep}"
                state = cluster.create_topic(topic, rf, cfg)
                c0, m0 = cluster.cpu_seconds(), machine_busy_seconds()
                per0 = {bid: b.cpu_seconds() for bid, b in cluster.brokers.items()}
                w0 = _broker_wakeups(cluster)
                r0 = metrics.scrape()
                res, run = loadgen.produce(cluster.bootstrap, topic, 1, size, acks, counts[size], timeout,
                                           **(producer or {}))
                res.broker_cpu_s = cluster.cpu_seconds() - c0
                # CPU of each broker in the run: the leader's and the followers' (the replicas that are not it)
                per = {bid: b.cpu_seconds() - per0.get(bid, 0.0) for bid, b in cluster.brokers.items()}
                res.extra["leader_cpu_s"] = per.get(state.leader, 0.0)
                res.extra["follower_cpu_s"] = [per[r] for r in state.isr if r != state.leader and r in per]
                woke = {bid: n - w0.get(bid, 0) for bid, n in _broker_wakeups(cluster).items()}
                res.extra["leader_wakeups"] = woke.get(state.leader, 0)
                res.extra["follower_wakeups"] = [woke[r] for r in state.isr if r != state.leader and r in woke]
                res.extra["replication"] = _replication_counts(
                    r0, metrics.scrape(), state.leader, [r for r in state.isr if r != state.leader])
                res.extra["other_cpu_s"] = max(
                    0.0, machine_busy_seconds() - m0 - res.broker_cpu_s - res.loadgen_cpu_s
                )
                after = cluster.state(topic)
                res.extra["leader"] = state.leader
                res.extra["isr_after"] = list(after.isr) if after is not None else None
                if after is not None and len(after.isr) < rf:
                    res.note += f" ISR shrank to {list(after.isr)} during the run"
                if res.msgs == 0 and run.rc != 0:
                    res.note += f" loadgen exit {run.rc}: {(run.out + run.err).strip()[-200:]}"
                runs[str(size)][key].append(asdict(res))
                log(
                    f"[r{rep}] {label:<14} {size:>5} B: {res.msgs_per_s:>10,.0f} msg/s {res.mb_per_s:7.1f} MB/s "
                    f"({res.msgs} msgs in {res.seconds:.2f}s, leader {state.leader}; cpu s brokers "
                    f"{res.broker_cpu_s:.1f} loadgen {res.loadgen_cpu_s:.1f} other {res.extra['other_cpu_s']:.1f})"
                    f"{' ' + res.note.strip() if res.note.strip() else ''}"
                )
    return runs


def _median(rs: list[dict], field: str) -> float | None:
    vals = [r[field] for r in rs if r["msgs"] > 0]
    return statistics.median(vals) if vals else None


def _fmt(v: float | None, unit: str) -> str:
    return "-" if v is None else (f"{v:,.1f}" if unit == "MB/s" else f"{v:,.0f}")


def _range(rs: list[dict], field: str, unit: str) -> str:
    vals = [r[field] for r in rs if r["msgs"] > 0]
    return f"{_fmt(min(vals), unit)}-{_fmt(max(vals), unit)}" if vals else "-"


def _cpu(rs: list[dict]) -> str:
    """Median CPU seconds per run: brokers (all 3) / load generator / rest of the machine."""
    if not rs:
        return "-"
    b = statistics.median(r["broker_cpu_s"] for r in rs)
    g = statistics.median(r["loadgen_cpu_s"] for r in rs)
    o = statistics.median(r["extra"].get("other_cpu_s", 0.0) for r in rs)
    return f"{b:.1f}/{g:.1f}/{o:.1f}"


def _per_record(rs: list[dict], what: str) -> float | None:
    """Median CPU seconds per record over the runs: ``leader`` (the partition leader's process), ``follower``
    (the mean of its followers'), ``brokers`` (all three)."""
    vals = []
    for r in rs:
        if r["msgs"] <= 0:
            continue
        ex = r["extra"]
        if what in ("leader", "leader_wakeups"):
            v = ex.get("leader_cpu_s" if what == "leader" else what)
        elif what in ("follower", "follower_wakeups"):
            fs = ex.get("follower_cpu_s" if what == "follower" else what) or []
            v = sum(fs) / len(fs) if fs else None
        else:
            v = r["broker_cpu_s"]
        if v is not None:
            vals.append(v / r["msgs"])
    return statistics.median(vals) if vals else None


def _rounds(rs: list[dict]) -> str:
    """Fetch rounds of one follower per 1,000 produced records (median of the runs, mean of the followers), and
    in brackets those whose answer carried no records: one round per produced batch is the protocol's floor
    with ``replica.fetch.min.bytes=1``; many empty rounds would mean a fetcher that spins."""
    rounds, empty = [], []
    for r in rs:
        rep = r["extra"].get("replication") or {}
        fr = [v for v in rep.get("follower_rounds") or () if v is not None]
        fe = [v for v in rep.get("follower_empty") or () if v is not None]
        if r["msgs"] > 0 and fr:
            rounds.append(sum(fr) / len(fr) / r["msgs"] * 1e3)
        if r["msgs"] > 0 and fe:
            empty.append(sum(fe) / len(fe) / r["msgs"] * 1e3)
    if not rounds:
        return "-"
    e = f" ({statistics.median(empty):.2f})" if empty else ""
    return f"{statistics.median(rounds):.2f}{e}"


def cpu_ratio_table(runs: dict[str, Any]) -> str:
    """Issue 30 goal 1: a follower's CPU per replicated record against the leader's (<= 0.5x), and the RF=3
    cluster's CPU per record against the one broker of RF=1 (<= 3x). Medians over the runs of CPU seconds per
    record of each process, which the machine's other load moves far less than msg/s."""
    header = [
        "size",
        "RF=1 broker us/rec",
        "RF=3 leader us/rec",
        "RF=3 follower us/rec",
        "RF=3 cluster us/rec",
        "follower/leader (goal <= 0.5)",
        "cluster/RF=1 (goal <= 3)",
        "wake-ups/1k rec RF=1 / leader / follower",
        "follower fetches/1k rec (empty)",
    ]
    rows = []
    for size, by in runs.items():
        one = _per_record(by["rf1"], "leader")
        lead, fol, clu = (_per_record(by["rf3"], w) for w in ("leader", "follower", "brokers"))
        wakes = (_per_record(by["rf1"], "leader_wakeups"), _per_record(by["rf3"], "leader_wakeups"),
                 _per_record(by["rf3"], "follower_wakeups"))

        def us(v: float | None) -> str:
            return "-" if v is None else f"{v * 1e6:.2f}"

        rows.append([
            f"{size} B", us(one), us(lead), us(fol), us(clu),
            f"{fol / lead:.2f}x" if fol and lead else "-",
            f"{clu / one:.2f}x" if clu and one else "-",
            " / ".join("-" if w is None else f"{w * 1e3:.1f}" for w in wakes),
            _rounds(by["rf3"]),
        ])
    return _render(header, rows)


def throughput_table(runs: dict[str, Any]) -> str:
    a, b = "rf1", "rf3"
    header = [
        "metric (median of runs)",
        CONFIGS[a][0],
        f"{CONFIGS[b][0]}, min.isr=2",
        "RF3/RF1",
        "RF=1 runs min-max",
        "RF=3 runs min-max",
        "cpu s RF=1",
        "cpu s RF=3",
    ]
    rows = []
    for size, by in runs.items():
        for field, unit in (("msgs_per_s", "msg/s"), ("mb_per_s", "MB/s")):
            va, vb = _median(by[a], field), _median(by[b], field)
            rows.append(
                [
                    f"produce {unit:<5} {size} B",
                    _fmt(va, unit),
                    _fmt(vb, unit),
                    f"{vb / va:.2f}x" if va and vb else "-",
                    _range(by[a], field, unit),
                    _range(by[b], field, unit),
                    _cpu(by[a]) if field == "msgs_per_s" else "",
                    _cpu(by[b]) if field == "msgs_per_s" else "",
                ]
            )
    return _render(header, rows)


# --------------------------------------------------------------------------------------------------------
# 2. failover


class FailoverProducer:
    """The idempotent acks=all producer child and a reader thread collecting its delivery reports."""

    def __init__(
        self, bootstrap: str, topic: str, rate: float, size: int, log_path: Path, config: dict[str, str]
    ) -> None:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "failover-producer",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--rate",
            str(rate),
            "--size",
            str(size),
            "--config-json",
            json.dumps(config),
        ]
        self._err = open(log_path, "ab")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            start_new_session=True,
        )
        track(self.proc)
        self.acks: list[tuple[float, int, int]] = []  # (monotonic time, reports, max offset)
        self.errors: list[tuple[float, str]] = []
        self.done: tuple[int, int, int] | None = None
        self.cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            with self.cond:
                if parts[:1] == ["a"]:
                    self.acks.append((float(parts[1]), int(parts[2]), int(parts[3])))
                elif parts[:1] == ["e"]:
                    self.errors.append((float(parts[1]), parts[2]))
                elif parts[:1] == ["d"]:
                    self.done = (int(parts[1]), int(parts[2]), int(parts[3]))
                self.cond.notify_all()

    def acked(self) -> int:
        with self.cond:
            return sum(n for _, n, _ in self.acks)

    def first_ack_after(self, t: float) -> tuple[float, int] | None:
        with self.cond:
            for ta, _n, off in self.acks:
                if ta > t:
                    return ta, off
        return None

    def acks_between(self, t0: float, t1: float) -> int:
        with self.cond:
            return sum(n for ta, n, _ in self.acks if t0 < ta < t1)

    def wait(self, what: str, pred: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                r = pred()
                if r:
                    return r
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise RuntimeError(
                        f"the failover producer exited ({self.proc.returncode}) waiting for {what}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                self.cond.wait(min(left, 0.5))

    def finish(self, timeout: float = 180.0) -> tuple[int, int, int] | None:
        """Close its stdin (it stops producing and flushes); returns (produced, acked, failed)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout)
        except (subprocess.TimeoutExpired, OSError):
            pass
        kill_group(self.proc)
        self._reader.join(10)
        self._err.close()
        return self.done


class StateWatch:
    """Timestamps (CLOCK_MONOTONIC at the watch callback) of every change of the partition's state znode and
    of the set of registered brokers, from the benchmark's own ZooKeeper session."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        from tidelog.cluster import zkdata as zd

        self.cluster = cluster

        self.states: list[tuple[float, Any]] = []
        self.cond = threading.Condition()

        def on_state(data: bytes | None, stat: Any) -> None:
            t = time.monotonic()
            if data:
                with self.cond:
                    self.states.append((t, zd.decode_state(data, stat.version)))
                    self.cond.notify_all()

        # each broker's registration: (time, czxid or None). A broker restarted at once may close its old session
        # and register again before a children watch re-reads the list, so its absence can be missed there; a new
        # registration has a new czxid
        self.regs: dict[int, list[tuple[float, int | None]]] = {}

        def on_reg(bid: int) -> Any:
            def cb(_data: bytes | None, stat: Any) -> None:
                t = time.monotonic()
                with self.cond:
                    self.regs.setdefault(bid, []).append((t, stat.czxid if stat is not None else None))
                    self.cond.notify_all()
            return cb

        cluster.kz.DataWatch(zd.state_path(topic, 0), on_state)
        for bid in cluster.brokers:
            cluster.kz.DataWatch(zd.broker_path(bid), on_reg(bid))

    def wait(self, what: str, pred: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                r = pred()
                if r:
                    return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                self.cond.wait(min(left, 0.5))
                self.cluster.check_running()

    def first_state(self, after: float, pred: Any) -> tuple[float, Any] | None:
        return next(((t, s) for t, s in self.states if t >= after and pred(s)), None)

    def registration(self, bid: int) -> int | None:
        """The czxid of broker ``bid``'s registration as last seen (None: not registered)."""
        with self.cond:
            r = self.regs.get(bid)
            return r[-1][1] if r else None

    def registration_gone(self, bid: int, after: float, czxid: int | None) -> tuple[float, int | None] | None:
        """When, after ``after``, broker ``bid``'s registration ``czxid`` was deleted (absent or a newer one)."""
        return next(((t, z) for t, z in self.regs.get(bid, ()) if t >= after and z != czxid), None)


def _metadata_names(admin: Any, topic: str, leader: int, timeout: float) -> float:
    """Poll Metadata until it names `leader` for partition 0; the monotonic time of that response."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            if md is not None and 0 in md.partitions and md.partitions[0].leader == leader:
                return time.monotonic()
        except Exception:  # KafkaException while a broker is gone: ask again
            pass
        time.sleep(0.01)  # polling interval
    raise TimeoutError(
        f"Metadata did not name broker {leader} as the leader of {topic}-0 within {timeout:.0f}s"
    )


def bench_failover(
    cluster: Cluster,
    n: int,
    rate: float,
    size: int,
    session_ms: int,
    run_dir: Path,
    producer_config: dict[str, str],
    stop_signal: str = "kill",
    restart_at_once: bool = False,
) -> dict:
    """``stop_signal`` "kill": SIGKILL, nothing moves before the session expires; "term": SIGTERM, the broker's
    controlled shutdown moves the leadership, then it exits (the first ack is counted from the election).
    ``restart_at_once``: the killed broker is started again right after the kill (as a supervisor would), instead
    of after the failover; "restart -> back in the ISR" then counts from the kill."""
    from confluent_kafka.admin import AdminClient

    topic = "failover"
    cluster.create_topic(topic, 3, {"min.insync.replicas": "2"})
    watch = StateWatch(cluster, topic)
    prod = FailoverProducer(
        cluster.bootstrap, topic, rate, size, run_dir / "failover-producer.log", producer_config
    )
    samples: list[dict] = []
    error = None
    budget = session_ms / 1000 + 120  # generous: the machine is shared and loaded
    try:
        prod.wait("the producer's first acknowledgements", lambda: prod.acked() >= 50, 120)
        for i in range(n):
            t_settled = time.monotonic()
            before = prod.acked()
            prod.wait(
                "acknowledgements flowing before the kill", lambda b=before: prod.acked() >= b + 20, budget
            )
            s = cluster.state(topic)
            assert s is not None and s.leader > 0 and len(s.isr) == 3, f"not settled before the kill: {s}"
            leader = s.leader
            was_controller = cluster.controller() == leader
            # a connected admin client on the survivors, to see when their Metadata names the new leader
            survivors = ",".join(b.bootstrap for b in cluster.brokers.values() if b.id != leader)
            probe = AdminClient(
                {"bootstrap.servers": survivors, "log_level": 0}
            )  # refused connects are expected
            probe.list_topics(topic=topic, timeout=30)
            victim = cluster.brokers[leader]
            reg = watch.registration(leader)
            t_kill = victim.kill9() if stop_signal == "kill" else victim.terminate()
            if restart_at_once:
                if stop_signal != "kill":
                    victim.wait_exit(budget)
                victim.start()
            gone = watch.wait(
                f"broker {leader}'s registration to disappear",
                lambda ld=leader, t=t_kill, z=reg: watch.registration_gone(ld, t, z),
                budget,
            )
            elected = watch.wait(
                "a new leader in the state znode",
                lambda ld=leader, t=t_kill: watch.first_state(
                    t, lambda st: st.leader > 0 and st.leader != ld
                ),
                budget,
            )
            t_metadata = _metadata_names(probe, topic, elected[1].leader, budget)
            # only the new leader can acknowledge once the dead broker's session is gone; reports served
            # between the kill and then are responses the killed leader sent before it died. After SIGTERM the
            # old leader stops leading at the election (it then answers NOT_LEADER_OR_FOLLOWER)
            t_ref = gone[0] if stop_signal == "kill" else elected[0]
            first = prod.wait(
                "the first acknowledgement after the failover",
                lambda t=t_ref: prod.first_ack_after(t),
                budget,
            )
            stale = prod.acks_between(t_kill, t_ref)
            if restart_at_once:
                t_restart = t_kill
            else:
                victim.wait_exit(budget)
                t_restart = time.monotonic()
                victim.start()
            back = watch.wait(
                f"broker {leader} back in the ISR",
                lambda ld=leader, t=t_restart: watch.first_state(t, lambda st: ld in st.isr),
                budget,
            )
            sample = {
                "killed": leader,
                "was_controller": was_controller,
                "new_leader": elected[1].leader,
                "leader_epoch": elected[1].leader_epoch,
                "session_expired_s": gone[0] - t_kill,
                "new_leader_s": elected[0] - t_kill,
                "metadata_s": t_metadata - t_kill,
                "first_ack_s": first[0] - t_kill,
                "leader_to_ack_s": first[0] - elected[0],
                "first_ack_offset": first[1],
                "stale_reports": stale,
                "rejoin_isr_s": back[0] - t_restart,
                "settle_s": t_kill - t_settled,
            }
            samples.append(sample)
            log(
                f"[failover {i + 1}/{n}] killed {leader}{' (controller)' if was_controller else ''}: session gone "
                f"{sample['session_expired_s']:.2f}s, new leader {sample['new_leader']} at "
                f"{sample['new_leader_s']:.2f}s (epoch {sample['leader_epoch']}), in Metadata {sample['metadata_s']:.2f}s, "
                f"first ack "
                f"{sample['first_ack_s']:.2f}s (+{sample['leader_to_ack_s']:.2f}s after the election); "
                f"restarted, back in the ISR after {sample['rejoin_isr_s']:.2f}s"
            )
    except (TimeoutError, RuntimeError, AssertionError) as exc:  # ProcessExited is a RuntimeError
        error = f"{type(exc).__name__}: {exc}"
        log(f"[failover] stopped: {error}")
    # the producer stops, flushes; with idempotence every produced record is acked once, so the partition's
    # end offset must equal the acks
    for b in cluster.brokers.values():
        if not b.running:
            b.start()
    done = prod.finish()
    end = None
    try:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cluster-bench-check"})
        try:
            end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        finally:
            c.close()
    except Exception as exc:
        log(f"[failover] end offset unavailable: {exc}")
    return {
        "samples": samples,
        "error": error,
        "producer": done,
        "end_offset": end,
        "errors": prod.errors[:20],
        "rate": rate,
        "size": size,
        "session_timeout_ms": session_ms,
        "producer_config": producer_config,
        "signal": stop_signal,
        "restart_at_once": restart_at_once,
    }


def pct(vals: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(vals)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def failover_table(f: dict) -> str:
    ss = f["samples"]
    what = "kill -9" if f.get("signal", "kill") == "kill" else "SIGTERM (controlled shutdown)"
    if f.get("restart_at_once"):
        what += ", restarted at once,"
    header = [f"failover, {what} of the leader (s)", "p50", "p99", "max", "min"]
    rows = []
    for key, label in (
        ("session_expired_s", "kill -> its ZooKeeper session ended"),
        ("new_leader_s", "kill -> new leader in the state znode"),
        ("metadata_s", "kill -> survivors' Metadata names it"),
        ("first_ack_s", "kill -> first acknowledged produce"),
        ("leader_to_ack_s", "  of which: new leader -> first ack"),
        ("rejoin_isr_s", "restart -> back in the ISR"),
    ):
        vals = [s[key] for s in ss]
        rows.append(
            [label]
            + (
                [f"{pct(vals, q):.2f}" for q in (0.5, 0.99)] + [f"{max(vals):.2f}", f"{min(vals):.2f}"]
                if vals
                else ["-"] * 4
            )
        )
    for flag, label in ((False, "leader only"), (True, "leader and controller")):
        vals = [s["first_ack_s"] for s in ss if s["was_controller"] == flag]
        if vals:
            rows.append(
                [
                    f"kill -> first ack, {label} (n={len(vals)})",
                    f"{pct(vals, 0.5):.2f}",
                    f"{pct(vals, 0.99):.2f}",
                    f"{max(vals):.2f}",
                    f"{min(vals):.2f}",
                ]
            )
    return _render(header, rows)


# --------------------------------------------------------------------------------------------------------


def _render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths)), "-+-".join("-" * w for w in widths)]
    for r in rows:
        lines.append(
            " | ".join((c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in enumerate(zip(r, widths)))
        )
    return "\n".join(lines)


def _raise_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter: fewer messages, 3 repeats, 5 failovers")
    ap.add_argument("--only", choices=["throughput", "failover"], default=None)
    ap.add_argument("--sizes", default="100,1024", help="value sizes in bytes (default 100,1024)")
    ap.add_argument(
        "--repeats", type=int, default=None, help="runs per configuration and size (default 5, quick 3)"
    )
    ap.add_argument(
        "--count-100",
        type=int,
        default=None,
        help="messages per run at 100 B (default 3000000, quick 1000000)",
    )
    ap.add_argument(
        "--count-1k", type=int, default=None, help="messages per run at 1 KiB (default 400000, quick 150000)"
    )
    ap.add_argument("--timeout", type=float, default=60.0, help="cap per load-generator run, seconds")
    ap.add_argument(
        "--batch-kib", type=int, default=None,
        help="the load generator's batch.size in KiB (default 64; rdkafka_performance only): with --linger-ms, "
        "fewer produce requests and follower rounds for the same records (issue 30)",
    )
    ap.add_argument("--linger-ms", type=int, default=None, help="the load generator's linger.ms (default 5)")
    ap.add_argument(
        "--rf3-acks",
        choices=["all", "1"],
        default="all",
        help="acks of the RF=3 runs (default all; 1 is a diagnostic: the copies without the acks=all coupling of "
        "produce and follower rounds, issue 30)",
    )
    ap.add_argument(
        "--loadgen",
        choices=["rdkafka", "python"],
        default="rdkafka",
        help="rdkafka_performance (falls back to python if it cannot be built)",
    )
    ap.add_argument("--failovers", type=int, default=None, help="kill -9 iterations (default 10)")
    ap.add_argument("--signal", choices=["kill", "term"], default="kill",
                    help="how the leader is stopped: kill = SIGKILL (default), term = SIGTERM (controlled shutdown)")
    ap.add_argument("--restart-at-once", action="store_true",
                    help="start the stopped leader again right away (as a supervisor would), not after the failover")
    ap.add_argument(
        "-X",
        dest="producer_config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka property for the failover producer (repeatable), e.g. -X retry.backoff.max.ms=100",
    )
    ap.add_argument("--failover-rate", type=float, default=1000.0, help="msg/s of the failover producer")
    ap.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6000,
        help="brokers' zookeeper.session.timeout.ms (default 6000; Kafka's default is 18000)",
    )
    ap.add_argument(
        "-o",
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker property for all 3 brokers (repeatable), e.g. -o replica.fetch.backoff.ms=200",
    )
    ap.add_argument("--log-level", default="WARNING", help="brokers' --log-level (default WARNING)")
    ap.add_argument(
        "--tidelog-rev",
        default="HEAD",
        help="git revision run by the brokers, exported to the run dir (default HEAD); 'worktree' "
        "runs the live work tree",
    )
    ap.add_argument("--keep", action="store_true", help="keep the data dirs under bench/.work/runs/")
    ap.add_argument("--worker", choices=["produce", "failover-producer"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=100, help=argparse.SUPPRESS)
    ap.add_argument("--acks", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=1000.0, help=argparse.SUPPRESS)
    ap.add_argument("--config-json", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rf3_acks == "1":
        CONFIGS["rf3"] = ("RF=3 acks=1", 3, "1", {"min.insync.replicas": "2"})
    if args.worker == "produce":
        return worker_produce(args)
    if args.worker == "failover-producer":
        return worker_failover_producer(args)

    why = ZooKeeper.available()
    if why:
        log(f"cannot run: {why}")
        return 2
    sizes = [int(x) for x in args.sizes.split(",")]
    repeats = args.repeats or (3 if args.quick else 5)
    n_failovers = args.failovers if args.failovers is not None else (5 if args.quick else 10)
    c100 = args.count_100 or (1_000_000 if args.quick else 3_000_000)
    c1k = args.count_1k or (150_000 if args.quick else 400_000)
    counts = {s: c100 if s == 100 else c1k if s == 1024 else max(1000, c1k * 1024 // s) for s in sizes}
    kinds = [args.only] if args.only else ["throughput", "failover"]
    producer_config: dict[str, str] = {}
    for kv in args.producer_config:
        if "=" not in kv:
            ap.error(f"-X expects KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        producer_config[k.strip()] = v.strip()

    loadgen: Any = None
    if "throughput" in kinds:
        loadgen = rdkafka_loadgen() if args.loadgen == "rdkafka" else None
        if loadgen is None:
            loadgen = PythonLoad()
            if args.loadgen == "rdkafka":
                log("falling back to the Python load generator")
    producer: dict[str, int] = {}
    if args.batch_kib is not None:
        producer["batch_size"] = args.batch_kib * 1024
    if args.linger_ms is not None:
        producer["linger_ms"] = args.linger_ms
    if producer and isinstance(loadgen, PythonLoad):
        ap.error("--batch-kib/--linger-ms need rdkafka_performance")

    runs_root = WORK / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("cluster-%Y%m%d-%H%M%S-"), dir=runs_root))
    commit = "work tree"
    if args.tidelog_rev != "worktree":
        commit = snapshot_tidelog(run_dir / "tidelog-src", args.tidelog_rev)
        os.environ["TIDELOG_BENCH_SRC"] = str(run_dir / "tidelog-src" / "src")
        log(f"brokers run commit {commit[:12]} (exported to {run_dir / 'tidelog-src'})")

    overrides = {
        "zookeeper.session.timeout.ms": str(args.session_timeout_ms),
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # leaderships stay where failures put them; the periodic rebalance would move them mid-measurement
        "auto.leader.rebalance.enable": "false",
        # metrics on any free port: the follower fetch rounds per run are read from them (issue 30)
        "tidelog.metrics.listener": "127.0.0.1:0",
    }
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    for kv in args.broker_config:
        if "=" not in kv:
            ap.error(f"-o expects KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        overrides[k.strip()] = v.strip()
    old_term = signal.signal(signal.SIGTERM, _raise_exit)
    old_hup = signal.signal(signal.SIGHUP, _raise_exit)
    cluster = Cluster(
        run_dir / "cluster",
        overrides,
        log_level=args.log_level,
        max_session_timeout_ms=max(60000, args.session_timeout_ms * 2),
    )
    out: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "tidelog_commit": commit,
        "cpu_count": os.cpu_count(),
        "broker_overrides": overrides,
        "sizes": sizes,
        "counts": counts,
        "repeats": repeats,
        "loadgen": getattr(loadgen, "name", None),
        "producer": producer,
    }
    load0 = os.getloadavg()
    try:
        log(f"starting ZooKeeper and 3 brokers in {run_dir / 'cluster'}")
        cluster.start()
        log(
            f"cluster up: ZooKeeper {cluster.zk.connect}, brokers {cluster.bootstrap}, controller "
            f"{cluster.controller()}"
        )
        if "throughput" in kinds:
            log(f"throughput: {loadgen.name}; messages per run {counts}; {repeats} alternating repeats")
            out["throughput"] = bench_throughput(cluster, loadgen, sizes, counts, repeats, args.timeout, producer)
        if "failover" in kinds:
            log(
                f"failover: {n_failovers} {'kill -9' if args.signal == 'kill' else 'SIGTERM'} of the leader, "
                f"producer {args.failover_rate:.0f} msg/s, "
                f"zookeeper.session.timeout.ms={args.session_timeout_ms}"
            )
            out["failover"] = bench_failover(
                cluster,
                n_failovers,
                args.failover_rate,
                100,
                args.session_timeout_ms,
                run_dir,
                producer_config,
                args.signal,
                args.restart_at_once,
            )
    except BaseException as exc:
        log(f"stopping on {type(exc).__name__}: {exc}; killing every process started here")
        raise
    finally:
        cluster.stop()
        kill_all()
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGHUP, old_hup)
        if not args.keep:
            shutil.rmtree(run_dir / "cluster", ignore_errors=True)
            shutil.rmtree(run_dir / "tidelog-src", ignore_errors=True)
    load1 = os.getloadavg()
    out["loadavg_start"], out["loadavg_end"] = load0, load1
    (run_dir / "results.json").write_text(json.dumps(out, indent=2))

    ok = True
    cluster_tick_ms = cluster.zk.tick_ms
    print()
    print(
        f"tidelog cluster benchmark: 1 ZooKeeper + 3 `tidelog serve` brokers (commit {commit[:12]}) on "
        f"{os.cpu_count()} cores shared with the load generator and everything else running; load average "
        f"{load0[0]:.2f} at start, {load1[0]:.2f} at end"
    )
    print(
        f"  broker properties set: {' '.join(f'{k}={v}' for k, v in overrides.items())}; all others default"
    )
    if "throughput" in out:
        print(
            f"\nproduce throughput, 1 partition, same cluster, load generator {loadgen.name}; messages per run "
            f"{counts}, no keys, linger.ms={producer.get('linger_ms', 5)}, batch.size="
            f"{producer.get('batch_size', 65536) // 1024} KiB, idempotence off; median of {repeats} runs per "
            f"cell, alternating RF=1, RF=3, RF=1, RF=3 ...; each run on a fresh topic; cpu s = median CPU "
            f"seconds per run of the 3 brokers / the load generator / the rest of the machine\n"
        )
        print(throughput_table(out["throughput"]))
        print(
            "\nCPU per record (issue 30 goal 1): microseconds of CPU per produced record of each broker process, "
            "median of the runs; follower = mean of the partition's two followers\n"
        )
        print(cpu_ratio_table(out["throughput"]))
        for by in out["throughput"].values():
            for rs in by.values():
                for r in rs:
                    if r["note"].strip() or not r["msgs"]:
                        print(f"  note: {r['note'].strip() or 'no messages delivered'}")
                        ok = ok and r["msgs"] > 0
    if "failover" in out:
        f = out["failover"]
        ss = f["samples"]
        n_ctrl = sum(s["was_controller"] for s in ss)
        print(
            f"\nfailover: idempotent acks=all producer at {f['rate']:.0f} msg/s ({f['size']} B) to an RF=3 topic "
            f"(min.insync.replicas=2); {len(ss)} {'kill -9' if f['signal'] == 'kill' else 'SIGTERM'} of the partition leader ({n_ctrl} of them also the "
            f"controller); zookeeper.session.timeout.ms={f['session_timeout_ms']} (ZooKeeper tickTime {cluster_tick_ms} ms); "
            f"times from the kill, CLOCK_MONOTONIC; producer overrides {f['producer_config'] or 'none'}\n"
        )
        print(failover_table(f))
        if ss and f["signal"] == "kill":
            exp = [s["session_expired_s"] * 1000 / f["session_timeout_ms"] for s in ss]
            dom = statistics.median(
                s["session_expired_s"] / s["first_ack_s"] for s in ss if s["first_ack_s"] > 0
            )
            print(
                f"\n  dominant term: the ZooKeeper session timeout -- the dead broker's session expiring is "
                f"{dom:.0%} (median) of kill -> first ack; the rest is the controller's election and the "
                f"new leader taking over until an acks=all produce completes. kill -> session expiry was "
                f"{min(exp):.2f}-{max(exp):.2f} x the session timeout (it counts from the broker's last "
                f"heartbeat, and ZooKeeper expires sessions on {cluster_tick_ms} ms tick boundaries)"
            )
            stale = sum(s["stale_reports"] for s in ss)
            print(
                f"  delivery reports served between a kill and the session expiry (responses the killed leader "
                f"sent before it died, not counted as failover acks): {stale}"
            )
        prod, end = f["producer"], f["end_offset"]
        if prod is not None:
            produced, acked, failed = prod
            clean = failed == 0 and acked == produced and end == acked
            ok = ok and clean
            print(
                f"  producer: {produced} produced, {acked} acknowledged, {failed} failed; partition end offset "
                f"{end} -> {'OK (no loss, no duplicates)' if clean else 'MISMATCH'}"
            )
        else:
            ok = False
            print("  producer: no final tally")
        if f["errors"]:
            print(f"  delivery errors: {f['errors']}")
        if f["error"]:
            ok = False
            print(f"  incomplete: {f['error']}")
    print(f"\nresults: {run_dir / 'results.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except ProcessExited as exc:  # already logged with the end of the broker's log
        print(f"cluster_bench: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        kill_all()
