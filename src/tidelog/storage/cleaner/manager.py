"""Which logs need cleaning and how (Kafka's ``LogCleanerManager``): the cleanable state of a log
(:class:`LogToClean`, :func:`plan_log`), the grouping of its segments for the recopy, and
:class:`LogCleanerManager`: the filthiest log, the logs being cleaned, checkpoints, per-log stats."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidelog.storage.cleaner.context import CleanResult, TopicPartition
from tidelog.storage.index import INT32_MAX
from tidelog.storage.log import PartitionLog
from tidelog.storage.segment import (
    LogSegment,
)


@dataclass(slots=True)
class LogToClean:
    """The cleanable state of one log at one moment."""

    tp: TopicPartition
    plog: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int = 0
    horizon_due: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0


def _floor_to_segment_base(segments: list[LogSegment], offset: int) -> int:
    base = segments[0].base_offset
    for seg in segments:
        if seg.base_offset <= offset:
            base = seg.base_offset
        else:
            break
    return base


def plan_log(
    tp: TopicPartition,
    plog: PartitionLog,
    checkpoint: int | None,
    now_ms: int,
    horizon: int | None = None,
) -> LogToClean:
    """Compute first dirty / first uncleanable offsets and the byte counts (see the package docstring)."""
    segments = plog.segments
    lso = plog.log_start_offset
    leo = plog.log_end_offset
    first_dirty = checkpoint if checkpoint is not None else lso
    if first_dirty < lso or first_dirty > leo:
        first_dirty = lso
    active = segments[-1]
    bound = active.base_offset
    bound = min(bound, plog.high_watermark)
    ps = plog.producer_state
    unstable = getattr(ps, "first_unstable_offset", None)
    if unstable is not None:
        fuo = unstable()
        if fuo is not None:
            bound = min(bound, fuo)
    cfg = plog.config
    dirty_inactive = [
        (s, segments[i + 1].base_offset)
        for i, s in enumerate(segments[:-1])
        if segments[i + 1].base_offset > first_dirty
    ]
    if cfg.min_compaction_lag_ms > 0:
        for seg, _upper in dirty_inactive:
            if seg.largest_timestamp > now_ms - cfg.min_compaction_lag_ms:
                bound = min(bound, seg.base_offset)
                break
    bound = _floor_to_segment_base(segments, bound)
    first_uncleanable = max(bound, first_dirty)
    clean_bytes = 0
    cleanable_bytes = 0
    for i, seg in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        if upper <= first_dirty:
            clean_bytes += seg.size
        elif seg.base_offset < first_uncleanable:
            cleanable_bytes += seg.size
    delay = 0
    if cfg.max_compaction_lag_ms < 2**63 - 1 and cleanable_bytes > 0:
        firsts = [
            s.rolling_based_timestamp
            for s, upper in dirty_inactive
            if s.base_offset < first_uncleanable and s.rolling_based_timestamp > 0
        ]
        if firsts:
            delay = max(0, now_ms - min(firsts) - cfg.max_compaction_lag_ms)
    return LogToClean(
        tp,
        plog,
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        compaction_delay_ms=delay,
        horizon_due=horizon is not None and now_ms >= horizon and clean_bytes + cleanable_bytes > 0,
    )


def group_segments_by_size(
    segments: list[LogSegment], uppers: list[int], max_size: int, max_index_size: int
) -> list[list[LogSegment]]:
    """Consecutive groups whose summed ``.log`` sizes fit ``max_size`` and summed offset/time index sizes fit
    ``max_index_size``, with every offset of a group expressible relative to its first base offset."""
    groups: list[list[LogSegment]] = []
    i = 0
    n = len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        offset_index = segments[i].offset_index.size_in_bytes
        time_index = segments[i].time_index.size_in_bytes
        base = segments[i].base_offset
        i += 1
        while i < n:
            seg = segments[i]
            if (
                log_size + seg.size > max_size
                or offset_index + seg.offset_index.size_in_bytes > max_index_size
                or time_index + seg.time_index.size_in_bytes > max_index_size
                or uppers[i] - 1 - base > INT32_MAX
            ):
                break
            group.append(seg)
            log_size += seg.size
            offset_index += seg.offset_index.size_in_bytes
            time_index += seg.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


@dataclass(slots=True)
class LogCleanerStats:
    """Per-log state shown in metrics and ``tidelog topics describe``."""

    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    dirty_ratio: float = 0.0
    cleanable_bytes: int = 0
    total_bytes: int = 0
    compaction_delay_ms: int = 0
    runs: int = 0
    last_clean_ms: int = -1
    last_seconds: float = 0.0
    last_recopy_percent: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    uncleanable: str | None = None


class LogCleanerManager:
    """Which log is cleaned next and what has been cleaned (Kafka's ``LogCleanerManager``): the logs being
    cleaned (never two threads on one log) and those whose cleaning is to stop, every log's first dirty offset
    (``cleaner-offset-checkpoint``), the delete horizons cleanings left and the per-log stats.

    ``logs()`` returns the current logs; ``checkpoints`` is the initial content of every log dir's
    ``cleaner-offset-checkpoint``; ``write_checkpoints(entries)`` persists the whole map. ``lock`` guards all of
    it; the :class:`~tidelog.storage.cleaner.threads.LogCleaner` shares it, so that a finished cleaning updates
    the manager's state and the cleaner's totals at once.
    """

    def __init__(
        self,
        logs: Callable[[], Mapping[TopicPartition, PartitionLog]],
        checkpoints: Mapping[TopicPartition, int] | None = None,
        write_checkpoints: Callable[[dict[TopicPartition, int]], None] | None = None,
        *,
        clock_ms: Callable[[], int],
    ) -> None:
        self._logs = logs
        self._checkpoints: dict[TopicPartition, int] = dict(checkpoints or {})
        self._write_checkpoints = write_checkpoints
        self._clock = clock_ms
        self.lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self._stats: dict[TopicPartition, LogCleanerStats] = {}
        self._horizons: dict[TopicPartition, int] = {}

    # ------------------------------------------------------------------ checkpoints
    def checkpoints(self) -> dict[TopicPartition, int]:
        with self.lock:
            return dict(self._checkpoints)

    def forget(self, tp: TopicPartition) -> None:
        """The log was deleted: stop an ongoing cleaning and drop its checkpoint."""
        with self.lock:
            if tp in self._in_progress:
                self._aborted.add(tp)
            self._checkpoints.pop(tp, None)
            self._stats.pop(tp, None)
            self._horizons.pop(tp, None)

    def abort(self, tp: TopicPartition) -> None:
        with self.lock:
            if tp in self._in_progress:
                self._aborted.add(tp)

    def aborted(self, tp: TopicPartition) -> bool:
        """Whether the cleaning of ``tp`` is to stop (read without the lock: it is polled while cleaning)."""
        return tp in self._aborted

    def persist(self) -> None:
        if self._write_checkpoints is None:
            return
        with self.lock:
            logs = self._logs()
            entries = {tp: off for tp, off in self._checkpoints.items() if tp in logs}
        self._write_checkpoints(entries)

    # ------------------------------------------------------------------ selection
    def plans(self, now_ms: int | None = None) -> list[LogToClean]:
        now = self._clock() if now_ms is None else now_ms
        out = []
        for tp, plog in sorted(self._logs().items()):
            if not plog.config.compact:
                continue
            with self.lock:
                cp = self._checkpoints.get(tp)
                horizon = self._horizons.get(tp)
            try:
                ltc = plan_log(tp, plog, cp, now, horizon)
            except (ValueError, OSError):  # closed or deleted concurrently
                continue
            out.append(ltc)
            with self.lock:
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.first_dirty_offset = ltc.first_dirty_offset
                st.first_uncleanable_offset = ltc.first_uncleanable_offset
                st.dirty_ratio = ltc.dirty_ratio
                st.cleanable_bytes = ltc.cleanable_bytes
                st.total_bytes = ltc.total_bytes
                st.compaction_delay_ms = ltc.compaction_delay_ms
        return out

    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        candidates = []
        for ltc in self.plans(now_ms):
            ratio_ok = ltc.cleanable_bytes > 0 and ltc.dirty_ratio > ltc.plog.config.min_cleanable_dirty_ratio
            lag_ok = ltc.needs_compaction_now and ltc.cleanable_bytes > 0
            if ratio_ok or lag_ok or ltc.horizon_due:
                candidates.append(ltc)
        with self.lock:
            candidates = [c for c in candidates if c.tp not in self._in_progress]
            if not candidates:
                return None
            best = max(
                candidates,
                key=lambda c: (c.needs_compaction_now or c.cleanable_bytes > 0, c.dirty_ratio, c.compaction_delay_ms),
            )
            self._in_progress.add(best.tp)
            self._aborted.discard(best.tp)
        return best

    # ------------------------------------------------------------------ outcome of a cleaning
    def cleaning_failed(self, tp: TopicPartition) -> None:
        with self.lock:
            self._in_progress.discard(tp)
            st = self._stats.setdefault(tp, LogCleanerStats())
            st.uncleanable = "error"

    def done_cleaning_locked(self, tp: TopicPartition, result: CleanResult) -> LogCleanerStats | None:
        """``tp`` is no longer being cleaned; unless the cleaning was aborted, its checkpoint, delete horizon and
        stats take ``result`` and its stats are returned (None when aborted). The caller holds :attr:`lock`."""
        self._in_progress.discard(tp)
        if result.aborted or tp in self._aborted:
            return None
        self._checkpoints[tp] = result.end_offset
        if result.min_delete_horizon is not None:
            self._horizons[tp] = result.min_delete_horizon
        else:
            self._horizons.pop(tp, None)
        st = self._stats.setdefault(tp, LogCleanerStats())
        st.runs += 1
        st.first_dirty_offset = result.end_offset
        st.last_clean_ms = self._clock()
        st.last_seconds = result.seconds
        st.last_recopy_percent = result.recopy_percent
        st.bytes_read += result.bytes_read
        st.bytes_written += result.bytes_written
        st.records_removed += result.records_read - result.records_retained
        st.uncleanable = None
        return st

    # ------------------------------------------------------------------ observability
    def stats(self, refresh: bool = False) -> dict[TopicPartition, LogCleanerStats]:
        """Per-log state as of the last check (``refresh`` recomputes ratios now; it reads segment headers)."""
        if refresh:
            self.plans()
        with self.lock:
            return {tp: LogCleanerStats(**{f: getattr(s, f) for f in s.__slots__}) for tp, s in self._stats.items()}
