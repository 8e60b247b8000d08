"""Which API versions real clients negotiate with tidelog's Kafka 4.2 ranges (issue 27 item 4), seen on the wire.

The broker advertises a recording proxy (``advertised.listeners``), so every connection of a client, bootstrap or
not, goes through it; the proxy reads each request's header (api key, version) and relays the bytes unchanged.
kafka-python 3 and confluent-kafka (librdkafka) then do ordinary work and the test checks both that the work
succeeded and that the new versions (ApiVersions 4, Metadata 13, ListOffsets 11, DescribeCluster 2,
DescribeTopicPartitions 0) were the ones used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from helpers import new_topic
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from recording_proxy import RecordingProxy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def proxied(broker_factory: Any) -> Iterator[tuple[Any, RecordingProxy]]:
    proxy = RecordingProxy()
    b = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.target = ("127.0.0.1", b.port)
    try:
        yield b, proxy
    finally:
        proxy.close()


def test_kafka_python_uses_the_kafka_4_versions(proxied: tuple[Any, RecordingProxy]) -> None:
    _b, proxy = proxied
    proxy.clear()
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = new_topic("nv-kp")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        from kafka.admin import NewTopic

        admin.create_topics([NewTopic(topic, 3, 1)])
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"] and [n["port"] for n in cluster["brokers"]] == [proxy.port]
        page = admin.describe_topic_partitions([topic])
        assert [p["partition_index"] for p in page["topics"][0]["partitions"]] == [0, 1, 2]
        assert admin.describe_topics([topic])[0]["error_code"] == 0
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        assert consumer.end_offsets(tps) == {tp: 0 for tp in tps}
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
    finally:
        consumer.close()
    assert proxy.versions(18) == {4}  # ApiVersions
    assert max(proxy.versions(3)) == 13  # Metadata
    assert max(proxy.versions(2)) == 11  # ListOffsets
    assert proxy.versions(60) == {2}  # DescribeCluster
    assert proxy.versions(75) == {0}  # DescribeTopicPartitions


def test_confluent_kafka_against_the_new_ranges(proxied: tuple[Any, RecordingProxy]) -> None:
    _b, proxy = proxied
    proxy.clear()
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = new_topic("nv-ck")
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(5):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(30) == 0
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    assert len(md.topics[topic].partitions) == 1 and md.topics[topic].error is None
    # librdkafka asks ApiVersions v3 (its maximum: features minus those with minimum 0), Metadata 13 (its
    # maximum, new here), Produce 10 (its maximum)
    assert proxy.versions(18) == {3} and proxy.versions(3) == {13} and proxy.versions(0) == {10}


def test_confluent_kafka_consumes_with_fetch_by_topic_id(proxied: tuple[Any, RecordingProxy]) -> None:
    from confluent_kafka import Consumer

    _b, proxy = proxied
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = new_topic("nv-fetch")
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        p.produce(topic, value=f"r{i}".encode(), partition=0)
    assert p.flush(30) == 0
    proxy.clear()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": new_topic("nv-g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = 60
        while len(got) < 20 and deadline > 0:
            msg = c.poll(0.5)
            deadline -= 1
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        c.close()
    assert got == [f"r{i}".encode() for i in range(20)]
    # librdkafka's maximum Fetch (16): topics addressed by id (v13+), KIP-951 leader hints (v16)
    assert proxy.versions(1) == {16}
