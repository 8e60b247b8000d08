"""A share group's settings (KIP-932), as its share partitions and members use them: the group's GROUP configs
(``share.*``, broker/group_configs.py) over the broker's ``group.share.*`` values. Plain data, shared by the share
group manager and the share-partition state store (which must not import each other)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class TimeIndexed(Protocol):
    """What the start offset of ``by_duration`` needs of a partition log."""

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None: ...


@dataclass(frozen=True, slots=True)
class ShareSettings:
    session_ms: int
    heartbeat_ms: int
    lock_ms: int
    delivery_limit: int
    max_locks: int
    reset: str  # share.auto.offset.reset: "earliest", "latest" or "by_duration"
    reset_back_ms: int | None = None  # by_duration: how far back from now

    def start_offset(self, log_start: int, high_watermark: int, log: TimeIndexed | None = None) -> int:
        """Where a share partition never read starts (Kafka's ``share.auto.offset.reset``): the log start, the
        high watermark, or the first record at or after now minus the duration (the high watermark when none is)."""
        if self.reset == "earliest":
            return log_start
        if self.reset == "by_duration" and self.reset_back_ms is not None and log is not None:
            found = log.find_offset_by_timestamp(int(time.time() * 1000) - self.reset_back_ms)
            if found is not None:
                return min(max(found[0], log_start), high_watermark)
        return high_watermark
