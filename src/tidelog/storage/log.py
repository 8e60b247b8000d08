"""The log of one partition directory ``<topic>-<partition>``: segments, appends, reads, recovery.

Kafka's ``UnifiedLog``/``LocalLog``/``LogLoader`` in one class.  Hot paths never decode records: an append
validates the batch from its header plus one CRC, stamps baseOffset and partitionLeaderEpoch (both outside the
CRC) into a fresh 16-byte head and writes it with the rest of the caller's bytes in one ``writev``
(no copy; see :meth:`PartitionLog.append_as_leader`); a read returns :class:`FileRegion` views for
``os.sendfile``.
Nothing on the append or read path calls fsync: that happens in :meth:`flush`, :meth:`flush_if_due`,
:meth:`close`, on a background thread after a roll, or on append only when the topic asks for it through
``flush.messages``.

Thread safety: one re-entrant lock guards the segment list and the offsets; fsync runs outside it.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from tidelog.records.batch import (
    build_batch,
    check_record_structure,
    decode_records,
    rewrite_batch_for_append,
)
from tidelog.records.batch import c_validate_single_batch as _c_validate_single_batch
from tidelog.records.compression import CompressionType
from tidelog.records.crc import crc32c
from tidelog.records.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tidelog.records.header import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_FIELD,
    CRC_OFFSET,
    H_BASE_OFFSET,
    H_PARTITION_LEADER_EPOCH,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    HeaderTuple,
    check_batch_crc,
    parse_header_tuple,
    validate_batch,
    validate_batch_tuple,
)
from tidelog.records.varint import decode_varint, decode_varlong
from tidelog.storage.checkpoints import fsync_dir
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import InvalidTimestampError, OffsetOutOfRangeError, StorageError
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
from tidelog.storage.segment import (
    CHECK_FAILED,
    FileRegion,
    LogSegment,
    index_file,
    log_file,
    offset_from_filename,
    time_index_file,
)
from tidelog.storage.segment_state import c_append_leader_fast as _c_append_leader_fast

log = logging.getLogger(__name__)

DIR_SUFFIXES = ("-delete", "-future", "-stray")


class UnexpectedAppendOffsetError(StorageError):
    """A follower batch starts below the log end offset (Kafka's UnexpectedAppendOffsetException)."""

    kafka_error = "UNKNOWN_SERVER_ERROR"


class EpochCache(Protocol):
    def assign(self, epoch: int, start_offset: int) -> Any: ...
    def truncate_from_end(self, end_offset: int) -> Any: ...
    def truncate_from_start(self, start_offset: int) -> Any: ...
    def latest_epoch(self) -> int | None: ...


class ProducerState(Protocol):
    def check(self, header: BatchHeader) -> tuple[int, int, int] | None: ...
    def update(self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> Any: ...
    def take_snapshot(self, offset: int) -> Any: ...
    def load(self, log_start_offset: int, log_end_offset: int) -> int: ...
    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> int: ...
    def on_log_start(self, offset: int) -> Any: ...


@dataclass(slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False
    record_count: int = 0
    size: int = 0


class ValidatedBatch(NamedTuple):
    """A client batch that passed :meth:`PartitionLog.validate_leader_batch`, ready for
    :meth:`PartitionLog.append_validated`."""

    batch: bytes | bytearray | memoryview  # the caller's bytes
    fields: HeaderTuple  # the header of what is stored (of ``copy`` when there is one)
    copy: bytearray | None  # the rewritten batch (LogAppendTime, the topic's codec), else None
    late: bool  # the CRC and the record walk are left to the writer (uncompressed batches only)
    now: int
    log_append: bool


@dataclass(slots=True)
class ReadInfo:
    regions: list[FileRegion]
    size: int
    first_batch_offset: int  # -1 when nothing was read
    log_start_offset: int
    log_end_offset: int
    high_watermark: int = -1

    def read_bytes(self) -> bytes:
        return b"".join(r.read_bytes() for r in self.regions)


_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def _check_late(batch: bytes | bytearray | memoryview, fields: HeaderTuple) -> None:
    """The checks a late append (of an uncompressed batch) leaves to the C writer (see
    :meth:`PartitionLog.append_as_leader`), run now in their check-first order: the CRC-32C, then the record
    walk; raises the exact error."""
    check_batch_crc(batch, fields)
    check_record_structure(batch, 0, fields)


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` (topic names may contain '-'); also ``.<uuid>-delete/-future/-stray``."""
    name = dir_name
    for suffix in DIR_SUFFIXES:
        if name.endswith(suffix) and "." in name:
            name = name[: name.rindex(".")]
            break
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a partition directory name (<topic>-<partition>)")
    return topic, int(partition)


_flush_executor: ThreadPoolExecutor | None = None
_flush_executor_lock = threading.Lock()


def _background() -> ThreadPoolExecutor:
    global _flush_executor
    with _flush_executor_lock:
        if _flush_executor is None:
            _flush_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidelog-flush")
        return _flush_executor


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _scan_uncompressed_records(
    data: bytes, header: BatchHeader, predicate: Callable[[int, int], bool], min_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of an uncompressed batch at or after ``min_offset`` that
    satisfies ``predicate``, reading only each record's prefix (length, attributes, timestampDelta,
    offsetDelta) and skipping the rest.  The batch was validated when it was appended or recovered."""
    base_offset = header.base_offset
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    pos = RECORD_BATCH_OVERHEAD
    end = len(data)
    for _ in range(header.records_count):
        if pos + 1 >= end:
            raise CorruptRecordError(f"batch at offset {base_offset} ends before its {header.records_count} records")
        # zig-zag varints of one or two bytes inline (lengths of records up to 8 KiB), others decoded fully
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            length = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            length, pos = decode_varint(data, pos)
        next_pos = pos + length
        if length < 3 or next_pos > end:
            raise CorruptRecordError(f"record of length {length} does not fit the batch at offset {base_offset}")
        b = data[pos + 1]  # after the attributes byte
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            p = pos + 2
        else:
            ts_delta, p = decode_varlong(data, pos + 1)
        b = data[p]
        offset_delta = (b >> 1) ^ -(b & 1) if b < 0x80 else decode_varint(data, p)[0]
        offset = base_offset + offset_delta
        ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        if offset >= min_offset and predicate(ts, offset):
            return offset, ts
        pos = next_pos
    return None


class PartitionLog:
    """The segments of one partition (see module docstring)."""

    def __init__(self, directory: Path, config: LogConfig) -> None:
        # use PartitionLog.open(); the constructor only sets fields
        self.dir = Path(directory)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config
        self._apply_append_settings(config)
        self.epoch_cache: EpochCache | None = None
        self.producer_state: ProducerState | None = None
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark = 0
        self.recovery_point = 0
        self.last_flush_time = _now_ms()
        self._pending: list[Future[None]] = []
        self._deleted: list[tuple[int, LogSegment]] = []  # (time renamed, segment) awaiting file deletion
        self._closed = False
        self.recovered_segments = 0  # segments scanned by recovery during open (observability, tests)

    # ================================================================== loading
    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        clean_shutdown: bool = False,
        epoch_cache: EpochCache | None = None,
        producer_state: ProducerState | None = None,
        progress: Callable[[int, int], None] | None = None,
        now_ms: int | None = None,
    ) -> PartitionLog:
        """Load (and if needed recover) the partition directory, creating it and a first segment if needed."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, config)
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        now = _now_ms() if now_ms is None else now_ms
        self._load(recovery_point, log_start_offset, clean_shutdown, progress, now)
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self.log_start_offset), self._log_end_offset)
        return self

    def _load(
        self,
        recovery_point: int,
        checkpoint_log_start: int,
        clean_shutdown: bool,
        progress: Callable[[int, int], None] | None,
        now: int,
    ) -> None:
        d = self.dir
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
                seg = LogSegment(d, base, self.config, file_suffix=SWAP_SUFFIX, now_ms=now)
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
        for i, base in enumerate(bases):
            seg = LogSegment(d, base, self.config, now_ms=now)
            if i < first_recovered:
                try:
                    seg.sanity_check()
                except (CorruptIndexError, FileNotFoundError) as exc:
                    log.warning("rebuilding indexes of %s: %s", seg.log_path, exc)
                    seg.recover()
            self._segments.append(seg)
        self._bases = [s.base_offset for s in self._segments]

        # Recovery of the unflushed segments after an unclean shutdown.
        if not clean_shutdown and self._segments:
            self._recover_from(recovery_point, progress)

        if not self._segments:
            self._add_segment(LogSegment(d, max(checkpoint_log_start, 0), self.config, now_ms=now))
        self._log_end_offset = self._segments[-1].read_next_offset()
        self.log_start_offset = max(checkpoint_log_start, self._segments[0].base_offset)
        if self._log_end_offset < self.log_start_offset:
            # everything below the checkpointed start is gone; start the log afresh there
            self._replace_all_segments(self.log_start_offset, now)
        self._segments[-1].resize_indexes(self.config.segment_index_bytes)
        if clean_shutdown:
            self.recovery_point = self._log_end_offset
        else:
            self.recovery_point = min(max(recovery_point, self.log_start_offset), self._log_end_offset)
        if self.epoch_cache is not None:
            self.epoch_cache.truncate_from_end(self._log_end_offset)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
        if self.producer_state is not None:
            start = self.producer_state.load(self.log_start_offset, self._log_end_offset)
            self._replay_producer_state(start)

    def _recover_from(self, recovery_point: int, progress: Callable[[int, int], None] | None) -> None:
        # every segment holding offsets >= recovery_point: the one containing it and all later ones
        first = max(bisect.bisect_right(self._bases, recovery_point) - 1, 0)
        to_recover = self._segments[first:]
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
            self.recovered_segments += 1
            before = done
            truncated = seg.recover(on_header=self._recovery_epoch_hook(), progress=advance)
            done = before + seg.size + truncated
            if truncated > 0:
                log.warning("truncated %d invalid bytes from %s", truncated, seg.log_path)
                for later in to_recover[i + 1 :]:
                    log.warning("deleting %s after the corruption in %s", later.log_path, seg.log_path)
                    later.delete()
                    self._segments.remove(later)
                self._bases = [s.base_offset for s in self._segments]
                if progress is not None:
                    progress(total, total)
                break
            if progress is not None:
                progress(done, total)
        # an empty trailing segment that is not the first one is pointless but harmless: Kafka keeps it

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

    def _replay_producer_state(self, start: int) -> None:
        ps = self.producer_state
        if ps is None:
            return
        for _seg, _pos, header in self._iter_batches_from(start):
            if header.base_offset >= start or header.last_offset >= start:
                ps.update(header, header.base_offset, header.last_offset, header.max_timestamp)

    def _iter_batches_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """Every batch whose last offset is >= ``offset`` (header reads only)."""
        with self._lock:
            segments = list(self._segments)
        i = max(bisect.bisect_right([s.base_offset for s in segments], offset) - 1, 0)
        for seg in segments[i:]:
            start = 0
            if seg.base_offset <= offset:
                found = seg.translate_offset(offset)
                if found is None:
                    continue
                start = found[0]
            for pos, header in seg.iter_headers(start):
                yield seg, pos, header

    # ================================================================== properties
    @property
    def segments(self) -> list[LogSegment]:
        """The segments sorted by base offset (a copy)."""
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        with self._lock:
            self._high_watermark = min(max(value, self.log_start_offset), self._log_end_offset)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self.recovery_point

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._segments.insert(i, seg)
        self._bases.insert(i, seg.base_offset)

    def _segment_for(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (floor by base offset), or -1."""
        return bisect.bisect_right(self._bases, offset) - 1

    # ================================================================== append
    def append_as_leader(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        now_ms: int | None = None,
        assign_offsets: bool = True,
        reject_control_batches: bool = False,
    ) -> AppendInfo:
        """Validate, stamp and append exactly one client batch (see module docstring).

        ``reject_control_batches`` is set by the broker for client produce requests (Kafka's
        AppendOrigin.CLIENT): only the coordinator may write control batches.

        Hot path (brief, "Rules of the hot path" 1): with the C extension, the common case (an uncompressed
        CreateTime batch without producer id, on a topic keeping the producer's codec, that needs no roll) is
        one call, ``c_append_leader_fast``: it makes exactly the checks and updates of the steps below and
        returns None, having changed nothing, whenever anything else holds; those steps then take the batch.
        Below, ``c_validate_single_batch`` checks header and sizes and returns the header as a plain tuple;
        when it reports a failure (None) or is not built, the Python checks (:func:`validate_batch_tuple`,
        :func:`check_record_structure`) run and raise the exact error in their order.  The caller's bytes are
        never copied: baseOffset and partitionLeaderEpoch, outside the CRC, are written from a fresh 16-byte
        head with the rest of the caller's buffer in one ``writev`` (the C ``write_stamped``, else
        ``os.writev``; the broker passes a memoryview into its request frame).  Only a batch whose bytes under
        the CRC change (LogAppendTime, a LogAppendTime bit on a CreateTime topic, the topic's compression.type)
        is copied or rebuilt and re-checksummed.

        Late checks (uncompressed batches, with the C writer): the CRC-32C and the record walk run right after
        the write, while the bytes are still in the CPU cache from the write's copy into the page cache,
        instead of reading them from memory once more before it (measured 2-5% of the CPU time of an append,
        at 16 KiB and at 1 MiB).  The rules that keep this safe: header, sizes, client checks and timestamps
        are checked before the write; the late checks run inside the segment's append after the write and
        before the segment's size, indexes or max timestamp change; when one fails the ``.log`` is cut back
        to its previous size and the Python checks raise the exact error, so nothing of the batch remains.
        The log end offset, producer state, epoch cache and high watermark only move after the checks passed,
        and reads are bounded by the segment size and the LEO, so no reader can see the bytes meanwhile.  A
        crash in between leaves bytes past the recovery point whose CRC recovery checks (it truncates them).
        Whenever something else must happen first (a roll, a rewrite, decompression, an error to report),
        every check runs first instead, so the errors and their precedence are those of the check-first order;
        an idempotent batch's producer-state check, made before the write, runs the late checks first when its
        answer is an error or a duplicate, for the same precedence.  Compared with a CRC on a second thread overlapping the write, this costs no
        thread hand-off and no extra CPU time.
        """
        if _c_append_leader_fast is not None and assign_offsets and not self._no_fast_append:
            # the common case in one C call on the active segment's state (an uncompressed CreateTime batch
            # without producer id, no roll); None: nothing changed, the steps below take the batch
            info = self._append_fast(batch, leader_epoch, _now_ms() if now_ms is None else now_ms)
            if info is not None:
                return info
        prepared = self.validate_leader_batch(batch, now_ms=now_ms, reject_control_batches=reject_control_batches)
        return self.append_validated(prepared, leader_epoch=leader_epoch, assign_offsets=assign_offsets)

    def validate_leader_batch(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        now_ms: int | None = None,
        reject_control_batches: bool = False,
        check_all: bool = False,
    ) -> ValidatedBatch:
        """The first half of :meth:`append_as_leader`: every check of a client batch that needs no log state
        (Kafka's LogValidator: header, sizes, CRC, client checks, the record walk of the decompressed records,
        timestamps) and the rewrite for LogAppendTime or the topic's ``compression.type``. Takes no lock and
        changes nothing, so it may run on any thread, in parallel with appends and with other validations of
        the same log (the broker runs it on a worker thread for batches whose check is expensive, e.g.
        compressed ones). ``check_all``: no check is left to the writer (the late CRC and walk), so the caller
        knows the batch is valid once this returns. Raises the exact error, in Kafka's order."""
        config = self.config
        log_append = self._log_append_time
        c_check = _c_validate_single_batch
        # late: the CRC and the record walk are left to the C writer, right after its write (see above)
        late = c_check is not None and not check_all
        fields = None if c_check is None else c_check(batch, config.max_message_bytes, check_all, check_all)
        # with check_all, an uncompressed batch the C check passed has had its CRC and its record walk
        walked = fields is not None and check_all and not fields[5] & COMPRESSION_MASK
        if fields is None:  # the Python checks raise the exact error (or the extension is not in use)
            fields = validate_batch_tuple(batch, 0, config.max_message_bytes, check_crc=not late)
        (_, batch_length, _, _, _, attributes, last_delta, base_ts, max_ts, pid, _, base_seq, count) = fields
        size = batch_length + LOG_OVERHEAD
        if late and (
            attributes & (TIMESTAMP_TYPE_MASK | COMPRESSION_MASK)
            or self._no_fast_append  # LogAppendTime or the topic's codec: the batch is rewritten
            or size != len(batch)
        ):
            # a rewrite, decompression or an error come next: every check before, in their order
            check_batch_crc(batch, fields)
            late = False
        if size != len(batch):
            raise InvalidRecordError(
                f"a produce request may carry exactly one batch per partition; {len(batch) - size} "
                f"bytes follow the first batch"
            )
        # Kafka's LogValidator checks on a client batch, from the header only (see _validate_client_batch)
        if (
            (reject_control_batches and attributes & CONTROL_MASK)
            or count <= 0
            or count != last_delta + 1
            or (pid >= 0 and base_seq < 0 and not attributes & CONTROL_MASK)
            or (pid < 0 and attributes & TRANSACTIONAL_MASK)
        ):
            if late:
                check_batch_crc(batch, fields)
            self._validate_client_batch(BatchHeader(*fields), reject_control_batches)  # raises
        # Kafka's LogValidator walk of every record (decompressed, bounded): a batch no consumer could decode
        # never reaches the log
        if not late and not walked:
            check_record_structure(batch, 0, fields)
        now = _now_ms() if now_ms is None else now_ms
        if not log_append:
            low = now - config.message_timestamp_before_max_ms
            high = now + config.message_timestamp_after_max_ms
            if (base_ts != NO_TIMESTAMP and not low <= base_ts <= high) or (
                max_ts != NO_TIMESTAMP and not low <= max_ts <= high
            ):
                if late:
                    _check_late(batch, fields)
                self._check_create_time(BatchHeader(*fields), now)  # raises
        # bytes under the CRC change only for LogAppendTime (or to clear a client's LogAppendTime bit), or when
        # the topic's compression.type differs from the batch's codec (not for control batches, as in Kafka)
        copy = bytearray(batch) if log_append or attributes & TIMESTAMP_TYPE_MASK else None
        codec = self._recompress_to
        if codec is not None and attributes & COMPRESSION_MASK != codec and not attributes & CONTROL_MASK:
            copy = self._recompressed(batch, fields, codec)
            fields = parse_header_tuple(copy)
            batch_length, attributes, max_ts = fields[1], fields[5], fields[8]
            size = batch_length + LOG_OVERHEAD
            if size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"the batch is {size} bytes once stored with compression.type {config.compression_type}, "
                    f"larger than max.message.bytes {config.max_message_bytes}"
                )
        return ValidatedBatch(batch, fields, copy, late, now, log_append)

    def append_validated(
        self, validated: ValidatedBatch, *, leader_epoch: int = 0, assign_offsets: bool = True
    ) -> AppendInfo:
        """The second half of :meth:`append_as_leader`, under the log's lock: the producer-state check
        (duplicates, sequence numbers), offset assignment, the write and the bookkeeping. The broker calls the
        two halves for the same partition in the order its requests arrived."""
        batch, fields, copy, late, now, log_append = validated
        (_, batch_length, _, _, _, _, last_delta, _, max_ts, pid, _, _, count) = fields
        size = batch_length + LOG_OVERHEAD
        config = self.config
        with self._lock:
            if self._closed:
                self._ensure_open()
            ps = self.producer_state
            if ps is not None and pid >= 0:
                # the producer-state check answers before the write; a batch checked late is checked here first
                # whenever that answer is an error or a duplicate (Kafka validates records before producer state)
                try:
                    dup = ps.check(BatchHeader(*fields))
                except StorageError:
                    if late:
                        _check_late(batch, fields)
                    raise
                if dup is not None:
                    if late:
                        _check_late(batch, fields)
                    first, last, ts = dup
                    return AppendInfo(
                        first_offset=first,
                        last_offset=last,
                        max_timestamp=ts,
                        log_append_time=ts if log_append else NO_TIMESTAMP,
                        log_start_offset=self.log_start_offset,
                        duplicate=True,
                        record_count=count,
                        size=0,
                    )
            if assign_offsets:
                base = self._log_end_offset
            else:
                base = fields[0]
                if base < self._log_end_offset:
                    if late:
                        _check_late(batch, fields)
                    raise UnexpectedAppendOffsetError(
                        f"batch base offset {base} is below the log end offset {self._log_end_offset}"
                    )
            last_offset = base + last_delta
            if copy is not None:  # the rewritten bytes (never checked late) take the caller's place
                header = self._stamp(copy, BatchHeader(*fields), base, leader_epoch, now if log_append else None)
                max_ts = header.max_timestamp
                batch = copy
            # written with baseOffset and partitionLeaderEpoch replaced, the caller's buffer not copied; the roll
            # check, write, late checks and segment bookkeeping in one call
            written_at = self._segments[-1].append_leader_batch(
                batch, base, leader_epoch, last_offset, max_ts, config.segment_bytes, config.segment_ms, now, late
            )
            if written_at < 0:
                if late:  # the checks failed (the write was undone), or a roll comes first: a bad batch must
                    _check_late(batch, fields)  # not roll the log; raises the exact error
                if written_at == CHECK_FAILED:
                    raise CorruptRecordError(f"a batch for {self.topic}-{self.partition} failed its checks")
                self._append_after_roll(batch, base, leader_epoch, last_offset, max_ts, now)
            self._log_end_offset = last_offset + 1
            if ps is not None:
                if pid >= 0:
                    stamped = (base, batch_length, leader_epoch, *fields[3:])
                    ps.update(BatchHeader(*stamped), base, last_offset, max_ts)
                elif last_offset >= ps.map_end_offset:  # no producer: only the mapped range's end moves
                    ps.map_end_offset = last_offset + 1  # (ProducerStateManager.advance_map_end, inlined)
            cache = self.epoch_cache
            # a new epoch starts here; a plain read of the cache's newest epoch (it only changes under this
            # log's lock) instead of the locked latest_epoch() call on every append
            if cache is not None and leader_epoch >= 0 and (not cache._epochs or leader_epoch > cache._epochs[-1]):
                cache.assign(leader_epoch, base)
            info = AppendInfo(
                base, last_offset, max_ts, now if log_append else NO_TIMESTAMP, self.log_start_offset, False, count, size
            )
            flush_needed = self._log_end_offset - self.recovery_point >= config.flush_messages
        if flush_needed:
            self.flush()
        return info

    def _append_fast(
        self, batch: bytes | bytearray | memoryview, leader_epoch: int, now: int
    ) -> AppendInfo | None:
        """:meth:`append_as_leader`'s common case: the C ``append_leader_fast`` makes the checks, the write and the
        segment's bookkeeping on the active segment's state (see ``_segment.c``), given the log end offset and
        the limits; the log's own bookkeeping (log end offset, producer state's mapped range, epoch cache) is
        done here from what it returns, as the steps of :meth:`append_as_leader` do it.  None, having changed
        nothing, when those steps must take the batch."""
        with self._lock:
            if self._closed or not self._segments:
                return None
            base = self._log_end_offset
            done = _c_append_leader_fast(self._segments[-1]._st, batch, base, leader_epoch, now, self._fast_limits)
            if done is None:
                return None
            last_offset, max_ts, count, size = done
            self._log_end_offset = last_offset + 1
            ps = self.producer_state
            if ps is not None and last_offset >= ps.map_end_offset:  # no producer: only the mapped range's end
                ps.map_end_offset = last_offset + 1  # moves (ProducerStateManager.advance_map_end, inlined)
            cache = self.epoch_cache
            if cache is not None and leader_epoch >= 0 and (not cache._epochs or leader_epoch > cache._epochs[-1]):
                cache.assign(leader_epoch, base)
            info = AppendInfo(base, last_offset, max_ts, NO_TIMESTAMP, self.log_start_offset, False, count, size)
            flush_needed = last_offset + 1 - self.recovery_point >= self.config.flush_messages
        if flush_needed:
            self.flush()
        return info

    def _append_after_roll(
        self, batch: bytes | bytearray | memoryview, base: int, leader_epoch: int, last_offset: int, max_ts: int,
        now: int,
    ) -> None:
        """The rest of :meth:`append_as_leader` when the active segment asked to roll first (its CRC, if it
        was to be checked late, has been checked): roll, then append to the new, empty segment."""
        config = self.config
        seg = self.roll(base, now_ms=now)
        if seg.append_leader_batch(
            batch, base, leader_epoch, last_offset, max_ts, config.segment_bytes, config.segment_ms, now, False
        ) < 0:
            raise RuntimeError(f"the new segment {seg.log_path} refused the batch at offset {base}")

    def _apply_append_settings(self, config: LogConfig) -> None:
        """Settings every append reads, derived once per configuration."""
        self._log_append_time = config.log_append_time
        # the topic's compression.type: None keeps the producer's codec, else every batch is stored with this one
        ct = config.compression_type
        self._recompress_to = None if ct == "producer" else _CODECS[ct]
        # what the C fast path (uncompressed CreateTime batches only) must leave to the Python steps
        self._no_fast_append = self._log_append_time or self._recompress_to not in (None, CompressionType.NONE)
        # the limits it checks (segment_state.c_append_leader_fast's ``limits``)
        self._fast_limits = (
            config.max_message_bytes, config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms,
            config.segment_bytes, config.segment_ms,
        )

    def recompresses(self, codec: int) -> bool:
        """True when a client batch with compression ``codec`` is rebuilt with the topic's ``compression.type``
        (per-record work) before it is stored."""
        to = self._recompress_to
        return to is not None and codec != to

    @staticmethod
    def _recompressed(batch: bytes | bytearray | memoryview, fields: HeaderTuple, codec: int) -> bytearray:
        """The validated client batch rebuilt with the topic's codec (Kafka's LogValidator when compression.type
        is not ``producer`` and differs from the batch's): the same records, timestamps, headers, producer id,
        epoch, base sequence and transactional flag."""
        records = decode_records(batch, verify_crc=False)
        return bytearray(
            build_batch(
                records,
                compression=codec,
                producer_id=fields[9],
                producer_epoch=fields[10],
                base_sequence=fields[11],
                is_transactional=bool(fields[5] & TRANSACTIONAL_MASK),
                last_offset_delta=fields[6],
            )
        )

    @staticmethod
    def _validate_client_batch(header: BatchHeader, reject_control: bool) -> None:
        """Header-only checks Kafka's LogValidator makes on a client batch."""
        if reject_control and header.is_control:
            raise InvalidRecordError("clients are not allowed to write control records")
        if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"record count {header.records_count} does not match lastOffsetDelta {header.last_offset_delta}"
            )
        if header.producer_id >= 0 and header.base_sequence < 0 and not header.is_control:
            # Kafka allows baseSequence -1 on control batches (the coordinator's transaction markers)
            raise InvalidRecordError(f"producer {header.producer_id} sent a batch without a base sequence")
        if header.is_transactional and header.producer_id < 0:
            raise InvalidRecordError("a transactional batch must carry a producer id")

    def _check_create_time(self, header: BatchHeader, now: int) -> None:
        before = self.config.message_timestamp_before_max_ms
        after = self.config.message_timestamp_after_max_ms
        for ts in (header.base_timestamp, header.max_timestamp):
            if ts == NO_TIMESTAMP:
                continue
            if ts < now - before or ts > now + after:
                raise InvalidTimestampError(
                    f"timestamp {ts} of a batch is out of range for {self.topic}-{self.partition}: "
                    f"must be within [{now - before}, {now + after}] "
                    f"(message.timestamp.before.max.ms={before}, message.timestamp.after.max.ms={after})"
                )

    @staticmethod
    def _stamp(
        buf: bytearray, header: BatchHeader, base_offset: int, leader_epoch: int, log_append_time: int | None
    ) -> BatchHeader:
        header = rewrite_batch_for_append(
            buf,
            base_offset=base_offset,
            partition_leader_epoch=leader_epoch,
            log_append_time=log_append_time,
        )
        if log_append_time is None and header.timestamp_type == LOG_APPEND_TIME:
            # a CreateTime topic: clear a LogAppendTime bit the client set, as Kafka's setMaxTimestamp does
            ATTRIBUTES_FIELD.pack_into(buf, ATTRIBUTES_OFFSET, header.attributes & ~TIMESTAMP_TYPE_MASK)
            with memoryview(buf) as view:
                CRC_FIELD.pack_into(buf, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
            header = BatchHeader.parse(buf)
        return header

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> list[AppendInfo]:
        """Append replicated batches (offsets assigned by the leader); each must start at or after the LEO."""
        view = memoryview(batches)
        infos: list[AppendInfo] = []
        headers: list[tuple[int, BatchHeader]] = []
        pos = 0
        total = len(view)
        while pos < total:
            header = validate_batch(view, pos, None, total - pos)
            headers.append((pos, header))
            pos += header.size
        with self._lock:
            self._ensure_open()
            expected = self._log_end_offset
            for _, header in headers:
                if header.base_offset < expected:
                    raise UnexpectedAppendOffsetError(
                        f"follower batch base offset {header.base_offset} is below the expected {expected}"
                    )
                expected = header.next_offset
            now = _now_ms()
            for p, header in headers:
                data = view[p : p + header.size]
                self._maybe_roll(header, now)
                self._append_stamped(data, header)
                epoch = header.partition_leader_epoch
                if self.epoch_cache is not None and epoch >= 0:
                    latest = self.epoch_cache.latest_epoch()
                    if latest is None or epoch > latest:
                        self.epoch_cache.assign(epoch, header.base_offset)
                infos.append(
                    AppendInfo(
                        first_offset=header.base_offset,
                        last_offset=header.last_offset,
                        max_timestamp=header.max_timestamp,
                        log_append_time=header.max_timestamp
                        if header.timestamp_type == LOG_APPEND_TIME
                        else -1,
                        log_start_offset=self.log_start_offset,
                        record_count=header.records_count,
                        size=header.size,
                    )
                )
            flush_needed = self.unflushed_messages >= self.config.flush_messages
        if flush_needed:
            self.flush()
        return infos

    def _append_stamped(self, data: bytes | bytearray | memoryview, header: BatchHeader) -> None:
        """Write one stamped batch to the active segment and advance the LEO (lock held)."""
        seg = self._segments[-1]
        seg.append(header.last_offset, header.max_timestamp, header.last_offset, data)
        self._log_end_offset = header.next_offset
        if self.producer_state is not None:
            self.producer_state.update(header, header.base_offset, header.last_offset, header.max_timestamp)

    # ================================================================== roll
    def _maybe_roll(self, header: BatchHeader, now: int) -> None:
        seg = self._segments[-1]
        if seg.size == 0:
            return  # an empty active segment is never rolled; the batch goes into it
        config = self.config
        if seg._should_roll(
            config.segment_bytes, config.segment_ms, header.size, header.max_timestamp, header.last_offset, now
        ):
            self.roll(header.base_offset, now_ms=now)

    def roll(self, new_base_offset: int | None = None, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base_offset`` (default: the LEO)."""
        with self._lock:
            self._ensure_open()
            base = self._log_end_offset if new_base_offset is None else new_base_offset
            old = self._segments[-1]
            if base < self._log_end_offset:
                raise ValueError(f"cannot roll to {base}: below the log end offset {self._log_end_offset}")
            if old.base_offset == base:
                if old.size == 0:
                    return old
                raise ValueError(f"a segment with base offset {base} exists already")
            for stale in (
                log_file(self.dir, base),
                index_file(self.dir, base),
                time_index_file(self.dir, base),
            ):
                if stale.exists():
                    log.warning("deleting stale %s beyond the log end offset", stale)
                    stale.unlink()
            old.on_becoming_inactive()
            seg = LogSegment(self.dir, base, self.config, now_ms=now_ms)
            self._add_segment(seg)
            if self.producer_state is not None:
                self.producer_state.take_snapshot(base)
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(_background().submit(self.flush, base))
            return seg

    def wait_for_background_flushes(self, timeout: float | None = None) -> None:
        """Block until the flushes scheduled by rolls have finished (for shutdown and tests)."""
        with self._lock:
            pending = list(self._pending)
        for f in pending:
            f.result(timeout)

    # ================================================================== read
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadInfo:
        """Whole batches from the one holding ``offset`` (see module docstring); never decodes records."""
        with self._lock:
            self._ensure_open()
            lso, leo = self.log_start_offset, self._log_end_offset
            if offset < lso or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                    f"log start offset {lso}, log end offset {leo}"
                )
            segments = self._segments[max(self._segment_for(offset), 0) :]
            hw = self._high_watermark
        info = ReadInfo([], 0, -1, lso, leo, hw)
        if offset == leo or (max_offset is not None and max_offset <= offset):
            return info
        budget = max_bytes
        for seg in segments:
            try:
                region = seg.read(
                    offset,
                    budget,
                    min_one_batch=min_one_batch and not info.regions,
                    max_offset=max_offset,
                )
            except ValueError:  # segment closed by a concurrent truncation or deletion
                break
            if region is None:
                continue  # nothing at or after offset in this segment (e.g. a compaction gap)
            if region.length == 0:
                break
            if not info.regions:
                info.first_batch_offset = region.first_offset
            info.regions.append(region)
            info.size += region.length
            budget -= region.length
            if budget <= 0:
                break
            # the next segment starts where this one ended only if this segment was read to its end
            if region.position + region.length < seg.size:
                break
        return info

    # ================================================================== timestamps
    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or None."""
        with self._lock:
            segments = list(self._segments)
            lso = self.log_start_offset
        for seg in segments:
            if seg.max_timestamp_so_far < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, lso)
            if found is None:
                continue
            pos, header = found
            exact = self._record_at_or_after(seg, pos, header, lambda rec_ts, _o: rec_ts >= timestamp, lso)
            if exact is not None:
                return exact
        return None

    @staticmethod
    def _record_at_or_after(
        seg: LogSegment,
        pos: int,
        header: BatchHeader,
        predicate: Callable[[int, int], bool],
        min_offset: int,
    ) -> tuple[int, int] | None:
        """Decode only this batch and return (offset, timestamp) of its first matching record."""
        if header.attributes & COMPRESSION_MASK == 0:
            # uncompressed (the common case): walk the records' fixed prefixes, no Record objects
            return _scan_uncompressed_records(seg.read_batch(pos, header.size), header, predicate, min_offset)
        records = decode_records(seg.read_batch(pos, header.size))
        for rec in records:
            if rec.offset >= min_offset and predicate(rec.timestamp, rec.offset):
                return rec.offset, rec.timestamp
        return None

    def latest_timestamp(self) -> int:
        """The largest record timestamp in the log (-1 when none)."""
        with self._lock:
            segments = list(self._segments)
        return max((s.max_timestamp_so_far for s in segments), default=NO_TIMESTAMP)

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp (ListOffsets -3)."""
        with self._lock:
            segments = list(self._segments)
        best: LogSegment | None = None
        for seg in segments:
            if seg.max_timestamp_so_far >= 0 and (
                best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = seg
        if best is None:
            return None
        ts, shallow_offset = best.max_timestamp_and_offset
        _, pos = best.offset_index.lookup(shallow_offset)
        for p, header in best.iter_headers(pos):
            if header.max_timestamp == ts:
                return self._record_at_or_after(best, p, header, lambda rec_ts, _o: rec_ts == ts, 0)
        return None

    # ================================================================== truncation and retention hooks
    def truncate_to(self, target_offset: int) -> bool:
        """Follower truncation: remove every offset >= ``target_offset``.  Returns whether anything changed."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            self._ensure_open()
            if target_offset >= self._log_end_offset:
                return False
            if self._segments[0].base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            for seg in [s for s in self._segments if s.base_offset > target_offset]:
                seg.delete()
                self._segments.remove(seg)
            self._bases = [s.base_offset for s in self._segments]
            active = self._segments[-1]
            active.truncate_to(target_offset)
            self._log_end_offset = active.read_next_offset()
            self.log_start_offset = min(self.log_start_offset, self._log_end_offset)
            self.recovery_point = min(self.recovery_point, self._log_end_offset)
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            if self.epoch_cache is not None:
                self.epoch_cache.truncate_from_end(self._log_end_offset)
            if self.producer_state is not None:
                start = self.producer_state.truncate_and_reload(self.log_start_offset, self._log_end_offset)
                self._replay_producer_state(start)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset``."""
        with self._lock:
            self._ensure_open()
            self._replace_all_segments(new_offset, None)
            self._log_end_offset = new_offset
            self.log_start_offset = new_offset
            self.recovery_point = new_offset
            self._high_watermark = new_offset
            cache = self.epoch_cache
            if cache is not None:
                clear = getattr(cache, "clear_and_flush", None)
                if clear is not None:
                    clear()
                else:
                    cache.truncate_from_end(new_offset)
                    cache.truncate_from_start(new_offset)
            if self.producer_state is not None:
                self.producer_state.truncate_and_reload(new_offset, new_offset)

    def _replace_all_segments(self, new_offset: int, now: int | None) -> None:
        for seg in self._segments:
            seg.delete()
        self._segments = []
        self._bases = []
        self._add_segment(LogSegment(self.dir, new_offset, self.config, now_ms=now))
        self._log_end_offset = new_offset

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """Advance the log start offset (DeleteRecords, retention); never beyond the high watermark."""
        with self._lock:
            self._ensure_open()
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset to {new_log_start_offset} of "
                    f"{self.topic}-{self.partition}: it is larger than the high watermark {self._high_watermark}"
                )
            if new_log_start_offset <= self.log_start_offset:
                return False
            self.log_start_offset = new_log_start_offset
            if self.epoch_cache is not None:
                self.epoch_cache.truncate_from_start(new_log_start_offset)
            if self.producer_state is not None:
                self.producer_state.on_log_start(new_log_start_offset)
            return True

    def delete_segments_before(self, offset: int, *, now_ms: int | None = None) -> list[LogSegment]:
        """Remove the segments wholly below ``min(offset, high watermark)``.

        The removed segments are renamed ``.deleted`` and their files are removed later by
        :meth:`delete_expired_files` once ``file.delete.delay.ms`` has passed (Kafka's asynchronous delete).
        The active segment is rolled first if it would be removed too, so the log always has a segment.
        The log start offset moves to the first remaining segment's base if that is higher.
        """
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            self._ensure_open()
            limit = min(offset, self._high_watermark)
            doomed: list[LogSegment] = []
            for i, seg in enumerate(self._segments):
                is_last = i + 1 == len(self._segments)
                upper = self._log_end_offset if is_last else self._segments[i + 1].base_offset
                if upper > limit or (is_last and seg.size == 0):
                    break
                doomed.append(seg)
            if not doomed:
                return []
            if len(doomed) == len(self._segments):
                self.roll(now_ms=now)
            for seg in doomed:
                self._segments.remove(seg)
                seg.rename_suffix(DELETED_SUFFIX)
                self._deleted.append((now, seg))
            self._bases = [s.base_offset for s in self._segments]
            self.maybe_increment_log_start_offset(max(self.log_start_offset, self._segments[0].base_offset))
            return doomed

    def replace_segments(
        self,
        old: list[LogSegment],
        new: LogSegment,
        *,
        expected_sizes: list[int] | None = None,
        now_ms: int | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap the cleaned segment ``new`` (files named ``.cleaned``) in for the contiguous ``old`` segments.

        Crash-safe order (Kafka's ``LocalLog.replaceSegments``): ``new`` becomes ``.swap``; the segment list is replaced in one
        assignment; the old segments become ``.deleted`` (their files go after ``file.delete.delay.ms``; readers
        holding their regions keep valid descriptors); ``new`` gets its final names.  The loader finishes or
        undoes any prefix of these steps.  Returns False, changing nothing, when the old segments are no longer
        exactly as the caller read them (retention, truncation or a close happened meanwhile).
        ``fault(step)`` is a test hook called after each durable step.
        """
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed or not old:
                return False
            try:
                i = next(k for k, s in enumerate(self._segments) if s is old[0])
            except StopIteration:
                return False
            current = self._segments[i : i + len(old)]
            if len(current) != len(old) or any(a is not b for a, b in zip(current, old, strict=True)):
                return False
            if i + len(old) >= len(self._segments):  # the active segment is never replaced
                return False
            if expected_sizes is not None and [s.size for s in old] != list(expected_sizes):
                return False
            if new.base_offset != old[0].base_offset:
                raise ValueError(f"cleaned segment base {new.base_offset} != first old base {old[0].base_offset}")
            new.rename_suffix(SWAP_SUFFIX)
            fsync_dir(self.dir)
            if fault is not None:
                fault("swap")
            self._segments = self._segments[:i] + [new] + self._segments[i + len(old) :]
            self._bases = [s.base_offset for s in self._segments]
            for seg in old:
                seg.rename_suffix(DELETED_SUFFIX)
                self._deleted.append((now, seg))
            if fault is not None:
                fault("old-deleted")
            new.rename_suffix("")
            fsync_dir(self.dir)
            if fault is not None:
                fault("swapped")
            return True

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Delete the files of segments renamed ``.deleted`` at least ``file.delete.delay.ms`` ago."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            due = [(t, s) for t, s in self._deleted if now - t >= self.config.file_delete_delay_ms]
            self._deleted = [(t, s) for t, s in self._deleted if now - t < self.config.file_delete_delay_ms]
        for _, seg in due:
            seg.delete()
        return len(due)

    # ================================================================== flush, config, close
    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding offsets in [recovery point, up_to_offset) and advance the recovery point."""
        with self._lock:
            if self._closed:
                return
            target = self._log_end_offset if up_to_offset is None else min(up_to_offset, self._log_end_offset)
            if target <= self.recovery_point:
                return
            first = max(self._segment_for(self.recovery_point), 0)
            segments = [s for s in self._segments[first:] if s.base_offset < target]
        for seg in segments:  # outside the lock: fsync must not hold up appends
            seg.flush()
        with self._lock:
            if target > self.recovery_point:
                self.recovery_point = target
            self.last_flush_time = _now_ms()

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush (the manager's flusher calls this)."""
        now = _now_ms() if now_ms is None else now_ms
        if now - self.last_flush_time >= self.config.flush_ms and self.unflushed_messages > 0:
            self.flush()
            return True
        return False

    def update_config(self, config: LogConfig) -> None:
        """Apply a new configuration live; segment-level settings apply to segments created from now on."""
        with self._lock:
            self.config = config
            self._apply_append_settings(config)
            active = self._segments[-1]
            active.index_interval_bytes = config.index_interval_bytes

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.dir} is closed")

    def close(self) -> None:
        """Flush everything, write final time-index entries, trim indexes and release files."""
        self.wait_for_background_flushes()
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments:
                seg.close()
            for _, seg in self._deleted:
                seg.close_handlers()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_handlers()
            for _, seg in self._deleted:
                seg.close_handlers()
            self._segments = []
            self._bases = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, segments={len(self._segments)}, "
            f"log_start_offset={self.log_start_offset}, log_end_offset={self._log_end_offset})"
        )


__all__ = [
    "AppendInfo",
    "PartitionLog",
    "ReadInfo",
    "UnexpectedAppendOffsetError",
    "parse_topic_partition",
]
