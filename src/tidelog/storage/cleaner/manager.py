"""Which logs need cleaning and how (Kafka's ``LogCleanerManager``): the cleanable state of a log
(:class:`LogToClean`, :func:`plan_log`) and the grouping of its segments for the recopy."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.storage.cleaner.context import TopicPartition
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
