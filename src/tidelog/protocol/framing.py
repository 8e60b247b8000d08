"""Kafka's size-prefixed framing, sans-io: bytes in, whole frames out. No sockets here.

Every Kafka request and response on the wire is ``int32 size | payload`` (big-endian, the size counts the
payload only). The payload starts with the request header (v0/v1/v2: api key, version, correlation id, client
id, tags) or the response header (v0/v1: correlation id, tags), which :mod:`tidelog.protocol.codec` reads.

* :class:`FrameDecoder` — feed received bytes (:meth:`~FrameDecoder.feed`), take complete payloads
  (:meth:`~FrameDecoder.next_frame`) as memoryviews: a payload that arrived within one read (or one read of
  exactly the missing bytes) is a view of those bytes, not a copy; one spread over several reads is assembled
  once in the decoder's own buffer. A size < 0 or
  above ``max_size`` raises :class:`FrameTooLargeError` as soon as the 4 prefix bytes are in, before anything
  is allocated for it; the buffer only grows as bytes arrive, so a lying prefix costs nothing. A size of 0 is a
  (empty) frame, as in Kafka's ``NetworkReceive``; what the payload must hold is the codec's business.
  :attr:`~FrameDecoder.missing` says how many bytes would complete the prefix or the payload (a read size hint
  for callers that read exactly what is needed). The broker's connections use it (max size
  ``socket.request.max.bytes``).
* :class:`ClientConnection` — a Kafka client connection's state: encodes requests with increasing correlation
  ids, remembers the in-flight ones in order and pairs each response frame with the oldest of them (Kafka
  answers in request order on a connection). A response whose correlation id is not the expected one, or that
  arrives with nothing in flight, raises :class:`CorrelationIdMismatchError` (the connection is then unusable:
  close it). Used by the inter-broker client (``cluster/peer.py``) and the Spark raw Fetch path
  (``spark/fetcher.py``); each adds only its own socket reads and writes.

Ownership: the decoder keeps a reference to what it is fed and hands out views of it, so do not change a buffer
after feeding it. A view handed out stays valid and unchanged for as long as it is held (a Produce request's
records are written to the log straight from it): the decoder never writes into a buffer once a view of it
exists, it starts a new one.
"""

from __future__ import annotations

from collections import deque
from struct import Struct
from typing import Any, NamedTuple

from tidelog.protocol import codec
from tidelog.protocol.exceptions import CorrelationIdMismatchError, FrameTooLargeError, InvalidRequestError

MAX_REQUEST_SIZE = 104857600
"""Default largest request payload accepted (Kafka's ``socket.request.max.bytes``, 100 MiB)."""

MAX_FRAME_SIZE = 0x7FFFFFFF
"""The largest size an int32 prefix can announce: a client's default (only a negative size is refused)."""

