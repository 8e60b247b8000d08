"""A fault-injecting TCP proxy for the cluster tests: network faults without root or iptables.

One ``FaultProxy`` listens on a free 127.0.0.1 port and forwards each accepted connection to its target
(a broker's real port, or ZooKeeper). Every proxy runs on one shared asyncio loop in a daemon thread; the test
thread changes modes through blocking calls that return once the new mode is in force.

Modes of a link (``set_mode``), applied to existing connections and to new ones:

* ``pass`` -- bytes flow both ways.
* ``blackhole`` -- connections are accepted but nothing moves in either direction: the proxy stops reading
  both sockets, so data piles up in the kernel buffers as it does when packets are dropped on a partitioned
  link. Nothing is closed; when the link is healed, whatever is still buffered flows again (as TCP
  retransmission would deliver it), unless an end gave up and closed meanwhile.
* ``close`` -- every connection is aborted at once and new ones are closed right after accept (the peer
  sees a reset / EOF, like a refused or killed link).

Kafka links (``kafka=True``) parse the size-prefixed frames in both directions:

* the first request names the connection's ``client_id``; ``set_client_mode(prefix, mode)`` overrides the
  link mode for connections whose client id starts with ``prefix`` (tidelog's followers fetch as
  ``tidelog-replica-<id>``, so one broker's outgoing replication can be cut on the others' proxies while
  clients still pass);
* ``drop_responses(fraction, api_keys)``: responses are matched to requests by correlation id; for a response
  of one of ``api_keys`` the proxy draws a random number and, for ``fraction`` of them, closes both sides
  instead of forwarding it. The request reached the broker and was processed; the client only learns that
  the connection died, so it retries something the broker already has.
* ``corrupt_fetches(fraction, client_prefix)``: for ``fraction`` of the Fetch responses carrying records on
  connections whose client id starts with ``client_prefix`` (``tidelog-replica-``: followers' fetches), the
  response is decoded, one bit is flipped in the records of one batch (within what its CRC-32C covers: from the
  attributes on, preferably in the records after the 61-byte header; the fields before the CRC are not
  checksummed in Kafka's format, so no receiver could tell a flip there), and it is re-encoded and forwarded.

Counters (``requests``, ``responses``, ``dropped``: per API key) let a test assert that faults really
happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Coroutine, Iterable
from typing import Any, Self

from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey

PASS, BLACKHOLE, CLOSE = "pass", "blackhole", "close"
_MODES = (PASS, BLACKHOLE, CLOSE)
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hhih")  # request header v1+: api_key, api_version, correlation_id, client_id length
_MAX_FRAME = 256 << 20
FETCH = ApiKey.FETCH
_CRC_FROM = 21  # a v2 batch's CRC-32C covers its bytes from the attributes (offset 21) to its end
_HEADER = 61  # v2 batch header size: the records follow


class _Loop:
    """The one asyncio loop (daemon thread) all proxies of the test process run on."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="faultproxy", daemon=True).start()
                cls._loop = loop
            return cls._loop

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, cls.get()).result(timeout)


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One size-prefixed frame, prefix included; None at a clean EOF between frames."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    (size,) = _I32.unpack(head)
    if size < 0 or size > _MAX_FRAME:
        raise ConnectionError(f"bad frame size {size}")
    return head + await reader.readexactly(size)


