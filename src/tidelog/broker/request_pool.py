"""Request execution off the network loop: Kafka's request handler threads, for Python.

Kafka splits a broker into network threads (``SocketServer``'s processors: read frames, queue requests, write
responses) and request handler threads (``KafkaRequestHandlerPool``, ``num.io.threads``: decompression,
validation, appends, admin work). tidelog's equivalent (see docs/decisions/0021-request-execution.md):

* the asyncio event loop is the network thread: it frames, decodes, dispatches and sends, and runs handlers
  whose work is small (most requests: a dict lookup, a small append, a sendfile);
* :class:`RequestHandlerPool` (``num.io.threads`` worker threads) runs the work whose cost depends on what a
  client sent and can be large: decompression and validation of compressed (or large) produce batches, topic
  creation and deletion (directories, files, fsyncs, checkpoints). Handlers ``await`` it, so their
  connection's next request still waits (one request per connection at a time, as Kafka's muted channel) while
  every other connection is served;
* :class:`AppendSequencer` keeps each partition's appends in the order their requests reached the broker, even
  when an earlier request's validation runs on a worker and a later one's is answered on the loop.

The GIL: the work moved to the threads spends its time in C code that releases it (zlib, zstandard, lz4 and
cramjam while they inflate; ``_recwalk``'s CRC-32C and record walk over 64 KiB), so the loop keeps running
Python while a worker decompresses.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class RequestHandlerPool:
    """``num.io.threads`` worker threads for request work too heavy for the loop."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, int(threads))
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="tidelog-request-handler")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a worker thread; the caller's coroutine waits, the loop does not."""
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **kwargs) if kwargs else fn
        return await loop.run_in_executor(self._executor, call, *(() if kwargs else args))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=False)

    def resize(self, threads: int) -> None:
        """A new ``num.io.threads`` (a dynamic broker config): new work goes to a pool of that size; the old
        pool's threads finish what they run and exit (Kafka's ``KafkaRequestHandlerPool.resizeThreadPool``).
        Safe from one of the pool's own threads (the old pool is not waited for)."""
        threads = max(1, int(threads))
        if threads == self.threads:
            return
        old = self._executor
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="tidelog-request-handler")
        self.threads = threads
        old.shutdown(wait=False, cancel_futures=False)


HEAVY_NICE = 10  # added to a heavy validation thread's nice value (CFS weight ~1/10 of a nice-0 thread)


