"""Core APIs (ApiVersions, Metadata, Produce, Fetch, ListOffsets) driven by real Kafka clients against a real
``tidelog serve``: confluent-kafka (librdkafka), kafka-python, aiokafka and kcat. No consumer groups here
(they come later): consumers use manual assignment."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from helpers import confluent_consume

pytestmark = pytest.mark.integration


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, values: list[bytes], *, partition: int = 0, **conf: Any) -> list[Any]:
    delivered: list[Any] = []
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        (errors if err else delivered).append(err or msg)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i, v in enumerate(values):
        p.produce(topic, v, key=f"k{i}".encode(), partition=partition, on_delivery=cb)
    assert p.flush(20) == 0
    assert errors == []
    return delivered


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_produce_consume(broker: Any, acks: str) -> None:
    topic = _topic(f"acks{acks}")
    values = [f"value-{i}".encode() * 10 for i in range(200)]
    delivered = _produce(broker.bootstrap, topic, values, acks=acks)
    if acks != "0":
        offsets = [m.offset() for m in delivered]
        assert offsets == list(range(200))
    msgs = confluent_consume(broker.bootstrap, topic, 200)
    assert [m.value() for m in msgs] == values
    assert [m.offset() for m in msgs] == list(range(200))
    assert msgs[0].key() == b"k0"


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_compressed_batches_round_trip(broker: Any, codec: str) -> None:
    topic = _topic(codec)
    values = [f"compressible {i} ".encode() * 20 for i in range(100)]
    _produce(broker.bootstrap, topic, values, **{"compression.type": codec})
    assert [m.value() for m in confluent_consume(broker.bootstrap, topic, 100)] == values


def test_idempotent_producer(broker: Any) -> None:
    topic = _topic("idem")
    values = [str(i).encode() for i in range(50)]
    delivered = _produce(broker.bootstrap, topic, values, **{"enable.idempotence": True, "acks": "all"})
    assert sorted(m.offset() for m in delivered) == list(range(50))
    assert [m.value() for m in confluent_consume(broker.bootstrap, topic, 50)] == values


def test_consume_from_the_middle_and_large_values(broker: Any) -> None:
    topic = _topic("large")
    values = [bytes([i]) * 300_000 for i in range(8)]  # batches bigger than some fetch limits
    _produce(broker.bootstrap, topic, values, **{"message.max.bytes": 1_000_000, "batch.size": 400_000})
    # limits below one batch: KIP-74 says the first batch is returned whole anyway
    msgs = confluent_consume(broker.bootstrap, topic, 5, offset=3, **{"fetch.max.bytes": 100_000,
                                                               "message.max.bytes": 100_000,
                                                               "max.partition.fetch.bytes": 100_000})
    assert [m.offset() for m in msgs] == [3, 4, 5, 6, 7]
    assert [m.value() for m in msgs] == values[3:]


def test_long_poll_wakes_on_produce(broker: Any) -> None:
    topic = _topic("longpoll")
    _produce(broker.bootstrap, topic, [b"first"])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(topic, 0, 1)])
        assert c.poll(0.5) is None  # caught up: the broker holds the fetch
        t0 = time.monotonic()
        _produce(broker.bootstrap, topic, [b"second"])
        m = None
        while m is None and time.monotonic() - t0 < 10:
            m = c.poll(0.1)
        assert m is not None and m.value() == b"second"
        assert time.monotonic() - t0 < 3.0  # woken by the append, not by the 5 s max wait
    finally:
        c.close()


def test_list_offsets_earliest_latest_and_by_timestamp(broker: Any) -> None:
    topic = _topic("offsets")
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(10):
        p.produce(topic, f"v{i}".encode(), partition=0, timestamp=base + i * 1000)
        p.flush(10)  # one batch per record, so each has its own timestamp range
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (lo, hi) == (0, 10)
        found = c.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=10)
        assert found[0].offset == 5
        found = c.offsets_for_times([TopicPartition(topic, 0, base)], timeout=10)
        assert found[0].offset == 0
        found = c.offsets_for_times([TopicPartition(topic, 0, base + 60_000)], timeout=10)
        assert found[0].offset == -1  # nothing at or after: Kafka answers -1 (librdkafka: OFFSET_END)
    finally:
        c.close()


def test_metadata_auto_create_and_invalid_names(broker: Any) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic("auto")
    _produce(broker.bootstrap, topic, [b"x"])  # producing to an unknown topic auto-creates it
    md = admin.list_topics(timeout=10)
    assert topic in md.topics
    t = md.topics[topic]
    assert t.error is None and list(t.partitions) == [0]
    assert t.partitions[0].leader == 0 and t.partitions[0].replicas == [0] and t.partitions[0].isrs == [0]
    assert md.cluster_id and md.controller_id == 0
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(0, "127.0.0.1", broker.port)]
    bad = admin.list_topics(topic="bad name!", timeout=10)
    assert bad.topics["bad name!"].error is not None
    assert bad.topics["bad name!"].error.code() == 17  # INVALID_TOPIC_EXCEPTION


def test_metadata_no_auto_create(broker_factory: Any) -> None:
    b = broker_factory({"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    md = admin.list_topics(topic="missing", timeout=10)
    assert md.topics["missing"].error.code() == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert admin.list_topics(timeout=10).topics == {}


def test_kafka_python_produce_consume(broker: Any) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = _topic("kpy")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic, key=b"k", value=f"kp-{i}".encode()) for i in range(100)]
    producer.flush(20)
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    assert offsets == list(range(100))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000, fetch_max_wait_ms=200)
    try:
        tp = KTP(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for m in consumer:
            got.append(m.value)
            if len(got) == 100:
                break
        assert got == [f"kp-{i}".encode() for i in range(100)]
        assert consumer.end_offsets([tp])[tp] == 100
        assert consumer.beginning_offsets([tp])[tp] == 0
    finally:
        consumer.close()


def test_aiokafka_produce_consume(broker: Any) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = _topic("aio")

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            metas = [await producer.send_and_wait(topic, f"aio-{i}".encode(), partition=0) for i in range(30)]
            assert [m.offset for m in metas] == list(range(30))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    fetch_max_wait_ms=200)
        await consumer.start()
        try:
            tp = ATP(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[bytes] = []
            while len(out) < 30:
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 20)
                for msgs in batch.values():
                    out.extend(m.value for m in msgs)
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [f"aio-{i}".encode() for i in range(30)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_round_trip(broker: Any) -> None:
    topic = _topic("kcat")
    lines = "\n".join(f"line {i}" for i in range(25)) + "\n"
    subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0"], input=lines, text=True,
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          "-q"], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout == lines
    md = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", topic], capture_output=True, text=True,
                        check=True, timeout=30)
    assert f'topic "{topic}" with 1 partitions' in md.stdout


def test_metrics_endpoint(broker: Any) -> None:
    import urllib.request

    topic = _topic("metrics")
    _produce(broker.bootstrap, topic, [b"m" * 100] * 10)
    confluent_consume(broker.bootstrap, topic, 10)
    assert broker.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    assert f'tidelog_topic_messages_in_total{{topic="{topic}"}} 10.0' in text
    assert f'tidelog_log_end_offset{{partition="0",topic="{topic}"}} 10.0' in text
    assert 'tidelog_requests_total{api="PRODUCE"}' in text
    assert "tidelog_request_latency_seconds_bucket" in text
    assert "tidelog_connections " in text


def _scrape(broker: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The broker's ``/metrics`` page parsed by prometheus_client's own parser: (sample name, labels) -> value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_created_samples(broker: Any) -> None:
    """The hot counters (exported at scrape time) carry ``<name>_created`` as prometheus_client's counters and
    histograms do: the time the series was created, its first update, unchanged by later updates and scrapes."""
    topic = _topic("created")
    before = time.time()
    _produce(broker.bootstrap, topic, [b"c" * 100] * 10)
    confluent_consume(broker.bootstrap, topic, 10)
    after = time.time()
    first = _scrape(broker)
    t = (("topic", topic),)
    for name in ("tidelog_topic_bytes_in", "tidelog_topic_messages_in", "tidelog_topic_bytes_out"):
        assert (name + "_total", t) in first, name
        assert before - 1 <= first[(name + "_created", t)] <= after + 1, name
    # every series of the hot families has its _created sample (requests, latency and errors per API included)
    for (name, labels), _ in first.items():
        for family in ("tidelog_requests", "tidelog_errors", "tidelog_topic_bytes_in", "tidelog_topic_bytes_out",
                       "tidelog_topic_messages_in"):
            if name == family + "_total":
                assert 0 < first[(family + "_created", labels)] <= after + 1, (name, labels)
        if name == "tidelog_request_latency_seconds_count":
            assert 0 < first[("tidelog_request_latency_seconds_created", labels)] <= after + 1, labels
    produce = (("api", "PRODUCE"),)
    assert first[("tidelog_requests_created", produce)] == first[("tidelog_request_latency_seconds_created", produce)]

    _produce(broker.bootstrap, topic, [b"c" * 100] * 5)
    second = _scrape(broker)
    assert second[("tidelog_topic_messages_in_total", t)] == 15
    for name in ("tidelog_topic_bytes_in_created", "tidelog_topic_messages_in_created", "tidelog_requests_created"):
        key = (name, produce if name == "tidelog_requests_created" else t)
        assert second[key] == first[key], name
