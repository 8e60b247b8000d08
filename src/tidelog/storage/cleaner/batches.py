"""Reading a segment's batches, shared by both passes of a cleaning (the offset-map build and the filter):
sequential ``pread`` chunks, the CRC check, the record bytes (decompressed if need be), the framing error both
record walks raise, and the loader of the per-batch C loops (``tidelog.storage._cleanwalk``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from tidelog.records.batch import DEFAULT_MAX_DECOMPRESSED
from tidelog.records.compression import decompress
from tidelog.records.crc import _crc32c
from tidelog.records.errors import CorruptRecordError
from tidelog.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_CRC,
    H_MAGIC,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    HeaderTuple,
    unpack_header_tuple,
)


def _load_c(name: str) -> Callable[..., Any] | None:
    """``tidelog.storage._cleanwalk.<name>`` (the per-batch loops in C, built by setup.py when a compiler is
    there), or None: not built, or ``TIDELOG_PURE_PYTHON`` is set (to anything but "" or "0")."""
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from tidelog.storage import _cleanwalk  # type: ignore[attr-defined]  # C, built by setup.py
    except ImportError:
        return None
    return getattr(_cleanwalk, name, None)


#: bytes per ``pread`` of a segment when its ``log.cleaner.io.buffer.size`` is smaller (a batch larger than the
#: buffer is read whole)
MIN_READ_CHUNK = 64 * 1024


def _iter_batches(
    fd: int, size: int, chunk: int, start: int = 0
) -> Iterator[tuple[bytes, int, int, HeaderTuple]]:
    """``(buffer, position in buffer, file position, header tuple)`` of every whole batch in ``[start, size)``.

    The file is read sequentially in ``chunk``-byte ``pread`` calls; the batch is ``buffer[pos : pos + size]``
    (valid until the next iteration). A partial tail ends the walk. Raises like :meth:`BatchHeader.parse` on a
    bad magic."""
    chunk = max(chunk, MIN_READ_CHUNK)
    buf = b""
    buf_start = start  # file position of buf[0]
    p = 0
    while True:
        fpos = buf_start + p
        if size - fpos < RECORD_BATCH_OVERHEAD:
            return
        have = len(buf) - p
        if have < RECORD_BATCH_OVERHEAD:
            buf = buf[p:] + _pread_exact(fd, min(chunk, size - fpos - have), fpos + have)
            buf_start, p, have = fpos, 0, len(buf)
        fields = unpack_header_tuple(buf, p)
        if fields[H_MAGIC] != MAGIC:
            BatchHeader.parse(buf, p)  # raises InvalidMagicError with the usual message
        bsize = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        if bsize < RECORD_BATCH_OVERHEAD or fpos + bsize > size:
            return
        if have < bsize:
            buf = buf[p:] + _pread_exact(fd, min(max(chunk, bsize) - have, size - fpos - have), fpos + have)
            buf_start, p = fpos, 0
        yield buf, p, fpos, fields
        p += bsize


def _pread_exact(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) < n:
        chunks = [data]
        done = len(data)
        while done < n:
            more = os.pread(fd, n - done, pos + done)
            if not more:
                raise OSError(f"short read at {pos + done}")
            chunks.append(more)
            done += len(more)
        data = b"".join(chunks)
    return data


def _check_crc(buf: bytes, pos: int, fields: HeaderTuple) -> None:
    end = pos + fields[H_BATCH_LENGTH] + LOG_OVERHEAD
    actual = _crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])  # the C CRC on a view: no copy
    if actual != fields[H_CRC]:
        raise CorruptRecordError(
            f"batch at offset {fields[H_BASE_OFFSET]} is corrupt: stored CRC {fields[H_CRC]:#010x}, "
            f"computed {actual:#010x}"
        )


def _records_of(buf: bytes, pos: int, fields: HeaderTuple) -> tuple[bytes, int, int]:
    """``(data, start, end)``: the batch's record bytes are ``data[start:end]`` (decompressed if need be; an
    uncompressed batch is not copied)."""
    end = pos + fields[H_BATCH_LENGTH] + LOG_OVERHEAD
    codec = fields[H_ATTRIBUTES] & COMPRESSION_MASK
    if not codec:
        return buf, pos + RECORD_BATCH_OVERHEAD, end
    with memoryview(buf) as view:
        data = decompress(codec, view[pos + RECORD_BATCH_OVERHEAD : end], DEFAULT_MAX_DECOMPRESSED)
    return data, 0, len(data)
