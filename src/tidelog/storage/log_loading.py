"""Loading a broker's log directories at startup (Kafka's ``LogManager.loadLogs``): the log manager's part that
checks ``meta.properties``, notes and deletes ``.kafka_cleanshutdown``, reads the offset checkpoints, finishes
pending deletions and opens (recovering after an unclean shutdown) every partition directory in a thread pool,
reporting progress to the :class:`~tidelog.storage.progress.RecoveryProgress` of whoever started the broker.

Mixed into :class:`~tidelog.storage.manager.LogManager`, whose state it uses (the attributes declared below).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.storage.checkpoints import (
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
    write_meta_properties,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import CorruptCheckpointError, StorageError
from tidelog.storage.format import DELETE_DIR_SUFFIX, STRAY_DIR_SUFFIX, parse_partition_dir
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.progress import PROGRESS_MIN_BYTES, RecoveryProgress

# the log manager's logger: its messages keep the name operators filter on
log = logging.getLogger("tidelog.storage.manager")

TopicPartition = tuple[str, int]


class LogDirLockedError(StorageError):
    """Another process (or another LogManager in this one) holds the log directory's ``.lock``."""


class InconsistentBrokerIdError(StorageError):
    """meta.properties names a different broker id than the one configured."""


class InconsistentClusterIdError(StorageError):
    """meta.properties files (or the configured cluster id) disagree about the cluster id."""


@dataclass
class _LogDir:
    path: Path
    lock_fd: int = -1
    had_clean_shutdown: bool = False
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    log_start_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)


class LogLoading:
    """The log manager's part that loads its directories at startup (see the module docstring)."""

    broker_id: int
    cluster_id: str | None
    recovery_threads: int
    recovery_progress: RecoveryProgress | None
    _lock: threading.RLock
    _dirs: dict[Path, _LogDir]
    _logs: dict[TopicPartition, PartitionLog]
    _log_root: dict[TopicPartition, Path]
    _topic_ids: dict[str, bytes]
    _no_metadata: set[TopicPartition]

    if TYPE_CHECKING:
        def _config_for(self, topic: str) -> LogConfig: ...

        def _on_io_error(self, plog: PartitionLog, exc: OSError, what: str) -> None: ...

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
