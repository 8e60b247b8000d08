"""One log segment: ``<base offset, 20 digits>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` holds whole v2 record batches back to back, exactly as Kafka writes them.  The segment never
decodes records: it reads batch headers with ``os.pread`` and hands out :class:`FileRegion` views that a
broker can ``os.sendfile`` to a socket.

Index rule (Kafka ``LogSegment.append``/``recover``, facts 1.4): before a batch is counted, if the bytes
appended since the last index entry exceed ``index.interval.bytes``, write the offset entry
``(batch last offset -> batch start position)`` and the time entry ``(max timestamp so far -> last offset of
the batch holding it)``, then reset the counter; afterwards add the batch's size to the counter.
"""

from __future__ import annotations

import mmap
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.records.errors import CorruptRecordError, RecordError
from tidelog.records.header import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    validate_batch,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.index import INT32_MAX, NO_TIMESTAMP, CorruptIndexError, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def filename_prefix(offset: int) -> str:
    """The base offset padded to 20 digits, as Kafka's ``LogFileUtils.filenamePrefixFromOffset``."""
    if offset < 0:
        raise ValueError(f"negative base offset {offset}")
    return f"{offset:020d}"


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{LOG_SUFFIX}{suffix}"


def index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{TXN_INDEX_SUFFIX}{suffix}"


