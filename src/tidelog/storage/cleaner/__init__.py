"""Log compaction: keep only the newest record per key (``cleanup.policy`` containing ``compact``).

What the cleaner does, following the behaviour Kafka documents (``LogCleaner``):

* **Choosing a log.** Each compacted log splits at its *first dirty offset* (from ``cleaner-offset-checkpoint``,
  reset to the log start offset when out of range) into a clean head and a dirty tail. The dirty section ends at
  the *first uncleanable offset*: the active segment, the high watermark / first unstable (open transaction)
  offset, and the first segment younger than ``min.compaction.lag.ms``, rounded down to a segment boundary.
  The dirty ratio is dirty bytes / (clean + dirty bytes). A log is eligible when the ratio exceeds
  ``min.cleanable.dirty.ratio``, when its oldest dirty record is older than ``max.compaction.lag.ms``, or when a
  delete horizon it wrote has passed (tombstones are due for removal). The eligible log with the highest ratio
  goes first; a log is never cleaned by two threads at once.
* **Offset map.** One pass over the dirty section records key -> last offset in a fixed-size
  :class:`~tidelog.storage.offset_map.OffsetMap` (``log.cleaner.dedupe.buffer.size`` split over the threads).
  When the map fills, the round ends at the last batch that fit; the rest is cleaned in later rounds.
* **Rewrite.** Every inactive segment below the map's end is recopied, grouped so that a group's original
  ``.log`` and index sizes fit ``segment.bytes`` / ``segment.index.bytes`` and its offsets fit relative to
  the group's base. A record survives when no later offset for its key is in the map. Tombstones (null value)
  survive until the batch's delete horizon: the first cleaning that keeps a tombstone rewrites its batch with
  the delete-horizon attribute and baseTimestamp = now + ``delete.retention.ms``; a cleaning after that time
  drops them. A batch that loses all its records is kept empty when it is its producer's last batch (producer
  state needs its offsets and sequence). Batches keep their base offset, last offset delta, producer fields,
  leader epoch and codec; an unchanged batch is copied byte for byte.
* **Swap.** A group is written to ``<base>.log.cleaned`` (+ indexes), fsynced, renamed ``.swap``, swapped into
  the segment list under the log's lock, the originals renamed ``.deleted`` (removed after
  ``file.delete.delay.ms``), and the swap renamed to the final names (:meth:`PartitionLog.replace_segments`).
  When the group's last offset was not retained, an empty batch at that offset ends the cleaned segment, so a
  recovered ``.swap`` covers the whole range it replaces. ``cleaner-offset-checkpoint`` then records the map's
  end as the next first dirty offset.

Not done (yet): transactional data and control batches are copied unchanged and their keys are not put in the
map (so an aborted transaction is never removed, and committed transactional writes do not supersede older
values); Kafka removes aborted data and, after the delete horizon, markers of finished transactions.

Per-record work: both passes call C once per batch (``tidelog.storage._cleanwalk``, when built and
``TIDELOG_PURE_PYTHON`` is not set): :data:`c_put_records` for the map, :data:`c_filter_records` for the keep/drop
and the re-encoded kept records. The pure-Python loops (:func:`_keys_and_deltas`, :func:`_scan_records`,
:func:`_retained_records`) stay the reference; the C walk declines any batch that is not plainly well-formed
(Python then raises the exact error), and both paths build byte-identical maps and segments.

Threads: ``log.cleaner.threads`` daemon threads, each waiting ``log.cleaner.backoff.ms`` between idle checks.
All file I/O happens on them, never on the broker's event loop. ``log.cleaner.io.max.bytes.per.second`` limits
the bytes read + written per second across all threads.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidelog.records.batch import DEFAULT_MAX_DECOMPRESSED, MIN_RECORD_SIZE, build_batch
from tidelog.records.compression import compress, decompress
from tidelog.records.crc import _crc32c
from tidelog.records.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_BASE_TIMESTAMP,
    H_BATCH_LENGTH,
    H_CRC,
    H_LAST_OFFSET_DELTA,
    H_MAGIC,
    H_MAX_TIMESTAMP,
    H_PARTITION_LEADER_EPOCH,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECORDS_COUNT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    HeaderTuple,
    seal_batch,
    unpack_header_tuple,
)
from tidelog.records.varint import decode_varint, decode_varlong
from tidelog.storage.format import CLEANED_SUFFIX, SWAP_SUFFIX
from tidelog.storage.index import INT32_MAX
from tidelog.storage.log import PartitionLog
from tidelog.storage.offset_map import OffsetMap
from tidelog.storage.segment import (
    LogSegment,
    index_file,
    log_file,
    time_index_file,
    txn_index_file,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Fault = Callable[[str], None]

DOUBLE_MAX = 1.7976931348623157e308

_INT32_MIN = -(1 << 31)

#: the fault-injection steps, in order (tests raise or exit at each)
FAULT_STEPS = ("map-built", "cleaned", "swap", "old-deleted", "swapped", "checkpoint")


def _load_c(name: str) -> Callable[..., Any] | None:
    """``tidelog.storage._cleanwalk.<name>`` (the per-batch loops in C, built by setup.py when a compiler is
    there), or None: not built, or ``TIDELOG_PURE_PYTHON`` is set (to anything but "" or "0")."""
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from tidelog.storage import _cleanwalk
    except ImportError:
        return None
    return getattr(_cleanwalk, name, None)


c_put_records = _load_c("put_records")
"""The C offset-map build of one batch's records (:meth:`OffsetMap.put_records`), or None for the pure-Python
:func:`_keys_and_deltas` + :meth:`OffsetMap.put_many` (the reference: same map, same exceptions and messages)."""

c_filter_records = _load_c("filter_records")
"""The C filter of one batch's records (:meth:`_Filter.apply`: walk, lookups, keep/drop, the kept records
re-encoded), or None for the pure-Python :func:`_scan_records` + :meth:`OffsetMap.get_many` + the loop in
:meth:`_Filter.apply` + :func:`_retained_records` (the reference: same bytes, same exceptions and messages)."""


class CleanerAbortedError(Exception):
    """Cleaning stopped because the cleaner is shutting down or the log went away."""


class DedupeBufferTooSmallError(Exception):
    """One batch has more records than the offset map can hold."""


# =============================================================================================== config


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-level cleaner settings (Kafka's ``CleanerConfig`` names and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    io_max_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15000

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> CleanerConfig:
        """From broker properties (``log.cleaner.*``); a bad value raises ValueError naming the key."""
        d = cls()

        def get(name: str, default: Any, parse: Callable[[str], Any], ok: Callable[[Any], bool], why: str) -> Any:
            raw = props.get(name)
            if raw is None:
                return default
            try:
                value = parse(str(raw).strip())
            except ValueError:
                raise ValueError(f"Invalid value {raw!r} for configuration {name}: {why}") from None
            if not ok(value):
                raise ValueError(f"Invalid value {raw!r} for configuration {name}: {why}")
            return value

        def boolean(s: str) -> bool:
            if s.lower() not in ("true", "false"):
                raise ValueError(s)
            return s.lower() == "true"

        return cls(
            enable=get("log.cleaner.enable", d.enable, boolean, lambda _v: True, "expected true or false"),
            threads=get("log.cleaner.threads", d.threads, int, lambda v: v >= 0, "must be >= 0"),
            dedupe_buffer_size=get(
                "log.cleaner.dedupe.buffer.size", d.dedupe_buffer_size, int, lambda v: v >= 24, "must be >= 24"
            ),
            io_buffer_load_factor=get(
                "log.cleaner.io.buffer.load.factor",
                d.io_buffer_load_factor,
                float,
                lambda v: 0 < v <= 1,
                "must be in (0, 1]",
            ),
            io_buffer_size=get("log.cleaner.io.buffer.size", d.io_buffer_size, int, lambda v: v >= 0, "must be >= 0"),
            io_max_bytes_per_second=get(
                "log.cleaner.io.max.bytes.per.second",
                d.io_max_bytes_per_second,
                float,
                lambda v: v > 0,
                "must be > 0",
            ),
            backoff_ms=get("log.cleaner.backoff.ms", d.backoff_ms, int, lambda v: v >= 0, "must be >= 0"),
        )

    def map_memory_per_thread(self) -> int:
        return max(24, self.dedupe_buffer_size // max(1, self.threads))


# =============================================================================================== throttle


class Throttler:
    """Limits bytes per second across callers by sleeping (waits are cut short by ``stop``)."""

    def __init__(self, bytes_per_second: float, stop: threading.Event | None = None) -> None:
        self.rate = bytes_per_second
        self.stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._count = 0.0
        self.throttled_seconds = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate >= DOUBLE_MAX or nbytes <= 0:
            return
        with self._lock:
            self._count += nbytes
            now = time.monotonic()
            elapsed = now - self._start
            wait = self._count / self.rate - elapsed
            if elapsed >= 1.0 and wait <= 0:  # on schedule: start a new window (idle time is not credit)
                self._start, self._count = now, 0.0
        if wait > 0.001:
            self.throttled_seconds += wait
            self.stop.wait(wait)  # a rate limit, not synchronisation: the sleep *is* the feature


# =============================================================================================== planning


@dataclass(slots=True)
class LogToClean:
    """The cleanable state of one log at one moment."""

    tp: TopicPartition
    plog: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int = 0
    horizon_due: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0


def _floor_to_segment_base(segments: list[LogSegment], offset: int) -> int:
    base = segments[0].base_offset
    for seg in segments:
        if seg.base_offset <= offset:
            base = seg.base_offset
        else:
            break
    return base


def plan_log(
    tp: TopicPartition,
    plog: PartitionLog,
    checkpoint: int | None,
    now_ms: int,
    horizon: int | None = None,
) -> LogToClean:
    """Compute first dirty / first uncleanable offsets and the byte counts (see module docstring)."""
    segments = plog.segments
    lso = plog.log_start_offset
    leo = plog.log_end_offset
    first_dirty = checkpoint if checkpoint is not None else lso
    if first_dirty < lso or first_dirty > leo:
        first_dirty = lso
    active = segments[-1]
    bound = active.base_offset
    bound = min(bound, plog.high_watermark)
    ps = plog.producer_state
    unstable = getattr(ps, "first_unstable_offset", None)
    if unstable is not None:
        fuo = unstable()
        if fuo is not None:
            bound = min(bound, fuo)
    cfg = plog.config
    dirty_inactive = [
        (s, segments[i + 1].base_offset)
        for i, s in enumerate(segments[:-1])
        if segments[i + 1].base_offset > first_dirty
    ]
    if cfg.min_compaction_lag_ms > 0:
        for seg, _upper in dirty_inactive:
            if seg.largest_timestamp > now_ms - cfg.min_compaction_lag_ms:
                bound = min(bound, seg.base_offset)
                break
    bound = _floor_to_segment_base(segments, bound)
    first_uncleanable = max(bound, first_dirty)
    clean_bytes = 0
    cleanable_bytes = 0
    for i, seg in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        if upper <= first_dirty:
            clean_bytes += seg.size
        elif seg.base_offset < first_uncleanable:
            cleanable_bytes += seg.size
    delay = 0
    if cfg.max_compaction_lag_ms < 2**63 - 1 and cleanable_bytes > 0:
        firsts = [
            s.rolling_based_timestamp
            for s, upper in dirty_inactive
            if s.base_offset < first_uncleanable and s.rolling_based_timestamp > 0
        ]
        if firsts:
            delay = max(0, now_ms - min(firsts) - cfg.max_compaction_lag_ms)
    return LogToClean(
        tp,
        plog,
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        compaction_delay_ms=delay,
        horizon_due=horizon is not None and now_ms >= horizon and clean_bytes + cleanable_bytes > 0,
    )


def group_segments_by_size(
    segments: list[LogSegment], uppers: list[int], max_size: int, max_index_size: int
) -> list[list[LogSegment]]:
    """Consecutive groups whose summed ``.log`` sizes fit ``max_size`` and summed offset/time index sizes fit
    ``max_index_size``, with every offset of a group expressible relative to its first base offset."""
    groups: list[list[LogSegment]] = []
    i = 0
    n = len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        offset_index = segments[i].offset_index.size_in_bytes
        time_index = segments[i].time_index.size_in_bytes
        base = segments[i].base_offset
        i += 1
        while i < n:
            seg = segments[i]
            if (
                log_size + seg.size > max_size
                or offset_index + seg.offset_index.size_in_bytes > max_index_size
                or time_index + seg.time_index.size_in_bytes > max_index_size
                or uppers[i] - 1 - base > INT32_MAX
            ):
                break
            group.append(seg)
            log_size += seg.size
            offset_index += seg.offset_index.size_in_bytes
            time_index += seg.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


# =============================================================================================== cleaning


@dataclass(slots=True)
class CleanResult:
    tp: TopicPartition
    first_dirty_offset: int
    end_offset: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    batches_rewritten: int = 0
    groups: int = 0
    map_entries: int = 0
    map_utilization: float = 0.0
    seconds: float = 0.0
    min_delete_horizon: int | None = None
    aborted: bool = False

    @property
    def recopy_percent(self) -> float:
        return 100.0 * self.bytes_written / self.bytes_read if self.bytes_read else 0.0


class _Context:
    def __init__(
        self,
        throttler: Throttler | None,
        should_abort: Callable[[], bool],
        fault: Fault | None,
        result: CleanResult,
        chunk: int = 512 * 1024,
    ) -> None:
        self.chunk = chunk  # bytes per segment read
        self.throttler = throttler
        self.should_abort = should_abort
        self.fault = fault
        self.result = result

    def io(self, nbytes: int) -> None:
        """Account ``nbytes`` read or written (throttling) and stop when the cleaning is aborted. The copy loops
        call it once per :data:`IO_CHECK_BYTES` (and at each segment's end), not per batch."""
        if self.should_abort():
            raise CleanerAbortedError("cleaning aborted")
        if self.throttler is not None:
            self.throttler.maybe_throttle(nbytes)

    def step(self, name: str) -> None:
        if self.fault is not None:
            self.fault(name)


#: the copy loops add up the bytes of their batches and call :meth:`_Context.io` (abort check, throttling) once
#: this many have passed, and at each segment's end
IO_CHECK_BYTES = 64 * 1024

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


def _framing_error(index: int, p: int, n: int, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"record {index} at byte {p}: {what} ({n - p} bytes remain)")


def _keys_and_deltas(data: bytes, p: int, n: int, count: int) -> tuple[list[bytes], list[int]]:
    """The keys (null keys skipped) and their offset deltas of ``count`` records in ``data[p:n]``.

    Reads only each record's length, offset delta and key; checks the framing (lengths stay inside the record
    bytes, exactly ``count`` records)."""
    keys: list[bytes] = []
    deltas: list[int] = []
    add_key = keys.append
    add_delta = deltas.append
    index = 0
    try:
        for index in range(count):
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                length, p = decode_varint(data, p)
            end = p + length
            if length < MIN_RECORD_SIZE - 1 or end > n:
                raise _framing_error(index, p, n, f"declared length {length} does not fit")
            q = p + 1  # attributes (unused in v2)
            while data[q] & 0x80:  # timestampDelta varlong, not needed here
                q += 1
            q += 1
            b = data[q]
            if b < 0x80:
                od = (b >> 1) ^ -(b & 1)
                q += 1
            else:
                od, q = decode_varint(data, q)
            b = data[q]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                q += 1
            else:
                klen, q = decode_varint(data, q)
            if klen >= 0:
                if q + klen > end:
                    raise _framing_error(index, q, n, f"key of {klen} bytes runs past the record's end")
                add_key(data[q : q + klen])
                add_delta(od)
            elif q > end:
                raise _framing_error(index, q, n, "fields run past the record's end")
            p = end
    except IndexError:
        raise _framing_error(index, p, n, "truncated record") from None
    if p != n:
        raise InvalidRecordError(f"batch declares {count} records but {n - p} bytes remain after the last one")
    return keys, deltas


def _scan_records(
    data: bytes, p: int, n: int, count: int
) -> tuple[list[int], list[bytes | None], list[int], list[bool]]:
    """Per record of ``data[p:n]``: start position (the length varint), key (None when null), offset delta and
    whether the value is null; the end of record ``i`` is the start of record ``i + 1`` (or ``n``)."""
    starts: list[int] = []
    keys: list[bytes | None] = []
    deltas: list[int] = []
    nulls: list[bool] = []
    index = 0
    try:
        for index in range(count):
            starts.append(p)
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                length, p = decode_varint(data, p)
            end = p + length
            if length < MIN_RECORD_SIZE - 1 or end > n:
                raise _framing_error(index, p, n, f"declared length {length} does not fit")
            q = p + 1
            while data[q] & 0x80:
                q += 1
            q += 1
            b = data[q]
            if b < 0x80:
                deltas.append((b >> 1) ^ -(b & 1))
                q += 1
            else:
                od, q = decode_varint(data, q)
                deltas.append(od)
            b = data[q]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                q += 1
            else:
                klen, q = decode_varint(data, q)
            if klen >= 0:
                if q + klen > end:
                    raise _framing_error(index, q, n, f"key of {klen} bytes runs past the record's end")
                keys.append(data[q : q + klen])
                q += klen
            else:
                keys.append(None)
            # value length: -1 (zig-zag 0x01) is a tombstone; anything else is not (multi-byte lengths included)
            nulls.append(data[q] == 1)
            if q >= end:
                raise _framing_error(index, q, n, "fields run past the record's end")
            p = end
    except IndexError:
        raise _framing_error(index, p, n, "truncated record") from None
    if p != n:
        raise InvalidRecordError(f"batch declares {count} records but {n - p} bytes remain after the last one")
    return starts, keys, deltas, nulls


def _zigzag_varlong(value: int) -> bytes:
    return _uvarint((value << 1) ^ (value >> 63))


def _uvarint(v: int) -> bytes:
    if v < 0x80:
        return _ONE_BYTE[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_ONE_BYTE = [bytes((i,)) for i in range(128)]


def _retained_records(
    data: bytes, starts: list[int], n: int, kept: list[int], old_base: int, new_base: int, lat_time: int | None
) -> tuple[list[bytes], int]:
    """The bytes of the kept records (indexes into ``starts``) relative to ``new_base``, and their max timestamp.

    A record whose timestamp delta does not change is copied verbatim; otherwise only its length and
    timestampDelta are re-encoded and the rest (offset delta, key, value, headers) is copied. ``lat_time``: a
    LogAppendTime batch, whose records all read as that time (Kafka rebuilds them so)."""
    parts: list[bytes] = []
    add = parts.append
    last = len(starts) - 1
    max_ts = NO_TIMESTAMP
    for i in kept:
        start = starts[i]
        end = starts[i + 1] if i < last else n
        p = start
        while data[p] & 0x80:  # length varint
            p += 1
        p += 2  # last length byte, attributes
        tsd, after = decode_varlong(data, p)
        ts = lat_time if lat_time is not None else old_base + tsd
        if ts > max_ts:
            max_ts = ts
        new_tsd = ts - new_base
        if new_tsd == tsd:
            add(data[start:end])
        else:
            body = b"".join((data[p - 1 : p], _zigzag_varlong(new_tsd), data[after:end]))
            add(_uvarint(len(body) << 1))
            add(body)
    return parts, max_ts


def build_offset_map(
    plog: PartitionLog, start: int, end: int, offset_map: OffsetMap, ctx: _Context
) -> int:
    """Put every keyed, non-transactional record with offset in [start, end) into the map; returns the offset
    up to which the map is complete (``end``, or less when the map filled up)."""
    segments = plog.segments[:-1]
    put_many = offset_map.put_many
    max_entries = offset_map.max_entries
    result = ctx.result
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else plog.segments[-1].base_offset
        if upper <= start:
            continue
        if seg.base_offset >= end:
            break
        try:
            handle = seg.handle
        except ValueError:  # closed by retention or truncation meanwhile
            raise CleanerAbortedError(f"segment {seg.log_path} was closed") from None
        pending = 0  # bytes read since the last ctx.io
        for buf, pos, _fpos, fields in _iter_batches(handle.fd, seg.size, ctx.chunk):
            base = fields[H_BASE_OFFSET]
            if base + fields[H_LAST_OFFSET_DELTA] < start:
                continue
            if base >= end:
                ctx.io(pending)
                return end
            if fields[H_ATTRIBUTES] & (CONTROL_MASK | TRANSACTIONAL_MASK):
                continue
            count = fields[H_RECORDS_COUNT]
            if len(offset_map) + count > max_entries:
                if len(offset_map) == 0:
                    raise DedupeBufferTooSmallError(
                        f"a batch of {count} records does not fit the offset map "
                        f"({max_entries} entries); raise log.cleaner.dedupe.buffer.size"
                    )
                ctx.io(pending)
                return max(base, start)
            bsize = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
            if pending >= IO_CHECK_BYTES:
                ctx.io(pending)
                pending = 0
            pending += bsize
            result.bytes_read += bsize
            _check_crc(buf, pos, fields)
            data, p, n = _records_of(buf, pos, fields)
            if c_put_records is not None and offset_map.put_records(
                c_put_records, data, p, n, count, base, start - base if base < start else _INT32_MIN
            ):
                continue
            keys, deltas = _keys_and_deltas(data, p, n, count)
            if base >= start:
                put_many(keys, [base + d for d in deltas])
            else:
                first = start - base
                kept = [(k, base + d) for k, d in zip(keys, deltas, strict=True) if d >= first]
                put_many([k for k, _ in kept], [o for _, o in kept])
        ctx.io(pending)
    return end


@dataclass(slots=True)
class _Filter:
    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    producer_last_offsets: dict[int, int]
    min_horizon: int | None = None
    _buffers: tuple[bytearray, Any, int] | None = None  # offset_map.buffers(), fixed for the map's life

    def apply(
        self, buf: bytes, pos: int, fields: HeaderTuple
    ) -> tuple[bytes | memoryview | None, int, int, int]:
        """(bytes to write or None, records read, records kept, max timestamp of what is written) for the batch
        at ``buf[pos:]``. An unchanged batch comes back as a view of ``buf``."""
        bsize = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        attributes = fields[H_ATTRIBUTES]
        count = fields[H_RECORDS_COUNT]
        if attributes & (CONTROL_MASK | TRANSACTIONAL_MASK):
            return memoryview(buf)[pos : pos + bsize], count, count, fields[H_MAX_TIMESTAMP]
        _check_crc(buf, pos, fields)
        data, p, n = _records_of(buf, pos, fields)
        base = fields[H_BASE_OFFSET]
        horizon = fields[H_BASE_TIMESTAMP] if attributes & DELETE_HORIZON_MASK else None
        expired = horizon is not None and self.now_ms >= horizon
        lat = attributes & TIMESTAMP_TYPE_MASK
        c_filter = c_filter_records
        res = None
        if c_filter is not None:
            offset_map = self.offset_map
            buffers = self._buffers
            if buffers is None:
                buffers = self._buffers = offset_map.buffers()
            digests, offsets, slots = buffers
            res = c_filter(
                digests, offsets, slots, data, p, n, count, base, expired, horizon,
                self.now_ms + self.delete_retention_ms, fields[H_MAX_TIMESTAMP] if lat else None,
                fields[H_BASE_TIMESTAMP],
            )
        if res is None:  # the pure-Python reference (no C, or the C walk declined the records)
            starts, keys, deltas, nulls = _scan_records(data, p, n, count)
            latest = self.offset_map.get_many([b"" if k is None else k for k in keys])
            kept: list[int] = []
            tombstones = False
            for i, found in enumerate(latest):
                if keys[i] is None:  # a compacted log has no use for a record without a key
                    continue
                if found >= 0 and base + deltas[i] < found:
                    continue
                if nulls[i]:
                    if expired:
                        continue
                    tombstones = True
                kept.append(i)
            nkept = len(kept)
        else:
            nkept, tombstones, probes, payload, new_base, c_max_ts = res
            offset_map.count_lookups(count, probes)
        need_horizon = horizon is None and tombstones
        if tombstones:
            h = horizon if horizon is not None else self.now_ms + self.delete_retention_ms
            self.min_horizon = h if self.min_horizon is None else min(self.min_horizon, h)
        if nkept == count and not need_horizon:
            return memoryview(buf)[pos : pos + bsize], count, count, fields[H_MAX_TIMESTAMP]
        new_horizon = self.now_ms + self.delete_retention_ms if need_horizon else horizon
        if not nkept:
            pid = fields[H_PRODUCER_ID]
            if pid == NO_PRODUCER_ID or self.producer_last_offsets.get(pid) != base + fields[H_LAST_OFFSET_DELTA]:
                return None, count, 0, NO_TIMESTAMP
            empty = build_batch(
                [],
                base_offset=base,
                timestamp_type=LOG_APPEND_TIME if lat else CREATE_TIME,
                producer_id=pid,
                producer_epoch=fields[H_PRODUCER_EPOCH],
                base_sequence=fields[H_BASE_SEQUENCE],
                partition_leader_epoch=fields[H_PARTITION_LEADER_EPOCH],
                max_timestamp=fields[H_MAX_TIMESTAMP],
                delete_horizon_ms=new_horizon,
                last_offset_delta=fields[H_LAST_OFFSET_DELTA],
            )
            return empty, count, 0, fields[H_MAX_TIMESTAMP]
        if res is None:
            rebuilt, max_ts = _rebuild(data, n, fields, starts, kept, new_horizon)
        else:
            rebuilt, max_ts = _seal(fields, payload, nkept, new_base, c_max_ts, new_horizon), c_max_ts
        return rebuilt, count, nkept, max_ts


def _rebuild(
    data: bytes, n: int, fields: HeaderTuple, starts: list[int], kept: list[int], new_horizon: int | None
) -> tuple[bytes, int]:
    """The batch with only the ``kept`` records, as Kafka's ``MemoryRecords.filterTo`` builds it for v2: same
    base offset, lastOffsetDelta, producer fields, leader epoch and codec; baseTimestamp is the delete
    horizon when set, else the first kept record's timestamp; maxTimestamp is recomputed (CreateTime) or kept
    (LogAppendTime). Record bytes are reused (see :func:`_retained_records`)."""
    attributes = fields[H_ATTRIBUTES]
    old_base = fields[H_BASE_TIMESTAMP]
    lat_time = fields[H_MAX_TIMESTAMP] if attributes & TIMESTAMP_TYPE_MASK else None
    if new_horizon is not None:
        new_base = new_horizon
    elif lat_time is not None:
        new_base = lat_time
    else:
        first = starts[kept[0]]
        p = first
        while data[p] & 0x80:
            p += 1
        new_base = old_base + decode_varlong(data, p + 2)[0]
    parts, max_ts = _retained_records(data, starts, n, kept, old_base, new_base, lat_time)
    if lat_time is not None:
        max_ts = lat_time
    return _seal(fields, b"".join(parts), len(kept), new_base, max_ts, new_horizon), max_ts


def _seal(
    fields: HeaderTuple, payload: bytes, count: int, new_base: int, max_ts: int, new_horizon: int | None
) -> bytes:
    """The rebuilt batch around the kept records' bytes ``payload`` (compressed here with the batch's codec):
    the header of :func:`_rebuild` with ``count`` records, baseTimestamp ``new_base``, maxTimestamp ``max_ts``."""
    attributes = fields[H_ATTRIBUTES]
    codec = attributes & COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload)
    new_attributes = attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK)
    if new_horizon is not None:
        new_attributes |= DELETE_HORIZON_MASK
    return seal_batch(
        fields[H_BASE_OFFSET],
        fields[H_PARTITION_LEADER_EPOCH],
        new_attributes,
        fields[H_LAST_OFFSET_DELTA],
        new_base,
        max_ts,
        fields[H_PRODUCER_ID],
        fields[H_PRODUCER_EPOCH],
        fields[H_BASE_SEQUENCE],
        count,
        payload,
    )


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
    try:
        last_written = -1
        last_seen = -1
        result = ctx.result
        apply = flt.apply
        append = cleaned.append_parts
        io = ctx.io
        # per-batch counts in locals, added to the result after each segment; ctx.io once per IO_CHECK_BYTES
        for seg_handle, size in zip(handles, sizes, strict=True):
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
    """One cleaning round of ``ltc.plog`` (see module docstring). ``result.end_offset`` is the new first dirty
    offset; ``result.aborted`` is set when the log changed under the cleaner (nothing is lost, retry later).
    Segments are read sequentially in ``io_buffer_size`` chunks (``log.cleaner.io.buffer.size``)."""
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
    flt = _Filter(offset_map, now, plog.config.delete_retention_ms, producer_last_offsets(plog))
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


