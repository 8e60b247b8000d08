"""Transactions version 2 (KIP-890 part 2): an epoch bump per transaction, partitions added implicitly.

Facts from Kafka 4's ``TransactionCoordinator.endTransaction`` / ``TransactionMetadata`` (no code copied):

* **Which version a transaction uses** is decided per request, not per cluster: EndTxn v5 is transactions v2
  (EndTxn <= v4 keeps version 1 semantics, so older clients keep working), and so is AddPartitionsToTxn v5 from a
  broker with ``verify_only`` false (the implicit add). A client uses them only when ``transaction.version`` >= 2 is
  finalized (ApiVersions; :mod:`tidelog.broker.features`); the level is kept per broker here
  (:func:`finalized_level`), 2 unless UpdateFeatures lowered it.
* **EndTxn v5** in state Ongoing writes PrepareCommit/PrepareAbort with the epoch bumped by one (the old one kept as
  the last epoch) and ``ClientTransactionVersion`` 2; the markers carry the bumped epoch; the answer carries the
  producer id and epoch the client continues with. A bump from an exhausted epoch (>= 32766) first takes a new
  producer id (``NextProducerId``, written with the Prepare state): CompleteCommit/CompleteAbort then installs
  that id with epoch 0 and the answer gives it.
* **Epoch checks (v2).** Ongoing/Empty: the request's epoch must be the current one. PrepareCommit/PrepareAbort:
  only a retry of the EndTxn that bumped the epoch (its epoch is the current one minus one), answered
  CONCURRENT_TRANSACTIONS. CompleteCommit/CompleteAbort: a retry (or, after a producer id rotation, the previous id
  at epoch 32766) gets the answer it would have got (NONE with the current id and epoch; INVALID_TXN_STATE for the
  other result); the current epoch is a new transaction's: commit is INVALID_TXN_STATE, abort writes PrepareAbort
  with no partition and bumps the epoch (so does an abort in Empty). Anything else is PRODUCER_FENCED: so a delayed
  EndTxn of transaction N that reaches the coordinator once transaction N+1 began is fenced, where version 1 would
  apply it to N+1 (the torn transaction of Jepsen's Bufstream analysis).
* **The coordinator's own aborts** (a transaction timed out, a new producer's InitProducerId fencing the old one)
  run at the finalized level ("not from a client: the server's version"): at level 2 the fence bumps the epoch and
  the abort bumps it once more. ``__transaction_state`` values are written as v1 from level 1 on.
* **Implicit add** (:func:`add_partitions`): a partition leader receiving Produce v12 (or a group coordinator
  receiving TxnOffsetCommit v5) of a transactional producer whose transaction is not open on the partition adds
  the partition to the transaction at the coordinator: locally when this broker coordinates the id, otherwise
  with AddPartitionsToTxn v5 (``verify_only`` false), as Kafka's ``AddPartitionsToTxnManager``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from tidelog.broker.features import FinalizedFeatures
from tidelog.broker.txn.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)
from tidelog.errors import ErrorCode, error_code


class TransactionCoordinator(Protocol):
    """What the version-2 paths use of :class:`tidelog.broker.txn.coordinator.TransactionCoordinator` (a Protocol,
    so this module, which the coordinator imports, does not import it back)."""

    broker: Any
    request_timeout_ms: int

    def _check(self, transactional_id: str) -> ErrorCode | None: ...
    def _get(self, transactional_id: str) -> TransactionMetadata | None: ...
    def _coordinator_epoch(self, transactional_id: str) -> int: ...
    async def _new_producer_id(self) -> int: ...
    async def _apply(self, md: TransactionMetadata, transit: TxnTransit) -> ErrorCode | None: ...
    def _start_completion(self, md: TransactionMetadata, coordinator_epoch: int) -> None: ...
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition],
                             client_transaction_version: int = 0) -> ErrorCode | None: ...
    async def add_partitions_remote(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: list[TopicPartition], verify_only: bool) -> dict[TopicPartition, int]: ...

log = logging.getLogger("tidelog.broker.txn")

TV2 = 2
END_TXN_V2_VERSION = 5  # EndTxn v5: the client runs transactions v2
PRODUCE_V2_VERSION = 12  # Produce v12: partitions added implicitly (with transaction.version >= 2)
TXN_OFFSET_COMMIT_V2_VERSION = 5
TopicPartition = tuple[str, int]

# ------------------------------------------------------------------------------------------ the feature level


class FeatureHost(Protocol):
    """What the feature level is read from: the broker (its ``finalized_features``)."""

    @property
    def finalized_features(self) -> FinalizedFeatures: ...


def finalized_level(broker: FeatureHost) -> int:
    """The finalized ``transaction.version`` of ``broker`` (2 unless UpdateFeatures lowered it)."""
    return broker.finalized_features.transaction_version


def features_epoch(broker: FeatureHost) -> int:
    """``FinalizedFeaturesEpoch``: how many times this broker's finalized levels changed."""
    return broker.finalized_features.epoch


def set_finalized_level(broker: FeatureHost, level: int) -> None:
    features = broker.finalized_features
    if level != features.transaction_version:
        features.transaction_version, features.epoch = level, features.epoch + 1
        log.info("transaction.version finalized", extra={"kv": {"level": level}})


def log_value_version(broker: FeatureHost) -> int:
    """The ``__transaction_state`` value version Kafka writes at the finalized level (v1 from level 1 on)."""
    return 1 if finalized_level(broker) >= 1 else 0


def end_txn_version(api_version: int) -> int:
    """The transaction version an EndTxn of ``api_version`` runs (Kafka: v5+ is TV_2, else TV_0)."""
    return TV2 if api_version >= END_TXN_V2_VERSION else 0


