"""The sans-io framing (``tidelog.protocol.framing``): frame splitting and the client's correlation matcher."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.exceptions import CorrelationIdMismatchError, FrameTooLargeError, InvalidRequestError
from tidelog.protocol.framing import MAX_REQUEST_SIZE, ClientConnection, FrameDecoder, frame


def _prefix(size: int) -> bytes:
    return struct.pack(">i", size)


# ------------------------------------------------------------------------------------------- FrameDecoder


def test_default_limit_is_kafkas_socket_request_max_bytes() -> None:
    assert MAX_REQUEST_SIZE == 104857600
    assert FrameDecoder().max_size == MAX_REQUEST_SIZE


def test_one_frame_per_feed_is_a_view_of_the_fed_bytes() -> None:
    d = FrameDecoder()
    data = frame(b"hello")
    d.feed(data)
    f = d.next_frame()
    assert isinstance(f, memoryview) and f == b"hello"
    assert f.obj is data  # zero copy: the payload is a slice of what was received
    assert d.next_frame() is None
    assert d.buffered == 0 and not d.in_frame and d.missing == 4


def test_several_frames_in_one_read() -> None:
    d = FrameDecoder()
    data = frame(b"one") + frame(b"") + frame(b"three") + frame(b"fo")[:5]
    d.feed(data)
    got = list(d)
    assert [bytes(f) for f in got] == [b"one", b"", b"three"]
    assert all(f.obj is data for f in got)  # none of them copied
    assert d.in_frame and d.frame_size == 2 and d.missing == 1
    d.feed(b"o")
    assert d.next_frame() == b"fo"
    assert [bytes(f) for f in got] == [b"one", b"", b"three"]  # earlier views unchanged


def test_partial_prefix_and_payload() -> None:
    d = FrameDecoder()
    data = frame(b"abcdef")
    d.feed(data[:2])
    assert d.next_frame() is None
    assert d.missing == 2 and d.frame_size is None and d.in_frame
    d.feed(data[2:4])
    assert d.missing == 0  # prefix complete, not parsed yet
    assert d.next_frame() is None
    assert d.frame_size == 6 and d.missing == 6 and d.buffered == 0
    d.feed(data[4:7])
    assert d.next_frame() is None and d.missing == 3 and d.buffered == 3
    d.feed(data[7:])
    assert d.next_frame() == b"abcdef"
    assert not d.in_frame


def test_byte_by_byte() -> None:
    d = FrameDecoder()
    data = frame(b"one") + frame(b"") + frame(b"three")
    out = []
    for i in range(len(data)):
        d.feed(data[i : i + 1])
        out.extend(bytes(f) for f in d)
    assert out == [b"one", b"", b"three"]
    assert d.buffered == 0 and not d.in_frame


def test_payload_read_after_its_prefix_is_not_copied() -> None:
    """A reader that reads exactly ``missing`` bytes (prefix, then payload) gets the payload without a copy."""
    d = FrameDecoder()
    d.feed(_prefix(5))
    assert d.next_frame() is None and d.missing == 5
    payload = b"12345"
    d.feed(payload)
    f = d.next_frame()
    assert f == payload and f.obj is payload


def test_views_stay_valid_while_the_decoder_accumulates() -> None:
    """A frame view handed out from a buffer the decoder built must never change or block later reads."""
    d = FrameDecoder()
    d.feed(frame(b"AAAA")[:3])
    d.feed(frame(b"AAAA")[3:] + frame(b"BBBB")[:2])  # first frame completes inside the decoder's own buffer
    a = d.next_frame()
    assert a == b"AAAA"
    held = bytes(a)
    for chunk in (frame(b"BBBB")[2:5], frame(b"BBBB")[5:] + frame(b"CC"), frame(b"D" * 1000)):
        d.feed(chunk)  # must not raise BufferError (resizing an exported bytearray) nor overwrite ``a``
    assert [bytes(f) for f in d] == [b"BBBB", b"CC", b"D" * 1000]
    assert bytes(a) == held


def test_fed_bytearray_is_not_written_to() -> None:
    d = FrameDecoder()
    mine = bytearray(frame(b"xy")[:5])
    d.feed(mine)
    d.feed(b"y")
    assert d.next_frame() == b"xy"
    assert mine == frame(b"xy")[:5]


@pytest.mark.parametrize("size", [-1, -(2**31), MAX_REQUEST_SIZE + 1, 2**31 - 1])
def test_invalid_size_is_refused_from_the_prefix_alone(size: int) -> None:
    d = FrameDecoder()
    d.feed(_prefix(size))  # no payload byte yet: refused before anything is allocated for it
    with pytest.raises(FrameTooLargeError) as e:
        d.next_frame()
    assert e.value.size == size and e.value.max_size == MAX_REQUEST_SIZE
    assert str(size) in str(e.value) and str(MAX_REQUEST_SIZE) in str(e.value)
    assert isinstance(e.value, InvalidRequestError)
    assert d.buffered <= 4


def test_limit_is_inclusive() -> None:
    d = FrameDecoder(max_size=10)
    d.feed(frame(b"x" * 10))
    assert d.next_frame() == b"x" * 10
    d.feed(frame(b"x" * 11))
    with pytest.raises(FrameTooLargeError, match="above the maximum: 11"):
        d.next_frame()


def test_negative_size_message() -> None:
    d = FrameDecoder(max_size=10)
    d.feed(_prefix(-5) + b"junk")
    with pytest.raises(FrameTooLargeError, match="negative frame size: -5"):
        d.next_frame()


def test_zero_size_is_an_empty_frame() -> None:
    """As Kafka's NetworkReceive: 0 is a valid size; the empty payload is then refused by the codec."""
    d = FrameDecoder()
    d.feed(_prefix(0) + frame(b"next"))
    assert d.next_frame() == b""
    assert d.next_frame() == b"next"
    with pytest.raises(InvalidRequestError):
        codec.decode_request(b"")


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
    kinds=st.lists(st.sampled_from(["bytes", "bytearray", "memoryview"]), min_size=1, max_size=5),
)
def test_any_split_of_the_stream_gives_the_same_frames(payloads: list[bytes], cuts: list[int], kinds: list[str]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    d = FrameDecoder(max_size=300)
    got: list[memoryview] = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        kind = kinds[i % len(kinds)]
        chunk = stream[a:b]
        d.feed(chunk if kind == "bytes" else bytearray(chunk) if kind == "bytearray" else memoryview(chunk))
        got.extend(d)
    assert [bytes(f) for f in got] == payloads  # also checks views handed out early were never overwritten
    assert d.buffered == 0 and not d.in_frame


# ------------------------------------------------------------------------------------------- ClientConnection


def _response(api_key: int, version: int, cid: int, body: dict) -> bytes:
    return b"".join(bytes(c) for c in codec.encode_response(api_key, version, cid, body))


_AV0 = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}
_MD1 = {"brokers": [{"node_id": 7, "host": "h", "port": 9, "rack": None}], "controller_id": 7, "topics": []}


