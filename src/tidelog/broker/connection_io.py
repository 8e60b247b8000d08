"""A client connection's socket, as Kafka's network layer owns it: readiness, framing and writes.

Each accepted socket is owned directly (non-blocking, ``TCP_NODELAY``), not through an asyncio transport, so that
fetch responses can go out with ``os.sendfile`` straight from the segment files (see :mod:`tidelog.broker.server`,
"Connections"). Reads and writes try the syscall first and only wait for readiness (``loop.add_reader`` /
``add_writer``) on ``EAGAIN``. :class:`ConnectionIO` is the base of a connection: the SASL authenticator
(:mod:`tidelog.broker.authenticator`), the produce fast lane and pipelining (:mod:`tidelog.broker.produce_lane`)
and the request loop (:mod:`tidelog.broker.connection`) build on it; TLS overrides its reads and writes
(:mod:`tidelog.broker.tls_connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, cast

from tidelog.broker.connection_limits import SMALL_FRAME
from tidelog.protocol.exceptions import FrameTooLargeError
from tidelog.protocol.framing import FrameDecoder

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.handlers import DeferredResponse
    from tidelog.broker.security.listeners import ListenerSettings

log = logging.getLogger("tidelog.broker.server")

_READ_CHUNK = 256 * 1024
_MAX_READ = 4 * 1024 * 1024  # largest single recv while a big request arrives
_IOV_MAX = 512
ANONYMOUS = "User:ANONYMOUS"
_MSG_MORE: int = getattr(socket, "MSG_MORE", 0)  # Linux


Buffer = bytes | bytearray | memoryview


class FileRegion(Protocol):
    """A region of a file a response sends with ``os.sendfile`` (a segment slice of a Fetch answer)."""

    @property
    def fd(self) -> int: ...

    @property
    def position(self) -> int: ...

    @property
    def length(self) -> int: ...


class ConnectionClosed(Exception):
    """The peer closed, or the connection was aborted (idle reaper, shutdown): the request loop ends."""


class RequestEnded(ConnectionClosed):
    """A request answered in the reader callback (inline lane) ended the connection (its handler asked for a
    close, or the broker is stopping): the request loop ends as after any request that returned False."""


class ConnectionIO:
    """The socket of one client connection: waits for readiness, reads frames (bounded by
    ``socket.request.max.bytes`` and the request memory pool), writes responses (zero-copy regions with
    ``os.sendfile``), mutes (KIP-219) and closes."""

    _plain = True  # a plain socket (TlsConnection: False)

    def __init__(self, broker: Broker, sock: socket.socket, peer: str,
                 listener: ListenerSettings | None = None) -> None:
        self.broker = broker
        self.listener = listener
        self.listener_name = listener.name if listener is not None else ""
        self.principal = ANONYMOUS
        self.session_expires: float | None = None  # KIP-368: monotonic deadline of a SASL session
        self.sasl_mechanism = ""
        self.sasl_authenticate_version = -1  # KIP-368: v1+ clients can re-authenticate
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.client_host = peer.rsplit(":", 1)[0]
        self._loop = asyncio.get_running_loop()
        self._frames = FrameDecoder(broker.config.socket_request_max_bytes)
        self.last_active = self._loop.time()
        self.busy = False  # a request is being processed or its response written (or a pipelined answer pending)
        self._in_request = False  # the request loop is inside process()
        self.write_blocked_at: float | None = None  # loop time a write started waiting for the peer to read
        self.reserved = 0  # bytes of the frame being read taken from broker.request_memory
        self.mute_ms = 0  # KIP-219: a quota's throttle time; the channel is muted this long after the response
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._read_waiter: asyncio.Future[None] | None = None
        self._write_waiter: asyncio.Future[None] | None = None  # the response writer may wait while a read does
        # pipelined produce (see process): acks=all answers not written yet, in request order, and their writer
        self._pending: deque[tuple[DeferredResponse, int, int, int, str, float]] = deque()
        self._pipeline_max = broker.config.produce_pipeline_max_requests if self._plain else 1
        self._writer: asyncio.Task[None] | None = None
        self._progress: asyncio.Future[None] | None = None  # resolved when a pending answer is written
        self._reading = False  # _on_readable is registered with the loop
        # the last recv emptied the socket and no readiness was seen since: wait before trying recv again (saves a
        # recv that fails with EAGAIN per request when requests arrive one at a time)
        self._maybe_empty = False
        # the inline lane (tidelog.broker.inline_lane): while the request loop waits between requests, the reader
        # callback may read and answer Produce requests itself; what it leaves to the loop is one of these
        self._inline = False  # the loop waits in _recv_more and the reader callback may serve requests
        self._held: memoryview | None = None  # a frame the callback took from the decoder for the loop
        self._recv_exc: BaseException | None = None  # raised in the loop (a recv error, end of stream)

    # -- readiness ---------------------------------------------------------------------------------------------

    async def _wait(self, writable: bool) -> None:
        if not writable:
            await self._wait_readable()
            return
        fut = self._loop.create_future()
        self._write_waiter = fut

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self._loop.add_writer(self.fd, ready)
        self.write_blocked_at = self._loop.time()
        try:
            await fut
        finally:
            self._loop.remove_writer(self.fd)
            self._write_waiter = None
            self.write_blocked_at = None

    async def _wait_readable(self) -> None:
        """Wait until the socket is readable. The reader stays registered between requests (no epoll_ctl per
        request): :meth:`_on_readable` wakes this wait, or, when it fires while nobody waits (the client sent
        more while a request was being processed), unregisters itself so the level-triggered poll does not call
        it on every loop iteration; the next wait registers it again."""
        fut = self._loop.create_future()
        self._waiter = self._read_waiter = fut
        if not self._reading:
            self._loop.add_reader(self.fd, self._on_readable)
            self._reading = True
        try:
            await fut
        finally:
            self._waiter = self._read_waiter = None

    def _on_readable(self) -> None:
        fut = self._read_waiter
        if fut is not None:
            if fut.done():
                return
            if self._inline and self._serve_inline():
                return  # answered in this callback: the loop waits on
            self._inline = False
            fut.set_result(None)
            return
        self._maybe_empty = False  # bytes arrived: the next read tries recv first
        self._loop.remove_reader(self.fd)
        self._reading = False

    def abort(self) -> None:
        """Wake a waiting read/write so the connection task notices it must close (idle reaper, shutdown)."""
        self.closed = True
        for fut in (self._waiter, self._write_waiter, self._progress):
            if fut is not None and not fut.done():
                fut.set_exception(ConnectionClosed())

    # -- the inline lane's hooks (tidelog.broker.inline_lane overrides them) ---------------------------------

    def _inline_allowed(self) -> bool:
        """May the reader callback serve requests while the loop waits for the next one?"""
        return False

    def _serve_inline(self) -> bool:
        """The reader callback's turn (only while ``_inline``): True when the loop may go on waiting."""
        return False

    async def _inline_woken(self) -> None:
        """The loop's side after the reader callback, which read the socket, woke it: finish what the callback
        handed over (a started request, an error); the loop then looks for frames before it reads again."""

    # -- reading -----------------------------------------------------------------------------------------------

    async def _recv_more(self, want: int) -> None:
        while True:
            if self.closed:
                raise ConnectionClosed()
            if self._maybe_empty:
                inline = self._inline = self._inline_allowed() and not self._frames.in_frame
                try:
                    await self._wait_readable()
                finally:
                    self._inline = False
                if inline:  # the callback read the socket (or failed to): what it left to this loop
                    await self._inline_woken()
                    return
                self._maybe_empty = False
            try:
                data = self.sock.recv(want)
            except (BlockingIOError, InterruptedError):
                await self._wait_readable()
                continue
            if not data:
                raise ConnectionClosed()
            self._maybe_empty = len(data) < want
            self._frames.feed(data)
            return

    async def read_frame(self) -> memoryview | None:
        """The next request payload, or None when the connection must end (peer closed, or a bad size prefix).

        The payload is a view of the bytes it arrived in, not a copy (a produce batch is then written to the log
        straight from it); ``tidelog.protocol.framing.FrameDecoder`` never writes to those bytes afterwards."""
        frames = self._frames
        while True:
            held = self._held
            if held is not None:  # taken from the decoder by the reader callback (inline lane), not answered
                self._held = None
                return held
            try:
                frame = frames.next_frame()
            except FrameTooLargeError as exc:
                log.warning(
                    "closing connection: request size outside limits",
                    extra={"kv": {"peer": self.peer, "size": exc.size, "socket.request.max.bytes": exc.max_size}},
                )
                self.broker.metrics.record_close("invalid_size")
                return None
            if frame is not None:
                return frame
            pool = self.broker.request_memory
            if pool.bounded:
                # queued.max.request.bytes: read no further than the current frame; a large frame's size is
                # taken from the pool once its prefix is in, and reading pauses while the pool is exhausted
                size = frames.frame_size
                if size is not None and size > SMALL_FRAME and not self.reserved:
                    await self._reserve(size)
                want = min(frames.missing, _MAX_READ)
            else:
                want = max(_READ_CHUNK, min(frames.missing, _MAX_READ))
            try:
                await self._recv_more(want)
            except ConnectionClosed as exc:
                if frames.in_frame and not isinstance(exc, RequestEnded):
                    size = frames.frame_size
                    kv: dict[str, object] = (
                        {"peer": self.peer, "buffered": frames.buffered}
                        if size is None
                        else {"peer": self.peer, "size": size, "received": frames.buffered}
                    )
                    log.info("connection closed mid-frame", extra={"kv": kv})
                    self.broker.metrics.record_close("truncated_frame")
                return None

    async def _reserve(self, size: int) -> None:
        """Take ``size`` bytes from the request memory pool, waiting (not reading) until it has some."""
        pool = self.broker.request_memory
        paused = False
        while not pool.try_allocate(size):
            if self.closed:
                raise ConnectionClosed()
            if not paused:
                paused = True
                log.debug("request memory exhausted; pausing reads", extra={"kv": {"peer": self.peer}})
            fut = pool.waiter()
            self._waiter = fut
            try:
                await fut
            finally:
                self._waiter = None
        self.reserved = size

    def release_memory(self) -> None:
        if self.reserved:
            self.broker.request_memory.release(self.reserved)
            self.reserved = 0

    # -- writing -----------------------------------------------------------------------------------------------

    async def _send_buffers(self, bufs: list[Buffer], flags: int = 0) -> None:
        views = [memoryview(b) for b in bufs if len(b)]
        while views:
            try:
                n = self.sock.sendmsg(views[:_IOV_MAX], (), flags)
            except (BlockingIOError, InterruptedError):
                await self._wait(True)
                continue
            while n:
                first = views[0]
                if n >= len(first):
                    n -= len(first)
                    views.pop(0)
                else:
                    views[0] = first[n:]
                    n = 0

    async def _send_region(self, fd: int, position: int, length: int) -> None:
        while length > 0:
            try:
                n = os.sendfile(self.fd, fd, position, length)
            except (BlockingIOError, InterruptedError):
                await self._wait(True)
                continue
            if n == 0:
                # the file is shorter than the region (truncated underneath us): the response cannot be finished
                raise OSError(errno.EIO, f"sendfile hit end of file with {length} bytes left")
            position += n
            length -= n

    async def write_chunks(self, chunks: Iterable[object]) -> int:
        """Write a response: ``bytes``-like chunks gathered into ``sendmsg``, file regions (objects with ``fd``,
        ``position``, ``length``) with ``os.sendfile``. Objects with ``.chunks`` are flattened."""
        if self._plain and type(chunks) is list and len(chunks) == 1 and type(chunks[0]) is bytes:
            # the usual small response, one bytes object: one send, nothing else unless the socket is full
            data = chunks[0]
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            if n < len(data):
                await self._send_buffers([memoryview(data)[n:]])
            return len(data)
        pending: list[Buffer] = []
        total = 0
        for chunk in _flatten(chunks):
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                pending.append(chunk)
                total += len(chunk)
                continue
            if pending:
                # MSG_MORE: the bytes before a file region (a Fetch answer's header) wait for the region's
                # data and leave in its segments, instead of being pushed alone (TCP_NODELAY) and waking the
                # reader for a few bytes (issue 30)
                await self._send_buffers(pending, _MSG_MORE if self._plain and chunk.length > 0 else 0)
                pending = []
            await self._send_region(chunk.fd, chunk.position, chunk.length)
            total += chunk.length
        if pending:
            await self._send_buffers(pending)
        return total

    async def _mute(self) -> None:
        """KIP-219: read nothing from this connection for the throttle time a quota gave its last request (Kafka
        mutes the channel); :meth:`abort` (idle reaper, shutdown) ends the wait."""
        ms, self.mute_ms = self.mute_ms, 0
        if self.closed:
            raise ConnectionClosed()
        fut = self._loop.create_future()

        def unmute() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = self._loop.call_later(ms / 1000.0, unmute)
        self._waiter = fut
        try:
            await fut
        finally:
            handle.cancel()
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self.fd)
            self._loop.remove_writer(self.fd)
        with contextlib.suppress(OSError):
            self.sock.close()


def _flatten(chunks: Iterable[object]) -> Iterator[Buffer | FileRegion]:
    """Bytes-like chunks and file regions (objects with ``fd``, ``position``, ``length``), with the chunks of
    objects that hold ``.chunks`` (the codec's RecordsChunks) flattened in; TypeError for anything else."""
    for c in chunks:
        if isinstance(c, (bytes, bytearray, memoryview)):
            yield c
        elif hasattr(c, "fd"):
            yield cast(FileRegion, c)
        elif hasattr(c, "chunks"):
            yield from _flatten(c.chunks)
        else:
            raise TypeError(f"cannot send response chunk of type {type(c).__name__}")
