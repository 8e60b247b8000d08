"""The log manager's periodic work and background threads: the broker's scheduler calls :meth:`LogScheduler.tick`
(Kafka's ``LogManager`` scheduled tasks: ``kafka-log-flusher``, ``kafka-recovery-point-checkpoint``,
``kafka-log-start-offset-checkpoint``, ``highwatermark-checkpoint``, ``kafka-log-retention``,
``kafka-delete-logs``), which flushes logs by ``flush.ms``, writes the checkpoints when their intervals elapsed,
applies retention, removes ``.deleted`` files and unmaps idle indexes; the log cleaner's threads start here.

Mixed into :class:`~tidelog.storage.manager.LogManager`, whose state it uses (the attributes declared below).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_loading import _read_checkpoint_or_reset
from tidelog.storage.open_files import DescriptorsExhaustedError
from tidelog.storage.retention import apply_retention

# the log manager's logger: its messages keep the name operators filter on
log = logging.getLogger("tidelog.storage.manager")

TopicPartition = tuple[str, int]

#: how often ``tick`` unmaps the indexes of inactive segments unused since the previous sweep
INDEX_IDLE_SWEEP_MS = 60_000


class LogScheduler:
    """The log manager's periodic work (see the module docstring)."""

    cleaner_config: CleanerConfig | None
    cleaner: LogCleaner | None
    recovery_point_checkpoint_interval_ms: int
    log_start_offset_checkpoint_interval_ms: int
    high_watermark_checkpoint_interval_ms: int
    retention_check_interval_ms: int
    _lock: threading.RLock
    _dirs: dict[Path, Any]
    _checkpoints_deferred: set[str]

    if TYPE_CHECKING:
        def all_logs(self) -> dict[TopicPartition, PartitionLog]: ...

        def _healthy_logs(self) -> dict[TopicPartition, PartitionLog]: ...

        def _check_started(self) -> None: ...

        def _write_cleaner_checkpoints(self, entries: dict[TopicPartition, int]) -> None: ...

        def checkpoint_recovery_points(self) -> None: ...

        def checkpoint_log_start_offsets(self) -> None: ...

        def checkpoint_high_watermarks(self) -> None: ...

    def _start_cleaner(self) -> None:
        initial: dict[TopicPartition, int] = {}
        for d in self._dirs.values():
            initial.update(_read_checkpoint_or_reset(d.path / CLEANER_OFFSET_CHECKPOINT))
        self.cleaner = LogCleaner(
            self.cleaner_config or CleanerConfig(), self._healthy_logs, initial, self._write_cleaner_checkpoints
        )
        self.cleaner.start()

    def run_retention(self, now_ms: int) -> int:
        """One retention pass over every log (``tidelog.storage.retention``); returns segments removed."""
        removed = 0
        for tp, plog in self.all_logs().items():
            if plog.failed is not None:
                continue
            try:
                removed += apply_retention(plog, now_ms).deleted_segments
            except Exception:  # one bad log must not stop the others
                log.exception("retention of %s-%s failed", tp[0], tp[1])
        if removed:
            self.checkpoint_log_start_offsets()
        return removed

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` segment files whose ``file.delete.delay.ms`` has passed, in every log."""
        n = 0
        for tp, plog in self.all_logs().items():
            if plog.failed is not None:
                continue
            try:
                n += plog.delete_expired_files(now_ms)
            except Exception:
                log.exception("deleting old segment files of %s-%s failed", tp[0], tp[1])
        return n

    def tick(self, now_ms: int) -> None:
        """Periodic work for the broker's scheduler thread: the flush.ms policy of every log, then the
        recovery-point / log-start-offset / high-watermark checkpoints when their intervals elapsed
        (``log.flush.offset.checkpoint.interval.ms``, ``log.flush.start.offset.checkpoint.interval.ms``,
        ``replica.high.watermark.checkpoint.interval.ms``)."""
        self._check_started()
        for plog in self.all_logs().values():
            try:
                plog.flush_if_due(now_ms)
                cache = plog.epoch_cache
                if cache is not None and cache.unwritten:  # deferred for want of a descriptor (issue 24)
                    cache.write_pending()
            except DescriptorsExhaustedError:
                pass  # logged and counted; the recovery point did not move, so the next tick flushes again
            except Exception:  # one bad log must not stop the others' flushes
                log.exception(
                    "flush of %s-%s failed", getattr(plog, "topic", "?"), getattr(plog, "partition", "?")
                )
        deferred = self._checkpoints_deferred  # a write that met EMFILE is retried at once, not an interval later
        if (self._due(now_ms, "_last_recovery_checkpoint_ms", self.recovery_point_checkpoint_interval_ms)
                or RECOVERY_POINT_CHECKPOINT in deferred):
            self.checkpoint_recovery_points()
        if (self._due(now_ms, "_last_log_start_checkpoint_ms", self.log_start_offset_checkpoint_interval_ms)
                or LOG_START_OFFSET_CHECKPOINT in deferred):
            self.checkpoint_log_start_offsets()
        if (self._due(now_ms, "_last_hw_checkpoint_ms", self.high_watermark_checkpoint_interval_ms)
                or REPLICATION_OFFSET_CHECKPOINT in deferred):
            self.checkpoint_high_watermarks()
        if self._due(now_ms, "_last_retention_check_ms", self.retention_check_interval_ms):
            self.run_retention(now_ms)
        self.delete_expired_files(now_ms)
        if self._due(now_ms, "_last_index_sweep_ms", INDEX_IDLE_SWEEP_MS):
            self.unmap_idle_indexes()

    def unmap_idle_indexes(self) -> int:
        """Unmap the indexes of inactive segments no one read since the previous sweep (every
        ``INDEX_IDLE_SWEEP_MS`` from ``tick``): an old segment's index costs a mapping only while it is read."""
        unmapped = 0
        for plog in self.all_logs().values():
            try:
                unmapped += plog.unmap_idle_indexes()
            except Exception:  # a closed or failing log must not stop the sweep
                log.exception("unmapping idle indexes of %s-%s failed", getattr(plog, "topic", "?"),
                              getattr(plog, "partition", "?"))
        return unmapped

    def _due(self, now_ms: int, attr: str, interval_ms: int) -> bool:
        last = getattr(self, attr)
        if last is None:
            setattr(self, attr, now_ms)  # the first interval starts at the first tick
            return False
        if now_ms - last >= interval_ms:
            setattr(self, attr, now_ms)
            return True
        return False
