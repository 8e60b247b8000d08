"""Feature versioning, UpdateFeatures, DescribeTopicPartitions and the Kafka 4.2 API versions (issue 27 items 3-4),
against a real ``tidelog serve`` with raw requests, kafka-python 3's admin client and the CLI."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import RawClient, new_topic, produce_body
from kafka import KafkaAdminClient
from kafka.errors import InvalidUpdateVersionError

from tidelog.cli.main import cli
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

API_VERSIONS, METADATA, UPDATE_FEATURES, DTP, CREATE_TOPICS = 18, 3, 57, 75, 19
INVALID_REQUEST, UNKNOWN_TOPIC, INVALID_TOPIC, INVALID_UPDATE_VERSION = 42, 3, 17, 95
HELLO = {"client_software_name": "t", "client_software_version": "1"}


def _create(c: RawClient, *topics: tuple[str, int]) -> None:
    r = c.request(CREATE_TOPICS, 7, {"topics": [{"name": n, "num_partitions": p, "replication_factor": 1}
                                                for n, p in topics], "timeout_ms": 10000})
    assert [t["error_code"] for t in r["topics"]] == [0] * len(topics), r


def _levels(resp: dict) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    return ({f["name"]: (f["min_version"], f["max_version"]) for f in resp["supported_features"]},
            {f["name"]: f["max_version_level"] for f in resp["finalized_features"]})


def test_api_versions_features_v3_and_v4(broker: Any) -> None:
    with RawClient(broker.port) as c:
        v4 = c.request(API_VERSIONS, 4, HELLO)
        v3 = c.request(API_VERSIONS, 3, HELLO)
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in v4["api_keys"]}
    group = 1 if 68 in keys else 0  # group.version follows whether ConsumerGroupHeartbeat is served
    share = 1 if 76 in keys else 0  # share.version follows whether ShareGroupHeartbeat is served (KIP-932)
    supported, finalized = _levels(v4)
    assert supported == {"eligible.leader.replicas.version": (0, 0), "group.version": (group, group),
                         "metadata.version": (29, 29), "share.version": (share, share), "streams.version": (0, 0),
                         "transaction.version": (0, 2)}
    # level 0 is "not finalized": only the features above 0 are listed (transactions v2 is finalized, D0063)
    assert finalized == {"metadata.version": 29, "transaction.version": 2, **({"group.version": 1} if group else {}),
                         **({"share.version": 1} if share else {})}
    assert v4["finalized_features_epoch"] == 0
    # v3 leaves out the features whose minimum is 0 (KAFKA-17492)
    supported3, finalized3 = _levels(v3)
    assert supported3 == {k: r for k, r in supported.items() if r[0] > 0} and finalized3 == finalized
    # the Kafka 4.2 versions of these APIs
    assert keys[API_VERSIONS] == (0, 4) and keys[METADATA] == (0, 13) and keys[2] == (1, 11)
    assert keys[60] == (0, 2) and keys[DTP] == (0, 0) and keys[UPDATE_FEATURES] == (0, 2)


def test_kafka_python_sees_a_kafka_4_broker_and_its_features(broker: Any) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        assert admin._client.check_version() >= (4, 2)  # kafka-python: 4.2 from ListOffsets v11
        feats = admin.describe_features()
        assert feats["metadata.version"]["finalized"] == (29, 29)
        assert feats["transaction.version"]["supported"] == (0, 2) and feats["transaction.version"]["finalized"] == (2, 2)
        # the current level is the one valid update: accepted, nothing changes
        assert admin.update_features({"metadata.version": 29}) == {"metadata.version": "OK"}
        assert admin.update_features({"share.version": 1}, validate_only=True) == {"share.version": "OK"}
        assert admin.update_features({"transaction.version": 2}) == {"transaction.version": "OK"}
        with pytest.raises(InvalidUpdateVersionError, match="only supports versions 0-2"):
            admin.update_features({"transaction.version": 3})
        with pytest.raises(InvalidUpdateVersionError, match="does not support this feature"):
            admin.update_features({"eligible.leader.replicas.version": 1})
        with pytest.raises(InvalidUpdateVersionError, match="only supports versions 29"):
            admin.update_features({"metadata.version": ("SAFE_DOWNGRADE", 28)})
        assert admin.describe_features()["metadata.version"]["finalized"] == (29, 29)
    finally:
        admin.close()


def test_update_features_validation_and_versions(broker: Any) -> None:
    up = {"feature": "metadata.version", "max_version_level": 29, "upgrade_type": 1}
    with RawClient(broker.port) as c:
        r1 = c.request(UPDATE_FEATURES, 1, {"feature_updates": [up], "validate_only": False})
        assert r1["error_code"] == 0 and r1["results"] == [{"feature": "metadata.version", "error_code": 0,
                                                             "error_message": None}]
        r2 = c.request(UPDATE_FEATURES, 2, {"feature_updates": [up], "validate_only": False})
        assert r2["error_code"] == 0 and "results" not in r2
        # one bad update fails them all, with Kafka's messages
        bad = c.request(UPDATE_FEATURES, 1, {"feature_updates": [up, {**up, "feature": "no.such", "max_version_level": 1}]})
        assert bad["error_code"] == INVALID_UPDATE_VERSION and bad["results"] == []
        assert bad["error_message"] == ("The update failed for all features since the following feature had an "
                                        "error: Invalid update version 1 for feature no.such. Local controller 0 "
                                        "does not support this feature.")
        for upd, why in (({**up, "upgrade_type": 7}, "does not support the given upgrade type"),
                         ({**up, "max_version_level": -1}, "cannot be less than 0"),
                         ({**up, "upgrade_type": 2, "max_version_level": 29}, None)):
            r = c.request(UPDATE_FEATURES, 1, {"feature_updates": [upd]})
            assert (r["error_code"] == 0) if why is None else (why in r["error_message"]), r
        dup = c.request(UPDATE_FEATURES, 1, {"feature_updates": [up, up]})
        assert dup["error_code"] == INVALID_REQUEST
        # v0: AllowDowngrade instead of UpgradeType
        r0 = c.request(UPDATE_FEATURES, 0, {"feature_updates": [{"feature": "metadata.version",
                                                                 "max_version_level": 28, "allow_downgrade": True}]})
        assert r0["error_code"] == INVALID_UPDATE_VERSION and "only supports versions 29" in r0["error_message"]


def _page(c: RawClient, topics: list[str], limit: int, cursor: dict | None = None) -> dict:
    return c.request(DTP, 0, {"topics": [{"name": t} for t in topics], "response_partition_limit": limit,
                              "cursor": cursor})


def test_describe_topic_partitions_pages_with_a_cursor(broker: Any) -> None:
    a, b = sorted((new_topic("dtp-a"), new_topic("dtp-b")))
    with RawClient(broker.port) as c:
        _create(c, (a, 5), (b, 3))
        seen: list[tuple[str, int]] = []
        cursor, pages = None, 0
        while True:
            r = _page(c, [b, a], 3, cursor)
            pages += 1
            assert sum(len(t["partitions"]) for t in r["topics"]) <= 3
            seen += [(t["name"], p["partition_index"]) for t in r["topics"] for p in t["partitions"]]
            cursor = r["next_cursor"]
            if cursor is None:
                break
        assert seen == [(a, p) for p in range(5)] + [(b, p) for p in range(3)] and pages == 3
        part = r["topics"][-1]["partitions"][0]
        assert part["eligible_leader_replicas"] == [] and part["last_known_elr"] == [] and part["leader_id"] == 0
        # a page that ends exactly with a topic points at the next topic's partition 0
        r = _page(c, [a, b], 5)
        assert [t["name"] for t in r["topics"]] == [a] and r["next_cursor"] == {"topic_name": b, "partition_index": 0}
        # all topics (empty list) with a cursor: starts there
        r = _page(c, [], 2000, {"topic_name": b, "partition_index": 1})
        assert r["topics"][0]["name"] == b and [p["partition_index"] for p in r["topics"][0]["partitions"]] == [1, 2]
        assert all(t["name"] > b for t in r["topics"][1:])
        # named topics: unknown and invalid ones are answered
        r = _page(c, ["dtp-nope", "bad/name", a], 2000)
        assert {t["name"]: t["error_code"] for t in r["topics"]} == {"bad/name": INVALID_TOPIC,
                                                                     "dtp-nope": UNKNOWN_TOPIC, a: 0}
        # the cursor's topic must be named, its partition >= 0
        r = _page(c, [a], 10, {"topic_name": b, "partition_index": 0})
        assert [(t["name"], t["error_code"]) for t in r["topics"]] == [(a, INVALID_REQUEST)]
        r = _page(c, [a], 10, {"topic_name": a, "partition_index": -1})
        assert [(t["name"], t["error_code"]) for t in r["topics"]] == [(a, INVALID_REQUEST)]
        # Metadata v13: a top-level error code
        md = c.request(METADATA, 13, {"topics": [{"name": a}], "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        assert md["error_code"] == 0 and len(md["topics"][0]["partitions"]) == 5


def test_kafka_python_describe_topic_partitions(broker: Any) -> None:
    topic = new_topic("dtp-kp")
    with RawClient(broker.port) as c:
        _create(c, (topic, 4))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        first = admin.describe_topic_partitions([topic], response_partition_limit=3)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1, 2]
        rest = admin.describe_topic_partitions([topic], response_partition_limit=3, cursor=first["next_cursor"])
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [3] and rest["next_cursor"] is None
    finally:
        admin.close()


def test_partition_limit_config_caps_the_page(broker_factory: Any) -> None:
    b = broker_factory({"max.request.partition.size.limit": "2"})
    topic = new_topic("dtp-cap")
    with RawClient(b.port) as c:
        _create(c, (topic, 3))
        r = _page(c, [topic], 2000)
        assert len(r["topics"][0]["partitions"]) == 2 and r["next_cursor"] == {"topic_name": topic,
                                                                              "partition_index": 2}
        assert len(_page(c, [topic], 0)["topics"][0]["partitions"]) == 1  # at least one partition per page


def _requests(broker: Any, api: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("tidelog_requests_total{") and f'api="{api}"' in line)


def test_requests_of_the_new_apis_are_counted(broker: Any) -> None:
    before = _requests(broker, "DESCRIBE_TOPIC_PARTITIONS")
    with RawClient(broker.port) as c:
        _page(c, [], 10)
    assert _requests(broker, "DESCRIBE_TOPIC_PARTITIONS") == before + 1


def test_cli_features_describe(broker: Any) -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["features", "describe", "--bootstrap-server", broker.bootstrap], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert "Feature: metadata.version\tSupportedMinVersion: 4.2-IV1\tSupportedMaxVersion: 4.2-IV1\t" \
           "FinalizedVersionLevel: 4.2-IV1\tEpoch: 0" in lines
    assert "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t" \
           "FinalizedVersionLevel: 2\tEpoch: 0" in lines
    assert [line.split("\t")[0] for line in lines] == sorted(line.split("\t")[0] for line in lines)
    r = runner.invoke(cli, ["features", "describe", "--output", "json", "--bootstrap-server", broker.bootstrap],
                      catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert {"Feature": "share.version", "SupportedMinVersion": 1, "SupportedMaxVersion": 1,
            "FinalizedVersionLevel": 1, "Epoch": 0} in rows


def test_fetch_by_topic_id_and_leader_hints(broker: Any) -> None:
    topic = new_topic("fetch-id")
    with RawClient(broker.port) as c:
        _create(c, (topic, 1))
        md = c.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        tid = md["topics"][0]["topic_id"]
        r = c.request(0, 12, produce_body(topic, 0, build_batch([(None, b"a"), (None, b"b")])))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0

        def fetch(version: int, topic_id: Any, replica_id: int = -1) -> dict:
            who = ({"replica_state": {"replica_id": replica_id, "replica_epoch": -1}} if version >= 15
                   else {"replica_id": replica_id})
            return c.request(1, version, {**who,
                "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""})

        for v in (13, 16, 17):
            r = fetch(v, tid)
            (t,) = r["responses"]
            assert t["topic_id"] == tid and t["partitions"][0]["error_code"] == 0, (v, r)
            assert t["partitions"][0]["high_watermark"] == 2 and bytes(t["partitions"][0]["records"])
        r = fetch(13, uuid.uuid4())
        assert r["responses"][0]["partitions"][0]["error_code"] == 100  # UNKNOWN_TOPIC_ID
        # a follower's fetch on one node is NOT_LEADER_OR_FOLLOWER: v16 names the leader and its endpoint
        r = fetch(16, tid, replica_id=7)
        part = r["responses"][0]["partitions"][0]
        assert part["error_code"] == 6 and part["current_leader"] == {"leader_id": 0, "leader_epoch": 0}
        assert [(n["node_id"], n["port"]) for n in r["node_endpoints"]] == [(0, broker.port)]


def test_list_offsets_sentinels_by_version(broker: Any) -> None:
    topic = new_topic("lo-v11")
    with RawClient(broker.port) as c:
        _create(c, (topic, 1))
        r = c.request(0, 12, produce_body(topic, 0, build_batch([(None, b"a"), (None, b"b")])))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0

        def lo(version: int, timestamp: int) -> tuple[int, int]:
            body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 1000, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": timestamp}]}]}
            p = c.request(2, version, body)["topics"][0]["partitions"][0]
            return p["error_code"], p["offset"]

        assert lo(11, -1) == (0, 2) and lo(11, -2) == (0, 0) and lo(11, -4) == (0, 0)
        assert lo(11, -6) == (0, -1) and lo(11, -5) == (0, -1)  # nothing is tiered: no such offset
        # a sentinel older versions do not know, and an unknown one: UNSUPPORTED_VERSION (Kafka's ReplicaManager)
        assert lo(10, -6) == (35, -1) and lo(8, -5) == (35, -1) and lo(6, -3) == (35, -1) and lo(11, -7) == (35, -1)
        assert lo(9, -5) == (0, -1) and lo(7, -3)[0] == 0
