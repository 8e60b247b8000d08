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

Per-topic configuration: ``startup(topic_configs)`` takes either a mapping ``topic -> LogConfig`` or a
callable ``topic -> LogConfig | None``; topics without an entry use ``default_config``. (The broker keeps
topic overrides in its own metadata and can hand over a lookup function rather than a snapshot.)
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    MetaProperties,
    clean_shutdown_exists,
    delete_clean_shutdown,
    fsync_dir,
    new_uuid,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    uuid_to_str,
    write_clean_shutdown,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import CorruptCheckpointError, KafkaStorageError, StorageError
from tidelog.storage.errors import InvalidTopicError as InvalidTopicError
from tidelog.storage.errors import LogDirNotFoundError as LogDirNotFoundError
from tidelog.storage.errors import ReplicaNotAvailableError as ReplicaNotAvailableError
from tidelog.storage.format import (
    DELETE_DIR_SUFFIX,
    LEGAL_TOPIC,
    STRAY_DIR_SUFFIX,
    parse_partition_dir,
    partition_dir_name,
)
from tidelog.storage.format import FUTURE_DIR_SUFFIX as FUTURE_DIR_SUFFIX
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_move import LogMoves, ReplicaMove
from tidelog.storage.open_files import SHORTAGE, DescriptorsExhaustedError, is_fd_exhaustion
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.progress import PROGRESS_MIN_BYTES, RecoveryProgress
from tidelog.storage.retention import apply_retention

if TYPE_CHECKING:
    from tidelog.storage.cleaner import CleanerConfig, LogCleaner
    from tidelog.storage.log import PartitionLog

log = logging.getLogger("tidelog.storage.manager")

TopicPartition = tuple[str, int]
TopicConfigs = Mapping[str, LogConfig] | Callable[[str], "LogConfig | None"]

#: how often ``tick`` unmaps the indexes of inactive segments unused since the previous sweep
INDEX_IDLE_SWEEP_MS = 60_000
MAX_TOPIC_NAME_LENGTH = 249

class LogDirLockedError(StorageError):
    """Another process (or another LogManager in this one) holds the log directory's ``.lock``."""


class InconsistentBrokerIdError(StorageError):
    """meta.properties names a different broker id than the one configured."""


class InconsistentClusterIdError(StorageError):
    """meta.properties files (or the configured cluster id) disagree about the cluster id."""


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


@dataclass
class _LogDir:
    path: Path
    lock_fd: int = -1
    had_clean_shutdown: bool = False
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    log_start_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)


