"""Retention: whole segments leave the log (``cleanup.policy`` containing ``delete``; Kafka's ``UnifiedLog.deleteOldSegments``).

Three limits, each checked independently and whichever removes more wins (they all remove a prefix of the
log): the log start offset (moved by DeleteRecords; applies to every policy), ``retention.bytes`` (drop the
oldest segments while the log stays at or above the limit without them) and ``retention.ms`` (a segment whose
largest record timestamp, or file mtime when it has none, is more than ``retention.ms`` old).

Walking the segments oldest first, a segment is deletable only while every earlier one was, the rule holds for
it, and all of its offsets lie below the high watermark. The active segment qualifies only when it is not empty
(the log rolls first, so a log always keeps a segment). Deletion is two-phase: the segments are renamed
``.deleted`` and leave the segment list at once (:meth:`PartitionLog.delete_segments_before`), and
their files are removed ``file.delete.delay.ms`` later (:meth:`PartitionLog.delete_expired_files`); a crash in
between leaves ``.deleted`` files that the loader removes on the next start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.storage.log import PartitionLog
from tidelog.storage.segment import LogSegment

log = logging.getLogger(__name__)

REASON_LOG_START_OFFSET = "log-start-offset"
REASON_SIZE = "retention.bytes"
REASON_TIME = "retention.ms"


@dataclass(slots=True)
class RetentionResult:
    """What one retention pass over a log did."""

    deleted_segments: int = 0
    deleted_bytes: int = 0
    reason: str | None = None
    new_log_start_offset: int = -1


# (segment, upper bound offset exclusive, is last) -> deletable?
_Rule = Callable[[LogSegment, int, bool], bool]


def _deletable_prefix(plog: PartitionLog, rule: _Rule) -> tuple[int, int, int]:
    """(segments, bytes, upper bound offset) of the longest deletable prefix under ``rule``."""
    segments = plog.segments
    hw = plog.high_watermark
    leo = plog.log_end_offset
    count = 0
    nbytes = 0
    upper_bound = -1
    for i, seg in enumerate(segments):
        is_last = i + 1 == len(segments)
        upper = leo if is_last else segments[i + 1].base_offset
        if is_last and seg.size == 0:
            break
        if upper > hw or not rule(seg, upper, is_last):
            break
        count += 1
        nbytes += seg.size
        upper_bound = upper
    return count, nbytes, upper_bound


def log_start_rule(plog: PartitionLog) -> _Rule:
    lso = plog.log_start_offset

    def rule(_seg: LogSegment, upper: int, is_last: bool) -> bool:
        # every offset of the segment is below the log start offset; never the active segment
        return not is_last and upper <= lso

    return rule


def size_rule(plog: PartitionLog) -> _Rule | None:
    limit = plog.config.retention_bytes
    if limit < 0:
        return None
    excess = plog.size_in_bytes - limit

    def rule(seg: LogSegment, _upper: int, _is_last: bool) -> bool:
        nonlocal excess
        if excess - seg.size >= 0:
            excess -= seg.size
            return True
        return False

    return rule


def time_rule(plog: PartitionLog, now_ms: int) -> _Rule | None:
    limit = plog.config.retention_ms
    if limit < 0:
        return None

    def rule(seg: LogSegment, _upper: int, _is_last: bool) -> bool:
        return now_ms - seg.largest_timestamp > limit

    return rule


def apply_retention(plog: PartitionLog, now_ms: int) -> RetentionResult:
    """One retention pass over ``plog`` (see the module docstring); returns what was removed."""
    rules: list[tuple[str, _Rule]] = [(REASON_LOG_START_OFFSET, log_start_rule(plog))]
    if plog.config.delete:
        s = size_rule(plog)
        if s is not None:
            rules.append((REASON_SIZE, s))
        t = time_rule(plog, now_ms)
        if t is not None:
            rules.append((REASON_TIME, t))
    best: tuple[int, int, int, str] | None = None
    for reason, rule in rules:
        count, nbytes, upper = _deletable_prefix(plog, rule)
        if count and (best is None or count > best[0]):
            best = (count, nbytes, upper, reason)
    result = RetentionResult(new_log_start_offset=plog.log_start_offset)
    if best is None:
        return result
    count, _nbytes, upper, reason = best
    deleted = plog.delete_segments_before(upper, now_ms=now_ms)
    result.deleted_segments = len(deleted)
    result.deleted_bytes = sum(s.size for s in deleted)
    result.reason = reason
    result.new_log_start_offset = plog.log_start_offset
    if deleted:
        log.info(
            "retention (%s) removed %d segment(s), %d bytes, from %s-%s; log start offset now %d",
            reason,
            len(deleted),
            result.deleted_bytes,
            plog.topic,
            plog.partition,
            plog.log_start_offset,
        )
    return result


__all__ = ["RetentionResult", "apply_retention"]
