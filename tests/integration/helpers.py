"""Shared helpers for the codec / durability / bad-input / fuzz integration suites.

Everything talks to a real ``tidelog serve`` (the ``broker`` / ``broker_factory`` fixtures of conftest.py) over
127.0.0.1: a raw-socket client built on ``tidelog.protocol.codec``, thin confluent-kafka produce/consume
wrappers, and readers of the broker's data dir through ``tidelog.records`` (what is really on disk).
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tidelog.cluster.peer import Peer
from tidelog.errors import ErrorCode
from tidelog.protocol.framing import ClientConnection
from tidelog.records import Record, decode_batches

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 2, 3, 18, 19, 22

# Kafka error codes used by these suites
NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
CORRUPT_MESSAGE = ErrorCode.CORRUPT_MESSAGE
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
MESSAGE_TOO_LARGE = ErrorCode.MESSAGE_TOO_LARGE
INVALID_TOPIC_EXCEPTION = ErrorCode.INVALID_TOPIC_EXCEPTION
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
UNSUPPORTED_FOR_MESSAGE_FORMAT = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
INVALID_RECORD = ErrorCode.INVALID_RECORD


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something true (returned) or ``timeout`` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)  # polling interval of a bounded wait


def metric_value(broker: Any, metric: str) -> float:
    """The sum of a metric's samples on the broker's ``/metrics`` page."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(metric + " "))


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------------------------ raw client


