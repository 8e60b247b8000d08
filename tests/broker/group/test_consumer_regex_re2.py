"""grouptrust item 1: a KIP-848 ``SubscribedTopicRegex`` is compiled with RE2 (Kafka: RE2J), so a regex that makes a
backtracking engine take exponential time cannot stall the broker's event loop, and a regex RE2 rejects
(backreference, lookaround, bad syntax) is answered INVALID_REGULAR_EXPRESSION (128) with Kafka's message, the member
not admitted.

Against ``tidelog serve`` with raw ConsumerGroupHeartbeat frames (v1). The stall test fails on the code before (Python
``re``: ``(a+)+b`` against a topic of 45 ``a`` takes ~2^45 steps on the loop: the heartbeat is not answered and
another client's ApiVersions times out); the invalid-regex test fails there too (Python's ``re`` accepts ``(a)\\1``
and ``(?=x)``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from helpers import RawClient

from tidelog.errors import ErrorCode

from .conftest import create_topic

HEARTBEAT, DESCRIBE, METADATA, API_VERSIONS = 68, 69, 3, 18
INVALID_REGULAR_EXPRESSION = int(ErrorCode.INVALID_REGULAR_EXPRESSION)
GROUP_ID_NOT_FOUND = int(ErrorCode.GROUP_ID_NOT_FOUND)
UNKNOWN_MEMBER_ID = int(ErrorCode.UNKNOWN_MEMBER_ID)
A_TOPIC = "a" * 45
OTHER_TOPIC = "re2-other"
# exponential for a backtracking engine against A_TOPIC (no full match: it must try every split of the a's)
CATASTROPHIC = ["(a+)+b", "(a|aa)*c"]


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({"group.consumer.min.heartbeat.interval.ms": "100",
                         "group.consumer.heartbeat.interval.ms": "300",
                         "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1"})
    create_topic(br.bootstrap, A_TOPIC, 2)
    create_topic(br.bootstrap, OTHER_TOPIC, 1)
    return br


def _hb(c: RawClient, group: str, member: str, epoch: int, regex: str | None,
        owned: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return c.request(HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 5000 if epoch == 0 else -1, "subscribed_topic_names": None,
        "subscribed_topic_regex": regex, "server_assignor": None,
        "topic_partitions": [] if owned is None else owned})


def _send_hb(c: RawClient, group: str, member: str, regex: str) -> None:
    c.send_request(HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 5000, "subscribed_topic_names": None, "subscribed_topic_regex": regex,
        "server_assignor": None, "topic_partitions": []})


def _round_trip(port: int) -> float:
    """Seconds an ApiVersions and a Metadata round trip take on a fresh connection (raises on a 5 s timeout)."""
    with RawClient(port, timeout=5.0) as c:
        t0 = time.monotonic()
        assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
        md = c.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        assert A_TOPIC in {t["name"] for t in md["topics"]}
        return time.monotonic() - t0


def _topics(r: dict[str, Any]) -> int:
    a = r.get("assignment")
    assert a is not None, r
    return sum(len(t["partitions"]) for t in a["topic_partitions"])


def _assigned(c: RawClient, group: str, member: str, epoch: int, want: int) -> dict[str, Any]:
    """Heartbeat (as the member, at ``epoch``) until its assignment holds ``want`` partitions: a regex is resolved
    off the loop (regexloop) and matches nothing until its resolution lands. The last response."""
    deadline = time.monotonic() + 10
    while True:
        r = _hb(c, group, member, epoch, None, [])
        assert r["error_code"] == 0, r
        epoch = r["member_epoch"]
        if r.get("assignment") is not None and _topics(r) == want:
            return r
        assert time.monotonic() < deadline, r
        time.sleep(0.05)


def test_catastrophic_regex_does_not_stall_the_broker(b: Any) -> None:
    for i, regex in enumerate(CATASTROPHIC):
        with RawClient(b.port, timeout=10.0) as c:
            t0 = time.monotonic()
            _send_hb(c, f"re2-stall-{i}", uuid.uuid4().hex, regex)
            # meanwhile another client is served: the loop is free
            assert _round_trip(b.port) < 1.0
            r = c.response()  # a socket timeout (10 s) here is the stall
            took = time.monotonic() - t0
            assert r["error_code"] == 0, r
            assert _topics(r) == 0, r  # the regex matches no topic (a full match)
            assert took < 2.0, f"{regex}: answered after {took:.1f} s"
    # the topic really is visible to regexes: a benign one matching it is assigned its two partitions
    with RawClient(b.port) as c:
        member = uuid.uuid4().hex
        r = _hb(c, "re2-benign", member, 0, "a+")
        assert r["error_code"] == 0, r
        _assigned(c, "re2-benign", member, r["member_epoch"], 2)


@pytest.mark.parametrize("regex", [r"(a)\1", "(?=x)", "re2-(?!other).*", "(?<=a)b", "[", "(unclosed"])
def test_regex_re2_rejects_is_invalid_regular_expression(b: Any, regex: str) -> None:
    group = "re2-invalid-" + uuid.uuid4().hex[:6]
    with RawClient(b.port) as c:
        r = _hb(c, group, uuid.uuid4().hex, 0, regex)
        assert r["error_code"] == INVALID_REGULAR_EXPRESSION, r
        msg = r["error_message"] or ""
        assert msg.startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: ") and \
            msg.endswith("."), msg
        assert r["member_epoch"] == -1 and r["assignment"] is None, r
        # the member was not admitted: the group does not exist
        d = c.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == GROUP_ID_NOT_FOUND, d


def test_member_changing_to_an_invalid_regex_keeps_its_subscription(b: Any) -> None:
    group, member = "re2-change", uuid.uuid4().hex
    with RawClient(b.port) as c:
        r = _hb(c, group, member, 0, "re2-oth.*")
        assert r["error_code"] == 0, r
        r = _assigned(c, group, member, r["member_epoch"], 1)
        epoch = r["member_epoch"]
        owned = r["assignment"]["topic_partitions"]
        r = _hb(c, group, member, epoch, r"(re2)-\1", owned)
        assert r["error_code"] == INVALID_REGULAR_EXPRESSION, r
        d = c.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == 0 and d["group_epoch"] == epoch, d
        assert [m["subscribed_topic_regex"] for m in d["members"]] == ["re2-oth.*"], d
        r = _hb(c, group, member, epoch, None, owned)  # its next heartbeat is served as before
        assert r["error_code"] == 0 and r["member_epoch"] == epoch, r
        # where Kafka checks it: after the member checks (an unknown member is told so), not on a leave
        assert _hb(c, group, "ghost", epoch, r"(a)\1", owned)["error_code"] == UNKNOWN_MEMBER_ID
        r = _hb(c, group, member, -1, r"(a)\1")
        assert r["error_code"] == 0 and r["member_epoch"] == -1, r


def test_list_transactions_pattern_is_re2(b: Any) -> None:
    """The other client-supplied regex on a request path: ListTransactions v2's TransactionalIdPattern (KIP-1152,
    RE2J in Kafka), matched against every transactional id on the loop."""
    with RawClient(b.port, timeout=10.0) as c:
        deadline = time.monotonic() + 30
        while True:  # the transaction coordinator loads __transaction_state on the first FindCoordinator
            r = c.request(10, 4, {"key_type": 1, "coordinator_keys": [A_TOPIC]})
            if r["coordinators"][0]["error_code"] == 0:
                r = c.request(22, 4, {"transactional_id": A_TOPIC, "transaction_timeout_ms": 30000,
                                      "producer_id": -1, "producer_epoch": -1})
                if r["error_code"] == 0:
                    break
            assert time.monotonic() < deadline, r
            time.sleep(0.1)

        def listed(pattern: str) -> dict[str, Any]:
            return c.request(66, 2, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                                     "transactional_id_pattern": pattern})

        t0 = time.monotonic()
        for pattern in CATASTROPHIC:  # a socket timeout (10 s) here is the stall
            r = listed(pattern)
            assert r["error_code"] == 0 and r["transaction_states"] == [], r
        assert time.monotonic() - t0 < 2.0
        assert [t["transactional_id"] for t in listed("a+")["transaction_states"]] == [A_TOPIC]
        assert listed(r"(a)\1")["error_code"] == INVALID_REGULAR_EXPRESSION


def test_a_loaded_regex_re2_rejects_matches_nothing() -> None:
    """A regex from records (an older tidelog accepted Python-only syntax such as lookahead) that RE2 does not
    compile resolves to no topic instead of failing the resolution."""
    from tidelog.broker.group import consumer_regex
    from tidelog.broker.re2j import compile_pattern

    class Mgr:
        _regex_matches: dict[str, frozenset[str]] = {}

        def _compiled(self, pattern: str) -> Any:
            return compile_pattern(pattern)

    existing = {"orders-1": 1, "orders-x": 1, "__consumer_offsets": 50}
    assert consumer_regex.matches(Mgr(), "orders-(?!x).*", existing) == frozenset()  # type: ignore[arg-type]
    assert consumer_regex.matches(Mgr(), "orders-.*", existing) == {"orders-1", "orders-x"}  # type: ignore[arg-type]
    assert consumer_regex.matches(Mgr(), ".*", existing) == {"orders-1", "orders-x"}  # type: ignore[arg-type]