class ProxyServer:
    """A proxy's listening socket on the shared loop: ``start`` listens on ``listen`` (port 0: any free one) and sets
    ``port``; ``stop`` closes it and aborts every connection still open (``_abort_connections``). The base of
    FaultProxy and of tests/jepsen/tornproxy.py's FrameProxy."""

    listen: tuple[str, int] = ("127.0.0.1", 0)
    port = 0
    _server: asyncio.AbstractServer | None = None

    def start(self) -> Self:
        async def start() -> None:
            self._on_loop()
            self._server = await asyncio.start_server(self._handle, self.listen[0], self.listen[1])
            self.port = self._server.sockets[0].getsockname()[1]

        _Loop.run(start())
        return self

    def stop(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            self._abort_connections()

        _Loop.run(stop(), timeout=10)

    def _on_loop(self) -> None:
        """Made on the loop when the proxy starts (asyncio objects bound to it)."""

    def _abort_connections(self) -> None:
        raise NotImplementedError

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class _Conn:
    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.client_id: str | None = None
        self.inflight: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version) awaiting a response
        self.writers: list[asyncio.StreamWriter] = []
        self.task: asyncio.Task[None] | None = None

    def mode(self) -> str:
        return self.proxy._mode_for(self.client_id)

    async def flowing(self) -> bool:
        """Wait while the connection is blackholed; False when it must be closed."""
        while True:
            m = self.mode()
            if m == PASS:
                return True
            if m == CLOSE:
                return False
            await self.proxy._changed.wait()  # set (and replaced) on every mode change

    def note_request(self, frame: bytes) -> None:
        if len(frame) < 4 + _HEAD.size:
            return
        api_key, version, correlation, n = _HEAD.unpack_from(frame, 4)
        if self.client_id is None:
            start = 4 + _HEAD.size
            self.client_id = frame[start:start + n].decode("utf-8", "replace") if n > 0 else ""
        self.inflight[correlation] = (api_key, version)
        self.proxy.requests[api_key] += 1

    def abort(self) -> None:
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class FaultProxy(ProxyServer):
    """``FaultProxy(port_of_target)`` then ``start()``; ``port`` is where clients connect."""

    def __init__(self, target_port: int = 0, target_host: str = "127.0.0.1", *, kafka: bool = True,
                 name: str = "") -> None:
        self.target_host, self.target_port = target_host, target_port  # the port may be set after start()
        self.kafka, self.name = kafka, name
        self.port = 0
        self.mode = PASS
        self.client_modes: dict[str, str] = {}
        self.drop_fraction = 0.0
        self.drop_api_keys: frozenset[int] = frozenset({0})
        self.rng = random.Random(0)
        self.requests: Counter[int] = Counter()
        self.responses: Counter[int] = Counter()
        self.dropped: Counter[int] = Counter()
        self.corrupt_fraction = 0.0
        self.corrupt_prefix = "tidelog-replica-"
        self.corrupted: list[tuple[str, str, int, int]] = []  # (client id, topic, partition, fetch response offset)
        self.accepted = 0
        self._conns: set[_Conn] = set()
        self._server = None
        self._changed: asyncio.Event = None  # type: ignore[assignment]  # made on the loop

    def __repr__(self) -> str:
        return (f"FaultProxy({self.name or ''} :{self.port} -> {self.target_host}:{self.target_port}, mode={self.mode}, "
                f"clients={self.client_modes}, drop={self.drop_fraction})")

    # -- test thread API -------------------------------------------------------------------------------

    def _on_loop(self) -> None:
        self._changed = asyncio.Event()

    def _abort_connections(self) -> None:
        for c in list(self._conns):
            c.abort()
        self._conns.clear()

    def set_mode(self, mode: str) -> None:
        assert mode in _MODES, mode
        self._apply(lambda: setattr(self, "mode", mode))

    def set_client_mode(self, prefix: str, mode: str | None) -> None:
        """Connections whose client id starts with ``prefix`` get ``mode`` (None: the link's mode again)."""
        assert mode is None or mode in _MODES, mode

        def change() -> None:
            if mode is None:
                self.client_modes.pop(prefix, None)
            else:
                self.client_modes[prefix] = mode

        self._apply(change)

    def drop_responses(self, fraction: float, api_keys: Iterable[int] = (0,), seed: int | None = 0) -> None:
        """Close the connection instead of forwarding ``fraction`` of the responses to ``api_keys``
        (0 = Produce)."""

        def change() -> None:
            self.drop_fraction = fraction
            self.drop_api_keys = frozenset(api_keys)
            self.rng = random.Random(seed)

        self._apply(change)

    def corrupt_fetches(self, fraction: float, client_prefix: str = "tidelog-replica-", seed: int | None = 0) -> None:
        """Flip one bit in the records of ``fraction`` of the Fetch responses (with records) to clients whose id
        starts with ``client_prefix``."""

        def change() -> None:
            self.corrupt_fraction, self.corrupt_prefix = fraction, client_prefix
            self.rng = random.Random(seed)

        self._apply(change)

    def heal(self) -> None:
        def change() -> None:
            self.mode, self.drop_fraction, self.corrupt_fraction = PASS, 0.0, 0.0
            self.client_modes.clear()

        self._apply(change)

    def _apply(self, change: Any) -> None:
        async def apply() -> None:
            change()
            for c in list(self._conns):
                if c.mode() == CLOSE:
                    c.abort()
            self._changed.set()
            self._changed = asyncio.Event()

        _Loop.run(apply())

    # -- on the loop -----------------------------------------------------------------------------------

    def _mode_for(self, client_id: str | None) -> str:
        if client_id is not None:
            for prefix, m in self.client_modes.items():
                if client_id.startswith(prefix):
                    return m
        return self.mode

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        conn = _Conn(self)
        conn.task = asyncio.current_task()
        conn.writers.append(cwriter)
        self._conns.add(conn)
        self.accepted += 1
        tasks: list[asyncio.Task[None]] = []
        try:
            with contextlib.suppress(Exception):
                cwriter.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            first = None
            if self.kafka:
                # the first request names the client (needed to pick the mode); it is held until the mode lets it go
                if conn.mode() == CLOSE:
                    return
                first = await _read_frame(creader)
                if first is None:
                    return
                conn.note_request(first)
            if not await conn.flowing():
                return
            sreader, swriter = await asyncio.open_connection(self.target_host, self.target_port)
            conn.writers.append(swriter)
            if first is not None:
                swriter.write(first)
            if self.kafka:
                tasks = [asyncio.create_task(self._kafka_requests(conn, creader, swriter)),
                         asyncio.create_task(self._kafka_responses(conn, sreader, cwriter))]
            else:
                tasks = [asyncio.create_task(self._raw(conn, creader, swriter)),
                         asyncio.create_task(self._raw(conn, sreader, cwriter))]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            conn.abort()
            self._conns.discard(conn)

    def _maybe_corrupt(self, client_id: str, version: int, frame: bytes) -> bytes:
        """A Fetch response frame, with one bit flipped in one batch for ``corrupt_fraction`` of those carrying
        records."""
        try:
            correlation, body = codec.decode_response(FETCH, version, frame[4:])
        except Exception:  # not a Fetch answer this codec reads: forwarded untouched
            return frame
        found = [(t, part) for t in body.get("responses") or () for part in t.get("partitions") or ()
                 if part.get("records") is not None and len(part["records"]) > _HEADER]
        if not found or self.rng.random() >= self.corrupt_fraction:
            return frame
        t, part = found[self.rng.randrange(len(found))]
        records = bytearray(part["records"])
        (batch_length,) = _I32.unpack_from(records, 8)
        end = min(len(records), 12 + batch_length)
        start = _HEADER if end > _HEADER else _CRC_FROM
        pos = self.rng.randrange(start, end)
        records[pos] ^= 1 << self.rng.randrange(8)
        part["records"] = bytes(records)
        (base_offset,) = struct.unpack_from(">q", records, 0)
        self.corrupted.append((client_id, t.get("topic") or "", part.get("partition_index", -1), base_offset))
        return b"".join(bytes(c) for c in codec.encode_response(FETCH, version, correlation, body))

    async def _raw(self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while await conn.flowing():
                data = await reader.read(65536)
                if not data or not await conn.flowing():
                    return
                writer.write(data)
                await writer.drain()

    async def _kafka_requests(self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
            while await conn.flowing():
                frame = await _read_frame(reader)
                if frame is None or not await conn.flowing():
                    return
                conn.note_request(frame)
                writer.write(frame)
                await writer.drain()

    async def _kafka_responses(self, conn: _Conn, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
            while await conn.flowing():
                frame = await _read_frame(reader)
                if frame is None or not await conn.flowing():
                    return
                (correlation,) = _I32.unpack_from(frame, 4) if len(frame) >= 8 else (-1,)
                api_key, version = conn.inflight.pop(correlation, (-1, -1))
                if (api_key == FETCH and self.corrupt_fraction > 0 and conn.client_id is not None
                        and conn.client_id.startswith(self.corrupt_prefix)):
                    frame = self._maybe_corrupt(conn.client_id, version, frame)
                if (api_key in self.drop_api_keys and self.drop_fraction > 0
                        and self.rng.random() < self.drop_fraction):
                    self.dropped[api_key] += 1
                    return  # the handler closes both sides: the client never sees this response
                self.responses[api_key] += 1
                writer.write(frame)
                await writer.drain()
