"""Malformed frames: only the protocol's declared exceptions escape, quickly, without big allocations."""

from __future__ import annotations

import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.protocol.codec import ACCEPTED_VERSIONS as ACCEPTED
from tidelog.protocol.codec import (
    GROUP_API_VERSIONS,
    InvalidRequestError,
    ProtocolError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tidelog.protocol.samples import all_api_versions, message_body

ALL = {**ACCEPTED, **GROUP_API_VERSIONS}
CASES = all_api_versions()
VALID_REQUESTS = [encode_request(k, v, 1, "c", message_body(k, v, "request", 3))[4:] for k, v in CASES]
VALID_RESPONSES = [
    (k, v, b"".join(encode_response(k, v, 1, message_body(k, v, "response", 3)))[4:]) for k, v in CASES
]


def _decode_req(frame: bytes) -> None:
    try:
        decode_request(frame, ALL)
    except ProtocolError:
        pass


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _decode_req(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(CASES),
    st.binary(max_size=200),
)
def test_valid_header_random_body(case: tuple[int, int], body: bytes) -> None:
    k, v = case
    _decode_req(struct.pack(">hhih", k, v, 5, 1) + b"c" + body)


@st.composite
def mutated(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    frame = bytearray(draw(st.sampled_from(frames)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not frame:
            break
        i = draw(st.integers(0, len(frame) - 1))
        if op == "flip":
            frame[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            frame[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x01]))
        elif op == "truncate":
            del frame[i:]
        elif op == "insert":
            frame[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del frame[i : i + draw(st.integers(1, 8))]
    return bytes(frame)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(VALID_REQUESTS))
def test_mutated_valid_requests(frame: bytes) -> None:
    _decode_req(frame)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(VALID_RESPONSES))), st.data())
def test_mutated_valid_responses(idx: int, data: st.DataObject) -> None:
    k, v, frame = VALID_RESPONSES[idx]
    bad = data.draw(mutated([frame]))
    try:
        decode_response(k, v, bad)
    except InvalidRequestError:
        pass


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{k}v{v}" for k, v in CASES])
def test_every_truncation_is_invalid_request(api_key: int, version: int) -> None:
    frame = encode_request(api_key, version, 1, "c", message_body(api_key, version, "request", 4))[4:]
    for cut in range(len(frame)):
        try:
            decode_request(frame[:cut], {api_key: (version, version)})
        except InvalidRequestError:
            continue
        # a prefix may still parse when the tail is only trailing defaults, never silently otherwise
        raise AssertionError(f"truncation at {cut}/{len(frame)} decoded without error")


def _lying_frames() -> list[tuple[str, bytes]]:
    hdr = struct.pack(">hhih", 3, 4, 1, 1) + b"c"  # Metadata v4, header v1
    fhdr = struct.pack(">hhih", 3, 9, 1, 1) + b"c" + b"\x00"  # Metadata v9, header v2
    phdr = struct.pack(">hhih", 0, 9, 1, 1) + b"c" + b"\x00"  # Produce v9
    return [
        ("array count 2^31-1", hdr + struct.pack(">i", 2**31 - 1) + b"\x00" * 10),
        ("compact array count 2^32", fhdr + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10),
        ("string length 32767", hdr + struct.pack(">i", 1) + struct.pack(">h", 32767) + b"ab"),
        ("compact string 2^31", fhdr + b"\x02" + b"\x00" * 16 + b"\x80\x80\x80\x80\x08" + b"ab"),
        ("records length 2^31-1", phdr + b"\x00" + b"\xff\xff" + b"\x00\x00\x00\x10" + b"\x02\x02t\x02" + b"\x00" * 4 + b"\xfe\xff\xff\xff\x07" + b"x"),
        ("varint too long", fhdr + b"\xff\xff\xff\xff\xff\xff\xff\x01"),
        ("tag count huge", struct.pack(">hhih", 18, 3, 1, 1) + b"c" + b"\xff\xff\xff\xff\x0f"),
        ("tag size huge", struct.pack(">hhih", 18, 3, 1, 1) + b"c" + b"\x01\x00\xff\xff\xff\xff\x0f"),
        ("client id longer than frame", struct.pack(">hhih", 3, 4, 1, 30000) + b"abc"),
        ("negative client id length", struct.pack(">hhih", 3, 4, 1, -5) + struct.pack(">i", 0) + b"\x01"),
    ]


@pytest.mark.parametrize(("name", "frame"), _lying_frames(), ids=[n for n, _ in _lying_frames()])
def test_lying_lengths_do_not_allocate(name: str, frame: bytes) -> None:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        decode_request(frame)
    except ProtocolError:
        pass
    else:
        # a negative client id length reads as a null client id: the rest then decodes or fails
        assert name == "negative client id length"
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 0.05
    assert peak < 64 * 1024, f"{name}: peak {peak} bytes for a {len(frame)}-byte frame"


def test_all_malformed_exceptions_are_declared() -> None:
    assert issubclass(InvalidRequestError, ProtocolError)
    with pytest.raises(InvalidRequestError):
        decode_request(b"\x00\x03")
    with pytest.raises(InvalidRequestError):
        decode_request(b"")
