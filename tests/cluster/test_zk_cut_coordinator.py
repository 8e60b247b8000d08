"""A group coordinator cut from ZooKeeper, still reachable by clients (Kafka's split brain), must not answer from a
view that may be stale (issue 31's campaign on the final code, txn seed 4005: a transactional producer committed
offsets through the new coordinator while the consumer's OffsetFetch, sent to the old one, got the offsets of
before -- ``lost-committed-offset``). Kafka's old leader learns of the election from the controller's LeaderAndIsr;
a tidelog broker only from ZooKeeper, so while its connection is down its coordinators answer NOT_COORDINATOR.

The scenario: commit offset 5 through group G's coordinator C; cut C's ZooKeeper link (its proxy blackholed,
clients and brokers still reach it); the controller elects another leader for G's ``__consumer_offsets`` partition;
commit offset 9 through the new coordinator; an OffsetFetch sent to C must not answer 5."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from support import agreed_coordinator, create_topic, kazoo, request, state, until

from tidelog.broker.group import records as rec
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration

OFFSET_COMMIT, OFFSET_FETCH = 8, 9


def _commit(broker: Any, group: str, topic: str, offset: int) -> int:
    r = request(broker, OFFSET_COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                           "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                               {"partition_index": 0, "committed_offset": offset,
                                                "committed_leader_epoch": -1, "committed_metadata": None}]}]},
                timeout=20)
    return int(r["topics"][0]["partitions"][0]["error_code"])


def _fetch(broker: Any, group: str, topic: str) -> tuple[int, int]:
    """(error, committed offset) of ``topic``-0 as ``broker`` answers OffsetFetch v8."""
    r = request(broker, OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0]}]}], "require_stable": False}, timeout=20)
    g = r["groups"][0]
    if g["error_code"]:
        return int(g["error_code"]), -1
    p = g["topics"][0]["partitions"][0]
    return int(p["error_code"]), int(p["committed_offset"])


def test_a_coordinator_cut_from_zookeeper_does_not_serve_stale_offsets(proxied_cluster: Any) -> None:
    c = proxied_cluster
    c.heal()
    topic, group = f"zkcut-{uuid.uuid4().hex[:8]}", f"zkcut-g-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, 1, 3, timeout=90)
    old = agreed_coordinator(c, group)
    assert _commit(c.brokers[old], group, topic, 5) == 0
    assert _fetch(c.brokers[old], group, topic) == (0, 5)
    with kazoo(c.zk.connect) as kz:
        offsets_partition = rec.partition_for(group, 50 if kz.exists("/brokers/topics/__consumer_offsets") is None
                                              else len(kz.get_children("/brokers/topics/__consumer_offsets/partitions")))
        c.zk_links[old].set_mode(c.faults.BLACKHOLE)  # ZooKeeper only: clients and the other brokers still reach it
        try:
            until("another leader of the group's __consumer_offsets partition",
                  lambda: state(kz, "__consumer_offsets", offsets_partition).leader not in (old, -1), timeout=60)
            new = state(kz, "__consumer_offsets", offsets_partition).leader
            until("the new coordinator to commit", lambda: _commit(c.brokers[new], group, topic, 9) == 0, timeout=60)
            assert _fetch(c.brokers[new], group, topic) == (0, 9)
            # the old coordinator still believes it leads the partition (it heard nothing from ZooKeeper): it must
            # not answer the offset of before the election
            err, offset = _fetch(c.brokers[old], group, topic)
            assert (err, offset) != (0, 5), "a coordinator cut from ZooKeeper served a stale committed offset"
            assert err == ErrorCode.NOT_COORDINATOR, (err, offset)
        finally:
            c.heal()
    until("one coordinator again", lambda: agreed_coordinator(c, group, timeout=60) is not None, timeout=90)
    coordinator = agreed_coordinator(c, group)
    assert _fetch(c.brokers[coordinator], group, topic) == (0, 9)
