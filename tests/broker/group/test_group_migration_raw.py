"""Online migration between the classic and the consumer protocol (``group.consumer.migration.policy``) at the
protocol level (raw JoinGroup / SyncGroup / Heartbeat / OffsetCommit and ConsumerGroupHeartbeat frames) against
``tidelog serve``: the upgrade of a classic group by a consumer-protocol member, classic members inside the
consumer group (generation = member epoch, revocation before reassignment, REBALANCE_IN_PROGRESS to rejoin), the
downgrade when the last consumer-protocol member leaves, the ClassicMemberMetadata kept across a restart, and the
policy ``disabled``."""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pytest
from helpers import RawClient

from tidelog.broker.group import consumer_records as crec
from tidelog.protocol import codec

from .conftest import create_topic, wait_until

HEARTBEAT68, DESCRIBE69 = 68, 69
COMMIT, FETCH, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 11, 12, 13, 14, 15, 16
NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 22, 25, 27
MEMBER_ID_REQUIRED, GROUP_ID_NOT_FOUND = 79, 69

TOPIC = "migr-raw"
CONFIG = {
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "2000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory(CONFIG)
    create_topic(br.bootstrap, TOPIC, 2)
    return br


@pytest.fixture(scope="module")
def disabled(broker_factory: Any) -> Any:
    br = broker_factory({**CONFIG, "group.consumer.migration.policy": "disabled"})
    create_topic(br.bootstrap, TOPIC, 2)
    return br


def subscription(owned: list[int] = (), version: int = 1) -> bytes:  # type: ignore[assignment]
    body = {"topics": [TOPIC], "user_data": None,
            "owned_partitions": [{"topic": TOPIC, "partitions": list(owned)}] if owned else [],
            "generation_id": -1, "rack_id": None}
    return struct.pack(">h", version) + codec.encode_data("ConsumerProtocolSubscription", version, body)


def assignment(ps: list[int], version: int = 1) -> bytes:
    body = {"assigned_partitions": [{"topic": TOPIC, "partitions": ps}] if ps else [], "user_data": None}
    return struct.pack(">h", version) + codec.encode_data("ConsumerProtocolAssignment", version, body)


def assigned(data: bytes) -> list[int]:
    (version,) = struct.unpack_from(">h", data, 0)
    body = codec.decode_data("ConsumerProtocolAssignment", min(version, 3), memoryview(data)[2:])
    return sorted(p for t in body["assigned_partitions"] for p in t["partitions"])


def join(c: RawClient, group: str, member: str, owned: list[int] = (), session: int = 3000) -> dict:  # type: ignore[assignment]
    return c.request(JOIN, 5, {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 3000,
                               "member_id": member, "group_instance_id": None, "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": subscription(owned)}]})


def sync(c: RawClient, group: str, member: str, gen: int, given: dict[str, list[int]] | None = None) -> dict:
    return c.request(SYNC, 5, {"group_id": group, "generation_id": gen, "member_id": member,
                               "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                               "assignments": [{"member_id": m, "assignment": assignment(ps)}
                                               for m, ps in (given or {}).items()]})


def heartbeat(c: RawClient, group: str, member: str, gen: int) -> int:
    return int(c.request(HEARTBEAT, 4, {"group_id": group, "generation_id": gen, "member_id": member,
                                        "group_instance_id": None})["error_code"])


def hb68(c: RawClient, group: str, member: str, epoch: int, owned: list[int] | None = None,
         tid: uuid.UUID | None = None, instance: str | None = None) -> dict:
    return c.request(HEARTBEAT68, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance, "rack_id": None,
        "rebalance_timeout_ms": 5000 if epoch == 0 else -1, "subscribed_topic_names": [TOPIC] if epoch == 0 else None,
        "subscribed_topic_regex": None, "server_assignor": None,
        "topic_partitions": [] if owned is None else [{"topic_id": tid, "partitions": owned}]})


def parts68(r: dict) -> list[int] | None:
    a = r.get("assignment")
    return None if a is None else sorted(p for t in a["topic_partitions"] for p in t["partitions"])


def group_type(c: RawClient, group: str) -> tuple[str, str]:
    rows = [g for g in c.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
            if g["group_id"] == group]
    assert len(rows) == 1, rows
    return rows[0]["group_type"], rows[0]["group_state"]


