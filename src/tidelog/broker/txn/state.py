"""A transactional id's metadata and Kafka's transaction state machine (``TransactionState``,
``TransactionMetadata``, ``TxnTransitMetadata``; facts only).

A change is made in two steps, as in Kafka: ``prepare_*`` checks the transition against the state machine, marks
it *pending* (``pending_state``) and returns a :class:`TxnTransit` (the values to write); the coordinator writes
it to ``__transaction_state`` and, once the write is acknowledged, :meth:`TransactionMetadata.complete_transition`
applies it (or :meth:`TransactionMetadata.abort_transition` drops it when the write failed). While a transition is
pending, other requests for the id get CONCURRENT_TRANSACTIONS. Everything runs on the broker's event loop, so the
metadata needs no lock (Kafka's ``inLock``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tidelog.broker.txn.records import TxnLogValue
from tidelog.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TxnState(enum.Enum):
    """Kafka's states: (status byte, name shown by Describe/ListTransactions, expiration allowed)."""

    EMPTY = (0, "Empty", True)
    ONGOING = (1, "Ongoing", False)
    PREPARE_COMMIT = (2, "PrepareCommit", False)
    PREPARE_ABORT = (3, "PrepareAbort", False)
    COMPLETE_COMMIT = (4, "CompleteCommit", True)
    COMPLETE_ABORT = (5, "CompleteAbort", True)
    DEAD = (6, "Dead", False)
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence", False)

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @property
    def expiration_allowed(self) -> bool:
        return self.value[2]

    @property
    def valid_previous(self) -> frozenset[TxnState]:
        return _VALID_PREVIOUS[self]

    @classmethod
    def from_id(cls, status: int) -> TxnState:
        try:
            return _BY_ID[status]
        except KeyError:
            raise ValueError(f"unknown transaction state id {status}") from None

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


S = TxnState
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_BY_ID = {s.id: s for s in TxnState}
_BY_NAME = {s.state_name: s for s in TxnState}