# =============================================================================================== the cleaner


@dataclass(slots=True)
class LogCleanerStats:
    """Per-log state shown in metrics and ``tidelog topics describe``."""

    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    dirty_ratio: float = 0.0
    cleanable_bytes: int = 0
    total_bytes: int = 0
    compaction_delay_ms: int = 0
    runs: int = 0
    last_clean_ms: int = -1
    last_seconds: float = 0.0
    last_recopy_percent: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    uncleanable: str | None = None


@dataclass
class _Totals:
    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    max_buffer_utilization: float = 0.0
    max_clean_seconds: float = 0.0
    last_recopy_percent: float = 0.0
    dead_threads: int = 0
    last_run_ms: int = -1
    errors: int = 0
    horizons: dict[TopicPartition, int] = field(default_factory=dict)


class LogCleaner:
    """The cleaner threads of one broker (see module docstring).

    ``logs()`` returns the current logs; ``checkpoints`` is the initial content of every log dir's
    ``cleaner-offset-checkpoint``; ``write_checkpoints(entries)`` persists the whole map (the LogManager
    splits it per log dir).
    """

    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], Mapping[TopicPartition, PartitionLog]],
        checkpoints: Mapping[TopicPartition, int] | None = None,
        write_checkpoints: Callable[[dict[TopicPartition, int]], None] | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self._logs = logs
        self._checkpoints: dict[TopicPartition, int] = dict(checkpoints or {})
        self._write_checkpoints = write_checkpoints
        self._clock = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self._stats: dict[TopicPartition, LogCleanerStats] = {}
        self._totals = _Totals()
        self._stop = threading.Event()
        self._wakeup = threading.Condition(self._lock)
        self._wake_pending = False
        self._threads: list[threading.Thread] = []
        self.throttler = Throttler(config.io_max_bytes_per_second, self._stop)
        self.fault: Fault | None = None  # test hook, see FAULT_STEPS
        # the offset map of synchronous cleanings (clean_until_done), allocated on first use and reused (cleared
        # by clean_log) like each thread's own map; the lock keeps two synchronous callers from sharing it
        self._sync_map: OffsetMap | None = None
        self._sync_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if not self.config.enable:
            return
        for n in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{n}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self, timeout: float = 30.0) -> None:
        self._stop.set()
        with self._lock:
            self._wakeup.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def wakeup(self) -> None:
        """Run a check now instead of after the backoff (tests, topic config changes)."""
        with self._lock:
            self._wake_pending = True
            self._wakeup.notify_all()

    def _run(self) -> None:
        offset_map = OffsetMap(self.config.map_memory_per_thread(), self.config.io_buffer_load_factor)
        while not self._stop.is_set():
            try:
                result = self.clean_filthiest(offset_map)
            except Exception:
                log.exception("log cleaner iteration failed")
                with self._lock:
                    self._totals.errors += 1
                result = None
            if result is not None:
                continue
            with self._lock:
                if not self._wake_pending and not self._stop.is_set():
                    self._wakeup.wait(self.config.backoff_ms / 1000.0)
                self._wake_pending = False

    # ------------------------------------------------------------------ checkpoints
    def checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._checkpoints)

    def forget(self, tp: TopicPartition) -> None:
        """The log was deleted: stop an ongoing cleaning and drop its checkpoint."""
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)
            self._checkpoints.pop(tp, None)
            self._stats.pop(tp, None)
            self._totals.horizons.pop(tp, None)

    def abort(self, tp: TopicPartition) -> None:
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)

    def _persist(self) -> None:
        if self._write_checkpoints is None:
            return
        with self._lock:
            logs = self._logs()
            entries = {tp: off for tp, off in self._checkpoints.items() if tp in logs}
        self._write_checkpoints(entries)

    # ------------------------------------------------------------------ selection and cleaning
    def plans(self, now_ms: int | None = None) -> list[LogToClean]:
        now = self._clock() if now_ms is None else now_ms
        out = []
        for tp, plog in sorted(self._logs().items()):
            if not plog.config.compact:
                continue
            with self._lock:
                cp = self._checkpoints.get(tp)
                horizon = self._totals.horizons.get(tp)
            try:
                ltc = plan_log(tp, plog, cp, now, horizon)
            except (ValueError, OSError):  # closed or deleted concurrently
                continue
            out.append(ltc)
            with self._lock:
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.first_dirty_offset = ltc.first_dirty_offset
                st.first_uncleanable_offset = ltc.first_uncleanable_offset
                st.dirty_ratio = ltc.dirty_ratio
                st.cleanable_bytes = ltc.cleanable_bytes
                st.total_bytes = ltc.total_bytes
                st.compaction_delay_ms = ltc.compaction_delay_ms
        return out

    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        candidates = []
        for ltc in self.plans(now_ms):
            ratio_ok = ltc.cleanable_bytes > 0 and ltc.dirty_ratio > ltc.plog.config.min_cleanable_dirty_ratio
            lag_ok = ltc.needs_compaction_now and ltc.cleanable_bytes > 0
            if ratio_ok or lag_ok or ltc.horizon_due:
                candidates.append(ltc)
        with self._lock:
            candidates = [c for c in candidates if c.tp not in self._in_progress]
            if not candidates:
                return None
            best = max(
                candidates,
                key=lambda c: (c.needs_compaction_now or c.cleanable_bytes > 0, c.dirty_ratio, c.compaction_delay_ms),
            )
            self._in_progress.add(best.tp)
            self._aborted.discard(best.tp)
        return best

    def clean_filthiest(self, offset_map: OffsetMap, now_ms: int | None = None) -> CleanResult | None:
        """Pick and clean one log (what each thread does in a loop; tests call it directly)."""
        ltc = self.grab_filthiest(now_ms)
        if ltc is None:
            with self._lock:
                self._totals.last_run_ms = self._clock()
            return None
        tp = ltc.tp
        try:
            result = clean_log(
                ltc,
                offset_map,
                now_ms=now_ms,
                throttler=self.throttler,
                should_abort=lambda: self._stop.is_set() or tp in self._aborted,
                fault=self.fault,
                io_buffer_size=self.config.io_buffer_size,
            )
        except CleanerAbortedError:
            result = CleanResult(tp, ltc.first_dirty_offset, ltc.first_dirty_offset, aborted=True)
        except Exception:
            with self._lock:
                self._in_progress.discard(tp)
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.uncleanable = "error"
            raise
        with self._lock:
            self._in_progress.discard(tp)
            done = not result.aborted and tp not in self._aborted
            if done:
                self._checkpoints[tp] = result.end_offset
                if result.min_delete_horizon is not None:
                    self._totals.horizons[tp] = result.min_delete_horizon
                else:
                    self._totals.horizons.pop(tp, None)
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.runs += 1
                st.first_dirty_offset = result.end_offset
                st.last_clean_ms = self._clock()
                st.last_seconds = result.seconds
                st.last_recopy_percent = result.recopy_percent
                st.bytes_read += result.bytes_read
                st.bytes_written += result.bytes_written
                st.records_removed += result.records_read - result.records_retained
                st.uncleanable = None
                t = self._totals
                t.runs += 1
                t.bytes_read += result.bytes_read
                t.bytes_written += result.bytes_written
                t.max_buffer_utilization = max(t.max_buffer_utilization, result.map_utilization)
                t.max_clean_seconds = max(t.max_clean_seconds, result.seconds)
                t.last_recopy_percent = result.recopy_percent
                t.last_run_ms = st.last_clean_ms
        if done:
            if self.fault is not None:
                self.fault("checkpoint")
            self._persist()
            log.info(
                "cleaned %s-%s: offsets [%d, %d) read %d bytes wrote %d (%.1f%%) in %.3fs, %d groups",
                tp[0], tp[1], ltc.first_dirty_offset, result.end_offset, result.bytes_read,
                result.bytes_written, result.recopy_percent, result.seconds, result.groups,
            )
        return result

    def offset_map(self) -> OffsetMap:
        """The offset map of :meth:`clean_until_done`: allocated (``log.cleaner.dedupe.buffer.size`` / threads) on
        the first call, then the same map, as Kafka keeps one map per cleaner thread; each cleaning clears it."""
        if self._sync_map is None:
            self._sync_map = OffsetMap(self.config.map_memory_per_thread(), self.config.io_buffer_load_factor)
        return self._sync_map

    def clean_until_done(self, now_ms: int | None = None, max_rounds: int = 1000) -> list[CleanResult]:
        """Synchronously clean until no log is eligible (tests, benchmarks), with :meth:`offset_map`."""
        results = []
        with self._sync_lock:
            offset_map = self.offset_map()
            for _ in range(max_rounds):
                r = self.clean_filthiest(offset_map, now_ms)
                if r is None:
                    break
                results.append(r)
                if r.aborted:
                    break
        return results

    # ------------------------------------------------------------------ observability
    def stats(self, refresh: bool = False) -> dict[TopicPartition, LogCleanerStats]:
        """Per-log state as of the last check (``refresh`` recomputes ratios now; it reads segment headers)."""
        if refresh:
            self.plans()
        with self._lock:
            return {tp: LogCleanerStats(**{f: getattr(s, f) for f in s.__slots__}) for tp, s in self._stats.items()}

    def metrics(self) -> list[tuple[str, str, dict[str, str], float]]:
        """(name, help, labels, value) rows for the broker's Prometheus endpoint."""
        per_log = self.stats()
        with self._lock:
            t = self._totals
            dead = sum(1 for th in self._threads if not th.is_alive()) if not self._stop.is_set() else 0
            now = self._clock()
            rows: list[tuple[str, str, dict[str, str], float]] = [
                ("tidelog_cleaner_runs_total", "Completed cleaning rounds", {}, t.runs),
                ("tidelog_cleaner_bytes_read_total", "Bytes read by the cleaner", {}, t.bytes_read),
                ("tidelog_cleaner_bytes_written_total", "Bytes written by the cleaner", {}, t.bytes_written),
                ("tidelog_cleaner_recopy_percent", "Written/read of the last round", {}, t.last_recopy_percent),
                (
                    "tidelog_cleaner_max_buffer_utilization_percent",
                    "Largest offset-map fill seen",
                    {},
                    100.0 * t.max_buffer_utilization,
                ),
                ("tidelog_cleaner_max_clean_time_seconds", "Longest cleaning round", {}, t.max_clean_seconds),
                ("tidelog_cleaner_dead_threads", "Cleaner threads that died", {}, dead),
                ("tidelog_cleaner_errors_total", "Cleaning rounds that failed", {}, t.errors),
                (
                    "tidelog_cleaner_time_since_last_run_ms",
                    "Milliseconds since a cleaner thread last checked",
                    {},
                    now - t.last_run_ms if t.last_run_ms >= 0 else -1,
                ),
            ]
        max_dirty = 0.0
        for (topic, partition), s in per_log.items():
            labels = {"topic": topic, "partition": str(partition)}
            max_dirty = max(max_dirty, s.dirty_ratio)
            rows += [
                ("tidelog_cleaner_dirty_ratio", "Dirty bytes / cleanable bytes per log", labels, s.dirty_ratio),
                ("tidelog_cleaner_first_dirty_offset", "Where the next cleaning starts", labels, s.first_dirty_offset),
                ("tidelog_cleaner_cleanable_bytes", "Dirty bytes the cleaner may clean now", labels, s.cleanable_bytes),
                ("tidelog_cleaner_log_runs_total", "Cleaning rounds per log", labels, s.runs),
                ("tidelog_cleaner_last_clean_timestamp_ms", "When the log was last cleaned", labels, s.last_clean_ms),
                (
                    "tidelog_cleaner_max_compaction_delay_ms",
                    "How far past max.compaction.lag.ms the oldest dirty record is",
                    labels,
                    s.compaction_delay_ms,
                ),
            ]
        rows.append(("tidelog_cleaner_max_dirty_percent", "Highest dirty ratio of any log", {}, 100.0 * max_dirty))
        return rows


__all__ = [
    "FAULT_STEPS",
    "CleanResult",
    "CleanerAbortedError",
    "CleanerConfig",
    "DedupeBufferTooSmallError",
    "LogCleaner",
    "LogCleanerStats",
    "LogToClean",
    "Throttler",
    "clean_log",
    "group_segments_by_size",
    "plan_log",
]