def commit(c: RawClient, group: str, member: str, gen: int, offset: int, version: int = 8) -> int:
    r = c.request(COMMIT, version, {"group_id": group, "generation_id_or_member_epoch": gen, "member_id": member,
                                    "group_instance_id": None,
                                    "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0,
                                                                               "committed_offset": offset,
                                                                               "committed_leader_epoch": -1,
                                                                               "committed_metadata": ""}]}]})
    return int(r["topics"][0]["partitions"][0]["error_code"])


def committed(c: RawClient, group: str) -> int:
    r = c.request(FETCH, 8, {"groups": [{"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
                             "require_stable": False})
    return int(r["groups"][0]["topics"][0]["partitions"][0]["committed_offset"])


def _topic_id(c: RawClient) -> uuid.UUID:
    md = c.request(3, 12, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    tid = md["topics"][0]["topic_id"]
    return tid if isinstance(tid, uuid.UUID) else uuid.UUID(bytes=bytes(tid))


def _classic_stable(c: RawClient, group: str) -> tuple[str, int]:
    """One classic member owning both partitions, Stable; (member id, generation)."""
    r = join(c, group, "")
    assert r["error_code"] == MEMBER_ID_REQUIRED
    mid = r["member_id"]
    r = join(c, group, mid)
    assert r["error_code"] == NONE and r["leader"] == mid, r
    gen = r["generation_id"]
    s = sync(c, group, mid, gen, {mid: [0, 1]})
    assert s["error_code"] == NONE and assigned(s["assignment"]) == [0, 1]
    assert group_type(c, group) == ("classic", "Stable")
    return mid, gen


def test_upgrade_classic_member_inside_and_downgrade(b: Any) -> None:
    g = "g-migr-raw"
    with RawClient(b.port) as c:
        tid = _topic_id(c)
        a, gen = _classic_stable(c, g)
        assert commit(c, g, a, gen, 7) == NONE
        # a consumer-protocol member joins: the group is upgraded; its partitions are still the classic member's
        r = hb68(c, g, "m2", 0)
        assert r["error_code"] == NONE and r["member_epoch"] == gen + 1, r
        assert parts68(r) == []
        assert group_type(c, g)[0] == "consumer"
        d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
        types = {m["member_id"]: (m["member_type"], m["member_epoch"]) for m in d["members"]}
        assert types == {a: (0, gen), "m2": (1, gen + 1)}
        dg = c.request(DESCRIBE_GROUPS, 6, {"groups": [g], "include_authorized_operations": False})["groups"][0]
        assert dg["error_code"] == GROUP_ID_NOT_FOUND  # not a classic group any more (Kafka 4)
        assert committed(c, g) == 7  # offsets kept
        # the classic member: its generation is its epoch; told to rejoin; commits with it (OffsetCommit v8)
        assert heartbeat(c, g, a, gen + 5) == ILLEGAL_GENERATION
        assert heartbeat(c, g, a, gen) == REBALANCE_IN_PROGRESS
        assert commit(c, g, a, gen, 8) == NONE
        assert commit(c, g, a, gen + 3, 9) == ILLEGAL_GENERATION
        # it rejoins still owning both: it must revoke one first (same generation), the other stays its own
        r = join(c, g, a, owned=[0, 1])
        assert r["error_code"] == NONE and r["generation_id"] == gen and r["leader"] == "" and not r["members"], r
        assert r["protocol_name"] == "range"
        s = sync(c, g, a, gen)
        assert s["error_code"] == NONE
        kept = assigned(s["assignment"])
        assert len(kept) == 1
        assert heartbeat(c, g, a, gen) == REBALANCE_IN_PROGRESS  # revocation pending: rejoin
        r2 = hb68(c, g, "m2", gen + 1, owned=[], tid=tid)
        assert not parts68(r2)  # not released yet
        r = join(c, g, a, owned=kept)
        assert r["error_code"] == NONE and r["generation_id"] == gen + 1
        assert assigned(sync(c, g, a, gen + 1)["assignment"]) == kept
        assert heartbeat(c, g, a, gen + 1) == NONE
        r2 = hb68(c, g, "m2", gen + 1, owned=[], tid=tid)
        assert parts68(r2) == [1 - kept[0]]
        # the last consumer-protocol member leaves: the group becomes classic, a rebalance prepared
        assert hb68(c, g, "m2", -1)["error_code"] == NONE
        assert group_type(c, g) == ("classic", "PreparingRebalance")
        assert heartbeat(c, g, a, gen + 1) == REBALANCE_IN_PROGRESS
        r = join(c, g, a, owned=kept)
        # generation = the group epoch (gen + 1) at the downgrade, then the rebalance completes: gen + 2
        assert r["error_code"] == NONE and r["leader"] == a and r["generation_id"] == gen + 2, r
        s = sync(c, g, a, r["generation_id"], {a: [0, 1]})
        assert s["error_code"] == NONE and assigned(s["assignment"]) == [0, 1]
        assert group_type(c, g) == ("classic", "Stable")
        assert committed(c, g) == 8


def test_classic_member_metadata_survives_restart(b: Any) -> None:
    g = "g-migr-restart"
    with RawClient(b.port) as c:
        a, gen = _classic_stable(c, g)
        assert hb68(c, g, "m2", 0)["error_code"] == NONE
    b.restart()
    with RawClient(b.port) as c:
        def loaded() -> dict | None:
            d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
            return None if d["error_code"] == 14 else d  # COORDINATOR_LOAD_IN_PROGRESS right after the start

        d = wait_until(loaded, 30, f"{g} loaded")
        assert d["error_code"] == NONE
        types = {m["member_id"]: m["member_type"] for m in d["members"]}
        assert types == {a: 0, "m2": 1}  # the classic member is still one (ClassicMemberMetadata replayed)
        assert heartbeat(c, g, a, gen) == REBALANCE_IN_PROGRESS
        r = join(c, g, a)  # it gave everything up (eager): the new epoch at once
        assert r["error_code"] == NONE and r["generation_id"] == gen + 1, r
        assert sync(c, g, a, gen + 1)["error_code"] == NONE
        assert hb68(c, g, "m2", -1)["error_code"] == NONE  # downgraded: ConsumerGroup* tombstones + GroupMetadata
        assert group_type(c, g)[0] == "classic"
    b.restart()
    with RawClient(b.port) as c:
        def listed() -> tuple[str, str] | None:
            r = c.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
            if r["error_code"] == 14:
                return None
            rows = [x for x in r["groups"] if x["group_id"] == g]
            return (rows[0]["group_type"], rows[0]["group_state"]) if rows else ("missing", "")

        assert wait_until(listed, 30, "loaded")[0] == "classic"  # the downgrade survived the restart
        d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == GROUP_ID_NOT_FOUND
        dg = c.request(DESCRIBE_GROUPS, 6, {"groups": [g], "include_authorized_operations": False})["groups"][0]
        assert dg["error_code"] == NONE and [m["member_id"] for m in dg["members"]] == [a]


def test_classic_member_metadata_record_layout() -> None:
    """ConsumerGroupMemberMetadataValue's tagged ClassicMemberMetadata (tag 0) round-trips and is skipped by a
    reader that only knows the plain fields' tag section."""
    classic = crec.ClassicMemberMetadata(45000, (("range", b"\x00\x01abc"), ("roundrobin", b"")))
    mm = crec.MemberMetadata("i", None, "cid", "/h", ["t"], None, 300000, None, classic)
    raw = crec.encode_member_metadata(mm)
    back = crec.decode_member_metadata(raw)
    assert back.classic == classic and back.subscribed_topic_names == ["t"]
    plain = crec.encode_member_metadata(crec.MemberMetadata("i", None, "cid", "/h", ["t"], None, 300000, None))
    assert raw.startswith(plain[:-1]) and plain.endswith(b"\x00") and raw[len(plain) - 1] == 1  # one tagged field
    assert crec.decode_member_metadata(plain).classic is None


def test_policy_disabled_keeps_groups_apart(disabled: Any) -> None:
    g = "g-migr-off"
    with RawClient(disabled.port) as c:
        a, gen = _classic_stable(c, g)
        r = hb68(c, g, "m2", 0)
        assert r["error_code"] == GROUP_ID_NOT_FOUND and "not a consumer group" in (r["error_message"] or "")
        assert group_type(c, g) == ("classic", "Stable")
        assert heartbeat(c, g, a, gen) == NONE
        # a consumer group whose last consumer-protocol member leaves stays a consumer group (no downgrade)
        g2 = "g-migr-off2"
        assert hb68(c, g2, "m1", 0)["error_code"] == NONE
        r = join(c, g2, "")
        assert r["error_code"] == MEMBER_ID_REQUIRED  # as Kafka: classic members may join a consumer group
        r = join(c, g2, r["member_id"])
        assert r["error_code"] == NONE
        assert hb68(c, g2, "m1", -1)["error_code"] == NONE
        assert group_type(c, g2)[0] == "consumer"
        assert c.request(LEAVE, 4, {"group_id": g2, "members": [{"member_id": r["member_id"],
                                                                 "group_instance_id": None}]})["error_code"] == NONE
        assert group_type(c, g2) == ("consumer", "Empty")


def _poll(predicate: Any, timeout: float, what: str, beat: Any) -> Any:
    """Bounded wait that keeps the named members alive (``beat()`` heartbeats them) while a broker timer runs."""
    return wait_until(predicate, timeout, what, step=beat)


def test_classic_member_not_rejoining_is_removed(b: Any) -> None:
    """A classic member told to rejoin (REBALANCE_IN_PROGRESS) that does not within its rebalance timeout is removed
    (Kafka's consumer-group join timeout), though it heartbeats; its partitions go to the others."""
    g = "g-migr-norejoin"
    with RawClient(b.port) as c:
        tid = _topic_id(c)
        a, gen = _classic_stable(c, g)
        r = hb68(c, g, "m2", 0)
        assert r["error_code"] == NONE
        epoch = r["member_epoch"]
        state: dict[str, Any] = {"a": REBALANCE_IN_PROGRESS, "parts": []}

        def beat() -> None:
            state["a"] = heartbeat(c, g, a, gen)
            r2 = hb68(c, g, "m2", epoch, owned=state["parts"], tid=tid)
            if parts68(r2) is not None:
                state["parts"] = parts68(r2)
            time.sleep(0.2)  # the heartbeat interval of these hand-driven members (a broker timer is awaited)

        _poll(lambda: state["a"] == UNKNOWN_MEMBER_ID, 15, "the classic member removed after its rebalance timeout",
              beat)
        _poll(lambda: state["parts"] == [0, 1], 10, "its partitions given to the consumer-protocol member", beat)


def test_downgrade_when_consumer_member_is_fenced(b: Any) -> None:
    """The consumer-protocol member stops heartbeating: its session expires and, the others all using the classic
    protocol, the group becomes classic (Kafka's consumerGroupFenceMember with downgrade)."""
    g = "g-migr-fenced"
    with RawClient(b.port) as c:
        a, gen = _classic_stable(c, g)
        assert hb68(c, g, "m2", 0)["error_code"] == NONE
        assert heartbeat(c, g, a, gen) == REBALANCE_IN_PROGRESS
        r = join(c, g, a)
        gen = r["generation_id"]
        assert sync(c, g, a, gen)["error_code"] == NONE
        # m2 is silent from now on; the classic member goes on heartbeating
        state: dict[str, tuple[str, str]] = {"type": group_type(c, g)}
        assert state["type"][0] == "consumer"

        def beat() -> None:
            heartbeat(c, g, a, gen)
            state["type"] = group_type(c, g)
            time.sleep(0.2)  # the classic member's heartbeat interval

        _poll(lambda: state["type"] == ("classic", "PreparingRebalance"), 15, "downgraded after m2's session", beat)
        assert heartbeat(c, g, a, gen) == REBALANCE_IN_PROGRESS
        r = join(c, g, a)
        assert r["error_code"] == NONE and r["leader"] == a


def test_upgrade_answers_waiting_join_with_rebalance_in_progress(b: Any) -> None:
    """A classic group in the middle of a rebalance (a JoinGroup waiting for the others) is upgraded: the waiting
    JoinGroup is answered REBALANCE_IN_PROGRESS, and that member's rejoin makes it a classic member of the consumer
    group (Kafka's completeAllJoinFutures)."""
    import threading

    g = "g-migr-pending"
    with RawClient(b.port) as c, RawClient(b.port) as c2:
        a, _ = _classic_stable(c, g)
        r = join(c2, g, "")
        assert r["error_code"] == MEMBER_ID_REQUIRED
        b_id = r["member_id"]
        answer: dict[str, dict] = {}
        waiting = threading.Thread(target=lambda: answer.setdefault("join", join(c2, g, b_id)), daemon=True)
        waiting.start()  # waits: the group prepares a rebalance that a (not rejoining) holds open
        wait_until(lambda: group_type(c, g) == ("classic", "PreparingRebalance"), 10, "the rebalance started")
        assert not answer
        r = hb68(c, g, "m3", 0)
        assert r["error_code"] == NONE, r
        waiting.join(10)
        assert answer["join"]["error_code"] == REBALANCE_IN_PROGRESS
        assert group_type(c, g)[0] == "consumer"
        r = join(c2, g, b_id)  # the waiting member rejoins: a member of the consumer group now
        assert r["error_code"] == NONE and r["leader"] == "", r
        s = sync(c2, g, b_id, r["generation_id"])
        assert s["error_code"] == NONE
        d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
        assert {m["member_id"]: m["member_type"] for m in d["members"]} == {a: 0, b_id: 0, "m3": 1}


def test_static_classic_member_replaced_inside_consumer_group(b: Any) -> None:
    """A static classic member (group.instance.id) rejoining with a new member id replaces the old one inside the
    consumer group and keeps its partitions; the old member id is fenced."""
    g = "g-migr-static"
    body = {"group_id": g, "session_timeout_ms": 3000, "rebalance_timeout_ms": 3000, "group_instance_id": "inst-1",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription()}]}
    with RawClient(b.port) as c:
        assert hb68(c, g, "m1", 0)["error_code"] == NONE  # a consumer group with a member
        r = c.request(JOIN, 5, {**body, "member_id": ""})
        assert r["error_code"] == NONE, r  # static: no MEMBER_ID_REQUIRED round
        old, gen = r["member_id"], r["generation_id"]
        r = c.request(JOIN, 5, {**body, "member_id": ""})  # the same instance restarted
        assert r["error_code"] == NONE and r["member_id"] != old, r
        d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
        assert {m["member_id"]: (m["member_type"], m["instance_id"]) for m in d["members"]} == \
            {"m1": (1, None), r["member_id"]: (0, "inst-1")}
        hb = c.request(HEARTBEAT, 4, {"group_id": g, "generation_id": gen, "member_id": old,
                                      "group_instance_id": "inst-1"})
        assert hb["error_code"] == 82  # FENCED_INSTANCE_ID


def test_static_classic_member_restarted_with_consumer_protocol(b: Any) -> None:
    """A static classic member restarted with the consumer protocol and the same group.instance.id: the heartbeat
    upgrades the group and replaces the classic member at once (Kafka replaces a classic static member without
    waiting for its leave), taking its partitions; the old member id is fenced."""
    g = "g-migr-static-up"
    body = {"group_id": g, "session_timeout_ms": 3000, "rebalance_timeout_ms": 3000, "member_id": "",
            "group_instance_id": "inst-up", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription()}]}
    with RawClient(b.port) as c:
        tid = _topic_id(c)
        r = c.request(JOIN, 5, body)
        assert r["error_code"] == NONE and r["leader"] == r["member_id"], r
        old, gen = r["member_id"], r["generation_id"]
        assert sync(c, g, old, gen, {old: [0, 1]})["error_code"] == NONE
        r = hb68(c, g, "new-1", 0, instance="inst-up")
        assert r["error_code"] == NONE, r
        assert parts68(r) == [0, 1] and r["member_epoch"] == gen + 1, r  # the classic member's partitions
        r = hb68(c, g, "new-1", gen + 1, owned=[0, 1], tid=tid, instance="inst-up")
        assert r["error_code"] == NONE and r["member_epoch"] == gen + 1
        d = c.request(DESCRIBE69, 1, {"group_ids": [g], "include_authorized_operations": False})["groups"][0]
        assert [(m["member_id"], m["member_type"]) for m in d["members"]] == [("new-1", 1)]
        hb = c.request(HEARTBEAT, 4, {"group_id": g, "generation_id": gen, "member_id": old,
                                      "group_instance_id": "inst-up"})
        assert hb["error_code"] == 82  # FENCED_INSTANCE_ID
