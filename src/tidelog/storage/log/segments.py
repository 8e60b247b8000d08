"""Kafka's ``LogSegments``: the segments of one log ordered by base offset, lookup by offset and timestamp,
and the creation of a new active segment at a roll.

:class:`LogSegments` is a plain container guarded by its log's lock (the log takes it around every change and
copies the list for work done outside it).  ``active`` is a plain attribute, kept in step with every change,
so the append path reads the active segment with one attribute load.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from tidelog.records.batch import _load_c, decode_records
from tidelog.records.header import (
    COMPRESSION_MASK,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
)
from tidelog.records.recwalk import R_OFFSET_DELTA, R_TIMESTAMP_DELTA, walk_records
from tidelog.storage.config import LogConfig
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_names import index_file, log_file, time_index_file, txn_index_file

log = logging.getLogger(__name__)


class LogSegments:
    """The ordered segments of one log (see module docstring)."""

    __slots__ = ("_bases", "_segments", "active")

    def __init__(self) -> None:
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.active: LogSegment | None = None  # the last segment, None while there is none

    def _changed(self) -> None:
        self._bases = [s.base_offset for s in self._segments]
        self.active = self._segments[-1] if self._segments else None

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    def copy(self) -> list[LogSegment]:
        """The segments as a new list (to work on outside the log's lock)."""
        return list(self._segments)

    # ------------------------------------------------------------------ changes
    def add(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._segments.insert(i, seg)
        self._bases.insert(i, seg.base_offset)
        self.active = self._segments[-1]

    def remove(self, seg: LogSegment) -> None:
        self._segments.remove(seg)
        self._changed()

    def remove_after(self, offset: int) -> None:
        """Delete (files included) every segment whose base offset is above ``offset``."""
        for seg in [s for s in self._segments if s.base_offset > offset]:
            seg.delete()
            self._segments.remove(seg)
        self._changed()

    def delete_all(self) -> None:
        """Delete every segment and its files."""
        for seg in self._segments:
            seg.delete()
        self._segments = []
        self._changed()

    def clear(self) -> None:
        """Forget every segment (their files are left alone)."""
        self._segments = []
        self._changed()

    def find_run(self, old: list[LogSegment]) -> int:
        """Index of ``old[0]`` when ``old`` are still exactly these contiguous segments and do not include the
        active one, else -1."""
        if not old:
            return -1
        try:
            i = next(k for k, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            return -1
        current = self._segments[i : i + len(old)]
        if len(current) != len(old) or any(a is not b for a, b in zip(current, old, strict=True)):
            return -1
        if i + len(old) >= len(self._segments):  # the active segment is never replaced
            return -1
        return i

    def swap_in(self, i: int, count: int, new: LogSegment) -> None:
        """Put ``new`` in the place of the ``count`` segments from index ``i``, in one assignment of the list."""
        self._segments = self._segments[:i] + [new] + self._segments[i + count :]
        self._changed()

    # ------------------------------------------------------------------ lookups
    def floor_index(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (floor by base offset), or -1."""
        return bisect.bisect_right(self._bases, offset) - 1

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` (the first one when none does) and every later one, as a new list."""
        return self._segments[max(bisect.bisect_right(self._bases, offset) - 1, 0) :]

    def iter_batches_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """Every batch whose last offset is >= ``offset`` (header reads only), over the segments of now."""
        for seg in self.from_offset(offset):
            start = 0
            if seg.base_offset <= offset:
                found = seg.translate_offset(offset)
                if found is None:
                    continue
                start = found[0]
            for pos, header in seg.iter_headers(start):
                yield seg, pos, header

    # ------------------------------------------------------------------ roll
    def roll(self, directory: Path, base: int, config: LogConfig, now_ms: int | None) -> LogSegment:
        """Make a new active segment at ``base`` (files of an earlier life at that offset deleted)."""
        for stale in (
            log_file(directory, base), index_file(directory, base), time_index_file(directory, base),
            txn_index_file(directory, base),
        ):
            if stale.exists():
                log.warning("deleting stale %s beyond the log end offset", stale)
                stale.unlink()
        # the new segment first: if its files cannot be opened (EMFILE, ENOSPC) nothing has changed, and the
        # append that asked for the roll fails alone (KAFKA_STORAGE_ERROR)
        seg = LogSegment(directory, base, config, now_ms=now_ms)
        old = self.active
        if old is not None:
            old.on_becoming_inactive()
        self.add(seg)
        return seg


# ====================================================================== lookup by timestamp
def find_offset_by_timestamp(segments: list[LogSegment], timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= ``timestamp`` at or after the log start offset."""
    for seg in segments:
        if seg.max_timestamp_so_far < timestamp:
            continue
        found = seg.find_offset_by_timestamp(timestamp, log_start_offset)
        if found is None:
            continue
        pos, header = found
        exact = record_at_or_after(seg, pos, header, lambda rec_ts, _o: rec_ts >= timestamp, log_start_offset)
        if exact is not None:
            return exact
    return None


def latest_timestamp(segments: list[LogSegment]) -> int:
    """The largest record timestamp of the segments (-1 when none)."""
    return max((s.max_timestamp_so_far for s in segments), default=NO_TIMESTAMP)


def offset_of_max_timestamp(segments: list[LogSegment]) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record holding the largest timestamp (ListOffsets -3)."""
    best: LogSegment | None = None
    for seg in segments:
        if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
            best = seg
    if best is None:
        return None
    ts, shallow_offset = best.max_timestamp_and_offset
    _, pos = best.offset_index.lookup(shallow_offset)
    for p, header in best.iter_headers(pos):
        if header.max_timestamp == ts:
            return record_at_or_after(best, p, header, lambda rec_ts, _o: rec_ts == ts, 0)
    return None


def record_at_or_after(
    seg: LogSegment,
    pos: int,
    header: BatchHeader,
    predicate: Callable[[int, int], bool],
    min_offset: int,
) -> tuple[int, int] | None:
    """Decode only this batch and return (offset, timestamp) of its first matching record."""
    if header.attributes & COMPRESSION_MASK == 0:
        # uncompressed (the common case): walk the records' fixed prefixes, no Record objects
        return scan_uncompressed_records(seg.read_batch(pos, header.size), header, predicate, min_offset)
    records = decode_records(seg.read_batch(pos, header.size))
    for rec in records:
        if rec.offset >= min_offset and predicate(rec.timestamp, rec.offset):
            return rec.offset, rec.timestamp
    return None


c_record_deltas = _load_c("record_deltas")
"""``tidelog.records._recwalk.record_deltas`` (the C record cursor: every record's offset and timestamp deltas), or
None for the pure-Python walk."""


def scan_uncompressed_records(
    data: bytes, header: BatchHeader, predicate: Callable[[int, int], bool], min_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of an uncompressed batch at or after ``min_offset`` that
    satisfies ``predicate``, from the one record walk
    (:func:`tidelog.records.recwalk.walk_records`).  The batch was validated when it was appended or recovered."""
    base_offset = header.base_offset
    lat = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    base_ts = header.base_timestamp
    if c_record_deltas is not None:
        deltas = c_record_deltas(data, header.records_count, RECORD_BATCH_OVERHEAD, len(data))
        if deltas is not None:  # else the Python walk below raises the exact error
            for offset_delta, ts_delta in deltas:
                offset = base_offset + offset_delta
                ts = base_ts + ts_delta if lat is None else lat
                if offset >= min_offset and predicate(ts, offset):
                    return offset, ts
            return None
    for fields in walk_records(data, RECORD_BATCH_OVERHEAD, len(data), header.records_count):
        offset = base_offset + fields[R_OFFSET_DELTA]
        ts = base_ts + fields[R_TIMESTAMP_DELTA] if lat is None else lat
        if offset >= min_offset and predicate(ts, offset):
            return offset, ts
    return None


__all__ = ["LogSegments", "find_offset_by_timestamp", "latest_timestamp", "offset_of_max_timestamp"]
