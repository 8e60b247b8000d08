"""Pipelined acks=all produce (``tidelog.produce.pipeline.max.requests``, broker/server.py): a connection's next
Produce is read and appended while earlier ones wait for their replicas; answers go out strictly in request order,
and no more than the configured number wait at once, however many requests a client sends without reading."""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from support import create_topic, log_bytes, until

from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey
from tidelog.records import build_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = 3
PRODUCE, METADATA = int(ApiKey.PRODUCE), int(ApiKey.METADATA)


@pytest.fixture(scope="module")
def pcluster(cluster_with: Any) -> Any:
    # a long replica.lag.time.max.ms: the followers stopped below stay in the ISR, so the produces only wait
    # connections.max.idle.ms: a connection whose pipelined answers are all written must count as idle again
    return cluster_with({"tidelog.produce.pipeline.max.requests": str(PIPELINE), "replica.lag.time.max.ms": "120000",
                         "connections.max.idle.ms": "4000"})


def _leader(c: Any, topic: str) -> int:
    return c.wait_for(f"a leader of {topic}", lambda md: (p := c.partition(md, topic)) is not None and p.leader > 0
                      and p.leader)


def _batches(data: bytes) -> list[int]:
    """Base offsets of the batches in a replica's log bytes."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append(base)
        pos += 12 + length
    return out


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def _read_response(s: socket.socket, version: int) -> tuple[int, dict]:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    return codec.decode_response(PRODUCE, version, _recv_exact(s, size))


def test_hostile_client_bounded_and_answered_in_order(pcluster: Any) -> None:
    """A client sends 12 acks=all produces without reading while both followers are stopped: the leader appends
    exactly PIPELINE of them (the rest stay in the socket), answers nothing; once the followers run again every
    request is answered, in request order, with its batches appended in request order."""
    c = pcluster
    topic = f"pipe-{uuid.uuid4().hex[:6]}"
    create_topic(c.bootstrap, topic)
    leader = _leader(c, topic)
    followers = [b for i, b in c.brokers.items() if i != leader]
    version = 9
    n = 12
    frames = b"".join(codec.encode_request(PRODUCE, version, cid, "hostile", {
        "transactional_id": None, "acks": -1, "timeout_ms": 120000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": build_batch([(None, f"v{cid}-{j}".encode()) for j in range(cid)])}]}]})
        for cid in range(1, n + 1))
    data_dir = c.brokers[leader].data_dir
    with socket.create_connection(("127.0.0.1", c.brokers[leader].port), timeout=60) as s:
        for b in followers:
            os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            s.sendall(frames)
            until(f"{PIPELINE} batches on the leader", lambda: len(_batches(log_bytes(data_dir, topic))) >= PIPELINE)
            # the absence of more appends can only be observed over a window: 1 s, while nothing is answered
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                assert len(_batches(log_bytes(data_dir, topic))) == PIPELINE
                readable, _, _ = select.select([s], [], [], 0.1)
                assert not readable, "a produce was answered before its batch was replicated"
        finally:
            for b in followers:
                os.kill(b.proc.pid, signal.SIGCONT)
        answers = [_read_response(s, version) for _ in range(n)]
    assert [cid for cid, _ in answers] == list(range(1, n + 1))
    expected_base = 0
    for cid, body in answers:
        (part,) = body["responses"][0]["partition_responses"]
        assert part["error_code"] == 0, (cid, part)
        assert part["base_offset"] == expected_base
        expected_base += cid
    assert _batches(log_bytes(data_dir, topic)) == [sum(range(1, k)) for k in range(1, n + 1)]


def test_other_requests_wait_for_pipelined_produces(pcluster: Any) -> None:
    """A Metadata request sent behind pipelined produces is answered after them (one at a time for every other
    API): the answers arrive in request order."""
    c = pcluster
    topic = f"pipe-md-{uuid.uuid4().hex[:6]}"
    create_topic(c.bootstrap, topic)
    leader = _leader(c, topic)
    followers = [b for i, b in c.brokers.items() if i != leader]
    frames = [codec.encode_request(PRODUCE, 9, cid, "mixed", {
        "transactional_id": None, "acks": -1, "timeout_ms": 120000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, b"x")])}]}]})
        for cid in (1, 2)]
    frames.append(codec.encode_request(METADATA, 9, 3, "mixed", {
        "topics": [{"name": topic}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}))
    with socket.create_connection(("127.0.0.1", c.brokers[leader].port), timeout=60) as s:
        for b in followers:
            os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            s.sendall(b"".join(frames))
            until("2 batches on the leader",
                  lambda: len(_batches(log_bytes(c.brokers[leader].data_dir, topic))) == 2)
            readable, _, _ = select.select([s], [], [], 0.5)
            assert not readable  # neither the produces nor the Metadata behind them answered yet
        finally:
            for b in followers:
                os.kill(b.proc.pid, signal.SIGCONT)
        got = []
        for api, version in ((PRODUCE, 9), (PRODUCE, 9), (METADATA, 9)):
            (size,) = struct.unpack(">i", _recv_exact(s, 4))
            cid, body = codec.decode_response(api, version, _recv_exact(s, size))
            got.append(cid)
            if api == PRODUCE:
                assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert got == [1, 2, 3]


def test_idempotent_client_pipelined_in_order(pcluster: Any) -> None:
    """librdkafka, idempotent, acks=all, 5 requests in flight, small batches (many requests): every record is
    acknowledged at the offset of its place in the produce order, and the log reads back the same."""
    c = pcluster
    topic = f"pipe-idem-{uuid.uuid4().hex[:6]}"
    create_topic(c.bootstrap, topic)
    n = 4000
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "max.in.flight.requests.per.connection": 5, "linger.ms": 1, "batch.size": 2000,
                  "message.timeout.ms": 120000})
    offsets: dict[int, int] = {}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets[int(msg.value())] = msg.offset()

    for i in range(n):
        while True:
            try:
                p.produce(topic, value=str(i).encode(), on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0
    assert errors == []
    assert [offsets[i] for i in range(n)] == list(range(n))
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    got: list[int] = []
    try:
        cons.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                got.append(int(m.value()))
    finally:
        cons.close()
    assert got == list(range(n))


def test_connection_idle_after_pipelined_answers(pcluster: Any) -> None:
    """Once its pipelined answers are written a connection is idle: connections.max.idle.ms closes it (it stays
    open while an answer is pending, see the tests above, which hold connections longer than that)."""
    c = pcluster
    topic = f"pipe-idle-{uuid.uuid4().hex[:6]}"
    create_topic(c.bootstrap, topic)
    leader = _leader(c, topic)
    frames = b"".join(codec.encode_request(PRODUCE, 9, cid, "idle", {
        "transactional_id": None, "acks": -1, "timeout_ms": 60000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, b"x")])}]}]})
        for cid in (1,))  # one: the request loop is back waiting for the next request while it is pending
    with socket.create_connection(("127.0.0.1", c.brokers[leader].port), timeout=60) as s:
        s.sendall(frames)
        assert _read_response(s, 9)[0] == 1
        s.settimeout(60)
        try:
            rest = s.recv(1)
        except ConnectionResetError:
            rest = b""
        assert rest == b""  # closed by the broker's idle reaper, not answered
