"""One cleaning round of one log (Kafka's ``Cleaner.clean`` / ``cleanSegments``): the offset map, then every
group of segments recopied through the filter into ``.cleaned`` and swapped in."""

from __future__ import annotations

import time
from collections.abc import Callable

from tidelog.records.batch import build_batch
from tidelog.records.header import (
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    LOG_OVERHEAD,
)
from tidelog.storage.cleaner.batch_filter import _Filter
from tidelog.storage.cleaner.batches import _iter_batches
from tidelog.storage.cleaner.build_map import build_offset_map
from tidelog.storage.cleaner.context import IO_CHECK_BYTES, CleanResult, Fault, _Context
from tidelog.storage.cleaner.manager import LogToClean, group_segments_by_size
from tidelog.storage.cleaner.throttler import Throttler
from tidelog.storage.cleaner.txn_metadata import CleanedTransactionMetadata
from tidelog.storage.format import CLEANED_SUFFIX, SWAP_SUFFIX
from tidelog.storage.log import PartitionLog
from tidelog.storage.offset_map import OffsetMap
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_names import index_file, log_file, time_index_file, txn_index_file


def _remove_leftovers(plog: PartitionLog, base: int) -> None:
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for f in (log_file, index_file, time_index_file, txn_index_file):
            f(plog.dir, base, suffix).unlink(missing_ok=True)


def clean_segments(
    plog: PartitionLog,
    group: list[LogSegment],
    group_upper: int,
    flt: _Filter,
    ctx: _Context,
    now_ms: int,
) -> bool:
    """Recopy ``group`` into one cleaned segment and swap it in. False when the log changed meanwhile."""
    base = group[0].base_offset
    sizes = [s.size for s in group]
    try:
        handles = [s.handle for s in group]  # held: retention may close the segments while we read them
    except ValueError:
        return False
    _remove_leftovers(plog, base)
    cleaned = LogSegment(plog.dir, base, plog.config, file_suffix=CLEANED_SUFFIX, now_ms=now_ms)
    swapped = False
    # the group's transactions (Kafka's CleanedTransactionMetadata): aborted ones from the .txnindex files, the
    # entries of the markers kept written to the cleaned segment's .txnindex
    txns = CleanedTransactionMetadata(cleaned.txn_index)
    flt.txns = txns
    bounds = [s.base_offset for s in group[1:]] + [group_upper]
    try:
        last_written = -1
        last_seen = -1
        result = ctx.result
        apply = flt.apply
        append = cleaned.append_parts
        io = ctx.io
        # per-batch counts in locals, added to the result after each segment; ctx.io once per IO_CHECK_BYTES
        for seg, seg_handle, size, seg_upper in zip(group, handles, sizes, bounds, strict=True):
            txns.add_aborted_transactions(plog.collect_aborted_transactions(seg.base_offset, seg_upper))
            pending = nbytes_read = nbytes_written = nrecords_read = nrecords_kept = nrewritten = 0
            for buf, pos, _fpos, fields in _iter_batches(seg_handle.fd, size, ctx.chunk):
                if pending >= IO_CHECK_BYTES:
                    io(pending)
                    pending = 0
                bsize = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
                nbytes_read += bsize
                out, nread, nkept, max_ts = apply(buf, pos, fields)
                nrecords_read += nread
                nrecords_kept += nkept
                last_seen = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA]
                if out is None:
                    pending += bsize
                    continue
                if type(out) is not memoryview:
                    nrewritten += 1
                append(last_seen, max_ts, last_seen, (out,))
                last_written = last_seen
                nout = len(out)
                pending += bsize + nout
                nbytes_written += nout
            result.bytes_read += nbytes_read
            result.bytes_written += nbytes_written
            result.records_read += nrecords_read
            result.records_retained += nrecords_kept
            result.batches_rewritten += nrewritten
            io(pending)
        end_marker = min(last_seen, group_upper - 1)
        if end_marker > last_written:
            # keep the cleaned segment's offset range equal to the group's, so that a .swap recovered after a
            # crash removes every segment it replaces (the loader derives the range from the swap's offsets)
            empty = build_batch([], base_offset=end_marker, last_offset_delta=0)
            cleaned.append(end_marker, -1, end_marker, empty)
            ctx.result.bytes_written += len(empty)
        cleaned.on_becoming_inactive()
        cleaned.flush()
        ctx.step("cleaned")
        swapped = plog.replace_segments(group, cleaned, expected_sizes=sizes, now_ms=now_ms, fault=ctx.fault)
        return swapped
    finally:
        if not swapped and cleaned.file_suffix == CLEANED_SUFFIX:
            cleaned.delete()


def producer_last_offsets(plog: PartitionLog) -> dict[int, int]:
    ps = plog.producer_state
    active = getattr(ps, "active_producers", None)
    if active is None:
        return {}
    return {pid: e.last_data_offset for pid, e in active().items()}


def producer_epochs(plog: PartitionLog) -> dict[int, int]:
    ps = plog.producer_state
    active = getattr(ps, "active_producers", None)
    if active is None:
        return {}
    return {pid: e.producer_epoch for pid, e in active().items()}


def clean_log(
    ltc: LogToClean,
    offset_map: OffsetMap,
    *,
    now_ms: int | None = None,
    throttler: Throttler | None = None,
    should_abort: Callable[[], bool] = lambda: False,
    fault: Fault | None = None,
    io_buffer_size: int = 512 * 1024,
) -> CleanResult:
    """One cleaning round of ``ltc.plog`` (see the package docstring). ``result.end_offset`` is the new first
    dirty offset; ``result.aborted`` is set when the log changed under the cleaner (nothing is lost, retry
    later). Segments are read sequentially in ``io_buffer_size`` chunks (``log.cleaner.io.buffer.size``)."""
    t0 = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    plog = ltc.plog
    result = CleanResult(ltc.tp, ltc.first_dirty_offset, ltc.first_dirty_offset)
    ctx = _Context(throttler, should_abort, fault, result, io_buffer_size)
    offset_map.clear()
    end = build_offset_map(plog, ltc.first_dirty_offset, ltc.first_uncleanable_offset, offset_map, ctx)
    result.end_offset = end
    result.map_entries = len(offset_map)
    result.map_utilization = offset_map.utilization
    ctx.step("map-built")
    flt = _Filter(offset_map, now, plog.config.delete_retention_ms, producer_last_offsets(plog),
                  producer_epochs=producer_epochs(plog))
    segments = plog.segments
    inactive = segments[:-1]
    uppers = [segments[i + 1].base_offset for i in range(len(inactive))]
    # every inactive segment holding offsets below the map's end (clean head and dirty section alike), except
    # those wholly below the log start offset, which retention removes
    chosen = [
        (s, u) for s, u in zip(inactive, uppers, strict=True) if s.base_offset < end and u > plog.log_start_offset
    ]
    if chosen:
        cfg = plog.config
        groups = group_segments_by_size(
            [s for s, _ in chosen], [u for _, u in chosen], cfg.segment_bytes, cfg.segment_index_bytes
        )
        upper_of = {id(s): u for s, u in chosen}
        for group in groups:
            if not clean_segments(plog, group, upper_of[id(group[-1])], flt, ctx, now):
                result.aborted = True
                break
            result.groups += 1
    result.min_delete_horizon = flt.min_horizon
    result.seconds = time.monotonic() - t0
    return result
