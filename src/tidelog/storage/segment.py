"""One log segment: ``<base offset, 20 digits>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` holds whole v2 record batches back to back, exactly as Kafka writes them.  The segment never
decodes records: it reads batch headers with ``os.pread`` and hands out :class:`FileRegion` views that a
broker can ``os.sendfile`` to a socket.

Index rule (Kafka ``LogSegment.append``/``recover``): before a batch is counted, if the bytes
appended since the last index entry exceed ``index.interval.bytes``, write the offset entry
``(batch last offset -> batch start position)`` and the time entry ``(max timestamp so far -> last offset of
the batch holding it)``, then reset the counter; afterwards add the batch's size to the counter.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tidelog.records.batch import check_record_structure
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
    STAMPED_HEAD,
    STAMPED_HEAD_SIZE,
    BatchHeader,
    HeaderTuple,
    check_batch_crc,
    parse_header_tuple,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.file_handles import FileHandle, FileRegion
from tidelog.storage.format import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from tidelog.storage.header_memo import HeaderMemo
from tidelog.storage.header_scan import iter_header_tuples, read_header_at
from tidelog.storage.index import INT32_MAX, NO_TIMESTAMP, CorruptIndexError, OffsetIndex, TimeIndex
from tidelog.storage.segment_fields import SegmentStateFields
from tidelog.storage.segment_names import (
    index_file,
    log_file,
    time_index_file,
    txn_index_file,
)
from tidelog.storage.segment_recovery import scan_for_recovery
from tidelog.storage.segment_state import SegmentState
from tidelog.storage.segment_state import c_preallocate as _c_preallocate
from tidelog.storage.segment_state import c_write_stamped as _c_write_stamped
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

_log = logging.getLogger(__name__)


# Disk blocks reserved past the end of a segment's .log (LogSegment._reserve): the first stretch, and the size
# stretches double up to.  A write into reserved blocks skips ext4's per-page delayed-allocation bookkeeping:
# measured 15-20% less CPU per append (bench/storage_bench.py).
PREALLOC_MIN_BYTES = 256 << 10
PREALLOC_MAX_BYTES = 16 << 20
_NO_MORE_RESERVATIONS = 1 << 62


# what LogSegment.append_leader_batch returns instead of a position when it wrote nothing
ROLL_FIRST = -1  # the segment must roll before this batch
CHECK_FAILED = -2  # the batch's CRC or records failed their late check (the write was undone)

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class LogSegment(SegmentStateFields):
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
        self.max_index_size = config.segment_index_bytes
        self.log_path = log_file(self.dir, base_offset, file_suffix)
        self.index_was_missing = not index_file(self.dir, base_offset, file_suffix).exists()
        self.time_index_was_missing = not time_index_file(self.dir, base_offset, file_suffix).exists()
        handle = FileHandle(os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644))
        try:
            self.offset_index = OffsetIndex(
                index_file(self.dir, base_offset, file_suffix), base_offset, self.max_index_size
            )
            self.time_index = TimeIndex(
                time_index_file(self.dir, base_offset, file_suffix), base_offset, self.max_index_size
            )
        except BaseException:
            # release what was opened now: the traceback would keep the .log's descriptor alive, and the failure
            # may be EMFILE (the caller's cleanup needs that descriptor back)
            handle.close()
            if hasattr(self, "offset_index"):
                self.offset_index.close_handler()
            raise
        # the .txnindex (aborted transactions whose marker is in this segment), its file created lazily
        self.txn_index = TransactionIndex(txn_index_file(self.dir, base_offset, file_suffix), base_offset)
        # The append state: fd, size, reservation end, index counter, max and rolling timestamps, created time,
        # roll jitter, and the indexes' states.  A SegmentState of the storage C extension (the log's append
        # fast path changes it in C), else its pure-Python twin (segment_state.py); the properties of
        # SegmentStateFields (segment_fields.py) read and set it under the names this class uses.
        self._st = SegmentState(
            base_offset, config.index_interval_bytes, self.offset_index._st, self.time_index._st
        )
        self._handle = handle
        stat = os.fstat(handle.fd)
        self._size = stat.st_size
        # disk blocks reserved past the end (_reserve); blocks a crash left reserved count as reserved, so that
        # the roll, close or truncation of this segment gives them back like the others
        self._reserved = stat.st_blocks * 512 >= self._size + PREALLOC_MIN_BYTES
        self._prealloc_end = stat.st_blocks * 512 if self._reserved else self._size
        # Kafka's preallocate=true reserves the whole segment.bytes at once (the file keeps its size here)
        self._prealloc_step = config.segment_bytes if config.preallocate else PREALLOC_MIN_BYTES
        self._lock = threading.RLock()
        # the batch headers reads found last (a follower's next read starts where its answer ended): header_memo.py
        self._memo = HeaderMemo()
        self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if roll_jitter_ms is None:
            roll_jitter_ms = self.random_jitter(config)
        self.roll_jitter_ms = roll_jitter_ms
        # the append counter a rebuild would have (see _bytes_after_last_index_entry), from the index as opened
        # (without mapping it: Kafka's LazyIndex)
        self._bytes_since_last_index_entry = self._size - self.offset_index.opened_last_position
        # (max timestamp so far, last offset of the batch holding it); None until loaded lazily
        self._max_ts_and_offset = None if self._size else (NO_TIMESTAMP, -1)
        # max timestamp of the first batch (segment.ms is measured from it); None until loaded lazily
        self._rolling_based_ts = None if self._size else NO_TIMESTAMP

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
        """Kafka's five roll conditions (``LogSegment.shouldRoll``)."""
        return self._should_roll(
            segment_bytes, segment_ms, messages_size, max_timestamp_in_messages, max_offset_in_messages, now_ms
        )

    def _should_roll(
        self,
        segment_bytes: int,
        segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        """:meth:`should_roll` with positional arguments and its helpers inlined (the append hot path)."""
        size = self._size
        if size > segment_bytes - messages_size:
            return True
        if size > 0:
            ts = self._rolling_based_ts
            if ts is None:
                ts = self.rolling_based_timestamp
            waited = max_timestamp_in_messages - ts if ts >= 0 else now_ms - self.created_ms
            if waited > segment_ms - self.roll_jitter_ms:
                return True
        oi = self.offset_index
        ti = self.time_index
        rel = max_offset_in_messages - self.base_offset
        return (  # the indexes' is_full(), inlined
            oi._entries >= oi._length // oi.ENTRY_SIZE
            or ti._entries >= ti._length // ti.ENTRY_SIZE - 1
            or rel < 0
            or rel > INT32_MAX
        )

    # ------------------------------------------------------------------ disk block reservation
    def _reserve(self, fd: int, end: int) -> None:
        """Reserve the ``.log``'s disk blocks up to at least ``end`` (``fallocate`` with KEEP_SIZE: the file's
        size and contents do not change), in stretches from PREALLOC_MIN_BYTES doubling to PREALLOC_MAX_BYTES,
        so a busy segment reserves ahead and a quiet one little.  Where that fails (a file system without
        ``fallocate``, no space left: the write itself reports that), this segment stops trying."""
        start = self._prealloc_end
        stop = max(end, start + self._prealloc_step)
        if _c_preallocate is None or _c_preallocate(fd, start, stop - start) != 0:
            self._prealloc_end = _NO_MORE_RESERVATIONS
            return
        self._reserved = True
        self._prealloc_end = stop
        self._prealloc_step = min(self._prealloc_step * 2, max(self._prealloc_step, PREALLOC_MAX_BYTES))

    def _release_reservation(self) -> None:
        """Give back the disk blocks reserved past the end (an ftruncate to the same size does that on ext4 and
        XFS); the file's mtime, which retention may read, is kept.  The caller holds the segment lock."""
        handle = self._handle
        if not self._reserved or handle is None:
            return
        self._reserved = False
        try:
            st = os.fstat(handle.fd)
            os.ftruncate(handle.fd, st.st_size)
            os.utime(handle.fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError as exc:  # only disk blocks are at stake: the next open of the segment tries again
            _log.warning("could not give back the blocks reserved past the end of %s: %s", self.log_path, exc)
        if self._prealloc_end != _NO_MORE_RESERVATIONS:
            self._prealloc_end = self._size

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
        self.append_parts(largest_offset, largest_timestamp, offset_of_max_timestamp, (batch,))

    def append_parts(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        parts: tuple[bytes | bytearray | memoryview, ...] | list[bytes | bytearray | memoryview],
        check: Callable[[], None] | None = None,
        stamp: tuple[int, int] | None = None,
        late_checks: bool = False,
    ) -> int:
        """:meth:`append` of the batch bytes given as consecutive pieces, written with one ``os.writev``.

        The log writes a batch as (its stamped first 16 bytes, the rest of the caller's buffer), so that a
        large batch is never copied in Python.  Fails whole: on an error nothing of the write remains.
        Returns the file position the bytes were written at.

        ``check()``, when given, runs after the write and before anything else changes (size, indexes,
        timestamps); if it raises, the file is cut back to its previous size and the error propagates.  No
        reader sees the bytes meanwhile: reads stop at :attr:`size`, and the log's end offset has not moved.

        ``stamp=(base_offset, partition_leader_epoch)``: ``parts`` is one whole batch whose baseOffset and
        partitionLeaderEpoch (outside the CRC) are written as given instead of its own, without copying or
        changing the caller's buffer (the C ``write_stamped`` when built, else a 16-byte head and a view of the
        rest in one ``os.writev``).

        ``late_checks`` (with ``stamp``: one uncompressed batch whose header and sizes were validated): its
        CRC-32C and the walk of its records are checked right after the write, while the bytes are in the CPU
        cache (the C writer's ``check=2``; without the C writer, before the write).  When one fails, nothing
        of the batch remains and ``CHECK_FAILED`` is returned instead of a position: the caller raises the
        exact error.
        """
        if stamp is not None and _c_write_stamped is None:
            batch = parts[0]
            if late_checks:
                late_checks = False
                fields = parse_header_tuple(batch)
                try:
                    check_batch_crc(batch, fields)
                    check_record_structure(batch, 0, fields)
                except RecordError:
                    return CHECK_FAILED
            parts = (
                STAMPED_HEAD.pack(stamp[0], BATCH_LENGTH_FIELD.unpack_from(batch, LENGTH_OFFSET)[0], stamp[1]),
                memoryview(batch)[STAMPED_HEAD_SIZE:],
            )
            stamp = None
        with self._lock:
            rel = largest_offset - self.base_offset
            if rel < 0 or rel > INT32_MAX:
                raise ValueError(
                    f"offset {largest_offset} cannot be stored relative to segment base {self.base_offset}"
                )
            position = self._size
            handle = self._handle
            if handle is None:
                raise ValueError(f"segment {self.log_path} is closed")
            fd = handle.fd
            end = position + (len(parts[0]) if len(parts) == 1 else sum(map(len, parts)))
            if end > self._prealloc_end:
                self._reserve(fd, end)
            try:
                if stamp is not None and _c_write_stamped is not None:  # the C writer continues short writes
                    total = _c_write_stamped(fd, parts[0], stamp[0], stamp[1], 2 if late_checks else 0)
                else:
                    total = len(parts[0]) + len(parts[1]) if len(parts) == 2 else sum(map(len, parts))
                    written = os.writev(fd, parts) if len(parts) > 1 else os.write(fd, parts[0])
                    if written < total:  # short write (not seen on regular files): write the remainder
                        rest = memoryview(b"".join(parts))
                        while written < total:
                            written += os.write(fd, rest[written:])
                if check is not None:
                    check()
            except BaseException:
                # fail whole: leave nothing of a partial write behind
                os.ftruncate(fd, position)
                raise
            if total < 0:  # a late check failed
                os.ftruncate(fd, position)
                return CHECK_FAILED
            self._size = position + total
            if position == 0:
                self._rolling_based_ts = None
                current = (NO_TIMESTAMP, -1)
            else:
                current = self._max_ts_and_offset or self.max_timestamp_and_offset
            if largest_timestamp > current[0]:
                current = (largest_timestamp, offset_of_max_timestamp)
            self._max_ts_and_offset = current
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                # the segment lock serialises every change of its indexes (append, resize, truncate, close)
                self.offset_index.append_unlocked(largest_offset, position)
                self.time_index.maybe_append_unlocked(current[0], current[1])
                self._bytes_since_last_index_entry = total
            else:
                self._bytes_since_last_index_entry += total
            return position

    def append_leader_batch(
        self,
        batch: bytes | bytearray | memoryview,
        base_offset: int,
        leader_epoch: int,
        last_offset: int,
        max_timestamp: int,
        segment_bytes: int,
        segment_ms: int,
        now_ms: int,
        late_checks: bool,
    ) -> int:
        """The log's append of one client batch: the roll check, then :meth:`append_parts` of ``batch``
        (exactly one whole batch of ``len(batch)`` bytes, header and sizes validated) with baseOffset and
        partitionLeaderEpoch stamped as given, and ``late_checks`` as there.

        Returns the file position written at, ``ROLL_FIRST`` when the segment must roll before this batch
        (:meth:`should_roll`; nothing was written), or ``CHECK_FAILED`` (see :meth:`append_parts`).  The C
        ``append_leader_fast`` makes exactly these steps for the log's common case.
        """
        with self._lock:
            if self._size and self._should_roll(
                segment_bytes, segment_ms, len(batch), max_timestamp, last_offset, now_ms
            ):
                return ROLL_FIRST
            return self.append_parts(
                last_offset, max_timestamp, last_offset, (batch,), None, (base_offset, leader_epoch), late_checks
            )

    # ------------------------------------------------------------------ reading
    def iter_headers(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` for every whole batch from ``start_position`` (header reads only)."""
        end = self._size if end_position is None else min(end_position, self._size)
        for pos, fields in iter_header_tuples(self.fd, start_position, end):
            yield pos, BatchHeader(*fields)

    def iter_header_tuples(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, HeaderTuple]]:
        """:meth:`iter_headers` yielding plain header tuples (see :func:`iter_header_tuples`)."""
        end = self._size if end_position is None else min(end_position, self._size)
        return iter_header_tuples(self.fd, start_position, end)

    def _translate(self, offset: int, start_position: int = 0) -> tuple[int, HeaderTuple] | None:
        memo = self._memo
        found = memo.find(offset)  # the batch starting at ``offset``: no earlier batch reaches it
        if found is not None and found[0] >= start_position:
            return found
        _, index_pos = self.offset_index.lookup(offset)
        for pos, fields in memo.headers(self.fd, max(index_pos, start_position), self._size):
            if fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] >= offset:
                return pos, fields
        return None

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``, or None."""
        found = self._translate(offset, start_position)
        return None if found is None else (found[0], BatchHeader(*found[1]))

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
        found = self._translate(start_offset)
        if found is None:
            return None
        start, first = found
        handle = self.handle
        limit = self._size if max_position is None else min(max_position, self._size)
        length = 0
        # the first batch, then the following ones from chunked header reads; no read once the budget
        # cannot hold another batch (a lookup with max_size 1 costs one header scan)
        size = first[1] + LOG_OVERHEAD
        if (
            start + size <= limit
            and not (max_offset is not None and first[0] + first[6] >= max_offset)
            and (size <= max_size or min_one_batch)
        ):
            length = size
        next_offset = first[0] + first[6] + 1 if length else -1
        if length and max_size - length >= RECORD_BATCH_OVERHEAD:
            for _, fields in self._memo.headers(handle.fd, start + length, limit):
                last = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA]
                if max_offset is not None and last >= max_offset:
                    break
                size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
                if length + size > max_size:
                    break
                length += size
                next_offset = last + 1
        return FileRegion(handle.fd, start, length, first[0] if length else -1, handle, next_offset)

    def read_next_offset(self) -> int:
        """The offset after the last batch of the segment (the base offset when empty)."""
        last_offset, pos = self.offset_index.lookup(2**63 - 1)
        next_offset = self.base_offset
        if self.offset_index.entries:
            next_offset = last_offset + 1
        for _, fields in iter_header_tuples(self.fd, pos, self._size):
            next_offset = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] + 1
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch at or after ``start_offset`` with maxTimestamp >= timestamp."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, start_offset))
        for p, fields in iter_header_tuples(self.fd, pos, self._size):
            if fields[H_MAX_TIMESTAMP] >= timestamp and fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] >= start_offset:
                return p, BatchHeader(*fields)
        return None

    def read_batch(self, position: int, size: int) -> bytes:
        return FileRegion(self.fd, position, size).read_bytes()

    # ------------------------------------------------------------------ recovery and truncation
    def sanity_check(self) -> None:
        """Raise CorruptIndexError (or FileNotFoundError) when an index must be rebuilt. Indexes this maps are
        unmapped again (Kafka's LazyIndex: an old segment's index is mapped when read)."""
        if self.index_was_missing or self.time_index_was_missing:
            raise FileNotFoundError(f"index files of segment {self.log_path} are missing")
        unmap = [i for i in (self.offset_index, self.time_index) if not i.mapped]
        try:
            self._sanity_check()
        finally:
            for index in unmap:
                index.unmap()

    def unmap_idle_indexes(self) -> int:
        """Unmap this segment's indexes unused since the previous call (an inactive segment's); how many. Its
        header memo goes too (a tail reader is on the active segment)."""
        self._memo.clear()
        return self.offset_index.unmap_if_idle() + self.time_index.unmap_if_idle()

    def _sanity_check(self) -> None:
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
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
        *,
        on_header: Callable[[int, HeaderTuple], None] | None = None,
    ) -> int:
        """Re-validate every batch, rebuild both indexes, truncate at the first invalid byte.

        Each batch must have a sane size, magic 2, a matching CRC-32C and offsets that increase from the
        segment's base offset and fit relative to it.  ``max_message_bytes`` (optional) caps a batch's size;
        the log does not pass it, so lowering max.message.bytes never truncates data already written.
        ``on_batch(position, header)`` is called for each valid batch; ``on_header(position, header tuple)``
        likewise, with the lean tuple of :mod:`tidelog.records.header`.  Returns the bytes truncated.

        The ``.log`` is read with large preads (:data:`RECOVERY_READ_CHUNK`) rather than mapped: a mapping
        pays a page fault per 4 KiB inside the CRC and an expensive unmap.  The index entries are collected
        in lists and written to the indexes in bulk at the end, with the same append rule as
        :meth:`append` (Kafka's ``LogSegment.recover``).
        """
        with self._lock:
            self.offset_index.reset()
            self.time_index.reset()
            self.txn_index.reset()  # the caller's producer-state replay appends the entries again
            r = scan_for_recovery(
                self.fd, self._size, self.base_offset, self.index_interval_bytes, max_message_bytes,
                on_batch, progress, on_header,
            )
            valid_bytes, last_index_entry, max_ts, max_ts_offset = (
                r.valid_bytes, r.last_index_entry, r.max_ts, r.max_ts_offset
            )
            size = self._size
            self.offset_index.append_bulk(r.off_rel, r.off_pos)
            self.time_index.append_bulk(r.time_ts, r.time_rel)
            truncated = size - valid_bytes
            self._memo.clear()
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
            self._memo.clear()  # the positions from the cut on will hold other batches
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            self.offset_index.resize(self.max_index_size)
            self.time_index.resize(self.max_index_size)
            removed = 0
            if found is not None:
                position = found[0]
                removed = self._size - position
                os.ftruncate(self.fd, position)  # also gives back the blocks reserved past the end
                self._size = position
                self._reserved = False
                if self._prealloc_end != _NO_MORE_RESERVATIONS:
                    self._prealloc_end = position
            if self._size == 0:
                self.created_ms = int(time.time() * 1000)
                self._rolling_based_ts = NO_TIMESTAMP
                self._max_ts_and_offset = (NO_TIMESTAMP, -1)
            else:
                self._max_ts_and_offset = None
            self._bytes_since_last_index_entry = self._bytes_after_last_index_entry()
            return removed

    # ------------------------------------------------------------------ transactions
    def update_txn_index(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose marker is in this segment (Kafka's ``updateTxnIndex``)."""
        self.txn_index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect(fetch_offset, upper_bound_offset)

    def resize_indexes(self, size: int) -> None:
        with self._lock:
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
            self._release_reservation()

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
        self.txn_index.flush()

    def close(self) -> None:
        with self._lock:
            if self._handle is None:
                return
            ts, off = self.max_timestamp_and_offset
            if ts >= 0:
                self.time_index.maybe_append(ts, off, skip_full_check=True)
            self.offset_index.close()
            self.time_index.close()
            self._release_reservation()
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
            for path in self.files():
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
            self.txn_index.delete()

    def moved_to(self, directory: Path) -> None:
        """The segment's directory was renamed to ``directory`` (Kafka's ``LogSegment.updateParentDir``): only the
        paths change, every descriptor and mapping stays."""
        with self._lock:
            self.dir = Path(directory)
            self.log_path = log_file(self.dir, self.base_offset, self.file_suffix)
            self.offset_index.moved_to(index_file(self.dir, self.base_offset, self.file_suffix))
            self.time_index.moved_to(time_index_file(self.dir, self.base_offset, self.file_suffix))
            self.txn_index.moved_to(txn_index_file(self.dir, self.base_offset, self.file_suffix))

    def rename_suffix(self, new_suffix: str) -> None:
        """Rename every file from the current suffix to ``new_suffix`` (e.g. ``.deleted``); fds stay valid."""
        with self._lock:
            new_log = log_file(self.dir, self.base_offset, new_suffix)
            os.replace(self.log_path, new_log)
            self.log_path = new_log
            self.offset_index.rename_to(index_file(self.dir, self.base_offset, new_suffix))
            self.time_index.rename_to(time_index_file(self.dir, self.base_offset, new_suffix))
            self.txn_index.rename_to(txn_index_file(self.dir, self.base_offset, new_suffix))
            self.file_suffix = new_suffix

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, dir={str(self.dir)!r})"
