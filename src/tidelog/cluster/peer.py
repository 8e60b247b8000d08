"""A minimal broker-to-broker client: one connection, one request in flight.

Framing, correlation ids and response decoding are :class:`tidelog.protocol.framing.ClientConnection`'s; this
class only connects, writes and reads exactly the bytes the framing asks for.

A PLAINTEXT connection (the replica fetchers' usual one) reads through :class:`FrameReader`, an
``asyncio.BufferedProtocol`` that has the event loop receive each response straight into a buffer of the size
its prefix announced and wakes the waiting request once, when the frame is complete (issue 30: asyncio streams
copy every read into their buffer, wake the reader per read and copy the frame out again). TLS and SASL
connections keep asyncio streams (``tidelog.client.security.open_connection``)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections import deque
from struct import Struct
from typing import Any

from tidelog.client.security import ClientSecurity, open_connection
from tidelog.protocol.exceptions import FrameTooLargeError
from tidelog.protocol.framing import MAX_FRAME_SIZE, ClientConnection

_I32 = Struct(">i")
_SCRATCH = 256 * 1024  # what the loop reads into while a frame above _DIRECT_MAX grows
_DIRECT_MAX = 16 << 20  # a frame up to this size is received into a buffer allocated at its prefix; a larger
# one (never a follower's answer at Kafka's defaults) grows as its bytes arrive, so a lying prefix costs nothing


class FrameReader(asyncio.BufferedProtocol):
    """Size-prefixed frames off a connection, each payload received into a buffer of its size (no copy after
    the kernel's). The loop first receives the 4-byte prefix into a buffer of its own, then the payload into the
    frame's buffer; libuv reads again at once after a read that filled the buffer it was given, so this costs
    one more ``recv``, not one more loop iteration. :meth:`next_frame` waits for the next whole payload."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self.transport: asyncio.Transport | None = None
        self._head = bytearray(4)  # the size prefix
        self._head_filled = 0
        self._frame: bytearray | None = None  # the payload being filled (None: reading a prefix)
        self._size = 0  # its size
        self._filled = 0  # bytes of it received
        self._scratch: bytearray | None = None  # reads of a frame above _DIRECT_MAX, appended to it
        self._frames: deque[memoryview] = deque()
        self._spare: bytearray | None = None  # the last direct frame's buffer, reused once nothing refers to it
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    # -- protocol callbacks ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is None:
            return memoryview(self._head)[self._head_filled:]
        if self._size <= _DIRECT_MAX:
            return memoryview(frame)[self._filled:self._size]
        if self._scratch is None:
            self._scratch = bytearray(_SCRATCH)
        return memoryview(self._scratch)[:min(_SCRATCH, self._size - self._filled)]

    def buffer_updated(self, nbytes: int) -> None:
        frame = self._frame
        if frame is None:
            self._head_filled += nbytes
            if self._head_filled < 4:
                return
            self._head_filled = 0
            (size,) = _I32.unpack(self._head)
            if size < 0 or size > self.max_frame_size:
                self._fail(FrameTooLargeError(size, self.max_frame_size))
                if self.transport is not None:
                    self.transport.abort()
                return
            self._size, self._filled = size, 0
            # a frame above _DIRECT_MAX grows as its bytes arrive, so a lying prefix allocates nothing
            self._frame = self._buffer(size) if size <= _DIRECT_MAX else bytearray()
            if size == 0:
                self._complete()
            return
        if self._size > _DIRECT_MAX:
            assert self._scratch is not None
            frame += memoryview(self._scratch)[:nbytes]
        self._filled += nbytes
        if self._filled == self._size:
            self._complete()

    def _buffer(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes for the next frame: the previous frame's when no one holds it or a
        view of it any more (the caller has dropped the answer; a view keeps a reference to its bytearray, so
        the count is exact), else a new one. A fresh buffer of a few hundred KiB per answer costs page faults and
        zeroing that outweigh the copies saved (bench/peer_read_bench.py)."""
        spare = self._spare
        if spare is not None and len(spare) >= size and sys.getrefcount(spare) <= 3:  # attribute, local, argument
            return spare
        self._spare = None
        return bytearray(size)

    def _complete(self) -> None:
        frame = self._frame
        assert frame is not None
        self._frames.append(memoryview(frame)[:self._size] if len(frame) != self._size else memoryview(frame))
        if self._size <= _DIRECT_MAX:
            self._spare = frame
        self._frame = self._scratch = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def eof_received(self) -> bool:
        self._fail(asyncio.IncompleteReadError(b"", None))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc if exc is not None else ConnectionResetError("connection closed"))

    # -- the request side ------------------------------------------------------------------------------------

    async def next_frame(self) -> memoryview:
        while not self._frames:
            if self._error is not None:
                raise self._error
            fut = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._waiter = None
        return self._frames.popleft()


class Peer:
    """``security``: TLS and SASL for the inter-broker listener (``tidelog.client.security``); None:
    PLAINTEXT (read by a :class:`FrameReader`)."""

    def __init__(self, host: str, port: int, client_id: str, security: ClientSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._frames: FrameReader | None = None
        self._transport: asyncio.Transport | None = None
        self._conn: ClientConnection | None = None
        self._next_cid = 1  # correlation ids keep counting across reconnects

    async def request(self, api_key: int, version: int, body: dict, timeout: float = 30.0) -> dict[str, Any]:
        """Send one request and read its response, all within ``timeout`` seconds (one timer, no extra task).

        Any failure (timeout, I/O, a response out of step: CorrelationIdMismatchError) closes the connection."""
        try:
            async with asyncio.timeout(timeout):
                if self.security is None:
                    return await self._request_plain(api_key, version, body)
                if self._writer is None:
                    self._reader, self._writer, first = await open_connection(self.host, self.port, self.security,
                                                                              self.client_id)
                    self._next_cid = max(self._next_cid, first)
                    self._conn = ClientConnection(self.client_id, first_correlation_id=self._next_cid)
                conn, reader = self._conn, self._reader
                assert conn is not None and reader is not None
                _, data = conn.send(api_key, version, body)
                self._next_cid = conn.next_correlation_id
                self._writer.write(data)
                await self._writer.drain()
                # read the size prefix, then exactly the payload it announced (no copy beyond the stream's)
                while (response := conn.next_response()) is None:
                    conn.feed(await reader.readexactly(conn.missing))
        except BaseException:
            self.close()
            raise
        return response.body

    async def _request_plain(self, api_key: int, version: int, body: dict) -> dict[str, Any]:
        if self._transport is None:
            loop = asyncio.get_running_loop()
            transport, reader = await loop.create_connection(FrameReader, self.host, self.port)
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._transport = transport
            self._frames = reader
            self._conn = ClientConnection(self.client_id, first_correlation_id=self._next_cid)
        conn, frames = self._conn, self._frames
        assert conn is not None and frames is not None and self._transport is not None
        _, data = conn.send(api_key, version, body)
        self._next_cid = conn.next_correlation_id
        self._transport.write(data)  # one small request in flight: nothing to drain
        return conn.response_from(await frames.next_frame()).body

    @property
    def connected(self) -> bool:
        return self._writer is not None or self._transport is not None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._transport is not None:
            self._transport.abort()
        self._reader = self._writer = None
        self._transport = None
        self._frames = None
        self._conn = None
