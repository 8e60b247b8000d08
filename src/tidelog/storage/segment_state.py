"""The append state of a segment and its indexes, owned by the storage C extension when it is built.

``tidelog.storage._segment`` (``_segment_state.c``) defines two C types, :class:`IndexState` and :class:`SegmentState`,
holding everything the append fast path (:func:`c_append_leader_fast`) reads and changes: the ``.log``'s fd,
size, end of the reserved disk blocks, bytes since the last index entry, max timestamp so far, rolling
timestamp, created time and roll jitter; for each index its fd, entry counts, length, last entry and the buffer
of appended entries not yet stored.  :class:`~tidelog.storage.segment.LogSegment` and the indexes read and set
these fields (properties); the C code never reads a Python attribute.  The classes below are their pure-Python
twins, used when the extension is not built or ``TIDELOG_PURE_PYTHON`` is set (then there is no fast path, and
the stamped write, ``fallocate`` and the recovery scan are None: the Python steps do the work).
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
import threading
from array import array

from tidelog.records.batch import _c_check_records
from tidelog.storage.format import OFFSET_INDEX_ENTRY_SIZE

NO_TIMESTAMP = -1


#: array "i" and "q" are 4 and 8 bytes (every mainstream platform): _materialize packs entries with arrays
_WORDS = array("i").itemsize == 4 and array("q").itemsize == 8
_LITTLE = sys.byteorder == "little"


def _big_endian_entries(keys: array, values: array, k: int, fmt: str) -> array:  # type: ignore[type-arg]
    """The first ``k`` (key, value) pairs as big-endian entries of format ``fmt`` ("ii" or "qi"), the bytes
    of ``struct.pack(">" + fmt * k, ...)``, built column-wise with array slices (~10x faster than the
    struct call with one argument per field; the 1024 entries of one flush cost ~0.2 ms that way).
    Values must fit their fields (the appends check that)."""
    words: list[array] = []  # type: ignore[type-arg]
    for column, code in zip((keys, values), fmt, strict=True):
        col = column[:k] if column.typecode == code else array(code, column[:k])
        if _LITTLE:
            col.byteswap()
        if code == "i":
            words.append(col)
        else:  # an 8-byte field is two 4-byte words, in memory order
            raw = array("i", col.tobytes())
            words.append(raw[0::2])
            words.append(raw[1::2])
    per_entry = len(words)
    out = array("i", bytes(4 * per_entry * k))
    for j, column in enumerate(words):
        out[j::per_entry] = column
    return out


def _packed(keys: list[int], values: list[int], fmt: str) -> bytes:
    """``struct.pack(">" + fmt * len(keys), *interleaved pairs)``: column-wise with arrays where they have the
    sizes (see :func:`_big_endian_entries`), for the bulk appends of recovery's index rebuild."""
    if _WORDS:
        return _big_endian_entries(array(fmt[0], keys), array(fmt[1], values), len(keys), fmt).tobytes()
    return struct.pack(">" + fmt * len(keys), *[v for pair in zip(keys, values, strict=True) for v in pair])


class PyIndexState:
    """The pure-Python :class:`IndexState`: ``push`` buffers an entry, ``materialize`` stores the buffer.

    Where the C type runs each method whole under the GIL, this one serialises ``materialize`` (the appender's,
    from ``push``, and a flushing thread's) and ``pending_floor`` with a lock of its own; ``push`` appends the key
    first and the value second without it, and ``materialize`` counts complete entries by the values.
    """

    __slots__ = (
        "_keys",
        "_lock",
        "_values",
        "base_offset",
        "entries",
        "entry_size",
        "fd",
        "last_offset",
        "last_timestamp",
        "length",
        "path",
        "pending_limit",
        "written",
    )

    def __init__(self, entry_size: int, base_offset: int, fd: int, pending_limit: int) -> None:
        if entry_size not in (8, 12) or pending_limit < 1:
            raise ValueError("IndexState: entry_size must be 8 or 12 and pending_limit >= 1")
        self.entry_size = entry_size
        self.base_offset = base_offset
        self.fd = fd
        self.pending_limit = pending_limit
        self.entries = self.written = self.length = 0
        self.last_offset = base_offset
        self.last_timestamp = NO_TIMESTAMP
        self.path: bytes | None = None  # the file, opened for each store while fd is -1
        self._keys = array("q")
        self._values = array("i")
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return len(self._values)

    def push(self, key: int, value: int) -> None:
        # key first, value second: a concurrent materialize counts the complete entries by the values
        self._keys.append(key)
        values = self._values
        values.append(value)
        self.entries += 1
        if len(values) >= self.pending_limit:
            try:
                self.materialize()
            except OSError:
                pass  # the entries stay buffered; the next store (or the flush/close that must) tries again

    def materialize(self) -> None:
        if not self._values:
            return
        with self._lock:
            self._materialize()

    def _materialize(self) -> None:
        keys, values = self._keys, self._values
        k = len(values)  # complete entries: the value is appended after the key
        if k == 0 or self.length == 0:
            return
        fd = self.fd
        if fd < 0:
            if self.path is None:
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)  # Kafka's indexes keep no descriptor
            try:
                self._store(fd, keys, values, k)
            finally:
                os.close(fd)
            return
        self._store(fd, keys, values, k)

    def _store(self, fd: int, keys: array, values: array, k: int) -> None:  # type: ignore[type-arg]
        fmt = "ii" if self.entry_size == OFFSET_INDEX_ENTRY_SIZE else "qi"
        if _WORDS:
            data = _big_endian_entries(keys, values, k, fmt).tobytes()
        else:
            data = _packed(list(keys[:k]), list(values[:k]), fmt)
        start = self.written * self.entry_size
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], start + done)
        self.written += k
        del keys[:k]
        del values[:k]

    def pending_floor(self, key: int) -> tuple[int, int] | None:
        with self._lock:
            n = len(self._values)
            i = bisect.bisect_right(self._keys, key, 0, n) - 1 if n else -1
            return (self._keys[i], self._values[i]) if i >= 0 else None


