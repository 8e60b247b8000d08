"""Online migration in a ZooKeeper-mode cluster (3 brokers + ZooKeeper): a classic group upgraded by a
consumer-protocol member keeps its classic member as one (ClassicMemberMetadata in its ConsumerGroupMemberMetadata
record, decision 0062) when the coordinator is killed and the group's ``__consumer_offsets`` partition moves: the new
coordinator knows it with its epoch and answers its Heartbeat as a classic member of the consumer group; then the
consumer-protocol member leaves and the group is downgraded there."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from support import agreed_coordinator, create_topic, request, until

from tidelog.protocol import codec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOIN, HEARTBEAT, SYNC, LIST_GROUPS, CG_HEARTBEAT, CG_DESCRIBE = 11, 12, 14, 16, 68, 69
NONE, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 0, 27, 79
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _subscription(topic: str) -> bytes:
    body = {"topics": [topic], "user_data": None, "owned_partitions": []}
    return struct.pack(">h", 1) + codec.encode_data("ConsumerProtocolSubscription", 1, body)


def _assignment(topic: str, ps: list[int]) -> bytes:
    body = {"assigned_partitions": [{"topic": topic, "partitions": ps}], "user_data": None}
    return struct.pack(">h", 1) + codec.encode_data("ConsumerProtocolAssignment", 1, body)


def test_classic_member_of_upgraded_group_survives_coordinator_kill(cluster: Any) -> None:
    topic, group = f"migr-{uuid.uuid4().hex[:8]}", f"gmigr-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 2, 3)
    coord = agreed_coordinator(cluster, group)
    b = cluster.brokers[coord]
    join_body = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
                 "group_instance_id": None, "protocol_type": "consumer",
                 "protocols": [{"name": "range", "metadata": _subscription(topic)}]}
    r = request(b, JOIN, 5, join_body)
    assert r["error_code"] == MEMBER_ID_REQUIRED
    a = r["member_id"]
    r = request(b, JOIN, 5, {**join_body, "member_id": a})  # completes after group.initial.rebalance.delay.ms
    assert r["error_code"] == NONE and r["leader"] == a
    gen = r["generation_id"]
    s = request(b, SYNC, 5, {"group_id": group, "generation_id": gen, "member_id": a, "group_instance_id": None,
                             "protocol_type": "consumer", "protocol_name": "range",
                             "assignments": [{"member_id": a, "assignment": _assignment(topic, [0, 1])}]})
    assert s["error_code"] == NONE
    r = request(b, CG_HEARTBEAT, 1, {
        "group_id": group, "member_id": "m2", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []})
    assert r["error_code"] == NONE and r["member_epoch"] == gen + 1, r  # upgraded
    try:
        b.kill()
        new = agreed_coordinator(cluster, group)
        assert new != coord
        nb = cluster.brokers[new]

        def described() -> dict | None:
            d = request(nb, CG_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False},
                        timeout=15)["groups"][0]
            return None if d["error_code"] in RETRIABLE else d

        d = until("the new coordinator loaded the group", described, 90)
        assert d["error_code"] == NONE
        assert {m["member_id"]: (m["member_type"], m["member_epoch"]) for m in d["members"]} == \
            {a: (0, gen), "m2": (1, gen + 1)}
        hb = request(nb, HEARTBEAT, 4, {"group_id": group, "generation_id": gen, "member_id": a,
                                        "group_instance_id": None})
        assert hb["error_code"] == REBALANCE_IN_PROGRESS  # a classic member of the consumer group, told to rejoin
        r = request(nb, CG_HEARTBEAT, 1, {
            "group_id": group, "member_id": "m2", "member_epoch": -1, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None})
        assert r["error_code"] == NONE
        rows = [g for g in request(nb, LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
                if g["group_id"] == group]
        assert [(g["group_type"], g["group_state"]) for g in rows] == [("classic", "PreparingRebalance")]
    finally:
        if not b.running:
            b.start(timeout=120)
