"""Kafka's ``UnifiedLog``: the log of one partition directory ``<topic>-<partition>``, the facade over its parts:
appends (leader and follower), validation, producer state, leader epochs, transactions, high watermark. What is done
to the directory and its segments as files (reads, rolls, truncation, retention hooks, flush, close) is its base
class :class:`~.local_log.LocalLog` (Kafka's ``LocalLog``), in :mod:`.local_log`.

The parts: :mod:`.validator` (Kafka's LogValidator: the checks and rewrites of a client batch),
:mod:`.loader` (Kafka's LogLoader: load and recovery at open), :mod:`.segments` (Kafka's LogSegments: the
ordered segments, lookups, the new segment of a roll).  Hot paths never decode records: an append
validates the batch from its header plus one CRC, stamps baseOffset and partitionLeaderEpoch (both outside the
CRC) into a fresh 16-byte head and writes it with the rest of the caller's bytes in one ``writev``
(no copy; see :meth:`PartitionLog.append_as_leader`); a read returns :class:`FileRegion` views for
``os.sendfile``.
Nothing on the append or read path calls fsync: that happens in :meth:`flush`, :meth:`flush_if_due`,
:meth:`close`, on a background thread after a roll, or on append only when the topic asks for it through
``flush.messages``.

Thread safety: one re-entrant lock guards the segment list and the offsets; fsync runs outside it.

I/O errors (Kafka's ``LocalLog.maybeHandleIOException``): an ``OSError`` from a write, flush, roll, truncation or
read is handed to ``on_io_error`` (the LogManager's log-dir failure channel, which takes the whole directory
offline, or read-only when it is the broker's last) and raised as :class:`KafkaStorageError`. From then on the log
refuses every write (``failed``) and, when its directory is offline (``offline``), every read, with
KAFKA_STORAGE_ERROR. A failed write changes nothing: the segment cuts its file back and the log end offset, indexes
and producer state only move after the write succeeded, so nothing that did not reach the file is acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import ErrorCode
from tidelog.records.batch import ControlRecordType, build_control_batch
from tidelog.records.errors import CorruptRecordError
from tidelog.records.header import (
    ATTRIBUTES_LOW_OFFSET,
    BATCH_HEADER,
    CONTROL_MASK,
    H_BASE_OFFSET,
    H_PRODUCER_ID,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    PRODUCER_ID_HIGH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
    BatchHeader,
    validate_batch,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import KafkaStorageError, StorageError
from tidelog.storage.log.loader import (
    LogLoader,
    complete_transaction,
    end_txn_marker_of,
)
from tidelog.storage.log.local_log import (  # ReadInfo, parse_topic_partition: in __all__, importable from here too
    LocalLog,
    ReadInfo,
    _io,
    _now_ms,
    parse_topic_partition,
)
from tidelog.storage.log.validator import LogValidator, ValidatedBatch, check_late, stamp_batch
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.segment import CHECK_FAILED, LogSegment
from tidelog.storage.segment_state import c_append_follower_run as _c_append_follower_run
from tidelog.storage.segment_state import c_append_leader_fast as _c_append_leader_fast
from tidelog.storage.segment_state import c_check_follower_batches as _c_check_follower_batches
from tidelog.storage.txn_index import AbortedTxn


class UnexpectedAppendOffsetError(StorageError):
    """A follower batch starts below the log end offset (Kafka's UnexpectedAppendOffsetException)."""

    kafka_error = ErrorCode.UNKNOWN_SERVER_ERROR


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


class PartitionLog(LocalLog):
    """The log of one partition (see module docstring): Kafka's ``UnifiedLog`` over :class:`LocalLog`."""

    # bound per configuration to the methods of this log's LogValidator (see _apply_append_settings)
    validate_leader_batch: Callable[..., ValidatedBatch]
    recompresses: Callable[[int], bool]

    def __init__(self, directory: Path, config: LogConfig) -> None:
        # use PartitionLog.open(); the constructor only sets fields
        super().__init__(directory, config)
        self._apply_append_settings(config)

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
        epoch_cache: LeaderEpochCache | None = None,
        producer_state: ProducerStateManager | None = None,
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
        loaded = LogLoader(
            directory, config, self._segments, epoch_cache=epoch_cache, producer_state=producer_state, now_ms=now
        ).load(recovery_point, log_start_offset, clean_shutdown, progress)
        self.log_start_offset = loaded.log_start_offset
        self._log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.recovered_segments = loaded.recovered_segments
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self.log_start_offset), self._log_end_offset)
        if producer_state is not None:
            producer_state.on_high_watermark_updated(self._high_watermark)
        return self

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        with self._lock:
            self._high_watermark = hw = min(max(value, self.log_start_offset), self._log_end_offset)
            ps = self.producer_state
            if ps is not None and ps._unreplicated:  # completed transactions whose marker the HW now covers
                ps.on_high_watermark_updated(hw)

    # ================================================================== transactions
    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, high watermark) (Kafka's ``UnifiedLog.lastStableOffset``); the HW itself,
        with one attribute test, for a partition with no open or unreplicated transaction."""
        ps = self.producer_state
        hw = self._high_watermark
        if ps is None or not (ps._ongoing or ps._unreplicated):
            return hw
        first = self.first_unstable_offset()
        return hw if first is None else min(first, hw)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open (or completed, marker not yet below the HW) transaction, never
        below the log start offset (Kafka's ``firstUnstableOffset``); None without one."""
        ps = self.producer_state
        if ps is None:
            return None
        first = ps.first_unstable_offset()
        return None if first is None else max(first, self.log_start_offset)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction on this partition."""
        ps = self.producer_state
        return {} if ps is None else ps.ongoing_transactions()

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), from the ``.txnindex`` of the
        segment holding ``start_offset`` on, until an entry's LSO reaches the upper bound (Kafka's
        ``LocalLog.collectAbortedTransactions``)."""
        if self._no_aborted_txns:
            return []
        with self._lock:
            segments = self._segments.from_offset(start_offset)
            everything = len(segments) == len(self._segments)
        out: list[AbortedTxn] = []
        seen = False
        for seg in segments:
            index = seg.txn_index
            if index.is_empty:
                continue
            found, complete = index.collect(start_offset, upper_bound_offset)
            seen = seen or bool(index.entries)
            out.extend(found)
            if complete:
                break
        else:
            if everything and not seen:
                with self._lock:
                    if all(seg.txn_index.is_empty for seg in self._segments):
                        self._no_aborted_txns = True
        return out

    @_io("write")
    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        leader_epoch: int = 0,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append an end-txn marker (a control batch as Kafka's ``MemoryRecords.withEndTransactionMarker``) for
        ``producer_id`` and end its open transaction here; an abort gets its ``.txnindex`` entry.  Raises
        InvalidProducerEpochError (epoch below the producer's) or TransactionCoordinatorFencedError (coordinator
        epoch below the producer's last marker's), changing nothing.  A marker for a producer with no open
        transaction is written too (Kafka does), and completes nothing."""
        now = _now_ms() if now_ms is None else now_ms
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = build_control_batch(kind, producer_id, producer_epoch, coordinator_epoch, 0, now)
        prepared = self.validate_leader_batch(batch, now_ms=now)
        with self._lock:
            ps = self.producer_state
            if ps is not None:
                ps.check_marker(producer_id, producer_epoch, coordinator_epoch)
            return self.append_validated(
                prepared, leader_epoch=leader_epoch, _marker=(not commit, coordinator_epoch)
            )
    # ================================================================== append
    def append_as_leader(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        now_ms: int | None = None,
        assign_offsets: bool = True,
        reject_control_batches: bool = False,
        coordinator_origin: bool = False,
        verification_guard: object | None = None,
    ) -> AppendInfo:
        """Validate, stamp and append exactly one client batch (see module docstring).

        ``reject_control_batches`` is set by the broker for client produce requests (Kafka's
        AppendOrigin.CLIENT): only the coordinator may write control batches. ``coordinator_origin`` is set by
        the group coordinator for its transactional offset batches (AppendOrigin.COORDINATOR): a producer id
        without a base sequence is accepted (the producer state then checks the epoch only, no sequence).

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
        try:
            if _c_append_leader_fast is not None and assign_offsets and not self._no_fast_append:
                # the common case in one C call on the active segment's state (an uncompressed CreateTime batch
                # without producer id or an idempotent one, no roll); None: nothing changed, the steps below take
                # the batch
                info = self._append_fast(batch, leader_epoch, _now_ms() if now_ms is None else now_ms)
                if info is not None:
                    return info
            prepared = self.validate_leader_batch(
                batch, now_ms=now_ms, reject_control_batches=reject_control_batches,
                coordinator_origin=coordinator_origin)
            return self.append_validated(prepared, leader_epoch=leader_epoch, assign_offsets=assign_offsets,
                                         verification_guard=verification_guard)
        except OSError as exc:  # the directory failed (no cost on the path where nothing is raised)
            raise self.io_error(exc, "append") from exc

    def append_validated(
        self, validated: ValidatedBatch, *, leader_epoch: int = 0, assign_offsets: bool = True,
        _marker: tuple[bool, int] | None = None, verification_guard: object | None = None,
    ) -> AppendInfo:
        """The second half of :meth:`append_as_leader`, under the log's lock: the producer-state check
        (duplicates, sequence numbers), offset assignment, the write and the bookkeeping. The broker calls the
        two halves for the same partition in the order its requests arrived.

        ``verification_guard`` (the broker, for a transactional batch when KIP-890 verification is on): what
        :meth:`ProducerStateManager.start_verification` returned before the coordinator verified the batch (any
        other object when it was not verified because the transaction was open here then); unless the
        producer's transaction is still open here, it must still be live (:meth:`check_verification`)."""
        try:
            batch, fields, copy, late, now, log_append, _ = validated
            (_, batch_length, _, _, _, _, last_delta, _, max_ts, pid, _, _, count) = fields
            size = batch_length + LOG_OVERHEAD
            config = self.config
            with self._lock:
                if self._closed or self.failed is not None:
                    self._ensure_writable()
                ps = self.producer_state
                if ps is not None and pid >= 0:
                    # the producer-state check answers before the write; a batch checked late is checked here first
                    # whenever that answer is an error or a duplicate (Kafka validates records before producer state)
                    try:
                        dup = ps.check(BatchHeader(*fields))
                        if verification_guard is not None and dup is None:
                            ps.check_verification(pid, verification_guard)
                    except StorageError:
                        if late:
                            check_late(batch, fields)
                        raise
                    if dup is not None:
                        if late:
                            check_late(batch, fields)
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
                    base = fields[H_BASE_OFFSET]
                    if base < self._log_end_offset:
                        if late:
                            check_late(batch, fields)
                        raise UnexpectedAppendOffsetError(
                            f"batch base offset {base} is below the log end offset {self._log_end_offset}"
                        )
                last_offset = base + last_delta
                if copy is not None:  # the rewritten bytes (never checked late) take the caller's place
                    header = stamp_batch(copy, BatchHeader(*fields), base, leader_epoch, now if log_append else None)
                    max_ts = header.max_timestamp
                    batch = copy
                # written with baseOffset and partitionLeaderEpoch replaced, the caller's buffer not copied; the roll
                # check, write, late checks and segment bookkeeping in one call
                active = self._segments.active
                assert active is not None  # an open log always has an active segment
                written_at = active.append_leader_batch(
                    batch, base, leader_epoch, last_offset, max_ts, config.segment_bytes, config.segment_ms, now, late
                )
                if written_at < 0:
                    if late:  # the checks failed (the write was undone), or a roll comes first: a bad batch must
                        check_late(batch, fields)  # not roll the log; raises the exact error
                    if written_at == CHECK_FAILED:
                        raise CorruptRecordError(f"a batch for {self.topic}-{self.partition} failed its checks")
                    self._append_after_roll(batch, base, leader_epoch, last_offset, max_ts, now)
                self._log_end_offset = last_offset + 1
                if ps is not None:
                    if pid >= 0:
                        stamped = BatchHeader(base, batch_length, leader_epoch, *fields[3:])
                        if stamped.is_control:
                            marker = _marker if _marker is not None else end_txn_marker_of(batch)
                            abort, coordinator_epoch = marker if marker is not None else (None, None)
                            completed = ps.update(stamped, base, last_offset, max_ts, coordinator_epoch, abort)
                            if completed is not None:
                                complete_transaction(ps, completed, self._segments.active)
                                self._no_aborted_txns = False
                        else:
                            ps.update(stamped, base, last_offset, max_ts)
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
        except OSError as exc:  # the directory failed (a try costs nothing when nothing is raised)
            raise self.io_error(exc, "append") from exc

    def _append_fast(
        self, batch: bytes | bytearray | memoryview, leader_epoch: int, now: int
    ) -> AppendInfo | None:
        """:meth:`append_as_leader`'s common case: the C ``append_leader_fast`` makes the checks, the write and the
        segment's bookkeeping on the active segment's state (see ``_segment_leader.c``), given the log end offset and
        the limits; the log's own bookkeeping (log end offset, producer state's mapped range, epoch cache) is
        done here from what it returns, as the steps of :meth:`append_as_leader` do it.  None, having changed
        nothing, when those steps must take the batch.

        An idempotent batch (a producer id and a base sequence, not transactional, not control) is taken too when
        the producer state says it is the producer's next batch (``check`` answers None, made before the write
        as :meth:`append_validated` makes it); its producer state is updated after the write. A duplicate, a
        sequence or epoch error, or any bail of the C call leaves it to the Python steps, which answer exactly as
        before (issue 18: idempotent produce had no fast path)."""
        append_fast = _c_append_leader_fast
        if append_fast is None:  # no C extension: append_as_leader does not come here
            return None
        with self._lock:
            active = self._segments.active
            if self._closed or active is None:
                return None
            base = self._log_end_offset
            ps = self.producer_state
            header = None
            if (
                len(batch) >= RECORD_BATCH_OVERHEAD
                and batch[PRODUCER_ID_HIGH_OFFSET] < 0x80
                and not batch[ATTRIBUTES_LOW_OFFSET] & (TRANSACTIONAL_MASK | CONTROL_MASK)
            ):
                # an idempotent batch (a producer id, neither transactional nor control): its producer-state check
                # first, as append_validated makes it before the write; anything but "the next batch in sequence"
                # (an error, a duplicate) goes the Python way, which gives the exact answer in Kafka's order; so
                # does a batch without a base sequence (refused, unless the group coordinator wrote it)
                header = BatchHeader(*BATCH_HEADER.unpack_from(batch, 0))
                if header.base_sequence < 0:
                    return None
                if ps is not None:
                    try:
                        if ps.check(header) is not None:
                            return None
                    except StorageError:
                        return None
                done = append_fast(active._st, batch, base, leader_epoch, now, self._fast_limits, True)
            else:
                done = append_fast(active._st, batch, base, leader_epoch, now, self._fast_limits)
            if done is None:
                return None
            last_offset, max_ts, count, size = done
            self._log_end_offset = last_offset + 1
            if header is not None and ps is not None:
                # the producer's new batch, as append_validated records it (update reads the producer fields and
                # attributes, which stamping the base offset and leader epoch does not change)
                ps.update(header, base, last_offset, max_ts)
            elif ps is not None and last_offset >= ps.map_end_offset:  # no producer: only the mapped range's end
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
        """Settings every append reads, derived once per configuration: a new :class:`LogValidator`, whose
        ``validate_leader_batch`` becomes this log's (bound directly, no call layer in between), and the two
        values the C fast path reads."""
        validator = LogValidator(config, f"{self.topic}-{self.partition}")
        self.validator = validator
        self.validate_leader_batch = validator.validate_leader_batch
        self.recompresses = validator.recompresses
        # what the C fast path (uncompressed CreateTime batches only) must leave to the Python steps
        self._no_fast_append = validator.no_fast_append
        # the limits it checks (segment_state.c_append_leader_fast's ``limits``)
        self._fast_limits = validator.fast_limits

    @_io("write")
    def append_as_follower(
        self, batches: bytes | bytearray | memoryview, *, infos: bool = True
    ) -> list[AppendInfo]:
        """Append replicated batches (offsets assigned by the leader); each must start at or after the LEO.
        Every batch is checked (sizes, CRC, offsets) before the first is written: a bad one appends nothing.

        With the C extension (issue 30) the batches take the C path (:meth:`_append_follower_fast`): one check
        of the whole buffer, then runs of batches written as they are, one write per run, with the segment's
        bookkeeping in C. Without ``infos`` (the replica fetcher) no :class:`AppendInfo` is built and ``[]`` is
        returned; no Python object is made per batch then, except the headers of batches with a producer id."""
        view = memoryview(batches)
        if _c_check_follower_batches is not None and view.c_contiguous and view.itemsize == 1:
            fast = self._append_follower_fast(view, infos)
            if fast is not None:
                return fast
        return self._append_follower_slow(view, infos)

    def _append_follower_fast(self, view: memoryview, want_infos: bool) -> list[AppendInfo] | None:
        """:meth:`append_as_follower` on the C path. None (nothing written) when the buffer fails its checks:
        the Python path then raises the exact error. Rolls, disk reservations and an empty active segment take
        one batch the Python way (:meth:`_append_one_follower`), the C runs the rest; the result is the same as
        :meth:`_append_follower_slow`'s, batch for batch (tests/storage/test_follower_append_c.py)."""
        assert _c_check_follower_batches is not None and _c_append_follower_run is not None
        infos: list[AppendInfo] = []
        with self._lock:
            self._ensure_open()
            if _c_check_follower_batches(view, self._log_end_offset) < 0:
                return None
            total = len(view)
            pos = 0
            now = _now_ms()
            config = self.config
            cache = self.epoch_cache
            ps = self.producer_state
            headers: list[tuple[int, tuple[int, ...]]] = []
            epochs: list[tuple[int, int]] = []
            while pos < total:
                latest = -1
                if cache is not None:
                    latest_or_none = cache.latest_epoch()
                    latest = -1 if latest_or_none is None else latest_or_none
                active = self._segments.active
                assert active is not None  # an open log always has an active segment
                consumed, last, _ = _c_append_follower_run(
                    active._st, view, pos, now, config.segment_bytes, config.segment_ms, latest, headers,
                    want_infos, epochs,
                )
                if not consumed:  # a roll, a reservation, an empty segment: one batch the Python way
                    header = BatchHeader(*BATCH_HEADER.unpack_from(view, pos))
                    info = self._append_one_follower(view[pos : pos + header.size], header, now)
                    if want_infos:
                        infos.append(info)
                    pos += header.size
                    continue
                self._log_end_offset = last + 1
                if cache is not None:
                    for epoch, base in epochs:
                        cache.assign(epoch, base)
                for p, fields in headers:
                    header = BatchHeader(*fields)
                    if ps is not None and fields[H_PRODUCER_ID] >= 0:
                        self._update_producer_state(view[p : p + header.size], header, active)
                    if want_infos:
                        infos.append(self._follower_info(header))
                if ps is not None and last >= ps.map_end_offset:  # batches without a producer id only move
                    ps.map_end_offset = last + 1  # the mapped range's end (ProducerStateManager.update's rule)
                headers.clear()
                epochs.clear()
                pos += consumed
            flush_needed = self.unflushed_messages >= config.flush_messages
        if flush_needed:
            self.flush()
        return infos

    def _follower_info(self, header: BatchHeader) -> AppendInfo:
        return AppendInfo(
            first_offset=header.base_offset,
            last_offset=header.last_offset,
            max_timestamp=header.max_timestamp,
            log_append_time=header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else -1,
            log_start_offset=self.log_start_offset,
            record_count=header.records_count,
            size=header.size,
        )

    def _append_one_follower(self, data: memoryview, header: BatchHeader, now: int) -> AppendInfo:
        """One checked follower batch the Python way: the roll, the write, producer state, epoch cache."""
        self._maybe_roll(header, now)
        self._append_stamped(data, header)
        epoch = header.partition_leader_epoch
        if self.epoch_cache is not None and epoch >= 0:
            latest = self.epoch_cache.latest_epoch()
            if latest is None or epoch > latest:
                self.epoch_cache.assign(epoch, header.base_offset)
        return self._follower_info(header)

    def _append_follower_slow(self, view: memoryview, want_infos: bool) -> list[AppendInfo]:
        """:meth:`append_as_follower` in Python: every header checked, then batch by batch."""
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
                info = self._append_one_follower(view[p : p + header.size], header, now)
                if want_infos:
                    infos.append(info)
            flush_needed = self.unflushed_messages >= self.config.flush_messages
        if flush_needed:
            self.flush()
        return infos

    def _append_stamped(self, data: bytes | bytearray | memoryview, header: BatchHeader) -> None:
        """Write one stamped batch to the active segment and advance the LEO (lock held)."""
        seg = self._segments.active
        assert seg is not None  # an open log always has an active segment
        seg.append(header.last_offset, header.max_timestamp, header.last_offset, data)
        self._log_end_offset = header.next_offset
        if self.producer_state is not None:
            self._update_producer_state(data, header, seg)

    def _update_producer_state(
        self, data: bytes | bytearray | memoryview, header: BatchHeader, seg: LogSegment
    ) -> None:
        """A written follower batch in the producer state (lock held): a marker ends its transaction (the
        ``.txnindex`` entry of an abort goes to ``seg``, the segment it was written to), as on the leader."""
        ps = self.producer_state
        assert ps is not None
        if header.producer_id >= 0 and header.is_control:  # a marker: the same producer state as the leader's
            marker = end_txn_marker_of(data)
            completed = ps.update(
                header, header.base_offset, header.last_offset, header.max_timestamp,
                None if marker is None else marker[1], None if marker is None else marker[0],
            )
            if completed is not None:
                complete_transaction(ps, completed, seg)
                self._no_aborted_txns = False
        else:
            ps.update(header, header.base_offset, header.last_offset, header.max_timestamp)

    def update_config(self, config: LogConfig) -> None:
        """Apply a new configuration live; segment-level settings apply to segments created from now on."""
        with self._lock:
            self.config = config
            self._apply_append_settings(config)
            active = self._segments.active
            assert active is not None  # an open log always has an active segment
            active.index_interval_bytes = config.index_interval_bytes

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, segments={len(self._segments)}, "
            f"log_start_offset={self.log_start_offset}, log_end_offset={self._log_end_offset})"
        )


__all__ = [
    "AppendInfo",
    "KafkaStorageError",
    "PartitionLog",
    "ReadInfo",
    "UnexpectedAppendOffsetError",
    "parse_topic_partition",
]
