"""The torn-transaction fault of Jepsen's Bufstream analysis: a transactional client's EndTxn(COMMIT) of
transaction N held on the wire until transaction N+1 of the same producer has written, then delivered.

Clients reach the brokers through one ``TornProxy`` per broker (the brokers advertise the proxies on the listener
the clients use). All proxies share one ``Torn`` state machine on one asyncio loop (a daemon thread):

1. ``arm(txn_id)``: the next EndTxn with ``committed=true`` of that transactional id (any, when None) is **held**:
   not forwarded, and nothing more is read from that client connection (a TCP stream stalled on a dead path: the
   client sees no answer, times out -- librdkafka ``socket.timeout.ms``, Java ``request.timeout.ms`` --, drops
   the connection and sends the EndTxn again on a new one);
2. the **retry** passes (its answer is noted: NONE means transaction N committed);
3. the first Produce of that transactional id after the retry's answer (transaction N+1's first write) passes;
   when its answer comes back, and before it is forwarded, every proxy stops forwarding requests, the held
   EndTxn bytes are written to the coordinator on a fresh connection (the "first copy, late") and its answer
   read; then everything flows again. So the late EndTxn lands exactly when N+1 has records in the log and
   the client has not gone further.

Under transactions version 1 (EndTxn <= v4: librdkafka 2.16, Java 3.9) the coordinator cannot tell the late copy
from N+1's own commit: it answers NONE and commits what N+1 had written so far. Under version 2 (EndTxn v5,
KIP-890 part 2: Java 4.x) the epoch moved on with N's commit and the late copy is refused (PRODUCER_FENCED).
Each delivered fault is listed in ``Torn.done`` (``injected``: the late copy's EndTxn version and error code).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.records.varint import decode_unsigned_varint as _uvarint

PRODUCE, END_TXN = 0, 26
NONE, PRODUCER_FENCED = 0, 90
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def _faultproxy() -> Any:
    """tests/cluster/faultproxy.py (its frame reader and its proxies' loop), loaded by path: this module also runs
    outside pytest (bench/jepsen.py --torn). The same module object as tests/cluster's conftest loads."""
    mod = sys.modules.get("tidelog_test_faultproxy")
    if mod is None:
        spec = importlib.util.spec_from_file_location(
            "tidelog_test_faultproxy", Path(__file__).resolve().parents[1] / "cluster" / "faultproxy.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["tidelog_test_faultproxy"] = mod
        spec.loader.exec_module(mod)
    return mod


_read_frame = _faultproxy()._read_frame
_Loop = _faultproxy()._Loop
_ProxyServer = _faultproxy().ProxyServer
# the first flexible (compact strings, tagged fields) version of each request parsed here
_FLEXIBLE = {PRODUCE: 9, END_TXN: 3}


def _skip_tags(b: bytes, i: int) -> int:
    n, i = _uvarint(b, i)
    for _ in range(n):
        _tag, i = _uvarint(b, i)
        size, i = _uvarint(b, i)
        i += size
    return i


def parse_request(frame: bytes) -> tuple[int, int, int, str | None, bytes, int] | None:
    """(api key, version, correlation id, transactional id, body, body start) of a Produce (v3+) or EndTxn
    request frame (size prefix included); None for any other request."""
    if len(frame) < 14:
        return None
    key, version = struct.unpack_from(">hh", frame, 4)
    if key not in (PRODUCE, END_TXN) or (key == PRODUCE and version < 3):
        return None
    (corr,) = _I32.unpack_from(frame, 8)
    (n,) = _I16.unpack_from(frame, 12)
    i = 14 + max(n, 0)
    flexible = version >= _FLEXIBLE[key]
    if flexible:
        i = _skip_tags(frame, i)
    if flexible:
        size, i = _uvarint(frame, i)
        size -= 1
    else:
        (size,) = _I16.unpack_from(frame, i)
        i += 2
    tid = frame[i:i + size].decode("utf-8", "replace") if size >= 0 else None
    i += max(size, 0)
    return key, version, corr, tid, frame, i


def end_txn_fields(frame: bytes, body_at: int) -> tuple[int, int, bool]:
    """(producer id, producer epoch, committed) of an EndTxn request; ``body_at``: after the transactional id."""
    pid, epoch, committed = struct.unpack_from(">qhb", frame, body_at)
    return pid, epoch, bool(committed)


def response_error(frame: bytes, key: int, version: int) -> int:
    """The top-level error code of an EndTxn answer (throttle time, then the error code)."""
    i = 8 + (1 if version >= _FLEXIBLE.get(key, 99) else 0) + 4  # size, correlation, [tags], throttle_time_ms
    return int(_I16.unpack_from(frame, i)[0]) if len(frame) >= i + 2 else -1


@dataclass
class Delivery:
    """One torn-transaction fault, from arming to the late copy's answer."""

    txn_id: str | None
    armed_at: float = field(default_factory=time.monotonic)
    state: str = "armed"  # armed -> held -> retried -> injected | expired
    held_txn_id: str | None = None
    producer_id: int = -1
    epoch: int = -1
    end_txn_version: int = -1
    retry_error: int | None = None
    retry_epoch_answer: int | None = None
    injected_error: int | None = None
    next_txn_produce_version: int = -1
    events: list[tuple[float, str]] = field(default_factory=list)
    injecting: bool = False
    _frame: bytes = b""
    _target: tuple[str, int] = ("", 0)

    def note(self, what: str) -> None:
        self.events.append((round(time.monotonic() - self.armed_at, 3), what))

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class Torn:
    """The shared state of a run's proxies: at most one fault in progress."""

    def __init__(self, expire_s: float = 90.0, gate_s: float = 20.0) -> None:
        self.expire_s, self.gate_s = expire_s, gate_s
        self.current: Delivery | None = None
        self.done: list[Delivery] = []
        self.on_done: Callable[[Delivery], None] | None = None  # called on the proxies' loop thread
        # called (on that thread) when N's retried commit succeeded, before its answer reaches the client
        self.on_retried: Callable[[Delivery], None] | None = None
        self.end_txn_versions: dict[int, int] = {}  # EndTxn requests seen per version (all clients)
        self._flow: asyncio.Event | None = None
        self._lock = threading.Lock()

    # -- caller's thread ------------------------------------------------------------------------------------

    def arm(self, txn_id: str | None = None) -> bool:
        """Hold the next EndTxn(COMMIT) of ``txn_id`` (any transactional id when None); False if one is already
        in progress (not expired)."""
        with self._lock:
            cur = self.current
            if cur is not None and time.monotonic() - cur.armed_at < self.expire_s:
                return False
            if cur is not None:
                self._finish(cur, "expired")
            self.current = Delivery(txn_id)
            return True

    def disarm(self) -> Delivery | None:
        """End the fault in progress (a held frame is dropped: its client's connection is already dead)."""
        with self._lock:
            cur = self.current
            if cur is not None:
                self._finish(cur, "expired")
        if self._flow is not None:
            _Loop.get().call_soon_threadsafe(self._flow.set)
        return cur

    def wait_done(self, n: int, timeout: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(self.done) < n and time.monotonic() < deadline:
            time.sleep(0.05)  # polled from the test's thread; the deliveries happen on the proxies' loop
        return list(self.done)

    def _finish(self, d: Delivery, state: str) -> None:
        d.state = state
        d.note(state)
        self.current = None
        self.done.append(d)
        if self.on_done is not None:
            with contextlib.suppress(Exception):
                self.on_done(d)

    # -- the proxies' loop ----------------------------------------------------------------------------------

    def flow(self) -> asyncio.Event:
        if self._flow is None:
            self._flow = asyncio.Event()
            self._flow.set()
        return self._flow

    def on_request(self, p: tuple[int, int, int, str | None, bytes, int], target: tuple[str, int]) -> str:
        """What to do with a client's Produce/EndTxn request: ``hold``, ``retry`` (forward, watch the answer),
        ``next`` (forward, inject before its answer goes back) or ``pass``."""
        key, version, _corr, tid, frame, at = p
        if key == END_TXN:
            self.end_txn_versions[version] = self.end_txn_versions.get(version, 0) + 1
        with self._lock:
            d = self.current
            if d is None or tid is None:
                return "pass"
            if key == END_TXN:
                pid, epoch, committed = end_txn_fields(frame, at)
                if d.state == "armed" and committed and d.txn_id in (None, tid):
                    d.state, d.held_txn_id, d.producer_id, d.epoch = "held", tid, pid, epoch
                    d.end_txn_version, d._frame, d._target = version, frame, target
                    d.note(f"held EndTxn v{version} commit pid {pid} epoch {epoch}")
                    return "hold"
                if d.state == "held" and tid == d.held_txn_id:
                    d.note(f"retry EndTxn v{version} commit={committed} epoch {epoch}")
                    return "retry"
            elif key == PRODUCE and d.state == "retried" and tid == d.held_txn_id:
                d.state = "injecting"
                d.next_txn_produce_version = version
                d.note(f"next transaction's first Produce v{version}")
                return "next"
        return "pass"

    def on_retry_answer(self, frame: bytes, version: int) -> None:
        with self._lock:
            d = self.current
            if d is None or d.state != "held":
                return
            d.retry_error = response_error(frame, END_TXN, version)
            if version >= 5 and len(frame) >= 8 + 1 + 4 + 2 + 8 + 2:
                d.retry_epoch_answer = int(_I16.unpack_from(frame, 8 + 1 + 4 + 2 + 8)[0])
            d.note(f"retry answered error {d.retry_error}")
            if d.retry_error == NONE:
                d.state = "retried"
                if self.on_retried is not None:
                    with contextlib.suppress(Exception):
                        self.on_retried(d)
            else:  # the commit failed: the client aborts or gives up; the held copy would meet no open N+1
                self._finish(d, "expired")

    def next_answer_ok(self, frame: bytes, key: int, version: int) -> bool:
        """N+1's first Produce was answered: inject now if it wrote (every partition NONE). Refused -- e.g.
        CONCURRENT_TRANSACTIONS while N's commit is still being completed (its markers: state PrepareCommit), when
        the implicit add to N+1 is not possible yet -- nothing of N+1 is in the log: wait for its next Produce (the
        client retries), everything flowing meanwhile."""
        from tidelog.protocol import codec

        try:
            _corr, body = codec.decode_response(key, version, frame[4:])
            errors = [int(p.get("error_code", 0)) for t in body.get("responses") or ()
                      for p in t.get("partition_responses") or ()]
        except Exception:
            return True  # not decodable here: inject as before
        if not any(errors):
            return True
        d = self.current
        if d is not None and d.state == "injecting" and not d.injecting:
            with self._lock:
                d.state = "retried"
            d.note(f"next transaction's first Produce answered {sorted(set(errors))}: waiting for its retry")
        self.flow().set()
        return False

    def give_up(self, d: Delivery | None) -> None:
        """N+1's first write got no answer in ``gate_s`` (a fault elsewhere): let everything flow, drop the fault."""
        if d is not None and d is self.current and d.state == "injecting" and not d.injecting:
            d.note("next transaction's first Produce not answered: given up")
            with self._lock:
                self._finish(d, "expired")
            self.flow().set()

    async def inject(self) -> None:
        """Deliver the held EndTxn to its broker on a new connection, with every proxy's requests stopped."""
        d = self.current
        if d is None or d.state != "injecting":
            return
        d.injecting = True
        flow = self.flow()
        flow.clear()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*d._target), 10)
            try:
                writer.write(d._frame)
                await writer.drain()
                answer = await asyncio.wait_for(_read_frame(reader), 30)
            finally:
                writer.close()
            d.injected_error = response_error(answer, END_TXN, d.end_txn_version) if answer else -1
            d.note(f"late EndTxn answered error {d.injected_error}")
            with self._lock:
                self._finish(d, "injected")
        except (TimeoutError, OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
            d.note(f"late EndTxn not delivered: {exc!r}")
            with self._lock:
                self._finish(d, "expired")
        finally:
            flow.set()


class FrameProxy(_ProxyServer):  # type: ignore[misc,valid-type]  # faultproxy is loaded by path
    """A TCP proxy between Kafka clients and one broker, frame by frame: listens on ``listen`` (host, port 0 = any),
    forwards to ``target`` (settable before traffic flows); per connection, ``_requests`` and ``_responses``
    (subclasses') share a dict keyed by correlation id. Listening and stopping are faultproxy's ``ProxyServer``.
    Also the base of tests/broker/txn/leaderloss_proxy.py."""

    def __init__(self, listen: tuple[str, int] = ("127.0.0.1", 0), target: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.listen, self.target = listen, target
        self.port = 0
        self._server = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"{self.listen[0]}:{self.port}"

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # a test's cleanup: the proxy may be gone with its loop
            super().stop()

    def _abort_connections(self) -> None:
        for w in list(self._writers):
            w.transport.abort()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            sreader, swriter = await asyncio.wait_for(asyncio.open_connection(*self.target), 15)
        except (TimeoutError, OSError):
            cwriter.transport.abort()
            return
        for w in (cwriter, swriter):
            self._writers.add(w)
            with contextlib.suppress(Exception):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        shared: dict[int, Any] = {}  # correlation id -> what the request side noted for its answer
        tasks = [asyncio.create_task(self._requests(creader, swriter, shared)),
                 asyncio.create_task(self._responses(sreader, cwriter, shared))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for w in (cwriter, swriter):
                w.transport.abort()
                self._writers.discard(w)

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, shared: Any) -> None:
        raise NotImplementedError

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, shared: Any) -> None:
        raise NotImplementedError


class TornProxy(FrameProxy):
    """The torn fault's proxy: requests and answers watched by ``torn`` (watch: correlation id -> (what, api key,
    version))."""

    def __init__(self, torn: Torn, listen: tuple[str, int] = ("127.0.0.1", 0),
                 target: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        super().__init__(listen, target)
        self.torn = torn

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        watch: dict[int, tuple[str, int, int]]) -> None:
        flow = self.torn.flow()
        with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
            while True:
                frame = await _read_frame(reader)
                if frame is None:
                    return
                p = parse_request(frame)
                what = "pass"
                if p is not None:
                    what = self.torn.on_request(p, self.target)
                    if what == "hold":  # the stream stalls here (nothing more reaches the broker) until the
                        while await reader.read(65536):  # client gives up and closes the connection
                            pass
                        return
                    if what in ("retry", "next"):
                        watch[p[2]] = (what, p[0], p[1])
                if what == "next":
                    # nothing else moves until the late EndTxn is in: N+1 goes no further than this first write
                    # (an AddOffsetsToTxn sent meanwhile reaches the coordinator after the late copy)
                    flow.clear()
                    d = self.torn.current
                    asyncio.get_running_loop().call_later(self.torn.gate_s, self.torn.give_up, d)
                else:
                    await flow.wait()
                writer.write(frame)
                await writer.drain()

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         watch: dict[int, tuple[str, int, int]]) -> None:
        with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
            while True:
                frame = await _read_frame(reader)
                if frame is None:
                    return
                if watch and len(frame) >= 8:
                    w = watch.pop(_I32.unpack_from(frame, 4)[0], None)
                    if w is not None and w[0] == "retry":
                        self.torn.on_retry_answer(frame, w[2])
                    elif w is not None and w[0] == "next" and self.torn.next_answer_ok(frame, w[1], w[2]):
                        await self.torn.inject()
                writer.write(frame)
                await writer.drain()
