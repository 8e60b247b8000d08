"""The log manager's offset checkpoints: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` (high watermarks) and ``cleaner-offset-checkpoint`` of every log directory, written
at their intervals, after deletions and at shutdown (the files' format is :mod:`tidelog.storage.checkpoints`).

A directory whose checkpoint write fails fails (Kafka's ``OffsetCheckpointFile`` reports the IOException to the
``LogDirFailureChannel``), except when the process is out of descriptors (issue 24): the write is retried at the
next tick. Mixed into :class:`~tidelog.storage.manager.LogManager`, whose state it uses (declared below).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    write_clean_shutdown,
    write_offset_checkpoint,
)
from tidelog.storage.log import PartitionLog
from tidelog.storage.open_files import SHORTAGE, is_fd_exhaustion

# the log manager's logger: its messages keep the name operators filter on
log = logging.getLogger("tidelog.storage.manager")

TopicPartition = tuple[str, int]


class LogCheckpointing:
    """The log manager's part that writes the offset checkpoints (see the module docstring)."""

    broker_epoch: int
    _lock: threading.RLock
    _checkpoint_lock: threading.Lock
    _checkpoints_deferred: set[str]
    _dirs: dict[Path, Any]
    _failed_dirs: dict[Path, str]
    _logs: dict[TopicPartition, PartitionLog]
    _log_root: dict[TopicPartition, Path]

    if TYPE_CHECKING:
        def fail_dir(self, root: Path, reason: str) -> bool: ...

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda plog: plog.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda plog: plog.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda plog: plog.high_watermark)

    def _checkpoint(
        self, name: str, value: Callable[[Any], int], roots: Iterable[Path] | None = None
    ) -> None:
        with self._lock:
            by_root: dict[Path, dict[TopicPartition, int]] = {
                p: {} for p in (roots or self._dirs) if p not in self._failed_dirs}
            for tp, plog in self._logs.items():
                root = self._log_root[tp]
                if root in by_root:
                    by_root[root][tp] = int(value(plog))
        self._write_checkpoints(name, by_root)

    def _write_checkpoints(self, name: str, by_root: dict[Path, dict[TopicPartition, int]]) -> None:
        """Write one checkpoint file per directory; a directory whose write fails fails (Kafka's
        ``OffsetCheckpointFile`` reports an IOException to the LogDirFailureChannel), except when the process is
        out of descriptors (EMFILE/ENFILE, issue 24): not a disk failure, the file is written again at the next
        tick (``tick``) and the directory stays online."""
        with self._checkpoint_lock:
            deferred = False
            for root, entries in by_root.items():
                try:
                    write_offset_checkpoint(root / name, entries)
                except OSError as exc:
                    if is_fd_exhaustion(exc):
                        SHORTAGE.note(f"checkpoint {name}", exc, root / name)
                        deferred = True
                    else:
                        self.fail_dir(root, f"writing {root / name} failed: {exc}")
            if deferred:
                self._checkpoints_deferred.add(name)
            else:
                self._checkpoints_deferred.discard(name)

    def _checkpoint_dir_offsets(self, root: Path) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda plog: plog.recovery_point, [root])
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda plog: plog.log_start_offset, [root])
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda plog: plog.high_watermark, [root])

    def _write_cleaner_checkpoints(self, entries: dict[TopicPartition, int]) -> None:
        """``cleaner-offset-checkpoint`` of every log dir from the cleaner's whole map."""
        with self._lock:
            by_root: dict[Path, dict[TopicPartition, int]] = {p: {} for p in self._dirs if p not in self._failed_dirs}
            for tp, offset in entries.items():
                root = self._log_root.get(tp)
                if root in by_root:
                    by_root[root][tp] = offset
        self._write_checkpoints(CLEANER_OFFSET_CHECKPOINT, by_root)

    def _write_shutdown_files(
        self, root: Path, final: dict[TopicPartition, tuple[int, int, int]], clean: bool
    ) -> None:
        try:
            write_offset_checkpoint(root / RECOVERY_POINT_CHECKPOINT, {tp: v[0] for tp, v in final.items()})
            write_offset_checkpoint(root / LOG_START_OFFSET_CHECKPOINT, {tp: v[1] for tp, v in final.items()})
            write_offset_checkpoint(
                root / REPLICATION_OFFSET_CHECKPOINT, {tp: v[2] for tp, v in final.items()}
            )
            if clean:
                write_clean_shutdown(root, self.broker_epoch)
        except OSError:
            log.exception("failed to write the shutdown checkpoints of %s", root)
