"""Authorization of every API, as Kafka's KafkaApis (issue 24 item 1), against a real ``tidelog serve``.

One JBOD broker (two ``log.dirs``) with a SASL_PLAINTEXT listener (PLAIN users ``admin``, a super user, ``alice``,
``bob``, ``carol``) and ``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``:

* AlterReplicaLogDirs (API 34) needs ALTER on the cluster: ``bob`` (no ACL) and ``User:ANONYMOUS`` on the PLAINTEXT
  listener get CLUSTER_AUTHORIZATION_FAILED for every partition they name (one they may not even see included)
  and nothing moves; a principal granted ALTER on the cluster moves the replica. DescribeLogDirs needs DESCRIBE on
  the cluster.
* ``test_every_api_is_authorized_as_kafka``: the table ``KAFKA_AUTHZ`` (Kafka's resource type and operation per
  API key, from ``KafkaApis``) must name every API key the broker advertises; for each authorized API a real
  request from ``bob`` must get Kafka's authorization error, and the same request from a principal given exactly
  that ACL must not.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aclsupport import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER_ACTION,
    CLUSTER_AUTH,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP_AUTH,
    IDEMPOTENT_WRITE,
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
    plain_jaas,
    sasl_port,
)
from helpers import wait_for

from tidelog.client.security import ClientSecurity
from tidelog.cluster.handlers import CLUSTER_HANDLERS
from tidelog.cluster.peer import Peer
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import GROUP_API_VERSIONS, SUPPORTED_VERSIONS
from tidelog.records.batch import build_batch

_path = Path(__file__).resolve().parents[2] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_test_api_authz_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
MOVED, HIDDEN = "authz-moved", "authz-hidden"
JbodBroker = _fixtures.JbodBroker


@pytest.fixture(scope="module")
def jbod_acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("authz")
    jaas = plain_jaas({**USERS, **{u: PASSWORD for u in table_principals()}})
    b = JbodBroker([root / "a", root / "b"],
                   acl_overrides(**{"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}))
    b.start()
    try:
        b.sasl_port = sasl_port(b)
        r = call(b, "admin", 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1}
                                                for n in (MOVED, HIDDEN)], "timeout_ms": 10000})
        assert [t["error_code"] for t in r["topics"]] == [0, 0], r
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": MOVED, "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]}
        assert call(b, "admin", 0, 9, body)["responses"][0]["partition_responses"][0]["error_code"] == 0
        setup_table_resources(b)
        yield b
    finally:
        b.stop()


def _where(b: Any, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> [(partition, is_future_key)] of ``topic``, as the super user's DescribeLogDirs shows it."""
    r = call(b, "admin", DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert r["error_code"] == 0
    return {d["log_dir"]: [(p["partition_index"], p["is_future_key"]) for t in d["topics"] if t["name"] == topic
                           for p in t["partitions"]] for d in r["results"]}


def _alter_dirs(b: Any, user: str | None, dest: Path, topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    r = call(b, user, ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": str(dest), "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})
    return {(t["topic_name"], p["partition_index"]): p["error_code"] for t in r["results"] for p in t["partitions"]}


def test_alter_replica_log_dirs_needs_alter_on_the_cluster(jbod_acl_broker: Any) -> None:
    b = jbod_acl_broker
    where = _where(b, MOVED)
    [src] = [d for d, ps in where.items() if ps == [(0, False)]]
    [dst] = [Path(d) for d in where if d != src]
    # bob has no ACL; ANONYMOUS comes in on the PLAINTEXT listener; HIDDEN is a topic neither may even see
    for user in ("bob", None):
        codes = _alter_dirs(b, user, dst, {MOVED: [0], HIDDEN: [0]})
        assert codes == {(MOVED, 0): CLUSTER_AUTH, (HIDDEN, 0): CLUSTER_AUTH}, (user, codes)
        r = call(b, user, DESCRIBE_LOG_DIRS, 4, {"topics": None})
        assert r["error_code"] == CLUSTER_AUTH and r["results"] == [], (user, r)
    assert _where(b, MOVED)[src] == [(0, False)] and _where(b, MOVED)[str(dst)] == []
    assert not list(dst.glob("*-future")) and not (dst / f"{MOVED}-0").exists()
    # DESCRIBE on the cluster is not enough to move; ALTER is
    creations = [acl(T_CLUSTER, "kafka-cluster", "User:carol", DESCRIBE)]
    assert [x["error_code"] for x in call(b, "admin", 30, 3, {"creations": creations})["results"]] == [0]
    assert call(b, "carol", DESCRIBE_LOG_DIRS, 4, {"topics": None})["error_code"] == 0
    assert _alter_dirs(b, "carol", dst, {MOVED: [0]}) == {(MOVED, 0): CLUSTER_AUTH}
    creations = [acl(T_CLUSTER, "kafka-cluster", "User:carol", ALTER)]
    assert [x["error_code"] for x in call(b, "admin", 30, 3, {"creations": creations})["results"]] == [0]
    assert _alter_dirs(b, "carol", dst, {MOVED: [0]}) == {(MOVED, 0): 0}
    wait_for(lambda: _where(b, MOVED) == {src: [], str(dst): [(0, False)]}, 30, "the replica moved")


# ------------------------------------------------------------------------------ every API, as Kafka's KafkaApis

T, G, X = "authz-t", "authz-g", "authz-x"  # a topic with records, a group with a committed offset, a txn id
GONE = "authz-gone"  # a topic that does not exist: a destructive API allowed on it changes nothing
PASSWORD = "pw"
AUTH_CODES = {TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH}
NO_AUTH = "none"  # APIs Kafka does not authorize (ApiVersions, SASL, DescribeCluster's answer itself)

# Kafka's ``AclEntry.supportedOperations`` and implied operations (``AclAuthorizer``): an ALLOW of any of
# IMPLIES[op] grants op
SUPPORTED = {T_TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
             T_GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
             T_CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
             T_TXN: (DESCRIBE, WRITE)}
IMPLIES = {DESCRIBE: {DESCRIBE, READ, WRITE, DELETE, ALTER}, DESCRIBE_CONFIGS: {DESCRIBE_CONFIGS, ALTER_CONFIGS}}

Name = str | Callable[[str], str]  # a resource name, or one per principal (e.g. the topic it creates)


@dataclass
class Check:
    """One authorization step of an API: Kafka's (resource type, operation) on a resource, and the error code a
    principal lacking it gets."""

    rtype: int
    op: int
    name: Name
    denied: int

    def resource(self, user: str) -> str:
        return self.name(user) if callable(self.name) else self.name


@dataclass
class Case:
    """A request of one API and the checks KafkaApis makes for it, in order. ``code(response)`` is the error code
    that shows the outcome (for APIs that filter instead of refusing, the denied code when the resource is
    left out)."""

    version: int
    body: Callable[[str], dict]
    code: Callable[[dict], int]
    checks: list[Check] = field(default_factory=list)
    what: str = ""


def _produce(topic: str, txn: str | None = None) -> Callable[[str], dict]:
    def body(_user: str) -> dict:
        batch = (build_batch([(None, b"v")], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
                 if txn else build_batch([(None, b"v")]))
        return {"transactional_id": txn, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    return body


def _fetch(replica_id: int) -> Callable[[str], dict]:
    return lambda _u: {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                       "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                       "topics": [{"topic": T, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                               "partition_max_bytes": 1 << 20}]}]}


def _produce_by_id(topic: str) -> Callable[[str], dict]:
    """Produce v13 (KIP-516): the topic named by its id only; its WRITE is checked on the resolved name."""
    return lambda _u: {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"topic_id": TOPIC_IDS[topic], "partition_data": [{"index": 0, "records": build_batch([(None, b"v")])}]}]}


def _fetch_by_id(_user: str) -> dict:
    """Fetch v18: the topic by id, with the fetching replica's high watermark (KIP-1166, ignored)."""
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": TOPIC_IDS[T], "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "high_watermark": 0}]}]}


