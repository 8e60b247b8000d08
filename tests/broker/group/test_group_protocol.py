"""The group APIs at the protocol level (raw frames through ``tidelog.protocol.codec``) against ``tidelog serve``:
the member-id round trip, metadata passed through byte-exact, and each bad input answered with the error code
clients expect, without touching other groups."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from helpers import RawClient

from tidelog.protocol import codec

from .conftest import FAST_GROUPS, create_topic, wait_until

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
COMMIT, FETCH, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 8, 9, 15, 16, 42, 47

NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE = 0, 3, 12
COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL = 15, 22, 23
UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 25, 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, GROUP_SUBSCRIBED_TO_TOPIC = 68, 69, 79, 82, 86

TOPIC = "proto-t"


def subscription(*topics: str) -> bytes:
    return b"\x00\x00" + codec.encode_data("ConsumerProtocolSubscription", 0, {"topics": list(topics), "user_data": None})


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({**FAST_GROUPS, "offsets.retention.check.interval.ms": "100"})
    create_topic(br.bootstrap, TOPIC, 2)
    return br


def join(c: RawClient, group: str, member_id: str = "", version: int = 5, instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 6000, ptype: str = "consumer",
         rebalance_ms: int = 10000) -> dict:
    body: dict[str, Any] = {
        "group_id": group, "session_timeout_ms": session_ms, "member_id": member_id, "protocol_type": ptype,
        "protocols": [{"name": n, "metadata": m} for n, m in (protocols or [("range", subscription(TOPIC))])],
    }
    if version >= 1:
        body["rebalance_timeout_ms"] = rebalance_ms
    if version >= 5:
        body["group_instance_id"] = instance
    return c.request(JOIN, version, body)


def join_stable(c: RawClient, group: str, **kw: Any) -> tuple[str, int]:
    """MEMBER_ID_REQUIRED round trip, join, sync (as leader of a one-member group)."""
    r = join(c, group, **kw)
    if r["error_code"] == MEMBER_ID_REQUIRED:
        r = join(c, group, member_id=r["member_id"], **kw)
    assert r["error_code"] == NONE, r
    mid, gen = r["member_id"], r["generation_id"]
    s = c.request(SYNC, 3, {"group_id": group, "generation_id": gen, "member_id": mid,
                            "assignments": [{"member_id": mid, "assignment": b"assign-" + mid.encode()}]})
    assert s["error_code"] == NONE and s["assignment"] == b"assign-" + mid.encode()
    return mid, gen


def commit(c: RawClient, group: str, gen: int, mid: str, parts: dict[int, int], topic: str = TOPIC,
           metadata: str = "m", version: int = 7) -> dict[int, int]:
    r = c.request(COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": gen, "member_id": mid, "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": metadata}
            for p, o in parts.items()]}],
    })
    return {p["partition_index"]: p["error_code"] for t in r["topics"] for p in t["partitions"]}


def fetch(c: RawClient, group: str, version: int = 6) -> dict[tuple[str, int], int]:
    r = c.request(FETCH, version, {"group_id": group, "topics": None})
    assert r["error_code"] == NONE
    return {(t["name"], p["partition_index"]): p["committed_offset"] for t in r["topics"] for p in t["partitions"]}


def describe(c: RawClient, group: str) -> dict:
    return c.request(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]


def test_find_coordinator_all_versions(b: Any) -> None:
    with RawClient(b.port) as c:
        for v in range(4):
            r = c.request(FIND_COORDINATOR, v, {"key": "g-find", "key_type": 0})
            assert (r["error_code"], r["host"], r["port"]) == (NONE, "127.0.0.1", b.port)
        r = c.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(x["key"], x["error_code"], x["port"]) for x in r["coordinators"]] == [("a", 0, b.port), ("b", 0, b.port)]
        # transactions: this broker is the transaction coordinator too (one node); InitProducerId gives the
        # transactional id a producer id (retried while __transaction_state, just created, loads)
        r = c.request(FIND_COORDINATOR, 3, {"key": "txn", "key_type": 1})
        assert (r["error_code"], r["port"]) == (NONE, b.port)
        init = lambda: c.request(22, 1, {"transactional_id": "txn", "transaction_timeout_ms": 60000})  # noqa: E731
        r = wait_until(lambda: (x := init())["error_code"] not in (14, 15, 16) and x, 20, "InitProducerId")
        assert r["error_code"] == NONE and r["producer_id"] >= 0 and r["producer_epoch"] == 0


def test_join_round_trip_and_faithful_metadata(b: Any) -> None:
    meta = bytes(range(256)) * 4  # opaque to the coordinator: must come back byte for byte
    with RawClient(b.port) as c:
        r = join(c, "g-rt", version=5, protocols=[("custom-assignor", meta), ("range", b"x")], instance=None)
        assert r["error_code"] == MEMBER_ID_REQUIRED and r["member_id"].startswith("raw-test-")
        r = join(c, "g-rt", member_id=r["member_id"], protocols=[("custom-assignor", meta), ("range", b"x")])
        assert r["error_code"] == NONE
        assert r["leader"] == r["member_id"] and r["protocol_name"] == "custom-assignor"
        assert [m["metadata"] for m in r["members"]] == [meta]
        # JoinGroup v0-3 has no member-id round trip
        r0 = join(c, "g-rt-v0", version=0)
        assert r0["error_code"] == NONE and r0["generation_id"] == 1


def test_stale_and_unknown_members(b: Any) -> None:
    with RawClient(b.port) as c:
        mid, gen = join_stable(c, "g-bad")
        other_mid, other_gen = join_stable(c, "g-other")
        assert commit(c, "g-other", other_gen, other_mid, {0: 5}) == {0: NONE}
        hb = lambda g, m, gen: c.request(HEARTBEAT, 3, {"group_id": g, "generation_id": gen, "member_id": m,  # noqa: E731
                                                         "group_instance_id": None})["error_code"]
        assert hb("g-bad", mid, gen) == NONE
        assert hb("g-bad", "nobody", gen) == UNKNOWN_MEMBER_ID
        assert hb("g-bad", mid, gen - 1) == ILLEGAL_GENERATION
        assert hb("no-such-group", mid, gen) == UNKNOWN_MEMBER_ID
        sync = c.request(SYNC, 3, {"group_id": "g-bad", "generation_id": gen + 5, "member_id": mid, "assignments": []})
        assert sync["error_code"] == ILLEGAL_GENERATION
        assert commit(c, "g-bad", gen - 1, mid, {0: 1}) == {0: ILLEGAL_GENERATION}
        assert commit(c, "g-bad", gen, "nobody", {0: 1}) == {0: UNKNOWN_MEMBER_ID}
        assert commit(c, "g-bad", -1, "", {0: 1}) == {0: UNKNOWN_MEMBER_ID}  # admin commit to an active group
        assert commit(c, "g-bad", gen, mid, {7: 1}) == {7: UNKNOWN_TOPIC_OR_PARTITION}
        assert commit(c, "g-bad", gen, mid, {0: 1}, topic="no-such-topic") == {0: UNKNOWN_TOPIC_OR_PARTITION}
        assert commit(c, "g-bad", gen, mid, {0: 1}, metadata="x" * 5000) == {0: OFFSET_METADATA_TOO_LARGE}
        assert commit(c, "g-bad", gen, mid, {0: 3, 1: 4}) == {0: NONE, 1: NONE}
        assert fetch(c, "g-bad") == {(TOPIC, 0): 3, (TOPIC, 1): 4}
        r = join(c, "g-bad", session_ms=10)
        assert r["error_code"] == INVALID_SESSION_TIMEOUT
        r = join(c, "g-bad", ptype="connect")
        assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        # none of it touched the other group
        assert fetch(c, "g-other") == {(TOPIC, 0): 5}
        assert describe(c, "g-other")["group_state"] == "Stable"
        assert hb("g-other", other_mid, other_gen) == NONE


def test_rebalance_in_progress_and_leave(b: Any) -> None:
    with RawClient(b.port) as c1, RawClient(b.port, client_id="second") as c2:
        m1, gen = join_stable(c1, "g-reb")
        second: dict[str, Any] = {}

        def join_second() -> None:
            r = join(c2, "g-reb", version=3)  # v3: no member-id round trip; blocks until the rebalance completes
            second.update(r)

        t = threading.Thread(target=join_second)
        t.start()
        wait_until(lambda: describe(c1, "g-reb")["group_state"] == "PreparingRebalance", 10, "a rebalance")
        hb = c1.request(HEARTBEAT, 3, {"group_id": "g-reb", "generation_id": gen, "member_id": m1,
                                       "group_instance_id": None})
        assert hb["error_code"] == REBALANCE_IN_PROGRESS
        r1 = join(c1, "g-reb", member_id=m1)
        t.join(10)
        assert r1["error_code"] == NONE and second["error_code"] == NONE
        assert r1["generation_id"] == second["generation_id"] == gen + 1
        assert len(r1["members"]) == 2 and second["members"] == []  # only the leader sees the members
        # the follower's sync waits for the leader's; then leave
        leave = c2.request(LEAVE, 3, {"group_id": "g-reb", "members": [
            {"member_id": second["member_id"], "group_instance_id": None}, {"member_id": "ghost", "group_instance_id": None}]})
        assert [m["error_code"] for m in leave["members"]] == [NONE, UNKNOWN_MEMBER_ID]
        assert describe(c1, "g-reb")["group_state"] == "PreparingRebalance"


def test_static_member_rejoin_without_rebalance(b: Any) -> None:
    with RawClient(b.port) as c:
        old, gen = join_stable(c, "g-static", instance="inst-1")
        r = join(c, "g-static", instance="inst-1")  # restarted process: same instance id, no member id
        assert r["error_code"] == NONE and r["generation_id"] == gen and r["member_id"] != old
        assert describe(c, "g-static")["group_state"] == "Stable"
        hb = c.request(HEARTBEAT, 3, {"group_id": "g-static", "generation_id": gen, "member_id": old,
                                      "group_instance_id": "inst-1"})
        assert hb["error_code"] == FENCED_INSTANCE_ID
        s = c.request(SYNC, 3, {"group_id": "g-static", "generation_id": gen, "member_id": r["member_id"],
                                "group_instance_id": "inst-1", "assignments": []})
        assert s["error_code"] == NONE and s["assignment"] == b"assign-" + old.encode()  # kept its assignment


def test_list_describe_delete_and_offset_delete(b: Any) -> None:
    with RawClient(b.port) as c:
        mid, gen = join_stable(c, "g-del")
        assert commit(c, "g-del", gen, mid, {0: 9, 1: 9}) == {0: NONE, 1: NONE}
        listed = c.request(LIST, 4, {"states_filter": []})["groups"]
        assert ("g-del", "consumer", "Stable") in {(g["group_id"], g["protocol_type"], g["group_state"]) for g in listed}
        d = describe(c, "g-del")
        assert d["protocol_data"] == "range" and d["members"][0]["member_assignment"] == b"assign-" + mid.encode()
        assert c.request(DELETE, 2, {"groups_names": ["g-del"]})["results"][0]["error_code"] == NON_EMPTY_GROUP
        od = c.request(OFFSET_DELETE, 0, {"group_id": "g-del", "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert od["topics"][0]["partitions"][0]["error_code"] == GROUP_SUBSCRIBED_TO_TOPIC
        c.request(LEAVE, 1, {"group_id": "g-del", "member_id": mid})
        wait_until(lambda: describe(c, "g-del")["group_state"] == "Empty", 10, "the group to empty")
        od = c.request(OFFSET_DELETE, 0, {"group_id": "g-del", "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert od["error_code"] == NONE and od["topics"][0]["partitions"][0]["error_code"] == NONE
        assert fetch(c, "g-del") == {(TOPIC, 1): 9}
        assert c.request(DELETE, 2, {"groups_names": ["g-del", "nope"]})["results"] == [
            {"group_id": "g-del", "error_code": NONE}, {"group_id": "nope", "error_code": GROUP_ID_NOT_FOUND}]
        assert describe(c, "g-del")["group_state"] == "Dead"
        assert fetch(c, "g-del") == {}


def test_offset_retention_expires_offsets_and_empty_group(b: Any) -> None:
    with RawClient(b.port) as c:
        # OffsetCommit v2-4 carry an explicit retention: the offset expires when it has passed
        r = c.request(COMMIT, 2, {"group_id": "g-ret", "generation_id_or_member_epoch": -1, "member_id": "",
                                  "retention_time_ms": 300, "topics": [{"name": TOPIC, "partitions": [
                                      {"partition_index": 0, "committed_offset": 4, "committed_metadata": ""}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == NONE
        assert fetch(c, "g-ret") == {(TOPIC, 0): 4}
        wait_until(lambda: fetch(c, "g-ret") == {}, 10, "the offset to expire")
        listed = c.request(LIST, 4, {"states_filter": []})["groups"]
        assert "g-ret" not in {g["group_id"] for g in listed}


def test_a_join_that_completes_the_group_is_answered_at_once(broker_factory: Any) -> None:
    """Kafka tries to complete a rebalance as soon as it starts: with no initial delay a new group's first join,
    and a one-member group's leader rejoining, are answered without waiting out the rebalance timeout (60 s
    here, against the client's 15 s socket timeout)."""
    br = broker_factory({**FAST_GROUPS, "group.initial.rebalance.delay.ms": "0"})
    create_topic(br.bootstrap, TOPIC, 1)
    with RawClient(br.port, timeout=15) as c:
        first = join(c, "g-now", version=3, rebalance_ms=60_000)  # v3: no member-id round trip
        assert first["error_code"] == NONE and first["leader"] == first["member_id"]
        mid, gen = first["member_id"], first["generation_id"]
        s = c.request(SYNC, 3, {"group_id": "g-now", "generation_id": gen, "member_id": mid,
                                "assignments": [{"member_id": mid, "assignment": b"a"}]})
        assert s["error_code"] == NONE and describe(c, "g-now")["group_state"] == "Stable"
        again = join(c, "g-now", member_id=mid, version=3, rebalance_ms=60_000)  # the leader rejoins
        assert again["error_code"] == NONE and again["generation_id"] == gen + 1
        assert [m["member_id"] for m in again["members"]] == [mid]


