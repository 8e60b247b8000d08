"""ZooKeeper mode. ACLs live where Kafka's AclAuthorizer keeps them (``/kafka-acl/<Type>/<name>``,
``/kafka-acl-extended/prefixed/<Type>/<name>``) with change notifications (``/kafka-acl-changes``,
``/kafka-acl-extended-changes``); an ACL created through one broker is enforced by the other, one written into
ZooKeeper in Kafka's layout (as ``kafka-acls.sh --authorizer-properties zookeeper.connect=...`` does) is picked up
by both, and one deleted through a broker is forgotten by all. Two brokers, a real ZooKeeper; the inter-broker
PLAINTEXT listener's principal (User:ANONYMOUS) is a super user, as brokers' principals are in Kafka."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aclsupport import (
    LITERAL,
    PREFIXED,
    T_GROUP,
    T_TOPIC,
    TOPIC_AUTH,
    USERS,
    acl,
    call,
    plain_jaas,
    sasl_port,
)
from helpers import wait_for
from zkpair import zk_broker_pair

pytestmark = pytest.mark.integration

ANY_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


@pytest.fixture(scope="module")
def zk_acl_brokers(broker_factory: Any) -> Iterator[tuple[Any, list[Any]]]:
    yield from zk_broker_pair(broker_factory, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    }, "tidelog-acl-zk-", ready=lambda b: setattr(b, "sasl_port", sasl_port(b)))


def _describe_topic_code(b: Any, user: str, topic: str) -> int:
    md = call(b, user, 3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return md["topics"][0]["error_code"]


def _acls_on(b: Any) -> set[tuple]:
    r = call(b, None, 29, 3, ANY_FILTER)
    assert r["error_code"] == 0, r
    return {(x["resource_type"], x["resource_name"], x["pattern_type"], a["principal"], a["operation"])
            for x in r["resources"] for a in x["acls"]}


def test_acls_in_zookeeper_enforced_by_every_broker(zk_acl_brokers: tuple[Any, list[Any]]) -> None:
    from kazoo.client import KazooClient

    zk, (b1, b2) = zk_acl_brokers
    topic = "zk-acl-topic"
    r = call(b1, None, 19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                               "timeout_ms": 20000})
    assert r["topics"][0]["error_code"] == 0, b1.log_text()[-5000:]
    wait_for(lambda: _describe_topic_code(b2, None, topic) == 0, 30, "the topic on broker 2")
    assert _describe_topic_code(b2, "alice", topic) == TOPIC_AUTH
    # created through broker 1 ...
    r = call(b1, None, 30, 3, {"creations": [acl(T_TOPIC, topic, "User:alice", 8),  # DESCRIBE
                                             acl(T_GROUP, "zk-grp-", "User:alice", 3, pt=PREFIXED)]})
    assert [x["error_code"] for x in r["results"]] == [0, 0]
    # ... enforced by broker 2 (its change-notification watch re-read the resource)
    wait_for(lambda: _describe_topic_code(b2, "alice", topic) == 0, 30, "broker 2 to allow alice")
    assert _describe_topic_code(b2, "bob", topic) == TOPIC_AUTH

    client = KazooClient(hosts=zk.connect)
    client.start(timeout=30)
    try:
        data = json.loads(client.get(f"/kafka-acl/Topic/{topic}")[0])
        assert data == {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                                "operation": "Describe", "host": "*"}]}
        data = json.loads(client.get("/kafka-acl-extended/prefixed/Group/zk-grp-")[0])
        assert data["acls"] == [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
                                 "host": "*"}]
        literal_changes = [client.get(f"/kafka-acl-changes/{c}")[0].decode()
                           for c in client.get_children("/kafka-acl-changes")]
        assert f"TOPIC:{topic}" in literal_changes
        assert all(c.startswith("acl_changes_") for c in client.get_children("/kafka-acl-changes"))
        extended = [json.loads(client.get(f"/kafka-acl-extended-changes/{c}")[0])
                    for c in client.get_children("/kafka-acl-extended-changes")]
        assert {"version": 1, "resourceType": "GROUP", "name": "zk-grp-", "patternType": "PREFIXED"} in extended

        # an ACL written into ZooKeeper in Kafka's layout, with its notification: both brokers pick it up
        client.create("/kafka-acl/Topic/zk-other", json.dumps({"version": 1, "acls": [
            {"principal": "User:bob", "permissionType": "Allow", "operation": "All", "host": "*"}]}).encode(),
            makepath=True)
        client.create("/kafka-acl-changes/acl_changes_", b"TOPIC:zk-other", sequence=True)
        for b in (b1, b2):
            wait_for(lambda b=b: (T_TOPIC, "zk-other", LITERAL, "User:bob", 2) in _acls_on(b), 30,
                     "the ACL written into ZooKeeper")

        # deleted through broker 2: the znode goes, broker 1 forgets it
        flt = dict(ANY_FILTER, resource_type_filter=T_TOPIC, resource_name_filter=topic, pattern_type_filter=LITERAL)
        r = call(b2, None, 31, 3, {"filters": [flt]})
        assert [m["principal"] for m in r["filter_results"][0]["matching_acls"]] == ["User:alice"]
        assert client.exists(f"/kafka-acl/Topic/{topic}") is None
        wait_for(lambda: _describe_topic_code(b1, "alice", topic) == TOPIC_AUTH, 30, "broker 1 to forget the ACL")
    finally:
        client.stop()
        client.close()
    # a restarted broker loads everything from ZooKeeper
    b1.restart()
    b1.sasl_port = sasl_port(b1)
    assert (T_GROUP, "zk-grp-", PREFIXED, "User:alice", 3) in _acls_on(b1)
    assert (T_TOPIC, topic, LITERAL, "User:alice", 8) not in _acls_on(b1)
