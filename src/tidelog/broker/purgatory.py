"""Delayed operations ("purgatory"), after Kafka's ``DelayedOperationPurgatory``.

A request that cannot be answered yet (a Fetch long-poll waiting for ``min_bytes``, an ``acks=-1`` Produce waiting
for the ISR to catch up) becomes a :class:`DelayedOperation` watched under one or more keys — (topic, partition).
Whoever changes the state of a partition (an append, a high-watermark move, a deletion) calls
:meth:`Purgatory.check_and_complete` for that key, which re-checks the operations watching it. An operation
completes exactly once: when its condition holds, when its timer fires, or when forced (shutdown).

Everything runs on the event loop: futures and ``loop.call_later`` timers, no polling, no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from tidelog.errors import ApiError, ErrorCode

log = logging.getLogger("tidelog.broker.purgatory")

TopicPartition = tuple[str, int]


class DelayedOperation:
    """One delayed request. Subclasses implement :meth:`try_complete` (check the condition; if it holds, call
    :meth:`force_complete` and return ``True``) and :meth:`on_complete` (compute the result)."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = max(0.0, float(delay_ms))
        self._loop = asyncio.get_running_loop()
        self.future: asyncio.Future[Any] = self._loop.create_future()
        self.keys: tuple[Hashable, ...] = ()
        self.completed = False
        self.timed_out = False
        self._timer: asyncio.TimerHandle | None = None
        self._purgatory: DelayedOperationPurgatory | None = None

    # -- to implement ------------------------------------------------------------------------------------------

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> Any:
        """Called once, on completion (condition met, timeout or forced); its return value is the result."""
        return None

    # -- mechanics ---------------------------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete now. Returns ``False`` if someone else completed it first."""
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._purgatory is not None:
            self._purgatory._unwatch(self)
        try:
            result = self.on_complete()
        except BaseException as exc:  # deliver the failure to the waiter rather than to the caller of append
            if not self.future.done():
                self.future.set_exception(exc)
            return True
        if not self.future.done():
            self.future.set_result(result)
        return True

    def _expire(self) -> None:
        self._timer = None
        if not self.completed:
            self.timed_out = True
            self.force_complete()

    async def wait(self) -> Any:
        return await self.future


class DelayedOperationPurgatory:
    """Operations waiting under keys. ``try_complete_else_watch`` then ``await op.wait()``."""

    def __init__(self, name: str) -> None:
        self.name = name
        # key -> ordered set of operations
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if it can; otherwise watch it under ``keys`` and arm its timer.
        Returns ``True`` if it completed immediately."""
        op.keys = tuple(keys)
        if op.try_complete():
            return True
        op._purgatory = self
        for k in op.keys:
            self._watchers.setdefault(k, {})[op] = None
        if op.delay_ms <= 0:
            op._expire()
            return True
        op._timer = op._loop.call_later(op.delay_ms / 1000.0, op._expire)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-check the operations watching ``key``; returns how many completed."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        done = 0
        for op in list(watching):
            if op.completed:
                watching.pop(op, None)
            elif op.try_complete():
                done += 1
        if not watching:
            self._watchers.pop(key, None)
        return done

    def _unwatch(self, op: DelayedOperation) -> None:
        for k in op.keys:
            watching = self._watchers.get(k)
            if watching is not None:
                watching.pop(op, None)
                if not watching:
                    del self._watchers[k]

    def watched(self, key: Hashable | None = None) -> int:
        """How many operations wait (under ``key``, or in total)."""
        if key is not None:
            return len(self._watchers.get(key, ()))
        return len({op for w in self._watchers.values() for op in w})

    def complete_all(self) -> None:
        """Force every pending operation to complete (shutdown)."""
        for op in {op for w in self._watchers.values() for op in w}:
            op.force_complete()
        self._watchers.clear()


# ------------------------------------------------------------------------------------------------------------
# Fetch


@dataclass(slots=True)
class FetchPartitionStatus:
    """One partition of a delayed fetch: where the fetch starts, how much it may take, and the leader epoch the
    fetcher named (-1: none)."""

    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


class DelayedFetch(DelayedOperation):
    """A fetch that waits until ``min_bytes`` are available across its partitions (or ``max_wait_ms``).

    ``probe(status)`` returns the bytes currently readable for one partition (bounded by its ``max_bytes``), or
    raises to signal that the partition is now in error (deleted, moved, a new leader epoch, offset out of range):
    that completes the fetch at once, as Kafka does. The result is ``None``: the read service
    (:mod:`tidelog.broker.fetch`, which also provides the probe) reads the data when it wakes up.
    """

    def __init__(
        self,
        partitions: list[FetchPartitionStatus],
        min_bytes: int,
        max_wait_ms: float,
        probe: Callable[[FetchPartitionStatus], int],
    ) -> None:
        super().__init__(max_wait_ms)
        self.partitions = partitions
        self.min_bytes = min_bytes
        self.probe = probe

    def try_complete(self) -> bool:
        accumulated = 0
        for status in self.partitions:
            try:
                accumulated += min(self.probe(status), status.max_bytes)
            except Exception:
                return self.force_complete()
            if accumulated >= self.min_bytes:
                return self.force_complete()
        if accumulated >= self.min_bytes:
            return self.force_complete()
        return False


# ------------------------------------------------------------------------------------------------------------
# Produce


class DelayedProduce(DelayedOperation):
    """An ``acks=-1`` produce that waits until every partition's high watermark reaches its required offset
    (the offset after the appended batch): then every replica in the ISR has it.

    ``high_watermark(tp)`` returns the partition's current HW, or raises an exception with ``kafka_error`` when
    the partition can no longer complete (e.g. leadership lost). The result maps each partition to ``None``
    (acknowledged) or a Kafka error name; partitions still short at timeout get ``REQUEST_TIMED_OUT``.
    On one node the HW equals the LEO right after the append, so the operation completes at once; the mechanism
    is here so that replication only has to move HW and call ``check_and_complete``.
    """

    def __init__(
        self,
        required_offsets: dict[TopicPartition, int],
        timeout_ms: float,
        high_watermark: Callable[[TopicPartition], int],
    ) -> None:
        super().__init__(timeout_ms)
        self.required_offsets = required_offsets
        self.high_watermark = high_watermark
        self.status: dict[TopicPartition, ErrorCode | None] = {}

    def try_complete(self) -> bool:
        pending = False
        for tp, required in self.required_offsets.items():
            if tp in self.status:
                continue
            try:
                hw = self.high_watermark(tp)
            except Exception as exc:
                self.status[tp] = exc.kafka_error if isinstance(exc, ApiError) else ErrorCode.UNKNOWN_SERVER_ERROR
                continue
            if hw >= required:
                self.status[tp] = None
            else:
                pending = True
        if pending:
            return False
        return self.force_complete()

    def on_complete(self) -> dict[TopicPartition, ErrorCode | None]:
        for tp in self.required_offsets:
            self.status.setdefault(tp, ErrorCode.REQUEST_TIMED_OUT)
        return dict(self.status)


class Purgatory:
    """The broker's purgatories. ``check_and_complete(tp)`` is called after anything that may unblock ``tp``."""

    def __init__(self) -> None:
        self.fetch = DelayedOperationPurgatory("Fetch")
        self.produce = DelayedOperationPurgatory("Produce")

    def check_and_complete(self, tp: TopicPartition) -> int:
        return self.produce.check_and_complete(tp) + self.fetch.check_and_complete(tp)

    def shutdown(self) -> None:
        self.produce.complete_all()
        self.fetch.complete_all()
