"""The wire layer of a real ``tidelog serve``: framing limits, malformed input, ordering, idle timeout.

Each bad connection must be closed without disturbing the others.
"""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from typing import Any

import pytest

from tidelog.protocol.codec import decode_response, encode_request

API_VERSIONS, METADATA = 18, 3


def _connect(broker: Any) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _read_response(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    return _recv_exact(s, size)


def _assert_closed(s: socket.socket) -> None:
    """The server closed the connection: EOF (or reset), not a timeout."""
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the server to close, got {len(data)} bytes"


def _api_versions(s: socket.socket, correlation_id: int = 1, version: int = 0) -> dict:
    s.sendall(encode_request(API_VERSIONS, version, correlation_id, "test", {}))
    cid, body = decode_response(API_VERSIONS, version, _read_response(s))
    assert cid == correlation_id
    return body


def _still_serving(broker: Any) -> None:
    with _connect(broker) as s:
        body = _api_versions(s, 99)
        assert body["error_code"] == 0


@pytest.fixture(scope="module")
def small_broker(broker_factory: Any) -> Any:
    return broker_factory({"socket.request.max.bytes": "4096"})


def test_api_versions_round_trip_every_version(broker: Any) -> None:
    with _connect(broker) as s:
        for v in range(0, 4):
            body = _api_versions(s, 10 + v, v)
            assert body["error_code"] == 0
            keys = {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}
            assert keys[0][0] == 0  # Produce advertised from 0 (KAFKA-18659)
            assert {0, 1, 2, 3, 18} <= set(keys)


def test_api_versions_unsupported_version_answered_in_v0(broker: Any) -> None:
    with _connect(broker) as s:
        # a future ApiVersions version: header v2 (flexible) - the broker answers in v0 with error 35
        frame = struct.pack(">hhih", API_VERSIONS, 99, 7, 4) + b"test" + b"\x00" + b"\x00\x00\x00"
        s.sendall(struct.pack(">i", len(frame)) + frame)
        cid, body = decode_response(API_VERSIONS, 0, _read_response(s))
        assert cid == 7
        assert body["error_code"] == 35
        assert any(e["api_key"] == 3 for e in body["api_keys"])
        # the connection stays usable: the client retries at a lower version
        assert _api_versions(s, 8, 3)["error_code"] == 0


def test_oversized_frame_closes_only_that_connection(small_broker: Any) -> None:
    with _connect(small_broker) as bad, _connect(small_broker) as good:
        assert _api_versions(good, 1)["error_code"] == 0
        bad.sendall(struct.pack(">i", 4097) + b"x" * 100)
        _assert_closed(bad)
        assert _api_versions(good, 2)["error_code"] == 0
    _still_serving(small_broker)


def test_frame_at_the_limit_is_read(small_broker: Any) -> None:
    # a 4096-byte ApiVersions v3 request (padded client software name) is within the limit
    with _connect(small_broker) as s:
        name = "n" * 4000
        frame = encode_request(API_VERSIONS, 3, 5, "c", {"client_software_name": name, "client_software_version": "1"})
        assert len(frame) - 4 <= 4096
        s.sendall(frame)
        cid, body = decode_response(API_VERSIONS, 3, _read_response(s))
        assert cid == 5 and body["error_code"] == 0


@pytest.mark.parametrize("size", [-1, -(2**31), 2**31 - 1])
def test_invalid_sizes_close(broker: Any, size: int) -> None:
    with _connect(broker) as s:
        s.sendall(struct.pack(">i", size))
        _assert_closed(s)
    _still_serving(broker)


def test_truncated_frame_then_disconnect(broker: Any) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x00")
    s.close()
    s2 = _connect(broker)
    s2.sendall(b"\x00\x00")  # not even a full size prefix
    s2.close()
    _still_serving(broker)


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff" * 3,  # shorter than a request header
        struct.pack(">hhi", METADATA, 1, 3) + b"\x7f\xff",  # client id length beyond the frame
        struct.pack(">hhih", METADATA, 4, 3, -1) + struct.pack(">i", 1_000_000),  # array count beyond the frame
        struct.pack(">hhih", 999, 0, 3, -1),  # unknown API key
        struct.pack(">hhih", METADATA, 99, 3, -1),  # unsupported Metadata version
        struct.pack(">hhih", 0, 1, 3, -1) + b"\x00" * 20,  # Produce v1: advertised range starts at 0, v0-2 refused
    ],
    ids=["short-header", "client-id-overflow", "array-overflow", "unknown-api", "unsupported-version", "produce-v1"],
)
def test_malformed_requests_close(broker: Any, payload: bytes) -> None:
    with _connect(broker) as bad, _connect(broker) as good:
        bad.sendall(struct.pack(">i", len(payload)) + payload)
        _assert_closed(bad)
        assert _api_versions(good, 3)["error_code"] == 0


def test_pipelined_requests_answered_in_order(broker: Any) -> None:
    with _connect(broker) as s:
        frames = []
        for cid in range(100, 120):
            if cid % 2:
                frames.append(encode_request(API_VERSIONS, 2, cid, "pipe", {}))
            else:
                frames.append(encode_request(METADATA, 9, cid, "pipe", {"topics": [], "allow_auto_topic_creation": False}))
        s.sendall(b"".join(frames))  # all at once, in one segment where possible
        for cid in range(100, 120):
            api, v = (API_VERSIONS, 2) if cid % 2 else (METADATA, 9)
            got, body = decode_response(api, v, _read_response(s))
            assert got == cid
            if api == METADATA:
                assert body["brokers"][0]["port"] == broker.port


def test_request_split_across_many_segments(broker: Any) -> None:
    with _connect(broker) as s:
        frame = encode_request(API_VERSIONS, 1, 77, "slow", {})
        for b in frame:
            s.sendall(bytes([b]))
        cid, body = decode_response(API_VERSIONS, 1, _read_response(s))
        assert cid == 77 and body["error_code"] == 0


def test_idle_connections_are_closed(broker_factory: Any) -> None:
    b = broker_factory({"connections.max.idle.ms": "300"})
    with _connect(b) as s:
        assert _api_versions(s, 1)["error_code"] == 0
        s.settimeout(10)
        _assert_closed(s)  # closed by the broker within ~300 ms + one reaper period
    _still_serving(b)


def _closed_by_reason(broker: Any) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tidelog_connections_closed_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.split()[-1])
    return out


def _wait_reasons(broker: Any, before: dict[str, float], want: dict[str, float]) -> None:
    deadline = time.monotonic() + 10
    while True:
        now = _closed_by_reason(broker)
        delta = {r: now.get(r, 0) - before.get(r, 0) for r in set(now) | set(want)}
        if all(delta.get(r, 0) == n for r, n in want.items()):
            return
        assert time.monotonic() < deadline, f"close reasons {delta}, expected {want}"
        time.sleep(0.05)


def test_close_reasons_of_bad_frames(small_broker: Any) -> None:
    """socket.request.max.bytes and truncation close with their own reasons; a close between frames is not one."""
    before = _closed_by_reason(small_broker)
    for data in (struct.pack(">i", 4097), struct.pack(">i", -1) + b"xx"):
        with _connect(small_broker) as s:
            s.sendall(data)
            _assert_closed(s)
    for data in (b"\x00\x00", struct.pack(">i", 100) + b"\x00\x12"):
        with _connect(small_broker) as s:
            s.sendall(data)
    with _connect(small_broker) as s:
        assert _api_versions(s, 1)["error_code"] == 0  # then a clean close between requests
    _wait_reasons(small_broker, before, {"invalid_size": 2, "truncated_frame": 2})
    _still_serving(small_broker)
