"""The scan of :meth:`tidelog.storage.segment.LogSegment.recover`: every batch of a segment's ``.log``
re-validated (size, magic, CRC-32C, offsets increasing from the base offset) in large preads, and the index
entries it implies collected (Kafka's ``LogSegment.recover``), up to the first invalid byte. The C loop
(``_segment.scan_batches``) when built, the same checks in Python otherwise."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from tidelog.records.errors import RecordError
from tidelog.records.header import (
    BATCH_LENGTH_FIELD,
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    HeaderTuple,
    validate_batch_tuple,
)
from tidelog.storage.file_handles import _preadv_full
from tidelog.storage.header_scan import RECOVERY_READ_CHUNK, _peek_size
from tidelog.storage.index import INT32_MAX, NO_TIMESTAMP
from tidelog.storage.segment_state import c_scan_batches as _c_scan_batches

_SCAN_NEED_MORE = 0  # _c_scan_batches: the next batch is not whole in the buffer


class RecoveryScan(NamedTuple):
    """Where the valid batches end and the index entries for them (relative offsets, positions)."""

    valid_bytes: int
    last_index_entry: int
    max_ts: int
    max_ts_offset: int
    off_rel: list[int]
    off_pos: list[int]
    time_ts: list[int]
    time_rel: list[int]


def scan_for_recovery(
    fd: int,
    size: int,
    base: int,
    interval: int,
    max_message_bytes: int | None,
    on_batch: Callable[[int, BatchHeader], None] | None,
    progress: Callable[[int], None] | None,
    on_header: Callable[[int, HeaderTuple], None] | None,
) -> RecoveryScan:
    """Scan ``fd[0:size]`` of the segment at ``base`` (see the module docstring and ``LogSegment.recover``)."""
    valid_bytes = 0
    last_index_entry = 0
    max_ts, max_ts_offset = NO_TIMESTAMP, -1
    expected_min = base
    off_rel: list[int] = []
    off_pos: list[int] = []
    time_ts: list[int] = []
    time_rel: list[int] = []
    last_time_ts = NO_TIMESTAMP
    # one reused read buffer (no allocation and no page faults per chunk; it stays in cache for the CRC)
    arena = memoryview(bytearray(min(RECOVERY_READ_CHUNK, size)))
    buf = arena[:0]
    buf_start = 0
    validate = validate_batch_tuple
    unpack_length = BATCH_LENGTH_FIELD.unpack_from
    scan = _c_scan_batches
    headers: list[tuple[int, HeaderTuple]] | None = (
        None if on_header is None and on_batch is None else []
    )
    refilled = False
    while scan is not None and size - valid_bytes >= LOG_OVERHEAD:
        # the C loop over every whole batch in the buffer (the same checks and index rule as below)
        rel_pos = valid_bytes - buf_start
        consumed, status, last_index_entry, max_ts, max_ts_offset, last_time_ts, expected_min = scan(
            buf, rel_pos, size - valid_bytes, -1 if max_message_bytes is None else max_message_bytes,
            valid_bytes, last_index_entry, max_ts, max_ts_offset, last_time_ts, expected_min, base,
            interval, off_rel, off_pos, time_ts, time_rel, headers,
        )
        if headers:
            for position, fields in headers:
                if on_header is not None:
                    on_header(position, fields)
                if on_batch is not None:
                    on_batch(position, BatchHeader(*fields))
            headers.clear()
        valid_bytes += consumed
        if consumed and progress is not None:
            progress(consumed)
        if status != _SCAN_NEED_MORE or (refilled and not consumed):
            break  # invalid (or cut short), or the end of the file
        # refill from the next batch on: a chunk, or the whole batch if it is larger
        remaining = size - valid_bytes
        need = _peek_size(os.pread(fd, LOG_OVERHEAD, valid_bytes), 0) if remaining >= LOG_OVERHEAD else 0
        want = min(max(RECOVERY_READ_CHUNK, need if need <= remaining else 0), remaining)
        if len(arena) < want:
            arena = memoryview(bytearray(want))
        buf = arena[: _preadv_full(fd, arena[:want], valid_bytes)]
        buf_start = valid_bytes
        refilled = True
        if not buf:
            break
    while scan is None and size - valid_bytes >= LOG_OVERHEAD:
        rel_pos = valid_bytes - buf_start
        have = len(buf) - rel_pos
        # the batch's whole size from its length field (0 while that is not in the buffer)
        need = unpack_length(buf, rel_pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD if have >= LOG_OVERHEAD else 0
        if have < RECORD_BATCH_OVERHEAD or have < need:
            # refill from this batch on: a chunk, or the whole batch if it is larger (a declared size
            # beyond the end of the file is not read: the header alone fails it)
            remaining = size - valid_bytes
            if need == 0 and remaining >= LOG_OVERHEAD:
                need = _peek_size(os.pread(fd, LOG_OVERHEAD, valid_bytes), 0)
            want = min(max(RECOVERY_READ_CHUNK, need if need <= remaining else 0), remaining)
            if len(arena) < want:
                arena = memoryview(bytearray(want))
            buf = arena[: _preadv_full(fd, arena[:want], valid_bytes)]
            buf_start, rel_pos = valid_bytes, 0
            if not buf:
                break
        try:
            fields = validate(buf, rel_pos, max_message_bytes, size - valid_bytes)
        except RecordError:
            break
        first = fields[H_BASE_OFFSET]
        last = first + fields[H_LAST_OFFSET_DELTA]
        if first < expected_min or last - base > INT32_MAX:
            break
        batch_max_ts = fields[H_MAX_TIMESTAMP]
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last
        if valid_bytes - last_index_entry > interval:
            off_rel.append(last - base)
            off_pos.append(valid_bytes)
            if max_ts > last_time_ts:
                time_ts.append(max_ts)
                time_rel.append(max_ts_offset - base)
                last_time_ts = max_ts
            last_index_entry = valid_bytes
        if on_header is not None:
            on_header(valid_bytes, fields)
        if on_batch is not None:
            on_batch(valid_bytes, BatchHeader(*fields))
        batch_size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        valid_bytes += batch_size
        expected_min = last + 1
        if progress is not None:
            progress(batch_size)
    return RecoveryScan(
        valid_bytes, last_index_entry, max_ts, max_ts_offset, off_rel, off_pos, time_ts, time_rel
    )