def test_a_pending_member_keeps_its_empty_group_through_retention_checks(b: Any) -> None:
    """A group holding only a member id handed out with MEMBER_ID_REQUIRED is not removed as an Empty group
    without offsets: the member's join with that id, after a retention check, still gets in."""
    with RawClient(b.port) as c:
        first = join(c, "g-pending")
        assert first["error_code"] == MEMBER_ID_REQUIRED
        r = c.request(COMMIT, 2, {"group_id": "g-tick", "generation_id_or_member_epoch": -1, "member_id": "",
                                  "retention_time_ms": 200, "topics": [{"name": TOPIC, "partitions": [
                                      {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == NONE
        # g-tick's offset going away proves a retention check ran while g-pending was empty
        wait_until(lambda: fetch(c, "g-tick") == {}, 10, "a retention check")
        r = join(c, "g-pending", member_id=first["member_id"])
        assert r["error_code"] == NONE and r["member_id"] == first["member_id"]


@pytest.mark.parametrize("api_key", sorted(codec.GROUP_API_VERSIONS))
def test_every_advertised_version_is_answered(b: Any, api_key: int) -> None:
    """Sampled requests at every advertised version get a decodable response (no closed connection)."""
    from tidelog.protocol.samples import message_body

    lo, hi = codec.GROUP_API_VERSIONS[api_key]
    with RawClient(b.port) as c:
        api = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        advertised = {k["api_key"]: (k["min_version"], k["max_version"]) for k in api["api_keys"]}
        assert advertised[api_key] == (lo, hi)
        for v in range(lo, hi + 1):
            body = message_body(api_key, v, "request", 7)
            if api_key == JOIN:
                body["session_timeout_ms"] = 6000  # keep joins from waiting on a long rebalance
                body["rebalance_timeout_ms"] = 100
            if api_key == SYNC:
                body["generation_id"] = 12345
            resp = c.request(api_key, v, body)
            assert isinstance(resp, dict)