class IllegalTransitionError(RuntimeError):
    """A transition the state machine does not allow (a coordinator bug, never a client's error)."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: the epoch cannot be bumped once more (>= Short.MaxValue - 1)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The metadata a pending transition will install (Kafka's ``TxnTransitMetadata``)."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = 0  # 2: the client's transaction uses transactions v2 (KIP-890 part 2)

    def log_value(self) -> TxnLogValue:
        parts: dict[str, list[int]] = {}
        for topic, p in sorted(self.partitions):
            parts.setdefault(topic, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.txn_timeout_ms, self.state.id, parts,
                           self.txn_last_update_timestamp, self.txn_start_timestamp, self.previous_producer_id,
                           self.next_producer_id, self.client_transaction_version)


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    txn_timeout_ms: int
    state: TxnState = TxnState.EMPTY
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TxnState | None = None
    has_failed_epoch_fence: bool = False
    client_transaction_version: int = 0  # of the last transition written (Kafka's clientTransactionVersion)

    @classmethod
    def from_log(cls, transactional_id: str, v: TxnLogValue) -> TransactionMetadata:
        state = TxnState.from_id(v.status)
        parts = set() if state is TxnState.EMPTY else {(t, p) for t, ids in v.partitions.items() for p in ids}
        return cls(transactional_id, v.producer_id, v.transaction_timeout_ms, state, v.producer_epoch,
                   NO_PRODUCER_EPOCH, v.previous_producer_id, v.next_producer_id, parts, v.start_timestamp_ms,
                   v.last_update_timestamp_ms, client_transaction_version=v.client_transaction_version)

    # -- queries ---------------------------------------------------------------------------------------------

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def remove_partition(self, tp: tuple[str, int]) -> None:
        """A marker reached ``tp`` (Kafka's ``removePartition``; only while preparing a commit or abort)."""
        self.partitions.discard(tp)

    # -- transitions -----------------------------------------------------------------------------------------

    def _prepare(self, state: TxnState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: set[tuple[str, int]] | frozenset[tuple[str, int]], start: int, update: int,
                 previous_producer_id: int | None = None, next_producer_id: int | None = None,
                 client_transaction_version: int | None = None) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: cannot prepare {state.state_name} while {self.pending_state.state_name} "
                "is pending")
        if self.state not in state.valid_previous:
            raise IllegalTransitionError(
                f"{self.transactional_id}: invalid transition {self.state.state_name} -> {state.state_name}")
        self.pending_state = state
        return TxnTransit(producer_id, self.previous_producer_id if previous_producer_id is None else previous_producer_id,
                          self.next_producer_id if next_producer_id is None else next_producer_id, epoch, last_epoch,
                          timeout_ms, state, frozenset(partitions), start, update,
                          self.client_transaction_version if client_transaction_version is None
                          else client_transaction_version)

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TxnTransit | ErrorCode:
        """InitProducerId for an id in Empty/CompleteCommit/CompleteAbort: the epoch bumped (or, for a retry of a
        bump whose answer was lost, kept). Returns the transit or the error name PRODUCER_FENCED."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(f"{self.transactional_id}: epoch {self.producer_epoch} exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare(TxnState.EMPTY, self.producer_id, epoch, last, timeout_ms, set(), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransit:
        """The epoch is exhausted: a new producer id with epoch 0 (the old id becomes the previous one)."""
        if self.partitions:
            raise IllegalTransitionError(f"{self.transactional_id}: producer id rotation with a pending transaction")
        return self._prepare(TxnState.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH, timeout_ms, set(), -1,
                             now_ms, previous_producer_id=self.producer_id)

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """Ongoing transaction to be aborted by the coordinator (a new producer's InitProducerId, or the timeout):
        the epoch is bumped (once: not again after a failed fence) so the old producer is fenced. Never written
        itself; the abort that follows writes PrepareAbort with this epoch."""
        if self.producer_epoch == MAX_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence producer at epoch {MAX_EPOCH}")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(TxnState.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
                             self.txn_timeout_ms, self.partitions, self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int,
                               client_transaction_version: int | None = None) -> TxnTransit:
        """``client_transaction_version``: 2 when the partitions come from a transactions-v2 client (added implicitly
        by Produce v12 / TxnOffsetCommit v5), 0 from AddPartitionsToTxn / AddOffsetsToTxn; None keeps the current."""
        new_txn = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        start = now_ms if new_txn else self.txn_start_timestamp
        version = client_transaction_version
        if version is None or (not new_txn and self.client_transaction_version >= 2):
            version = self.client_transaction_version  # a v2 transaction stays v2 until it ends
        return self._prepare(TxnState.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, self.partitions | added, start, now_ms,
                             client_transaction_version=version)

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int, client_transaction_version: int | None = None,
                                next_producer_id: int = NO_PRODUCER_ID, no_partition_added: bool = False
                                ) -> TxnTransit:
        """Kafka's ``prepareAbortOrCommit``: with transactions v2 (``client_transaction_version`` 2) the epoch is
        bumped (the previous one kept as the last epoch) and ``next_producer_id`` is the id the producer moves
        to when the bump exhausts the epoch (else -1); before v2 the epochs stay. ``no_partition_added``: a v2 abort
        from Empty/Complete* (no partition), whose start time is ``now_ms``."""
        version = self.client_transaction_version if client_transaction_version is None \
            else client_transaction_version
        if version >= 2 and self.producer_epoch < MAX_EPOCH:  # (a coordinator's fence may already be at the max)
            return self._prepare(state, self.producer_id, self.producer_epoch + 1, self.producer_epoch,
                                 self.txn_timeout_ms, self.partitions,
                                 now_ms if no_partition_added else self.txn_start_timestamp, now_ms,
                                 next_producer_id=next_producer_id, client_transaction_version=version)
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, self.partitions, self.txn_start_timestamp, now_ms,
                             client_transaction_version=version)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Kafka's ``prepareComplete``: with transactions v2 and an exhausted epoch, the producer moves to
        ``next_producer_id`` with epoch 0 (the old id becomes the previous one)."""
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the epoch bump was written with the Prepare state
        if self.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            # the last epoch stays 32766, the last the client saw (32767 is internal to Prepare and the markers)
            return self._prepare(state, self.next_producer_id, 0, self.last_producer_epoch, self.txn_timeout_ms, set(),
                                 self.txn_start_timestamp, now_ms, previous_producer_id=self.producer_id,
                                 next_producer_id=NO_PRODUCER_ID)
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, set(), self.txn_start_timestamp, now_ms,
                             next_producer_id=NO_PRODUCER_ID)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(TxnState.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, set(), self.txn_start_timestamp, self.txn_last_update_timestamp)

    def complete_transition(self, t: TxnTransit) -> None:
        """The transit was written: install it (Kafka's ``completeTransitionTo``)."""
        if self.pending_state is not t.state:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {t.state.state_name} but pending is "
                f"{self.pending_state.state_name if self.pending_state else None}")
        if self.state not in t.state.valid_previous:
            raise IllegalTransitionError(
                f"{self.transactional_id}: invalid transition {self.state.state_name} -> {t.state.state_name}")
        self.producer_id = t.producer_id
        self.previous_producer_id = t.previous_producer_id
        self.next_producer_id = t.next_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.partitions = set(t.partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.client_transaction_version = t.client_transaction_version
        self.state = t.state
        self.pending_state = None

    def abort_transition(self) -> None:
        """The write of the pending transit failed: nothing changes (Kafka resets ``pendingState``)."""
        self.pending_state = None