class LogManager(LogMoves):
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

    def _check_meta_properties(self) -> None:
        metas: dict[Path, MetaProperties | None] = {}
        for path in self._dirs:
            meta = read_meta_properties(path / META_PROPERTIES)
            metas[path] = meta
            if meta is not None and meta.node_id != self.broker_id:
                key = "broker.id" if meta.version == 0 else "node.id"
                raise InconsistentBrokerIdError(
                    f"Configured broker.id {self.broker_id} doesn't match stored {key} {meta.node_id} "
                    f"in {path / META_PROPERTIES}. If you moved your data, make sure your configured "
                    f"broker.id matches. If you intend to create a new broker, you should remove all data "
                    f"in your data directories (log.dirs)."
                )
        found = {m.cluster_id for m in metas.values() if m is not None and m.cluster_id}
        if self.cluster_id is not None:
            found.add(self.cluster_id)
        if len(found) > 1:
            raise InconsistentClusterIdError(
                f"log directories {[str(p) for p in self._dirs]} disagree about the cluster id: {sorted(found)}"
            )
        cluster_id = found.pop() if found else uuid_to_str(new_uuid())
        self.cluster_id = cluster_id
        for path, meta in metas.items():
            if meta is None:
                write_meta_properties(path / META_PROPERTIES, MetaProperties(0, self.broker_id, cluster_id))
            elif not meta.cluster_id:
                # a v0 file without cluster.id (pre-0.10.1 Kafka): record the id, as Kafka does
                write_meta_properties(path / META_PROPERTIES, MetaProperties(0, meta.node_id, cluster_id))

    def _prepare_dir(self, d: _LogDir) -> None:
        d.had_clean_shutdown = clean_shutdown_exists(d.path)
        if d.had_clean_shutdown:
            # Deleted before loading: a crash from now until the next clean shutdown must recover.
            delete_clean_shutdown(d.path)
        d.recovery_points = _read_checkpoint_or_reset(d.path / RECOVERY_POINT_CHECKPOINT)
        d.log_start_offsets = _read_checkpoint_or_reset(d.path / LOG_START_OFFSET_CHECKPOINT)
        d.high_watermarks = _read_checkpoint_or_reset(d.path / REPLICATION_OFFSET_CHECKPOINT)
        for child in d.path.iterdir():
            if child.is_dir() and child.name.endswith(DELETE_DIR_SUFFIX):
                log.info("finishing deletion of %s", child)
                shutil.rmtree(child, ignore_errors=True)
        fsync_dir(d.path)

    def _load_logs(self) -> None:
        jobs: list[tuple[_LogDir, TopicPartition, Path]] = []
        for d in self._dirs.values():
            for child in sorted(d.path.iterdir()):
                if not child.is_dir():
                    continue
                tp = parse_partition_dir(child.name)
                if tp is None:
                    if child.name.endswith(STRAY_DIR_SUFFIX):
                        log.warning("ignoring %s (stray logs are not supported)", child)
                    continue
                if tp in self._log_root:
                    raise StorageError(
                        f"Duplicate log directories for {tp[0]}-{tp[1]} are found in both "
                        f"{self._log_root[tp] / child.name} and {child}"
                    )
                self._log_root[tp] = d.path
                jobs.append((d, tp, child))
        if not jobs:
            return
        to_scan = 0
        for d in self._dirs.values():
            in_dir = [(tp, path) for jd, tp, path in jobs if jd is d]
            if not in_dir:
                continue
            if d.had_clean_shutdown:
                # Kafka: "Skipping recovery of N logs from <dir> since clean shutdown file was found"
                log.info("skipping recovery of %d logs from %s since the clean shutdown file was found",
                         len(in_dir), d.path)
                continue
            scan = sum(_bytes_to_recover(path, d.recovery_points.get(tp, 0)) for tp, path in in_dir)
            to_scan += scan
            # Kafka: "Attempting recovery for all logs in <dir> since no clean shutdown file was found"
            log.warning("unclean shutdown of %s: recovering %d logs (%d bytes to scan from their recovery points)",
                        d.path, len(in_dir), scan)
        progress: AbstractContextManager[Callable[[int], None] | None] = contextlib.nullcontext(None)
        if self.recovery_progress is not None and to_scan >= PROGRESS_MIN_BYTES:
            progress = self.recovery_progress(to_scan)  # the bar of whoever started the broker, if any
        totals = {d.path: sum(1 for jd, _, _ in jobs if jd is d) for d in self._dirs.values()}
        loaded = dict.fromkeys(totals, 0)
        with progress as advance:
            workers = self.recovery_threads * len(self._dirs)
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-recovery") as pool:
                futures = {
                    pool.submit(self._open_existing, d, tp, path, advance): (d, tp) for d, tp, path in jobs
                }
                errors: list[BaseException] = []
                opened: dict[TopicPartition, PartitionLog] = {}
                for fut in as_completed(futures):
                    d, tp = futures[fut]
                    try:
                        plog = opened[tp] = fut.result()
                        plog.on_io_error = self._on_io_error
                    except BaseException as e:  # keep loading the others so every opened log can be closed
                        errors.append(e)
                        log.error("failed to load log %s-%s: %s", tp[0], tp[1], e)
                        continue
                    loaded[d.path] += 1
                    # Kafka: "Completed load of Log(...) with N segments ... (i/n completed in <dir>)"
                    log.info("completed load of %s-%s with %d segments, log end offset %d (%d/%d completed in %s)",
                             tp[0], tp[1], len(plog.segments), plog.log_end_offset, loaded[d.path],
                             totals[d.path], d.path)
                for _, tp, _ in jobs:  # the registry in directory order, whatever order the loads finished in
                    if tp in opened:
                        self._logs[tp] = opened[tp]
                if errors:
                    raise errors[0]

    def _open_existing(
        self, d: _LogDir, tp: TopicPartition, path: Path, advance: Callable[[int], None] | None
    ) -> PartitionLog:
        try:
            topic_id = read_partition_metadata(path / PARTITION_METADATA)
        except CorruptCheckpointError as e:
            # the topic id is the registry's too: the broker writes the file again (ensure_partition_metadata)
            log.warning("%s; the file will be written again with the topic's id", e)
            topic_id = None
        if topic_id is None:
            with self._lock:
                self._no_metadata.add(tp)
        else:
            with self._lock:
                known = self._topic_ids.setdefault(tp[0], topic_id)
            if known != topic_id:
                raise StorageError(
                    f"{path / PARTITION_METADATA}: topic id {uuid_to_str(topic_id)} differs from "
                    f"{uuid_to_str(known)} found in another partition of {tp[0]}"
                )
        per_log: Callable[[int, int], None] | None = None
        if advance is not None:
            last_done = 0

            def per_log(done: int, _total: int) -> None:  # PartitionLog reports (done, total) per log
                nonlocal last_done
                if done > last_done:
                    advance(done - last_done)
                    last_done = done

        recovery_point, clean = d.recovery_points.get(tp, 0), d.had_clean_shutdown
        try:
            epoch_cache = LeaderEpochCache(path / LEADER_EPOCH_CHECKPOINT)
        except CorruptCheckpointError as e:
            # every batch carries its leader epoch: a full recovery of this log assigns them again
            log.warning("%s; rebuilding the leader epochs from the batches (full recovery of %s-%s)", e, *tp)
            (path / LEADER_EPOCH_CHECKPOINT).unlink()
            epoch_cache = LeaderEpochCache(path / LEADER_EPOCH_CHECKPOINT)
            recovery_point, clean = 0, False
        return PartitionLog.open(
            path,
            self._config_for(tp[0]),
            recovery_point=recovery_point,
            log_start_offset=d.log_start_offsets.get(tp, 0),
            high_watermark=d.high_watermarks.get(tp),
            clean_shutdown=clean,
            epoch_cache=epoch_cache,
            producer_state=ProducerStateManager(path),
            progress=per_log,
        )

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

    # ============================================================================= log dir failure

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

    # ===================================================================================== checkpoints

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

    # ========================================================================= retention and cleaning

    def _start_cleaner(self) -> None:
        initial: dict[TopicPartition, int] = {}
        for d in self._dirs.values():
            initial.update(_read_checkpoint_or_reset(d.path / CLEANER_OFFSET_CHECKPOINT))
        self.cleaner = LogCleaner(
            self.cleaner_config or CleanerConfig(), self._healthy_logs, initial, self._write_cleaner_checkpoints
        )
        self.cleaner.start()

    def _write_cleaner_checkpoints(self, entries: dict[TopicPartition, int]) -> None:
        """``cleaner-offset-checkpoint`` of every log dir from the cleaner's whole map."""
        with self._lock:
            by_root: dict[Path, dict[TopicPartition, int]] = {p: {} for p in self._dirs if p not in self._failed_dirs}
            for tp, offset in entries.items():
                root = self._log_root.get(tp)
                if root in by_root:
                    by_root[root][tp] = offset
        self._write_checkpoints(CLEANER_OFFSET_CHECKPOINT, by_root)

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


def _lock_dir(path: Path) -> int:
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise LogDirLockedError(
            f"Failed to acquire lock on file {LOCK_FILE} in {path}. A Kafka instance in another process "
            f"or thread is using this directory."
        ) from e
    return fd


def _read_checkpoint_or_reset(path: Path) -> dict[TopicPartition, int]:
    """As Kafka: a corrupt checkpoint is logged and treated as empty (full recovery / segment bases)."""
    try:
        return read_offset_checkpoint(path)
    except CorruptCheckpointError as e:
        log.warning("%s; resetting it (logs will be recovered from their start)", e)
        return {}


_SEGMENT_LOG = re.compile(r"(\d{20})\.log\Z")


def _bytes_to_recover(partition_dir: Path, recovery_point: int) -> int:
    """Bytes of ``.log`` files holding offsets at or beyond ``recovery_point`` (what recovery scans)."""
    segments = []
    for entry in os.scandir(partition_dir):
        m = _SEGMENT_LOG.match(entry.name)
        if m:
            segments.append((int(m.group(1)), entry.stat().st_size))
    segments.sort()
    total = 0
    for i, (_base, size) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is None or next_base > recovery_point:
            total += size
    return total
