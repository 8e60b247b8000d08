"""Sparse, memory-mapped segment indexes: ``.index`` (OffsetIndex) and ``.timeindex`` (TimeIndex).

Both follow Kafka's ``AbstractIndex``:

* A new index file is **preallocated** to ``segment.index.bytes`` rounded down to whole entries and
  memory-mapped; entries are appended in place.  When the segment becomes inactive, or is closed, the file is
  **trimmed** to its valid entries, so a cleanly closed index is exactly ``entries * entry_size`` bytes.
* Invariants: offset-index relative offsets strictly increase and positions never decrease; time-index
  timestamps never decrease (an entry is written only when the timestamp exceeds the last one) and their
  offsets never decrease.  There is no checksum; an index that breaks these rules fails :meth:`sanity_check`
  and the segment rebuilds it from the ``.log``.

Valid entries of an existing file.  Kafka takes ``file length // entry size`` and relies on the segment being
trimmed on close (or rebuilt after a crash).  tidelog does the same for a trimmed file, and for a file that
still has its preallocated zero tail (a crash before the trim) it stops at the first all-zero entry past the
first: such an entry cannot be valid, because relative offsets (offset index) and timestamps (time index)
must increase from one entry to the next.  Whatever survives is then checked by :meth:`sanity_check`.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import struct
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

from tidelog.storage.errors import StorageError
from tidelog.storage.format import (
    OFFSET_INDEX_ENTRY,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY,
    TIME_INDEX_ENTRY_SIZE,
)
from tidelog.storage.mapping import map_file
from tidelog.storage.segment_state import IndexState, _big_endian_entries, _packed

__all__ = ["_big_endian_entries", "_packed"]  # re-exported (tests)

INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1


def _increasing(values: list[int], *, strictly: bool) -> bool:
    """Whether ``values`` never decrease (``strictly``: always increase); C-level comparisons, no Python loop."""
    return all(map(operator.lt if strictly else operator.le, values, values[1:]))


class CorruptIndexError(StorageError):
    """The index breaks its invariants and must be rebuilt from the log."""


class IndexFullError(StorageError):
    """An append was attempted on a full index (the segment should have rolled)."""


class InvalidIndexOffsetError(StorageError):
    """An append would break the ordering invariant, or the offset is not relative to the base offset."""


def _round_down(value: int, factor: int) -> int:
    return factor * (value // factor)


class AbstractIndex:
    """Common machinery: file + mmap, entry count, resize/trim, binary search over one key column."""

    ENTRY_SIZE = 0  # overridden
    _KIND = "index"
    _FMT_CHARS = ""  # overridden: struct format of one entry (without byte order)
    _ENTRY: struct.Struct
    _buf: Any  # the mapping's view once mapped (None before and after)
    #: appended entries are buffered and written into the mapping this many at a time (see ``__init__``)
    PENDING_LIMIT = 1024

    def __init__(self, path: Path | str, base_offset: int, max_index_size: int = 10 * 1024 * 1024) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._lock = threading.RLock()
        self._closed = False
        newly_created = not self.path.exists()
        # Kafka's AbstractIndex: the file is opened, sized and mapped, then closed at once; the mapping holds no
        # descriptor (storage/mapping.py), so an index costs none. Writes that go through the file (the
        # IndexState's buffered entries, resizes, fsync) open it for the moment they need it.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if newly_created:
                os.ftruncate(fd, _round_down(max_index_size, self.ENTRY_SIZE))
            self.newly_created = newly_created
            # the append state (entry counts, length, last entry, the buffer below): an IndexState of the storage
            # C extension, which the segment's append fast path changes, or its pure-Python twin
            # (segment_state.py); with fd -1 it opens ``path`` for each store of its buffer
            self._st = IndexState(self.ENTRY_SIZE, base_offset, -1, self.PENDING_LIMIT)
            self._st.path = os.fsencode(self.path)
            self._length = os.fstat(fd).st_size
            # Mapped lazily (Kafka's LazyIndex): on the first lookup, not at open; the append path needs no
            # mapping (entries reach the file through the IndexState). ``unmap_if_idle`` unmaps an index unused
            # since its previous call, so the indexes of old segments cost no mapping until read again.
            self._mapping: Any = None
            self._buf = None
            self._used = False
            entries, tail = self._entries_from_file(fd)
            if entries is None:  # a preallocated tail (a crash before the trim): counted on the mapping
                self._map(fd)
                entries = self._count_valid_entries()
                tail = self._buf[(entries - 1) * self.ENTRY_SIZE : entries * self.ENTRY_SIZE] if entries else b""
        finally:
            os.close(fd)
        self._entries = entries
        self._tail: bytes = tail  # the last valid entry (its subclass reads the last offset / timestamp from it)
        # Appended entries not yet in the mapping, oldest first, as two columns (key: relative offset or
        # timestamp; value: position or relative offset), held by the IndexState.  ``_written`` entries are in the mapping and
        # ``_entries`` counts both.  Why: a store into a shared mapping page that writeback has cleaned
        # takes a write fault (ext4 page_mkwrite, inode time update), and while large appends keep writeback
        # busy that happens on nearly every store: measured ~0.3-0.9 ms of CPU per fault with 1 MiB batches,
        # ~40 us per append.  Buffered, the entries reach the mapping PENDING_LIMIT at a time, and at latest
        # when anything other than an append or a lookup uses the index (flush, roll/trim, close,
        # truncation, sanity check, entry()), so a flushed or closed index is complete on disk.  A crash
        # loses only buffered entries of a segment past the recovery point, which recovery rebuilds anyway.
        # Lookups search the buffer as well.  Concurrency: only the appender (serialised by the segment
        # lock) appends, key first, value second, without the index lock; lookups and _materialize hold the
        # index lock, take ``len(values)`` as the count of complete entries, and _materialize deletes exactly
        # the entries it wrote from the front, so an append racing with a flush thread loses nothing.  (The C
        # IndexState's push, materialize and pending_floor each run whole under the GIL.)
        self._written = self._entries

    # the append state's fields, under the names the index code uses
    @property
    def _entries(self) -> int:
        return self._st.entries

    @_entries.setter
    def _entries(self, value: int) -> None:
        self._st.entries = value

    @property
    def _written(self) -> int:
        return self._st.written

    @_written.setter
    def _written(self, value: int) -> None:
        self._st.written = value

    @property
    def _length(self) -> int:
        return self._st.length

    @_length.setter
    def _length(self, value: int) -> None:
        self._st.length = value

    # ------------------------------------------------------------------ mapping and sizes
    def _materialize(self) -> None:
        """Write the buffered entries into the file (see ``__init__``): through the file, not the mapping (the
        same page cache, so the mapping sees the entries at once): a store into a mapped page not yet in memory
        or cleaned by writeback takes a page fault (~50 us each, ms under writeback), the write system call
        does not."""
        st = self._st
        if not st.pending:
            return
        with self._lock:
            st.materialize()

    def _entries_from_file(self, fd: int) -> tuple[int | None, bytes]:
        """(valid entries, the last one's bytes) from the file's length and its last entry, without mapping it
        (Kafka's ``length / entrySize``); (None, b"") when that cannot tell: a zero last entry past the first is
        the preallocated tail of an index a crash left untrimmed, counted on the mapping instead."""
        if self.newly_created or self._length == 0:
            return 0, b""
        if self._length % self.ENTRY_SIZE:
            return None, b""
        n = self._length // self.ENTRY_SIZE
        tail = os.pread(fd, self.ENTRY_SIZE, (n - 1) * self.ENTRY_SIZE)
        if len(tail) != self.ENTRY_SIZE or (n > 1 and not any(tail)):
            return None, b""
        return n, tail

    @property
    def _mm(self) -> Any:
        """The mapped bytes (a buffer), mapped on first use; None for an empty file or a closed index."""
        self._used = True
        buf = self._buf
        if buf is None and self._length > 0 and not self._closed:
            with self._lock:
                if self._buf is None and self._length > 0 and not self._closed:
                    fd = self._open()
                    try:
                        self._map(fd)
                    finally:
                        os.close(fd)
                buf = self._buf
        return buf

    @property
    def mapped(self) -> bool:
        return self._buf is not None

    def _map(self, fd: int) -> None:
        if self._length > 0:
            self._mapping = map_file(fd, self._length)
            # the buffer lookups read (struct.unpack_from) and slices store into
            self._buf = getattr(self._mapping, "view", self._mapping)
        else:
            self._mapping = self._buf = None

    def _unmap(self) -> None:
        mapping = self._mapping
        self._mapping = self._buf = None
        if mapping is not None:
            mapping.close()

    def unmap(self) -> None:
        """Release the mapping (mapped again on the next use)."""
        with self._lock:
            self._materialize()
            self._unmap()

    def unmap_if_idle(self) -> bool:
        """Unmap if unused since the previous call (an old segment's index nobody reads); whether it did."""
        with self._lock:
            if self._used or self._buf is None:
                self._used = False
                return False
            self._materialize()
            self._unmap()
            return True

    def _open(self) -> int:
        """The index file opened for a change through it (closed by the caller)."""
        return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def _count_valid_entries(self) -> int:
        mm = self._mapping
        if mm is None:
            return 0
        n = self._length // self.ENTRY_SIZE
        zero = bytes(self.ENTRY_SIZE)
        start = self.ENTRY_SIZE
        while True:
            hit = mm.find(zero, start)
            if hit < 0 or hit + self.ENTRY_SIZE > n * self.ENTRY_SIZE:
                return n
            if hit % self.ENTRY_SIZE == 0:
                return hit // self.ENTRY_SIZE
            start = hit + 1

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.ENTRY_SIZE

    @property
    def length(self) -> int:
        """Current file (and mapping) length in bytes."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes of valid entries."""
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def resize(self, new_size: int) -> bool:
        """Resize the file to ``new_size`` rounded down to whole entries (never below the valid entries)."""
        with self._lock:
            self._materialize()
            rounded = max(_round_down(new_size, self.ENTRY_SIZE), self._entries * self.ENTRY_SIZE)
            if rounded == self._length:
                return False
            self._unmap()  # mapped again on the next use
            os.truncate(self.path, rounded)
            self._length = rounded
            return True

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry and restore the preallocated size (used before a rebuild)."""
        with self._lock:
            self._truncate_to_entries(0)
            self._unmap()
            os.truncate(self.path, 0)
            self._length = 0
            self.resize(self.max_index_size)

    def _truncate_to_entries(self, entries: int) -> None:
        with self._lock:
            self._materialize()
            if self._mm is not None and entries < self._entries:
                # zero the dropped tail so a crash cannot resurrect stale entries
                start = entries * self.ENTRY_SIZE
                end = self._entries * self.ENTRY_SIZE
                self._mm[start:end] = bytes(end - start)
            self._entries = entries
            self._written = min(self._written, entries)

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def flush(self) -> None:
        with self._lock:
            self._materialize()
            if self._mapping is not None:
                # msync(MS_SYNC) of the whole file: the entries stored through the file share its page cache
                # (Kafka's flush is the mapping's force()); no descriptor needed
                self._mapping.flush()
            elif self._length > 0 and not self._closed:
                try:
                    fd = self._open()
                except FileNotFoundError:  # deleted meanwhile (retention, a topic deletion): nothing to keep
                    return
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        """Trim to the valid size and release the mapping and the file."""
        with self._lock:
            if self._closed:
                return
            self._materialize()
            self.trim_to_valid_size()
            self._unmap()
            self._closed = True
            self._st.path = None

    def close_handler(self) -> None:
        """Release the mapping without trimming (the segment's files are about to be deleted: the buffered
        entries are stored if the file can be opened, else dropped with it)."""
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):
                    self._materialize()
            self._unmap()
            self._closed = True
            self._st.path = None

    def delete_if_exists(self) -> bool:
        self.close_handler()
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False

    def rename_to(self, new_path: Path) -> None:
        with self._lock:
            os.replace(self.path, new_path)
            self.moved_to(new_path)

    def moved_to(self, new_path: Path) -> None:
        """The file is at ``new_path`` now (its directory was renamed): only the name changes."""
        with self._lock:
            self.path = Path(new_path)
            if not self._closed:
                self._st.path = os.fsencode(self.path)

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise InvalidIndexOffsetError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset} in {self.path}"
            )
        return rel

    def _check_length(self) -> None:
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{self._KIND} file {self.path} has length {self._length}, not a multiple of {self.ENTRY_SIZE}"
            )


class OffsetIndex(AbstractIndex):
    """``.index``: 8-byte entries ``relativeOffset int32 | position int32``; maps offset -> file position.

    An entry (O, P) says the batch starting at file position P has last offset O (Kafka writes the largest
    offset of the appended batch with the batch's starting position).  ``lookup(t)`` returns the greatest
    entry with offset <= t, so scanning forward from its position finds the batch holding t.
    """

    ENTRY_SIZE = OFFSET_INDEX_ENTRY_SIZE
    _KIND = "offset index"
    _FMT_CHARS = OFFSET_INDEX_ENTRY.format[1:]  # "ii"
    _ENTRY = OFFSET_INDEX_ENTRY

    def __init__(self, path: Path | str, base_offset: int, max_index_size: int = 10 * 1024 * 1024) -> None:
        super().__init__(path, base_offset, max_index_size)
        tail = self._tail
        rel, pos = self._ENTRY.unpack(tail) if tail else (0, 0)
        self._last_offset = self.base_offset + rel
        #: the last entry's position as opened (0 when empty): the segment's append counter starts from it
        #: without mapping the index
        self.opened_last_position = pos

    @property
    def _last_offset(self) -> int:
        return self._st.last_offset

    @_last_offset.setter
    def _last_offset(self, value: int) -> None:
        self._st.last_offset = value

    def _read_last_offset(self) -> int:
        if self._entries == 0 or self._mm is None:
            return self.base_offset
        rel, _ = self._ENTRY.unpack_from(self._mm, (self._entries - 1) * self.ENTRY_SIZE)
        return self.base_offset + rel

    @property
    def last_offset(self) -> int:
        return self._last_offset

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (absolute offset, position)."""
        with self._lock:
            self._materialize()
            mm = self._mm
            if n < 0 or n >= self._entries or mm is None:
                raise IndexError(f"entry {n} out of range [0, {self._entries})")
            rel, pos = self._ENTRY.unpack_from(mm, n * self.ENTRY_SIZE)
            return self.base_offset + rel, pos

    def entries_list(self) -> list[tuple[int, int]]:
        return [self.entry(i) for i in range(self._entries)]

    def append(self, offset: int, position: int) -> None:
        with self._lock:
            self.append_unlocked(offset, position)

    def append_unlocked(self, offset: int, position: int) -> None:
        """:meth:`append` for a caller that serialises every change of this index itself (the segment
        appends under its own lock, as it also resizes, truncates and closes its indexes).  Lookups may run
        concurrently: the entry is written before the entry count that makes it visible grows.
        The hot path: the checks of is_full/_relative are inlined, with the same errors."""
        n = self._entries
        if n >= self._length // OFFSET_INDEX_ENTRY_SIZE:
            raise IndexFullError(f"offset index {self.path} is full ({n} entries)")
        if n > 0 and offset <= self._last_offset:
            raise InvalidIndexOffsetError(
                f"offset {offset} is not larger than the last offset {self._last_offset} in {self.path}"
            )
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            self._relative(offset)  # raises
        self._st.push(rel, position)  # entries + 1; stored with the others when PENDING_LIMIT are buffered
        self._last_offset = offset

    def append_bulk(self, relative_offsets: list[int], positions: list[int]) -> None:
        """Append many entries at once (recovery's index rebuild): the same checks as :meth:`append`, made
        once over the columns, then one write into the mapping instead of a locked call per entry."""
        count = len(relative_offsets)
        if count != len(positions):
            raise ValueError("relative_offsets and positions differ in length")
        if count == 0:
            return
        with self._lock:
            self._materialize()
            n = self._entries
            if n + count > self._length // OFFSET_INDEX_ENTRY_SIZE:
                raise IndexFullError(f"offset index {self.path} is full ({self._length // OFFSET_INDEX_ENTRY_SIZE} entries)")
            rel_last = self._last_offset - self.base_offset
            if (n > 0 and relative_offsets[0] <= rel_last) or not _increasing(relative_offsets, strictly=True):
                raise InvalidIndexOffsetError(f"offsets appended to {self.path} are not strictly increasing")
            if relative_offsets[0] < 0 or relative_offsets[-1] > INT32_MAX:
                raise InvalidIndexOffsetError(
                    f"offsets {relative_offsets[0]}..{relative_offsets[-1]} (relative) do not fit {self.path}"
                )
            assert self._mm is not None
            self._mm[n * self.ENTRY_SIZE : (n + count) * self.ENTRY_SIZE] = _packed(relative_offsets, positions, self._FMT_CHARS)
            self._entries = self._written = n + count
            self._last_offset = self.base_offset + relative_offsets[-1]

    def _slot_for(self, target: int) -> int:
        """Index of the greatest entry with offset <= target, or -1."""
        mm = self._mm
        written = self._written  # the entries in the mapping (lookup adds the buffered ones)
        if mm is None or written == 0:
            return -1
        rel_target = target - self.base_offset
        unpack = self._ENTRY.unpack_from
        width = self.ENTRY_SIZE
        if unpack(mm, 0)[0] > rel_target:
            return -1
        lo, hi = 0, written - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(mm, mid * width)[0] <= rel_target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= target, else (base_offset, 0)."""
        with self._lock:
            # buffered entries first: they follow every entry in the mapping
            found = self._st.pending_floor(target_offset - self.base_offset)
            if found is not None:
                return self.base_offset + found[0], found[1]
            slot = self._slot_for(target_offset)
            if slot < 0 or self._mm is None:
                return self.base_offset, 0
            rel, pos = self._ENTRY.unpack_from(self._mm, slot * self.ENTRY_SIZE)
            return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        with self._lock:
            self._materialize()
            slot = self._slot_for(offset)
            if slot < 0:
                keep = 0
            elif self.entry(slot)[0] == offset:
                keep = slot
            else:
                keep = slot + 1
            self._truncate_to_entries(keep)
            self._last_offset = self._read_last_offset()

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last_offset = self._read_last_offset()

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise :class:`CorruptIndexError` unless the index is well-formed (see module docstring)."""
        with self._lock:
            self._materialize()
            self._check_length()
            if self._entries == 0:
                return
            if self._last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"offset index {self.path}: last offset {self._last_offset} is below base {self.base_offset}"
                )
            values = self._int32_columns()
            rel = values[0::2]
            pos = values[1::2]
            if rel[0] < 0 or pos[0] < 0:
                raise CorruptIndexError(f"offset index {self.path}: negative first entry")
            if any(a >= b for a, b in itertools.pairwise(rel)):
                raise CorruptIndexError(f"offset index {self.path}: offsets are not strictly increasing")
            if any(a > b for a, b in itertools.pairwise(pos)):
                raise CorruptIndexError(f"offset index {self.path}: positions decrease")
            if log_size is not None and pos[-1] >= max(log_size, 1):
                raise CorruptIndexError(
                    f"offset index {self.path}: position {pos[-1]} lies beyond the log size {log_size}"
                )

    def _int32_columns(self) -> array[int]:
        assert self._mm is not None
        values = array("i", self._mm[: self._entries * self.ENTRY_SIZE])
        if sys.byteorder == "little":
            values.byteswap()
        return values


class TimeIndex(AbstractIndex):
    """``.timeindex``: 12-byte entries ``timestamp int64 | relativeOffset int32``.

    An entry (T, O) means every record with timestamp > T lies after offset O.  As in Kafka, the index
    reports full one entry early, so that the final entry written when the segment becomes inactive fits.
    """

    ENTRY_SIZE = TIME_INDEX_ENTRY_SIZE
    _KIND = "time index"
    _FMT_CHARS = TIME_INDEX_ENTRY.format[1:]  # "qi"
    _ENTRY = TIME_INDEX_ENTRY

    def __init__(self, path: Path | str, base_offset: int, max_index_size: int = 10 * 1024 * 1024) -> None:
        super().__init__(path, base_offset, max_index_size)
        tail = self._tail
        if tail:
            ts, rel = self._ENTRY.unpack(tail)
            self._last_entry = (ts, self.base_offset + rel)
        else:
            self._last_entry = (NO_TIMESTAMP, self.base_offset)

    @property
    def _last_entry(self) -> tuple[int, int]:
        st = self._st
        return st.last_timestamp, st.last_offset

    @_last_entry.setter
    def _last_entry(self, value: tuple[int, int]) -> None:
        st = self._st
        st.last_timestamp, st.last_offset = value

    def _read_last_entry(self) -> tuple[int, int]:
        if self._entries == 0 or self._mm is None:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(self._entries - 1)

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (timestamp, absolute offset)."""
        with self._lock:
            self._materialize()
            mm = self._mm
            if n < 0 or n >= self._entries or mm is None:
                raise IndexError(f"entry {n} out of range [0, {self._entries})")
            ts, rel = self._ENTRY.unpack_from(mm, n * self.ENTRY_SIZE)
            return ts, self.base_offset + rel

    def entries_list(self) -> list[tuple[int, int]]:
        return [self.entry(i) for i in range(self._entries)]

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        return self._last_entry

    def is_full(self) -> bool:
        return self._entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp exceeds the last entry's; returns whether it did."""
        with self._lock:
            return self.maybe_append_unlocked(timestamp, offset, skip_full_check)

    def maybe_append_unlocked(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """:meth:`maybe_append` for a caller that serialises every change of this index itself (see
        :meth:`OffsetIndex.append_unlocked`); is_full/max_entries/_relative inlined, same checks and errors."""
        n = self._entries
        max_entries = self._length // TIME_INDEX_ENTRY_SIZE
        if not skip_full_check and n >= max_entries - 1:
            raise IndexFullError(f"time index {self.path} is full ({n} entries)")
        last_ts, last_off = self._last_entry
        if n > 0:
            if offset < last_off:
                raise InvalidIndexOffsetError(
                    f"time index {self.path}: offset {offset} is below the last indexed offset {last_off}"
                )
            if timestamp < last_ts:
                raise InvalidIndexOffsetError(
                    f"time index {self.path}: timestamp {timestamp} is below the last indexed timestamp "
                    f"{last_ts}"
                )
        if timestamp <= last_ts:
            return False
        if n >= max_entries:
            # only reachable with skip_full_check on an index without any room left
            return False
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            self._relative(offset)  # raises
        self._st.push(timestamp, rel)  # entries + 1; stored with the others when PENDING_LIMIT are buffered
        self._last_entry = (timestamp, offset)
        return True

    def append_bulk(self, timestamps: list[int], relative_offsets: list[int]) -> None:
        """Append many entries at once (recovery's index rebuild).  Each timestamp must exceed the previous
        one (and the last entry's) and offsets must not decrease: the entries :meth:`maybe_append` would have
        written.  As with repeated :meth:`maybe_append` calls, the index must not become full."""
        count = len(timestamps)
        if count != len(relative_offsets):
            raise ValueError("timestamps and relative_offsets differ in length")
        if count == 0:
            return
        with self._lock:
            self._materialize()
            n = self._entries
            if n + count > self._length // TIME_INDEX_ENTRY_SIZE - 1:
                raise IndexFullError(f"time index {self.path} is full ({n} entries)")
            last_ts, last_off = self._last_entry
            if (
                (timestamps[0] <= last_ts)
                or (n > 0 and self.base_offset + relative_offsets[0] < last_off)
                or not _increasing(timestamps, strictly=True)
                or not _increasing(relative_offsets, strictly=False)
            ):
                raise InvalidIndexOffsetError(f"entries appended to {self.path} are not increasing")
            if relative_offsets[0] < 0 or relative_offsets[-1] > INT32_MAX:
                raise InvalidIndexOffsetError(
                    f"offsets {relative_offsets[0]}..{relative_offsets[-1]} (relative) do not fit {self.path}"
                )
            assert self._mm is not None
            self._mm[n * self.ENTRY_SIZE : (n + count) * self.ENTRY_SIZE] = _packed(timestamps, relative_offsets, self._FMT_CHARS)
            self._entries = self._written = n + count
            self._last_entry = (timestamps[-1], self.base_offset + relative_offsets[-1])

    def _slot_for(self, key: int, column: int) -> int:
        """Greatest slot whose column value (0 = timestamp, 1 = relative offset) is <= key, or -1."""
        mm = self._mm
        written = self._written  # the entries in the mapping (lookup adds the buffered ones)
        if mm is None or written == 0:
            return -1
        unpack = self._ENTRY.unpack_from
        width = self.ENTRY_SIZE
        if unpack(mm, 0)[column] > key:
            return -1
        lo, hi = 0, written - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(mm, mid * width)[column] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the greatest entry with timestamp <= target, else (-1, base_offset)."""
        with self._lock:
            found = self._st.pending_floor(target_timestamp)  # buffered entries first (see OffsetIndex.lookup)
            if found is not None:
                return found[0], self.base_offset + found[1]
            slot = self._slot_for(target_timestamp, 0)
            if slot < 0 or self._mm is None:
                return NO_TIMESTAMP, self.base_offset
            ts, rel = self._ENTRY.unpack_from(self._mm, slot * self.ENTRY_SIZE)
            return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        with self._lock:
            self._materialize()
            slot = self._slot_for(offset - self.base_offset, 1)
            if slot < 0:
                keep = 0
            elif self.entry(slot)[1] == offset:
                # several entries may share an offset only transiently; drop from the first one equal
                keep = slot
                while keep > 0 and self.entry(keep - 1)[1] == offset:
                    keep -= 1
            else:
                keep = slot + 1
            self._truncate_to_entries(keep)

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last_entry = self._read_last_entry()

    def sanity_check(self) -> None:
        with self._lock:
            self._materialize()
            self._check_length()
            if self._entries == 0:
                return
            ts_col: list[int] = []
            rel_col: list[int] = []
            assert self._mm is not None
            for ts, rel in self._ENTRY.iter_unpack(self._mm[: self._entries * self.ENTRY_SIZE]):
                ts_col.append(ts)
                rel_col.append(rel)
            if self._last_entry[1] < self.base_offset or rel_col[0] < 0:
                raise CorruptIndexError(
                    f"time index {self.path}: offset {self._last_entry[1]} is below base {self.base_offset}"
                )
            if any(a >= b for a, b in itertools.pairwise(ts_col)):
                raise CorruptIndexError(f"time index {self.path}: timestamps are not increasing")
            if any(a > b for a, b in itertools.pairwise(rel_col)):
                raise CorruptIndexError(f"time index {self.path}: offsets decrease")