def test_request_frame_and_increasing_correlation_ids() -> None:
    c = ClientConnection("me")
    cid1, data1 = c.send(ApiKey.API_VERSIONS, 0, {})
    cid2, data2 = c.send(ApiKey.METADATA, 1, {"topics": []})
    assert cid2 == cid1 + 1
    d = FrameDecoder()
    d.feed(data1 + data2)
    (h1, _), (h2, _) = (codec.decode_request(f) for f in list(d))
    assert (h1.api_key, h1.correlation_id, h1.client_id) == (ApiKey.API_VERSIONS, cid1, "me")
    assert (h2.api_key, h2.api_version, h2.correlation_id) == (ApiKey.METADATA, 1, cid2)
    assert len(c.in_flight) == 2


def test_pipelined_responses_are_decoded_for_their_own_request() -> None:
    c = ClientConnection("me")
    cid1, _ = c.send(ApiKey.API_VERSIONS, 0, {})
    cid2, _ = c.send(ApiKey.METADATA, 1, {"topics": []})
    stream = _response(ApiKey.API_VERSIONS, 0, cid1, _AV0) + _response(ApiKey.METADATA, 1, cid2, _MD1)
    c.feed(stream[:7])
    assert c.next_response() is None and c.missing > 0
    c.feed(stream[7:])
    r1 = c.next_response()
    r2 = c.next_response()
    assert r1 is not None and r2 is not None
    assert (r1.correlation_id, r1.api_key, r1.body["api_keys"][0]["max_version"]) == (cid1, ApiKey.API_VERSIONS, 3)
    assert (r2.correlation_id, r2.api_key, r2.body["brokers"][0]["node_id"]) == (cid2, ApiKey.METADATA, 7)
    assert c.next_response() is None and not c.in_flight


