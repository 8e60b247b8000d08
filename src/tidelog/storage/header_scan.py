"""Batch-header scanners over a segment file: read the 61-byte v2 headers (no records, no CRC) by ``pread``,
one at a time or a chunk at a time, and classify the bytes at a position for the dump tool. The layout is
:mod:`tidelog.records.header`'s; this module only reads files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from tidelog.records.header import (
    BATCH_LENGTH_FIELD,
    H_BATCH_LENGTH,
    LENGTH_OFFSET,
    LOG_HEADER,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    HeaderTuple,
    parse_header_tuple,
)


def read_header_at(fd: int, position: int, end: int) -> BatchHeader | None:
    """Parse the batch header at ``position`` if a whole header fits before ``end``; no CRC check."""
    if end - position < RECORD_BATCH_OVERHEAD:
        return None
    raw = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
    if len(raw) < RECORD_BATCH_OVERHEAD:
        return None
    return BatchHeader.parse(raw)


HEADER_SCAN_CHUNK = 4096
"""Bytes read per ``pread`` when scanning headers: a 4 KiB read costs about what a 61-byte one does, and
holds every header of a run of small batches (the index interval is 4 KiB by default)."""

RECOVERY_READ_CHUNK = 1024 * 1024
"""Bytes read per ``pread`` by recovery (batches are validated in the buffer, whole batches at a time)."""


def iter_header_tuples(fd: int, start: int, end: int) -> Iterator[tuple[int, HeaderTuple]]:
    """``(position, header tuple)`` of every whole batch in ``[start, end)`` of ``fd``; no CRC check.

    Headers are read in :data:`HEADER_SCAN_CHUNK` preads: every header inside the chunk is parsed from it,
    and only a header beyond the chunk costs another read.  Stops at a partial or undersized batch; raises
    like :meth:`BatchHeader.parse` on a bad magic.
    """
    pos = start
    buf = b""
    buf_start = 0
    while end - pos >= RECORD_BATCH_OVERHEAD:
        rel = pos - buf_start
        if rel < 0 or len(buf) - rel < RECORD_BATCH_OVERHEAD:
            buf = os.pread(fd, min(HEADER_SCAN_CHUNK, end - pos), pos)
            buf_start, rel = pos, 0
            if len(buf) < RECORD_BATCH_OVERHEAD:
                return
        fields = parse_header_tuple(buf, rel)
        size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or pos + size > end:
            return
        yield pos, fields
        pos += size


def _peek_size(buf: bytes | memoryview, pos: int) -> int:
    """Whole size of the batch at ``buf[pos:]`` from its length field (0 if fewer than 12 bytes)."""
    if len(buf) - pos < LOG_OVERHEAD:
        return 0
    return BATCH_LENGTH_FIELD.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD


# Smallest batch size Kafka's FileLogInputStream accepts before calling a size field corrupt
# (LegacyRecord.RECORD_OVERHEAD_V0 = 14); a v2 batch additionally needs its 61-byte header.
MIN_RECORD_OVERHEAD = 14
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17


@dataclass(slots=True)
class HeaderScan:
    """Result of looking at the bytes at one position of a ``.log``."""

    header: BatchHeader | None = None
    error: str | None = None
    partial: bool = False  # not enough bytes for a whole batch: the invalid tail


def classify_header(head: bytes | memoryview, pos: int, available: int) -> HeaderScan:
    """Classify the batch that starts at ``pos`` from its first bytes (up to 61), as Kafka's dump tool reads a
    ``.log`` (the checks and messages of ``FileLogInputStream``); ``available``: the bytes from ``pos`` to the end."""
    if available < HEADER_SIZE_UP_TO_MAGIC:
        return HeaderScan(partial=True)
    _, length = LOG_HEADER.unpack_from(head, 0)
    size = length + LOG_OVERHEAD
    if length < MIN_RECORD_OVERHEAD:
        return HeaderScan(
            error=f"Found record size {length} smaller than minimum record overhead ({MIN_RECORD_OVERHEAD})"
        )
    if size > available:
        return HeaderScan(partial=True)
    magic = head[MAGIC_OFFSET]
    if magic != MAGIC:
        return HeaderScan(error=f"unsupported magic {magic} (only v2 batches)")
    if size < RECORD_BATCH_OVERHEAD:
        return HeaderScan(error=f"batch size {size} is smaller than the v2 batch header ({RECORD_BATCH_OVERHEAD})")
    header = BatchHeader.parse(head, 0)
    if header.last_offset_delta < 0 or header.records_count < 0:
        return HeaderScan(
            header=header,
            error=f"negative lastOffsetDelta {header.last_offset_delta} or recordsCount {header.records_count}",
        )
    return HeaderScan(header=header)
