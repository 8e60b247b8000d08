"""Issue 27 item 1 (regexacl): an empty KIP-848 consumer group without committed offsets is deleted at the next run
of the coordinator's cleanup (``offsets.retention.check.interval.ms``), its records tombstoned, as Kafka's
``cleanupGroupMetadata`` / ``maybeDeleteGroup`` do; one that committed offsets stays until they expire; a group with
members stays. Raw frames against ``tidelog serve``, across a restart."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from helpers import RawClient

from tidelog.errors import ErrorCode

from .conftest import create_topic, wait_until
from .test_consumer_protocol import FAST_CONSUMER_GROUPS

HEARTBEAT, DESCRIBE, OFFSET_COMMIT, LIST_GROUPS = 68, 69, 8, 16
GROUP_ID_NOT_FOUND, LOADING = ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
TOPIC = "expiry-t"


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    b = broker_factory({**FAST_CONSUMER_GROUPS, "offsets.retention.check.interval.ms": "200"})
    create_topic(b.bootstrap, TOPIC, 1)
    return b


def _hb(c: RawClient, group: str, member: str, epoch: int) -> dict:
    r = c.request(HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 5000 if epoch == 0 else -1,
        "subscribed_topic_names": [TOPIC] if epoch == 0 else None, "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": [] if epoch == 0 else None})
    assert r["error_code"] == 0, r
    return r


def _described(c: RawClient, group: str) -> dict:
    """ConsumerGroupDescribe of one group, once the coordinator has loaded (COORDINATOR_LOAD_IN_PROGRESS right after
    a restart: the port answers before ``__consumer_offsets`` is read back)."""
    def once() -> dict | None:
        d = c.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
        return None if d["error_code"] == LOADING else d

    return wait_until(once, 30, f"the coordinator of {group} to load")


def _state(c: RawClient, group: str) -> str | None:
    """The group's state in ConsumerGroupDescribe, None when it does not exist."""
    d = _described(c, group)
    if d["error_code"] == GROUP_ID_NOT_FOUND:
        return None
    assert d["error_code"] == 0, d
    return str(d["group_state"])


def _listed(c: RawClient) -> set[str]:
    return {g["group_id"] for g in c.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]}


def test_empty_groups_without_offsets_expire(b: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    gone, kept, live = f"exp-gone-{tag}", f"exp-kept-{tag}", f"exp-live-{tag}"
    with RawClient(b.port) as c:
        for group in (gone, kept, live):
            _hb(c, group, f"{group}-m", 0)
        # the kept group commits an offset (v9: member id and epoch) before its member leaves
        epoch = _hb(c, kept, f"{kept}-m", 1)["member_epoch"]
        r = c.request(OFFSET_COMMIT, 9, {"group_id": kept, "generation_id_or_member_epoch": epoch,
                                         "member_id": f"{kept}-m", "group_instance_id": None,
                                         "topics": [{"name": TOPIC, "partitions": [
                                             {"partition_index": 0, "committed_offset": 0,
                                              "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == 0, r
        for group in (gone, kept):
            _hb(c, group, f"{group}-m", -1)
            assert _state(c, group) in ("Empty", None)
        wait_until(lambda: _state(c, gone) is None, 15, "the empty group without offsets to be deleted")
        assert gone not in _listed(c)
        # the same cleanup runs kept the group with offsets and the group with a member
        assert _state(c, kept) == "Empty" and kept in _listed(c)
        assert _state(c, live) is not None
        _hb(c, live, f"{live}-m", 1)
    b.restart()
    with RawClient(b.port) as c:
        # the tombstones were written: it does not come back with the load (ListGroups only after the load: _state
        # waits for it)
        assert _state(c, gone) is None and gone not in _listed(c)
        assert _state(c, kept) == "Empty"