def implicit_add(broker: Any, api_version: int, first_implicit_version: int) -> bool:
    """Does a Produce / TxnOffsetCommit of ``api_version`` add its partition to the transaction (v2)?"""
    return api_version >= first_implicit_version and finalized_level(broker) >= TV2


# ------------------------------------------------------------------------------------------ EndTxn v5


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def end_transaction(coord: TransactionCoordinator, transactional_id: str, producer_id: int,
                          producer_epoch: int, commit: bool) -> tuple[ErrorCode | None, int, int]:
    """EndTxn v5 (transactions v2). Returns (error name or None, producer id, producer epoch) of the answer."""
    fail = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    if not transactional_id:
        return (ErrorCode.INVALID_REQUEST, *fail)
    err = coord._check(transactional_id)
    if err:
        return (err, *fail)
    md = coord._get(transactional_id)
    if md is None:
        return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *fail)
    if md.pending_state is TxnState.PREPARE_EPOCH_FENCE:
        return (ErrorCode.CONCURRENT_TRANSACTIONS, *fail)  # the coordinator is aborting it (never seen between awaits)
    # a retry of the EndTxn that bumped the epoch, or of the one that moved the producer to a new id
    retry_bump = md.producer_epoch == producer_epoch + 1
    retry_overflow = (md.previous_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                      and md.producer_epoch == 0)
    retry = retry_bump or retry_overflow
    current = producer_epoch == md.producer_epoch
    state = md.state
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        valid = retry_bump
    elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        valid = retry or current
    else:  # Ongoing, Empty: the current epoch only
        valid = current
    if md.producer_id != producer_id and not retry_overflow:
        return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *fail)
    if not valid:
        return (ErrorCode.PRODUCER_FENCED, *fail)
    if md.pending_transition_in_progress:
        return (ErrorCode.CONCURRENT_TRANSACTIONS, *fail)
    # Kafka's table for Empty / CompleteAbort / CompleteCommit under version 2 (EB: a new PrepareAbort, the epoch
    # bumped, no partition: a v2 client may abort a transaction it never added a partition to)
    empty_abort = False
    if state is TxnState.COMPLETE_COMMIT:
        if commit:
            return (None, md.producer_id, md.producer_epoch) if retry else (ErrorCode.INVALID_TXN_STATE, *fail)
        if retry:
            return (ErrorCode.INVALID_TXN_STATE, *fail)
        empty_abort = True
    elif state is TxnState.COMPLETE_ABORT:
        if commit:
            return (ErrorCode.INVALID_TXN_STATE, *fail)
        if retry:
            return (None, md.producer_id, md.producer_epoch)
        empty_abort = True
    elif state is TxnState.EMPTY:
        if commit:
            return (ErrorCode.INVALID_TXN_STATE, *fail)
        empty_abort = True
    elif state is TxnState.PREPARE_COMMIT:
        return (ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE, *fail)
    elif state is TxnState.PREPARE_ABORT:
        return (ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE, *fail)
    elif state is not TxnState.ONGOING:
        return (ErrorCode.INVALID_TXN_STATE, *fail)
    next_pid = NO_PRODUCER_ID
    if md.is_producer_epoch_exhausted:  # the bump would exhaust the epoch: the producer moves to a new id
        try:
            next_pid = await coord._new_producer_id()
        except Exception as exc:
            log.warning("no producer id available", extra={"kv": {"error": repr(exc)}})
            return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, *fail)
        if coord._get(transactional_id) is not md or md.pending_transition_in_progress \
                or md.state is not state or md.producer_epoch != producer_epoch:
            return (ErrorCode.CONCURRENT_TRANSACTIONS, *fail)
    try:
        transit = md.prepare_abort_or_commit(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                                             _now_ms(), client_transaction_version=TV2, next_producer_id=next_pid,
                                             no_partition_added=empty_abort)
    except IllegalTransitionError:
        return (ErrorCode.CONCURRENT_TRANSACTIONS, *fail)
    err = await coord._apply(md, transit)
    if err:
        return (err, *fail)
    coord._start_completion(md, coord._coordinator_epoch(transactional_id))
    log.info("transaction prepared", extra={"kv": {
        "id": transactional_id, "producer_id": md.producer_id, "epoch": md.producer_epoch,
        "next_producer_id": md.next_producer_id, "result": "commit" if commit else "abort",
        "partitions": len(md.partitions), "by": "client", "transaction_version": TV2}})
    if md.next_producer_id != NO_PRODUCER_ID:
        return None, md.next_producer_id, 0  # the id and epoch CompleteCommit/CompleteAbort installs
    return None, md.producer_id, md.producer_epoch


# ------------------------------------------------------------------------------------------ implicit add


async def add_partitions(coord: TransactionCoordinator, transactional_id: str, producer_id: int,
                         producer_epoch: int, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Add ``partitions`` to the producer's transaction (transactions v2), at this broker's coordinator or at the
    id's coordinator elsewhere (AddPartitionsToTxn v5, ``verify_only`` false). An error code per partition."""
    if not transactional_id:
        return dict.fromkeys(partitions, ErrorCode.INVALID_REQUEST)
    err = coord._check(transactional_id)
    if err == ErrorCode.NOT_COORDINATOR:
        return await coord.add_partitions_remote(transactional_id, producer_id, producer_epoch, partitions,
                                                 verify_only=False)
    if err:
        return dict.fromkeys(partitions, error_code(err))
    added = await coord.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                       client_transaction_version=TV2)
    return dict.fromkeys(partitions, 0 if added is None else error_code(added))