class RawClient:
    """A blocking socket speaking Kafka frames: requests encoded by ``tidelog.protocol.codec``, framing and
    correlation ids by ``tidelog.protocol.framing.ClientConnection`` (``send``/``recv_frame`` for raw frames)."""

    def __init__(self, port: int, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.conn = ClientConnection(client_id)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _receive(self) -> None:
        """Read at most the bytes the frame being received still needs (never into the next response)."""
        n = self.conn.missing
        chunk = self.sock.recv(n)
        if not chunk:
            raise ConnectionError(f"closed with {self.conn.frames.buffered} bytes of a frame received")
        self.conn.feed(chunk)

    def recv_frame(self) -> bytes:
        """The next response payload, whatever request it answers."""
        while (frame := self.conn.frames.next_frame()) is None:
            self._receive()
        return bytes(frame)

    def send_request(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        """Send one request without waiting for its response (read it with :meth:`response`)."""
        _, data = self.conn.send(api_key, version, body)
        self.send(data)

    def response(self) -> dict[str, Any]:
        """The decoded response to the oldest request in flight (a correlation id out of step raises)."""
        while (response := self.conn.next_response()) is None:
            self._receive()
        return response.body

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its decoded response."""
        self.send_request(api_key, version, body)
        return self.response()

    def assert_closed_within(self, seconds: float = 1.0) -> float:
        """The server closes the connection (EOF or reset, no response bytes) within ``seconds``; returns the
        time it took."""
        t0 = time.monotonic()
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        except TimeoutError:
            raise AssertionError(f"connection still open after {seconds}s") from None
        assert data == b"", f"expected the server to close, got {len(data)} bytes: {data[:64]!r}"
        return time.monotonic() - t0


def api_versions_ok(port: int, version: int = 3) -> bool:
    with RawClient(port, timeout=5) as c:
        return c.request(API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"}
                         if version >= 3 else {})["error_code"] == NONE


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 5000) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def produce_raw(client: RawClient, topic: str, partition: int, records: bytes, *, acks: int = -1,
                version: int = 9) -> dict[str, Any]:
    """Produce ``records`` (batch bytes) and return the partition response."""
    resp = client.request(PRODUCE, version, produce_body(topic, partition, records, acks))
    return resp["responses"][0]["partition_responses"][0]


def list_offset_raw(client: RawClient, topic: str, partition: int, timestamp: int, version: int = 7) -> dict:
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                       "timestamp": timestamp}]}]}
    return client.request(LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]


def log_end_offset(port: int, topic: str, partition: int = 0) -> int:
    with RawClient(port) as c:
        p = list_offset_raw(c, topic, partition, -1)
        assert p["error_code"] == NONE, p
        return p["offset"]


def create_topic_raw(client: RawClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     version: int = 5) -> dict:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": False}
    return client.request(CREATE_TOPICS, version, body)["topics"][0]


def fetch_raw(client: RawClient, topic: str, partition: int, offset: int, version: int = 11,
              max_bytes: int = 1 << 20) -> dict:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    return client.request(FETCH, version, body)["responses"][0]["partitions"][0]


# ------------------------------------------------------------------------------------------- confluent-kafka


def confluent_produce(bootstrap: str, topic: str, messages: Iterable[dict[str, Any]], *, timeout: float = 30.0,
                      **conf: Any) -> list[Any]:
    """Produce dicts (value, key, headers, timestamp, partition) and return the delivered messages in
    delivery order; fails on any delivery error."""
    delivered: list[Any] = []
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        (errors if err else delivered).append(err or msg)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for m in messages:
        p.produce(topic, on_delivery=cb, **{"partition": 0, **m})
    assert p.flush(timeout) == 0, "messages still in flight"
    assert errors == [], errors
    return delivered


def confluent_consume(bootstrap: str, topic: str, n: int, *, partition: int = 0, offset: int = OFFSET_BEGINNING,
                      timeout: float = 20.0, **conf: Any) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, **conf})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append(m)
        return out
    finally:
        c.close()


def consume_all(bootstrap: str, topic: str, *, partition: int = 0, timeout: float = 20.0) -> list[Any]:
    """Every message from the beginning up to the current end offset (read first)."""
    end = log_end_offset(int(bootstrap.rsplit(":", 1)[1]), topic, partition)
    msgs = confluent_consume(bootstrap, topic, end, partition=partition, timeout=timeout) if end else []
    assert len(msgs) == end, f"read {len(msgs)} of {end} messages"
    return msgs


# --------------------------------------------------------------------------------------------------- on disk


def partition_dir(data_dir: Path, topic: str, partition: int = 0) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def segment_logs(data_dir: Path, topic: str, partition: int = 0) -> list[Path]:
    return sorted(partition_dir(data_dir, topic, partition).glob("*.log"))


def records_on_disk(data_dir: Path, topic: str, partition: int = 0) -> list[tuple[Any, Record]]:
    """(batch header, record) for every record of every ``.log`` segment, decoded and CRC-checked by
    ``tidelog.records.decode_batches``; asserts the segments are whole batches back to back."""
    out: list[tuple[Any, Record]] = []
    for path in segment_logs(data_dir, topic, partition):
        data = path.read_bytes()
        end = 0
        for pos, header, records in decode_batches(data):
            assert pos == end, f"{path.name}: gap or overlap at {pos}"
            end = pos + header.size
            out.extend((header, r) for r in records)
        assert end == len(data), f"{path.name}: {len(data) - end} trailing bytes that are not a whole batch"
    return out


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def read_to_end(bootstrap: str, topic: str, isolation: str = "read_committed", partitions: int | None = None,
                timeout: float = 60.0, **conf: Any) -> list[Any]:
    """Every record of ``topic`` up to the end of each partition (the LSO for read_committed), as confluent-kafka
    Messages in partition order; ``partitions`` (default: from Metadata) to read a topic whose metadata may lag."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True, **conf})
    try:
        parts = (list(range(partitions)) if partitions is not None
                 else list(c.list_topics(topic, timeout=30).topics[topic].partitions))
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Any] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, f"no end of {topic} after {timeout:.0f} s ({isolation}); at {eof}"
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                eof.add(msg.partition())
                continue
            out.append(msg)
        return out
    finally:
        c.close()


# ------------------------------------------------------------------------------------------------ racing requests


def racing_metadata(port: int, topic: str, clients: int, version: int = 9) -> list[dict[str, Any]]:
    """``clients`` connections, each connected first, then all sending a Metadata request that auto-creates
    ``topic`` at once; the topic entries of the answers."""
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}

    async def go() -> list[dict[str, Any]]:
        peers = [Peer("127.0.0.1", port, f"race-{i}") for i in range(clients)]
        try:
            for p in peers:  # connected (ApiVersions done) before any of them asks: the Metadata requests race
                await p.request(18, 3, {"client_software_name": "race", "client_software_version": "1"}, 15)
            answers = await asyncio.gather(*(p.request(3, version, body, 30) for p in peers))
        finally:
            for p in peers:
                p.close()
        return [a["topics"][0] for a in answers]

    return asyncio.run(go())


# ------------------------------------------------------------------------------------------------ groups


def consume_and_commit(bootstrap: str, group: str, topic: str, n: int, timeout: float = 60.0) -> list[bytes]:
    """Join ``group`` on ``topic`` (from the earliest offset when it has none committed), read ``n`` records,
    commit synchronously and leave; the values read, in order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    out: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(out) < n:
            assert time.monotonic() < deadline, f"{group}: read {len(out)} of {n} records of {topic}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return out


def committed_offsets(bootstrap: str, group: str, timeout: float = 30.0) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch of all partitions), as ``{(topic, partition): offset}``."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or [] if tp.offset >= 0}
