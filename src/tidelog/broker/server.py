"""The broker: one asyncio event loop serving the Kafka wire protocol on its listeners (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL), and request handler threads.

Security (docs/decisions/0026-listeners-tls-sasl.md)
    One :class:`SocketServer` per listener. On SSL listeners a connection is a :class:`TlsConnection`: the same
    request loop over a non-blocking ``ssl.SSLSocket`` (handshake first; reads and writes retry on
    ``SSLWantRead``/``SSLWantWrite``), and file regions are read with ``os.preadv`` into a buffer and encrypted:
    there is no zero-copy ``sendfile`` under TLS. On SASL listeners the connection first runs Kafka's
    ``SaslServerAuthenticator`` (:meth:`Connection.authenticate`): only ApiVersions, SaslHandshake and
    SaslAuthenticate, frames at most ``sasl.server.max.receive.size``; anything else closes the connection.
    The principal (``User:<name>``, the mapped certificate DN, or ``User:ANONYMOUS``) is kept on the connection
    and handed to every handler as ``RequestContext.principal``.

Request execution (docs/decisions/0021-request-execution.md)
    The loop is Kafka's network thread: it frames, decodes, dispatches, runs small handler work and sends.
    Work whose cost a client controls (validating compressed or large produce batches, creating and deleting
    topics, config changes) runs on ``request_pool`` (:class:`~tidelog.broker.request_pool.RequestHandlerPool`,
    ``num.io.threads``), awaited by the handler, so only its own connection waits; ``append_sequencer`` keeps
    each partition's appends in arrival order.

Connections (see :class:`Connection`)
    Each accepted socket is owned directly (non-blocking, ``TCP_NODELAY``), not through an asyncio transport, so
    that fetch responses can go out with ``os.sendfile`` straight from the segment files: uvloop has no
    ``loop.sendfile`` and an asyncio transport hides its socket's buffer, so writing around it is unsafe. Reads
    and writes try the syscall first and only wait for readiness (``loop.add_reader``/``add_writer``) on
    ``EAGAIN``: on a busy connection most requests cost one ``recv`` and one ``sendmsg``. This works the same
    on uvloop and on the default loop.

    Measured (2-core VM, Python client in another process, 16 MB Fetch responses from page cache, one
    connection; run-to-run noise about +-20%): sendfile 1.7-1.8 GB/s vs ``os.pread`` + ``sendmsg`` 0.8-1.2 GB/s,
    on both loops. Small requests (ApiVersions v3 round trips): ~20k/s, against ~26k/s for a bare uvloop echo
    server (~17k/s on the asyncio loop), i.e. ~12 us of broker work per request. uvloop is the default (faster
    wakeups); ``tidelog serve --loop asyncio`` switches.

Framing and order (as Kafka's SocketServer)
    ``int32 size | request``. A size < 0 or > ``socket.request.max.bytes`` closes the connection; the buffer
    grows only as bytes arrive, so a lying size prefix allocates nothing. One request per connection is processed
    at a time, in order (Kafka mutes the channel until the response is sent); pipelined requests wait in the
    socket buffer, which is the backpressure. A response is written completely before the next request is read,
    except that up to ``tidelog.produce.pipeline.max.requests`` acks=all produces whose appends are done may
    wait for their replicas while the next request is read (answers still in request order; see
    :meth:`Connection._defer` and docs/decisions/0022-pipelined-produce.md).

Errors
    Unknown API key, unsupported version (except ApiVersions, answered in v0 with UNSUPPORTED_VERSION and the
    full list: KIP-511) and malformed requests close the connection, as Kafka does. A handler exception is
    logged and answered with the API's error response, UNKNOWN_SERVER_ERROR in every error code and one entry
    per topic/partition/group the request named (``tidelog.protocol.error_response``); the connection stays
    open. An acks=0 produce has no response to carry it, so that connection is closed, as in Kafka.

Leadership
    :meth:`Broker.leader_log` is the single "am I the leader of this partition" check every data-path handler
    uses; the high watermark is advanced in one place, :meth:`Broker.maybe_increment_high_watermark`
    (HW = min LEO over the ISR; alone in the ISR, HW = LEO after each append).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tidelog.broker.connection_limits import SMALL_FRAME, TooManyConnections
from tidelog.broker.errors import UNKNOWN_SERVER_ERROR_MESSAGE
from tidelog.broker.handlers import DeferredResponse, RequestContext
from tidelog.broker.handlers.core import api_versions_list, produce, produce_one, produce_one_body
from tidelog.broker.quotas import after_handler, client_throttles
from tidelog.broker.security.listeners import ListenerSettings
from tidelog.broker.security.sasl import PlainServer, SaslAuthenticationFailed, ScramServer
from tidelog.broker.security.tls import NoMatchingRule, subject_dn
from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.error_response import UNKNOWN_SERVER_ERROR, error_counter, error_response
from tidelog.protocol.errors import error_for_code
from tidelog.protocol.exceptions import (
    FrameTooLargeError,
    InvalidRequestError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from tidelog.protocol.framing import FrameDecoder

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.server")

_READ_CHUNK = 256 * 1024
_MAX_READ = 4 * 1024 * 1024  # largest single recv while a big request arrives
API_VERSIONS_KEY = 18
PRODUCE_KEY = 0
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
ANONYMOUS = "User:ANONYMOUS"
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58
_TLS_CHUNK = 256 * 1024  # file regions are read and encrypted this much at a time
_TLS_RECV = 64 * 1024
_IOV_MAX = 512
# responses not scanned for error codes (big lists, errors rare): ApiVersions, Metadata
_NO_ERROR_SCAN = frozenset({18, 3})
_PRODUCE_NAME = "PRODUCE"


def _load_produce_lane() -> tuple[Any, Any]:
    """``tidelog.protocol._produce``'s (parse_produce, encode_produce_response) for the fast lane of a Produce of
    the common shape (:meth:`Connection.process`), or (None, None): not built, or ``TIDELOG_PURE_PYTHON`` set."""
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None, None
    try:
        from tidelog.protocol._produce import encode_produce_response, parse_produce
    except ImportError:
        return None, None
    return parse_produce, encode_produce_response


_parse_produce, _encode_produce = _load_produce_lane()


class _ConnectionClosed(Exception):
    pass


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


_API_NAMES: dict[int, str] = {}


def api_name(api_key: int) -> str:
    name = _API_NAMES.get(api_key)
    if name is None:
        name = _API_NAMES[api_key] = _api_name(api_key)
    return name


def _count_errors(body: Any, out: dict[int, int], depth: int = 0) -> None:
    """Non-zero ``error_code`` fields of a response body (for the errors metric)."""
    if depth > 6:
        return
    if isinstance(body, dict):
        code = body.get("error_code")
        if code:
            out[code] = out.get(code, 0) + 1
        for v in body.values():
            if isinstance(v, list) and v and isinstance(v[0], dict):
                for item in v:
                    _count_errors(item, out, depth + 1)
            elif isinstance(v, dict):
                _count_errors(v, out, depth + 1)


# ----------------------------------------------------------------------------------------------------------------


class Connection:
    """One client connection: reads frames, runs handlers one at a time, writes responses (zero-copy regions
    with ``os.sendfile``)."""

    _plain = True  # a plain socket (TlsConnection: False)
    # a Produce of the common shape (one topic, one partition, non-transactional, acks 1/-1) is parsed and answered
    # in C around the same handler steps (process, _produce_fast); False: every request takes the generic codec
    fast_produce = _parse_produce is not None

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
            if not fut.done():
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
                fut.set_exception(_ConnectionClosed())

    # -- reading -----------------------------------------------------------------------------------------------

    async def _recv_more(self, want: int) -> None:
        while True:
            if self.closed:
                raise _ConnectionClosed()
            if self._maybe_empty:
                await self._wait_readable()
                self._maybe_empty = False
            try:
                data = self.sock.recv(want)
            except (BlockingIOError, InterruptedError):
                await self._wait_readable()
                continue
            if not data:
                raise _ConnectionClosed()
            self._maybe_empty = len(data) < want
            self._frames.feed(data)
            return

    async def read_frame(self) -> memoryview | None:
        """The next request payload, or None when the connection must end (peer closed, or a bad size prefix).

        The payload is a view of the bytes it arrived in, not a copy (a produce batch is then written to the log
        straight from it); ``tidelog.protocol.framing.FrameDecoder`` never writes to those bytes afterwards."""
        frames = self._frames
        while True:
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
            except _ConnectionClosed:
                if frames.in_frame:
                    size = frames.frame_size
                    kv: dict[str, Any] = (
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
                raise _ConnectionClosed()
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

    async def _send_buffers(self, bufs: list[Any]) -> None:
        views = [memoryview(b) for b in bufs if len(b)]
        while views:
            try:
                n = self.sock.sendmsg(views[:_IOV_MAX])
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

    async def write_chunks(self, chunks: Iterable[Any]) -> int:
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
        pending: list[Any] = []
        total = 0
        for chunk in _flatten(chunks):
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                pending.append(chunk)
                total += len(chunk)
                continue
            if pending:
                await self._send_buffers(pending)
                pending = []
            await self._send_region(chunk.fd, chunk.position, chunk.length)
            total += chunk.length
        if pending:
            await self._send_buffers(pending)
        return total

    # -- the request loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        broker = self.broker
        broker.metrics.connections.inc()
        try:
            if not await self.secure():
                return
            while not self.closed:
                frame = await self.read_frame()
                if frame is None:
                    break
                self.busy = self._in_request = True
                self.last_active = self._loop.time()
                keep = await self.process(frame)
                del frame
                self.release_memory()
                self._in_request = False
                self.busy = bool(self._pending)
                self.last_active = self._loop.time()
                if not keep or broker.stopping:
                    break
                if self.mute_ms:
                    await self._mute()
            if self._pending and not self.closed:
                await self._drain()  # the answers of pipelined produces still waiting go out before the close
        except _ConnectionClosed:
            pass
        except (ConnectionError, OSError) as exc:
            log.info("connection error", extra={"kv": {"peer": self.peer, "error": repr(exc)}})
            broker.metrics.record_close("io_error")
        except asyncio.CancelledError:
            pass
        except Exception:  # e.g. a response that cannot be encoded: this connection only
            log.exception("connection failed", extra={"kv": {"peer": self.peer}})
            broker.metrics.record_close("internal_error")
        finally:
            if self._writer is not None:
                self._writer.cancel()
            self.close()
            self.release_memory()
            broker.metrics.connections.dec()
            broker.connections.discard(self)

    async def _mute(self) -> None:
        """KIP-219: read nothing from this connection for the throttle time a quota gave its last request (Kafka
        mutes the channel); :meth:`abort` (idle reaper, shutdown) ends the wait."""
        ms, self.mute_ms = self.mute_ms, 0
        if self.closed:
            raise _ConnectionClosed()
        fut = self._loop.create_future()
        handle = self._loop.call_later(ms / 1000.0, lambda: fut.done() or fut.set_result(None))
        self._waiter = fut
        try:
            await fut
        finally:
            handle.cancel()
            self._waiter = None

    # -- security ----------------------------------------------------------------------------------------------

    async def secure(self) -> bool:
        """TLS handshake (TlsConnection) and SASL authentication, as the listener requires. False: close."""
        listener = self.listener
        if listener is not None and listener.sasl:
            return await self.authenticate()
        return True

    async def _respond(self, api_key: int, version: int, correlation_id: int, body: dict) -> None:
        await self.write_chunks(codec.encode_response(api_key, version, correlation_id, body))

    def _sasl_close(self, reason: str, **kv: Any) -> bool:
        log.info("closing connection: " + reason, extra={"kv": {"peer": self.peer, **kv}})
        self.broker.metrics.record_close("sasl")
        return False

    async def authenticate(self, first: memoryview | bytes | None = None) -> bool:
        """Kafka's SaslServerAuthenticator: ApiVersions (any number) and SaslHandshake, then the mechanism's
        tokens in SaslAuthenticate requests (handshake v1) or as raw size-prefixed frames (handshake v0).
        Frames are held to ``sasl.server.max.receive.size``; any other request, an unknown mechanism or a
        refused token closes the connection (a refusal is answered first when SaslAuthenticate can carry it).

        ``first``: the SaslHandshake of a re-authentication (KIP-368) on an authenticated connection: same
        mechanism and same principal, or the connection is closed."""
        listener = self.listener
        assert listener is not None
        broker = self.broker
        frames = self._frames
        frames.max_size = listener.sasl_max_receive_size
        reauth = first is not None
        mech: Any = None
        headers = True
        try:
            while not self.closed:
                if first is not None:
                    frame, first = first, None
                else:
                    frame = await self.read_frame()
                if frame is None:
                    return False
                if mech is not None and not headers:  # handshake v0: a raw token
                    token, header = bytes(frame), None
                else:
                    try:
                        header, body = codec.decode_request(frame, broker.accepted_versions)
                    except UnsupportedVersionError as exc:
                        if exc.api_key == API_VERSIONS_KEY and mech is None:
                            await self._respond(API_VERSIONS_KEY, 0, exc.correlation_id,
                                                api_versions_unsupported_body(broker))
                            continue
                        return self._sasl_close("unsupported version during SASL authentication",
                                                api=api_name(exc.api_key), version=exc.version)
                    except (UnknownApiKeyError, InvalidRequestError) as exc:
                        return self._sasl_close("invalid request during SASL authentication", error=str(exc))
                    key = header.api_key
                    if mech is None:
                        if key == API_VERSIONS_KEY:
                            if not await self.process(frame):
                                return False
                            continue
                        if key != SASL_HANDSHAKE_KEY:
                            return self._sasl_close(f"Unexpected Kafka request of type {api_name(key)} during "
                                                    "SASL handshake.")
                        name = body.get("mechanism") or ""
                        if reauth and name != self.sasl_mechanism:
                            await self._respond(key, header.api_version, header.correlation_id,
                                                {"error_code": UNSUPPORTED_SASL_MECHANISM,
                                                 "mechanisms": [self.sasl_mechanism]})
                            return self._sasl_close("SASL mechanism change during re-authentication is not allowed",
                                                    mechanism=name)
                        if name not in listener.sasl_mechanisms:
                            await self._respond(key, header.api_version, header.correlation_id,
                                                {"error_code": UNSUPPORTED_SASL_MECHANISM,
                                                 "mechanisms": list(listener.sasl_mechanisms)})
                            return self._sasl_close("unsupported SASL mechanism", mechanism=name)
                        mech = (PlainServer(listener.plain_users) if name == "PLAIN"
                                else ScramServer(name, broker.scram_credentials.get))
                        headers = header.api_version >= 1
                        await self._respond(key, header.api_version, header.correlation_id,
                                            {"error_code": 0, "mechanisms": list(listener.sasl_mechanisms)})
                        continue
                    if key != SASL_AUTHENTICATE_KEY:
                        return self._sasl_close(f"Unexpected Kafka request of type {api_name(key)} during SASL "
                                                "authentication.")
                    token = bytes(body.get("auth_bytes") or b"")
                    self.sasl_authenticate_version = header.api_version
                try:
                    challenge = mech.evaluate(token)
                except SaslAuthenticationFailed as exc:
                    if reauth:
                        exc.client_message = (exc.client_message or "").replace("during authentication",
                                                                                "during re-authentication")
                    log.info("Failed authentication", extra={"kv": {"peer": self.peer, "mechanism": mech.mechanism,
                                                                    "reason": str(exc)}})
                    broker.metrics.record_error("SASL_AUTHENTICATE", "SASL_AUTHENTICATION_FAILED")
                    if header is not None:
                        await self._respond(SASL_AUTHENTICATE_KEY, header.api_version, header.correlation_id,
                                            {"error_code": SASL_AUTHENTICATION_FAILED,
                                             "error_message": exc.client_message, "auth_bytes": b"",
                                             "session_lifetime_ms": 0})
                    return self._sasl_close("authentication failed", mechanism=mech.mechanism)
                lifetime = 0
                if mech.complete:
                    principal = "User:" + mech.authorization_id
                    if reauth and principal != self.principal:
                        msg = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                        if header is not None:
                            await self._respond(SASL_AUTHENTICATE_KEY, header.api_version, header.correlation_id,
                                                {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": msg,
                                                 "auth_bytes": b"", "session_lifetime_ms": 0})
                        return self._sasl_close("principal change during re-authentication")
                    if listener.reauth_ms > 0:
                        lifetime = listener.reauth_ms
                        self.session_expires = self._loop.time() + lifetime / 1000.0
                if header is not None:
                    await self._respond(SASL_AUTHENTICATE_KEY, header.api_version, header.correlation_id,
                                        {"error_code": 0, "error_message": None, "auth_bytes": challenge,
                                         "session_lifetime_ms": lifetime})
                else:
                    await self._send_buffers([struct.pack(">i", len(challenge)), challenge])
                if mech.complete:
                    self.principal = "User:" + mech.authorization_id
                    self.sasl_mechanism = mech.mechanism
                    log.info("re-authenticated" if reauth else "authenticated",
                             extra={"kv": {"peer": self.peer, "principal": self.principal,
                                           "mechanism": mech.mechanism, "listener": listener.name}})
                    return True
            return False
        finally:
            frames.max_size = broker.config.socket_request_max_bytes

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self.fd)
            self._loop.remove_writer(self.fd)
        with contextlib.suppress(OSError):
            self.sock.close()

    async def process(self, frame: bytes | memoryview) -> bool:
        """Decode, dispatch, answer. Returns False when the connection must be closed.

        The fast lane: a Produce request of the common shape (``tidelog.protocol._produce.parse_produce``: one
        topic, one partition, no transactional id or batch, acks 1 or -1, no tagged fields) is not decoded into
        dicts but handed to :func:`~tidelog.broker.handlers.core.produce_one` and its response encoded in C
        (:meth:`_produce_fast`); every other request, and every frame that parser does not recognise, takes the
        generic codec below. Both lanes run the same checks, handler steps, quotas and metrics."""
        broker = self.broker
        t0 = time.perf_counter()
        if self.fast_produce:  # any other request costs one C call that looks at its api key
            parsed = _parse_produce(frame, broker.accepted_versions)
            if parsed is not None and broker.handlers.get(PRODUCE_KEY) is produce:
                return await self._produce_fast(frame, parsed, t0)
        try:
            header, body = codec.decode_request(frame, broker.accepted_versions)
        except UnsupportedVersionError as exc:
            if exc.api_key == API_VERSIONS_KEY:
                # KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client retries lower.
                response = api_versions_unsupported_body(broker)
                chunks = codec.encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, response)
                if self._pending:
                    await self._drain()
                await self.write_chunks(chunks)
                broker.metrics.record_error("API_VERSIONS", "UNSUPPORTED_VERSION")
                return True
            log.info(
                "closing connection: unsupported API version",
                extra={"kv": {"peer": self.peer, "api": api_name(exc.api_key), "version": exc.version,
                              "client_id": exc.client_id}},
            )
            broker.metrics.record_close("unsupported_version")
            return False
        except UnknownApiKeyError as exc:
            log.info(
                "closing connection: unknown API key",
                extra={"kv": {"peer": self.peer, "api_key": exc.api_key, "version": exc.version}},
            )
            broker.metrics.record_close("unknown_api_key")
            return False
        except InvalidRequestError as exc:
            log.info("closing connection: invalid request", extra={"kv": {"peer": self.peer, "error": str(exc)}})
            broker.metrics.record_close("invalid_request")
            return False

        api_key = header.api_key
        pipelined = api_key == PRODUCE_KEY and self._pipelining()
        if self._pending and not pipelined:
            await self._drain()  # every other request waits for the pipelined produces before it: one at a time
        if (api_key == SASL_HANDSHAKE_KEY and self.sasl_authenticate_version >= 1 and self.listener is not None
                and self.listener.sasl):
            # KIP-368: a client (SaslAuthenticate v1+) re-authenticates on its connection with a new handshake
            return await self.authenticate(frame)
        if self.session_expires is not None and self._session_expired():
            return False
        handler = broker.handlers.get(api_key)
        name = api_name(api_key)
        if handler is None:
            log.info(
                "closing connection: no handler for API",
                extra={"kv": {"peer": self.peer, "api": name, "version": header.api_version}},
            )
            broker.metrics.record_close("unknown_api_key")
            return False
        ctx = RequestContext(
            broker=broker,
            api_key=api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            client_host=self.client_host,
            principal=self.principal,
            listener=self.listener_name,
            request_size=len(frame),
            defer=pipelined,
        )
        try:
            response = await handler(ctx, body)
        except Exception as exc:
            return await self._handler_failed(api_key, header, body, name, exc)
        if type(response) is DeferredResponse:
            return await self._defer(response, api_key, header.api_version, header.correlation_id, name, t0)
        if self._pending:
            await self._drain()  # answered now, but after the pipelined answers before it
        if broker.client_quotas.enabled:
            await self._throttle(ctx, response, t0)
        if response is not None:
            chunks = codec.encode_response(api_key, header.api_version, header.correlation_id, response)
            await self.write_chunks(chunks)
            if api_key not in _NO_ERROR_SCAN:
                self._record_errors(api_key, header.api_version, name, response)
        broker.metrics.record_request(name, time.perf_counter() - t0)
        return True

    def _record_errors(self, api_key: int, version: int, name: str, response: Any) -> None:
        errors: dict[int, int] = {}
        count = error_counter(api_key, version)
        if count is not None:
            try:
                count(response, errors)
            except (AttributeError, TypeError):  # a body not made of dicts: walk whatever it holds
                errors.clear()
                _count_errors(response, errors)
        for code, n in errors.items():
            self.broker.metrics.record_error(name, error_name(code), n)

    # -- pipelined produce -------------------------------------------------------------------------------------
    # An acks=all Produce on a plain connection whose appends are done answers with a DeferredResponse: it is
    # queued here and the loop reads the next request while it waits for the replicas. A single writer task
    # writes the queued answers strictly in request order; any other request (and any produce answered at once)
    # first waits until the queue is empty, so only produces overlap, and only their replication waits: every
    # append still happens before the next request is decoded. docs/decisions/0022-pipelined-produce.md.

    def _pipelining(self) -> bool:
        """May a Produce be answered later, with the next request read meanwhile? A plain connection with
        ``tidelog.produce.pipeline.max.requests`` > 1, and client quotas off (their throttle time and mute are applied
        on the request path, which a deferred answer's writer does not take)."""
        return self._pipeline_max > 1 and not self.broker.client_quotas.enabled

    async def _defer(self, deferred: DeferredResponse, api_key: int, version: int, correlation_id: int, name: str,
                     t0: float) -> bool:
        """Queue a deferred answer for the writer task; with pipeline_max answers pending, read nothing more
        until one is written. True: the connection goes on."""
        self._pending.append((deferred, api_key, version, correlation_id, name, t0))
        if self._writer is None:
            self._writer = self._loop.create_task(self._write_deferred(), name=f"deferred-writer-{self.peer}")
        while len(self._pending) >= self._pipeline_max:
            await self._wait_progress()
        return True

    async def _wait_progress(self) -> None:
        if self.closed:
            raise _ConnectionClosed()
        fut = self._progress
        if fut is None:
            fut = self._progress = self._loop.create_future()
        await fut

    def _wake_progress(self) -> None:
        fut, self._progress = self._progress, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _drain(self) -> None:
        """Wait until every pending pipelined answer is written (raises _ConnectionClosed if it cannot be)."""
        while self._pending:
            await self._wait_progress()
        if self.closed:
            raise _ConnectionClosed()

    async def _write_deferred(self) -> None:
        pending = self._pending
        metrics = self.broker.metrics
        try:
            while pending:
                deferred, api_key, version, correlation_id, name, t0 = pending[0]
                try:
                    result: Any = await deferred.op.wait()
                except Exception as exc:  # the operation failed: finish answers UNKNOWN_SERVER_ERROR for it
                    log.error("delayed operation failed", exc_info=exc, extra={"kv": {"peer": self.peer, "api": name}})
                    result = exc
                response = deferred.finish(result)
                chunks = codec.encode_response(api_key, version, correlation_id, response)
                await self.write_chunks(chunks)
                pending.popleft()
                self._record_errors(api_key, version, name, response)
                metrics.record_request(name, time.perf_counter() - t0)
                self.last_active = self._loop.time()
                if not pending and not self._in_request:
                    self.busy = False  # idle again: connections.max.idle.ms counts from here
                self._wake_progress()
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError, _ConnectionClosed) as exc:
            if not self.closed:
                log.info("connection error", extra={"kv": {"peer": self.peer, "error": repr(exc)}})
                metrics.record_close("io_error")
        except Exception:  # e.g. a response that cannot be encoded: this connection only
            log.exception("connection failed", extra={"kv": {"peer": self.peer}})
            metrics.record_close("internal_error")
        finally:
            self._writer = None
            if pending:  # not all written: the connection cannot go on (the request loop sees it closed)
                pending.clear()
                self.abort()
            self._wake_progress()

    async def _produce_fast(self, frame: memoryview | bytes, parsed: tuple, t0: float) -> bool:
        """The fast lane of :meth:`process`: a Produce request ``parse_produce`` recognised, run through
        :func:`~tidelog.broker.handlers.core.produce_one` (the Produce handler's own steps for one partition) and
        answered with ``encode_produce_response`` (the generic encoder's bytes). The session check, the handler
        failure answer, quotas and metrics are the generic path's."""
        broker = self.broker
        if self.session_expires is not None and self._session_expired():
            return False
        version, correlation_id, client_id, acks, timeout_ms, topic, index, records = parsed
        pipelined = self._pipelining()
        if self._pending and not pipelined:
            await self._drain()
        ctx = RequestContext(broker, PRODUCE_KEY, version, correlation_id, client_id, self.client_host, None,
                             self.principal, self.listener_name, len(frame), defer=pipelined)
        try:
            pr = await produce_one(ctx, acks, timeout_ms, topic, index, records)
        except Exception as exc:
            header = codec.RequestHeader(PRODUCE_KEY, version, correlation_id, client_id, 2 if version >= 9 else 1)
            body = {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
                    "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": records}]}]}
            return await self._handler_failed(PRODUCE_KEY, header, body, _PRODUCE_NAME, exc)
        if type(pr) is DeferredResponse:  # acks=-1 waiting for its replicas: pipelined, as in process
            return await self._defer(pr, PRODUCE_KEY, version, correlation_id, _PRODUCE_NAME, t0)
        if self._pending:
            await self._drain()  # answered now, but after the pipelined answers before it
        throttle = 0
        if broker.client_quotas.enabled:
            holder = {"throttle_time_ms": 0}
            await self._throttle(ctx, holder, t0)
            throttle = holder["throttle_time_ms"]
        data = _encode_produce(version, correlation_id, topic, pr, throttle)
        if data is not None:
            await self.write_chunks([data])
        else:  # something the C encoder does not write (e.g. record errors): the generic encoder
            response = produce_one_body(topic, pr, throttle)
            await self.write_chunks(codec.encode_response(PRODUCE_KEY, version, correlation_id, response))
        code = pr["error_code"]
        if code:
            broker.metrics.record_error(_PRODUCE_NAME, error_name(code))
        broker.metrics.record_request(_PRODUCE_NAME, time.perf_counter() - t0)
        return True

    def _session_expired(self) -> bool:
        """KIP-368: a request after the SASL session expired (without re-authentication) closes the connection."""
        if self._loop.time() <= self.session_expires:  # type: ignore[operator]
            return False
        log.info("closing connection: SASL session expired",
                 extra={"kv": {"peer": self.peer, "principal": self.principal}})
        self.broker.metrics.record_close("sasl_session_expired")
        return True

    async def _throttle(self, ctx: RequestContext, response: Any, t0: float) -> None:
        """Client quotas (broker/quotas.py, enabled): the throttle time goes into the response's
        ``throttle_time_ms``; the connection is muted after the response, or, for a client from before KIP-219,
        the response itself waits."""
        throttle = after_handler(self.broker.client_quotas, ctx, response, time.perf_counter() - t0)
        if throttle:
            self.mute_ms = throttle
            if not client_throttles(ctx.api_key, ctx.api_version):
                await self._mute()

    async def _handler_failed(self, api_key: int, header: Any, body: dict, name: str, exc: Exception) -> bool:
        if getattr(exc, "quiet", False):  # a handler's deliberate close (e.g. failed acks=0 produce)
            log.info("closing connection", extra={"kv": {"peer": self.peer, "api": name, "reason": str(exc)}})
            self.broker.metrics.record_close("handler_close")
            return False
        return await self._answer_failure(api_key, header, body, name, exc)

    async def _answer_failure(self, api_key: int, header: Any, body: dict, name: str, exc: Exception) -> bool:
        """A handler raised: answer UNKNOWN_SERVER_ERROR in the API's error response (Kafka's getErrorResponse)
        and keep the connection; an acks=0 produce has no response, so that connection is closed, as Kafka does."""
        broker = self.broker
        broker.metrics.record_error(name, "UNKNOWN_SERVER_ERROR")
        kv = {"peer": self.peer, "api": name, "version": header.api_version, "client_id": header.client_id}
        if api_key == PRODUCE_KEY and body.get("acks") == 0:
            log.exception("handler failed; closing connection (acks=0 produce)", extra={"kv": kv})
            broker.metrics.record_close("handler_error")
            return False
        log.exception("handler failed; answering UNKNOWN_SERVER_ERROR", extra={"kv": kv})
        if self._pending:
            await self._drain()
        try:
            # no exception text to the client (it is in the log above): Kafka's generic message
            response = error_response(api_key, header.api_version, body, UNKNOWN_SERVER_ERROR,
                                      UNKNOWN_SERVER_ERROR_MESSAGE)
            chunks = codec.encode_response(api_key, header.api_version, header.correlation_id, response)
        except Exception:
            log.exception("no error response could be built; closing connection", extra={"kv": kv})
            broker.metrics.record_close("handler_error")
            return False
        await self.write_chunks(chunks)
        return True


