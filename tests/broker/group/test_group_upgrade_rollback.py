"""grouptrust item 2: the online upgrade of a classic group to a consumer group (a KIP-848 member joining it) whose
write fails is undone, as Kafka's coordinator runtime reverts to its last committed snapshot: the classic group is
back with its members, generation, leader, protocol and state, the heartbeat answers COORDINATOR_NOT_AVAILABLE
(Kafka's mapping of NOT_ENOUGH_REPLICAS), the classic member goes on heartbeating in its generation, and once writes
work again the upgrade happens.

One node: ``min.insync.replicas=2`` set live on ``__consumer_offsets`` (replication factor 1) makes every append to it
fail with NOT_ENOUGH_REPLICAS; setting it back to 1 heals it. Fails on the code before (the consumer group stayed in
memory: the classic member was told REBALANCE_IN_PROGRESS, the group listed as a consumer group).
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import RawClient

from tidelog.errors import ErrorCode

from .conftest import create_topic, wait_until
from .test_consumer_write_rollback import _min_isr
from .test_group_migration_raw import (
    CONFIG,
    DESCRIBE69,
    DESCRIBE_GROUPS,
    GROUP_ID_NOT_FOUND,
    JOIN,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    TOPIC,
    _classic_stable,
    commit,
    committed,
    group_type,
    hb68,
    heartbeat,
    join,
    subscription,
    sync,
)

COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({**CONFIG, "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1"})
    create_topic(br.bootstrap, TOPIC, 2)
    with RawClient(br.port) as c:  # __consumer_offsets is made by the first FindCoordinator
        wait_until(lambda: c.request(10, 1, {"key": "upgrade-rb", "key_type": 0})["error_code"] == 0, 20,
                   "the group coordinator")
    return br


def _classic(c: RawClient, group: str) -> dict[str, Any]:
    d = c.request(DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
    return {"error": d["error_code"], "state": d["group_state"], "protocol_type": d["protocol_type"],
            "protocol": d["protocol_data"], "members": sorted(m["member_id"] for m in d["members"])}


def test_failed_upgrade_write_restores_the_classic_group(b: Any) -> None:
    g = "g-upgrade-rb"
    with RawClient(b.port) as c:
        a, gen = _classic_stable(c, g)
        assert commit(c, g, a, gen, 7) == NONE
        before = _classic(c, g)
        assert before == {"error": NONE, "state": "Stable", "protocol_type": "consumer", "protocol": "range",
                          "members": [a]}, before
        try:
            _min_isr(c, "2")
            # a consumer-protocol member joins: the upgrade's records (GroupMetadata tombstone, ConsumerGroup*)
            # cannot be written
            r = hb68(c, g, "m2", 0)
            assert r["error_code"] == COORDINATOR_NOT_AVAILABLE, r
            # the classic group is back as it was
            assert group_type(c, g) == ("classic", "Stable")
            assert _classic(c, g) == before
            d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
            assert d["error_code"] == GROUP_ID_NOT_FOUND, d
            # its member heartbeats in its generation (inside a consumer group it would be told to rejoin)
            assert heartbeat(c, g, a, gen) == NONE
            # a second try fails the same way and leaves it the same
            assert hb68(c, g, "m3", 0)["error_code"] == COORDINATOR_NOT_AVAILABLE
            assert _classic(c, g) == before and heartbeat(c, g, a, gen) == NONE
        finally:
            _min_isr(c, "1")
        # the classic group is a working classic group: its member rejoins (one-member group: completes at once)
        r = join(c, g, a)
        assert r["error_code"] == NONE and r["generation_id"] == gen + 1 and r["leader"] == a, r
        assert sync(c, g, a, gen + 1, {a: [0, 1]})["error_code"] == NONE
        assert heartbeat(c, g, a, gen + 1) == NONE
        # writes work again: the next KIP-848 join upgrades it
        r = hb68(c, g, "m2", 0)
        assert r["error_code"] == NONE and r["member_epoch"] == gen + 2, r
        assert group_type(c, g)[0] == "consumer"
        assert heartbeat(c, g, a, gen + 1) == REBALANCE_IN_PROGRESS  # now a classic member inside it
        assert committed(c, g) == 7  # offsets kept throughout


def test_failed_upgrade_of_a_rebalancing_group(b: Any) -> None:
    """The classic group is preparing a rebalance (a second member waits in JoinGroup) when the upgrade's write
    fails: the waiting JoinGroup is answered REBALANCE_IN_PROGRESS (as Kafka completes the join futures), the group is
    back preparing its rebalance with both members, and their rejoins complete it."""
    g = "g-upgrade-rb2"
    with RawClient(b.port) as c, RawClient(b.port) as c2:
        a, gen = _classic_stable(c, g)
        r = join(c2, g, "")
        assert r["error_code"] == MEMBER_ID_REQUIRED, r
        bid = r["member_id"]
        c2.send_request(JOIN, 5, {"group_id": g, "session_timeout_ms": 3000, "rebalance_timeout_ms": 3000,
                                  "member_id": bid, "group_instance_id": None, "protocol_type": "consumer",
                                  "protocols": [{"name": "range", "metadata": subscription()}]})
        wait_until(lambda: group_type(c, g) == ("classic", "PreparingRebalance"), 5, "the rebalance prepared")
        try:
            _min_isr(c, "2")
            assert hb68(c, g, "m2", 0)["error_code"] == COORDINATOR_NOT_AVAILABLE
            assert c2.response()["error_code"] == REBALANCE_IN_PROGRESS  # b's JoinGroup, answered by the upgrade
            assert group_type(c, g) == ("classic", "PreparingRebalance")
            assert _classic(c, g)["members"] == sorted([a, bid])
        finally:
            _min_isr(c, "1")
        c2.send_request(JOIN, 5, {"group_id": g, "session_timeout_ms": 3000, "rebalance_timeout_ms": 3000,
                                  "member_id": bid, "group_instance_id": None, "protocol_type": "consumer",
                                  "protocols": [{"name": "range", "metadata": subscription()}]})
        ra = join(c, g, a)
        rb = c2.response()
        assert ra["error_code"] == rb["error_code"] == NONE, (ra, rb)
        assert ra["generation_id"] == rb["generation_id"] == gen + 1
        assert ra["leader"] == rb["leader"] and sorted(m["member_id"] for m in ra["members"] or rb["members"]) == \
            sorted([a, bid])