def test_mismatched_correlation_id() -> None:
    c = ClientConnection("me")
    cid1, _ = c.send(ApiKey.API_VERSIONS, 0, {})
    cid2, _ = c.send(ApiKey.API_VERSIONS, 0, {})
    c.feed(_response(ApiKey.API_VERSIONS, 0, cid2, _AV0))  # answers the second before the first
    with pytest.raises(CorrelationIdMismatchError) as e:
        c.next_response()
    assert (e.value.expected, e.value.got) == (cid1, cid2)
    assert isinstance(e.value, ConnectionError)  # callers that reconnect on ConnectionError do so
    assert f"{cid2} does not match request {cid1}" in str(e.value)


def test_response_with_nothing_in_flight() -> None:
    c = ClientConnection("me")
    c.feed(_response(ApiKey.API_VERSIONS, 0, 1, _AV0))
    with pytest.raises(CorrelationIdMismatchError, match="no request is in flight") as e:
        c.next_response()
    assert e.value.expected is None and e.value.got == 1


def test_request_without_response_is_not_awaited() -> None:
    c = ClientConnection("me")
    produce = {"transactional_id": None, "acks": 0, "timeout_ms": 1000, "topic_data": []}
    c.send(ApiKey.PRODUCE, 7, produce, expect_response=False)
    cid, _ = c.send(ApiKey.API_VERSIONS, 0, {})
    c.feed(_response(ApiKey.API_VERSIONS, 0, cid, _AV0))
    r = c.next_response()
    assert r is not None and r.correlation_id == cid


def test_correlation_ids_wrap_within_int32() -> None:
    c = ClientConnection("me", first_correlation_id=0x7FFFFFFF)
    assert c.send(ApiKey.API_VERSIONS, 0, {})[0] == 0x7FFFFFFF
    assert c.send(ApiKey.API_VERSIONS, 0, {})[0] == 0


def test_short_response_is_malformed_not_a_mismatch() -> None:
    c = ClientConnection("me")
    c.send(ApiKey.API_VERSIONS, 0, {})
    c.feed(frame(b"\x00\x01"))
    with pytest.raises(InvalidRequestError):
        c.next_response()


def test_client_frame_limit() -> None:
    c = ClientConnection("me", max_frame_size=100)
    c.send(ApiKey.API_VERSIONS, 0, {})
    c.feed(_prefix(101))
    with pytest.raises(FrameTooLargeError):
        c.next_response()
    c = ClientConnection("me")  # default: any non-negative int32
    c.send(ApiKey.API_VERSIONS, 0, {})
    c.feed(_prefix(2**31 - 1))
    assert c.next_response() is None and c.missing == 2**31 - 1
    c = ClientConnection("me")
    c.feed(_prefix(-1))
    with pytest.raises(FrameTooLargeError):
        c.next_response()
