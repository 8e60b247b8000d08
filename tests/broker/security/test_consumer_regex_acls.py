"""Issue 27 item 1 (regexacl): a KIP-848 member's regex subscription resolves only to the topics its principal may
DESCRIBE, as Kafka 4's group coordinator filters them (``filterTopicDescribeAuthorizedTopics``), against a real
``tidelog serve`` with the ACL authorizer and SASL PLAIN users:

* confluent-kafka (``group.protocol=consumer``) as alice, allowed READ (so DESCRIBE) on the ``rxa-a`` prefix only,
  subscribing ``^rxa-.*``: assigned and consuming only ``rxa-a1``; an ACL on ``rxa-b1`` added later makes it appear
  after the next refresh (``group.consumer.regex.refresh.interval.ms``, short here);
* raw heartbeats: two principals sharing a regex in one group share one resolution, made with the principal of the
  heartbeat that triggered the last refresh (Kafka's behaviour);
* subscribed topic names the principal may not describe: TOPIC_AUTHORIZATION_FAILED (Kafka 4's KAFKA-18813).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest
from aclsupport import (
    DESCRIBE,
    PREFIXED,
    READ,
    T_GROUP,
    T_TOPIC,
    USERS,
    acl,
    acl_overrides,
    call,
    sasl_port,
)
from helpers import wait_for

from tidelog.errors import ErrorCode
from tidelog.records.batch import build_batch

REFRESH_MS = 1500
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def rx_broker(broker_factory: Any) -> Any:
    b = broker_factory(acl_overrides(**{
        "group.consumer.regex.refresh.interval.ms": str(REFRESH_MS),
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "250",
        "offsets.topic.num.partitions": "1",
    }))
    b.sasl_port = sasl_port(b)
    names = ["rxa-a1", "rxa-b1", "rxs-a1", "rxs-b1", "rxn-t"]
    r = call(b, "admin", 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1} for n in names],
                                 "timeout_ms": 10000})
    assert [t["error_code"] for t in r["topics"]] == [0] * len(names), r
    for n in ("rxa-a1", "rxa-b1"):
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [{"name": n, "partition_data": [
            {"index": 0, "records": build_batch([(b"k", f"{n}-{i}".encode()) for i in range(3)])}]}]}
        assert call(b, "admin", 0, 9, body)["responses"][0]["partition_responses"][0]["error_code"] == 0
    creations = [
        acl(T_TOPIC, "rxa-a", "User:alice", READ, pt=PREFIXED),
        acl(T_TOPIC, "rxs-a", "User:alice", DESCRIBE, pt=PREFIXED),
        acl(T_TOPIC, "rxs-", "User:bob", DESCRIBE, pt=PREFIXED),
        acl(T_GROUP, "rx-", "User:alice", READ, pt=PREFIXED),
        acl(T_GROUP, "rx-", "User:bob", READ, pt=PREFIXED),
    ]
    r = call(b, "admin", 30, 3, {"creations": creations})
    assert [x["error_code"] for x in r["results"]] == [0] * len(creations), r
    return b


def _topic_names_by_id(b: Any) -> dict[uuid.UUID, str]:
    md = call(b, "admin", 3, 12, {"topics": None, "allow_auto_topic_creation": False})
    return {t["topic_id"]: t["name"] for t in md["topics"]}


def _targets(b: Any, group: str) -> dict[str, set[str]]:
    """member id -> the topics of its target assignment (ConsumerGroupDescribe as the super user)."""
    d = call(b, "admin", 69, 0, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    assert d["error_code"] == 0, d
    return {m["member_id"]: {t["topic_name"] for t in m["target_assignment"]["topic_partitions"]}
            for m in d["members"]}


def test_confluent_regex_member_sees_only_describable_topics(rx_broker: Any) -> None:
    from confluent_kafka import Consumer

    b = rx_broker
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": USERS["alice"],
                  "group.id": "rx-confluent", "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})
    seen: list[str] = []
    try:
        c.subscribe(["^rxa-.*"])

        def poll_until(pred: Any, timeout: float, what: str) -> None:
            deadline = time.monotonic() + timeout
            while not pred():
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    seen.append((m.value() or b"").decode())
                assert time.monotonic() < deadline, f"timed out waiting for {what}: {seen}, {c.assignment()}"

        poll_until(lambda: len(seen) >= 3, 30, "rxa-a1's records")
        assert {tp.topic for tp in c.assignment()} == {"rxa-a1"}
        # a few refresh intervals more: the regex still resolves to the describable topic only
        until = time.monotonic() + 2 * REFRESH_MS / 1000
        poll_until(lambda: time.monotonic() > until, 10, "two refresh intervals")
        assert {tp.topic for tp in c.assignment()} == {"rxa-a1"}
        assert sorted(seen) == [f"rxa-a1-{i}" for i in range(3)]
        assert set().union(*_targets(b, "rx-confluent").values()) == {"rxa-a1"}

        # the ACL added later: the topic appears after the next refresh
        r = call(b, "admin", 30, 3, {"creations": [acl(T_TOPIC, "rxa-b1", "User:alice", READ)]})
        assert r["results"][0]["error_code"] == 0, r
        poll_until(lambda: len(seen) >= 6, 30, "rxa-b1's records after its ACL")
        assert {tp.topic for tp in c.assignment()} == {"rxa-a1", "rxa-b1"}
        assert sorted(seen) == sorted([f"rxa-a1-{i}" for i in range(3)] + [f"rxa-b1-{i}" for i in range(3)])
    finally:
        c.close()


def _hb(b: Any, user: str, group: str, member: str, epoch: int, regex: str | None = None,
        owned: list[dict] | None = None) -> dict:
    r = call(b, user, 68, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 5000 if epoch == 0 else -1, "subscribed_topic_names": None,
        "subscribed_topic_regex": regex, "server_assignor": None,
        "topic_partitions": [] if owned is None else owned})
    assert r["error_code"] == 0, r
    return r


def _describe_code(b: Any, user: str, group: str) -> int:
    r = call(b, user, 69, 0, {"group_ids": [group], "include_authorized_operations": False})
    return int(r["groups"][0]["error_code"])


def test_two_principals_share_one_resolution(rx_broker: Any) -> None:
    """Kafka resolves a group's regexes with the context of the heartbeat that triggers the refresh and assigns
    every member from that one resolution: alice (DESCRIBE on rxs-a*) and bob (DESCRIBE on rxs-*) in one group."""
    b = rx_broker
    group, regex = "rx-shared", "rxs-.*"
    names = _topic_names_by_id(b)
    a_id, b_id = "alice-" + uuid.uuid4().hex[:8], "bob-" + uuid.uuid4().hex[:8]
    alice_epoch = _hb(b, "alice", group, a_id, 0, regex)["member_epoch"]

    def alice_assigned() -> bool:  # resolved off the loop (regexloop): nothing is assigned until it lands
        nonlocal alice_epoch
        r = _hb(b, "alice", group, a_id, alice_epoch)
        alice_epoch = r["member_epoch"]
        return r["assignment"] is not None and \
            {names[t["topic_id"]] for t in r["assignment"]["topic_partitions"]} == {"rxs-a1"}

    wait_for(alice_assigned, 15, "alice assigned rxs-a1")
    # bob joins within the refresh interval: the regex is resolved already, no refresh, the group's topics stay
    # alice's (bob gets nothing: rxs-a1's one partition is alice's)
    r = _hb(b, "bob", group, b_id, 0, regex)
    bob_epoch = r["member_epoch"]
    assert set().union(*_targets(b, group).values()) == {"rxs-a1"}

    # once the interval has passed, bob's heartbeat refreshes with bob's rights: rxs-b1 enters the group's
    # resolution, for every member
    def bob_refreshed() -> bool:
        nonlocal bob_epoch
        bob_epoch = _hb(b, "bob", group, b_id, bob_epoch)["member_epoch"]
        return set().union(*_targets(b, group).values()) == {"rxs-a1", "rxs-b1"}

    wait_for(bob_refreshed, 15, "bob's refresh adding rxs-b1")
    # ConsumerGroupDescribe (KAFKA-18813): alice may not describe rxs-b1, now in the group's target assignment
    assert _describe_code(b, "alice", group) == TOPIC_AUTHORIZATION_FAILED
    assert _describe_code(b, "bob", group) == 0

    # and the next refresh triggered by alice takes it away again (alice may not describe it)
    def alice_refreshed() -> bool:
        nonlocal alice_epoch
        r = _hb(b, "alice", group, a_id, alice_epoch)
        alice_epoch = r["member_epoch"]
        return set().union(*_targets(b, group).values()) == {"rxs-a1"}

    wait_for(alice_refreshed, 15, "alice's refresh removing rxs-b1")

    def revoked() -> bool:  # once bob gave rxs-b1 back (its heartbeats own nothing), alice may describe the group
        nonlocal bob_epoch
        bob_epoch = _hb(b, "bob", group, b_id, bob_epoch)["member_epoch"]
        return _describe_code(b, "alice", group) == 0

    wait_for(revoked, 15, "rxs-b1 gone from every assignment")
    for member, user in ((a_id, "alice"), (b_id, "bob")):
        call(b, user, 68, 1, {"group_id": group, "member_id": member, "member_epoch": -1, "instance_id": None,
                              "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                              "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None})


def test_subscribed_names_need_describe(rx_broker: Any) -> None:
    b = rx_broker
    body = {"group_id": "rx-names", "member_id": "m-" + uuid.uuid4().hex[:8], "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["rxa-a1", "rxn-t"],
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
    assert call(b, "alice", 68, 1, body)["error_code"] == TOPIC_AUTHORIZATION_FAILED
    body["subscribed_topic_names"] = ["rxa-a1"]
    r = call(b, "alice", 68, 1, body)
    assert r["error_code"] == 0 and r["member_epoch"] > 0, r


def test_refresh_rules_in_process(tmp_path: Any) -> None:
    """The resolution rules with the real ACL authorizer (no broker): no request context, no resolution; a refresh
    is not redone before the interval even if an ACL changed, and is after it; a topic-set change makes it due."""
    from types import SimpleNamespace

    from tidelog.broker.group import consumer_regex
    from tidelog.broker.group.consumer_model import ConsumerGroup, ConsumerMember
    from tidelog.broker.group.consumer_regex_async import RegexResolver
    from tidelog.broker.security.acls import (
        AclBinding,
        AclOperation,
        PatternType,
        PermissionType,
        ResourceType,
    )
    from tidelog.broker.security.authorizer import AclChanges, Authorizer, FileAclStore

    changes = AclChanges()
    auth = Authorizer(FileAclStore(tmp_path / "acls.json", changes), changes)

    def allow(name: str, pt: PatternType) -> None:
        assert auth.create([AclBinding(ResourceType.TOPIC, name, pt, "User:alice", "*", AclOperation.DESCRIBE,
                                       PermissionType.ALLOW)]) == [None]

    allow("u-a", PatternType.PREFIXED)
    mgr: Any = SimpleNamespace(coordinator=SimpleNamespace(broker=SimpleNamespace(authorizer=auth)),
                               topics_version=1, regex_refresh_ms=60_000, auth_context=None, _regex_matches={},
                               _compiled=re.compile)
    mgr.regex_resolver = RegexResolver(mgr)  # no running loop here: it resolves at once
    existing = {"u-a1": 1, "u-b1": 1, "other": 1}
    g = ConsumerGroup("g")
    g.members["m"] = ConsumerMember("m", subscribed_regex="u-.*")
    assert consumer_regex.topics(g, "u-.*") == () and not g.resolved  # no context: nothing
    assert not consumer_regex.refresh(mgr, g, existing)
    mgr.auth_context = ("User:alice", "127.0.0.1")
    assert consumer_regex.refresh(mgr, g, existing) and g.resolved["u-.*"].topics == ("u-a1",)
    allow("u-b1", PatternType.LITERAL)
    assert not consumer_regex.refresh(mgr, g, existing)  # within the interval: not resolved again
    assert g.resolved["u-.*"].topics == ("u-a1",)
    g.regex_refreshed_ms -= 60_000  # the interval has passed
    assert consumer_regex.refresh(mgr, g, existing) and g.resolved["u-.*"].topics == ("u-a1", "u-b1")
    # a new topic: due at once (topic-set version), resolved with the current principal
    existing["u-a2"] = 1
    mgr.topics_version, mgr._regex_matches = 2, {}
    mgr.auth_context = ("User:bob", "127.0.0.1")  # bob may describe nothing: the group's resolution empties
    assert consumer_regex.refresh(mgr, g, existing) and g.resolved["u-.*"].topics == ()
