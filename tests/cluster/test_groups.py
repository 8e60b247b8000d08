"""Consumer groups in a ZooKeeper-mode cluster: 3 brokers + 1 ZooKeeper on loopback.

``__consumer_offsets`` is a replicated topic (RF ``offsets.topic.replication.factor`` = 3, compacted) created
through ZooKeeper on the first FindCoordinator; the coordinator of a group is the leader of its partition, on
every broker alike; commits are answered once the ISR has them; when the coordinator dies its partitions' new
leaders load the groups from their replicas and clients re-discover them.
"""

from __future__ import annotations

import functools
import importlib.util
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource
from support import (
    Cluster,
    agreed_coordinator,
    create_topic,
    find_coordinator,
    kazoo,
    request,
    start_zookeeper,
)

from tidelog.broker.group.records import OFFSETS_TOPIC, partition_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, HEARTBEAT = 8, 9, 10, 12
REQUEST_TIMED_OUT, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 7, 15, 16

_spec = importlib.util.spec_from_file_location(
    "tidelog_test_groups_helpers", Path(__file__).resolve().parents[1] / "broker" / "group" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_groups = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_groups)
MemberProcess = _groups.MemberProcess


# ------------------------------------------------------------------------------------------------ helpers


def _produce(cluster: Any, topic: str, partitions: int, n: int) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 60000})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=i % partitions)
    assert p.flush(60) == 0


_request = functools.partial(request, timeout=15)


def _consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 2000}
    conf.update(extra)
    return Consumer(conf)