def _group_or_partition(r: dict) -> int:
    g = r["groups"][0]
    return g["error_code"] or g["topics"][0]["partitions"][0]["error_code"]


def _first_partition(key: str, results: str = "partitions") -> Callable[[dict], int]:
    return lambda r: r[key][0][results][0]["error_code"]


def _top_or_partition(r: dict) -> int:
    return r["error_code"] or r["topics"][0]["partitions"][0]["error_code"]


def _group_listed(r: dict) -> int:
    return 0 if G in {g["group_id"] for g in r["groups"]} else GROUP_AUTH


def _txn_listed(r: dict) -> int:
    return 0 if X in {t["transactional_id"] for t in r["transaction_states"]} else TXN_AUTH


def _ops_shown(r: dict) -> int:
    ops = r["cluster_authorized_operations"]
    return CLUSTER_AUTH if ops in (0, -2147483648) else 0


_TXN_HEAD = {"producer_id": 1, "producer_epoch": 0}
_BROKER = {"resource_type": 4, "resource_name": "0"}
_BROKER_LOGGER = {"resource_type": 8, "resource_name": "0"}
_BROKER_DEFAULT = {"resource_type": 4, "resource_name": ""}  # the cluster-wide dynamic default
_GROUP_RES = {"resource_type": 32, "resource_name": "authz-group"}  # Kafka 4's GROUP config resource
DEL = "authz-del"  # deleted by its id by the one principal allowed to
TOPIC_IDS: dict[str, bytes] = {}  # filled by setup_table_resources

