"""Kafka's ``LogLoader``: load the segments of a partition directory at open, finish or undo what a crash
interrupted, recover after an unclean shutdown, and rebuild the producer state.

Loading passes, in Kafka's order: leftover ``.cleaned`` and ``.deleted`` files removed (and ``.swap`` files newer
than an unfinished ``.cleaned`` one, KAFKA-6264); the other ``.swap`` files replace the segments in their range;
segments loaded, indexes without a log deleted, missing or corrupt indexes rebuilt; then, unless the
clean-shutdown marker was present, every segment from the one holding the recovery point on is recovered (its
batches re-validated and its indexes rebuilt; everything after the first bad byte truncated, later segments
deleted).  The leader epoch cache and the producer state are brought in line with the loaded offsets.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tidelog.records.batch import ControlRecordType, decode_records, parse_control_record
from tidelog.records.errors import RecordError
from tidelog.records.header import H_BASE_OFFSET, H_PARTITION_LEADER_EPOCH, BatchHeader, HeaderTuple
from tidelog.storage.config import LogConfig
from tidelog.storage.format import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from tidelog.storage.index import CorruptIndexError
from tidelog.storage.log.segments import LogSegments
from tidelog.storage.producer_state import CompletedTxn
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_names import index_file, log_file, offset_from_filename, time_index_file
from tidelog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


class EpochCache(Protocol):
    def assign(self, epoch: int, start_offset: int) -> Any: ...
    def truncate_from_end(self, end_offset: int) -> Any: ...
    def truncate_from_start(self, start_offset: int) -> Any: ...
    def latest_epoch(self) -> int | None: ...
    def entries(self) -> list[tuple[int, int]]: ...
    #: a checkpoint write deferred for want of a descriptor (issue 24), written by ``write_pending`` at a tick
    unwritten: bool
    def write_pending(self) -> None: ...


class ProducerState(Protocol):
    map_end_offset: int

    def check(self, header: BatchHeader) -> tuple[int, int, int] | None: ...
    def update(
        self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int,
        coordinator_epoch: int | None = None, abort: bool | None = None,
    ) -> CompletedTxn | None: ...
    def take_snapshot(self, offset: int) -> Any: ...
    def load(self, log_start_offset: int, log_end_offset: int, max_snapshot_offset: int | None = None) -> int: ...
    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> int: ...
    def truncate_fully_and_start_at(self, offset: int) -> Any: ...
    def on_high_watermark_updated(self, high_watermark: int) -> Any: ...
    def on_log_start(self, offset: int) -> Any: ...
    def last_stable_offset_of(self, completed: CompletedTxn) -> int: ...
    def complete_txn(self, completed: CompletedTxn) -> Any: ...


@dataclass(slots=True)
class LoadedLogOffsets:
    """What :meth:`LogLoader.load` found (Kafka's LoadedLogOffsets)."""

    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    recovered_segments: int  # segments scanned by recovery (observability, tests)


def end_txn_marker_of(data: bytes | bytearray | memoryview) -> tuple[bool, int] | None:
    """``(is_abort, coordinator_epoch)`` of the end-txn marker in the control batch ``data``, or None when it
    holds no such record (an emptied control batch, another control type, unreadable records)."""
    try:
        records = decode_records(data, verify_crc=False)
        if not records:
            return None
        control = parse_control_record(records[0])
    except RecordError:
        return None
    if not control.is_end_txn:
        return None
    return control.type == ControlRecordType.ABORT, int(control.coordinator_epoch or 0)


def update_producer_state(
    producer_state: ProducerState,
    header: BatchHeader,
    data: bytes | bytearray | memoryview | None,
    seg: LogSegment | None,
    write_txn_index: bool,
) -> None:
    """One replayed batch into the producer state, as Kafka's ``updateProducers``, and for a transaction it
    completes, ``updateTxnIndex`` (when ``write_txn_index``: recovery of ``seg``) and ``completeTxn``.  ``data``:
    the batch's bytes (needed for control batches only, to read the marker)."""
    marker = end_txn_marker_of(data) if header.producer_id >= 0 and header.is_control and data is not None else None
    if marker is None:
        completed = producer_state.update(header, header.base_offset, header.last_offset, header.max_timestamp)
    else:
        completed = producer_state.update(
            header, header.base_offset, header.last_offset, header.max_timestamp, marker[1], marker[0]
        )
    if completed is not None:
        complete_transaction(producer_state, completed, seg if write_txn_index else None)


def complete_transaction(producer_state: ProducerState, completed: CompletedTxn, seg: LogSegment | None) -> None:
    """Kafka's steps for a completed transaction: the ``.txnindex`` entry of an abort in ``seg`` (the segment
    holding the marker; None: the entry exists already), with the LSO computed before the completion."""
    if seg is not None and completed.is_aborted:
        lso = producer_state.last_stable_offset_of(completed)
        last = seg.txn_index.last_offset()
        if last is None or last < completed.last_offset:
            seg.update_txn_index(
                AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
            )
    producer_state.complete_txn(completed)


def rebuild_producer_state(
    producer_state: ProducerState, segments: LogSegments, start: int, rebuild_txn_index_from: int | None = None
) -> None:
    """Replay the batches from offset ``start`` on into the producer state (after its snapshot was loaded).
    The aborted transactions whose markers lie in segments with a base offset >= ``rebuild_txn_index_from``
    are written to those segments' ``.txnindex`` (recovery rebuilds them; Kafka's ``LogSegment.recover``)."""
    for seg, pos, header in segments.iter_batches_from(start):
        if header.base_offset >= start or header.last_offset >= start:
            if header.producer_id < 0:
                producer_state.update(header, header.base_offset, header.last_offset, header.max_timestamp)
                continue
            data = seg.read_batch(pos, header.size) if header.is_control else None
            write = rebuild_txn_index_from is not None and seg.base_offset >= rebuild_txn_index_from
            update_producer_state(producer_state, header, data, seg, write)


class LogLoader:
    """Loads one partition directory into ``segments`` (empty when called); see module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        epoch_cache: EpochCache | None,
        producer_state: ProducerState | None,
        now_ms: int,
    ) -> None:
        self.dir = directory
        self.config = config
        self.segments = segments
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self.now = now_ms

    def load(
        self,
        recovery_point: int,
        checkpoint_log_start: int,
        clean_shutdown: bool,
        progress: Callable[[int, int], None] | None,
    ) -> LoadedLogOffsets:
        d = self.dir
        config = self.config
        now = self.now
        segments = self.segments
        # Pass 1: remove temporary files, collect swap files.  As Kafka's LogLoader, a swap file whose base
        # offset is at or above the smallest ``.cleaned`` base offset is deleted too: it belongs to an operation
        # that had not finished writing all of its output (KAFKA-6264), so the originals are still authoritative.
        swap_logs: list[Path] = []
        min_cleaned = None
        for path in list(d.iterdir()):
            if not path.is_file():
                continue
            name = path.name
            if name.endswith(CLEANED_SUFFIX):
                try:
                    base = offset_from_filename(name)
                    min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
                except ValueError:
                    pass
                path.unlink(missing_ok=True)
            elif name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX):
                base_name = name[: -len(SWAP_SUFFIX)]
                if base_name.endswith(LOG_SUFFIX):
                    swap_logs.append(path)
                else:  # an index swap file: indexes are rebuilt from the swapped-in log
                    path.unlink(missing_ok=True)
        if min_cleaned is not None:
            for path in [p for p in swap_logs if offset_from_filename(p.name) >= min_cleaned]:
                log.warning("deleting %s: it is newer than an unfinished .cleaned file", path)
                path.unlink(missing_ok=True)
                swap_logs.remove(path)
        # Pass 2: delete segments whose offsets fall inside the swapped range.  Pass 3: rename the swaps.
        if swap_logs:
            ranges = []
            for path in swap_logs:
                base = offset_from_filename(path.name)
                seg = LogSegment(d, base, config, file_suffix=SWAP_SUFFIX, now_ms=now)
                seg.recover()
                ranges.append((base, seg.read_next_offset()))
                seg.close_handlers()
                for p in (index_file(d, base, SWAP_SUFFIX), time_index_file(d, base, SWAP_SUFFIX)):
                    p.unlink(missing_ok=True)
            lo = min(r[0] for r in ranges)
            hi = max(r[1] for r in ranges)
            for path in list(d.iterdir()):
                if path.name.endswith(LOG_SUFFIX):
                    try:
                        base = offset_from_filename(path.name)
                    except ValueError:
                        continue
                    if lo <= base < hi:
                        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                            (d / f"{base:020d}{suffix}").unlink(missing_ok=True)
            for path in swap_logs:
                base = offset_from_filename(path.name)
                os.replace(path, log_file(d, base))
                index_file(d, base).unlink(missing_ok=True)
                time_index_file(d, base).unlink(missing_ok=True)
        # Pass 4: load segments; delete indexes without a log; rebuild missing or corrupt indexes.
        bases: list[int] = []
        for path in d.iterdir():
            name = path.name
            try:
                base = offset_from_filename(name)
            except ValueError:
                continue
            if name.endswith(LOG_SUFFIX):
                bases.append(base)
            elif (
                name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
                and not log_file(d, base).exists()
            ):
                path.unlink(missing_ok=True)
        bases.sort()
        # after an unclean shutdown the segments from the one holding the recovery point on are recovered
        # below (indexes rebuilt from the .log): checking their indexes first would be wasted work
        first_recovered = len(bases) if clean_shutdown else max(bisect.bisect_right(bases, recovery_point) - 1, 0)
        rebuilt_from: int | None = None  # the first segment whose .txnindex recovery rebuilds
        for i, base in enumerate(bases):
            seg = LogSegment(d, base, config, now_ms=now)
            if i < first_recovered:
                try:
                    seg.sanity_check()
                except (CorruptIndexError, FileNotFoundError) as exc:
                    log.warning("rebuilding indexes of %s: %s", seg.log_path, exc)
                    seg.recover()
                    rebuilt_from = base if rebuilt_from is None else rebuilt_from
            segments.add(seg)

        # Recovery of the unflushed segments after an unclean shutdown.
        recovered = 0
        if not clean_shutdown and len(segments):
            first = segments.from_offset(recovery_point)
            if first and rebuilt_from is None:
                rebuilt_from = first[0].base_offset
            recovered = self._recover_from(recovery_point, progress)

        if not len(segments):
            segments.add(LogSegment(d, max(checkpoint_log_start, 0), config, now_ms=now))
        log_end_offset = segments[-1].read_next_offset()
        log_start_offset = max(checkpoint_log_start, segments[0].base_offset)
        if log_end_offset < log_start_offset:
            # everything below the checkpointed start is gone; start the log afresh there
            segments.delete_all()
            segments.add(LogSegment(d, log_start_offset, config, now_ms=now))
            log_end_offset = log_start_offset
        segments[-1].resize_indexes(config.segment_index_bytes)
        if clean_shutdown:
            recovery_point = log_end_offset
        else:
            recovery_point = min(max(recovery_point, log_start_offset), log_end_offset)
        if self.epoch_cache is not None:
            self.epoch_cache.truncate_from_end(log_end_offset)
            self.epoch_cache.truncate_from_start(log_start_offset)
        if self.producer_state is not None:
            if rebuilt_from is not None and rebuilt_from < log_start_offset:
                rebuilt_from = segments[0].base_offset
            # the .txnindex of a recovered segment is rebuilt by replaying it: the replay starts at or below it
            start = self.producer_state.load(log_start_offset, log_end_offset, rebuilt_from)
            if rebuilt_from is not None and start > rebuilt_from:
                start = self.producer_state.load(log_start_offset, log_end_offset, -1)  # no snapshot that low
            rebuild_producer_state(self.producer_state, segments, start, rebuilt_from)
        return LoadedLogOffsets(log_start_offset, log_end_offset, recovery_point, recovered)

    def _recover_from(self, recovery_point: int, progress: Callable[[int, int], None] | None) -> int:
        """Recover every segment holding offsets >= ``recovery_point``; returns how many were scanned."""
        # every segment holding offsets >= recovery_point: the one containing it and all later ones
        segments = self.segments
        to_recover = segments.from_offset(recovery_point)
        recovered = 0
        total = sum(s.size for s in to_recover)
        done = 0
        if progress is not None:
            progress(0, total)

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None and (done == total or done % (1 << 20) < n):
                progress(done, total)

        for i, seg in enumerate(to_recover):
            recovered += 1
            before = done
            truncated = seg.recover(on_header=self._recovery_epoch_hook(), progress=advance)
            done = before + seg.size + truncated
            if truncated > 0:
                log.warning("truncated %d invalid bytes from %s", truncated, seg.log_path)
                for later in to_recover[i + 1 :]:
                    log.warning("deleting %s after the corruption in %s", later.log_path, seg.log_path)
                    later.delete()
                    segments.remove(later)
                if progress is not None:
                    progress(total, total)
                break
            if progress is not None:
                progress(done, total)
        # an empty trailing segment that is not the first one is pointless but harmless: Kafka keeps it
        return recovered

    def _recovery_epoch_hook(self) -> Callable[[int, HeaderTuple], None] | None:
        cache = self.epoch_cache
        if cache is None:
            return None

        def on_header(_position: int, fields: HeaderTuple) -> None:
            epoch = fields[H_PARTITION_LEADER_EPOCH]
            if epoch >= 0:
                latest = cache.latest_epoch()
                if latest is None or epoch > latest:
                    cache.assign(epoch, fields[H_BASE_OFFSET])

        return on_header


__all__ = [
    "EpochCache",
    "LoadedLogOffsets",
    "LogLoader",
    "ProducerState",
    "complete_transaction",
    "end_txn_marker_of",
    "rebuild_producer_state",
    "update_producer_state",
]