class TlsConnection(Connection):
    """A connection on an SSL or SASL_SSL listener: the TLS handshake first, then the same request loop over the
    ``SSLSocket``. Writes go through ``SSLSocket.send`` (no ``sendmsg``); file regions are read with
    ``os.preadv`` into a reused buffer and encrypted (no ``sendfile`` under TLS)."""

    _plain = False

    async def secure(self) -> bool:
        listener = self.listener
        assert listener is not None and listener.ssl_context is not None
        try:
            self.sock = listener.ssl_context.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
            while True:
                try:
                    self.sock.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._wait(False)
                except ssl.SSLWantWriteError:
                    await self._wait(True)
        except (ssl.SSLError, OSError) as exc:
            # Kafka: "Failed authentication with /<ip> (SSL handshake failed)"
            log.info("Failed authentication (SSL handshake failed)",
                     extra={"kv": {"peer": self.peer, "listener": listener.name, "error": str(exc)}})
            self.broker.metrics.record_close("ssl_handshake_failed")
            return False
        cert = self.sock.getpeercert()
        if cert:
            try:
                assert listener.principal_mapper is not None
                dn = subject_dn(cert)
                self.principal = "User:" + listener.principal_mapper.name(dn)
                log.info("TLS client authenticated", extra={"kv": {"peer": self.peer, "listener": listener.name,
                                                                   "dn": dn, "principal": self.principal}})
            except NoMatchingRule as exc:
                log.info("Failed authentication (no principal mapping rule)",
                         extra={"kv": {"peer": self.peer, "error": str(exc)}})
                self.broker.metrics.record_close("ssl_principal")
                return False
        return await super().secure()

    async def _recv_more(self, want: int) -> None:
        while True:
            if self.closed:
                raise _ConnectionClosed()
            try:
                # one TLS record (<= 16 KiB) per call whatever is asked: asking for more only makes ssl allocate
                # (and, past malloc's mmap threshold, map and unmap) a buffer of that size for each record
                data = self.sock.recv(_TLS_RECV)
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                await self._wait(False)
                continue
            except ssl.SSLWantWriteError:
                await self._wait(True)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise _ConnectionClosed() from None
            if not data:
                raise _ConnectionClosed()
            self._frames.feed(data)
            return

    async def _tls_send(self, data: memoryview) -> None:
        while data:
            try:
                n = self.sock.send(data)
            except (ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                await self._wait(True)
                continue
            except ssl.SSLWantReadError:
                await self._wait(False)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise _ConnectionClosed() from None
            data = data[n:]

    async def _send_buffers(self, bufs: list[Any]) -> None:
        views = [memoryview(b).cast("B") for b in bufs if len(b)]
        small: list[memoryview] = []
        small_len = 0
        for v in views:
            if len(v) >= _TLS_CHUNK:
                if small:
                    await self._tls_send(memoryview(b"".join(small)))
                    small, small_len = [], 0
                await self._tls_send(v)
            else:
                small.append(v)
                small_len += len(v)
                if small_len >= _TLS_CHUNK:
                    await self._tls_send(memoryview(b"".join(small)))
                    small, small_len = [], 0
        if small:
            await self._tls_send(memoryview(b"".join(small)) if len(small) > 1 else small[0])

    _region_buf: memoryview | None = None

    async def _send_region(self, fd: int, position: int, length: int) -> None:
        buf = self._region_buf
        if buf is None:  # one buffer per connection, reused (each chunk is fully sent before the next read)
            buf = self._region_buf = memoryview(bytearray(_TLS_CHUNK))
        while length > 0:
            n = os.preadv(fd, [buf[: min(length, len(buf))]], position)
            if n == 0:
                raise OSError(errno.EIO, f"file region hit end of file with {length} bytes left")
            await self._tls_send(buf[:n])
            position += n
            length -= n


def _flatten(chunks: Iterable[Any]) -> Iterable[Any]:
    for c in chunks:
        if isinstance(c, (bytes, bytearray, memoryview)) or hasattr(c, "fd"):
            yield c
        elif hasattr(c, "chunks"):
            yield from _flatten(c.chunks)
        else:
            raise TypeError(f"cannot send response chunk of type {type(c).__name__}")


def error_name(code: int) -> str:
    try:
        return error_for_code(code).name
    except Exception:
        return str(code)


def api_versions_unsupported_body(broker: Broker) -> dict:
    return {"error_code": 35, "api_keys": api_versions_list(broker.handlers), "throttle_time_ms": 0}


# ----------------------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------------------


def install_event_loop_policy(use_uvloop: bool = True) -> str:
    """uvloop when available (and wanted), else asyncio's default. Returns the name used."""
    if use_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            return "uvloop"
        except ImportError:
            pass
    asyncio.set_event_loop_policy(None)
    return "asyncio"


class ListenError(OSError):
    """A listener's address cannot be bound (in use, not an address of this host); the message names it."""

    def __str__(self) -> str:
        return str(self.strerror)


class SocketServer:
    """Kafka's SocketServer for one listener: binds, accepts, owns the connections, closes idle ones
    (``connections.max.idle.ms``) and, at shutdown, lets busy connections finish their response. The broker's
    listeners share one set of connections."""

    def __init__(self, broker: Any, listener: ListenerSettings, connections: set[Connection] | None = None) -> None:
        self.broker = broker
        self.listener = listener
        self.bind_host = listener.host or "0.0.0.0"
        self.bind_port = listener.port
        self.connections: set[Connection] = connections if connections is not None else set()
        self._conn_class = TlsConnection if listener.tls else Connection
        self._listen_sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._reaper_task: asyncio.Task[None] | None = None

    def _bound_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.bind_host, self.bind_port))
        except OSError as exc:
            sock.close()
            raise ListenError(exc.errno, f"cannot listen on {self.bind_host}:{self.bind_port} (listener "
                                         f"{self.listener.name}): {exc.strerror or exc}") from None
        return sock

    def check_free(self) -> None:
        """Before the broker opens its storage: raise :class:`ListenError` (naming the address) if the listener's
        port cannot be bound now, so a port in use stops the start before anything is written (the bind that
        counts comes after recovery, as Kafka's). A port of 0 is always free."""
        if self.bind_port:
            self._bound_socket().close()

    def bind(self) -> int:
        """Bind and listen (the port is known after this, even for port 0); returns the bound port."""
        config = self.broker.config
        sock = self._bound_socket()
        sock.listen(max(50, config.get("socket.listen.backlog.size")))
        sock.setblocking(False)
        self._listen_sock = sock
        self.bind_port = sock.getsockname()[1]
        return self.bind_port

    def start(self) -> None:
        """Start accepting (after :meth:`bind`) and the idle-connection reaper."""
        loop = asyncio.get_running_loop()
        self._accept_task = loop.create_task(self._accept_loop())
        self._reaper_task = loop.create_task(self._idle_reaper())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listen_sock is not None
        lsock = self._listen_sock
        broker = self.broker
        quotas = broker.connection_quotas
        # the inter-broker listener is exempt from max.connections when there are others (Kafka's
        # ConnectionQuotas.protectedListener); a broker's only listener is not
        exempt = self.listener.name == broker.config.listener.name and len(broker.config.listeners) > 1
        while not broker.stopping:
            if not exempt and quotas.total >= quotas.max_connections:
                await quotas.wait_for_slot()  # Kafka's Acceptor: stop accepting until a connection closes
                continue
            try:
                sock, addr = await loop.sock_accept(lsock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if broker.stopping:
                    return
                log.warning("accept failed", extra={"kv": {"error": repr(exc)}})
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    await asyncio.sleep(0.1)  # out of descriptors: back off instead of spinning
                continue
            ip = str(addr[0])
            try:
                quotas.inc(ip)
            except TooManyConnections as exc:
                log.info(str(exc), extra={"kv": {"peer": f"{ip}:{addr[1]}", "listener": self.listener.name}})
                broker.metrics.record_close("too_many_connections_per_ip")
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for opt, key in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                             (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
                size = broker.config.get(key)
                if size and size > 0:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, opt, size)
            peer = f"{addr[0]}:{addr[1]}"
            conn = self._conn_class(broker, sock, peer, self.listener)
            self.connections.add(conn)
            conn.task = loop.create_task(conn.run())
            conn.task.add_done_callback(lambda _t, ip=ip: quotas.dec(ip))

    async def _idle_reaper(self) -> None:
        """Close connections idle longer than ``connections.max.idle.ms`` (Kafka's Selector does the same)."""
        broker = self.broker
        idle_s = broker.config.connections_max_idle_ms / 1000.0
        if idle_s <= 0:
            return
        loop = asyncio.get_running_loop()
        period = min(max(idle_s / 10, 0.05), 30.0)
        while not broker.stopping:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self.connections):
                if conn.listener is not self.listener:
                    continue  # another listener's reaper
                if not conn.busy and now - conn.last_active > idle_s:
                    log.info("closing idle connection", extra={"kv": {"peer": conn.peer}})
                    broker.metrics.record_close("idle")
                    conn.abort()
                    continue
                blocked = conn.write_blocked_at
                if blocked is not None and now - blocked > idle_s:
                    # a response the peer has not read for that long (a client that never reads its Fetch
                    # answers): close, which drops the response and the file regions it holds, as Kafka's
                    # Selector expires a channel idle with a send pending
                    log.info("closing idle connection with an unsent response", extra={"kv": {"peer": conn.peer}})
                    broker.metrics.record_close("idle_unsent_response")
                    conn.abort()

    async def stop_accepting(self) -> None:
        for task in (self._accept_task, self._reaper_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._listen_sock is not None:
            self._listen_sock.close()

    async def close_connections(self, timeout: float = 10.0) -> None:
        """Idle connections (waiting for a request) close now; busy ones finish their response first."""
        for conn in list(self.connections):
            if not conn.busy:
                conn.abort()
        pending = [c.task for c in self.connections if c.task is not None]
        if pending:
            _, still = await asyncio.wait(pending, timeout=timeout)
            for t in still:
                t.cancel()
            if still:
                await asyncio.wait(still, timeout=1)
