"""The inline lane: a paced Produce answered in the reader callback, without waking the connection's task (issue 30).

Between requests a connection's task waits for the socket to be readable (``ConnectionIO._recv_more``): the loop's
reader callback resolves a future, the task wakes in a later step of the loop, unwinds its coroutines, reads, and
handles the request. For a client that sends one request at a time (a producer with ``linger.ms=0`` at a paced
rate), that machinery is a fixed cost per request on top of the work itself (``bench/wakeup_floor.py``: a uvloop
reader callback that answers by itself costs ~5 us less per request than one that wakes a task).

So, while the task waits between requests (no frame partly read, nothing pending, the request loop proper running),
the reader callback reads the socket itself, and a frame the Produce fast lane recognises
(:meth:`~tidelog.broker.produce_lane.ProduceLane._produce_fast`) is run right there: its coroutine is stepped from
the callback and, in the common case (the append inline, the answer sent at once), finishes without suspending,
so the task never wakes. What the callback cannot finish goes to the task, in order:

* a frame of any other kind: held (``ConnectionIO._held``) and read by the task's ``read_frame`` next, through the
  usual path (decode, dispatch);
* a fast-lane request that suspends (an append that waits for a worker or an earlier request, an acks=-1 that waits
  for its replicas, a response the socket cannot take at once): the suspended coroutine (:class:`_Continuation`)
  is finished by the task, which awaits whatever it was waiting for;
* a partial frame, a full read (more bytes may be waiting), end of stream or a recv error: the task reads on (the
  error is raised in it as if its own recv had failed).

Same steps, same order, same answers and metrics as the task's path: the callback runs the very coroutine the task
would, with the request loop's bookkeeping (busy, last_active, memory) around it. Not on TLS connections, during
SASL authentication, with client quotas (their throttle may mute the channel) or a bounded request memory pool
(``queued.max.request.bytes``: reads are then sized to the frame).
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any

from tidelog.broker.api_names import PRODUCE_KEY
from tidelog.broker.connection_io import _READ_CHUNK, ConnectionClosed, RequestEnded
from tidelog.broker.handlers.produce import produce
from tidelog.broker.produce_lane import ProduceLane, _parse_produce
from tidelog.protocol.exceptions import FrameTooLargeError


class _Continuation:
    """The rest of a coroutine the reader callback started and that suspended: awaited by the connection's task,
    it passes what the coroutine waits for up to the task and the task's wake-ups (and a cancellation) down to the
    coroutine, as ``await coro`` would have from the start."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, bool], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, Any, bool]:
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # thrown into the task (a cancellation): to the coroutine
                try:
                    waiting = coro.throw(exc)
                except StopIteration as stop:
                    return bool(stop.value)
            else:
                try:
                    waiting = coro.send(sent)
                except StopIteration as stop:
                    return bool(stop.value)


class InlineLane(ProduceLane):
    """The reader callback's share of a connection's requests (see the module docstring)."""

    fast_produce: bool
    #: False: every request goes through the task (the tests compare both ways)
    inline_lane = True
    #: requests answered entirely in the reader callback (for tests and benchmarks)
    inline_answered = 0
    _serving = False  # the request loop proper runs (after the listener's authentication)
    _cont: _Continuation | None = None  # a request the callback started, for the task to finish
    _ended = False  # a request the callback finished ended the connection

    def _inline_allowed(self) -> bool:
        broker = self.broker
        return (self._serving and self.inline_lane and self._plain and self.fast_produce and not self._pending and not self.closed
                and self.session_expires is None and not broker.client_quotas.enabled
                and not broker.request_memory.bounded and not broker.stopping)

    def _serve_inline(self) -> bool:
        try:
            return self._serve_readable()
        except Exception as exc:  # (e.g. a frame the C parser chokes on): raised in the task, which then closes
            self._recv_exc = exc
            return False

    def _serve_readable(self) -> bool:
        if not self._inline_allowed():  # (a request answered here left pipelined answers pending, say)
            self._maybe_empty = False  # the task reads
            return False
        try:
            data = self.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return True  # nothing after all
        except OSError as exc:
            self._recv_exc = exc
            return False
        if not data:
            self._recv_exc = ConnectionClosed()
            return False
        self._maybe_empty = len(data) < _READ_CHUNK
        frames = self._frames
        frames.feed(data)
        broker = self.broker
        while True:
            try:
                frame = frames.next_frame()
            except FrameTooLargeError:
                return False  # the task's read_frame meets it again and closes
            if frame is None:
                # nothing buffered and the socket emptied: wait on; else the task reads the rest
                return self._maybe_empty and not frames.in_frame
            parsed = _parse_produce(frame, broker.accepted_versions)
            if parsed is None or broker.handlers.get(PRODUCE_KEY) is not produce or not self._inline_allowed():
                self._held = frame
                return False
            t0 = time.perf_counter()
            self.busy = self._in_request = True
            self.last_active = self._loop.time()
            coro = self._produce_fast(frame, parsed, t0)
            del frame
            try:
                waiting = coro.send(None)
            except StopIteration as stop:
                keep = bool(stop.value)
            except BaseException as exc:  # raised in the task, as if its process() had raised it
                self._recv_exc = exc
                return False
            else:
                self._cont = _Continuation(coro, waiting)
                return False
            self._request_done()
            self.inline_answered += 1
            if not keep or broker.stopping:
                self._ended = True
                return False
            if self.mute_ms:
                return False  # (no quotas here, so no throttle: kept for safety) the task mutes

    def _request_done(self) -> None:
        """The request loop's bookkeeping after a request (Connection.run)."""
        self.release_memory()
        self._in_request = False
        self.busy = bool(self._pending)
        self.last_active = self._loop.time()

    async def _inline_woken(self) -> None:
        cont = self._cont
        if cont is not None:
            self._cont = None
            keep = await cont
            self._request_done()
            if not keep or self.broker.stopping:
                raise RequestEnded()
        if self._ended:
            self._ended = False
            raise RequestEnded()
        exc = self._recv_exc
        if exc is not None:
            self._recv_exc = None
            raise exc
        if self.mute_ms:
            await self._mute()
