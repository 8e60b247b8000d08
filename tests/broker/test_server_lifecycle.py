"""Broker lifecycle with real processes: clean shutdown (marker, same data after restart), kill -9 and
restart (acked data present, offsets continue, nothing corrupt), shutdown during a long poll."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **conf: Any) -> list[int]:
    offsets: list[int] = []
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "1", **conf})
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=cb)
    assert p.flush(20) == 0
    assert errors == []
    return offsets


def _consume_all(bootstrap: str, topic: str, partition: int = 0, timeout: float = 20.0) -> list[Any]:
    """Everything from the beginning up to the high watermark seen at start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise KafkaException(m.error())
            out.append(m)
        raise AssertionError(f"no end of partition within {timeout}s ({len(out)} messages)")
    finally:
        c.close()


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_clean_shutdown_writes_marker_and_restart_serves_same_data(broker_factory: Any) -> None:
    b = broker_factory()
    topic = _topic("clean")
    values = [f"v{i}".encode() for i in range(500)]
    assert _produce(b.bootstrap, topic, values) == list(range(500))
    assert b.stop() == 0
    data = Path(b.data_dir)
    assert (data / ".kafka_cleanshutdown").exists()
    assert (data / "meta.properties").exists()
    registry = json.loads((data / "tidelog-topics.json").read_text())
    assert registry["topics"][topic]["partitions"] == 1
    topic_id = registry["topics"][topic]["topic_id"]
    assert (data / f"{topic}-0" / "00000000000000000000.log").exists()
    assert "broker stopped" in b.log_text()

    b.start()
    msgs = _consume_all(b.bootstrap, topic)
    assert [m.value() for m in msgs] == values
    assert [m.offset() for m in msgs] == list(range(500))
    assert json.loads((data / "tidelog-topics.json").read_text())["topics"][topic]["topic_id"] == topic_id
    # appends continue after the restored log end
    assert _produce(b.bootstrap, topic, [b"after"]) == [500]


def test_kill_9_then_restart_keeps_acked_data(broker_factory: Any) -> None:
    b = broker_factory()
    topic = _topic("crash")
    values = [f"crash-{i}".encode() * 5 for i in range(1000)]
    offsets = _produce(b.bootstrap, topic, values, **{"batch.num.messages": 50})
    assert offsets == list(range(1000))
    b.kill()
    assert not (Path(b.data_dir) / ".kafka_cleanshutdown").exists()
    b.start()
    msgs = _consume_all(b.bootstrap, topic)
    # a process crash keeps the page cache: every acked record is there, in order, uncorrupted
    assert [m.value() for m in msgs] == values
    assert [m.offset() for m in msgs] == list(range(1000))
    assert _produce(b.bootstrap, topic, [b"next"]) == [1000]


def test_kill_during_produce_then_restart_reads_clean_prefix(broker_factory: Any) -> None:
    b = broker_factory()
    topic = _topic("midflight")
    first = _produce(b.bootstrap, topic, [f"m{i}".encode() for i in range(3000)])
    acked: list[int] = list(first)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "1", "linger.ms": 1, "message.timeout.ms": 3000,
                  "retries": 0})

    def cb(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.offset())

    for i in range(3000, 40000):
        p.produce(topic, f"m{i}".encode(), partition=0, on_delivery=cb)
        if i % 1000 == 0:
            p.poll(0)
        if i == 20000:
            b.kill()  # while the producer has requests in flight
    p.flush(10)
    assert len(acked) >= 3000
    b.start()
    msgs = _consume_all(b.bootstrap, topic)
    offsets = [m.offset() for m in msgs]
    assert offsets == list(range(len(offsets)))  # a clean, gap-free prefix
    assert set(acked) <= set(offsets)  # every acked record survived
    for m in msgs:
        assert m.value() == f"m{m.offset()}".encode()


def test_sigterm_during_long_poll_is_prompt(broker_factory: Any) -> None:
    b = broker_factory()
    topic = _topic("poll")
    _produce(b.bootstrap, topic, [b"x"])
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "fetch.wait.max.ms": 30000})
    try:
        c.assign([TopicPartition(topic, 0, 1)])
        c.poll(0.5)  # a fetch is now parked in the purgatory for up to 30 s
        t0 = time.monotonic()
        assert b.stop() == 0
        assert time.monotonic() - t0 < 10
    finally:
        c.close()
    assert (Path(b.data_dir) / ".kafka_cleanshutdown").exists()


def test_topic_configs_survive_restart(broker_factory: Any) -> None:
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = _topic("cfg")
    futs = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                                         config={"retention.ms": "3600000", "cleanup.policy": "compact,delete"})])
    futs[topic].result(10)
    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics[topic].partitions) == 3
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].source == 5  # DEFAULT_CONFIG
    assert set(configs["cleanup.policy"].value.split(",")) == {"compact", "delete"}


