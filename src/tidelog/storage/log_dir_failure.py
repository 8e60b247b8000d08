"""Log directory failure (Kafka's ``LogDirFailureChannel``): the log manager's part that takes a failed directory
offline (see :mod:`tidelog.storage.manager` for the rules), tells its listeners and reports the directories'
health as metrics.

Mixed into :class:`~tidelog.storage.manager.LogManager`, whose state it uses (the attributes declared below).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.storage.log import PartitionLog
from tidelog.storage.open_files import SHORTAGE

if TYPE_CHECKING:
    from tidelog.storage.cleaner import LogCleaner
    from tidelog.storage.log_move import ReplicaMove

# the log manager's logger: its messages keep the name operators filter on
log = logging.getLogger("tidelog.storage.manager")

TopicPartition = tuple[str, int]


class LogDirFailures:
    """The log manager's part for failed log directories (see the module docstring)."""

    log_dirs: list[Path]
    cleaner: LogCleaner | None
    _lock: threading.RLock
    _dirs: dict[Path, Any]
    _failed_dirs: dict[Path, str]
    _logs: dict[TopicPartition, PartitionLog]
    _log_root: dict[TopicPartition, Path]
    _dir_failure_listeners: list[Callable[[Path, list[TopicPartition], bool, str], None]]

    if TYPE_CHECKING:
        def log_dir_of(self, topic: str, partition: int) -> Path | None: ...

        def _cancel_moves(self, pred: Callable[[ReplicaMove], bool]) -> list[ReplicaMove]: ...

    def add_dir_failure_listener(self, fn: Callable[[Path, list[TopicPartition], bool, str], None]) -> None:
        """``fn(root, partitions, offline, reason)`` is called once per failed directory, on the thread that hit
        the error (keep it short; hand work to another thread)."""
        self._dir_failure_listeners.append(fn)

    def failed_dirs(self) -> dict[Path, str]:
        """The failed log directories and why (empty while all are healthy)."""
        with self._lock:
            return dict(self._failed_dirs)

    def is_offline(self, root: Path) -> bool:
        """Whether ``root`` failed (offline, or read-only as the last online directory)."""
        with self._lock:
            return Path(root) in self._failed_dirs

    def metrics_rows(self) -> list[tuple[str, str, dict[str, str], float]]:
        """Scrape-time gauges: Kafka's ``OfflineLogDirectoryCount`` and ``LogDirectoryOffline`` per directory."""
        failed = self.failed_dirs()
        rows: list[tuple[str, str, dict[str, str], float]] = [
            ("tidelog_offline_log_directories", "Log directories that failed (Kafka's OfflineLogDirectoryCount)",
             {}, float(len(failed)))]
        rows += [("tidelog_log_directory_offline", "1 when the log directory failed (Kafka's LogDirectoryOffline)",
                  {"log_dir": str(p)}, 1.0 if p in failed else 0.0) for p in self.log_dirs]
        return rows + SHORTAGE.rows()

    def _failed_reasons(self) -> str:
        return "; ".join(f"{p}: {r}" for p, r in self._failed_dirs.items())

    def _on_io_error(self, plog: PartitionLog, exc: OSError, what: str) -> None:
        """A partition log's I/O error (its ``on_io_error``): its directory fails."""
        root = self.log_dir_of(plog.topic, plog.partition) or plog.dir.parent
        self.fail_dir(root, f"{what} of {plog.topic}-{plog.partition} failed: {exc}")

    def fail_dir(self, root: Path, reason: str) -> bool:
        """Take the log directory ``root`` offline (Kafka's ``LogDirFailureChannel.maybeAddOfflineLogDir`` and
        ``ReplicaManager.handleLogDirFailure``); the last online directory becomes read-only instead. Returns
        False when it had failed already."""
        root = Path(root)
        with self._lock:
            if root in self._failed_dirs or root not in self._dirs:
                return False
            offline = any(p not in self._failed_dirs for p in self._dirs if p != root)
            self._failed_dirs[root] = reason
            logs = [(tp, plog) for tp, plog in self._logs.items() if self._log_root.get(tp) == root]
        self._cancel_moves(lambda m: m.dest == root or self._log_root.get(m.tp) == root)
        for _tp, plog in logs:
            plog.mark_failed(reason, offline=offline)
        if self.cleaner is not None:  # an ongoing cleaning stops; it picks healthy logs only from now on
            for tp, _plog in logs:
                self.cleaner.abort(tp)
        if offline:
            log.error("Log directory %s is offline: %s. Its %d partitions answer KAFKA_STORAGE_ERROR; the other "
                      "directories keep serving. Fix the disk and restart the broker to bring it back.",
                      root, reason, len(logs))
        else:
            log.error("Log directory %s failed: %s. It is the broker's last online log directory: writes are "
                      "refused with KAFKA_STORAGE_ERROR, what is on disk stays readable. Fix the disk and restart "
                      "the broker (Kafka would halt it).", root, reason)
        tps = sorted(tp for tp, _ in logs)
        for fn in list(self._dir_failure_listeners):
            try:
                fn(root, tps, offline, reason)
            except Exception:
                log.exception("a log dir failure listener failed")
        return True
