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

Modules
    This module: :class:`SocketServer` (bind, accept, idle reaper, shutdown). A connection is
    :class:`~tidelog.broker.connection.Connection` (the request loop and dispatch) over
    :mod:`~tidelog.broker.produce_lane` (Produce fast lane, pipelining), :mod:`~tidelog.broker.authenticator`
    (SASL) and :mod:`~tidelog.broker.connection_io` (the socket); :mod:`~tidelog.broker.tls_connection` for TLS.

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
    logged and answered with the API's error response, one entry per topic/partition/group the request named
    (``tidelog.protocol.error_response``): the exception's own Kafka error when it names one (``ApiError``, e.g.
    REQUEST_TIMED_OUT when ZooKeeper does not answer in time), else UNKNOWN_SERVER_ERROR; the connection stays
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
import functools
import logging
import socket
from typing import TYPE_CHECKING

from tidelog.broker.api_names import api_name, api_versions_unsupported_body, error_name
from tidelog.broker.connection import Connection
from tidelog.broker.connection_io import ConnectionClosed
from tidelog.broker.connection_limits import ConnectionQuotas, TooManyConnections
from tidelog.broker.handlers.produce import produce_one
from tidelog.broker.produce_lane import _encode_produce, _parse_produce
from tidelog.broker.security.listeners import ListenerSettings
from tidelog.broker.tls_connection import TlsConnection
from tidelog.protocol import codec

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.server")

# where they were before the connection was split into its modules (tests and bench/ use them from here)
_ConnectionClosed = ConnectionClosed
__all__ = [
    "Connection",
    "ListenError",
    "SocketServer",
    "TlsConnection",
    "_encode_produce",
    "_parse_produce",
    "api_name",
    "api_versions_unsupported_body",
    "codec",
    "error_name",
    "install_event_loop_policy",
    "produce_one",
]


def _connection_ended(quotas: ConnectionQuotas, ip: str, _task: asyncio.Task[None]) -> None:
    quotas.dec(ip)


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

    def __init__(self, broker: Broker, listener: ListenerSettings, connections: set[Connection] | None = None) -> None:
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
            if not exempt and quotas.total >= quotas.max_connections:
                # the limit fell while this accept was pending (a dynamic max.connections): hold the connection
                # unserved until a slot frees, as Kafka's ConnectionQuotas.inc blocks after the accept
                try:
                    await quotas.wait_for_slot()
                except BaseException:
                    with contextlib.suppress(OSError):
                        sock.close()
                    raise
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
            conn.task.add_done_callback(functools.partial(_connection_ended, quotas, ip))

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