def _lower_priority(nice: int) -> None:
    """Thread initializer: this thread's nice value raised by ``nice`` (Linux: per thread; anyone may)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError:  # not permitted here: run at the normal priority
        pass


def default_heavy_slots() -> int:
    """Heavy validations in flight by default: half the cores, at least one (on the 2-core VM: one, which keeps
    a core for the network loop; each heavy validation keeps one core busy while it inflates)."""
    return max(1, (os.cpu_count() or 2) // 2)


class DecompressionBudget:
    """Broker-wide bound on decompression work in flight (issue 24; docs/decisions/0035-decompression-budget.md).

    A produce request's batches are first validated with at most ``unbudgeted_bytes`` of decompressed output in
    total (the light pass: every ordinary request fits, and runs on any free worker as before). The batches that
    would inflate past it are validated again under one of ``slots`` *heavy slots*: at most ``slots`` such
    validations run at once, across all connections; the other requests wait for a slot on the loop (FIFO),
    holding no worker thread, so their own connections wait while every other connection and every light
    validation is served. Lives on the loop: no locks.

    The heavy validations run on threads of their own (``slots`` of them), at a lower CPU priority
    (``nice`` + ``HEAVY_NICE``): when the machine's cores are all busy the scheduler gives the network loop,
    and the light validations, the CPU first, and a bomb takes longer instead of delaying other clients."""

    def __init__(self, slots: int, unbudgeted_bytes: int, nice: int | None = None) -> None:
        self.slots = max(1, int(slots))
        self.unbudgeted_bytes = max(0, int(unbudgeted_bytes))
        self._executor = ThreadPoolExecutor(self.slots, thread_name_prefix="tidelog-heavy-validation",
                                            initializer=_lower_priority,
                                            initargs=(HEAVY_NICE if nice is None else nice,))
        self.in_flight = 0
        self.peak = 0  # most heavy validations ever in flight at once (never above ``slots``)
        self.waiting = 0
        self.total = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a heavy validation thread once a heavy slot is free. The slot is held until the worker call ends,
        even if the caller is cancelled meanwhile (a closed connection), so the bound holds for the threads."""
        if self.in_flight >= self.slots or self._waiters:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self.waiting += 1
            try:
                await waiter  # the slot is handed over by _release (in_flight counted there)
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._release()  # handed a slot just as it was cancelled: pass it on
                else:
                    self.waiting -= 1
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                raise
        else:
            self._take()
        self.total += 1
        fut = asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))
        fut.add_done_callback(lambda _f: self._release())
        return await asyncio.shield(fut)

    def _take(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight

    def _release(self) -> None:
        self.in_flight -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.waiting -= 1
                self._take()
                waiter.set_result(None)
                return

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=False)

    def rows(self) -> Iterable[tuple[str, str, dict[str, str], float]]:
        yield ("tidelog_heavy_validations_in_flight", "Produce validations holding a heavy decompression slot",
               {}, float(self.in_flight))
        yield ("tidelog_heavy_validations_in_flight_max", "Most heavy validations ever in flight at once (bounded "
               "by tidelog.decompression.heavy.slots)", {}, float(self.peak))
        yield ("tidelog_heavy_validations_waiting", "Produce requests waiting for a heavy decompression slot", {},
               float(self.waiting))
        yield ("tidelog_heavy_validations_slots", "Heavy decompression slots (tidelog.decompression.heavy.slots)",
               {}, float(self.slots))
        yield ("tidelog_heavy_validations_total", "Validations that ran under a heavy decompression slot", {},
               float(self.total))


class AppendTicket:
    """One request's place in one partition's append order (see :class:`AppendSequencer`)."""

    __slots__ = ("_done", "_prev", "_seq", "_tp")

    def __init__(self, seq: AppendSequencer, tp: Any, prev: asyncio.Future[None] | None,
                 done: asyncio.Future[None]) -> None:
        self._seq = seq
        self._tp = tp
        self._prev = prev
        self._done = done

    async def turn(self) -> None:
        """Wait until every request for this partition that arrived earlier has appended (or given up)."""
        prev = self._prev
        if prev is not None and not prev.done():
            await asyncio.shield(prev)

    def release(self) -> None:
        """This request is done with the partition (appended, refused, failed or cancelled): the next may go.
        If an earlier one has not finished (this one gave up before its turn), the next still waits for it."""
        if self._done.done():
            return
        prev = self._prev
        if prev is None or prev.done():
            self._finish()
        else:
            prev.add_done_callback(lambda _f: self._finish())

    def _finish(self) -> None:
        done = self._done
        if not done.done():
            done.set_result(None)
        tails = self._seq._tails
        if tails.get(self._tp) is done:
            del tails[self._tp]


class AppendSequencer:
    """Per-partition append order = arrival order, with validation free to run in parallel.

    A produce request that leaves the loop (its validation runs on a worker) takes a ticket for each of its
    partitions at dispatch, before its first ``await``; it appends to a partition only when the tickets taken
    before it for that partition are released. A request that stays on the loop appends at once unless an
    earlier ticket for the partition is still out, in which case it takes a ticket too. Kafka's handler threads
    race for the log's lock instead; here arrival order is kept, so a client never sees a later request's
    records before an earlier one's in the same partition. Lives on the loop: no locks."""

    def __init__(self) -> None:
        self._tails: dict[Any, asyncio.Future[None]] = {}

    def busy(self, tp: Any) -> bool:
        """True while an earlier request still holds a ticket for ``tp``."""
        return tp in self._tails

    def ticket(self, tp: Any) -> AppendTicket:
        prev = self._tails.get(tp)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tails[tp] = done
        return AppendTicket(self, tp, prev, done)

    def __len__(self) -> int:
        return len(self._tails)
