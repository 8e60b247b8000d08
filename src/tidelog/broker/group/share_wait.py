"""A ShareFetch waiting for records (nothing acquirable, ``MaxWaitMs`` > 0) is woken as soon as one of its share
session's partitions gets new records: a delayed operation in the broker's Fetch purgatory, watched under each
(topic, partition) and checked by whoever moves a high watermark (``Broker.on_append``, the replica manager), as
Kafka's ``DelayedShareFetch`` is. Records made available again (a release, an expired lock) wake it through the
share group manager's ``changed`` event instead; the caller waits for either, then acquires again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tidelog.broker.purgatory import DelayedOperation, DelayedOperationPurgatory


class ShareFetchWait(DelayedOperation):
    """Completes when the high watermark of a watched partition passes the one it had when the wait began."""

    def __init__(self, delay_ms: float, seen: dict[tuple[str, int], tuple[Any, int]]) -> None:
        super().__init__(delay_ms)
        self.seen = seen  # (topic, partition) -> (its leader log, its high watermark when the wait began)

    def try_complete(self) -> bool:
        for plog, hw in self.seen.values():
            try:
                moved = plog.high_watermark > hw
            except Exception:  # the log closed (deleted, moved): the fetch sees why when it acquires again
                moved = True
            if moved:
                return self.force_complete()
        return False


async def wait_for_records(purgatory: DelayedOperationPurgatory, seen: dict[tuple[str, int], tuple[Any, int]],
                           changed: asyncio.Event, timeout_s: float) -> None:
    """Wait until a watched partition's high watermark moves, ``changed`` is set or ``timeout_s`` passed."""
    op = ShareFetchWait(timeout_s * 1000.0, seen)
    if purgatory.try_complete_else_watch(op, list(seen)):
        return
    event = asyncio.ensure_future(changed.wait())
    try:
        await asyncio.wait((op.future, event), return_when=asyncio.FIRST_COMPLETED)
    finally:
        event.cancel()
        op.force_complete()  # (unwatched; nothing when it completed already)