#: Kafka's authorization per API key (KafkaApis / AuthHelper, Kafka 4.1; ControllerApis for the ZooKeeper-mode
#: reassignment APIs): the cases a client can reach, each with its checks in order. Every API key the broker
#: advertises must be here; ``NO_AUTH`` marks the APIs Kafka answers without asking the authorizer.
KAFKA_AUTHZ: dict[int, list[Case] | str] = {
    ApiKey.PRODUCE: [
        Case(9, _produce(T), _first_partition("responses", "partition_responses"),
             [Check(T_TOPIC, WRITE, T, TOPIC_AUTH)]),
        Case(9, _produce(T, X), _first_partition("responses", "partition_responses"),
             [Check(T_TXN, WRITE, X, TXN_AUTH), Check(T_TOPIC, WRITE, T, TOPIC_AUTH)], "transactional"),
        Case(13, _produce_by_id(T), _first_partition("responses", "partition_responses"),
             [Check(T_TOPIC, WRITE, T, TOPIC_AUTH)], "topic id"),
    ],
    ApiKey.FETCH: [
        Case(12, _fetch(-1), _first_partition("responses"), [Check(T_TOPIC, READ, T, TOPIC_AUTH)]),
        Case(12, _fetch(1), _first_partition("responses"),
             [Check(T_CLUSTER, CLUSTER_ACTION, "kafka-cluster", TOPIC_AUTH)], "follower"),
        Case(18, _fetch_by_id, _first_partition("responses"), [Check(T_TOPIC, READ, T, TOPIC_AUTH)], "topic id"),
    ],
    ApiKey.LIST_OFFSETS: [Case(7, lambda _u: {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": T, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, _first_partition("topics"),
        [Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)])],
    ApiKey.METADATA: [
        Case(12, lambda _u: {"topics": [{"name": T}], "allow_auto_topic_creation": False},
             lambda r: r["topics"][0]["error_code"], [Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)]),
        Case(10, lambda _u: {"topics": [], "allow_auto_topic_creation": False,
                             "include_cluster_authorized_operations": True}, _ops_shown,
             [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", CLUSTER_AUTH)], "cluster_authorized_operations"),
    ],
    ApiKey.OFFSET_COMMIT: [Case(8, lambda _u: {
        "group_id": G, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
        _first_partition("topics"), [Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, READ, T, TOPIC_AUTH)]),
        Case(10, lambda _u: {  # topics by id: READ checked on the resolved name
            "group_id": G, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"topic_id": TOPIC_IDS[T], "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
            _first_partition("topics"), [Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, READ, T, TOPIC_AUTH)],
            "topic id")],
    ApiKey.OFFSET_FETCH: [Case(7, lambda _u: {"group_id": G, "topics": [{"name": T, "partition_indexes": [0]}]},
                               _top_or_partition,
                               [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH), Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)]),
                          Case(10, lambda _u: {"groups": [{"group_id": G, "topics": [
                              {"topic_id": TOPIC_IDS[T], "partition_indexes": [0]}]}]}, _group_or_partition,
                               [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH), Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)],
                               "topic id")],
    ApiKey.FIND_COORDINATOR: [
        Case(3, lambda _u: {"key": G, "key_type": 0}, lambda r: r["error_code"],
             [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH)]),
        Case(3, lambda _u: {"key": X, "key_type": 1}, lambda r: r["error_code"],
             [Check(T_TXN, DESCRIBE, X, TXN_AUTH)], "transaction coordinator"),
        Case(6, lambda _u: {"key_type": 2, "coordinator_keys": [f"{G}:AAAAAAAAAAAAAAAAAAAAAA:0"]},
             lambda r: r["coordinators"][0]["error_code"],
             [Check(T_CLUSTER, CLUSTER_ACTION, "kafka-cluster", CLUSTER_AUTH)], "share coordinator"),
    ],
    ApiKey.JOIN_GROUP: [Case(7, lambda _u: {
        "group_id": G, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}, lambda r: r["error_code"],
        [Check(T_GROUP, READ, G, GROUP_AUTH)])],
    ApiKey.HEARTBEAT: [Case(4, lambda _u: {"group_id": G, "generation_id": 1, "member_id": "m"},
                            lambda r: r["error_code"], [Check(T_GROUP, READ, G, GROUP_AUTH)])],
    ApiKey.LEAVE_GROUP: [Case(4, lambda _u: {"group_id": G, "members": [{"member_id": "m"}]},
                              lambda r: r["error_code"], [Check(T_GROUP, READ, G, GROUP_AUTH)])],
    ApiKey.SYNC_GROUP: [Case(5, lambda _u: {"group_id": G, "generation_id": 1, "member_id": "m", "assignments": []},
                             lambda r: r["error_code"], [Check(T_GROUP, READ, G, GROUP_AUTH)])],
    ApiKey.DESCRIBE_GROUPS: [Case(5, lambda _u: {"groups": [G]}, lambda r: r["groups"][0]["error_code"],
                                  [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH)])],
    ApiKey.LIST_GROUPS: [  # filters: everything with DESCRIBE on the cluster, else the groups one may DESCRIBE
        Case(4, lambda _u: {}, _group_listed, [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH)], "per group"),
        Case(4, lambda _u: {}, _group_listed, [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", GROUP_AUTH)],
             "cluster"),
    ],
    # KIP-848: READ on the group, then DESCRIBE on every subscribed topic name (Kafka 4, KAFKA-18813)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [Case(1, lambda _u: {
        "group_id": G, "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 5000,
        "subscribed_topic_names": [T], "topic_partitions": []}, lambda r: r["error_code"],
        [Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)])],
    # ... and DESCRIBE on the topics of the group's assignments (KAFKA-18813): G has T assigned by then (the table
    # runs in API key order: the heartbeat case above joined a member subscribed to T)
    ApiKey.CONSUMER_GROUP_DESCRIBE: [Case(1, lambda _u: {"group_ids": [G]}, lambda r: r["groups"][0]["error_code"],
                                          [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH),
                                           Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)])],
    # KIP-932 share groups: READ on the group, then (heartbeat) DESCRIBE on the subscribed topics, (fetch) READ on
    # each topic after the share session; an acknowledgement without a session fails on the session first
    ApiKey.SHARE_GROUP_HEARTBEAT: [Case(1, lambda _u: {
        "group_id": G, "member_id": "m", "member_epoch": 0, "rack_id": None, "subscribed_topic_names": [T]},
        lambda r: r["error_code"], [Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)])],
    ApiKey.SHARE_GROUP_DESCRIBE: [Case(1, lambda _u: {"group_ids": [G], "include_authorized_operations": False},
                                       lambda r: r["groups"][0]["error_code"], [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH)])],
    ApiKey.SHARE_FETCH: [Case(1, lambda u: {
        "group_id": G, "member_id": u, "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [],
        "topics": [{"topic_id": TOPIC_IDS[T], "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]},
        lambda r: r["error_code"] or next((p["error_code"] for t in r["responses"] for p in t["partitions"]), 0),
        [Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, READ, T, TOPIC_AUTH)])],
    ApiKey.SHARE_ACKNOWLEDGE: [Case(1, lambda u: {"group_id": G, "member_id": u, "share_session_epoch": 1,
                                                  "topics": []},
                                    lambda r: r["error_code"], [Check(T_GROUP, READ, G, GROUP_AUTH)])],
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: [Case(0, lambda _u: {"groups": [
        {"group_id": G, "topics": [{"topic_name": T, "partitions": [0]}]}]},
        lambda r: (r["groups"][0]["topics"][0]["partitions"][0]["error_code"] if r["groups"][0]["topics"]
                   else r["groups"][0]["error_code"]),
        [Check(T_GROUP, DESCRIBE, G, GROUP_AUTH), Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)])],
    ApiKey.SASL_HANDSHAKE: NO_AUTH,
    ApiKey.API_VERSIONS: NO_AUTH,
    ApiKey.SASL_AUTHENTICATE: NO_AUTH,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: NO_AUTH,  # KafkaApis checks no ACL for KIP-714's APIs
    ApiKey.PUSH_TELEMETRY: NO_AUTH,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: [  # DESCRIBE on each topic; an unauthorized topic is named only if asked for
        Case(0, lambda _u: {"topics": [{"name": T}], "response_partition_limit": 10, "cursor": None},
             lambda r: r["topics"][0]["error_code"], [Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)]),
        Case(0, lambda _u: {"topics": [], "response_partition_limit": 2000, "cursor": None},
             lambda r: 0 if T in {t["name"] for t in r["topics"]} else TOPIC_AUTH,
             [Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)], "all topics (filtered)"),
    ],
    ApiKey.UPDATE_FEATURES: [Case(2, lambda _u: {"feature_updates": [
        {"feature": "metadata.version", "max_version_level": 29, "upgrade_type": 1}], "validate_only": True},
        lambda r: r["error_code"], [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.DESCRIBE_CLUSTER: [  # answered to all; the cluster's authorized operations only with DESCRIBE
        Case(1, lambda _u: {"include_cluster_authorized_operations": True, "endpoint_type": 1}, _ops_shown,
             [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", CLUSTER_AUTH)], "cluster_authorized_operations"),
    ],
    ApiKey.CREATE_TOPICS: [  # CREATE on the cluster, or on the topic
        Case(7, lambda u: {"topics": [{"name": f"authz-new-{u}", "num_partitions": 1, "replication_factor": 1}],
                           "timeout_ms": 10000, "validate_only": True}, lambda r: r["topics"][0]["error_code"],
             [Check(T_CLUSTER, CREATE, "kafka-cluster", TOPIC_AUTH)], "cluster"),
        Case(7, lambda u: {"topics": [{"name": f"authz-new-{u}", "num_partitions": 1, "replication_factor": 1}],
                           "timeout_ms": 10000, "validate_only": True}, lambda r: r["topics"][0]["error_code"],
             [Check(T_TOPIC, CREATE, lambda u: f"authz-new-{u}", TOPIC_AUTH)], "topic"),
    ],
    ApiKey.DELETE_TOPICS: [
        Case(5, lambda _u: {"topic_names": [GONE], "timeout_ms": 10000}, lambda r: r["responses"][0]["error_code"],
             [Check(T_TOPIC, DELETE, GONE, TOPIC_AUTH)]),
        Case(6, lambda _u: {"topics": [{"name": None, "topic_id": TOPIC_IDS[DEL]}], "timeout_ms": 10000},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_TOPIC, DESCRIBE, DEL, TOPIC_AUTH), Check(T_TOPIC, DELETE, DEL, TOPIC_AUTH)], "by topic id"),
    ],
    ApiKey.DELETE_RECORDS: [Case(2, lambda _u: {"topics": [{"name": GONE, "partitions": [
        {"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000}, _first_partition("topics"),
        [Check(T_TOPIC, DELETE, GONE, TOPIC_AUTH)])],
    ApiKey.INIT_PRODUCER_ID: [
        Case(4, lambda _u: {"transactional_id": X, "transaction_timeout_ms": 60000, "producer_id": -1,
                            "producer_epoch": -1}, lambda r: r["error_code"], [Check(T_TXN, WRITE, X, TXN_AUTH)],
             "transactional"),
        Case(4, lambda _u: {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
                            "producer_epoch": -1}, lambda r: r["error_code"],
             [Check(T_CLUSTER, IDEMPOTENT_WRITE, "kafka-cluster", CLUSTER_AUTH)], "idempotent"),
        Case(4, lambda _u: {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
                            "producer_epoch": -1}, lambda r: r["error_code"],
             [Check(T_TOPIC, WRITE, T, CLUSTER_AUTH)], "idempotent, WRITE on any topic (KIP-679)"),
    ],
    ApiKey.ADD_PARTITIONS_TO_TXN: [
        Case(3, lambda _u: {"v3_and_below_transactional_id": X, "v3_and_below_producer_id": 1,
                            "v3_and_below_producer_epoch": 0,
                            "v3_and_below_topics": [{"name": T, "partitions": [0]}]},
             lambda r: r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"],
             [Check(T_TXN, WRITE, X, TXN_AUTH), Check(T_TOPIC, WRITE, T, TOPIC_AUTH)]),
        Case(4, lambda _u: {"transactions": [{"transactional_id": X, **_TXN_HEAD, "verify_only": True,
                                              "topics": [{"name": T, "partitions": [0]}]}]},
             lambda r: r["error_code"], [Check(T_CLUSTER, CLUSTER_ACTION, "kafka-cluster", CLUSTER_AUTH)],
             "v4+, from brokers"),
    ],
    ApiKey.ADD_OFFSETS_TO_TXN: [Case(3, lambda _u: {"transactional_id": X, **_TXN_HEAD, "group_id": G},
                                     lambda r: r["error_code"],
                                     [Check(T_TXN, WRITE, X, TXN_AUTH), Check(T_GROUP, READ, G, GROUP_AUTH)])],
    ApiKey.END_TXN: [Case(3, lambda _u: {"transactional_id": X, **_TXN_HEAD, "committed": False},
                          lambda r: r["error_code"], [Check(T_TXN, WRITE, X, TXN_AUTH)])],
    ApiKey.WRITE_TXN_MARKERS: [Case(1, lambda _u: {"markers": [
        {"producer_id": 999_999, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
         "topics": [{"name": GONE, "partition_indexes": [0]}]}]},
        lambda r: r["markers"][0]["topics"][0]["partitions"][0]["error_code"],
        [Check(T_CLUSTER, CLUSTER_ACTION, "kafka-cluster", CLUSTER_AUTH)])],
    # the share coordinator's APIs (83-87): CLUSTER_ACTION, every partition refused (as KafkaApis)
    **{k: [Case(0, lambda _u, part=part: {"group_id": G, "topics": [
        {"topic_id": b"\x01" * 16, "partitions": [{"partition": 0, **part}]}]},
        lambda r: r["results"][0]["partitions"][0]["error_code"],
        [Check(T_CLUSTER, CLUSTER_ACTION, "kafka-cluster", CLUSTER_AUTH)])] for k, part in (
        (ApiKey.INITIALIZE_SHARE_GROUP_STATE, {"state_epoch": 0, "start_offset": 0}),
        (ApiKey.READ_SHARE_GROUP_STATE, {"leader_epoch": 0}),
        (ApiKey.WRITE_SHARE_GROUP_STATE, {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0,
                                          "state_batches": []}),
        (ApiKey.DELETE_SHARE_GROUP_STATE, {}),
        (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, {"leader_epoch": 0}))},
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: [Case(0, lambda _u: {"group_id": G, "topics": [
        {"topic_name": T, "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
        lambda r: r["error_code"] or r["responses"][0]["partitions"][0]["error_code"],
        [Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, READ, T, TOPIC_AUTH)])],
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: [Case(0, lambda _u: {"group_id": G, "topics": [{"topic_name": T}]},
        lambda r: r["error_code"] or r["responses"][0]["error_code"],
        [Check(T_GROUP, DELETE, G, GROUP_AUTH), Check(T_TOPIC, READ, T, TOPIC_AUTH)])],
    ApiKey.TXN_OFFSET_COMMIT: [Case(3, lambda _u: {
        "transactional_id": X, "group_id": G, **_TXN_HEAD,
        "topics": [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
        _first_partition("topics"),
        [Check(T_TXN, WRITE, X, TXN_AUTH), Check(T_GROUP, READ, G, GROUP_AUTH), Check(T_TOPIC, READ, T, TOPIC_AUTH)])],
    ApiKey.DESCRIBE_ACLS: [Case(3, lambda _u: {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}, lambda r: r["error_code"],
        [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.CREATE_ACLS: [Case(3, lambda u: {"creations": [acl(T_TOPIC, GONE, f"User:nobody-{u}", READ)]},
                              lambda r: r["results"][0]["error_code"],
                              [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.DELETE_ACLS: [Case(3, lambda _u: {"filters": [{
        "resource_type_filter": T_TOPIC, "resource_name_filter": GONE, "pattern_type_filter": 3,
        "principal_filter": "User:nobody-at-all", "host_filter": None, "operation": 1, "permission_type": 1}]},
        lambda r: r["filter_results"][0]["error_code"], [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.DESCRIBE_CONFIGS: [
        Case(4, lambda _u: {"resources": [{"resource_type": 2, "resource_name": T, "configuration_keys": None}]},
             lambda r: r["results"][0]["error_code"], [Check(T_TOPIC, DESCRIBE_CONFIGS, T, TOPIC_AUTH)], "topic"),
        Case(4, lambda _u: {"resources": [{**_BROKER, "configuration_keys": None}]},
             lambda r: r["results"][0]["error_code"],
             [Check(T_CLUSTER, DESCRIBE_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "broker"),
        Case(4, lambda _u: {"resources": [{**_BROKER_DEFAULT, "configuration_keys": None}]},
             lambda r: r["results"][0]["error_code"],
             [Check(T_CLUSTER, DESCRIBE_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "broker default"),
        Case(4, lambda _u: {"resources": [{**_BROKER_LOGGER, "configuration_keys": None}]},
             lambda r: r["results"][0]["error_code"],
             [Check(T_CLUSTER, DESCRIBE_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "broker logger"),
        Case(4, lambda _u: {"resources": [{**_GROUP_RES, "configuration_keys": None}]},
             lambda r: r["results"][0]["error_code"],
             [Check(T_GROUP, DESCRIBE_CONFIGS, _GROUP_RES["resource_name"], GROUP_AUTH)], "group"),
    ],
    ApiKey.LIST_CONFIG_RESOURCES: [Case(1, lambda _u: {"resource_types": []}, lambda r: r["error_code"],
                                        [Check(T_CLUSTER, DESCRIBE_CONFIGS, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.ALTER_CONFIGS: [
        Case(2, lambda _u: {"resources": [{"resource_type": 2, "resource_name": T, "configs": [
            {"name": "retention.ms", "value": "86400000"}]}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"], [Check(T_TOPIC, ALTER_CONFIGS, T, TOPIC_AUTH)], "topic"),
        Case(2, lambda _u: {"resources": [{**_BROKER, "configs": []}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_CLUSTER, ALTER_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "broker"),
        Case(2, lambda _u: {"resources": [{**_BROKER, "configs": [{"name": "log.cleaner.threads", "value": "2"}]}],
                            "validate_only": True},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_CLUSTER, ALTER_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "dynamic broker config"),
    ],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [
        Case(1, lambda _u: {"resources": [{"resource_type": 2, "resource_name": T, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"], [Check(T_TOPIC, ALTER_CONFIGS, T, TOPIC_AUTH)], "topic"),
        Case(1, lambda _u: {"resources": [{**_BROKER, "configs": []}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_CLUSTER, ALTER_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "broker"),
        Case(1, lambda _u: {"resources": [{**_BROKER_DEFAULT, "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "86400000"}]}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_CLUSTER, ALTER_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "dynamic broker default"),
        Case(1, lambda _u: {"resources": [{**_BROKER_LOGGER, "configs": [
            {"name": "kafka.server", "config_operation": 0, "value": "INFO"}]}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_CLUSTER, ALTER_CONFIGS, "kafka-cluster", CLUSTER_AUTH)], "broker logger"),
        Case(1, lambda _u: {"resources": [{**_GROUP_RES, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}], "validate_only": True},
             lambda r: r["responses"][0]["error_code"],
             [Check(T_GROUP, ALTER_CONFIGS, _GROUP_RES["resource_name"], GROUP_AUTH)], "group"),
    ],
    ApiKey.ALTER_REPLICA_LOG_DIRS: [Case(2, lambda _u: {"dirs": [{"path": "/nowhere", "topics": [
        {"name": GONE, "partitions": [0]}]}]}, _first_partition("results"),
        [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.DESCRIBE_LOG_DIRS: [Case(5, lambda _u: {"topics": None}, lambda r: r["error_code"],
                                    [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.CREATE_PARTITIONS: [Case(3, lambda _u: {"topics": [{"name": GONE, "count": 2, "assignments": None}],
                                                   "timeout_ms": 10000, "validate_only": True},
                                    lambda r: r["results"][0]["error_code"],
                                    [Check(T_TOPIC, ALTER, GONE, TOPIC_AUTH)])],
    ApiKey.DELETE_GROUPS: [Case(2, lambda _u: {"groups_names": ["authz-no-group"]},
                                lambda r: r["results"][0]["error_code"],
                                [Check(T_GROUP, DELETE, "authz-no-group", GROUP_AUTH)])],
    ApiKey.OFFSET_DELETE: [Case(0, lambda _u: {"group_id": G, "topics": [
        {"name": GONE, "partitions": [{"partition_index": 0}]}]}, _top_or_partition,
        [Check(T_GROUP, DELETE, G, GROUP_AUTH), Check(T_TOPIC, READ, GONE, TOPIC_AUTH)])],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [Case(1, lambda _u: {"components": [], "strict": False},
                                         lambda r: r["error_code"],
                                         [Check(T_CLUSTER, DESCRIBE_CONFIGS, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.ALTER_CLIENT_QUOTAS: [Case(1, lambda _u: {"entries": [{
        "entity": [{"entity_type": "user", "entity_name": "nobody"}],
        "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]}], "validate_only": True},
        lambda r: r["entries"][0]["error_code"], [Check(T_CLUSTER, ALTER_CONFIGS, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [Case(0, lambda _u: {"users": None}, lambda r: r["error_code"],
                                                  [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [Case(0, lambda _u: {"deletions": [{"name": "nobody", "mechanism": 1}],
                                                              "upsertions": []},
                                               lambda r: r["results"][0]["error_code"],
                                               [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.DESCRIBE_PRODUCERS: [Case(0, lambda _u: {"topics": [{"name": T, "partition_indexes": [0]}]},
                                     _first_partition("topics"), [Check(T_TOPIC, READ, T, TOPIC_AUTH)])],
    ApiKey.DESCRIBE_TRANSACTIONS: [Case(0, lambda _u: {"transactional_ids": [X]},
                                        lambda r: r["transaction_states"][0]["error_code"],
                                        [Check(T_TXN, DESCRIBE, X, TXN_AUTH)])],
    ApiKey.LIST_TRANSACTIONS: [Case(1, lambda _u: {}, _txn_listed, [Check(T_TXN, DESCRIBE, X, TXN_AUTH)])],
    # cluster/handlers.py in ZooKeeper mode (test_cluster_apis_are_authorized_as_kafka), and
    # handlers/replication_admin.py on one node
    ApiKey.OFFSET_FOR_LEADER_EPOCH: [
        Case(4, lambda _u: {"replica_id": -1, "topics": [{"topic": T, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, _first_partition("topics"),
             [Check(T_TOPIC, DESCRIBE, T, TOPIC_AUTH)]),
        Case(4, lambda _u: {"replica_id": 2, "topics": [{"topic": T, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, _first_partition("topics"),
             [Check(T_CLUSTER, CLUSTER_ACTION, "kafka-cluster", TOPIC_AUTH)], "follower"),
    ],
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: [Case(0, lambda _u: {"timeout_ms": 10000, "topics": [
        {"name": GONE, "partitions": [{"partition_index": 0, "replicas": None}]}]}, lambda r: r["error_code"],
        [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.LIST_PARTITION_REASSIGNMENTS: [Case(0, lambda _u: {"timeout_ms": 10000, "topics": None},
                                               lambda r: r["error_code"],
                                               [Check(T_CLUSTER, DESCRIBE, "kafka-cluster", CLUSTER_AUTH)])],
    ApiKey.ELECT_LEADERS: [Case(2, lambda _u: {"election_type": 0, "timeout_ms": 10000, "topic_partitions": [
        {"topic": GONE, "partitions": [0]}]}, lambda r: r["error_code"],
        [Check(T_CLUSTER, ALTER, "kafka-cluster", CLUSTER_AUTH)])],
}
ZK_ONLY = {int(k) for k in CLUSTER_HANDLERS}


def _principal(key: int, case: int, step: int) -> str:
    return f"api{key}-c{case}-s{step}"


def table_principals() -> list[str]:
    """For every case of every API, one principal per prefix of its checks: ``s0`` has none of them, ``s<n>`` the
    first n (the last one all, so it must get through)."""
    return [_principal(k, i, n) for k, cases in KAFKA_AUTHZ.items() if not isinstance(cases, str)
            for i, c in enumerate(cases) for n in range(len(c.checks) + 1)]


def _decoys(check: Check, user: str) -> list[dict]:
    """Every other operation of the check's resource that does not imply it: given to every principal of the
    case, so a handler checking a neighbouring operation (DESCRIBE for ALTER, READ for DESCRIBE_CONFIGS...)
    would let the ``s0`` principal through."""
    ops = set(SUPPORTED[check.rtype]) - IMPLIES.get(check.op, {check.op})
    return [acl(check.rtype, check.resource(user), f"User:{user}", op) for op in sorted(ops)]


def table_acls(keys: set[int] | None = None) -> list[dict]:
    out: list[dict] = []
    for k, cases in KAFKA_AUTHZ.items():
        if isinstance(cases, str) or (keys is not None and int(k) not in keys):
            continue
        for i, c in enumerate(cases):
            for n in range(len(c.checks) + 1):
                user = _principal(k, i, n)
                for check in c.checks:  # no decoy may imply another check of the case on the same resource
                    out += [d for d in _decoys(check, user)
                            if not any(g.rtype == d["resource_type"] and g.resource(user) == d["resource_name"]
                                       and d["operation"] in IMPLIES.get(g.op, {g.op}) for g in c.checks)]
                out += [acl(g.rtype, g.resource(user), f"User:{user}", g.op) for g in c.checks[:n]]
    return out


def as_user(b: Any, user: str, api_key: int, version: int, body: dict) -> dict:
    password = USERS.get(user, PASSWORD)
    peer = Peer("127.0.0.1", b.sasl_port, "authz-test",
                ClientSecurity("client", "SASL_PLAINTEXT", None, "PLAIN", user, password))

    async def run() -> dict:
        try:
            return await peer.request(api_key, version, body, 20)
        finally:
            peer.close()

    return asyncio.run(run())


def setup_table_resources(b: Any, keys: set[int] | None = None) -> None:
    """As the super user: the topic T (and, for every API, a record in it, the group G with a committed offset,
    the transactional id X with a producer id), and the table's ACLs."""
    r = call(b, "admin", 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1}
                                            for n in (T, DEL)], "timeout_ms": 10000})
    assert [t["error_code"] for t in r["topics"]] in ([0, 0], [36, 36]), r
    TOPIC_IDS.update((t["name"], t["topic_id"]) for t in r["topics"] if t["error_code"] == 0)
    if keys is None:
        _records_group_and_txn(b)
    creations = table_acls(keys)
    for i in range(0, len(creations), 200):
        r = call(b, "admin", 30, 3, {"creations": creations[i:i + 200]})
        assert all(x["error_code"] == 0 for x in r["results"]), [x for x in r["results"] if x["error_code"]]


def _records_group_and_txn(b: Any) -> None:
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": T, "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]}
    assert call(b, "admin", 0, 9, body)["responses"][0]["partition_responses"][0]["error_code"] == 0
    r = call(b, "admin", 8, 8, {"group_id": G, "generation_id_or_member_epoch": -1, "member_id": "",
                                "topics": [{"name": T, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    assert r["topics"][0]["partitions"][0]["error_code"] == 0, r
    r = call(b, "admin", 22, 4, {"transactional_id": X, "transaction_timeout_ms": 60000, "producer_id": -1,
                                 "producer_epoch": -1})
    assert r["error_code"] == 0, r


def _advertised(b: Any) -> set[int]:
    r = call(b, "admin", 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    return {k["api_key"] for k in r["api_keys"]}


def run_table(b: Any, keys: set[int]) -> list[str]:
    """Every case of every API in ``keys``: each principal's answer; the list of what differs from Kafka."""
    wrong: list[str] = []
    for k in sorted(keys):
        cases = KAFKA_AUTHZ[k]
        if isinstance(cases, str):
            continue
        for i, c in enumerate(cases):
            for n in range(len(c.checks) + 1):
                user = _principal(k, i, n)
                got = c.code(as_user(b, user, k, c.version, c.body(user)))
                label = f"{ApiKey(k).name}{' (' + c.what + ')' if c.what else ''} with {n}/{len(c.checks)} ACLs"
                if n < len(c.checks):
                    want = c.checks[n]
                    if got != want.denied:
                        wrong.append(f"{label}: got {got}, Kafka answers {want.denied} without op {want.op} "
                                     f"on resource type {want.rtype} {want.resource(user)!r}")
                elif got in AUTH_CODES:
                    wrong.append(f"{label}: refused with {got} although every ACL Kafka asks for is there")
    return wrong


def test_every_api_is_authorized_as_kafka(jbod_acl_broker: Any) -> None:
    """Generated from the API list: every API key the broker advertises (and every one tidelog serves in any
    mode) has its entry in KAFKA_AUTHZ; every authorized one is refused with Kafka's code at each missing check,
    in Kafka's order, and answered once the principal has exactly Kafka's ACLs."""
    b = jbod_acl_broker
    advertised = _advertised(b)
    served = {int(k) for k in {**SUPPORTED_VERSIONS, **GROUP_API_VERSIONS}} | ZK_ONLY
    missing = sorted(ApiKey(k).name for k in advertised | served if k not in KAFKA_AUTHZ)
    assert not missing, f"APIs without Kafka's authorization in KAFKA_AUTHZ: {missing}"
    assert ZK_ONLY.issubset(advertised)  # served on one node too (issue 27), and in ZooKeeper mode below
    # the unauthorized APIs answer a principal without any ACL
    assert call(b, "bob", 18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0
    assert call(b, "bob", 60, 1, {"endpoint_type": 1})["error_code"] == 0
    assert call(b, "bob", 71, 0, {"client_instance_id": uuid.UUID(int=0)})["error_code"] == 0
    wrong = run_table(b, advertised)
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def zk_authz_brokers(broker_factory: Any) -> Iterator[tuple[Any, list[Any]]]:
    from zkpair import zk_broker_pair

    jaas = plain_jaas({**USERS, **{u: PASSWORD for u in table_principals()}})
    yield from zk_broker_pair(broker_factory, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",  # the inter-broker PLAINTEXT listener
    }, "tidelog-authz-zk-", ready=lambda b: setattr(b, "sasl_port", sasl_port(b)))


def test_cluster_apis_are_authorized_as_kafka(zk_authz_brokers: tuple[Any, list[Any]]) -> None:
    """The APIs only ZooKeeper mode serves (OffsetForLeaderEpoch, Alter/ListPartitionReassignments,
    ElectLeaders), from the same table, against a broker of a two-broker cluster."""
    _zk, (b, _other) = zk_authz_brokers
    assert ZK_ONLY.issubset(_advertised(b))
    setup_table_resources(b, ZK_ONLY)
    wrong = run_table(b, ZK_ONLY)
    assert not wrong, "\n".join(wrong)
