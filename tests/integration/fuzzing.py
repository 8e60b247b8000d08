"""Frame fuzzing shared by the fuzz tests (``tests/integration/test_fuzz.py``, and before/after SASL
authentication ``tests/broker/security/test_fuzz_auth.py``): a corpus of valid request frames, mutations of them, and a
reader of whatever the broker answers."""

from __future__ import annotations

import random
import select
import socket
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import helpers as h

from tidelog.protocol.codec import encode_request
from tidelog.records import build_batch


def corpus(topic: str) -> list[bytes]:
    """Valid request frames (with size prefix) of several APIs and versions."""
    batch = build_batch([(b"k", b"v" * 30, [("h", b"x")]), (None, b"second")], now_ms=1_700_000_000_000)
    zbatch = build_batch([(b"k", b"z" * 300)] * 3, compression=4, now_ms=1_700_000_000_000)
    out = []
    for v in (0, 1, 2, 3):
        out.append(encode_request(h.API_VERSIONS, v, 1, "fuzz", {"client_software_name": "fz",
                                                                "client_software_version": "1"} if v >= 3 else {}))
    for v in (1, 4, 9, 12):
        body: dict[str, Any] = {"topics": [{"name": topic}]}
        if v >= 4:
            body["allow_auto_topic_creation"] = False
        out.append(encode_request(h.METADATA, v, 2, "fuzz", body))
    for v in (3, 7, 9, 11):
        for records in (batch, zbatch):
            out.append(encode_request(h.PRODUCE, v, 3, "fuzz", h.produce_body(topic, 0, records, acks=1)))
    for v in (4, 7, 11, 12):
        out.append(encode_request(h.FETCH, v, 4, "fuzz", {
            "replica_id": -1, "max_wait_ms": 10, "min_bytes": 1, "max_bytes": 65536, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 65536}]}],
            "forgotten_topics_data": [], "rack_id": ""}))
    for v in (1, 4, 7, 8):
        out.append(encode_request(h.LIST_OFFSETS, v, 5, "fuzz", {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}))
    for v in (0, 4):
        out.append(encode_request(h.INIT_PRODUCER_ID, v, 6, "fuzz", {"transactional_id": None,
                                                                     "transaction_timeout_ms": 1000,
                                                                     "producer_id": -1, "producer_epoch": -1}))
    # KIP-714 client telemetry (issue 27)
    out.append(encode_request(71, 0, 7, "fuzz", {"client_instance_id": uuid.UUID(int=0)}))
    out.append(encode_request(72, 0, 8, "fuzz", {"client_instance_id": uuid.UUID(int=5), "subscription_id": 1,
                                                 "terminating": False, "compression_type": 0,
                                                 "metrics": b"m" * 64}))
    return out


BOUNDARY = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
            b"\x80\x00\x00\x00", b"\xff\xff", b"\x7f\xff"]


def mutate(rnd: random.Random, corpus: list[bytes]) -> bytes:
    frame = bytearray(rnd.choice(corpus))
    kind = rnd.randrange(9)
    payload = frame[4:]
    if kind == 0:  # flip bits
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(len(payload))
            payload[i] ^= 1 << rnd.randrange(8)
    elif kind == 1:  # overwrite with boundary values
        for _ in range(rnd.randint(1, 4)):
            b = rnd.choice(BOUNDARY)
            i = rnd.randrange(len(payload))
            payload[i:i + len(b)] = b
    elif kind == 2:  # truncate the payload (size prefix adjusted)
        payload = payload[: rnd.randrange(len(payload))]
    elif kind == 3:  # duplicate a slice
        i = rnd.randrange(len(payload))
        j = rnd.randrange(i, min(len(payload), i + 64) + 1)
        payload[i:i] = payload[i:j] * rnd.randint(1, 4)
    elif kind == 4:  # splice two requests
        other = rnd.choice(corpus)[4:]
        payload = payload[: rnd.randrange(len(payload))] + other[rnd.randrange(len(other)):]
    elif kind == 5:  # random bytes after a valid header
        payload = payload[:8] + bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(64)))
    elif kind == 6:  # pure noise
        payload = bytearray(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 200)))
    elif kind == 7:  # a valid payload with a lying size prefix
        lie = rnd.choice([len(payload) + rnd.randint(1, 100), max(len(payload) - rnd.randint(1, 8), 0),
                          rnd.randint(-(2**31), 2**31 - 1)])
        return struct.pack(">i", lie) + bytes(payload)
    else:  # unchanged: valid traffic mixed in
        return bytes(frame)
    return struct.pack(">i", len(payload)) + bytes(payload)


def drain(sock: socket.socket, until: float) -> tuple[bool, int]:
    """Read whatever comes back until the peer closes or ``until``: (peer closed, bytes received)."""
    got = 0
    for _ in range(1000):
        left = until - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([sock], [], [], left)
        if not r:
            break
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True, got
        if not data:
            return True, got
        got += len(data)
    return False, got


def run_fuzz(port: int, frames_corpus: list[bytes], rnd: random.Random, frames: int, budget: float,
             connect: Callable[[], socket.socket] | None = None,
             connections_at_once: int = 8) -> tuple[int, int, int]:
    """Send up to ``frames`` mutated frames within ``budget`` seconds over a few connections at once (each
    carrying 1-20 frames, some left open and come back to later); ``connect()`` opens each connection (default a
    plain TCP one; e.g. one already authenticated). Returns (frames sent, connections the broker closed, connections answered)."""
    sent = closed = answered = 0
    t0 = time.monotonic()
    deadline = t0 + budget
    open_socks: list[socket.socket] = []
    try:
        while sent < frames and time.monotonic() < deadline:
            while len(open_socks) < connections_at_once:
                open_socks.append(connect() if connect is not None
                                  else socket.create_connection(("127.0.0.1", port), timeout=5))
            s = open_socks.pop(rnd.randrange(len(open_socks)))
            batch = [mutate(rnd, frames_corpus) for _ in range(rnd.randint(1, 20))]
            sent += len(batch)
            try:
                s.sendall(b"".join(batch))
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
                s.close()
                continue
            if rnd.random() < 0.3:
                open_socks.append(s)  # keep it open and come back later with more
                continue
            peer_closed, got = drain(s, time.monotonic() + 0.05)
            closed += peer_closed
            answered += got > 0
            s.close()
    finally:
        for s in open_socks:
            s.close()
    print(f"fuzz: {sent} frames, {closed} connections closed by the broker, {answered} got responses, "
          f"{time.monotonic() - t0:.1f}s")
    return sent, closed, answered
