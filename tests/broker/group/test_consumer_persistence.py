"""KIP-848 groups written to ``__consumer_offsets`` (Kafka's ConsumerGroup* records) and replayed at load, at the
protocol level against ``tidelog serve`` restarted on its data dir: a member that left stays gone (tombstones), a
member that does not heartbeat after the load is removed after its session timeout (and stays removed), a member
revoking keeps its state, a deleted group and a group converted to the classic protocol do not come back."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import RawClient

from .conftest import create_topic, wait_until
from .test_consumer_protocol_errors import (
    DESCRIBE,
    GROUP_ID_NOT_FOUND,
    NONE,
    UNKNOWN_MEMBER_ID,
    _tid,
    hb,
    parts,
)

TOPIC = "kip848-persist"
DELETE_GROUPS, JOIN, COORDINATOR_LOAD_IN_PROGRESS = 42, 11, 14


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({
        "group.consumer.min.session.timeout.ms": "1500",
        "group.consumer.session.timeout.ms": "1500",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "300",
        "offsets.topic.num.partitions": "3",
    })
    create_topic(br.bootstrap, TOPIC, 4)
    return br


def describe(c: RawClient, group: str) -> dict:
    """ConsumerGroupDescribe, once the coordinator has loaded (COORDINATOR_LOAD_IN_PROGRESS right after a start)."""
    def once() -> dict | None:
        d = c.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
        return None if d["error_code"] == COORDINATOR_LOAD_IN_PROGRESS else d

    return wait_until(once, 30, f"{group} loaded")


def members(d: dict) -> dict[str, tuple[int, list[int]]]:
    return {m["member_id"]: (m["member_epoch"], sorted(p for t in m["assignment"]["topic_partitions"]
                                                       for p in t["partitions"])) for m in d["members"]}


def test_members_left_expired_and_revoking_across_restarts(b: Any) -> None:
    group = "g-persist"
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        assert parts(hb(c, group, "m1", 0, topics=[TOPIC])) == [0, 1, 2, 3]
        r2 = hb(c, group, "m2", 0, topics=[TOPIC])
        assert r2["member_epoch"] == 2
        r1 = hb(c, group, "m1", 1, owned=[(tid, [0, 1, 2, 3])])
        kept = parts(r1)
        assert r1["member_epoch"] == 1 and len(kept) == 2  # revoking two partitions, at its old epoch
        assert hb(c, group, "m3", 0, topics=[TOPIC])["error_code"] == NONE
        assert hb(c, group, "m3", -1)["error_code"] == NONE  # m3 left: tombstones for its records
        before = describe(c, group)
    b.restart()
    with RawClient(b.port) as c:
        d = describe(c, group)
        assert d["error_code"] == NONE
        assert (d["group_epoch"], d["assignment_epoch"]) == (before["group_epoch"], before["assignment_epoch"])
        assert members(d) == members(before) and "m3" not in members(d)
        # m1 still revoking after the load: the same answer at its old epoch, then the revocation completes
        r1 = hb(c, group, "m1", 1, owned=[(tid, [0, 1, 2, 3])])
        assert r1["error_code"] == NONE and r1["member_epoch"] == 1 and sorted(kept) == parts(r1)
        r1 = hb(c, group, "m1", 1, owned=[(tid, kept)])
        assert r1["member_epoch"] == before["group_epoch"]
        # m2 does not heartbeat: removed after the session timeout that started at the load; m1 keeps going
        epoch = r1["member_epoch"]

        def m2_gone() -> bool:
            nonlocal epoch
            r = hb(c, group, "m1", epoch, owned=[(tid, sorted(kept))])
            assert r["error_code"] == NONE, r
            epoch = r["member_epoch"]
            return "m2" not in members(describe(c, group))

        wait_until(m2_gone, 15, "m2 removed after its session timeout")
        assert hb(c, group, "m2", 2, owned=[])["error_code"] == UNKNOWN_MEMBER_ID
        after = describe(c, group)
    b.restart()
    with RawClient(b.port) as c:
        d = describe(c, group)
        assert d["group_epoch"] == after["group_epoch"] and set(members(d)) == {"m1"}


def test_deleted_and_converted_groups_stay_gone(b: Any) -> None:
    with RawClient(b.port) as c:
        assert hb(c, "g-persist-del", "m1", 0, topics=[TOPIC])["error_code"] == NONE
        assert hb(c, "g-persist-del", "m1", -1)["error_code"] == NONE
        res = c.request(DELETE_GROUPS, 2, {"groups_names": ["g-persist-del"]})["results"][0]
        assert res["error_code"] == NONE
        # an empty consumer group joined with the classic protocol becomes a classic group
        assert hb(c, "g-persist-swap", "m1", 0, topics=[TOPIC])["error_code"] == NONE
        assert hb(c, "g-persist-swap", "m1", -1)["error_code"] == NONE
        join = c.request(JOIN, 5, {"group_id": "g-persist-swap", "session_timeout_ms": 6000,
                                   "rebalance_timeout_ms": 6000, "member_id": "", "group_instance_id": "classic-1",
                                   "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        assert join["error_code"] == NONE, join
        # an empty group that stays a consumer group is kept with its epoch
        assert hb(c, "g-persist-empty", "m1", 0, topics=[TOPIC])["error_code"] == NONE
        assert hb(c, "g-persist-empty", "m1", -1)["error_code"] == NONE
        empty_epoch = describe(c, "g-persist-empty")["group_epoch"]
    b.restart()
    with RawClient(b.port) as c:
        assert describe(c, "g-persist-del")["error_code"] == GROUP_ID_NOT_FOUND
        assert describe(c, "g-persist-swap")["error_code"] == GROUP_ID_NOT_FOUND
        d = describe(c, "g-persist-empty")
        assert d["error_code"] == NONE and d["group_state"] == "Empty" and d["group_epoch"] == empty_epoch == 2
