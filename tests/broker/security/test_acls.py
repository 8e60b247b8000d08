"""Kafka's ACL authorizer against a real ``tidelog serve`` (issue 16 item 3).

One broker with a SASL_PLAINTEXT listener (PLAIN users ``admin``, a super user, ``alice``, ``bob``, ``carol``),
``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``. ``alice`` is granted what each API needs,
``bob`` nothing, ``carol`` gets an ALLOW through ``User:*`` and a DENY of her own. The matrix sends every API a
client can call, as alice and as bob, with tidelog's own protocol client (raw requests, so the exact error code
of each API is visible), and checks that bob's request read nothing and changed nothing (log end offsets, log
start offsets, configs, committed offsets, topics, ACLs). Real clients (confluent-kafka, kafka-python, the CLI)
cover CreateAcls / DescribeAcls / DeleteAcls and produce/consume end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from aclsupport import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER_AUTH,
    CREATE,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP_AUTH,
    IDEMPOTENT_WRITE,
    LITERAL,
    PREFIXED,
    READ,
    T_CLUSTER,
    T_GROUP,
    T_TOPIC,
    T_TXN,
    TOPIC_AUTH,
    TXN_AUTH,
    USERS,
    WRITE,
    acl,
    acl_overrides,
    call,
    sasl_port,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tidelog.records.batch import build_batch

TOPIC, OTHER, GROUP, TXN = "acl-t", "acl-other", "acl-g", "acl-tx"
HIDDEN = "acl-hidden"  # no ACL: only the super user sees it


def ck_conf(b: Any, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


def produce_body(topic: str, batch: bytes, txn_id: str | None = None) -> dict:
    return {"transactional_id": txn_id, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def produce_code(r: dict) -> int:
    return r["responses"][0]["partition_responses"][0]["error_code"]


def offsets(b: Any, topic: str) -> tuple[int, int]:
    """(log start, log end) of partition 0, as the super user sees them."""
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "timestamp": -2}]}]}
    start = call(b, "admin", 2, 7, body)["topics"][0]["partitions"][0]["offset"]
    body["topics"][0]["partitions"][0]["timestamp"] = -1
    end = call(b, "admin", 2, 7, body)["topics"][0]["partitions"][0]["offset"]
    return start, end


def topic_names(b: Any) -> set[str]:
    md = call(b, "admin", 3, 12, {"topics": None, "allow_auto_topic_creation": False})
    return {t["name"] for t in md["topics"]}


def committed(b: Any, group: str, topic: str) -> int:
    r = call(b, "admin", 9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    return r["topics"][0]["partitions"][0]["committed_offset"]


def retention(b: Any, topic: str) -> str | None:
    r = call(b, "admin", 32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                "configuration_keys": ["retention.ms"]}]})
    cfg = r["results"][0]["configs"]
    return cfg[0]["value"] if cfg else None


def acl_count(b: Any) -> int:
    r = call(b, "admin", 29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                 "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert r["error_code"] == 0
    return sum(len(res["acls"]) for res in r["resources"])


@pytest.fixture(scope="module")
def acl_broker(broker_factory: Any) -> Any:
    b = broker_factory(acl_overrides())
    b.sasl_port = sasl_port(b)
    # as the super user: topics, records, a committed offset
    r = call(b, "admin", 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1}
                                            for n in (TOPIC, OTHER, HIDDEN)], "timeout_ms": 10000})
    assert [t["error_code"] for t in r["topics"]] == [0, 0, 0], r
    for n in (TOPIC, OTHER):
        assert produce_code(call(b, "admin", 0, 9, produce_body(n, build_batch([(b"k", b"v1"), (b"k", b"v2")])))) == 0
    r = call(b, "admin", 8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                                "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1}]}
                                           for t in (TOPIC, HIDDEN)]})
    assert [t["partitions"][0]["error_code"] for t in r["topics"]] == [0, 0], r
    creations = [
        acl(T_TOPIC, TOPIC, "User:alice", 2),  # ALL
        acl(T_TOPIC, "new-", "User:alice", 2, pt=PREFIXED),
        acl(T_GROUP, GROUP, "User:alice", 2),
        acl(T_TXN, TXN, "User:alice", 2),
        *[acl(T_CLUSTER, "kafka-cluster", "User:alice", op) for op in (DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE)],
        # everyone may read OTHER (the wildcard principal), but carol is denied READ by name; she may write it
        acl(T_TOPIC, OTHER, "User:*", READ),
        acl(T_TOPIC, OTHER, "User:carol", READ, DENY),
        acl(T_TOPIC, OTHER, "User:carol", WRITE),
        acl(T_TOPIC, "carol-t", "User:carol", CREATE),
    ]
    r = call(b, "admin", 30, 3, {"creations": creations})
    assert [x["error_code"] for x in r["results"]] == [0] * len(creations), r
    return b


# ---------------------------------------------------------------------------------------------------- data plane


def test_produce(acl_broker: Any) -> None:
    b = acl_broker
    before = offsets(b, TOPIC)
    assert produce_code(call(b, "bob", 0, 9, produce_body(TOPIC, build_batch([(None, b"forged")])))) == TOPIC_AUTH
    assert produce_code(call(b, None, 0, 9, produce_body(TOPIC, build_batch([(None, b"forged")])))) == TOPIC_AUTH
    # a topic that does not exist is refused the same way: existence is not disclosed
    assert produce_code(call(b, "bob", 0, 9, produce_body("no-such", build_batch([(None, b"x")])))) == TOPIC_AUTH
    assert offsets(b, TOPIC) == before
    assert produce_code(call(b, "alice", 0, 9, produce_body(TOPIC, build_batch([(None, b"ok")])))) == 0
    assert offsets(b, TOPIC) == (before[0], before[1] + 1)


def test_transactional_produce_needs_write_on_the_transactional_id(acl_broker: Any) -> None:
    b = acl_broker
    before = offsets(b, OTHER)
    batch = build_batch([(None, b"x")], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    # carol may write OTHER, but not as transactional id acl-tx: every partition refused, nothing appended
    r = call(b, "carol", 0, 9, produce_body(OTHER, batch, TXN))
    assert produce_code(r) == TXN_AUTH
    assert offsets(b, OTHER) == before


def test_fetch(acl_broker: Any) -> None:
    b = acl_broker
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20}]}]}
    denied = call(b, "bob", 1, 12, body)["responses"][0]["partitions"][0]
    assert denied["error_code"] == TOPIC_AUTH
    assert not denied["records"]  # not one byte
    allowed = call(b, "alice", 1, 12, body)["responses"][0]["partitions"][0]
    assert allowed["error_code"] == 0 and len(allowed["records"]) > 0
    # a follower fetch needs CLUSTER_ACTION on the cluster (alice has none either)
    follower = dict(body, replica_id=1)
    got = call(b, "alice", 1, 12, follower)["responses"][0]["partitions"][0]
    assert got["error_code"] == TOPIC_AUTH and not got["records"]


def test_fetch_session_is_checked_on_every_request(acl_broker: Any) -> None:
    """An incremental fetch session keeps its partitions; each request is authorized again, so an ACL added
    while the session lives takes effect on its next fetch."""
    b = acl_broker
    full = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": 0,
            "topics": [{"topic": OTHER, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20}]}]}
    r = call(b, "alice", 1, 12, full)
    assert r["session_id"] > 0 and r["responses"][0]["partitions"][0]["records"]
    deny = acl(T_TOPIC, OTHER, "User:alice", READ, DENY)
    assert call(b, "admin", 30, 3, {"creations": [deny]})["results"][0]["error_code"] == 0
    try:
        incremental = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                       "isolation_level": 0, "session_id": r["session_id"], "session_epoch": 1, "topics": [],
                       "forgotten_topics_data": []}
        got = call(b, "alice", 1, 12, incremental)
        part = got["responses"][0]["partitions"][0]
        assert part["error_code"] == TOPIC_AUTH and not part["records"]
    finally:
        flt = {"resource_type_filter": T_TOPIC, "resource_name_filter": OTHER, "pattern_type_filter": LITERAL,
               "principal_filter": "User:alice", "host_filter": None, "operation": READ, "permission_type": DENY}
        assert len(call(b, "admin", 31, 3, {"filters": [flt]})["filter_results"][0]["matching_acls"]) == 1


def test_deny_wins_over_a_wildcard_allow(acl_broker: Any) -> None:
    b = acl_broker
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": OTHER, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20}]}]}
    carol = call(b, "carol", 1, 12, body)["responses"][0]["partitions"][0]
    assert carol["error_code"] == TOPIC_AUTH and not carol["records"]
    bob = call(b, "bob", 1, 12, body)["responses"][0]["partitions"][0]  # User:* ALLOW READ, no deny
    assert bob["error_code"] == 0 and bob["records"]


def test_list_offsets(acl_broker: Any) -> None:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]}
    denied = call(acl_broker, "bob", 2, 7, body)["topics"][0]["partitions"][0]
    assert denied["error_code"] == TOPIC_AUTH and denied["offset"] == -1
    assert call(acl_broker, "alice", 2, 7, body)["topics"][0]["partitions"][0]["error_code"] == 0


def test_metadata_filters_and_refuses(acl_broker: Any) -> None:
    b = acl_broker
    everything = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": True}
    alice_sees = {t["name"] for t in call(b, "alice", 3, 12, everything)["topics"]}
    assert TOPIC in alice_sees and OTHER in alice_sees  # OTHER: User:* READ implies DESCRIBE
    assert HIDDEN not in alice_sees and HIDDEN in topic_names(b)
    bob_sees = {t["name"] for t in call(b, "bob", 3, 12, everything)["topics"]}
    assert TOPIC not in bob_sees and "__consumer_offsets" not in bob_sees
    named = {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
             "include_topic_authorized_operations": True}
    t = call(b, "bob", 3, 12, named)["topics"][0]
    assert t["error_code"] == TOPIC_AUTH and t["partitions"] == []
    t = call(b, "alice", 3, 12, named)["topics"][0]
    assert t["error_code"] == 0 and t["partitions"]
    # KIP-430: ALL on the topic = every topic operation
    assert t["topic_authorized_operations"] == sum(1 << op for op in (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER,
                                                                       DESCRIBE_CONFIGS, ALTER_CONFIGS))
    carol = call(b, "carol", 3, 12, {"topics": [{"name": OTHER}], "include_topic_authorized_operations": True})
    ops = carol["topics"][0]["topic_authorized_operations"]
    assert not ops & (1 << READ) and ops & (1 << WRITE) and ops & (1 << DESCRIBE)


def test_metadata_auto_creation_needs_create(acl_broker: Any) -> None:
    b = acl_broker
    r = call(b, "bob", 3, 12, {"topics": [{"name": "new-by-bob"}], "allow_auto_topic_creation": True})
    assert r["topics"][0]["error_code"] == TOPIC_AUTH
    r = call(b, "alice", 3, 12, {"topics": [{"name": "auto-by-alice"}], "allow_auto_topic_creation": True})
    assert r["topics"][0]["error_code"] == TOPIC_AUTH  # DESCRIBE denied: existence not even checked
    r = call(b, "alice", 3, 12, {"topics": [{"name": "new-auto"}], "allow_auto_topic_creation": True})
    assert r["topics"][0]["error_code"] == 0  # PREFIXED new- ALL covers DESCRIBE and CREATE
    names = topic_names(b)
    assert "new-auto" in names and "new-by-bob" not in names and "auto-by-alice" not in names


# ---------------------------------------------------------------------------------------------------- topics, configs


def test_create_delete_topics_and_partitions(acl_broker: Any) -> None:
    b = acl_broker
    create = {"topics": [{"name": "new-a", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000}
    r = call(b, "bob", 19, 7, create)["topics"][0]
    assert r["error_code"] == TOPIC_AUTH
    assert "new-a" not in topic_names(b)
    r = call(b, "alice", 19, 7, create)["topics"][0]
    assert r["error_code"] == 0
    # ALL on the prefix new- includes DESCRIBE_CONFIGS: the configs are shown (KIP-525)
    assert r["configs"] and r.get("topic_config_error_code", 0) == 0
    # CREATE without DESCRIBE_CONFIGS: created, its configs withheld (KIP-525)
    r = call(b, "carol", 19, 7, dict(create, topics=[{"name": "carol-t", "num_partitions": 1,
                                                        "replication_factor": 1}]))["topics"][0]
    assert r["error_code"] == 0 and r["topic_config_error_code"] == TOPIC_AUTH and r["configs"] is None
    assert "carol-t" in topic_names(b)
    grow = {"topics": [{"name": "new-a", "count": 2, "assignments": None}], "timeout_ms": 10000}
    assert call(b, "bob", 37, 3, grow)["results"][0]["error_code"] == TOPIC_AUTH
    assert call(b, "alice", 37, 3, grow)["results"][0]["error_code"] == 0
    # by topic id without DESCRIBE: refused, and the name is not disclosed
    md = call(b, "alice", 3, 12, {"topics": [{"name": "new-a"}]})
    tid = md["topics"][0]["topic_id"]
    by_id = call(b, "bob", 20, 6, {"topics": [{"name": None, "topic_id": tid}], "timeout_ms": 10000})["responses"][0]
    assert by_id["error_code"] == TOPIC_AUTH and by_id["name"] is None
    delete = {"topic_names": ["new-a"], "timeout_ms": 10000}
    assert call(b, "bob", 20, 5, delete)["responses"][0]["error_code"] == TOPIC_AUTH
    assert "new-a" in topic_names(b)
    assert call(b, "alice", 20, 5, {"topic_names": [OTHER], "timeout_ms": 10000})["responses"][0]["error_code"] \
        == TOPIC_AUTH  # READ for everyone is not DELETE
    assert OTHER in topic_names(b)
    assert call(b, "alice", 20, 5, delete)["responses"][0]["error_code"] == 0
    assert "new-a" not in topic_names(b)


def test_delete_records(acl_broker: Any) -> None:
    b = acl_broker
    before = offsets(b, TOPIC)
    body = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000}
    assert call(b, "bob", 21, 2, body)["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTH
    assert offsets(b, TOPIC) == before


def test_configs(acl_broker: Any) -> None:
    b = acl_broker
    topic = {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]}
    broker_ = {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}]}
    r = call(b, "bob", 32, 4, topic)["results"][0]
    assert r["error_code"] == TOPIC_AUTH and r["configs"] == []
    assert call(b, "bob", 32, 4, broker_)["results"][0]["error_code"] == CLUSTER_AUTH
    assert call(b, "alice", 32, 4, topic)["results"][0]["error_code"] == 0
    assert call(b, "alice", 32, 4, broker_)["results"][0]["error_code"] == 0
    before = retention(b, TOPIC)
    alter = {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1"}]}], "validate_only": False}
    assert call(b, "bob", 44, 1, alter)["responses"][0]["error_code"] == TOPIC_AUTH
    legacy = {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "value": "1"}]}], "validate_only": False}
    assert call(b, "bob", 33, 2, legacy)["responses"][0]["error_code"] == TOPIC_AUTH
    assert retention(b, TOPIC) == before
    broker_alter = {"resources": [{"resource_type": 4, "resource_name": "", "configs": []}], "validate_only": False}
    assert call(b, "alice", 44, 1, broker_alter)["responses"][0]["error_code"] == CLUSTER_AUTH  # no ALTER_CONFIGS


# ---------------------------------------------------------------------------------------------------- groups


def test_group_apis(acl_broker: Any) -> None:
    b = acl_broker
    assert call(b, "bob", 10, 3, {"key": GROUP, "key_type": 0})["error_code"] == GROUP_AUTH
    assert call(b, "alice", 10, 3, {"key": GROUP, "key_type": 0})["error_code"] == 0
    join = {"group_id": GROUP, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    assert call(b, "bob", 11, 7, join)["error_code"] == GROUP_AUTH
    assert call(b, "bob", 14, 5, {"group_id": GROUP, "generation_id": 1, "member_id": "m",
                                  "assignments": []})["error_code"] == GROUP_AUTH
    assert call(b, "bob", 12, 4, {"group_id": GROUP, "generation_id": 1, "member_id": "m"})["error_code"] == GROUP_AUTH
    assert call(b, "bob", 13, 4, {"group_id": GROUP, "members": [{"member_id": "m"}]})["error_code"] == GROUP_AUTH
    before = committed(b, GROUP, TOPIC)
    commit = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
              "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 2}]}]}
    assert call(b, "bob", 8, 8, commit)["topics"][0]["partitions"][0]["error_code"] == GROUP_AUTH
    assert committed(b, GROUP, TOPIC) == before
    # alice may use the group, but a topic she may not read is refused per partition
    no_read = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
               "topics": [{"name": "no-read", "partitions": [{"partition_index": 0, "committed_offset": 2}]}]}
    assert call(b, "alice", 8, 8, no_read)["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTH
    assert call(b, "alice", 8, 8, commit)["topics"][0]["partitions"][0]["error_code"] == 0
    assert committed(b, GROUP, TOPIC) == 2
    # "all topics" leaves out the committed offsets of topics alice may not describe
    every = call(b, "alice", 9, 7, {"group_id": GROUP, "topics": None})
    assert every["error_code"] == 0 and [t["name"] for t in every["topics"]] == [TOPIC]
    assert sorted(t["name"] for t in call(b, "admin", 9, 7, {"group_id": GROUP, "topics": None})["topics"]) == [
        HIDDEN, TOPIC]
    hidden = call(b, "alice", 9, 7, {"group_id": GROUP, "topics": [{"name": HIDDEN, "partition_indexes": [0]}]})
    assert hidden["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTH
    assert hidden["topics"][0]["partitions"][0]["committed_offset"] == -1
    fetch = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    r = call(b, "bob", 9, 7, fetch)
    assert r["error_code"] == GROUP_AUTH
    assert all(p["committed_offset"] == -1 for t in r["topics"] for p in t["partitions"])
    assert call(b, "alice", 9, 7, fetch)["topics"][0]["partitions"][0]["committed_offset"] == 2
    d = call(b, "bob", 15, 5, {"groups": [GROUP], "include_authorized_operations": True})["groups"][0]
    assert d["error_code"] == GROUP_AUTH
    d = call(b, "alice", 15, 5, {"groups": [GROUP], "include_authorized_operations": True})["groups"][0]
    # ALL on the group: every operation a GROUP has in Kafka 4 (the configs ones since its GROUP config resource)
    assert d["error_code"] == 0 and d["authorized_operations"] == sum(
        1 << op for op in (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS))
    assert GROUP not in {g["group_id"] for g in call(b, "bob", 16, 4, {})["groups"]}
    assert GROUP in {g["group_id"] for g in call(b, "alice", 16, 4, {})["groups"]}
    assert call(b, "bob", 42, 2, {"groups_names": [GROUP]})["results"][0]["error_code"] == GROUP_AUTH
    assert committed(b, GROUP, TOPIC) == 2
    r = call(b, "bob", 47, 0, {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
    assert r["error_code"] == GROUP_AUTH
    assert committed(b, GROUP, TOPIC) == 2


# ---------------------------------------------------------------------------------------------------- producer ids, txns


def test_init_producer_id(acl_broker: Any) -> None:
    b = acl_broker
    idem = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
    assert call(b, "bob", 22, 4, idem)["error_code"] == CLUSTER_AUTH
    assert call(b, "alice", 22, 4, idem)["error_code"] == 0
    # carol: no IDEMPOTENT_WRITE, but WRITE on a topic is enough (KIP-679)
    assert call(b, "carol", 22, 4, idem)["error_code"] == 0
    txn = dict(idem, transactional_id=TXN)
    assert call(b, "bob", 22, 4, txn)["error_code"] == TXN_AUTH
    assert call(b, "bob", 10, 3, {"key": TXN, "key_type": 1})["error_code"] == TXN_AUTH
    r = call(b, "alice", 22, 4, txn)
    assert r["error_code"] == 0
    pid, epoch = r["producer_id"], r["producer_epoch"]
    add = {"v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch,
           "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}
    res = call(b, "bob", 24, 3, add)["results_by_topic_v3_and_below"][0]["results_by_partition"][0]
    assert res["partition_error_code"] == TXN_AUTH
    assert call(b, "bob", 25, 3, {"transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch,
                                  "group_id": GROUP})["error_code"] == TXN_AUTH
    # alice: the transactional id is hers, but a topic she may not write is refused per partition, the rest
    # not attempted
    add_no = dict(add, v3_and_below_topics=[{"name": "no-write", "partitions": [0]},
                                            {"name": TOPIC, "partitions": [0]}])
    res = {t["name"]: t["results_by_partition"][0]["partition_error_code"]
           for t in call(b, "alice", 24, 3, add_no)["results_by_topic_v3_and_below"]}
    assert res == {"no-write": TOPIC_AUTH, TOPIC: 55}  # OPERATION_NOT_ATTEMPTED
    commit = {"transactional_id": TXN, "group_id": GROUP, "producer_id": pid, "producer_epoch": epoch,
              "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}
    assert call(b, "bob", 28, 3, commit)["topics"][0]["partitions"][0]["error_code"] == TXN_AUTH
    assert call(b, "bob", 26, 3, {"transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch,
                                  "committed": True})["error_code"] == TXN_AUTH
    d = call(b, "bob", 65, 0, {"transactional_ids": [TXN]})["transaction_states"][0]
    assert d["error_code"] == TXN_AUTH
    assert call(b, "alice", 65, 0, {"transactional_ids": [TXN]})["transaction_states"][0]["error_code"] == 0
    assert TXN not in {t["transactional_id"] for t in call(b, "bob", 66, 1, {})["transaction_states"]}
    assert TXN in {t["transactional_id"] for t in call(b, "alice", 66, 1, {})["transaction_states"]}
    markers = {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": True,
                            "coordinator_epoch": 0, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}
    before = offsets(b, TOPIC)
    r = call(b, "alice", 27, 1, markers)
    assert r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == CLUSTER_AUTH
    assert offsets(b, TOPIC) == before


def test_cluster_apis(acl_broker: Any) -> None:
    b = acl_broker
    producers = {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    assert call(b, "bob", 61, 0, producers)["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTH
    assert call(b, "alice", 61, 0, producers)["topics"][0]["partitions"][0]["error_code"] == 0
    r = call(b, "bob", 35, 4, {"topics": None})
    assert r["error_code"] == CLUSTER_AUTH and r["results"] == []
    assert call(b, "alice", 35, 4, {"topics": None})["error_code"] == 0
    assert call(b, "bob", 50, 0, {"users": None})["error_code"] == CLUSTER_AUTH
    up = {"deletions": [], "upsertions": [{"name": "mallory", "mechanism": 2, "iterations": 4096,
                                           "salt": b"s" * 16, "salted_password": b"p" * 64}]}
    assert call(b, "alice", 51, 0, up)["results"][0]["error_code"] == CLUSTER_AUTH  # ALTER on cluster needed
    assert "mallory" not in {u["user"] for u in call(b, "admin", 50, 0, {"users": None})["results"]}
    cluster = call(b, "alice", 60, 0, {"include_cluster_authorized_operations": True})
    assert cluster["cluster_authorized_operations"] == (1 << DESCRIBE) | (1 << DESCRIBE_CONFIGS) | (1 << IDEMPOTENT_WRITE)


def test_client_quota_apis_need_the_cluster(acl_broker: Any) -> None:
    """DescribeClientQuotas: DESCRIBE_CONFIGS on the cluster; AlterClientQuotas: ALTER_CONFIGS (KafkaApis)."""
    b = acl_broker
    describe = {"components": [], "strict": False}
    assert call(b, "bob", 48, 1, describe)["error_code"] == CLUSTER_AUTH
    assert call(b, "alice", 48, 1, describe)["error_code"] == 0  # alice has DESCRIBE_CONFIGS on the cluster
    alter = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "acl-quota"}],
                          "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
             "validate_only": False}
    assert call(b, "alice", 49, 1, alter)["entries"][0]["error_code"] == CLUSTER_AUTH  # no ALTER_CONFIGS
    assert call(b, "admin", 48, 1, describe)["entries"] == []  # nothing was changed
    assert call(b, "admin", 49, 1, alter)["entries"][0]["error_code"] == 0
    assert [e["values"] for e in call(b, "alice", 48, 1, describe)["entries"]] == [
        [{"key": "producer_byte_rate", "value": 1024.0}]]


def test_acl_apis_need_the_cluster(acl_broker: Any) -> None:
    b = acl_broker
    n = acl_count(b)
    r = call(b, "bob", 30, 3, {"creations": [acl(T_TOPIC, "*", "User:bob", 2)]})
    assert r["results"][0]["error_code"] == CLUSTER_AUTH
    flt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    r = call(b, "alice", 29, 3, flt)  # alice has DESCRIBE on the cluster
    assert r["error_code"] == 0 and sum(len(x["acls"]) for x in r["resources"]) == n
    r = call(b, "bob", 29, 3, flt)
    assert r["error_code"] == CLUSTER_AUTH and r["resources"] == []
    r = call(b, "alice", 31, 3, {"filters": [flt]})  # no ALTER on the cluster
    assert r["filter_results"][0]["error_code"] == CLUSTER_AUTH
    assert acl_count(b) == n
    # bad creations are INVALID_REQUEST (42) one by one; the good one in the same request is stored
    r = call(b, "admin", 30, 3, {"creations": [acl(T_CLUSTER, "other", "User:x", 2), acl(T_TOPIC, "", "User:x", 2),
                                               acl(T_TOPIC, "z", "nocolon", 2), acl(T_TOPIC, "z", "User:x", READ)]})
    assert [x["error_code"] for x in r["results"]] == [42, 42, 42, 0]
    r = call(b, "admin", 31, 3, {"filters": [dict(flt, resource_type_filter=T_TOPIC, resource_name_filter="z",
                                                  pattern_type_filter=LITERAL)]})
    assert [m["principal"] for m in r["filter_results"][0]["matching_acls"]] == ["User:x"]
    assert acl_count(b) == n


def test_acls_file_survives_a_restart(acl_broker: Any) -> None:
    b = acl_broker
    data = json.loads((Path(b.data_dir) / "tidelog-acls.json").read_text())
    assert {"resourceType": "TOPIC", "name": "new-", "patternType": "PREFIXED", "principal": "User:alice",
            "host": "*", "operation": "ALL", "permissionType": "ALLOW"} in data["acls"]
    b.restart()
    b.sasl_port = sasl_port(b)
    assert produce_code(call(b, "bob", 0, 9, produce_body(TOPIC, build_batch([(None, b"x")])))) == TOPIC_AUTH
    assert produce_code(call(b, "alice", 0, 9, produce_body(TOPIC, build_batch([(None, b"x")])))) == 0


# ---------------------------------------------------------------------------------------------------- real clients


def test_confluent_clients(acl_broker: Any) -> None:
    b = acl_broker
    before = offsets(b, TOPIC)
    errors: list[Any] = []
    p = Producer({**ck_conf(b, "bob"), "message.timeout.ms": 5000})
    p.produce(TOPIC, b"bob", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert offsets(b, TOPIC) == before
    c = Consumer({**ck_conf(b, "bob"), "group.id": GROUP, "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    seen = None
    for _ in range(20):
        m = c.poll(1)
        if m is not None:
            seen = m
            break
    c.close()
    assert seen is not None and seen.error() is not None and seen.error().code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    # alice consumes what is there
    c = Consumer({**ck_conf(b, "alice"), "group.id": GROUP, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = None
    for _ in range(20):
        m = c.poll(1)
        if m is not None and m.error() is None:
            got = m
            break
    c.close()
    assert got is not None and got.value() == b"v1"

    admin = AdminClient(ck_conf(b, "admin"))
    binding = AclBinding(ResourceType.GROUP, "ck-group", ResourcePatternType.PREFIXED, "User:dave", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(15)
    flt = AclBindingFilter(ResourceType.GROUP, "ck-group-1", ResourcePatternType.MATCH, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(flt).result(15) == [binding]
    for f in admin.delete_acls([flt]).values():
        assert f.result(15) == [binding]
    assert admin.describe_acls(flt).result(15) == []


def test_kafka_python_admin(acl_broker: Any) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    b = acl_broker

    def admin(user: str) -> Any:
        return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{b.sasl_port}", security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=USERS[user])

    a = admin("admin")
    entry = ACL("User:erin", "10.0.0.1", ACLOperation.WRITE, ACLPermissionType.DENY,
                ResourcePattern(KResourceType.TRANSACTIONAL_ID, "kp-", ACLResourcePatternType.PREFIXED))
    assert a.create_acls([entry])["failed"] == []
    flt = ACLFilter("User:erin", None, ACLOperation.ANY, ACLPermissionType.ANY,
                    ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))
    found, _ = a.describe_acls(flt)
    assert [(x.principal, x.host, x.resource_pattern.resource_name) for x in found] == [("User:erin", "10.0.0.1", "kp-")]
    deleted = a.delete_acls([flt])
    assert len(deleted[0][1]) == 1
    assert a.describe_acls(flt)[0] == []
    a.close()
    bob = admin("bob")
    with pytest.raises(ClusterAuthorizationFailedError):
        bob.describe_acls(flt)
    bob.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli(acl_broker: Any, tmp_path: Path) -> None:
    b = acl_broker
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                     'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                     'password="admin-secret";\n')
    common = ["-b", f"127.0.0.1:{b.sasl_port}", "--command-config", str(props)]
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    r = _cli("acls", "add", "--allow-principal", "User:frank", "--producer", "--topic", topic, *common)
    assert r.returncode == 0, r.stderr
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:" \
        in r.stdout
    r = _cli("acls", "list", "--topic", topic, *common)
    assert r.returncode == 0, r.stderr
    assert "(principal=User:frank, host=*, operation=WRITE, permissionType=ALLOW)" in r.stdout
    assert "operation=CREATE" in r.stdout and "operation=DESCRIBE" in r.stdout
    r = _cli("acls", "remove", "--topic", topic, "--operation", "CREATE", *common)
    assert r.returncode == 0 and "operation=CREATE" in r.stdout
    r = _cli("acls", "list", "--topic", topic, *common)
    assert "operation=CREATE" not in r.stdout and "operation=WRITE" in r.stdout
    # the anonymous PLAINTEXT listener: refused, one line, exit 1
    r = _cli("acls", "list", "-b", b.bootstrap)
    assert r.returncode == 1 and r.stderr.strip() == "Error: CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed."
    r = _cli("acls", "add", "--allow-principal", "frank", "--topic", "x", *common)
    assert r.returncode == 2 and "Type:name" in r.stderr


# ---------------------------------------------------------------------------------------------------- no authorizer


def test_no_authorizer(broker: Any) -> None:
    r = call(broker, None, 30, 3, {"creations": [acl(T_TOPIC, "t", "User:x", READ)]})
    assert r["results"][0]["error_code"] == 54  # SECURITY_DISABLED
    r = call(broker, None, 29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                                   "permission_type": 1})
    assert r["error_code"] == 54
    versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in call(broker, None, 18, 3, {})["api_keys"]}
    assert versions[29] == versions[30] == versions[31] == (1, 3)
