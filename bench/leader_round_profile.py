"""Profile the leader of an RF=3 acks=all partition per follower fetch round (issue 30 goal 1).

    .venv/bin/python bench/leader_round_profile.py --size 1024 --count 600000 --delay 4 \
        --probe 'strace -c -f -p {pid} -o /tmp/x.txt' --probe-seconds 6

Starts ZooKeeper and 3 brokers (bench/_cluster_harness.py, the same overrides as cluster_bench.py), creates one
RF=3 topic (min.insync.replicas=2), produces ``--count`` records with rdkafka_performance at acks=all, and
``--delay`` seconds into the run starts each ``--probe`` command with ``{pid}`` replaced by the leader's pid,
stopping it with SIGINT after ``--probe-seconds``. Over the probe's window it prints the records produced (the
leader's LEO moved, from its log), the followers' fetch rounds (their ``tidelog_replica_fetcher_requests``),
the leader's CPU and wake-ups, and these per round: what a probe's own output counts can be divided by it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cluster_harness import Cluster, kill_all
from cluster_bench import _MetricsPorts, rdkafka_loadgen, wakeups
from peers import WORK
from tidelog_revs import snapshot_tidelog


def _records(cluster: Cluster, leader: int, topic: str) -> int:
    """The partition's latest offset by ListOffsets through an AdminClient (no consumer: a group would make the
    brokers create __consumer_offsets inside the measured window)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": cluster.brokers[leader].bootstrap})
    tp = TopicPartition(topic, 0)
    return int(admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)[tp].result(10).offset)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--count", type=int, default=600_000)
    ap.add_argument("--delay", type=float, default=4.0, help="seconds into the produce run before the probes")
    ap.add_argument("--probe", action="append", default=[], help="command; {pid} = the leader's pid")
    ap.add_argument("--probe-seconds", type=float, default=6.0)
    ap.add_argument("--rf", type=int, default=3, help="replication factor of the profiled topic (1: acks=1)")
    ap.add_argument("--tidelog-rev", default="worktree")
    ap.add_argument("-o", "--broker-config", action="append", default=[])
    ap.add_argument("--keep", action="store_true", help="keep the run dir (data dirs: ~3 GB per 1,000,000 x 1 KiB)")
    a = ap.parse_args()
    (WORK / "runs").mkdir(parents=True, exist_ok=True)  # a fresh checkout has no bench/.work/runs yet
    run_dir = Path(tempfile.mkdtemp(prefix="leaderprof-", dir=WORK / "runs"))
    if a.tidelog_rev != "worktree":
        snapshot_tidelog(run_dir / "tidelog-src", a.tidelog_rev)
        os.environ["TIDELOG_BENCH_SRC"] = str(run_dir / "tidelog-src" / "src")
    overrides = {
        "zookeeper.session.timeout.ms": "6000", "default.replication.factor": "3", "min.insync.replicas": "2",
        "num.partitions": "1", "auto.create.topics.enable": "false", "auto.leader.rebalance.enable": "false",
        "tidelog.metrics.listener": "127.0.0.1:0",
    }
    for kv in a.broker_config:
        k, v = kv.split("=", 1)
        overrides[k] = v
    loadgen = rdkafka_loadgen()
    assert loadgen is not None
    cluster = Cluster(run_dir / "cluster", overrides)
    try:
        cluster.start()
        metrics = _MetricsPorts(cluster)
        cluster.create_topic("warm", 3)
        loadgen.produce(cluster.bootstrap, "warm", 1, a.size, "all", 20000, 60)
        state = cluster.create_topic("prof", a.rf)
        acks = "all" if a.rf > 1 else "1"
        leader = state.leader
        followers = [r for r in state.isr if r != leader]
        lb = cluster.brokers[leader]
        assert lb.proc is not None
        pid = lb.proc.pid
        print(f"leader {leader} pid {pid}, followers {followers}", flush=True)
        result: dict = {}

        def produce() -> None:
            result["res"] = loadgen.produce(cluster.bootstrap, "prof", 1, a.size, acks, a.count, 120)

        t = threading.Thread(target=produce)
        t.start()
        time.sleep(a.delay)
        m0 = metrics.scrape()
        r0 = _records(cluster, leader, "prof")
        f0 = [cluster.brokers[f].cpu_seconds() for f in followers]
        c0, w0, t0 = lb.cpu_seconds(), wakeups(pid), time.monotonic()
        procs = [subprocess.Popen(shlex.split(p.replace("{pid}", str(pid))), start_new_session=True)
                 for p in a.probe]
        time.sleep(a.probe_seconds)
        for p in procs:
            os.killpg(p.pid, signal.SIGINT)
        c1, w1, t1 = lb.cpu_seconds(), wakeups(pid), time.monotonic()
        fcpu = [cluster.brokers[f].cpu_seconds() - x for f, x in zip(followers, f0)]
        r1 = _records(cluster, leader, "prof")
        m1 = metrics.scrape()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        t.join()
        rounds = sum(m1[f].get(f"fetcher_requests:{leader}", 0) - m0[f].get(f"fetcher_requests:{leader}", 0)
                     for f in followers)
        fetches = m1[leader].get("fetch", 0) - m0[leader].get("fetch", 0)
        recs = r1 - r0
        cpu = c1 - c0
        print(f"window {t1 - t0:.2f}s: records {recs}, follower rounds {rounds:.0f} "
              f"(leader Fetch requests {fetches:.0f}), leader CPU {cpu:.2f}s, wake-ups {w1 - w0}", flush=True)
        if recs:
            print(f"leader CPU us/record {1e6 * cpu / recs:.2f}; followers "
                  + " / ".join(f"{1e6 * x / recs:.2f}" for x in fcpu))
        if recs and rounds:
            print(f"per 1,000 records: rounds {1000 * rounds / recs:.2f}; leader CPU us/record "
                  f"{1e6 * cpu / recs:.2f}; per round: leader CPU {1e6 * cpu / rounds:.0f} us, records "
                  f"{recs / rounds:.0f}, wake-ups {(w1 - w0) / rounds:.2f}", flush=True)
        res = result.get("res")
        if res:
            print(f"produce: {res[0].msgs_per_s:,.0f} msg/s {res[0].note}", flush=True)
    finally:
        cluster.stop()
        kill_all()
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
