"""The CI subset of the Jepsen-style runs (bench/jepsen.py runs the long ones), and the proof that the harness can
fail.

* ``test_no_anomalies``: a few seeds of each workload, short fault phases, acks=all / min.insync.replicas=2 /
  RF=3 / unclean election off: the checker must find no anomaly (of a type not allowed).
* ``test_acks1_loss_is_seen``: acks=1, the leader cut from its followers (clients and ZooKeeper still reach it), so
  it acknowledges records nobody replicated; then kill -9 of the leader: a follower (still in the ISR) takes
  over, the restarted old leader truncates, and the acknowledged records are gone -- as Kafka documents for
  acks=1. Writes go on after the recovery (the final read covers the lost offsets). The checker must report
  exactly those 20 as ``lost-write`` (and their 20 offsets as ``divergence``: acked with one value, read with
  another).

Needs root (network namespaces), ZooKeeper and java; skipped otherwise. Everything a run starts is killed and
every namespace removed at its end (``Db.close`` in ``finally``, ``atexit``, stale nets of dead owners at start).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kazoo")
import checker
import netspace
import nodes
from confluent_kafka import Producer
from recorder import History
from runner import Options, run
from txnload import final_read

pytestmark = pytest.mark.skipif(
    bool(netspace.available()) or not nodes.ZK_SERVER.exists() or shutil.which("java") is None,
    reason=f"needs root and ip netns ({netspace.available()}) and ZooKeeper + java")


@pytest.fixture
def out(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    nodes.kill_all()  # whatever a failed run left (runner.run closes its own Db in finally)


def _invalid(report: Any) -> dict[str, int]:
    counts = report.stats.get("anomaly_counts", {})
    return {k: v for k, v in counts.items() if k not in report.allowed}


# each run draws its faults from these kinds, restricted to the variants listed (the classic cases are covered)
CASES = [
    ("queue", 11, ["partition", "kill"], ["leader-zk", "leader"]),  # split brain: leader cut from ZooKeeper only
    ("queue", 12, ["pause", "clock"], ["leader"]),
    ("txn", 21, ["partition", "pause"], ["leader-followers", "split", "coordinator", "zk"]),
    ("txn", 22, ["kill", "clock", "partition"], ["isolate"]),
]


@pytest.mark.parametrize("workload,seed,nemesis,variants", CASES)
def test_no_anomalies(out: Path, workload: str, seed: int, nemesis: list[str], variants: list[str]) -> None:
    s = run(Options(workload=workload, nemesis=nemesis, variants=variants, time_limit=20, seed=seed, quiet=3,
                    out=out))
    report = checker.check_file(out / "history.jsonl")
    assert s["faults"], "the nemesis injected no fault"
    assert not s.get("recovery_failed"), s["recovery_failed"]
    assert all(s["final_read"].values()), s["final_read"]
    assert s["harness_errors"] == [], s["harness_errors"]
    if s["hung_client_calls"]:  # librdkafka#5456: the client is replaced, the run goes on; not a broker anomaly
        print("hung client calls:", s["hung_client_calls"])
    assert report.valid and not _invalid(report), (
        f"{_invalid(report)} in {out}: {json.dumps(report.stats.get('anomaly_counts'))}")
    assert s["acked_beyond_final_end"]["count"] == 0, s["acked_beyond_final_end"]
    acked = s["ops"].get("send:ok", 0) + s["ops"].get("txn:ok", 0)
    assert acked > 10, s["ops"]


def test_acks1_loss_is_seen(out: Path) -> None:
    db = nodes.Db(out / "db", props=nodes.broker_props(min_insync=1))
    h = History(out / "history.jsonl")
    h.add("runner", "info", "meta", {"workload": "queue", "acks": "1", "min_insync": 1, "rf": 3, "unclean": False,
                                     "seed": 0, "nemesis": ["partition", "kill"], "clients": 1})
    try:
        db.start()
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": db.bootstrap})  # alive until its future completes
        admin.create_topics([NewTopic("jl", 1, 3)])["jl"].result(60)
        nodes.wait_until("jl with a full ISR", lambda: len(db.leader_isr("jl", 0)[1]) == 3)
        pid = h.new_process()
        v = {"role": "producer", "client": "confluent-kafka", "transactional": False,
             "isolation": "read_uncommitted", "mode": None, "group": None}
        h.add(pid, "invoke", "open", v)
        p = Producer({"bootstrap.servers": db.bootstrap, "acks": "1", "linger.ms": 0, "message.timeout.ms": 20000})
        h.add(pid, "ok", "open", v)

        def send(value: int) -> int:
            out_: list[Any] = []
            h.add(pid, "invoke", "send", [["send", "jl/0", value]])
            p.produce("jl", str(value).encode(), partition=0, on_delivery=lambda e, m: out_.append((e, m.offset())))
            p.flush(30)
            err, off = out_[0]
            assert err is None, err
            h.add(pid, "ok", "send", [["send", "jl/0", [off, value]]])
            return off

        for value in range(1, 11):  # replicated: every follower fetches them before the cut
            send(value)
        leader, _isr = db.leader_isr("jl", 0)
        followers = [f"b{i}" for i in db.brokers if i != leader]
        nodes.wait_until("followers caught up", lambda: _hw(db) == 10, timeout=30)
        db.net.partition([[f"b{leader}"], followers])
        h.nemesis(True, "partition", [[f"b{leader}"], followers], {"sub": "leader-followers"})
        t_cut = time.monotonic()
        lost = [send(value) for value in range(11, 31)]  # acked by the leader alone
        db.brokers[leader].kill()
        h.nemesis(True, "kill", [f"b{leader}"], {"sub": "leader"})
        # the followers are still in the ISR (the leader could not shrink it within replica.lag.time.max.ms)
        assert time.monotonic() - t_cut < nodes.REPLICA_LAG_MS / 1000, "too slow: the ISR may have shrunk"
        nodes.wait_until("a follower elected", lambda: db.leader_isr("jl", 0)[0] not in (leader, -1), timeout=60)
        db.net.heal_all()
        h.nemesis(False, "partition", [[f"b{leader}"], followers], {"sub": "leader-followers"})
        db.brokers[leader].start()
        h.nemesis(False, "restart", [f"b{leader}"], {"sub": "leader"})
        db.wait_registered()
        nodes.wait_until("full ISR again", lambda: len(db.leader_isr("jl", 0)[1]) == 3, timeout=120)
        # writes go on after the recovery, so the final read's end is past the lost offsets (it covers them)
        later = [send(value) for value in range(31, 61)]
        assert later[0] == 10, f"the log was not truncated to 10 records: next offset {later[0]}"
        assert final_read(h, db.bootstrap, "jl", 1, "read_uncommitted")
    finally:
        h.close()
        db.close()
    report = checker.check_file(out / "history.jsonl")
    counts = report.stats["anomaly_counts"]
    assert counts.get("lost-write") == len(lost) == 20, counts
    assert counts.get("divergence") == 20, counts  # offsets 10..29 acked with 11..30, now holding 31..50
    assert not report.valid
    assert {a.key for a in report.anomalies["lost-write"]} == {"jl/0"}


def _hw(db: nodes.Db) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": db.bootstrap, "group.id": "hw"})
    try:
        return int(c.get_watermark_offsets(TopicPartition("jl", 0), timeout=10)[1])
    finally:
        c.close()