def _committed(cluster: Any, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = _consumer(cluster.bootstrap, group)
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _restart(cluster: Any, broker_id: int) -> None:
    cluster.brokers[broker_id].start(timeout=120)
    cluster.wait_for(f"broker {broker_id} registered again", lambda md: broker_id in md.brokers)


# ------------------------------------------------------------------------------------------------ tests


def test_one_group_across_brokers(cluster: Any) -> None:
    """Two consumers of one group, each bootstrapping from a different broker, form ONE group; a broker that is
    not the coordinator answers group requests NOT_COORDINATOR."""
    topic, group = f"gx-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 4, 3)
    coord = agreed_coordinator(cluster, group)

    md = cluster.admin().list_topics(OFFSETS_TOPIC, timeout=10)
    offsets_topic = md.topics[OFFSETS_TOPIC]
    assert offsets_topic.error is None and len(offsets_topic.partitions) == 50  # offsets.topic.num.partitions
    part = offsets_topic.partitions[partition_for(group, 50)]
    assert part.leader == coord and sorted(part.replicas) == [1, 2, 3]  # RF = offsets.topic.replication.factor
    admin = cluster.admin()  # kept alive until its futures are done
    cfg = next(iter(admin.describe_configs([ConfigResource("topic", OFFSETS_TOPIC)]).values())).result(30)
    assert cfg["cleanup.policy"].value == "compact"

    others = [i for i in cluster.brokers if i != coord]
    for i in others:
        r = _request(cluster.brokers[i], OFFSET_FETCH, 3, {"group_id": group, "topics": None})
        assert r["error_code"] == NOT_COORDINATOR
        r = _request(cluster.brokers[i], HEARTBEAT, 1, {"group_id": group, "generation_id": 1, "member_id": "m"})
        assert r["error_code"] == NOT_COORDINATOR

    _produce(cluster, topic, 4, 40)
    c1 = _consumer(cluster.brokers[others[0]].bootstrap, group)
    c2 = _consumer(cluster.brokers[others[1]].bootstrap, group)
    seen: list[Any] = []
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for c in (c1, c2):
                m = c.poll(0.2)
                if m is not None and not m.error():
                    seen.append((m.partition(), m.offset()))
            a1 = {tp.partition for tp in c1.assignment()}
            a2 = {tp.partition for tp in c2.assignment()}
            if a1 and a2 and not a1 & a2 and a1 | a2 == {0, 1, 2, 3}:
                break
        else:
            raise AssertionError(f"no split of the 4 partitions: {c1.assignment()} / {c2.assignment()}")
        desc = admin.describe_consumer_groups([group])[group].result(30)
        assert desc.coordinator.id == coord
        assert len(desc.members) == 2
        assert getattr(desc.state, "name", str(desc.state)) == "STABLE"
    finally:
        c1.close()
        c2.close()


def test_coordinator_kill_keeps_committed_offsets(cluster: Any) -> None:
    """A group commits, its coordinator is kill -9'ed; the group finds the new coordinator (another replica of
    the partition) and a new member resumes exactly from the committed offsets: nothing committed is lost and
    only the uncommitted batch is delivered again. ``tidelog groups describe`` works against the cluster."""
    from tidelog.cli.groups import groups as groups_cli

    topic, group = f"gk-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    partitions, total = 3, 600
    create_topic(cluster.bootstrap, topic, partitions, 3)
    _produce(cluster, topic, partitions, total)
    coord = agreed_coordinator(cluster, group)

    c1 = _consumer(cluster.bootstrap, group)
    consumed: dict[int, int] = {}  # partition -> next offset
    c1.subscribe([topic])
    deadline = time.monotonic() + 120
    commits = 0
    try:
        while sum(consumed.values()) < 300 and time.monotonic() < deadline:
            msgs = c1.consume(50, 0.5)
            for m in msgs:
                if not m.error():
                    consumed[m.partition()] = m.offset() + 1
            if msgs:
                c1.commit(asynchronous=False)  # acknowledged only once the ISR has it
                commits += 1
        assert sum(consumed.values()) >= 300, consumed
        committed = dict(consumed)
        assert _committed(cluster, group, topic, partitions) == {p: committed.get(p, -1001) for p in range(partitions)}
        # one more batch, processed but never committed
        deadline = time.monotonic() + 30
        while sum(consumed.values()) < sum(committed.values()) + 60 and time.monotonic() < deadline:
            for m in c1.consume(20, 0.5):
                if not m.error():
                    consumed[m.partition()] = m.offset() + 1
        assert sum(consumed.values()) > sum(committed.values())
    finally:
        cluster.brokers[coord].kill()  # kill -9 the coordinator while the member is still in the group
        c1.close()

    try:
        new_coord = agreed_coordinator(cluster, group)
        assert new_coord != coord
        # no committed offset lost: the new coordinator loaded them from its replica
        assert _committed(cluster, group, topic, partitions) == {p: committed.get(p, -1001) for p in range(partitions)}

        c2 = _consumer(cluster.bootstrap, group)
        got: list[tuple[int, int]] = []
        c2.subscribe([topic])
        deadline = time.monotonic() + 120
        try:
            while len(got) < total - sum(committed.values()) and time.monotonic() < deadline:
                for m in c2.consume(100, 0.5):
                    if not m.error():
                        got.append((m.partition(), m.offset()))
            # exactly the records from the committed offsets on: re-delivered = the uncommitted batch only
            expected = sorted((p, o) for p in range(partitions)
                              for o in range(committed.get(p, 0), total // partitions))
            assert sorted(got) == expected
            c2.commit(asynchronous=False)
        except KafkaException:
            raise
        finally:
            c2.close()
        assert _committed(cluster, group, topic, partitions) == {p: total // partitions for p in range(partitions)}

        r = CliRunner().invoke(groups_cli, ["describe", group, "-b", cluster.bootstrap], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        rows = [line.split() for line in r.output.splitlines() if line.startswith(f"{group} ")]
        assert [(row[1], row[2], row[3], row[5]) for row in rows] == [
            (topic, str(p), str(total // partitions), "0") for p in range(partitions)]
        r = CliRunner().invoke(groups_cli, ["list", "-b", cluster.bootstrap], catch_exceptions=False)
        assert group in r.output
        print(f"commits before the kill: {commits}; coordinator {coord} -> {new_coord}")
    finally:
        _restart(cluster, coord)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_member_rides_through_coordinator_kill(cluster: Any, client: str) -> None:
    """A member of another client library commits every record synchronously while its coordinator is
    kill -9'ed: it re-discovers the coordinator and carries on; committed offsets never go backwards and every
    record is processed (at most the in-flight record per partition twice)."""
    topic, group = f"gm-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    partitions, total = 3, 300
    create_topic(cluster.bootstrap, topic, partitions, 3)
    _produce(cluster, topic, partitions, total)
    coord = agreed_coordinator(cluster, group)
    member = MemberProcess(client, cluster.bootstrap, group, topic, session_ms=6000)
    try:
        _groups.wait_until(lambda: len(member.values()) >= 60 or member.exited(), 120, "first records processed")
        assert not member.exited(), member.stderr()
        cluster.brokers[coord].kill()
        before = {}
        for ev in member.snapshot():
            if ev["event"] == "committed":
                before[ev["p"]] = ev["o"]
        _groups.wait_until(lambda: len(set(member.values())) == total or member.exited(), 180,
                           "every record processed after the failover")
        assert not member.exited(), member.stderr()
        _groups.wait_until(lambda: {ev["p"]: ev["o"] for ev in member.snapshot() if ev["event"] == "committed"}
                           == {p: total // partitions for p in range(partitions)}, 60, "last commits")
        new_coord = agreed_coordinator(cluster, group)
        assert new_coord != coord
        last: dict[int, int] = {}
        for ev in member.snapshot():
            if ev["event"] == "committed":
                assert ev["o"] >= last.get(ev["p"], 0), "a committed offset went backwards"
                last[ev["p"]] = ev["o"]
        assert all(last[p] >= o for p, o in before.items())
        values = member.values()
        assert len(values) - len(set(values)) <= partitions
    finally:
        member.kill()
        if not cluster.brokers[coord].running:
            _restart(cluster, coord)
    committed = _committed(cluster, group, topic, partitions)
    assert committed == {p: total // partitions for p in range(partitions)}


def _offset_commit(broker: Any, group: str, topic: str, offset: int) -> int:
    r = _request(broker, OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def _offset_fetched(broker: Any, group: str, topic: str) -> tuple[int, int]:
    r = _request(broker, OFFSET_FETCH, 3, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    return r["error_code"], r["topics"][0]["partitions"][0]["committed_offset"]


def test_commit_needs_min_insync_replicas(cluster: Any) -> None:
    """Commits are written with acks=-1: with the ISR of the group's partition below min.insync.replicas (2)
    the coordinator answers COORDINATOR_NOT_AVAILABLE (Kafka's mapping of NOT_ENOUGH_REPLICAS) and the offset
    is not visible; once the replicas are back the commit succeeds."""
    topic, group = f"gi-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 1, 3)
    coord = agreed_coordinator(cluster, group)
    b = cluster.brokers[coord]
    assert _offset_commit(b, group, topic, 5) == 0
    assert _offset_fetched(b, group, topic) == (0, 5)
    others = [i for i in cluster.brokers if i != coord]
    try:
        for i in others:
            cluster.brokers[i].kill()
        seen: list[int] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            err = _offset_commit(b, group, topic, 7)
            seen.append(err)
            if err == COORDINATOR_NOT_AVAILABLE:
                break
            # before the controller has taken the dead brokers out of the ISR the HW cannot move: the commit
            # times out (REQUEST_TIMED_OUT after offsets.commit.timeout.ms) and is not acknowledged
            assert err == REQUEST_TIMED_OUT, seen
        else:
            raise AssertionError(f"commits never failed with COORDINATOR_NOT_AVAILABLE: {seen}")
        assert _offset_fetched(b, group, topic) == (0, 5)  # the refused commit is not visible
        print(f"commit errors while the ISR shrank: {seen}")
    finally:
        for i in others:
            _restart(cluster, i)
    deadline = time.monotonic() + 90
    while _offset_commit(b, group, topic, 9) != 0:
        assert time.monotonic() < deadline, "commits did not recover with the replicas back"
        time.sleep(0.2)  # polling interval while the replicas rejoin the ISR
    assert _offset_fetched(b, group, topic) == (0, 9)


def test_offsets_topic_waits_for_replication_factor(tmp_path: Path) -> None:
    """As Kafka: __consumer_offsets is not created while fewer brokers are alive than
    offsets.topic.replication.factor (3); FindCoordinator answers COORDINATOR_NOT_AVAILABLE meanwhile."""
    pytest.importorskip("kazoo", reason="kazoo is not installed")
    zk = start_zookeeper(tmp_path)
    c = Cluster(tmp_path, zk)
    group = "g-rf"
    try:
        first = c.brokers[1].start()
        c.wait_for("broker 1 registered", lambda md: list(md.brokers) == [1])
        for _ in range(5):
            assert find_coordinator(first, group) == (COORDINATOR_NOT_AVAILABLE, -1)
            time.sleep(0.2)  # space the attempts as a client's retry backoff would
        with kazoo(zk.connect) as kz:
            assert kz.exists(f"/brokers/topics/{OFFSETS_TOPIC}") is None
        c.brokers[2].start()
        c.brokers[3].start()
        coord = agreed_coordinator(c, group)
        admin = c.admin()
        part = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC].partitions[partition_for(group, 50)]
        assert part.leader == coord and len(part.replicas) == 3
    finally:
        for b in c.brokers.values():
            b.kill()
        zk.stop()
