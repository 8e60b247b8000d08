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
    # the lock-duration floor lowered so a group config can set a short lock (the default lock stays 30 s)
    return cluster_with({"share.auto.offset.reset": "earliest", "group.share.min.record.lock.duration.ms": "1000"})


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


def test_renew_on_a_partition_led_away_from_the_coordinator(share_cluster: Any) -> None:
    """KIP-1222's RENEW in cluster mode: the share partition's leader is not the group's coordinator. The group's
    ``share.record.lock.duration.ms`` (3 s, a GROUP config through ZooKeeper) reaches the leader; a member acquires
    the record there, renews it halfway, and past the first deadline the record is still its own (another member
    gets nothing) and its ACCEPT succeeds."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    cluster = share_cluster
    topic, group = f"share-renew-{uuid.uuid4().hex[:8]}", f"sg-renew-{uuid.uuid4().hex[:8]}"
    coord = agreed_coordinator(cluster, group)
    leader = next(i for i in sorted(cluster.brokers) if i != coord and cluster.brokers[i].running)
    create_topic(cluster.bootstrap, topic, assignment=[[leader] + [i for i in sorted(cluster.brokers) if i != leader]])
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.record.lock.duration.ms", "3000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept alive until its future completes
    admin.incremental_alter_configs([res])[res].result(30)
    lb, cb = cluster.brokers[leader], cluster.brokers[coord]
    hb = request(cb, 76, 1, {"group_id": group, "rack_id": None, "member_id": "m1", "member_epoch": 0,
                             "subscribed_topic_names": [topic]})
    assert hb["error_code"] == 0 and hb["assignment"]["topic_partitions"][0]["partitions"] == [0], hb
    tid = hb["assignment"]["topic_partitions"][0]["topic_id"]

    def fetch(member: str, epoch: int) -> dict:
        r = request(lb, 78, 2, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10,
                                "batch_size": 10, "share_acquire_mode": 0, "is_renew_ack": False,
                                "topics": [{"topic_id": tid, "partitions": [
                                    {"partition_index": 0, "acknowledgement_batches": []}]}],
                                "forgotten_topics_data": []})
        assert r["error_code"] == 0, r
        return r

    def ack(epoch: int, ack_type: int) -> dict:
        r = request(lb, 79, 2, {"group_id": group, "member_id": "m1", "share_session_epoch": epoch,
                                "is_renew_ack": ack_type == 4, "topics": [{"topic_id": tid, "partitions": [
                                    {"partition_index": 0, "acknowledgement_batches": [
                                        {"first_offset": 0, "last_offset": 0, "acknowledge_types": [ack_type]}]}]}]})
        assert r["error_code"] == 0, r
        return r["responses"][0]["partitions"][0]

    def acquired(r: dict) -> list[tuple[int, int, int]]:
        return [(a["first_offset"], a["last_offset"], a["delivery_count"])
                for t in r["responses"] for p in t["partitions"] for a in p["acquired_records"]]

    # the group config reaches the leader through ZooKeeper's change notification: awaited on its answers
    probe_epoch = 0
    deadline = time.monotonic() + 30
    while fetch("probe", probe_epoch)["acquisition_lock_timeout_ms"] != 3000:
        assert time.monotonic() < deadline, "the group config never reached the partition leader"
        probe_epoch += 1
        time.sleep(0.1)  # polled: the notification is the leader's, not the client's, to see
    probe_epoch += 1
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    p.produce(topic, b"slow", partition=0)
    assert p.flush(30) == 0
    r = fetch("m1", 0)
    got_at = time.monotonic()
    assert acquired(r) == [(0, 0, 1)] and r["acquisition_lock_timeout_ms"] == 3000, r
    time.sleep(max(got_at + 1.5 - time.monotonic(), 0))  # halfway through the lock
    renewed_at = time.monotonic()
    assert ack(1, 4)["error_code"] == 0  # RENEW
    time.sleep(max(got_at + 3.4 - time.monotonic(), 0))  # past the first deadline, before the renewed one
    r = fetch("probe", probe_epoch)
    assert time.monotonic() < renewed_at + 3.0, "the check ran too late to tell (an overloaded machine)"
    assert acquired(r) == []  # still m1's
    assert ack(2, 1)["error_code"] == 0  # ACCEPT with the renewed lock


def test_topic_deleted_while_the_coordinator_is_away(share_cluster: Any) -> None:
    """A share group's coordinator is killed -9 and the group's topic (its replicas elsewhere) deleted meanwhile: the
    new coordinator, whichever of the load and the deletion it sees first, deletes the topic's share state (decision
    0073: a topic id of the loaded metadata naming no topic any more), as the classic offsets are (decision 0039)."""
    from tidelog.broker.group.consumer_records import kafka_uuid

    cluster = share_cluster
    topic, group = f"share-del-{uuid.uuid4().hex[:8]}", f"sg-del-{uuid.uuid4().hex[:8]}"
    coord = agreed_coordinator(cluster, group)
    others = [i for i in sorted(cluster.brokers) if i != coord and cluster.brokers[i].running]
    create_topic(cluster.bootstrap, topic, assignment=[others], timeout=60)  # no replica on the coordinator
    cb = cluster.brokers[coord]
    hb = request(cb, 76, 1, {"group_id": group, "rack_id": None, "member_id": "m1", "member_epoch": 0,
                             "subscribed_topic_names": [topic]})
    assert hb["error_code"] == 0 and hb["assignment"]["topic_partitions"], hb
    tid = hb["assignment"]["topic_partitions"][0]["topic_id"]
    key = f"{group}:{kafka_uuid(tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid))}:0"

    def summary() -> tuple[int, int] | None:
        """(error, state epoch) of ReadShareGroupStateSummary at the key's share coordinator (None: not found yet);
        a share partition without state answers state epoch 0."""
        for b in cluster.brokers.values():
            if not b.running:
                continue
            fc = request(b, 10, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0]
            if fc["error_code"] or not cluster.brokers[fc["node_id"]].running:
                return None
            r = request(cluster.brokers[fc["node_id"]], 87, 0, {"group_id": group, "topics": [
                {"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})
            p = r["results"][0]["partitions"][0]
            return int(p["error_code"]), int(p["state_epoch"])
        return None

    assert summary() == (0, 1)  # initialized by the coordinator with the group epoch of the join
    try:
        cb.kill()
        # DeleteTopics at a live broker (any broker queues it): librdkafka's admin sends it to the controller, which
        # may be the broker just killed until its ZooKeeper session expires ("Failed while waiting for controller")
        r = request(cluster.brokers[others[0]], 20, 6, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                                        "timeout_ms": 30000}, timeout=60)
        assert r["responses"][0]["error_code"] == 0, r
        new = agreed_coordinator(cluster, group)
        assert new != coord
        deadline = time.monotonic() + 60
        last = summary()
        while time.monotonic() < deadline:
            last = summary()
            nb = cluster.brokers[new]
            d = _share_describe(nb, group)
            if d["error_code"] == 0 and last == (0, 0):  # the state is gone
                break
            time.sleep(0.2)  # the new coordinator loads, then deletes in the background (bounded)
        assert last == (0, 0), last
    finally:
        if not cb.running:
            cb.start(timeout=120)
