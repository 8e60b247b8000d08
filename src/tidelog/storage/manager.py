"""LogManager: every partition log of a broker, across one or more log directories.

A log directory looks exactly like Kafka's (ZooKeeper mode)::

    <log.dir>/
        .lock                                 held with flock while the broker runs
        meta.properties                       version=0, broker.id, cluster.id
        .kafka_cleanshutdown                  present only between a clean shutdown and the next start
        recovery-point-offset-checkpoint      topic partition offset (flushed up to)
        log-start-offset-checkpoint           topic partition offset
        replication-offset-checkpoint         topic partition high watermark
        <topic>-<partition>/                  a PartitionLog (segments, leader-epoch-checkpoint, partition.metadata)
        <topic>-<partition>.<uuid hex>-delete a deleted partition, removed in the background
        <topic>-<partition>.<uuid hex>-future a replica moving here (AlterReplicaLogDirs, ``log_move.py``)

Lifecycle: ``startup()`` -> ``create_log`` / ``get_log`` / ``delete_log`` / ``tick`` -> ``shutdown()``.

Startup per directory (Kafka's ``LogManager.loadLogs``): take the lock, check or create meta.properties,
note and delete ``.kafka_cleanshutdown`` (so a crash before the next clean shutdown triggers recovery),
read the checkpoints, finish pending deletions, then open every partition directory in a thread pool.

Log directory failure (Kafka's ``LogDirFailureChannel``): an I/O error in a partition log (EIO, ENOSPC, EROFS, a
failed fsync, including the background fsync after a roll) or in a directory's checkpoint write fails the whole
directory (:meth:`LogManager.fail_dir`; running out of file descriptors, EMFILE or ENFILE, does not: the
operation is deferred and retried, checkpoints at the next tick, and counted in ``tidelog_fd_exhausted_total``;
issue 24): every log in it refuses writes with KAFKA_STORAGE_ERROR and, while another directory is online,
reads too (the directory is offline); the last online directory stays readable
(**difference:** Kafka halts the broker when its last directory goes offline; here the data on disk stays
readable and the broker says why it refuses writes). New partitions go to online directories only; the failed
directory gets no more checkpoints and no clean-shutdown marker, so the next start recovers it from its last
recovery point (Kafka: the directory comes back at restart, once the disk is fixed). Listeners
(``add_dir_failure_listener``) learn of each failure once: the broker answers DescribeLogDirs with it and, in
ZooKeeper mode, tells the controller (``/log_dir_event_notification``).

Its parts, each a mixin in a module of its own over the manager's state: loading at startup (``log_loading.py``),
log directory failure (``log_dir_failure.py``), the offset checkpoints (``log_checkpointing.py``), the periodic
work of ``tick`` and the cleaner's start (``log_scheduler.py``) and replica moves between directories
(``log_move.py``); the registry, creation, deletion and shutdown are here.

Per-topic configuration: ``startup(topic_configs)`` takes either a mapping ``topic -> LogConfig`` or a
callable ``topic -> LogConfig | None``; topics without an entry use ``default_config``. (The broker keeps
topic overrides in its own metadata and can hand over a lookup function rather than a snapshot.)
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    fsync_dir,
    uuid_to_str,
    write_partition_metadata,
)
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import InvalidTopicError as InvalidTopicError
from tidelog.storage.errors import KafkaStorageError, StorageError
from tidelog.storage.errors import LogDirNotFoundError as LogDirNotFoundError
from tidelog.storage.errors import ReplicaNotAvailableError as ReplicaNotAvailableError
from tidelog.storage.format import DELETE_DIR_SUFFIX, LEGAL_TOPIC, partition_dir_name
from tidelog.storage.format import FUTURE_DIR_SUFFIX as FUTURE_DIR_SUFFIX
from tidelog.storage.format import parse_partition_dir as parse_partition_dir
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_checkpointing import LogCheckpointing
from tidelog.storage.log_dir_failure import LogDirFailures
from tidelog.storage.log_loading import InconsistentBrokerIdError as InconsistentBrokerIdError
from tidelog.storage.log_loading import InconsistentClusterIdError as InconsistentClusterIdError
from tidelog.storage.log_loading import LogDirLockedError as LogDirLockedError
from tidelog.storage.log_loading import LogLoading, _lock_dir, _LogDir
from tidelog.storage.log_move import LogMoves, ReplicaMove
from tidelog.storage.log_scheduler import INDEX_IDLE_SWEEP_MS as INDEX_IDLE_SWEEP_MS
from tidelog.storage.log_scheduler import LogScheduler
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.progress import RecoveryProgress

if TYPE_CHECKING:
    from tidelog.storage.cleaner import CleanerConfig, LogCleaner
    from tidelog.storage.log import PartitionLog

log = logging.getLogger("tidelog.storage.manager")

TopicPartition = tuple[str, int]
TopicConfigs = Mapping[str, LogConfig] | Callable[[str], "LogConfig | None"]

MAX_TOPIC_NAME_LENGTH = 249


class LogExistsError(StorageError):
    """A partition log exists with a different topic id."""


def validate_topic_name(topic: str) -> None:
    """Kafka's ``Topic.validate``: 1..249 chars from ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not topic or topic in (".", ".."):
        raise ValueError(f"invalid topic name {topic!r}")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise ValueError(f"topic name {topic!r} is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not LEGAL_TOPIC.match(topic):
        raise ValueError(
            f"topic name {topic!r} contains characters other than ASCII alphanumerics, '.', '_', '-'"
        )


class LogManager(LogLoading, LogDirFailures, LogCheckpointing, LogScheduler, LogMoves):
    """Owns the log directories and every :class:`PartitionLog` in them. Thread-safe."""

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        broker_id: int = 0,
        cluster_id: str | None = None,
        recovery_threads: int = 2,
        recovery_progress: RecoveryProgress | None = None,
        broker_epoch: int = -1,
        recovery_point_checkpoint_interval_ms: int = 60000,
        log_start_offset_checkpoint_interval_ms: int = 60000,
        high_watermark_checkpoint_interval_ms: int = 5000,
        retention_check_interval_ms: int = 300000,
        cleaner_config: CleanerConfig | None = None,
        move_threads: int | None = None,
        move_max_bytes_per_second: int | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        resolved = [Path(d).absolute() for d in log_dirs]
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"duplicate log directories in {log_dirs}")
        self.log_dirs = resolved
        self.default_config = default_config
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.recovery_threads = max(1, recovery_threads)
        self.recovery_progress = recovery_progress
        self.broker_epoch = broker_epoch
        self.recovery_point_checkpoint_interval_ms = recovery_point_checkpoint_interval_ms
        self.log_start_offset_checkpoint_interval_ms = log_start_offset_checkpoint_interval_ms
        self.high_watermark_checkpoint_interval_ms = high_watermark_checkpoint_interval_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.cleaner_config = cleaner_config
        #: AlterReplicaLogDirs: ``num.replica.alter.log.dirs.threads`` (default: one per log dir) and
        #: ``replica.alter.log.dirs.io.max.bytes.per.second`` (None: unthrottled)
        self.move_threads = move_threads or len(resolved)
        self.move_max_bytes_per_second = move_max_bytes_per_second
        self._moves: dict[TopicPartition, ReplicaMove] = {}
        self._mover: ThreadPoolExecutor | None = None
        self._resumable: list[tuple[TopicPartition, Path]] = []
        # a move's swap and a deletion of logs exclude each other (Kafka's logCreationOrDeletionLock)
        self._swap_lock = threading.Lock()
        #: test and bench hook handed to every move: ``fn(move, bytes copied)`` after each copy round
        self.on_move_round: Callable[[ReplicaMove, int], None] | None = None
        #: the log cleaner (compaction threads); None until startup
        self.cleaner: LogCleaner | None = None
        self._last_retention_check_ms: int | None = None
        self._last_index_sweep_ms: int | None = None

        self._lock = threading.RLock()
        # serialises checkpoint writes: the scheduler's tick and delete_log may write the same file
        self._checkpoint_lock = threading.Lock()
        #: checkpoint files whose last write met EMFILE/ENFILE: written again at the next tick (issue 24)
        self._checkpoints_deferred: set[str] = set()
        self._dirs: dict[Path, _LogDir] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._log_root: dict[TopicPartition, Path] = {}
        self._topic_ids: dict[str, bytes] = {}
        self._no_metadata: set[TopicPartition] = set()  # loaded logs whose partition.metadata is missing/unreadable
        self._topic_configs: Callable[[str], LogConfig | None] = lambda _topic: None
        self._deleter: ThreadPoolExecutor | None = None
        self._pending_deletes: list[Future[None]] = []
        self._last_recovery_checkpoint_ms: int | None = None
        self._last_log_start_checkpoint_ms: int | None = None
        self._last_hw_checkpoint_ms: int | None = None
        self._started = False
        #: failed log directories (root -> reason): see the module docstring
        self._failed_dirs: dict[Path, str] = {}
        self._dir_failure_listeners: list[Callable[[Path, list[TopicPartition], bool, str], None]] = []
        #: True when every log directory had a clean-shutdown marker at startup
        self.had_clean_shutdown = False

    # ======================================================================================== startup

    def startup(self, topic_configs: TopicConfigs | None = None) -> None:
        """Lock and load every log directory; see the module docstring for the steps."""
        if self._started:
            raise RuntimeError("LogManager already started")
        self._topic_configs = _config_lookup(topic_configs)
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-deleter")
        try:
            for path in self.log_dirs:
                path.mkdir(parents=True, exist_ok=True)
                d = _LogDir(path)
                self._dirs[path] = d
                d.lock_fd = _lock_dir(path)
            self._check_meta_properties()
            for d in self._dirs.values():
                self._finish_moves(d.path)
            for d in self._dirs.values():
                self._prepare_dir(d)
            self._load_logs()
            self._start_cleaner()
            self._mover = ThreadPoolExecutor(max_workers=self.move_threads, thread_name_prefix="log-mover")
            self._resume_moves()
        except BaseException:
            self._close_all_quietly()
            self._release_locks()
            self._dirs.clear()
            if self._deleter is not None:
                self._deleter.shutdown(wait=True)
                self._deleter = None
            raise
        self.had_clean_shutdown = all(d.had_clean_shutdown for d in self._dirs.values())
        self._started = True

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs(topic) or self.default_config

    # ======================================================================================= registry

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, PartitionLog]:
        with self._lock:
            return dict(self._logs)

    def _healthy_logs(self) -> dict[TopicPartition, PartitionLog]:
        """The logs of directories that have not failed and that are not moving (what the cleaner may compact)."""
        with self._lock:
            return {tp: plog for tp, plog in self._logs.items() if plog.failed is None and tp not in self._moves}

    def topic_id_of(self, topic: str) -> bytes | None:
        """The topic id recorded in the topic's ``partition.metadata`` files, or None if unknown."""
        with self._lock:
            return self._topic_ids.get(topic)

    def ensure_partition_metadata(self, topic: str, partition: int, topic_id: bytes) -> bool:
        """Write ``partition.metadata`` for a loaded log whose file was missing or unreadable at load (Kafka
        writes it when the partition gets its topic id); a readable file, whatever id it names, is left alone.
        Returns True when written."""
        with self._lock:
            root = self._log_root.get((topic, partition))
            if root is None or (topic, partition) not in self._no_metadata:
                return False
        write_partition_metadata(root / partition_dir_name(topic, partition) / PARTITION_METADATA, topic_id)
        with self._lock:
            self._no_metadata.discard((topic, partition))
            self._topic_ids.setdefault(topic, topic_id)
        return True

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        """The log directory (root) holding the partition."""
        with self._lock:
            return self._log_root.get((topic, partition))

    def create_log(
        self, topic: str, partition: int, config: LogConfig | None, topic_id: bytes
    ) -> PartitionLog:
        """Get or create the log of ``topic-partition`` with ``partition.metadata`` recording ``topic_id``.

        The directory goes to the log dir holding the fewest partitions (as Kafka's ``nextLogDirs``).
        An existing log is returned as it is, unless its topic id differs (:class:`LogExistsError`).
        """
        self._check_started()
        validate_topic_name(topic)
        if partition < 0:
            raise ValueError(f"invalid partition {partition}")
        if len(topic_id) != 16 or topic_id == bytes(16):
            raise ValueError("topic_id must be 16 bytes and not the zero Uuid")
        tp = (topic, partition)
        with self._lock:
            known = self._topic_ids.get(topic)
            if known is not None and known != topic_id:
                raise LogExistsError(
                    f"topic {topic} has id {uuid_to_str(known)} on this broker, not {uuid_to_str(topic_id)}"
                )
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            online = [p for p in self._dirs if p not in self._failed_dirs]
            if not online:
                raise KafkaStorageError(
                    f"cannot create {topic}-{partition}: every log directory failed ({self._failed_reasons()})")
            counts = {p: 0 for p in online}
            for root in self._log_root.values():
                if root in counts:
                    counts[root] += 1
            root = min(online, key=lambda p: (counts[p], self.log_dirs.index(p)))
            path = root / partition_dir_name(topic, partition)
            path.mkdir()
            try:
                fsync_dir(root)
                write_partition_metadata(path / PARTITION_METADATA, topic_id)
                new_log = PartitionLog.open(
                    path,
                    config or self._config_for(topic),
                    recovery_point=0,
                    log_start_offset=0,
                    high_watermark=None,
                    clean_shutdown=True,
                    epoch_cache=LeaderEpochCache(path / LEADER_EPOCH_CHECKPOINT),
                    producer_state=ProducerStateManager(path),
                    progress=None,
                )
            except BaseException:
                # created completely or not at all: nothing of a failed creation stays. The directory is first
                # renamed out of the way (no descriptor needed: the failure may be EMFILE), so that it is no
                # partition even if its removal fails too (the next start finishes the deletion)
                dst = root / f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
                with contextlib.suppress(OSError):
                    os.rename(path, dst)
                    path = dst
                shutil.rmtree(path, ignore_errors=True)
                fsync_dir(root)
                raise
            new_log.on_io_error = self._on_io_error
            self._logs[tp] = new_log
            self._log_root[tp] = root
            self._topic_ids[topic] = topic_id
            return new_log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory to ``<topic>-<partition>.<uuid hex>-delete`` and remove it
        in the background. Returns False when there was no such log."""
        return self.delete_logs([(topic, partition)])[0]

    def delete_logs(self, tps: Iterable[TopicPartition]) -> list[bool]:
        """:meth:`delete_log` for many partitions at once (a topic's): each log is closed and its directory
        renamed, then each log dir touched is fsynced once and its offset checkpoints are written once, not once
        per partition (deleting a topic of N partitions wrote 3 checkpoints of every partition N times: a
        quadratic 5.5 s for 1000). Returns, per partition, whether there was such a log."""
        self._check_started()
        tps = list(tps)
        wanted = set(tps)
        self._cancel_moves(lambda m: m.tp in wanted)  # each removes its future directory
        with self._swap_lock:
            return self._delete_logs(tps)

    def _delete_logs(self, tps: list[TopicPartition]) -> list[bool]:
        found: list[bool] = []
        roots: dict[Path, None] = {}
        moved: list[Path] = []
        try:
            for topic, partition in tps:
                tp = (topic, partition)
                with self._lock:
                    plog = self._logs.pop(tp, None)
                    root = self._log_root.pop(tp, None)
                    self._no_metadata.discard(tp)
                    if plog is None or root is None:
                        found.append(False)
                        continue
                    if not any(t == topic for t, _ in self._logs):
                        self._topic_ids.pop(topic, None)
                found.append(True)
                roots[root] = None
                src = root / partition_dir_name(topic, partition)
                if self.cleaner is not None:
                    self.cleaner.forget(tp)
                plog.close_handlers()  # deleted: nothing to flush or trim (Kafka's closeHandlers)
                dst = root / f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
                os.rename(src, dst)
                moved.append(dst)
        finally:
            for root in roots:
                fsync_dir(root)
                self._checkpoint_dir_offsets(root)
            assert self._deleter is not None
            futs: list[Future[None]] = [self._deleter.submit(shutil.rmtree, dst, True) for dst in moved]
            if futs:
                with self._lock:
                    self._pending_deletes = [f for f in self._pending_deletes if not f.done()] + futs
        return found

    def wait_for_deletions(self) -> None:
        """Block until background directory removals queued so far have finished."""
        with self._lock:
            pending = list(self._pending_deletes)
        for fut in pending:
            fut.result()

    # ======================================================================================= shutdown

    def shutdown(self) -> None:
        """Flush and close every log, write all checkpoints, then ``.kafka_cleanshutdown`` in each log dir
        whose logs all closed cleanly, and release the locks."""
        if not self._started:
            return
        for m in self.moves():  # their future directories stay: the next start resumes them
            m.cancel(keep_future=True)
        if self._mover is not None:
            self._mover.shutdown(wait=True)
            self._mover = None
        if self.cleaner is not None:
            self.cleaner.shutdown()
            with contextlib.suppress(OSError):
                self._write_cleaner_checkpoints(self.cleaner.checkpoints())
        with self._lock:
            logs = dict(self._logs)
            roots = dict(self._log_root)
        failed_roots: set[Path] = set()
        final: dict[TopicPartition, tuple[int, int, int]] = {}

        failed_dirs = self.failed_dirs()

        def close_one(tp: TopicPartition, plog: PartitionLog) -> None:
            if roots[tp] in failed_dirs or plog.failed is not None:
                plog.close_handlers()  # nothing more is written to a failed directory: the next start recovers it
                return
            plog.flush()
            final[tp] = (int(plog.recovery_point), int(plog.log_start_offset), int(plog.high_watermark))
            plog.close()

        workers = max(1, self.recovery_threads * len(self._dirs))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-close") as pool:
            futures = {pool.submit(close_one, tp, plog): tp for tp, plog in logs.items()}
            for fut, tp in futures.items():
                try:
                    fut.result()
                except Exception:
                    log.exception("failed to close log %s-%s", tp[0], tp[1])
                    failed_roots.add(roots[tp])
        if self._deleter is not None:
            self._deleter.shutdown(wait=True)
            self._deleter = None
        for root in self._dirs:
            if root in failed_dirs or root in self._failed_dirs:
                log.warning("log directory %s failed (%s): no checkpoints and no clean-shutdown marker written; "
                            "the next start recovers it", root, self._failed_dirs.get(root))
                continue
            mine = {tp: v for tp, v in final.items() if roots[tp] == root}
            with self._checkpoint_lock:
                self._write_shutdown_files(root, mine, root not in failed_roots)
        with self._lock:
            self._logs.clear()
            self._log_root.clear()
            self._failed_dirs.clear()
        self._release_locks()
        self._started = False

    # ========================================================================================= helpers

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("LogManager is not started")

    def _close_all_quietly(self) -> None:
        for plog in list(self._logs.values()):
            with contextlib.suppress(Exception):
                plog.close()
        self._logs.clear()
        self._log_root.clear()

    def _release_locks(self) -> None:
        for d in self._dirs.values():
            if d.lock_fd >= 0:
                with contextlib.suppress(OSError):
                    fcntl.flock(d.lock_fd, fcntl.LOCK_UN)
                os.close(d.lock_fd)
                d.lock_fd = -1

    def __enter__(self) -> LogManager:
        self.startup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ============================================================================================ functions


def _config_lookup(topic_configs: TopicConfigs | None) -> Callable[[str], LogConfig | None]:
    if topic_configs is None:
        return lambda _topic: None
    if callable(topic_configs):
        return topic_configs
    mapping = dict(topic_configs)
    return mapping.get