def offset_from_filename(name: str) -> int:
    """Base offset from a segment file name such as ``00000000000000000042.log`` (suffixes allowed)."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} is not a segment file name (20-digit base offset expected)")
    return int(prefix)


class FileHandle:
    """An open file descriptor that closes itself when no segment or region references it any more.

    Regions returned by reads hold the handle, so a segment deleted or closed by retention while a fetch
    response is still being sent keeps a valid descriptor until the response is done with it.
    """

    __slots__ = ("__weakref__", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


@dataclass(slots=True)
class FileRegion:
    """``length`` bytes of a segment file from ``position``: what reads return, ready for ``os.sendfile``.

    ``first_offset`` is the base offset of the first batch in the region (-1 if empty).  The ``handle``
    keeps the descriptor open for as long as the region lives.
    """

    fd: int
    position: int
    length: int
    first_offset: int = -1
    handle: FileHandle | None = field(default=None, repr=False)

    def read_bytes(self) -> bytes:
        """Copy the region into memory (tools and tests; the broker uses sendfile)."""
        chunks: list[bytes] = []
        done = 0
        while done < self.length:
            chunk = os.pread(self.fd, self.length - done, self.position + done)
            if not chunk:
                raise CorruptRecordError(
                    f"file region ended after {done} of {self.length} bytes (position {self.position})"
                )
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


def read_header_at(fd: int, position: int, end: int) -> BatchHeader | None:
    """Parse the batch header at ``position`` if a whole header fits before ``end``; no CRC check."""
    if end - position < RECORD_BATCH_OVERHEAD:
        return None
    raw = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
    if len(raw) < RECORD_BATCH_OVERHEAD:
        return None
    return BatchHeader.parse(raw)


class LogSegment:
    """A ``.log`` file of batches with its offset and time indexes (Kafka's ``LogSegment``)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        file_suffix: str = "",
        now_ms: int | None = None,
        roll_jitter_ms: int | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.file_suffix = file_suffix
        self.index_interval_bytes = config.index_interval_bytes
        self.max_index_size = config.segment_index_bytes
        self.log_path = log_file(self.dir, base_offset, file_suffix)
        self.index_was_missing = not index_file(self.dir, base_offset, file_suffix).exists()
        self.time_index_was_missing = not time_index_file(self.dir, base_offset, file_suffix).exists()
        fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._handle: FileHandle | None = FileHandle(fd)
        self._size = os.fstat(fd).st_size
        self.offset_index = OffsetIndex(
            index_file(self.dir, base_offset, file_suffix), base_offset, self.max_index_size
        )
        self.time_index = TimeIndex(
            time_index_file(self.dir, base_offset, file_suffix), base_offset, self.max_index_size
        )
        self._lock = threading.RLock()
        self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if roll_jitter_ms is None:
            roll_jitter_ms = self.random_jitter(config)
        self.roll_jitter_ms = roll_jitter_ms
        self._bytes_since_last_index_entry = self._bytes_after_last_index_entry()
        # (max timestamp so far, last offset of the batch holding it); None until loaded lazily
        self._max_ts_and_offset: tuple[int, int] | None = None if self._size else (NO_TIMESTAMP, -1)
        # max timestamp of the first batch (segment.ms is measured from it); None until loaded lazily
        self._rolling_based_ts: int | None = None if self._size else NO_TIMESTAMP

    def _bytes_after_last_index_entry(self) -> int:
        """The append counter a rebuild would have: bytes from the last indexed batch's start to the end.

        Kafka resets the counter to 0 on open and truncation; continuing from the rebuilt value instead keeps
        the indexes byte-identical to what recovery would produce from the same ``.log``.
        """
        if self.offset_index.entries == 0:
            return self._size
        return self._size - self.offset_index.entry(self.offset_index.entries - 1)[1]

    @staticmethod
    def random_jitter(config: LogConfig) -> int:
        """Kafka's per-segment roll jitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        if config.segment_jitter_ms <= 0:
            return 0
        return random.randrange(min(config.segment_jitter_ms, config.segment_ms))

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig, **kwargs: object) -> LogSegment:
        return cls(directory, base_offset, config, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ properties
    @property
    def fd(self) -> int:
        if self._handle is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._handle.fd

    @property
    def handle(self) -> FileHandle:
        if self._handle is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._handle

    @property
    def size(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _load_max_timestamp(self) -> tuple[int, int]:
        """From the last time-index entry, then the batches after the last offset-index entry before it."""
        ts, off = self.time_index.last_entry
        best = (ts, off) if ts >= 0 else (NO_TIMESTAMP, -1)
        _, pos = self.offset_index.lookup(off)
        for _, header in self.iter_headers(pos):
            if header.max_timestamp > best[0]:
                best = (header.max_timestamp, header.last_offset)
        return best

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            self._max_ts_and_offset = self._load_max_timestamp()
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset[0]

    @property
    def largest_record_timestamp(self) -> int | None:
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else None

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when the segment has no timestamps (for retention.ms)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    @property
    def rolling_based_timestamp(self) -> int:
        if self._rolling_based_ts is None:
            header = read_header_at(self.fd, 0, self._size)
            self._rolling_based_ts = header.max_timestamp if header is not None else NO_TIMESTAMP
        return self._rolling_based_ts

    # ------------------------------------------------------------------ roll
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_messages: int) -> int:
        ts = self.rolling_based_timestamp
        if ts >= 0:
            return max_timestamp_in_messages - ts
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        """Kafka's five roll conditions (facts 1.5)."""
        reached_roll_ms = (
            self.time_waited_for_roll(now_ms, max_timestamp_in_messages) > segment_ms - self.roll_jitter_ms
        )
        size = self._size
        return (
            size > segment_bytes - messages_size
            or (size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(max_offset_in_messages)
        )

    # ------------------------------------------------------------------ append
    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        batch: bytes | bytearray | memoryview,
    ) -> None:
        """Append validated, offset-stamped batch bytes (one or more batches) at the end of the ``.log``.

        ``offset_of_max_timestamp`` is the (shallow) last offset of the batch that holds the max timestamp.
        """
        with self._lock:
            if not self.can_convert_to_relative_offset(largest_offset):
                raise ValueError(
                    f"offset {largest_offset} cannot be stored relative to segment base {self.base_offset}"
                )
            position = self._size
            view = memoryview(batch)
            try:
                fd = self.fd
                written = 0
                total = len(view)
                try:
                    while written < total:
                        written += os.write(fd, view[written:])
                except OSError:
                    # fail whole: leave nothing of a partial write behind
                    os.ftruncate(fd, position)
                    raise
            finally:
                view.release()
            self._size = position + total
            if position == 0:
                self._rolling_based_ts = None
            current = self.max_timestamp_and_offset if position else (NO_TIMESTAMP, -1)
            if largest_timestamp > current[0]:
                current = (largest_timestamp, offset_of_max_timestamp)
            self._max_ts_and_offset = current
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(largest_offset, position)
                self.time_index.maybe_append(current[0], current[1])
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += total

    # ------------------------------------------------------------------ reading
    def iter_headers(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` for every whole batch from ``start_position`` (header reads only)."""
        fd = self.fd
        end = self._size if end_position is None else min(end_position, self._size)
        pos = start_position
        while True:
            header = read_header_at(fd, pos, end)
            if header is None or header.size < RECORD_BATCH_OVERHEAD or pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``, or None."""
        _, index_pos = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(max(index_pos, start_position)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_batch: bool = True,
        max_offset: int | None = None,
    ) -> FileRegion | None:
        """Whole batches from the one holding ``start_offset``, up to ``max_size`` bytes.

        None when no batch of this segment reaches ``start_offset``.  Batches at or beyond ``max_position``,
        or holding ``max_offset`` or later offsets, are not returned.  With ``min_one_batch`` the first
        batch is returned whole even when it is larger than ``max_size`` (KIP-74).
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start, first = found
        handle = self.handle
        limit = self._size if max_position is None else min(max_position, self._size)
        length = 0
        pos = start
        header: BatchHeader | None = first
        while header is not None and pos + header.size <= limit:
            if max_offset is not None and header.last_offset >= max_offset:
                break
            if length + header.size > max_size and not (min_one_batch and length == 0):
                break
            length += header.size
            pos += header.size
            header = read_header_at(handle.fd, pos, limit)
        return FileRegion(handle.fd, start, length, first.base_offset if length else -1, handle)

    def read_next_offset(self) -> int:
        """The offset after the last batch of the segment (the base offset when empty)."""
        last_offset, pos = self.offset_index.lookup(2**63 - 1)
        next_offset = self.base_offset
        if self.offset_index.entries:
            next_offset = last_offset + 1
        for _, header in self.iter_headers(pos):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch at or after ``start_offset`` with maxTimestamp >= timestamp."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, start_offset))
        for p, header in self.iter_headers(pos):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                return p, header
        return None

    def read_batch(self, position: int, size: int) -> bytes:
        return FileRegion(self.fd, position, size).read_bytes()

    # ------------------------------------------------------------------ recovery and truncation
    def sanity_check(self) -> None:
        """Raise CorruptIndexError (or FileNotFoundError) when an index must be rebuilt."""
        if self.index_was_missing or self.time_index_was_missing:
            raise FileNotFoundError(f"index files of segment {self.log_path} are missing")
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()
        # Completeness of the tail (beyond Kafka, which would keep e.g. an emptied index): walking the
        # batches after the last entry, the append rule must not have called for another entry.  A smaller
        # index.interval.bytes than the one the index was written with only costs an unneeded rebuild.
        last_pos = (
            self.offset_index.entry(self.offset_index.entries - 1)[1] if self.offset_index.entries else 0
        )
        try:
            for pos, _ in self.iter_headers(last_pos):
                if pos - last_pos > self.index_interval_bytes:
                    raise CorruptIndexError(
                        f"offset index {self.offset_index.path} lacks an entry for the batch at position {pos}"
                    )
        except RecordError:
            pass  # a damaged .log is recovery's business, not the index check's

    def recover(
        self,
        max_message_bytes: int | None = None,
        on_batch: Callable[[int, BatchHeader], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Re-validate every batch, rebuild both indexes, truncate at the first invalid byte.

        Each batch must have a sane size, magic 2, a matching CRC-32C and offsets that increase from the
        segment's base offset and fit relative to it.  ``max_message_bytes`` (optional) caps a batch's size;
        the log does not pass it, so lowering max.message.bytes never truncates data already written.
        ``on_batch(position, header)`` is called for each valid batch.  Returns the bytes truncated.
        """
        with self._lock:
            self.offset_index.reset()
            self.time_index.reset()
            valid_bytes = 0
            last_index_entry = 0
            max_ts, max_ts_offset = NO_TIMESTAMP, -1
            expected_min = self.base_offset
            size = self._size
            mm = mmap.mmap(self.fd, size, access=mmap.ACCESS_READ) if size else None
            try:
                while mm is not None and size - valid_bytes >= LOG_OVERHEAD:
                    try:
                        header = validate_batch(mm, valid_bytes, max_message_bytes, size - valid_bytes)
                    except RecordError:
                        break
                    if header.base_offset < expected_min or not self.can_convert_to_relative_offset(
                        header.last_offset
                    ):
                        break
                    if header.max_timestamp > max_ts:
                        max_ts, max_ts_offset = header.max_timestamp, header.last_offset
                    if valid_bytes - last_index_entry > self.index_interval_bytes:
                        self.offset_index.append(header.last_offset, valid_bytes)
                        self.time_index.maybe_append(max_ts, max_ts_offset)
                        last_index_entry = valid_bytes
                    if on_batch is not None:
                        on_batch(valid_bytes, header)
                    valid_bytes += header.size
                    expected_min = header.next_offset
                    if progress is not None:
                        progress(header.size)
            finally:
                if mm is not None:
                    mm.close()
            truncated = size - valid_bytes
            if truncated > 0:
                os.ftruncate(self.fd, valid_bytes)
                self._size = valid_bytes
            self._bytes_since_last_index_entry = valid_bytes - last_index_entry if valid_bytes else 0
            self._max_ts_and_offset = (max_ts, max_ts_offset)
            self._rolling_based_ts = None if valid_bytes else NO_TIMESTAMP
            self.offset_index.trim_to_valid_size()
            if max_ts >= 0:
                self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
            self.time_index.trim_to_valid_size()
            self.index_was_missing = self.time_index_was_missing = False
            return truncated

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (cut at a batch boundary); bytes removed."""
        with self._lock:
            found = self.translate_offset(offset)
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.offset_index.resize(self.max_index_size)
            self.time_index.resize(self.max_index_size)
            removed = 0
            if found is not None:
                position = found[0]
                removed = self._size - position
                os.ftruncate(self.fd, position)
                self._size = position
            if self._size == 0:
                self.created_ms = int(time.time() * 1000)
                self._rolling_based_ts = NO_TIMESTAMP
                self._max_ts_and_offset = (NO_TIMESTAMP, -1)
            else:
                self._max_ts_and_offset = None
            self._bytes_since_last_index_entry = self._bytes_after_last_index_entry()
            return removed

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def on_becoming_inactive(self) -> None:
        """Write the final time-index entry and trim both indexes (Kafka ``onBecomeInactiveSegment``)."""
        with self._lock:
            ts, off = self.max_timestamp_and_offset
            if ts >= 0:
                self.time_index.maybe_append(ts, off, skip_full_check=True)
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    # ------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """fsync the ``.log`` and both indexes (blocking: call off the event loop)."""
        handle = self._handle
        if handle is None:
            return
        os.fsync(handle.fd)
        for idx in (self.offset_index, self.time_index):
            try:
                idx.flush()
            except ValueError:  # closed concurrently
                pass

    def close(self) -> None:
        with self._lock:
            if self._handle is None:
                return
            ts, off = self.max_timestamp_and_offset
            if ts >= 0:
                self.time_index.maybe_append(ts, off, skip_full_check=True)
            self.offset_index.close()
            self.time_index.close()
            self._handle = None  # the FileHandle closes once no FileRegion references it

    def close_handlers(self) -> None:
        with self._lock:
            self.offset_index.close_handler()
            self.time_index.close_handler()
            self._handle = None

    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path]

    def delete(self) -> None:
        """Close and remove every file of the segment (also a ``.txnindex`` if one exists)."""
        with self._lock:
            self.close_handlers()
            for path in (*self.files(), txn_index_file(self.dir, self.base_offset, self.file_suffix)):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass

    def rename_suffix(self, new_suffix: str) -> None:
        """Rename every file from the current suffix to ``new_suffix`` (e.g. ``.deleted``); fds stay valid."""
        with self._lock:
            new_log = log_file(self.dir, self.base_offset, new_suffix)
            os.replace(self.log_path, new_log)
            self.log_path = new_log
            self.offset_index.rename_to(index_file(self.dir, self.base_offset, new_suffix))
            self.time_index.rename_to(time_index_file(self.dir, self.base_offset, new_suffix))
            txn = txn_index_file(self.dir, self.base_offset, self.file_suffix)
            if txn.exists():
                os.replace(txn, txn_index_file(self.dir, self.base_offset, new_suffix))
            self.file_suffix = new_suffix

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, dir={str(self.dir)!r})"
