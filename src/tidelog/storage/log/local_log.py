"""Kafka's ``LocalLog`` part of a partition's log: its directory and segments, the offsets they span, and what is
done to them as files (reads, rolls, truncation, retention deletes and replacements, flushes, close, move,
delete), with the I/O-error handling every such step shares. :class:`~.partition_log.PartitionLog` (Kafka's
``UnifiedLog``) adds appends, validation, producer state and transactions on top; both see the same fields, set
here, under the one lock (see :mod:`.partition_log`)."""

from __future__ import annotations

import functools
import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

from tidelog.records.header import (
    BatchHeader,
)
from tidelog.storage.checkpoints import fsync_dir
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import KafkaStorageError, OffsetOutOfRangeError, StorageError
from tidelog.storage.file_handles import FileRegion
from tidelog.storage.format import DELETED_SUFFIX, SWAP_SUFFIX
from tidelog.storage.log.loader import (
    rebuild_producer_state,
)
from tidelog.storage.log.segments import (
    LogSegments,
    find_offset_by_timestamp,
    latest_timestamp,
    offset_of_max_timestamp,
)
from tidelog.storage.open_files import FD_EXHAUSTED, SHORTAGE, DescriptorsExhaustedError
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.segment import LogSegment

DIR_SUFFIXES = ("-delete", "-future", "-stray")

log = logging.getLogger("tidelog.storage.log")


_R = TypeVar("_R")


