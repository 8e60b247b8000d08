"""Issue 27 (cg27), ZooKeeper mode (3 brokers): a KIP-848 group with a regex subscription and a member that keeps a
partition from an older epoch, its coordinator killed. The new coordinator loads the group from the replicated
``__consumer_offsets`` partition with the ConsumerGroupRegularExpression record and the current-assignment
records' KIP-1251 AssignmentEpochs: the members keep epochs and assignments (no new group epoch), and a commit at
the member's previous epoch is judged as the old coordinator judged it (accepted for the partition kept since that
epoch, STALE_MEMBER_EPOCH for the one given away)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from support import agreed_coordinator, create_topic, request

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEARTBEAT, DESCRIBE, COMMIT, METADATA = 68, 69, 8, 3
NONE, STALE_MEMBER_EPOCH = 0, 113


def _hb(broker: Any, group: str, member: str, epoch: int, *, regex: str | None = None,
        owned: list[tuple[uuid.UUID, list[int]]] | None = None) -> dict:
    return request(broker, HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 10000 if epoch == 0 else -1, "subscribed_topic_names": None,
        "subscribed_topic_regex": regex, "server_assignor": None,
        "topic_partitions": [] if epoch == 0 else (None if owned is None else [
            {"topic_id": t, "partitions": ps} for t, ps in owned])}, timeout=15)


def _parts(r: dict) -> list[int]:
    assert r["error_code"] == NONE and r["assignment"] is not None, r
    return sorted(p for t in r["assignment"]["topic_partitions"] for p in t["partitions"])


def test_regex_group_and_assignment_epochs_after_coordinator_kill(cluster: Any) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, group, regex = f"cg27f-{suffix}", f"g-cg27f-{suffix}", f"cg27f-{suffix}.*"
    create_topic(cluster.bootstrap, topic, 2, 3)
    coord = agreed_coordinator(cluster, group)
    c = cluster.brokers[coord]
    md = request(c, METADATA, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                   "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    raw = md["topics"][0]["topic_id"]
    tid = raw if isinstance(raw, uuid.UUID) else uuid.UUID(bytes=bytes(raw))
    r = _hb(c, group, "m1", 0, regex=regex)
    assert r["error_code"] == NONE, r
    e1 = r["member_epoch"]
    deadline = time.monotonic() + 30
    while True:  # the regex is resolved off the loop (regexloop): m1 gets the topic once the resolution lands
        r = _hb(c, group, "m1", e1, owned=[])
        assert r["error_code"] == NONE, r
        e1 = r["member_epoch"]
        if r["assignment"] is not None and _parts(r) == [0, 1]:
            break
        assert time.monotonic() < deadline, r
        time.sleep(0.1)
    r2 = _hb(c, group, "m2", 0, regex=regex)  # the regex is resolved already: only m2's join moves the epoch
    e2 = e1 + 1
    assert r2["error_code"] == NONE and r2["member_epoch"] == e2
    kept = _parts(_hb(c, group, "m1", e1, owned=[(tid, [0, 1])]))  # m1 revokes one partition at epoch e1
    given = 1 - kept[0]
    assert _hb(c, group, "m1", e1, owned=[(tid, kept)])["member_epoch"] == e2
    assert _parts(_hb(c, group, "m2", e2, owned=[])) == [given]

    def commit(broker: Any, member: str, epoch: int, partitions: list[int]) -> dict[int, int]:
        res = request(broker, COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member, "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": p, "committed_offset": 0,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}
                                                     for p in partitions]}]}, timeout=15)
        return {int(p["partition_index"]): int(p["error_code"]) for p in res["topics"][0]["partitions"]}

    def describe(broker: Any) -> dict:
        return request(broker, DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False},
                       timeout=15)["groups"][0]

    assert commit(c, "m1", e1, [0, 1]) == {kept[0]: NONE, given: STALE_MEMBER_EPOCH}
    before = describe(c)
    c.kill()
    try:
        new = agreed_coordinator(cluster, group)
        assert new != coord
        nb = cluster.brokers[new]
        d = describe(nb)
        assert d["error_code"] == NONE, d
        assert (d["group_epoch"], d["assignment_epoch"]) == (before["group_epoch"], before["assignment_epoch"])
        view = {m["member_id"]: (m["member_epoch"], m["subscribed_topic_regex"],
                                 [p for t in m["assignment"]["topic_partitions"] for p in t["partitions"]])
                for m in d["members"]}
        assert view == {"m1": (e2, regex, kept), "m2": (e2, regex, [given])}
        # the assignment epochs came with the group: the commit at epoch e1 is judged as before the move
        assert commit(nb, "m1", e1, [0, 1]) == {kept[0]: NONE, given: STALE_MEMBER_EPOCH}
        # heartbeats go on at the same epochs: the regex's replayed resolution gives the same topics
        r = _hb(nb, group, "m1", e2, owned=[(tid, kept)])
        assert r["error_code"] == NONE and r["member_epoch"] == e2
        assert describe(nb)["group_epoch"] == before["group_epoch"]
    finally:
        if not c.running:
            c.start(timeout=120)
