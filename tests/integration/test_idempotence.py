"""Idempotent producers against a real ``tidelog serve``: producer ids, duplicates, sequence gaps, restarts.

The raw-protocol tests build batches with ``tidelog.records.batch.build_batch`` and speak to the broker with
``tidelog.protocol.codec`` over a plain socket, so they control producer id, epoch and sequence exactly.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest

from tidelog.errors import ErrorCode
from tidelog.protocol import codec
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

PRODUCE, INIT_PRODUCER_ID, CREATE_TOPICS, LIST_OFFSETS = 0, 22, 19, 2


class RawClient:
    """One blocking connection speaking the Kafka protocol through tidelog's codec."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.cid = 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.cid += 1
        self.sock.sendall(codec.encode_request(api_key, version, self.cid, "raw-test", body))
        (size,) = struct.unpack(">i", self._recv(4))
        cid, resp = codec.decode_response(api_key, version, self._recv(size))
        assert cid == self.cid
        return resp

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    # -- helpers --

    def init_producer_id(self, version: int = 4, **kw: Any) -> dict[str, Any]:
        body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
        body.update(kw)
        return self.call(INIT_PRODUCER_ID, version, body)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        body = {
            "topics": [
                {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        }
        assert self.call(CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0

    def produce(self, topic: str, partition: int, batch: bytes, version: int = 9) -> dict[str, Any]:
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
        }
        resp = self.call(PRODUCE, version, body)
        return resp["responses"][0]["partition_responses"][0]

    def end_offset(self, topic: str, partition: int) -> int:
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
        }
        resp = self.call(LIST_OFFSETS, 5, body)
        part = resp["topics"][0]["partitions"][0]
        assert part["error_code"] == 0
        return int(part["offset"])


def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@pytest.fixture()
def raw(broker: Any) -> Any:
    c = RawClient(broker.bootstrap)
    yield c
    c.close()


def test_duplicate_batch_gets_original_offset_and_is_not_written_twice(raw: RawClient) -> None:
    raw.create_topic("idem-dup")
    r = raw.init_producer_id()
    assert r["error_code"] == 0
    pid, epoch = r["producer_id"], r["producer_epoch"]

    first = raw.produce("idem-dup", 0, _batch(pid, epoch, 0, [b"a", b"b", b"c"]))
    assert first["error_code"] == 0 and first["base_offset"] == 0
    second = raw.produce("idem-dup", 0, _batch(pid, epoch, 3, [b"d"]))
    assert second["error_code"] == 0 and second["base_offset"] == 3
    assert raw.end_offset("idem-dup", 0) == 4

    # the same first batch again (a retry after a lost response): acknowledged with its original offset
    dup = raw.produce("idem-dup", 0, _batch(pid, epoch, 0, [b"a", b"b", b"c"]))
    assert dup["error_code"] == 0 and dup["base_offset"] == 0
    dup2 = raw.produce("idem-dup", 0, _batch(pid, epoch, 3, [b"d"]))
    assert dup2["error_code"] == 0 and dup2["base_offset"] == 3
    assert raw.end_offset("idem-dup", 0) == 4  # nothing was appended

    # a gap in the sequence is refused and leaves nothing on disk
    gap = raw.produce("idem-dup", 0, _batch(pid, epoch, 10, [b"x"]))
    assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert raw.end_offset("idem-dup", 0) == 4
    # the next in-order batch still goes through
    nxt = raw.produce("idem-dup", 0, _batch(pid, epoch, 4, [b"e"]))
    assert nxt["error_code"] == 0 and nxt["base_offset"] == 4


def test_epoch_bump_fences_the_old_epoch(raw: RawClient) -> None:
    raw.create_topic("idem-bump")
    r = raw.init_producer_id()
    pid = r["producer_id"]
    assert raw.produce("idem-bump", 0, _batch(pid, 0, 0, [b"a"]))["error_code"] == 0
    bumped = raw.init_producer_id(producer_id=pid, producer_epoch=0)
    assert (bumped["producer_id"], bumped["producer_epoch"]) == (pid, 1)
    # the new epoch starts again at sequence 0
    assert raw.produce("idem-bump", 0, _batch(pid, 1, 0, [b"b"]))["error_code"] == 0
    # a zombie still on epoch 0 is fenced
    stale = raw.produce("idem-bump", 0, _batch(pid, 0, 1, [b"c"]))
    assert stale["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert raw.end_offset("idem-bump", 0) == 2


def test_transactional_init_is_served(raw: RawClient) -> None:
    r = raw.init_producer_id(transactional_id="txn-1")
    assert (r["error_code"], r["producer_epoch"]) == (0, 0) and r["producer_id"] >= 0


def test_producer_ids_unique_across_restart_and_kill(broker_factory: Any) -> None:
    b = broker_factory()
    seen: list[int] = []

    def take(n: int) -> None:
        c = RawClient(b.bootstrap)
        try:
            for _ in range(n):
                r = c.init_producer_id(version=1)
                assert r["error_code"] == 0 and r["producer_epoch"] == 0
                seen.append(r["producer_id"])
        finally:
            c.close()

    take(5)
    b.restart()  # clean stop
    take(5)
    b.kill()  # kill -9: nothing flushed at shutdown
    b.start()
    take(5)
    b.kill()
    b.start()
    take(1)
    assert len(seen) == len(set(seen)) == 16
    # ids only grow: a restart starts a new block after everything reserved before
    assert seen[5] > max(seen[:5]) and seen[10] > max(seen[:10]) and seen[15] > max(seen[:15])


def test_confluent_idempotent_producer_no_duplicates_in_order(broker: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "idem-confluent"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)

    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 50,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    n = 3000
    errors: list[Any] = []
    for i in range(n):
        key = f"k{i % 2}".encode()
        while True:
            try:
                p.produce(
                    topic,
                    key=key,
                    value=str(i).encode(),
                    partition=i % 2,
                    on_delivery=lambda e, m: e and errors.append(e),
                )
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    assert errors == []

    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "idem-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got: dict[int, list[int]] = {0: [], 1: []}
    while len(got[0]) + len(got[1]) < n:
        msg = c.poll(10)
        assert msg is not None, f"timed out after {sum(map(len, got.values()))} records"
        assert msg.error() is None, msg.error()
        got[msg.partition()].append(int(msg.value()))
        assert msg.offset() == len(got[msg.partition()]) - 1  # dense offsets, no gaps
    c.close()
    assert got[0] == list(range(0, n, 2))
    assert got[1] == list(range(1, n, 2))


def test_kafka_python_idempotent_producer(broker: Any) -> None:
    """kafka-python 3 is idempotent by default (InitProducerId up to v4)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    raw = RawClient(broker.bootstrap)
    try:
        raw.create_topic("idem-kp")
    finally:
        raw.close()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=5)
    futures = [p.send("idem-kp", str(i).encode(), partition=0) for i in range(300)]
    p.flush(30)
    offsets = [f.get(timeout=30).offset for f in futures]
    p.close()
    assert offsets == list(range(300))
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = TopicPartition("idem-kp", 0)
    c.assign([tp])
    c.seek(tp, 0)
    values = [int(m.value) for _, m in zip(range(300), c)]
    c.close()
    assert values == list(range(300))


def test_aiokafka_idempotent_producer(broker: Any) -> None:
    """aiokafka sends InitProducerId v0."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    raw = RawClient(broker.bootstrap)
    try:
        raw.create_topic("idem-aio")
    finally:
        raw.close()

    async def run() -> list[int]:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
        await p.start()
        try:
            metas = [await p.send_and_wait("idem-aio", str(i).encode(), partition=0) for i in range(50)]
        finally:
            await p.stop()
        return [m.offset for m in metas]

    assert asyncio.run(run()) == list(range(50))