SIZE_PREFIX = 4
_I32 = Struct(">i")
_unpack_i32 = _I32.unpack_from


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` with its int32 size prefix."""
    return _I32.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into frame payloads (the bytes after each size prefix). See the module docstring."""

    __slots__ = ("_buf", "_pos", "_size", "max_size")

    # State: ``_buf[_pos:]`` are the bytes received and not consumed; when they are none, ``_buf`` is b"" and
    # ``_pos`` 0 (so a read that starts at a boundary is kept as it is). ``_buf`` is a bytearray only while the
    # decoder may append to it (it made it and no view of it is out); bytes fed are kept as they are, other
    # buffers as read-only memoryviews, and a bytearray a view was taken of is frozen as a memoryview.

    def __init__(self, max_size: int = MAX_REQUEST_SIZE) -> None:
        self.max_size = max_size
        self._buf: bytes | bytearray | memoryview = b""
        self._pos = 0
        self._size = -1  # payload size of the frame being read once its prefix is consumed, else -1

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes (kept by reference when nothing is pending: do not change them afterwards)."""
        buf = self._buf
        if not buf:
            # Nothing pending (the usual case: a read starts at a frame or payload boundary): keep the bytes
            # as they are, the frames in them are handed out as views without a copy.
            self._buf = data if type(data) is bytes else memoryview(data).toreadonly()
        elif type(buf) is bytearray:
            buf += data  # our own buffer, no view of it out: grow in place
        else:
            # the rest of a frame is pending in bytes we may not write to: continue in a buffer of our own
            pos = self._pos
            grown = bytearray(buf) if pos == 0 else bytearray(memoryview(buf)[pos:])
            grown += data
            self._buf = grown
            self._pos = 0

    def next_frame(self) -> memoryview | None:
        """The next complete payload (a view of the received bytes), or None when more bytes are needed.

        Raises FrameTooLargeError when the prefix announces a size < 0 or > ``max_size`` (the stream cannot be
        resynchronised: close the connection)."""
        buf = self._buf
        pos = self._pos
        size = self._size
        n = len(buf)
        if size < 0:
            if n - pos < SIZE_PREFIX:
                return None
            (size,) = _unpack_i32(buf, pos)
            if size < 0 or size > self.max_size:
                raise FrameTooLargeError(size, self.max_size)
            pos += SIZE_PREFIX
            end = pos + size
            if end > n:
                self._size = size
                if pos == n:
                    self._buf = b""
                    self._pos = 0
                else:
                    self._pos = pos
                return None
        else:
            end = pos + size
            if end > n:
                return None
            self._size = -1
        if end == n:
            # all consumed: drop the reference (the views handed out keep what they need alive)
            self._buf = b""
            self._pos = 0
        else:
            self._pos = end
            if type(buf) is bytearray:
                self._buf = memoryview(buf)  # a view of it goes out: never append to it again
        return memoryview(buf)[pos:end]

    def __iter__(self):  # type: ignore[no-untyped-def]
        """Every complete payload buffered now."""
        while (f := self.next_frame()) is not None:
            yield f

    @property
    def missing(self) -> int:
        """Bytes still needed to complete the size prefix (when it is incomplete) or the payload it announced.

        0 when a complete prefix is buffered but not yet parsed by :meth:`next_frame`."""
        avail = len(self._buf) - self._pos
        if self._size < 0:
            return max(SIZE_PREFIX - avail, 0)
        return max(self._size - avail, 0)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed out (excluding a size prefix already parsed)."""
        return len(self._buf) - self._pos

    @property
    def frame_size(self) -> int | None:
        """The payload size of the frame being read, once its prefix is parsed."""
        return None if self._size < 0 else self._size

    @property
    def in_frame(self) -> bool:
        """Some bytes of a frame have arrived (a close now cuts a frame short)."""
        return self._size >= 0 or len(self._buf) > self._pos


class Response(NamedTuple):
    correlation_id: int
    api_key: int
    api_version: int
    body: dict[str, Any]


class ClientConnection:
    """A client's side of one Kafka connection, sans-io: request encoding, correlation, response decoding.

    ``send`` returns the bytes to write; feed what is read with ``feed`` (:attr:`missing` is the size of the
    next useful read); ``next_response`` returns the response to the oldest request in flight, or None."""

    __slots__ = ("_next_cid", "client_id", "frames", "in_flight")

    def __init__(self, client_id: str | None, max_frame_size: int = MAX_FRAME_SIZE, first_correlation_id: int = 1):
        self.client_id = client_id
        self.frames = FrameDecoder(max_frame_size)
        self.in_flight: deque[tuple[int, int, int]] = deque()  # (correlation id, api key, version)
        self._next_cid = first_correlation_id & 0x7FFFFFFF

    def send(self, api_key: int, version: int, body: Any, *, expect_response: bool = True) -> tuple[int, bytes]:
        """``(correlation id, request frame)``. ``expect_response=False`` for requests Kafka does not answer
        (Produce with acks=0): nothing is then awaited for them."""
        cid = self._next_cid
        self._next_cid = (cid + 1) & 0x7FFFFFFF
        data = codec.encode_request(api_key, version, cid, self.client_id, body)
        if expect_response:
            self.in_flight.append((cid, api_key, version))
        return cid, data

    @property
    def next_correlation_id(self) -> int:
        """The correlation id the next request will carry (to continue counting on a new connection)."""
        return self._next_cid

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self.frames.feed(data)

    @property
    def missing(self) -> int:
        return self.frames.missing

    def next_response(self) -> Response | None:
        """The next complete response, decoded for the request it answers, or None when more bytes are needed.

        Raises CorrelationIdMismatchError (a response that answers nothing in flight, or not the oldest
        request), FrameTooLargeError, or the codec's InvalidRequestError for a malformed response."""
        payload = self.frames.next_frame()
        if payload is None:
            return None
        return self.response_from(payload)

    def response_from(self, payload: memoryview) -> Response:
        """The response in ``payload`` (a whole frame's payload, read by the caller's own framing), decoded for
        the oldest request in flight; raises as :meth:`next_response`."""
        if len(payload) < 4:
            raise InvalidRequestError(f"response of {len(payload)} bytes has no correlation id")
        (got,) = _unpack_i32(payload, 0)
        if not self.in_flight:
            raise CorrelationIdMismatchError(None, got)
        cid, api_key, version = self.in_flight[0]
        if got != cid:
            raise CorrelationIdMismatchError(cid, got)
        self.in_flight.popleft()
        _, body = codec.decode_response(api_key, version, payload)
        return Response(cid, api_key, version, body)
