"""Idempotent-producer bookkeeping for one partition (Kafka's ``ProducerStateManager``).

Per producer id the manager keeps the current producer epoch, the metadata of the last
:data:`NUM_BATCHES_TO_RETAIN` (5) batches (for duplicate detection), the last timestamp (for
expiration) and the first offset of an ongoing transaction.

Flow on the leader's produce path::

    dup = state.check(header)          # raises on fencing / out-of-order; returns original offsets of a duplicate
    if dup is None:
        ... append the batch at [first, last] ...
        state.update(header, first, last, max_timestamp)

Validation rules follow Kafka 2.5+ (KIP-360; ``ProducerAppendInfo.checkProducerEpoch/checkSequence``):

* an epoch lower than the producer's current epoch -> :class:`InvalidProducerEpochError`;
* a batch of a *new* epoch must start at sequence 0, else :class:`OutOfOrderSequenceError`;
* a batch whose (first, last) sequence and epoch equal one of the retained batches is a duplicate:
  ``check`` returns that batch's ``(first_offset, last_offset, timestamp)`` and nothing is written;
  unless it is transactional and the retained batch's transaction has ended at this partition (no open
  transaction, or the batch lies before the open one's first offset): then the client reused a sequence, and the
  batch is refused with :class:`InvalidTxnStateError` (a difference from Kafka, decision 0072);
* otherwise the first sequence must be ``last_seq + 1`` (``Integer.MAX_VALUE`` wraps to 0), else
  :class:`OutOfOrderSequenceError`;
* an *unknown* producer id (never seen, expired, or removed with its data by retention) is accepted at
  any sequence, as in Kafka since 2.5 — Kafka no longer answers UNKNOWN_PRODUCER_ID from the log.

Transactions (Kafka's ongoing-transaction bookkeeping): a transactional batch of a producer without an open
transaction opens one at its first offset (``ongoing``, ordered by first offset); an end-txn marker (control
batch) completes it (:meth:`ProducerStateManager.update` returns a :class:`CompletedTxn`; the log writes the
``.txnindex`` entry of an abort with :meth:`ProducerStateManager.last_stable_offset_of`, then calls
:meth:`ProducerStateManager.complete_txn`).  A completed transaction stays "unreplicated" until the high
watermark passes its marker (:meth:`ProducerStateManager.on_high_watermark_updated`): until then it still holds
the first unstable offset back, so a read_committed consumer never reads past a marker that could be lost.
A marker for a producer without an open transaction completes nothing (Kafka: no ``CompletedTxn`` for an empty
transaction).

Snapshots: ``<20-digit offset>.snapshot``, ProducerSnapshot v1 (layout in :mod:`tidelog.storage.format`).
Only each producer's last batch is stored, so after a reload a producer retains one batch until it
appends more (as in Kafka).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tidelog.records.crc import crc32c
from tidelog.records.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from tidelog.storage.checkpoints import atomic_write
from tidelog.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    StorageError,
    TransactionCoordinatorFencedError,
)
from tidelog.storage.format import (
    PRODUCER_ENTRIES_OFFSET,
    PRODUCER_SNAPSHOT_ENTRY,
    PRODUCER_SNAPSHOT_ENTRY_SIZE,
    PRODUCER_SNAPSHOT_HEADER,
    PRODUCER_SNAPSHOT_SUFFIX,
    PRODUCER_SNAPSHOT_VERSION,
    VERSION_OFFSET,
)

NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshotError(StorageError):
    """A producer snapshot fails its version, size or CRC check."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{PRODUCER_SNAPSHOT_SUFFIX}"


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Sequence arithmetic modulo 2**31 (Kafka's ``DefaultRecordBatch.decrementSequence``)."""
    if sequence - decrement < 0:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is retained of one appended batch."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=deque)
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        while len(self.batches) > NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.last_timestamp = timestamp

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker at ``last_offset`` (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class TxnMetadata:
    """An ongoing (or completed but not yet replicated) transaction (Kafka's ``TxnMetadata``)."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


# ----------------------------------------------------------------------------------------- snapshot codec


def encode_snapshot(entries: list[ProducerStateEntry]) -> bytes:
    body = bytearray(PRODUCER_SNAPSHOT_HEADER.size + PRODUCER_SNAPSHOT_ENTRY_SIZE * len(entries))
    pos = PRODUCER_SNAPSHOT_HEADER.size
    for e in entries:
        PRODUCER_SNAPSHOT_ENTRY.pack_into(
            body,
            pos,
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
        pos += PRODUCER_SNAPSHOT_ENTRY_SIZE
    PRODUCER_SNAPSHOT_HEADER.pack_into(body, VERSION_OFFSET, PRODUCER_SNAPSHOT_VERSION, 0, len(entries))
    crc = crc32c(memoryview(body)[PRODUCER_ENTRIES_OFFSET:])
    PRODUCER_SNAPSHOT_HEADER.pack_into(body, VERSION_OFFSET, PRODUCER_SNAPSHOT_VERSION, crc, len(entries))
    return bytes(body)


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[ProducerStateEntry]:
    if len(data) < PRODUCER_SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes is too short for a producer snapshot")
    version, crc, count = PRODUCER_SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{name}: unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[PRODUCER_ENTRIES_OFFSET:])
    if computed != crc:
        raise CorruptSnapshotError(f"{name}: stored CRC {crc:#010x} != computed {computed:#010x}")
    if count < 0 or len(data) != PRODUCER_SNAPSHOT_HEADER.size + count * PRODUCER_SNAPSHOT_ENTRY_SIZE:
        raise CorruptSnapshotError(f"{name}: {count} entries do not match the file size {len(data)}")
    entries = []
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first = PRODUCER_SNAPSHOT_ENTRY.unpack_from(
            data, PRODUCER_SNAPSHOT_HEADER.size + i * PRODUCER_SNAPSHOT_ENTRY_SIZE
        )
        entry = ProducerStateEntry(pid, epoch, deque(), coord, ts, None if txn_first < 0 else txn_first)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        entries.append(entry)
    return entries


# ------------------------------------------------------------------------------------------------ manager


class ProducerStateManager:
    """Producer state of one partition directory. Thread-safe (one internal lock)."""

    def __init__(self, dir: Path) -> None:
        self.dir = Path(dir)
        self._producers: dict[int, ProducerStateEntry] = {}
        self._lock = threading.RLock()
        #: open transactions by first offset (Kafka's ``ongoingTxns``)
        self._ongoing: dict[int, TxnMetadata] = {}
        #: completed transactions whose marker the high watermark has not passed (Kafka's ``unreplicatedTxns``)
        self._unreplicated: dict[int, TxnMetadata] = {}
        #: every batch below this offset is reflected in the state (Kafka's ``mapEndOffset``)
        self.map_end_offset = 0
        #: KIP-890 verification guards, producer id -> guard (Kafka's ``verificationStates``), see
        #: :meth:`start_verification`
        self._verifications: dict[int, object] = {}

    # ----------------------------------------------------------------------------------- validation

    def check(self, header: BatchHeader) -> tuple[int, int, int] | None:
        """Validate a batch a client wants to append. Returns ``(first_offset, last_offset, timestamp)``
        of the original append when the batch is a duplicate of one of the retained batches, else None.
        Raises :class:`InvalidProducerEpochError` or :class:`OutOfOrderSequenceError`."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID or pid < 0:
            return None
        with self._lock:
            entry = self._producers.get(pid)
            if entry is None:
                return None  # unknown producer: any sequence is accepted (Kafka >= 2.5)
            epoch = header.producer_epoch
            if not header.is_control and header.base_sequence != NO_SEQUENCE:
                batches = entry.batches
                if epoch == entry.producer_epoch and batches and _in_sequence(batches[-1].last_seq,
                                                                               header.base_sequence):
                    # the common case, the next batch in sequence: it starts after every retained batch, so it
                    # duplicates none of them (the few retained batches span far less than the 2**31 wrap)
                    if entry.current_txn_first_offset is not None and not header.is_transactional:
                        self._check_txn_state(entry, header)
                    return None
                dup = entry.find_duplicate(epoch, header.base_sequence, header.last_sequence)
                if dup is not None:
                    if header.is_transactional:
                        self._check_not_ended(entry, dup, header)
                    return dup.first_offset, dup.last_offset, dup.timestamp
            if epoch < entry.producer_epoch:
                raise InvalidProducerEpochError(
                    f"epoch of producer {pid} is {epoch}, which is smaller than the last seen epoch "
                    f"{entry.producer_epoch}"
                )
            if header.is_control:
                return None
            first_seq = header.base_sequence
            if first_seq != NO_SEQUENCE:
                if epoch != entry.producer_epoch:
                    if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                        raise OutOfOrderSequenceError(
                            f"invalid sequence number for new epoch {epoch} of producer {pid}: {first_seq} "
                            f"(expected 0; current epoch {entry.producer_epoch})"
                        )
                elif entry.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
                    raise OutOfOrderSequenceError(
                        f"out of order sequence number for producer {pid}: {first_seq} (incoming), "
                        f"{entry.last_seq} (current end sequence number)"
                    )
            self._check_txn_state(entry, header)
            return None

    def start_verification(self, producer_id: int) -> object:
        """KIP-890 part 1: the broker is about to ask the transaction coordinator whether a transactional batch of
        ``producer_id`` (which has no open transaction here) belongs to its transaction. Returns the guard to pass
        to :meth:`check_verification` at the append (Kafka's ``VerificationGuard``); a marker or the transaction's
        first batch clears it, so a batch verified before its transaction ended is refused rather than opening a
        transaction the coordinator no longer knows (a hanging transaction)."""
        with self._lock:
            guard = self._verifications.get(producer_id)
            if guard is None:
                guard = self._verifications[producer_id] = object()
            return guard

    def clear_verification(self, producer_id: int) -> None:
        with self._lock:
            self._verifications.pop(producer_id, None)

    def check_verification(self, producer_id: int, guard: object) -> None:
        """Before a verified transactional batch is appended: unless the producer's transaction is open here (the
        batch joins it), ``guard`` must still be the producer's live guard, else :class:`InvalidTxnStateError`."""
        with self._lock:
            entry = self._producers.get(producer_id)
            if entry is not None and entry.current_txn_first_offset is not None:
                return
            if self._verifications.get(producer_id) is not guard:
                raise InvalidTxnStateError(
                    f"the transactional batch of producer {producer_id} was not verified in an ongoing transaction "
                    "(its transaction ended between the verification and the append)"
                )

    @staticmethod
    def _check_not_ended(entry: ProducerStateEntry, dup: BatchMetadata, header: BatchHeader) -> None:
        """A transactional batch with the (epoch, first, last sequence) of a retained batch is a retry only when
        that batch belongs to the producer's transaction still open here. A retained batch of a transaction that
        already ended at this partition (no open transaction, or the batch lies before the open one's first
        offset) cannot be retried any more (a client ends a transaction only once its writes are answered): the
        client reused the sequence of a write it took as not persisted (librdkafka purges a message queued for a
        retry at ``abort_transaction`` and gives its sequence to the next one, without an epoch bump). Answering
        the old offsets would acknowledge a write that is never appended (docs/RELIABILITY.md, bug 9), so it is
        refused with INVALID_TXN_STATE, an abortable error for librdkafka and the Java client (decision 0072;
        Kafka answers the old offsets)."""
        first = entry.current_txn_first_offset
        if first is None or dup.first_offset < first:
            where = "no open transaction" if first is None else f"an open transaction from offset {first}"
            raise InvalidTxnStateError(
                f"transactional batch of producer {entry.producer_id} epoch {header.producer_epoch} with sequences "
                f"{header.base_sequence}..{header.last_sequence} repeats the batch at offsets "
                f"{dup.first_offset}..{dup.last_offset}, whose transaction has ended here ({where}): the sequence "
                "was reused, not retried"
            )

    @staticmethod
    def _check_txn_state(entry: ProducerStateEntry, header: BatchHeader) -> None:
        """Kafka's ProducerAppendInfo: a plain batch while the producer has an open transaction is refused."""
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {entry.producer_id}: it has an open transaction "
                f"from offset {entry.current_txn_first_offset}"
            )

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's checks of an end-txn marker written by the coordinator (``appendEndTxnMarker``): its epoch
        must not be below the producer's (:class:`InvalidProducerEpochError`), its coordinator epoch not below
        the one of the producer's last marker (:class:`TransactionCoordinatorFencedError`)."""
        with self._lock:
            entry = self._producers.get(producer_id)
            if entry is None:
                return
            if producer_epoch < entry.producer_epoch:
                raise InvalidProducerEpochError(
                    f"epoch of producer {producer_id} in the transaction marker is {producer_epoch}, which is "
                    f"smaller than the last seen epoch {entry.producer_epoch}"
                )
            if coordinator_epoch < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"invalid coordinator epoch for producer {producer_id}: {coordinator_epoch} (zombie), "
                    f"{entry.coordinator_epoch} (current)"
                )

    # ---------------------------------------------------------------------------------------- update

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        coordinator_epoch: int | None = None,
        abort: bool | None = None,
    ) -> CompletedTxn | None:
        """Record an appended (or replayed) batch. Any batch may be passed: batches without a producer id
        only advance :attr:`map_end_offset`. A control batch ends the producer's ongoing transaction
        (``coordinator_epoch`` and ``abort`` are the marker's, decoded by the caller); when one was open, the
        :class:`CompletedTxn` is returned, and the caller must write the ``.txnindex`` entry of an abort and
        then call :meth:`complete_txn`. ``timestamp`` is the batch's max timestamp as appended (the append time
        for LogAppendTime)."""
        completed = None
        with self._lock:
            pid = header.producer_id
            if pid >= 0:
                entry = self._producers.get(pid)
                if entry is None:
                    entry = ProducerStateEntry(pid, header.producer_epoch)
                    self._producers[pid] = entry
                if header.is_control:
                    self._verifications.pop(pid, None)  # a batch verified before this marker is refused
                    if header.producer_epoch != entry.producer_epoch:  # maybeUpdateProducerEpoch
                        entry.batches.clear()
                        entry.producer_epoch = header.producer_epoch
                    first = entry.current_txn_first_offset
                    if first is not None:
                        completed = CompletedTxn(pid, first, last_offset, bool(abort))
                    entry.current_txn_first_offset = None
                    entry.last_timestamp = timestamp
                    if coordinator_epoch is not None:
                        entry.coordinator_epoch = coordinator_epoch
                else:
                    if header.base_sequence != NO_SEQUENCE:
                        entry.add_batch(
                            header.producer_epoch,
                            header.last_sequence,
                            last_offset,
                            last_offset - first_offset,
                            timestamp,
                        )
                    else:
                        if header.producer_epoch != entry.producer_epoch:
                            entry.batches.clear()
                            entry.producer_epoch = header.producer_epoch
                        entry.last_timestamp = timestamp
                    if header.is_transactional and entry.current_txn_first_offset is None:
                        entry.current_txn_first_offset = first_offset
                        self._ongoing[first_offset] = TxnMetadata(pid, first_offset)
                        self._verifications.pop(pid, None)  # used: the transaction is open here now
            self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        return completed

    # ---------------------------------------------------------------------------------- transactions

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is complete (for its ``.txnindex`` entry; Kafka's
        ``lastStableOffset(CompletedTxn)``): the first offset of the oldest other open transaction, else the
        offset after the marker."""
        with self._lock:
            for first in sorted(self._ongoing):
                if self._ongoing[first].producer_id != completed.producer_id:
                    return first
            return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The marker of ``completed`` is in the log: the transaction is decided, but keeps the LSO back until
        the high watermark passes the marker (Kafka's ``completeTxn``)."""
        with self._lock:
            md = self._ongoing.pop(completed.first_offset, None)
            if md is None:
                md = TxnMetadata(completed.producer_id, completed.first_offset)
            md.last_offset = completed.last_offset
            self._unreplicated[completed.first_offset] = md

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below ``high_watermark`` no longer hold the LSO back."""
        if not self._unreplicated:
            return
        with self._lock:
            done = [f for f, md in self._unreplicated.items() if md.last_offset is None or md.last_offset < high_watermark]
            for f in done:
                del self._unreplicated[f]

    @property
    def has_unstable(self) -> bool:
        """Whether any transaction is open or completed but unreplicated (a plain read, for the hot path)."""
        return bool(self._ongoing) or bool(self._unreplicated)

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest open transaction (Kafka's ``firstUndecidedOffset``)."""
        with self._lock:
            return min(self._ongoing) if self._ongoing else None

    def has_open_transaction(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has an open transaction here (one lookup; the produce path asks per batch)."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        with self._lock:
            return {md.producer_id: first for first, md in sorted(self._ongoing.items())}

    def advance_map_end(self, end_offset: int) -> None:
        """A batch without a producer id was appended up to ``end_offset`` (exclusive): the same as
        :meth:`update` for such a batch, without building its header (the produce hot path)."""
        if end_offset > self.map_end_offset:
            self.map_end_offset = end_offset

    # --------------------------------------------------------------------------------------- queries

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        with self._lock:
            entry = self._producers.get(producer_id)
            return entry.copy() if entry is not None else None

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """A copy of every producer's state (for DescribeProducers)."""
        with self._lock:
            return {pid: e.copy() for pid, e in self._producers.items()}

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an open or an unreplicated completed transaction, if any (Kafka's
        ``firstUnstableOffset``)."""
        if not self._ongoing and not self._unreplicated:
            return None
        with self._lock:
            firsts = [*self._ongoing, *self._unreplicated]
            return min(firsts) if firsts else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._producers)

    # ------------------------------------------------------------------------------------ retention

    def expire(self, now_ms: int, producer_id_expiration_ms: int) -> list[int]:
        """Forget producers without an ongoing transaction whose last timestamp is at least
        ``producer_id_expiration_ms`` old (``producer.id.expiration.ms``). Returns the expired ids."""
        with self._lock:
            expired = [
                pid
                for pid, e in self._producers.items()
                if e.current_txn_first_offset is None
                and now_ms - e.last_timestamp >= producer_id_expiration_ms
            ]
            for pid in expired:
                del self._producers[pid]
                self._verifications.pop(pid, None)
            return expired

    def on_log_start(self, offset: int) -> None:
        """The log start offset moved to ``offset`` (retention / DeleteRecords): forget producers whose
        last batch is below it (their data is gone) unless a transaction is open, and advance
        :attr:`map_end_offset` if it is behind."""
        with self._lock:
            self._drop_below(offset)
            if self._unreplicated:
                for f in [f for f, md in self._unreplicated.items() if (md.last_offset or 0) < offset]:
                    del self._unreplicated[f]
            if self.map_end_offset < offset:
                self.map_end_offset = offset

    def _drop_below(self, offset: int) -> None:
        gone = [
            pid
            for pid, e in self._producers.items()
            if e.last_data_offset < offset and e.current_txn_first_offset is None
        ]
        for pid in gone:
            del self._producers[pid]

    # ------------------------------------------------------------------------------------- snapshots

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / snapshot_file_name(offset)

    def _snapshot_files(self) -> Iterator[tuple[int, Path]]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        for name in names:
            m = _SNAPSHOT_NAME.match(name)
            if m:
                yield int(m.group(1)), self.dir / name

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        return sorted(offset for offset, _ in self._snapshot_files())

    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def take_snapshot(self, offset: int | None = None) -> Path:
        """Write the current state to ``<offset>.snapshot`` (default: :attr:`map_end_offset`) atomically.
        Kafka takes one at every segment roll, at the new segment's base offset."""
        with self._lock:
            at = self.map_end_offset if offset is None else offset
            data = encode_snapshot(sorted(self._producers.values(), key=lambda e: e.producer_id))
            path = self.snapshot_path(at)
            atomic_write(path, data)
            return path

    def read_snapshot(self, offset: int) -> list[ProducerStateEntry]:
        path = self.snapshot_path(offset)
        return decode_snapshot(path.read_bytes(), str(path))

    def delete_snapshots_below(self, offset: int) -> None:
        for snap_offset, path in list(self._snapshot_files()):
            if snap_offset < offset:
                path.unlink(missing_ok=True)

    def delete_snapshots_above(self, offset: int) -> None:
        for snap_offset, path in list(self._snapshot_files()):
            if snap_offset > offset:
                path.unlink(missing_ok=True)

    def load(self, log_start_offset: int, log_end_offset: int, max_snapshot_offset: int | None = None) -> int:
        """Rebuild the state from the newest valid snapshot at or below ``log_end_offset`` (and at or below
        ``max_snapshot_offset`` if given: recovery replays the segments it rebuilds).

        Snapshots above the log end are deleted, corrupt ones are deleted and skipped, producers whose
        last offset lies below ``log_start_offset`` are dropped. Returns the offset from which the caller
        must replay the log's batches through :meth:`update` (the snapshot offset, or
        ``log_start_offset`` when no snapshot is usable).
        """
        with self._lock:
            self._producers.clear()
            self._ongoing.clear()
            self._unreplicated.clear()
            for stray in self.dir.glob("*" + PRODUCER_SNAPSHOT_SUFFIX + ".tmp") if self.dir.is_dir() else []:
                stray.unlink(missing_ok=True)
            self.delete_snapshots_above(log_end_offset)
            replay_from = log_start_offset
            for offset in reversed(self.snapshot_offsets()):
                if max_snapshot_offset is not None and (offset > max_snapshot_offset or offset < log_start_offset):
                    continue  # recovery: a snapshot from before retention would miss the markers since
                try:
                    entries = self.read_snapshot(offset)
                except CorruptSnapshotError:
                    self.snapshot_path(offset).unlink(missing_ok=True)
                    continue
                for entry in entries:
                    self._producers[entry.producer_id] = entry
                    first = entry.current_txn_first_offset
                    if first is not None:  # an open transaction (Kafka's loadProducerEntry)
                        self._ongoing[first] = TxnMetadata(entry.producer_id, first)
                self._ongoing = dict(sorted(self._ongoing.items()))
                replay_from = max(offset, log_start_offset)
                break
            self._drop_below(log_start_offset)
            self.map_end_offset = replay_from
            return replay_from

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log was emptied and starts at ``offset``: forget everything, delete every snapshot (Kafka's
        ``truncateFullyAndStartAt``)."""
        with self._lock:
            self._producers.clear()
            self._ongoing.clear()
            self._unreplicated.clear()
            self.delete_snapshots_above(-1)
            self.map_end_offset = offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> int:
        """After the log was truncated (or its start moved): drop snapshots outside the log and, unless
        the state already ends exactly at ``log_end_offset``, reload from the newest valid snapshot.
        Returns the offset from which batches must be replayed through :meth:`update`."""
        with self._lock:
            self.delete_snapshots_above(log_end_offset)
            if log_end_offset != self.map_end_offset:
                return self.load(log_start_offset, log_end_offset)
            self.on_log_start(log_start_offset)
            return self.map_end_offset
