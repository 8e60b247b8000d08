"""Share groups (KIP-932) in a ZooKeeper-mode cluster (3 brokers + ZooKeeper): the group's coordinator (the leader
of its ``__consumer_offsets`` partition) keeps its members, each partition's leader keeps its share-partition state
and the members' share sessions; two confluent-kafka ``ShareConsumer`` members bootstrapping from different brokers
share a topic whose partitions are led by all three brokers, and every record is delivered to exactly one of them."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from support import agreed_coordinator, create_topic, request

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def share_cluster(cluster_with: Any) -> Any:
    return cluster_with({"share.auto.offset.reset": "earliest"})


def test_share_group_across_brokers(share_cluster: Any) -> None:
    cluster = share_cluster
    topic, group = f"share-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    partitions = 6
    create_topic(cluster.bootstrap, topic, partitions, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10})
    values = [f"c{i}" for i in range(300)]
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(60) == 0
    brokers = list(cluster.brokers.values())
    members = [ShareConsumer({"bootstrap.servers": brokers[k].bootstrap, "group.id": group,
                              "max.poll.records": 20}) for k in (0, 1)]
    for m in members:
        m.subscribe([topic])
    seen: list[list[tuple[str, int]]] = [[], []]
    try:
        deadline = time.monotonic() + 90
        while sum(len(s) for s in seen) < len(values) and time.monotonic() < deadline:
            for k, m in enumerate(members):
                seen[k] += [(x.value().decode(), x.partition()) for x in m.poll(0.2) if x.error() is None]
        for m in members:
            m.commit_sync(30)
    finally:
        for m in members:
            m.close()
    got = [v for s in seen for v, _ in s]
    assert sorted(got) == sorted(values), f"{len(set(values) - set(got))} missing, {len(got) - len(set(got))} twice"
    assert seen[0] and seen[1]
    # every partition was read (leaders on every broker)
    assert {p for s in seen for _, p in s} == set(range(partitions))


def _share_describe(broker: Any, group: str) -> dict:
    return request(broker, 77, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]


def test_share_group_members_survive_coordinator_kill(share_cluster: Any) -> None:
    """Two members join a share group; its coordinator is killed -9; the new coordinator (the new leader of the
    group's ``__consumer_offsets`` partition) replays the ShareGroup* records: same group epoch, same members with
    their epochs and assignments, and a member's heartbeat with its epoch is accepted (no rejoin); FindCoordinator
    key type 2 names the share coordinator of a share partition from any broker."""
    cluster = share_cluster
    topic, group = f"share-fo-{uuid.uuid4().hex[:8]}", f"sg-fo-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 2, 3)
    coord = agreed_coordinator(cluster, group)
    b = cluster.brokers[coord]

    def hb(broker: Any, member: str, epoch: int) -> dict:
        return request(broker, 76, 1, {"group_id": group, "rack_id": None, "member_id": member,
                                       "member_epoch": epoch, "subscribed_topic_names": [topic] if epoch == 0 else None})

    assert hb(b, "m1", 0)["error_code"] == 0
    assert hb(b, "m2", 0)["error_code"] == 0
    r1 = hb(b, "m1", 2)  # 1 at the join, 2 once its partitions were initialized and assigned, 3 with m2
    assert r1["error_code"] == 0 and r1["member_epoch"] == 3, r1
    before = _share_describe(b, group)
    assert before["error_code"] == 0 and before["group_epoch"] == 3
    try:
        b.kill()
        new = agreed_coordinator(cluster, group)
        assert new != coord
        nb = cluster.brokers[new]
        deadline = time.monotonic() + 30
        after = _share_describe(nb, group)
        while after["error_code"] == 14 and time.monotonic() < deadline:  # COORDINATOR_LOAD_IN_PROGRESS
            time.sleep(0.1)  # the new coordinator replays the partition in a worker thread (bounded wait)
            after = _share_describe(nb, group)
        assert after["error_code"] == 0 and after["group_epoch"] == before["group_epoch"], after

        def members(d: dict) -> dict:
            return {m["member_id"]: (m["member_epoch"], [(t["topic_name"], sorted(t["partitions"]))
                                                         for t in m["assignment"]["topic_partitions"]])
                    for m in d["members"]}

        assert members(after) == members(before)
        r1 = hb(nb, "m1", 3)
        assert r1["error_code"] == 0 and r1["member_epoch"] == 3, r1
        md = request(nb, 3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
        from tidelog.broker.group.consumer_records import kafka_uuid
        tid = md["topics"][0]["topic_id"]
        key = f"{group}:{kafka_uuid(tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid))}:0"
        deadline = time.monotonic() + 60
        answers: list[tuple[int, int]] = []
        while time.monotonic() < deadline:
            answers = [(fc["error_code"], fc["node_id"]) for other in cluster.brokers.values() if other.running
                       for fc in request(other, 10, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"]]
            if all(e == 0 for e, _ in answers) and len({n for _, n in answers}) == 1:
                break
            time.sleep(0.2)  # __share_group_state made on first use, its leaders being elected (bounded)
        assert all(e == 0 for e, _ in answers) and len({n for _, n in answers}) == 1, answers
        assert cluster.brokers[answers[0][1]].running
    finally:
        if not b.running:
            b.start(timeout=120)
