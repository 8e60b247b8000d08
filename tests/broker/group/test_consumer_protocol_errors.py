"""KIP-848 at the protocol level (raw ConsumerGroupHeartbeat / Describe / OffsetCommit v9 / OffsetFetch v9 frames):
epochs, revocation before reassignment, fencing and every error code, against ``tidelog serve``."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import pytest
from helpers import RawClient

from tidelog.errors import ErrorCode

from .conftest import create_topic, wait_until

HEARTBEAT, DESCRIBE = 68, 69
COMMIT, FETCH, FIND_COORDINATOR, JOIN, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 10, 11, 15, 16

NONE, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION, INVALID_REQUEST = 0, 23, 25, 35, 42
GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID = 69, 81, 82
FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH = 110, 111, 112, 113
INVALID_REGULAR_EXPRESSION = ErrorCode.INVALID_REGULAR_EXPRESSION

TOPIC = "kip848-raw"
MAX_SIZE = 4


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({
        "group.consumer.min.session.timeout.ms": "1500",
        "group.consumer.session.timeout.ms": "1500",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "300",
        "group.consumer.max.size": str(MAX_SIZE),
        "group.initial.rebalance.delay.ms": "100",
        "offsets.topic.num.partitions": "3",
    })
    create_topic(br.bootstrap, TOPIC, 2)
    return br


def _tid(c: RawClient, topic: str) -> uuid.UUID:
    md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    tid = md["topics"][0]["topic_id"]
    return tid if isinstance(tid, uuid.UUID) else uuid.UUID(bytes=bytes(tid))


def hb(c: RawClient, group: str, member: str, epoch: int, *, topics: list[str] | None = None,
       owned: list[tuple[uuid.UUID, list[int]]] | None = None, instance: str | None = None,
       regex: str | None = None, assignor: str | None = None, rebalance_ms: int = 5000, version: int = 1) -> dict:
    body: dict[str, Any] = {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance, "rack_id": None,
        "rebalance_timeout_ms": rebalance_ms if epoch == 0 else -1,
        "subscribed_topic_names": topics, "server_assignor": assignor,
        "topic_partitions": None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned],
    }
    if version >= 1:
        body["subscribed_topic_regex"] = regex
    if epoch == 0 and owned is None:
        body["topic_partitions"] = []
    return c.request(HEARTBEAT, version, body)


def parts(r: dict) -> list[int]:
    a = r.get("assignment")
    assert a is not None, r
    return sorted(p for t in a["topic_partitions"] for p in t["partitions"])


def test_join_epochs_and_interval(b: Any) -> None:
    with RawClient(b.port) as c:
        r = hb(c, "g-join", "m1", 0, topics=[TOPIC])
        assert r["error_code"] == NONE, r
        assert r["member_id"] == "m1" and r["member_epoch"] == 1
        assert r["heartbeat_interval_ms"] == 300
        assert parts(r) == [0, 1]
        tid = _tid(c, TOPIC)
        # a steady heartbeat with the same owned partitions: same epoch, no assignment repeated
        r = hb(c, "g-join", "m1", 1, owned=[(tid, [0, 1])])
        assert r["error_code"] == NONE and r["member_epoch"] == 1 and r["assignment"] is None
        # v0: the coordinator makes the member id
        r0 = hb(c, "g-join-v0", "", 0, topics=[TOPIC], version=0)
        assert r0["error_code"] == NONE and r0["member_id"]


def test_revocation_before_reassignment(b: Any) -> None:
    """m2 joins: m1 must give a partition up (epoch unchanged) and acknowledge it before m2 gets it."""
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        r1 = hb(c, "g-rev", "m1", 0, topics=[TOPIC])
        assert parts(r1) == [0, 1] and r1["member_epoch"] == 1
        r2 = hb(c, "g-rev", "m2", 0, topics=[TOPIC])
        assert r2["error_code"] == NONE and r2["member_epoch"] == 2
        assert parts(r2) == []  # its target partition is still m1's
        r1 = hb(c, "g-rev", "m1", 1, owned=[(tid, [0, 1])])
        assert r1["member_epoch"] == 1  # revoking first, at the old epoch
        kept = parts(r1)
        assert len(kept) == 1
        given = ({0, 1} - set(kept)).pop()
        r2 = hb(c, "g-rev", "m2", 2, owned=[])
        assert r2["error_code"] == NONE and (r2["assignment"] is None or parts(r2) == [])  # not released yet
        # m1 still reports the revoked partition: nothing moves
        r1 = hb(c, "g-rev", "m1", 1, owned=[(tid, [0, 1])])
        assert r1["member_epoch"] == 1
        r1 = hb(c, "g-rev", "m1", 1, owned=[(tid, kept)])  # revocation acknowledged
        assert r1["error_code"] == NONE and r1["member_epoch"] == 2
        r2 = hb(c, "g-rev", "m2", 2, owned=[])
        assert parts(r2) == [given] and r2["member_epoch"] == 2
        d = c.request(DESCRIBE, 1, {"group_ids": ["g-rev"], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == NONE and d["group_epoch"] == 2 and d["assignment_epoch"] == 2
        assert d["assignor_name"] == "uniform"
        members = {m["member_id"]: m for m in d["members"]}
        assert [p for t in members["m2"]["assignment"]["topic_partitions"] for p in t["partitions"]] == [given]
        assert members["m2"]["assignment"]["topic_partitions"][0]["topic_name"] == TOPIC
        assert members["m1"]["member_type"] == 1


def test_commit_with_an_older_epoch_per_partition(b: Any) -> None:
    """KIP-1251: a commit whose member epoch is older than the member's (it raced the heartbeat that moved the epoch;
    the Java 4.3 client's commitSync does this) is accepted for each partition the member owns since that epoch or
    before, and is STALE_MEMBER_EPOCH for a partition it no longer owns, one assigned after that epoch, or a newer
    epoch."""
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        assert hb(c, "g-older", "m1", 0, topics=[TOPIC])["member_epoch"] == 1  # m1 owns 0 and 1 since epoch 1
        hb(c, "g-older", "m2", 0, topics=[TOPIC])
        kept = parts(hb(c, "g-older", "m1", 1, owned=[(tid, [0, 1])]))
        given = ({0, 1} - set(kept)).pop()
        assert hb(c, "g-older", "m1", 1, owned=[(tid, kept)])["member_epoch"] == 2  # revoked: m1 moves to epoch 2
        r2 = hb(c, "g-older", "m2", 2, owned=[])
        assert parts(r2) == [given] and r2["member_epoch"] == 2  # m2 owns `given` since epoch 2

        def commit(member: str, ep: int, partitions: list[int]) -> dict[int, int]:
            res = c.request(COMMIT, 9, {
                "group_id": "g-older", "generation_id_or_member_epoch": ep, "member_id": member,
                "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": 7,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}
                                                         for p in partitions]}]})
            return {int(p["partition_index"]): int(p["error_code"]) for p in res["topics"][0]["partitions"]}

        # m1 at its previous epoch 1: its kept partition (owned since epoch 1) is accepted, the revoked one is not
        assert commit("m1", 1, [0, 1]) == {kept[0]: NONE, given: STALE_MEMBER_EPOCH}
        assert commit("m1", 2, kept) == {kept[0]: NONE}
        assert commit("m1", 3, kept) == {kept[0]: STALE_MEMBER_EPOCH}  # newer than the member's: refused whole
        assert commit("m1", -1, kept) == {kept[0]: STALE_MEMBER_EPOCH}
        # m2 got `given` at epoch 2: a commit at epoch 1 (before that assignment) is stale for it
        assert commit("m2", 1, [given]) == {given: STALE_MEMBER_EPOCH}
        assert commit("m2", 2, [given]) == {given: NONE}
        offs = c.request(FETCH, 9, {"groups": [{"group_id": "g-older", "member_id": None, "member_epoch": -1,
                                                "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]}],
                                    "require_stable": False})["groups"][0]["topics"][0]["partitions"]
        assert {p["partition_index"]: p["committed_offset"] for p in offs} == {0: 7, 1: 7}


def test_fencing_errors(b: Any) -> None:
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        hb(c, "g-fence", "m1", 0, topics=[TOPIC])
        assert hb(c, "g-fence", "m1", 7, owned=[])["error_code"] == FENCED_MEMBER_EPOCH  # ahead
        assert hb(c, "g-fence", "nobody", 1, owned=[])["error_code"] == UNKNOWN_MEMBER_ID
        assert hb(c, "g-none", "m1", 3, owned=[])["error_code"] == UNKNOWN_MEMBER_ID  # no such group
        hb(c, "g-fence", "m2", 0, topics=[TOPIC])
        r = hb(c, "g-fence", "m1", 1, owned=[(tid, [0, 1])])
        kept = parts(r)
        hb(c, "g-fence", "m1", 1, owned=[(tid, kept)])  # now at epoch 2, previous epoch 1
        # the previous epoch with owned partitions inside the assignment is a lost response, not a fence
        assert hb(c, "g-fence", "m1", 1, owned=[(tid, kept)])["error_code"] == NONE
        assert hb(c, "g-fence", "m1", 1, owned=[(tid, [0, 1])])["error_code"] == FENCED_MEMBER_EPOCH
        # a fenced member rejoins with epoch 0 and the same id
        r = hb(c, "g-fence", "m1", 0, topics=[TOPIC])
        assert r["error_code"] == NONE and r["member_epoch"] >= 1
        # invalid requests
        assert hb(c, "g-fence", "", 0, topics=[TOPIC])["error_code"] == INVALID_REQUEST  # v1: the client's id
        assert hb(c, "g-fence", "m9", 0, topics=None)["error_code"] == INVALID_REQUEST  # nothing subscribed
        assert hb(c, "g-fence", "m9", 0, topics=[TOPIC], owned=[(tid, [0])])["error_code"] == INVALID_REQUEST
        assert hb(c, "g-fence", "m9", -3, owned=[])["error_code"] == INVALID_REQUEST
        assert hb(c, "", "m9", 0, topics=[TOPIC])["error_code"] == INVALID_REQUEST
        assert hb(c, "g-fence", "m9", 0, topics=[TOPIC], assignor="sticky")["error_code"] == UNSUPPORTED_ASSIGNOR
        assert hb(c, "g-fence", "m9", 0, regex="(unclosed")["error_code"] == INVALID_REGULAR_EXPRESSION
        # leave: epoch -1 answered, then the member is unknown
        r = hb(c, "g-fence", "m2", -1)
        assert r["error_code"] == NONE and r["member_epoch"] == -1
        assert hb(c, "g-fence", "m2", 2, owned=[])["error_code"] == UNKNOWN_MEMBER_ID


def test_static_members(b: Any) -> None:
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        r = hb(c, "g-static", "s1", 0, topics=[TOPIC], instance="inst-a")
        assert parts(r) == [0, 1]
        assert hb(c, "g-static", "s2", 0, topics=[TOPIC], instance="inst-a")["error_code"] == UNRELEASED_INSTANCE_ID
        assert hb(c, "g-static", "s2", 1, owned=[], instance="inst-a")["error_code"] == FENCED_INSTANCE_ID
        r = hb(c, "g-static", "s1", -2, instance="inst-a")  # temporary leave: the partitions stay reserved
        assert r["error_code"] == NONE and r["member_epoch"] == -2
        other = hb(c, "g-static", "o1", 0, topics=[TOPIC])
        assert other["assignment"] is None or parts(other) == []  # inst-a's partitions are not handed out
        r = hb(c, "g-static", "s2", 0, topics=[TOPIC], instance="inst-a")  # the instance comes back as s2
        assert r["error_code"] == NONE
        assert set(parts(r)) >= {0} or set(parts(r)) >= {1}
        assert hb(c, "g-static", "s1", 1, owned=[(tid, [])], instance="inst-a")["error_code"] == FENCED_INSTANCE_ID


def test_group_max_size(b: Any) -> None:
    with RawClient(b.port) as c:
        for i in range(MAX_SIZE):
            assert hb(c, "g-max", f"m{i}", 0, topics=[TOPIC])["error_code"] == NONE
        assert hb(c, "g-max", "one-too-many", 0, topics=[TOPIC])["error_code"] == GROUP_MAX_SIZE_REACHED


def test_session_and_rebalance_timeouts(b: Any) -> None:
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        hb(c, "g-timeout", "quiet", 0, topics=[TOPIC])
        time.sleep(2.5)  # the member's own silence is the event under test (session 1.5 s)
        assert hb(c, "g-timeout", "quiet", 1, owned=[])["error_code"] == UNKNOWN_MEMBER_ID
        # a member that never acknowledges a revocation is removed after its rebalance timeout
        hb(c, "g-timeout2", "slow", 0, topics=[TOPIC], rebalance_ms=300)
        hb(c, "g-timeout2", "fast", 0, topics=[TOPIC])
        r = hb(c, "g-timeout2", "slow", 1, owned=[(tid, [0, 1])])
        assert len(parts(r)) == 1
        r = wait_until(lambda: hb(c, "g-timeout2", "fast", 2, owned=[]).get("assignment"), 5,
                       "the unrevoked partition goes to the other member once the slow one is fenced")
        assert r["topic_partitions"]
        assert hb(c, "g-timeout2", "slow", 1, owned=[(tid, [0, 1])])["error_code"] == UNKNOWN_MEMBER_ID


def test_regex_subscription_and_new_topics(b: Any) -> None:
    """A regex subscription is resolved on the broker (within a second of a topic's creation, as Kafka 4 resolves
    regexes asynchronously): matching topics are assigned, a new matching topic is added."""
    create_topic(b.bootstrap, "kip848rx-a", 2)
    with RawClient(b.port) as c:
        r = hb(c, "g-regex", "m1", 0, regex="kip848rx-.*")
        assert r["error_code"] == NONE
        ta = _tid(c, "kip848rx-a")
        state = {"epoch": r["member_epoch"], "owned": {}}

        def beat() -> dict[uuid.UUID, list[int]]:
            owned = [(t, ps) for t, ps in state["owned"].items()]
            got = hb(c, "g-regex", "m1", state["epoch"], owned=owned)
            assert got["error_code"] == NONE, got
            state["epoch"] = got["member_epoch"]
            if got["assignment"] is not None:
                state["owned"] = {t["topic_id"]: sorted(t["partitions"]) for t in got["assignment"]["topic_partitions"]}
            return state["owned"]

        def create_beating(name: str, partitions: int) -> None:
            """Create a topic while the member goes on heartbeating, as a consumer does (the module's session
            timeout is 1.5 s, which an admin client's CreateTopics can take on a loaded machine)."""
            with ThreadPoolExecutor(1) as pool:
                created = pool.submit(create_topic, b.bootstrap, name, partitions)
                while not created.done():
                    beat()
                    wait((created,), timeout=0.3)
                created.result()

        wait_until(lambda: beat() == {ta: [0, 1]}, 10, "the matching topic assigned")
        create_beating("kip848rx-b", 3)
        tb = _tid(c, "kip848rx-b")
        wait_until(lambda: beat() == {ta: [0, 1], tb: [0, 1, 2]}, 10, "the new matching topic assigned")
        create_beating("other-kip848", 1)  # not matching: nothing changes
        assert beat() == {ta: [0, 1], tb: [0, 1, 2]}


def test_offsets_with_member_epochs(b: Any) -> None:
    with RawClient(b.port) as c:
        r = hb(c, "g-off", "m1", 0, topics=[TOPIC])
        epoch = r["member_epoch"]

        def commit(version: int, member: str, ep: int) -> int:
            res = c.request(COMMIT, version, {
                "group_id": "g-off", "generation_id_or_member_epoch": ep, "member_id": member,
                "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                          "committed_leader_epoch": -1,
                                                          "committed_metadata": ""}]}]})
            return int(res["topics"][0]["partitions"][0]["error_code"])

        assert commit(9, "m1", epoch) == NONE
        assert commit(9, "m1", epoch + 1) == STALE_MEMBER_EPOCH
        assert commit(9, "ghost", epoch) == UNKNOWN_MEMBER_ID
        assert commit(9, "", -1) == UNKNOWN_MEMBER_ID  # an admin commit needs an empty group
        assert commit(8, "m1", epoch) == UNSUPPORTED_VERSION

        def fetch(member: str | None, ep: int) -> dict:
            return c.request(FETCH, 9, {"groups": [{"group_id": "g-off", "member_id": member, "member_epoch": ep,
                                                    "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
                                        "require_stable": False})["groups"][0]

        g = fetch("m1", epoch)
        assert g["error_code"] == NONE and g["topics"][0]["partitions"][0]["committed_offset"] == 5
        assert fetch("m1", epoch + 3)["error_code"] == STALE_MEMBER_EPOCH
        assert fetch(None, -1)["error_code"] == NONE  # admin fetch
        # group APIs of the classic world see a consumer group as Kafka 4 does
        dg = c.request(DESCRIBE_GROUPS, 6, {"groups": ["g-off"], "include_authorized_operations": False})
        assert dg["groups"][0]["error_code"] == GROUP_ID_NOT_FOUND
        dg5 = c.request(DESCRIBE_GROUPS, 5, {"groups": ["g-off"], "include_authorized_operations": False})
        assert dg5["groups"][0]["error_code"] == NONE and dg5["groups"][0]["group_state"] == "Dead"
        lg = c.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
        row = [g for g in lg["groups"] if g["group_id"] == "g-off"]
        assert row and row[0]["group_type"] == "consumer" and row[0]["group_state"] in ("Stable", "Reconciling")
        lg = c.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert "g-off" not in {g["group_id"] for g in lg["groups"]}
        # a classic JoinGroup into it (Kafka 4: a member using the classic protocol): a member id first, then its
        # metadata must be a ConsumerProtocolSubscription (else INCONSISTENT_GROUP_PROTOCOL); another protocol type
        # is refused (tests/broker/group/test_group_migration_raw.py has the members that join)
        body = {"group_id": "g-off", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        join = c.request(JOIN, 5, body)
        assert join["error_code"] == 79  # MEMBER_ID_REQUIRED
        assert c.request(JOIN, 5, {**body, "member_id": join["member_id"]})["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        assert c.request(JOIN, 5, {**body, "member_id": join["member_id"], "protocol_type": "connect"}
                         )["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        assert c.request(42, 2, {"groups_names": ["g-off"]})["results"][0]["error_code"] == 68  # NON_EMPTY_GROUP
        # OffsetDelete: not for a topic the group's members subscribe to
        od = c.request(47, 0, {"group_id": "g-off", "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert od["error_code"] == NONE and od["topics"][0]["partitions"][0]["error_code"] == 86  # SUBSCRIBED_TO_TOPIC
        hb(c, "g-off", "m1", -1)
        assert c.request(42, 2, {"groups_names": ["g-off"]})["results"][0]["error_code"] == NONE
        d = c.request(DESCRIBE, 0, {"group_ids": ["g-off"], "include_authorized_operations": False})
        assert d["groups"][0]["error_code"] == GROUP_ID_NOT_FOUND


def test_find_coordinator_versions(b: Any) -> None:
    with RawClient(b.port) as c:
        r = c.request(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["g-a", "g-b"]})
        assert [x["error_code"] for x in r["coordinators"]] == [NONE, NONE]
        assert {x["port"] for x in r["coordinators"]} == {b.port}
        r = c.request(FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": ["g-a:t:0"]})
        assert r["coordinators"][0]["error_code"] == INVALID_REQUEST  # share groups are not served
        versions = {k["api_key"]: (k["min_version"], k["max_version"])
                    for k in c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})["api_keys"]}
        assert versions[HEARTBEAT] == (0, 1) and versions[DESCRIBE] == (0, 1)
        assert versions[COMMIT][1] == 10 and versions[FETCH][1] == 10  # v10: topic ids (Kafka 4.3)
        assert versions[FIND_COORDINATOR][1] == 6 and versions[DESCRIBE_GROUPS][1] == 6
        assert versions[LIST_GROUPS][1] == 5


def test_empty_consumer_group_becomes_classic_and_back(b: Any) -> None:
    """An empty group changes protocol with its next member (Kafka's conversion of empty groups)."""
    with RawClient(b.port) as c:
        assert hb(c, "g-swap", "m1", 0, topics=[TOPIC])["error_code"] == NONE
        assert hb(c, "g-swap", "m1", -1)["error_code"] == NONE
        body = {"group_id": "g-swap", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": "",
                "group_instance_id": "classic-1", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        join = c.request(JOIN, 5, body)
        assert join["error_code"] == NONE, join
        dg = c.request(DESCRIBE_GROUPS, 6, {"groups": ["g-swap"], "include_authorized_operations": False})
        assert dg["groups"][0]["error_code"] == NONE and dg["groups"][0]["protocol_type"] == "consumer"
        # a classic group with members whose metadata is not the consumer protocol cannot be upgraded
        r = hb(c, "g-swap", "m2", 0, topics=[TOPIC])
        assert r["error_code"] == GROUP_ID_NOT_FOUND
