"""Unclean leader election under the harness: the loss Kafka documents, seen by the checker (issue 31: "for acks=1
and for unclean election on, the harness shows the loss Kafka documents").

The scenario, the same with the election on and off: RF 3, ``min.insync.replicas=2``, acks=all producer. A follower
(F2) is cut from the other two brokers, so after ``replica.lag.time.max.ms`` the ISR is {leader, F1}; 20 records are
then acknowledged by those two (the ISR satisfies min.insync.replicas) and F2 never gets them. Leader and F1 are
killed with SIGKILL: no ISR member is alive.

* ``unclean.leader.election.enable=true``: the controller makes F2, which is not in the ISR, the leader. The two
  dead brokers come back as its followers and truncate to its log: the 20 acknowledged records are gone, and the
  checker must report exactly them as ``lost-write`` (Kafka's documented trade of durability for availability).
* ``false``: F2 is never elected; the partition stays without a leader until the last ISR member (the leader or F1,
  by the order the controller saw them die) comes back and is elected; nothing acknowledged is lost and the checker
  finds the history valid.

Needs root (network namespaces), ZooKeeper and java; skipped otherwise."""

from __future__ import annotations

import gc
import shutil
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
from txnload import final_read

pytestmark = pytest.mark.skipif(
    bool(netspace.available()) or not nodes.ZK_SERVER.exists() or shutil.which("java") is None,
    reason=f"needs root and ip netns ({netspace.available()}) and ZooKeeper + java")

TOPIC = "ju"


@pytest.fixture
def out(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    nodes.kill_all()


@pytest.mark.parametrize("unclean", [True, False], ids=["unclean-on", "unclean-off"])
def test_unclean_election_loses_what_the_isr_acknowledged(out: Path, unclean: bool) -> None:
    db = nodes.Db(out / "db", props=nodes.broker_props(min_insync=2, unclean=unclean))
    h = History(out / "history.jsonl")
    h.add("runner", "info", "meta", {"workload": "queue", "acks": "all", "min_insync": 2, "rf": 3,
                                     "unclean": unclean, "seed": 0, "nemesis": ["partition", "kill"], "clients": 1})
    try:
        db.start()
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": db.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(60)
        nodes.wait_until(f"{TOPIC} with a full ISR", lambda: len(db.leader_isr(TOPIC, 0)[1]) == 3)
        pid = h.new_process()
        v = {"role": "producer", "client": "confluent-kafka", "transactional": False,
             "isolation": "read_uncommitted", "mode": None, "group": None}
        h.add(pid, "invoke", "open", v)
        p = Producer({"bootstrap.servers": db.bootstrap, "acks": "all", "enable.idempotence": False,
                      "linger.ms": 0, "message.timeout.ms": 60000, "retries": 1000})
        h.add(pid, "ok", "open", v)

        def send(value: int) -> int:
            got: list[Any] = []
            h.add(pid, "invoke", "send", [["send", f"{TOPIC}/0", value]])
            p.produce(TOPIC, str(value).encode(), partition=0, on_delivery=lambda e, m: got.append((e, m.offset())))
            p.flush(90)
            err, off = got[0]
            assert err is None, err
            h.add(pid, "ok", "send", [["send", f"{TOPIC}/0", [off, value]]])
            return off

        for value in range(1, 11):  # on all three replicas
            send(value)
        leader, _isr = db.leader_isr(TOPIC, 0)
        f1, f2 = (i for i in sorted(db.brokers) if i != leader)
        # F2 cut from the leader and F1 (ZooKeeper and the clients still reach everyone)
        groups = [[f"b{leader}", f"b{f1}"], [f"b{f2}"]]
        db.net.partition(groups)
        h.nemesis(True, "partition", groups, {"sub": "follower"})
        nodes.wait_until("F2 out of the ISR", lambda: sorted(db.leader_isr(TOPIC, 0)[1]) == sorted([leader, f1]),
                         timeout=60)
        acked = [send(value) for value in range(11, 31)]  # acknowledged by the ISR {leader, F1}
        assert acked == list(range(10, 30)), acked
        for dead in (leader, f1):
            db.brokers[dead].kill()
            h.nemesis(True, "kill", [f"b{dead}"], {"sub": "isr"})
        db.net.heal_all()
        h.nemesis(False, "partition", groups, {"sub": "follower"})
        if unclean:
            nodes.wait_until("F2 elected although not in the ISR", lambda: db.leader_isr(TOPIC, 0)[0] == f2,
                             timeout=90)
            restart = (leader, f1)
        else:
            # no leader: the controller keeps the last ISR member (which of the two depends on the order it saw them
            # die, as in Kafka's removeReplicasFromIsr); only it may lead, so F2 stays a follower
            nodes.wait_until("no leader", lambda: db.leader_isr(TOPIC, 0)[0] == -1, timeout=90)
            last = db.leader_isr(TOPIC, 0)[1]
            assert len(last) == 1 and last[0] in (leader, f1), last
            restart = (last[0], f1 if last[0] == leader else leader)
        db.brokers[restart[0]].start()
        h.nemesis(False, "restart", [f"b{restart[0]}"], {"sub": "isr"})
        if not unclean:
            nodes.wait_until("the last ISR member elected", lambda: db.leader_isr(TOPIC, 0)[0] == restart[0],
                             timeout=90)
        db.brokers[restart[1]].start()
        h.nemesis(False, "restart", [f"b{restart[1]}"], {"sub": "isr"})
        db.wait_registered()
        nodes.wait_until("full ISR again", lambda: len(db.leader_isr(TOPIC, 0)[1]) == 3, timeout=120)
        later = [send(value) for value in range(31, 61)]  # the final read's end covers the offsets of the acked
        assert later[0] == (10 if unclean else 30), f"next offset {later[0]}"
        assert final_read(h, db.bootstrap, TOPIC, 1, "read_uncommitted")
    finally:
        h.close()
        db.close()
        p = admin = None  # librdkafka would reconnect to the next run's addresses until collected
        gc.collect()
    report = checker.check_file(out / "history.jsonl")
    counts = report.stats["anomaly_counts"]
    if unclean:
        assert counts.get("lost-write") == 20, counts
        assert {a.key for a in report.anomalies["lost-write"]} == {f"{TOPIC}/0"}
        assert not report.valid
    else:
        assert report.valid, counts
        assert not counts.get("lost-write"), counts