def _io(kind: str) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Wrap a method of :class:`LocalLog` that does I/O (Kafka's ``maybeHandleIOException``): refused with
    KAFKA_STORAGE_ERROR once the log's directory failed (``"write"``: always; ``"read"``: when it is offline),
    and an ``OSError`` inside is reported to the log-dir failure channel and raised as KafkaStorageError."""

    def deco(fn: Callable[..., _R]) -> Callable[..., _R]:
        what = fn.__name__

        @functools.wraps(fn)
        def wrapper(self: LocalLog, *args: object, **kwargs: object) -> _R:
            if self.failed is not None and (kind == "write" or self.offline):
                raise KafkaStorageError(self.failed)
            try:
                return fn(self, *args, **kwargs)
            except OSError as exc:
                raise self.io_error(exc, what) from exc

        return wrapper

    return deco



@dataclass(slots=True)
class ReadInfo:
    regions: list[FileRegion]
    size: int
    first_batch_offset: int  # -1 when nothing was read
    log_start_offset: int
    log_end_offset: int
    high_watermark: int = -1

    def read_bytes(self) -> bytes:
        return b"".join(r.read_bytes() for r in self.regions)

    @property
    def next_offset(self) -> int:
        """The offset after the last batch read (-1 when nothing was read)."""
        return self.regions[-1].next_offset if self.regions else -1


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` (topic names may contain '-'); also ``.<uuid>-delete/-future/-stray``."""
    name = dir_name
    for suffix in DIR_SUFFIXES:
        if name.endswith(suffix) and "." in name:
            name = name[: name.rindex(".")]
            break
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a partition directory name (<topic>-<partition>)")
    return topic, int(partition)


_flush_executor: ThreadPoolExecutor | None = None
_flush_executor_lock = threading.Lock()


def _background() -> ThreadPoolExecutor:
    global _flush_executor
    with _flush_executor_lock:
        if _flush_executor is None:
            _flush_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidelog-flush")
        return _flush_executor


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LocalLog:
    """A partition's directory and segments (see module docstring); :class:`~.partition_log.PartitionLog` is the
    one to use."""

    def __init__(self, directory: Path, config: LogConfig) -> None:
        # use PartitionLog.open(); the constructor only sets fields
        self.dir = Path(directory)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config
        self.epoch_cache: LeaderEpochCache | None = None
        self.producer_state: ProducerStateManager | None = None
        self._lock = threading.RLock()
        self._segments = LogSegments()
        self.log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark = 0
        self.recovery_point = 0
        self.last_flush_time = _now_ms()
        self._pending: list[Future[None]] = []
        self._deleted: list[tuple[int, LogSegment]] = []  # (time renamed, segment) awaiting file deletion
        self._closed = False
        self.recovered_segments = 0  # segments scanned by recovery during open (observability, tests)
        # True once a scan found no .txnindex entry in any segment, until an abort is recorded or segments are
        # swapped in: read_committed fetches of a log without aborted transactions then skip the collection
        self._no_aborted_txns = False
        #: set when the log's directory failed: why writes are refused (KAFKA_STORAGE_ERROR); None while healthy
        self.failed: str | None = None
        #: True when reads are refused too (the directory is offline; a broker's last directory stays readable)
        self.offline = False
        #: the log-dir failure channel (LogManager): called with (log, OSError, what) on an I/O error
        self.on_io_error: Callable[[Self, OSError, str], None] | None = None
        #: counts truncations of the log's end (a follower's): a move into another log dir copies again after one
        self.truncations = 0

    # ================================================================== I/O errors
    def io_error(self: Self, exc: OSError, what: str) -> KafkaStorageError:
        """Report an I/O error of this log to its failure channel (which marks every log of the directory failed
        through :meth:`mark_failed`) and return the KafkaStorageError to raise. EMFILE/ENFILE (out of file
        descriptors) is not a disk failure: counted and logged, the log stays writable and the caller's operation
        fails alone (issue 24)."""
        if exc.errno in FD_EXHAUSTED:
            return SHORTAGE.note(what, exc, self.dir)
        channel = self.on_io_error
        if channel is not None:
            try:
                channel(self, exc, what)
            except Exception:  # the report must not hide the error itself
                log.exception("reporting the I/O error of %s failed", self.dir)
        if self.failed is None:
            log.error("I/O error in %s during %s: %s; the log refuses writes", self.dir, what, exc)
            self.mark_failed(f"{what} failed in {self.dir}: {exc}", offline=False)
        return KafkaStorageError(self.failed or str(exc))


    def mark_failed(self, reason: str, *, offline: bool) -> None:
        """Refuse every write from now on (and every read when ``offline``) with KAFKA_STORAGE_ERROR: the log's
        directory failed. Only a restart (recovery of the directory) makes the log writable again."""
        if self.failed is None:
            self.failed = f"KAFKA_STORAGE_ERROR: {reason}"
        self.offline = self.offline or offline
        self._no_fast_append = True  # the C fast path does not look at ``failed``: the checked path takes appends


    # ================================================================== properties
    @property
    def segments(self) -> list[LogSegment]:
        """The segments sorted by base offset (a copy)."""
        with self._lock:
            return self._segments.copy()


    @property
    def segment_count(self) -> int:
        """How many segments (one open ``.log`` each), read without the log's lock (a lock held by a slow write
        must not stall the broker's count of its descriptors)."""
        return len(self._segments)


    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]


    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset


    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)


    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self.recovery_point


    # ================================================================== roll
    def _maybe_roll(self, header: BatchHeader, now: int) -> None:
        seg = self._segments.active
        assert seg is not None  # an open log always has an active segment
        if seg.size == 0:
            return  # an empty active segment is never rolled; the batch goes into it
        config = self.config
        if seg._should_roll(
            config.segment_bytes, config.segment_ms, header.size, header.max_timestamp, header.last_offset, now
        ):
            self.roll(header.base_offset, now_ms=now)


    @_io("write")
    def roll(self, new_base_offset: int | None = None, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base_offset`` (default: the LEO)."""
        with self._lock:
            self._ensure_open()
            base = self._log_end_offset if new_base_offset is None else new_base_offset
            old = self._segments.active
            assert old is not None  # an open log always has an active segment
            if base < self._log_end_offset:
                raise ValueError(f"cannot roll to {base}: below the log end offset {self._log_end_offset}")
            if old.base_offset == base:
                if old.size == 0:
                    return old
                raise ValueError(f"a segment with base offset {base} exists already")
            seg = self._segments.roll(self.dir, base, self.config, now_ms)
            if self.producer_state is not None:
                try:
                    self.producer_state.take_snapshot(base)
                except OSError as exc:  # out of descriptors: the roll stands, the snapshot is skipped (recovery
                    if exc.errno not in FD_EXHAUSTED:  # then starts from an earlier one)
                        raise
                    SHORTAGE.note("producer state snapshot", exc, self.dir)
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(_background().submit(self._flush_after_roll, base))
            return seg


    def _flush_after_roll(self, base: int) -> None:
        """The background fsync of the segments a roll made inactive. A failure is the directory's failure
        (logged and reported by :meth:`flush`), never dropped silently; it is not raised again to whoever waits
        for the flushes (shutdown), as it has been handled."""
        try:
            self.flush(base)
        except DescriptorsExhaustedError:
            pass  # logged and counted; the next flush (or roll, or shutdown) covers these segments
        except KafkaStorageError as exc:
            log.error("fsync after the roll of %s to %d failed: %s", self.dir, base, exc)


    def wait_for_background_flushes(self, timeout: float | None = None) -> None:
        """Block until the flushes scheduled by rolls have finished (for shutdown and tests)."""
        with self._lock:
            pending = list(self._pending)
        for f in pending:
            f.result(timeout)


    # ================================================================== read
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadInfo:
        """Whole batches from the one holding ``offset`` (see module docstring); never decodes records."""
        if self.offline:
            raise KafkaStorageError(self.failed or "offline")
        try:
            with self._lock:
                self._ensure_open()
                lso, leo = self.log_start_offset, self._log_end_offset
                if offset < lso or offset > leo:
                    raise OffsetOutOfRangeError(
                        f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                        f"log start offset {lso}, log end offset {leo}"
                    )
                segments = self._segments.from_offset(offset)
                hw = self._high_watermark
            info = ReadInfo([], 0, -1, lso, leo, hw)
            if offset == leo or (max_offset is not None and max_offset <= offset):
                return info
            budget = max_bytes
            for seg in segments:
                try:
                    region = seg.read(
                        offset,
                        budget,
                        min_one_batch=min_one_batch and not info.regions,
                        max_offset=max_offset,
                    )
                except ValueError:  # segment closed by a concurrent truncation or deletion
                    break
                if region is None:
                    continue  # nothing at or after offset in this segment (e.g. a compaction gap)
                if region.length == 0:
                    break
                if not info.regions:
                    info.first_batch_offset = region.first_offset
                info.regions.append(region)
                info.size += region.length
                budget -= region.length
                if budget <= 0:
                    break
                # the next segment starts where this one ended only if this segment was read to its end
                if region.position + region.length < seg.size:
                    break
            return info
        except OSError as exc:  # the directory failed (a try costs nothing when nothing is raised)
            raise self.io_error(exc, "read") from exc


    # ================================================================== timestamps
    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or None."""
        with self._lock:
            segments = self._segments.copy()
            lso = self.log_start_offset
        return find_offset_by_timestamp(segments, timestamp, lso)


    def latest_timestamp(self) -> int:
        """The largest record timestamp in the log (-1 when none)."""
        with self._lock:
            segments = self._segments.copy()
        return latest_timestamp(segments)


    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp (ListOffsets -3)."""
        with self._lock:
            segments = self._segments.copy()
        return offset_of_max_timestamp(segments)


    # ================================================================== truncation and retention hooks
    @_io("write")
    def truncate_to(self, target_offset: int) -> bool:
        """Follower truncation: remove every offset >= ``target_offset``.  Returns whether anything changed."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            self._ensure_open()
            if target_offset >= self._log_end_offset:
                return False
            self.truncations += 1
            if self._segments[0].base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            self._segments.remove_after(target_offset)
            active = self._segments.active
            assert active is not None  # remove_after keeps the segment holding target_offset
            active.truncate_to(target_offset)
            self._log_end_offset = active.read_next_offset()
            self.log_start_offset = min(self.log_start_offset, self._log_end_offset)
            self.recovery_point = min(self.recovery_point, self._log_end_offset)
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            if self.epoch_cache is not None:
                self.epoch_cache.truncate_from_end(self._log_end_offset)
            if self.producer_state is not None:
                start = self.producer_state.truncate_and_reload(self.log_start_offset, self._log_end_offset)
                rebuild_producer_state(self.producer_state, self._segments, start)
                self.producer_state.on_high_watermark_updated(self._high_watermark)
            return True


    @_io("write")
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset``."""
        with self._lock:
            self._ensure_open()
            self.truncations += 1
            self._segments.delete_all()
            self._segments.add(LogSegment(self.dir, new_offset, self.config))
            self._log_end_offset = new_offset
            self.log_start_offset = new_offset
            self.recovery_point = new_offset
            self._high_watermark = new_offset
            cache = self.epoch_cache
            if cache is not None:
                clear = getattr(cache, "clear_and_flush", None)
                if clear is not None:
                    clear()
                else:
                    cache.truncate_from_end(new_offset)
                    cache.truncate_from_start(new_offset)
            if self.producer_state is not None:
                self.producer_state.truncate_fully_and_start_at(new_offset)


    @_io("write")
    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """Advance the log start offset (DeleteRecords, retention); never beyond the high watermark."""
        with self._lock:
            self._ensure_open()
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset to {new_log_start_offset} of "
                    f"{self.topic}-{self.partition}: it is larger than the high watermark {self._high_watermark}"
                )
            if new_log_start_offset <= self.log_start_offset:
                return False
            self.log_start_offset = new_log_start_offset
            if self.epoch_cache is not None:
                self.epoch_cache.truncate_from_start(new_log_start_offset)
            if self.producer_state is not None:
                self.producer_state.on_log_start(new_log_start_offset)
            return True


    @_io("write")
    def delete_segments_before(self, offset: int, *, now_ms: int | None = None) -> list[LogSegment]:
        """Remove the segments wholly below ``min(offset, high watermark)``.

        The removed segments are renamed ``.deleted`` and their files are removed later by
        :meth:`delete_expired_files` once ``file.delete.delay.ms`` has passed (Kafka's asynchronous delete).
        The active segment is rolled first if it would be removed too, so the log always has a segment.
        The log start offset moves to the first remaining segment's base if that is higher.
        """
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            self._ensure_open()
            limit = min(offset, self._high_watermark)
            doomed: list[LogSegment] = []
            segments = self._segments.copy()
            for i, seg in enumerate(segments):
                is_last = i + 1 == len(segments)
                upper = self._log_end_offset if is_last else segments[i + 1].base_offset
                if upper > limit or (is_last and seg.size == 0):
                    break
                doomed.append(seg)
            if not doomed:
                return []
            if len(doomed) == len(segments):
                self.roll(now_ms=now)
            for seg in doomed:
                self._segments.remove(seg)
                seg.rename_suffix(DELETED_SUFFIX)
                self._deleted.append((now, seg))
            self.maybe_increment_log_start_offset(max(self.log_start_offset, self._segments[0].base_offset))
            return doomed


    def replace_segments(
        self,
        old: list[LogSegment],
        new: LogSegment,
        *,
        expected_sizes: list[int] | None = None,
        now_ms: int | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap the cleaned segment ``new`` (files named ``.cleaned``) in for the contiguous ``old`` segments.

        Crash-safe order (Kafka's ``LocalLog.replaceSegments``): ``new`` becomes ``.swap``; the segment list is replaced in one
        assignment; the old segments become ``.deleted`` (their files go after ``file.delete.delay.ms``; readers
        holding their regions keep valid descriptors); ``new`` gets its final names.  The loader finishes or
        undoes any prefix of these steps.  Returns False, changing nothing, when the old segments are no longer
        exactly as the caller read them (retention, truncation or a close happened meanwhile).
        ``fault(step)`` is a test hook called after each durable step.
        """
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return False
            i = self._segments.find_run(old)  # -1: not exactly these segments any more, or the active one too
            if i < 0:
                return False
            if expected_sizes is not None and [s.size for s in old] != list(expected_sizes):
                return False
            if new.base_offset != old[0].base_offset:
                raise ValueError(f"cleaned segment base {new.base_offset} != first old base {old[0].base_offset}")
            new.rename_suffix(SWAP_SUFFIX)
            fsync_dir(self.dir)
            if fault is not None:
                fault("swap")
            self._segments.swap_in(i, len(old), new)
            self._no_aborted_txns = False
            for seg in old:
                seg.rename_suffix(DELETED_SUFFIX)
                self._deleted.append((now, seg))
            if fault is not None:
                fault("old-deleted")
            new.rename_suffix("")
            fsync_dir(self.dir)
            if fault is not None:
                fault("swapped")
            return True


    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Delete the files of segments renamed ``.deleted`` at least ``file.delete.delay.ms`` ago."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            due = [(t, s) for t, s in self._deleted if now - t >= self.config.file_delete_delay_ms]
            self._deleted = [(t, s) for t, s in self._deleted if now - t < self.config.file_delete_delay_ms]
        for _, seg in due:
            seg.delete()
        return len(due)


    # ================================================================== flush, close
    @_io("write")
    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding offsets in [recovery point, up_to_offset) and advance the recovery point."""
        with self._lock:
            if self._closed:
                return
            target = self._log_end_offset if up_to_offset is None else min(up_to_offset, self._log_end_offset)
            if target <= self.recovery_point:
                return
            segments = [s for s in self._segments.from_offset(self.recovery_point) if s.base_offset < target]
        for seg in segments:  # outside the lock: fsync must not hold up appends
            seg.flush()
        with self._lock:
            if target > self.recovery_point:
                self.recovery_point = target
            self.last_flush_time = _now_ms()


    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush (the manager's flusher calls this)."""
        now = _now_ms() if now_ms is None else now_ms
        if self.failed is not None:
            return False  # the directory failed: nothing more is written (a restart recovers it)
        if now - self.last_flush_time >= self.config.flush_ms and self.unflushed_messages > 0:
            self.flush()
            return True
        return False


    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.dir} is closed")


    def _ensure_writable(self) -> None:
        self._ensure_open()
        if self.failed is not None:
            raise KafkaStorageError(self.failed)


    def close(self) -> None:
        """Flush everything, write final time-index entries, trim indexes and release files."""
        self.wait_for_background_flushes()
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments:
                seg.close()
            for _, seg in self._deleted:
                seg.close_handlers()


    def unmap_idle_indexes(self) -> int:
        """Unmap the indexes of inactive segments unused since the previous call (Kafka's LazyIndex maps an old
        segment's index when it is read; this also lets go of it once nobody does); how many were unmapped."""
        segments = self._segments.copy()
        return sum(seg.unmap_idle_indexes() for seg in segments[:-1] if not seg.closed)


    def moved_to(self, directory: Path) -> None:
        """The log's directory was renamed to ``directory`` (Kafka's ``UnifiedLog.renameDir`` without
        reinitialising): every path follows, nothing is reopened (a move's swap: O(segments) and no I/O)."""
        with self._lock:
            self.dir = Path(directory)
            self.topic, self.partition = parse_topic_partition(self.dir.name)
            for seg in self._segments:
                seg.moved_to(self.dir)
            for _, seg in self._deleted:
                seg.moved_to(self.dir)
            cache = self.epoch_cache
            if cache is not None and hasattr(cache, "path"):
                cache.path = self.dir / cache.path.name  # type: ignore[union-attr]
            ps = self.producer_state
            if ps is not None and hasattr(ps, "dir"):
                ps.dir = self.dir  # type: ignore[union-attr]


    def close_handlers(self) -> None:
        """Release every file without flushing or trimming anything (Kafka's ``closeHandlers``): for a log about
        to be deleted. Needs no file descriptor, so a deletion (or the rollback of a creation that ran out of
        descriptors) always goes through."""
        self.wait_for_background_flushes()
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_handlers()
            for _, seg in self._deleted:
                seg.close_handlers()


    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_handlers()
            for _, seg in self._deleted:
                seg.close_handlers()
            self._segments.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
