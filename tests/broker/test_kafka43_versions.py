"""Issue 27's last protocol versions (Kafka 4.1-4.3 maxima): DescribeLogDirs v5 (KIP-1066 IsCordoned),
OffsetCommit / OffsetFetch v10 and Produce v13 (topics by id, KIP-516 / KIP-848), Fetch v18 (the follower's
HighWatermark, KIP-1166). Each new version is driven raw next to an older one and must answer the same where the
meaning is the same; kafka-python infers a Kafka 4.3 broker from ApiVersions and still works end to end."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from helpers import RawClient, new_topic

from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
NONE = ErrorCode.NONE
GROUP = "kafka43-group"


def _versions(c: RawClient) -> dict[int, tuple[int, int]]:
    r = c.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}


def _create(c: RawClient, name: str, partitions: int = 1) -> uuid.UUID:
    r = c.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": partitions,
                                                        "replication_factor": 1, "assignments": [], "configs": []}],
                                            "timeout_ms": 10000, "validate_only": False})
    t = r["topics"][0]
    assert t["error_code"] == NONE, t
    return t["topic_id"]


def _produce(c: RawClient, version: int, topic: str | None, tid: uuid.UUID | None, value: bytes) -> dict:
    t: dict[str, Any] = {"partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}
    if version >= 13:
        t["topic_id"] = tid
    else:
        t["name"] = topic
    return c.request(ApiKey.PRODUCE, version, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                              "topic_data": [t]})


def _fetch(c: RawClient, version: int, topic: str, tid: uuid.UUID, hwm: int | None = None) -> dict:
    p: dict[str, Any] = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                         "current_leader_epoch": -1, "log_start_offset": -1}
    if hwm is not None:
        p["high_watermark"] = hwm
    t: dict[str, Any] = {"partitions": [p]}
    if version >= 13:
        t["topic_id"] = tid
    else:
        t["topic"] = topic
    r = c.request(ApiKey.FETCH, version, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                                          "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                          "session_epoch": -1, "topics": [t], "forgotten_topics_data": [],
                                          "rack_id": ""})
    part = r["responses"][0]["partitions"][0]
    return {"error_code": part["error_code"], "high_watermark": part["high_watermark"],
            "records": bytes(part["records"] or b"")}


def test_new_maxima_are_advertised(broker_factory: Any) -> None:
    b = broker_factory()
    with RawClient(b.port) as c:
        v = _versions(c)
    assert v[ApiKey.PRODUCE] == (0, 13) and v[ApiKey.FETCH] == (4, 18)
    assert v[ApiKey.OFFSET_COMMIT] == (2, 10) and v[ApiKey.OFFSET_FETCH] == (1, 10)
    assert v[ApiKey.DESCRIBE_LOG_DIRS] == (1, 5)


def test_describe_log_dirs_v5_equals_v4_and_nothing_is_cordoned(broker_factory: Any) -> None:
    b = broker_factory()
    with RawClient(b.port) as c:
        topic = new_topic("k43-dirs")
        _create(c, topic, 2)
        v4 = c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
        v5 = c.request(ApiKey.DESCRIBE_LOG_DIRS, 5, {"topics": None})
    assert v5["error_code"] == v4["error_code"] == NONE and v5["results"]
    assert all(r["is_cordoned"] is False for r in v5["results"])

    def shape(r: dict) -> list:  # sizes of the same logs at the two instants: only what must be equal
        return sorted((d["log_dir"], d["error_code"], sorted((t["name"], sorted(p["partition_index"]
                       for p in t["partitions"])) for t in d["topics"])) for d in r["results"])
    assert shape(v4) == shape(v5)
    assert any(t["name"] == topic for d in v5["results"] for t in d["topics"])


def test_produce_v13_by_id_equals_v12_by_name_and_fetch_v18(broker_factory: Any) -> None:
    b = broker_factory()
    with RawClient(b.port) as c:
        topic = new_topic("k43-produce")
        tid = _create(c, topic)
        r12 = _produce(c, 12, topic, None, b"by-name")
        r13 = _produce(c, 13, None, tid, b"by-id")
        t12, t13 = r12["responses"][0], r13["responses"][0]
        assert t12["name"] == topic
        assert t13["topic_id"] == tid  # v13 answers with the id
        p12, p13 = t12["partition_responses"][0], t13["partition_responses"][0]
        assert (p12["error_code"], p12["base_offset"]) == (NONE, 0)
        assert (p13["error_code"], p13["base_offset"]) == (NONE, 1)
        assert p12["log_start_offset"] == p13["log_start_offset"] == 0

        unknown = uuid.uuid4()
        bad = _produce(c, 13, None, unknown, b"x")["responses"][0]
        assert bad["topic_id"] == unknown
        assert bad["partition_responses"][0]["error_code"] == UNKNOWN_TOPIC_ID
        zero = _produce(c, 13, None, uuid.UUID(int=0), b"x")["responses"][0]
        assert zero["partition_responses"][0]["error_code"] == UNKNOWN_TOPIC_ID

        # Fetch v12 (names), v17 (ids) and v18 (ids + the follower's high watermark, accepted and ignored) agree
        f12 = _fetch(c, 12, topic, tid)
        f17 = _fetch(c, 17, topic, tid)
        f18 = _fetch(c, 18, topic, tid, hwm=0)
        f18_default = _fetch(c, 18, topic, tid)
        assert f12 == f17 == f18 == f18_default
        assert f18["error_code"] == NONE and f18["high_watermark"] == 2
        assert b"by-name" in f18["records"] and b"by-id" in f18["records"]
        assert _fetch(c, 18, topic, uuid.uuid4(), hwm=5)["error_code"] == UNKNOWN_TOPIC_ID
        assert c.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == NONE  # the connection keeps serving


def _commit(c: RawClient, version: int, group: str, topic: str, tid: uuid.UUID, offset: int) -> dict:
    t: dict[str, Any] = {"partitions": [{"partition_index": 0, "committed_offset": offset,
                                         "committed_leader_epoch": -1, "committed_metadata": "m"}]}
    if version >= 10:
        t["topic_id"] = tid
    else:
        t["name"] = topic
    return c.request(ApiKey.OFFSET_COMMIT, version, {"group_id": group, "generation_id_or_member_epoch": -1,
                                                     "member_id": "", "group_instance_id": None, "topics": [t]})


def _offsets(c: RawClient, version: int, group: str, topics: list[dict] | None) -> dict:
    r = c.request(ApiKey.OFFSET_FETCH, version, {"groups": [{"group_id": group, "member_id": None,
                                                             "member_epoch": -1, "topics": topics}],
                                                 "require_stable": False})
    return r["groups"][0]


def _rows(group: dict, key: str) -> list:
    return [(t[key], p["partition_index"], p["committed_offset"], p["metadata"], p["error_code"])
            for t in group["topics"] for p in t["partitions"]]


def test_offset_commit_and_fetch_v10_by_id_equal_v9_by_name(broker_factory: Any) -> None:
    b = broker_factory()
    with RawClient(b.port) as c:
        topic = new_topic("k43-offsets")
        tid = _create(c, topic)
        c9 = _commit(c, 9, GROUP, topic, tid, 5)
        assert c9["topics"] == [{"name": topic, "partitions": [{"partition_index": 0, "error_code": NONE}]}]
        c10 = _commit(c, 10, GROUP + "-id", topic, tid, 5)
        assert c10["topics"] == [{"topic_id": tid, "partitions": [{"partition_index": 0, "error_code": NONE}]}]

        # what v9 committed by name, v10 reads by id, and the other way round: the same rows
        for group in (GROUP, GROUP + "-id"):
            g9 = _offsets(c, 9, group, [{"name": topic, "partition_indexes": [0]}])
            g10 = _offsets(c, 10, group, [{"topic_id": tid, "partition_indexes": [0]}])
            assert g9["error_code"] == g10["error_code"] == NONE
            assert _rows(g9, "name") == [(topic, 0, 5, "m", NONE)]
            assert _rows(g10, "topic_id") == [(tid, 0, 5, "m", NONE)]
            all10 = _offsets(c, 10, group, None)  # "all topics": answered with ids
            assert _rows(all10, "topic_id") == [(tid, 0, 5, "m", NONE)]

        # an id no topic has: UNKNOWN_TOPIC_ID per partition, next to a known one in the same request
        unknown = uuid.uuid4()
        r = c.request(ApiKey.OFFSET_COMMIT, 10, {"group_id": GROUP, "generation_id_or_member_epoch": -1,
                                                 "member_id": "", "group_instance_id": None, "topics": [
            {"topic_id": unknown, "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                  "committed_leader_epoch": -1, "committed_metadata": None}]},
            {"topic_id": tid, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                              "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        assert [(t["topic_id"], t["partitions"][0]["error_code"]) for t in r["topics"]] == [
            (unknown, UNKNOWN_TOPIC_ID), (tid, NONE)]
        g = _offsets(c, 10, GROUP, [{"topic_id": unknown, "partition_indexes": [0, 1]},
                                    {"topic_id": tid, "partition_indexes": [0]}])
        assert g["error_code"] == NONE
        assert [(t["topic_id"], p["partition_index"], p["committed_offset"], p["error_code"])
                for t in g["topics"] for p in t["partitions"]] == [
            (unknown, 0, -1, UNKNOWN_TOPIC_ID), (unknown, 1, -1, UNKNOWN_TOPIC_ID), (tid, 0, 7, NONE)]
        assert _rows(_offsets(c, 9, GROUP, [{"name": topic, "partition_indexes": [0]}]), "name")[0][2] == 7


def test_kafka_python_infers_kafka_4_3_and_runs(broker_factory: Any) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

    b = broker_factory()
    topic = new_topic("k43-kp")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        assert admin._client.check_version()[:2] == (4, 3)  # kafka-python: 4.3 from DescribeLogDirs v5
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap)
    try:
        for i in range(5):
            producer.send(topic, f"v{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id="k43-kp-group",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        got = []
        for msg in consumer:
            got.append(msg.value)
            if len(got) == 5:
                break
        assert got == [f"v{i}".encode() for i in range(5)]
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == 5
    finally:
        consumer.close()
