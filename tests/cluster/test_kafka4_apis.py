"""Issue 27 items 3-4 on a 3-broker ZooKeeper cluster: DescribeTopicPartitions shows every replica and the leader,
Fetch v16 sent to a follower names the leader and its endpoint (KIP-951), UpdateFeatures refuses a level the
brokers do not run and stores nothing."""

from __future__ import annotations

from typing import Any

import pytest
from support import create_topic, request

pytestmark = pytest.mark.integration

FETCH, DTP, UPDATE_FEATURES, API_VERSIONS = 1, 75, 57, 18
NOT_LEADER, INVALID_UPDATE_VERSION = 6, 95


def test_describe_topic_partitions_and_leader_hints(cluster: Any) -> None:
    topic = "k4-apis"
    create_topic(cluster.bootstrap, topic, partitions=3, rf=3)
    some = next(iter(cluster.brokers.values()))
    pages, cursor, parts = 0, None, []
    while True:
        r = request(some, DTP, 0, {"topics": [{"name": topic}], "response_partition_limit": 2, "cursor": cursor})
        pages += 1
        parts += r["topics"][0]["partitions"]
        cursor = r["next_cursor"]
        if cursor is None:
            break
    assert pages == 2 and [p["partition_index"] for p in parts] == [0, 1, 2]
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] and p["leader_id"] in (1, 2, 3) for p in parts)
    tid = r["topics"][0]["topic_id"]
    leader, epoch = parts[0]["leader_id"], parts[0]["leader_epoch"]
    follower_id = next(i for i in cluster.brokers if i != leader)
    follower = cluster.brokers[follower_id]
    r = request(follower, FETCH, 16, {
        "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic_id": tid, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                      "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    part = r["responses"][0]["partitions"][0]
    assert part["error_code"] == NOT_LEADER
    assert part["current_leader"] == {"leader_id": leader, "leader_epoch": epoch}
    assert [(n["node_id"], n["port"]) for n in r["node_endpoints"]] == [(leader, cluster.brokers[leader].port)]


def test_update_features_on_a_cluster(cluster: Any) -> None:
    b = next(iter(cluster.brokers.values()))
    r = request(b, UPDATE_FEATURES, 1, {"feature_updates": [
        {"feature": "transaction.version", "max_version_level": 3, "upgrade_type": 1}], "validate_only": False})
    assert r["error_code"] == INVALID_UPDATE_VERSION  # supported 0-2 (D0063)
    ok = request(b, UPDATE_FEATURES, 1, {"feature_updates": [
        {"feature": "metadata.version", "max_version_level": 29, "upgrade_type": 1}], "validate_only": False})
    assert ok["error_code"] == 0
    for other in cluster.brokers.values():  # every broker answers the same table
        av = request(other, API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"})
        assert {f["name"]: f["max_version_level"] for f in av["finalized_features"]}["metadata.version"] == 29
