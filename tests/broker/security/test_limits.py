"""Issue 16, the parts that need no authorizer, against a real ``tidelog serve``:

* internal topics: DeleteTopics and DeleteRecords of ``__consumer_offsets`` / ``__transaction_state`` are refused
  (INVALID_TOPIC_EXCEPTION) and change nothing;
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: connections beyond the limit are closed
  at accept;
* ``connections.max.idle.ms`` also closes a connection whose responses are never read;
* ``queued.max.request.bytes``: many large partial frames do not grow the broker's memory without bound, and a
  small client is still served.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

import pytest
from helpers import RawClient, produce_raw, wait_for

from tidelog.errors import ErrorCode
from tidelog.records.batch import build_batch

METADATA, DELETE_TOPICS, DELETE_RECORDS, FIND_COORDINATOR, FETCH, API_VERSIONS = 3, 20, 21, 10, 1, 18
INVALID_TOPIC_EXCEPTION = ErrorCode.INVALID_TOPIC_EXCEPTION


def _api_versions(c: RawClient) -> int:
    return c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"]


def _served(port: int, source: str = "127.0.0.1") -> bool:
    """A new connection from ``source`` gets an ApiVersions answer (False: the broker closed it)."""
    s = socket.socket()
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    c = RawClient.__new__(RawClient)
    c.sock, c.client_id = s, "limits"
    from tidelog.protocol.framing import ClientConnection

    c.conn = ClientConnection("limits")
    try:
        return _api_versions(c) == 0
    except (ConnectionError, OSError):
        return False
    finally:
        s.close()


def _open(port: int, source: str) -> RawClient:
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    c = RawClient.__new__(RawClient)
    from tidelog.protocol.framing import ClientConnection

    c.sock, c.client_id, c.conn = s, "limits", ClientConnection("limits")
    assert _api_versions(c) == 0
    return c


def _topics(port: int) -> dict[str, Any]:
    with RawClient(port) as c:
        md = c.request(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
    return {t["name"]: t for t in md["topics"]}


# ---------------------------------------------------------------------------------------------- internal topics


def test_internal_topics_cannot_be_deleted_nor_their_records(broker_factory: Any) -> None:
    b = broker_factory({"offsets.topic.num.partitions": 2, "offsets.topic.replication.factor": 1})
    with RawClient(b.port) as c:
        # FindCoordinator creates __consumer_offsets
        wait_for(lambda: c.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})["error_code"] == 0,
                 timeout=30, what="the group coordinator")
        assert "__consumer_offsets" in _topics(b.port)
        before = {(p["partition_index"]): p for p in _topics(b.port)["__consumer_offsets"]["partitions"]}
        for name in ("__consumer_offsets", "__transaction_state"):
            resp = c.request(DELETE_TOPICS, 5, {"topic_names": [name], "timeout_ms": 5000})
            r = resp["responses"][0]
            assert (r["name"], r["error_code"]) == (name, INVALID_TOPIC_EXCEPTION), r
            assert "internal topic" in r["error_message"]
        resp = c.request(DELETE_RECORDS, 1, {"topics": [{"name": "__consumer_offsets", "partitions": [
            {"partition_index": 0, "offset": -1}, {"partition_index": 1, "offset": 0}]}], "timeout_ms": 5000})
        assert [(p["partition_index"], p["error_code"]) for p in resp["topics"][0]["partitions"]] == [
            (0, INVALID_TOPIC_EXCEPTION), (1, INVALID_TOPIC_EXCEPTION)]
    # nothing changed: the topic and its partitions are still there, the log start offsets too
    after = _topics(b.port)["__consumer_offsets"]
    assert after["error_code"] == 0 and after["is_internal"]
    assert {p["partition_index"] for p in after["partitions"]} == set(before)
    with RawClient(b.port) as c:
        lo = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "__consumer_offsets",
              "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
        assert lo["topics"][0]["partitions"][0]["offset"] == 0


# ---------------------------------------------------------------------------------------------- per-ip limits


def test_connections_beyond_the_per_ip_limit_are_closed_and_overrides_apply(broker_factory: Any) -> None:
    b = broker_factory({"max.connections.per.ip": 2, "max.connections.per.ip.overrides": "127.0.0.2:4"})
    held = [_open(b.port, "127.0.0.1") for _ in range(2)]
    assert not _served(b.port, "127.0.0.1")  # the third from 127.0.0.1 is closed at accept
    others = [_open(b.port, "127.0.0.2") for _ in range(4)]  # the override allows 4 from 127.0.0.2
    assert not _served(b.port, "127.0.0.2")
    # the held connections still work
    assert all(_api_versions(c) == 0 for c in held + others)
    # a slot frees when one closes (the broker notices the close: poll)
    held.pop().close()
    wait_for(lambda: _served(b.port, "127.0.0.1"), timeout=10, what="a freed per-ip slot")
    assert "address already has the configured maximum of 2 connections" in b.log_text()
    for c in held + others:
        c.close()


def _connect_answers(port: int, timeout: float) -> bool:
    """A new connection is answered within ``timeout`` seconds (False: not accepted/answered in that time)."""
    try:
        with RawClient(port, timeout=timeout) as c:
            return _api_versions(c) == 0
    except (OSError, ConnectionError):
        return False


def test_max_connections_blocks_accepting_except_on_the_inter_broker_listener(broker_factory: Any) -> None:
    from secsupport import listener_ports

    b = broker_factory({"listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
                        "inter.broker.listener.name": "PLAINTEXT", "max.connections": 2})
    ports = listener_ports(b)
    held = [RawClient(ports["EXTERNAL"]) for _ in range(2)]
    assert all(_api_versions(c) == 0 for c in held)
    # the limit is reached: the external listener does not accept (the client waits in the backlog) ...
    waiting = RawClient(ports["EXTERNAL"], timeout=1)
    waiting.send_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    with pytest.raises(TimeoutError):
        waiting.response()
    # ... while the inter-broker listener is exempt
    assert _connect_answers(ports["PLAINTEXT"], 10)
    # a slot frees: the waiting connection is accepted and answered
    held.pop().close()
    waiting.sock.settimeout(10)
    assert waiting.response()["error_code"] == 0
    for c in held + [waiting]:
        c.close()


def test_max_connections_applies_to_a_single_listener(broker_factory: Any) -> None:
    b = broker_factory({"max.connections": 1})
    first = RawClient(b.port)
    assert _api_versions(first) == 0
    waiting = RawClient(b.port, timeout=1)
    waiting.send_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    with pytest.raises(TimeoutError):
        waiting.response()
    first.close()
    waiting.sock.settimeout(10)
    assert waiting.response()["error_code"] == 0
    waiting.close()


# ---------------------------------------------------------------------------------------------- idle with unsent


def _fetch_body(topic: str) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 64 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                 "partition_max_bytes": 64 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}


def test_a_client_that_never_reads_its_fetch_answers_is_closed_when_idle(broker_factory: Any) -> None:
    b = broker_factory({"connections.max.idle.ms": 2000, "socket.send.buffer.bytes": 8192,
                        "message.max.bytes": 2 << 20})
    topic = "unread"
    with RawClient(b.port) as c:
        c.request(19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
        for i in range(8):  # ~8 MB: far more than the socket buffers hold
            assert produce_raw(c, topic, 0, build_batch([(None, os.urandom(1 << 20))]))["error_code"] == 0, i
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", b.port))
    from tidelog.protocol import codec

    for cid in range(3):
        s.sendall(codec.encode_request(FETCH, 11, cid, "never-reads", _fetch_body(topic)))
    # while that connection is stuck, another client is served
    with RawClient(b.port) as other:
        assert _api_versions(other) == 0
    wait_for(lambda: "closing idle connection with an unsent response" in b.log_text(), timeout=15,
             what="the stuck connection to be closed")
    # it really is closed: draining it ends (EOF or reset) well before 3 full responses (~24 MB) arrive
    s.settimeout(10)
    got = 0
    try:
        while data := s.recv(1 << 20):
            got += len(data)
    except ConnectionResetError:
        pass
    s.close()
    assert got < 8 << 20
    with RawClient(b.port) as other:
        assert _api_versions(other) == 0


# ---------------------------------------------------------------------------------------------- frame memory


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_partial_large_frames_are_bounded_by_queued_max_request_bytes(broker_factory: Any) -> None:
    frame = 8 << 20
    b = broker_factory({"queued.max.request.bytes": 2 << 20, "socket.request.max.bytes": frame})
    assert b.proc is not None
    pid = b.proc.pid
    with RawClient(b.port) as small:
        assert _api_versions(small) == 0
        base = _rss(pid)
        socks = []
        chunk = b"x" * (256 << 10)
        pushed = 0
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", b.port))
            s.setblocking(False)
            s.send(struct.pack(">i", frame - 1))  # announces a frame it never finishes
            socks.append(s)
        # push up to 6 MB into each, as much as the broker (and the kernel buffers) take
        deadline = time.monotonic() + 20
        sent = [0] * len(socks)
        progress = True
        while progress and time.monotonic() < deadline:
            progress = False
            for i, s in enumerate(socks):
                if sent[i] >= 6 << 20:
                    continue
                try:
                    n = s.send(chunk)
                except BlockingIOError:
                    continue
                sent[i] += n
                pushed += n
                progress = True
        # unbounded, the broker would now hold ~48 MB of partial frames; sample its RSS while it serves
        peak = 0
        for _ in range(10):
            assert _api_versions(small) == 0  # a small client keeps being served
            peak = max(peak, _rss(pid) - base)
        assert pushed > 24 << 20, pushed  # the test pushed enough to matter
        assert peak < 16 << 20, (peak, pushed)
        for s in socks:
            s.close()
        assert _api_versions(small) == 0


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
