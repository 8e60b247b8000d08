"""DescribeLogDirs and DescribeProducers against a real ``tidelog serve``: kafka-python's
``describe_log_dirs`` and raw requests for the cases no Python client exposes (the Java client's calls are in
tests/java)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient, confluent_produce
from kafka import KafkaAdminClient

pytestmark = pytest.mark.integration

DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 35, 61
UNKNOWN_TOPIC_OR_PARTITION = 3


def _sizes(data_dir: Path, topic: str, partitions: int) -> dict[int, int]:
    return {p: sum(f.stat().st_size for f in (data_dir / f"{topic}-{p}").glob("*.log")) for p in range(partitions)}


def test_kafka_python_describe_log_dirs(broker: Any) -> None:
    topic = "ldirs"
    confluent_produce(broker.bootstrap, topic, [{"value": b"x" * 100, "partition": 0} for _ in range(30)])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        [every] = admin.describe_log_dirs()
        [asked] = admin.describe_log_dirs(topic_partitions={topic: [0], "no-such-topic": [0]})
    finally:
        admin.close()
    assert every["broker"] == 0
    [d] = every["log_dirs"]
    assert d["error_code"] == 0 and d["log_dir"] == str(Path(broker.data_dir).resolve())
    assert 0 < d["usable_bytes"] <= d["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in d["topics"] for p in t["partitions"]}
    for p, size in _sizes(Path(broker.data_dir), topic, 1).items():
        assert sizes[(topic, p)] == size > 0
    # named partitions only; one not hosted here is left out, as Kafka does
    [d2] = asked["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in d2["topics"]] == [(topic, [0])]


def test_describe_producers_raw(broker: Any) -> None:
    topic = "dprod"
    confluent_produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(12)],
                      **{"enable.idempotence": True})
    with RawClient(broker.port) as c:
        r = c.request(DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": topic, "partition_indexes": [0, 99]}, {"name": "no-such-topic", "partition_indexes": [0]}]})
    [t, missing] = r["topics"]
    p0, p99 = t["partitions"]
    assert p0["error_code"] == 0 and len(p0["active_producers"]) == 1
    prod = p0["active_producers"][0]
    assert prod["producer_id"] >= 0 and prod["last_sequence"] == 11 and prod["current_txn_start_offset"] == -1
    assert p99["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and p99["active_producers"] == []
    assert missing["partitions"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