class PySegmentState:
    """The pure-Python :class:`SegmentState` (plain fields, no behaviour)."""

    __slots__ = (
        "base_offset",
        "bytes_since_last_index_entry",
        "created_ms",
        "fd",
        "index_interval_bytes",
        "max_ts_and_offset",
        "offset_index",
        "prealloc_end",
        "roll_jitter_ms",
        "rolling_based_ts",
        "size",
        "time_index",
    )

    def __init__(
        self, base_offset: int, index_interval_bytes: int, offset_index: PyIndexState, time_index: PyIndexState
    ) -> None:
        self.fd = -1
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.size = self.prealloc_end = self.bytes_since_last_index_entry = 0
        self.created_ms = self.roll_jitter_ms = 0
        self.max_ts_and_offset: tuple[int, int] | None = None
        self.rolling_based_ts: int | None = None
        self.offset_index = offset_index
        self.time_index = time_index


def _load():  # type: ignore[no-untyped-def]
    """``tidelog.storage._segment`` when the C record walker is in use (so not with ``TIDELOG_PURE_PYTHON``) and
    the extension is built, else None."""
    if _c_check_records is None:
        return None
    try:
        from tidelog.storage import _segment
    except ImportError:
        return None
    return _segment


_ext = _load()

IndexState = PyIndexState if _ext is None else _ext.IndexState
SegmentState = PySegmentState if _ext is None else _ext.SegmentState

c_append_leader_fast = None if _ext is None else _ext.append_leader_fast
"""``c_append_leader_fast(state, batch, base_offset, leader_epoch, now_ms, limits[, with_producer])``:
``PartitionLog.append_as_leader``'s common case on the active segment's :class:`SegmentState` in one C call,
returning ``(last_offset, max_timestamp, record_count, size)``, or None when the Python path must take the batch
(see ``_segment_leader.c``). ``with_producer``: a batch with a producer id is taken too (an idempotent one whose
producer-state check the caller made and whose producer state it updates)."""

c_write_stamped = None if _ext is None else _ext.write_stamped
"""``c_write_stamped(fd, batch, base_offset, partition_leader_epoch, check=0)``: write one whole batch to ``fd``
with baseOffset and partitionLeaderEpoch (outside the CRC) replaced, without copying or changing ``batch`` (one
``writev`` of a 16-byte head and the rest of the buffer, short writes continued); returns ``len(batch)``, or -1
when ``check`` (1: the CRC-32C, 2: also the record walk of an uncompressed batch, both right after the write)
failed."""

c_check_follower_batches = None if _ext is None else _ext.check_follower_batches
"""``c_check_follower_batches(buf, expected_min)``: the number of batches of a fetched buffer, each checked as
``validate_batch`` checks it with base offsets >= ``expected_min`` and increasing, or -1 (see ``_segment_follower.c``)."""

c_append_follower_run = None if _ext is None else _ext.append_follower_run
"""``c_append_follower_run(state, buf, start, now_ms, segment_bytes, segment_ms, latest_epoch, headers,
all_headers, epochs)``: the batches of ``buf[start:]`` that fit the active segment without a roll, written as
they are in one write with the segment's bookkeeping; returns ``(consumed, last_offset, latest_epoch)`` (see
``_segment_follower.c``)."""

c_preallocate = None if _ext is None else _ext.preallocate
"""``c_preallocate(fd, offset, length)``: reserve disk blocks past the end of a file (``fallocate`` with
``FALLOC_FL_KEEP_SIZE``: size and contents unchanged); returns 0 or the errno of the failure (None: no
reservation)."""

c_scan_batches = None if _ext is None else _ext.scan_batches
"""``c_scan_batches(...)``: ``LogSegment.recover``'s per-batch loop over one buffer in C (see ``_segment_scan.c``)."""
