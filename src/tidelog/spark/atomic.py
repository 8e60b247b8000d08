"""Atomic micro-batches for the exactly-once ``tidelog`` sink (``exactlyOnce=true``, ``atomicBatches=true``).

A two-phase commit over Kafka transactions, as Flink's ``KafkaSink`` does it, with the raw producer
(:mod:`tidelog.spark.producer`) speaking the protocol on both sides:

* **task** (:func:`write_atomic`): InitProducerId with ``<prefix>-<partition>`` (fences earlier attempts), produces
  its rows, flushes, commits the batch id as the offset of the group ``<prefix>-<partition>`` on
  ``<markerTopic>``-0 inside the transaction (AddOffsetsToTxn + TxnOffsetCommit) and does **not** end the
  transaction: it reports ``(transactional id, producer id, epoch, partitions)`` in its commit message;
* **driver** ``commit`` (:func:`commit_batch`): first writes the *decision*, a plain OffsetCommit of the group
  ``<prefix>-commit`` on ``<markerTopic>``-0 with the batch id as offset and the tasks' producer ids and epochs as
  metadata; then sends EndTxn COMMIT with each task's transactional id, producer id and epoch (any client knowing
  the three may end a transaction: the coordinator checks the id and epoch, not the connection), retried across
  coordinator moves, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS;
* **driver** ``abort`` (:func:`abort_batch`): EndTxn ABORT for the transactions reported, fencing for the tasks
  that reported nothing; nothing is aborted once the decision of this batch is written (the replay finishes it);
* **replay** of a batch id (driver restarted from its checkpoint): a task whose marker already says this batch
  writes nothing; a task whose marker does not, but whose batch has a decision, finishes the transaction the
  decision names (EndTxn COMMIT with the recorded producer id and epoch, before its own InitProducerId would abort
  it) and then writes nothing; if that transaction is gone (aborted by ``transaction.timeout.ms``), the task
  writes its partition again. The design and its windows are in docs/SPARK.md ("Atomic micro-batches").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from tidelog.protocol.api_keys import ApiKey
from tidelog.spark.producer import DeliveryError, RawProducer

__all__ = ["AtomicCommit", "TxnClient", "abort_batch", "commit_batch", "decision_group", "write_atomic"]

log = logging.getLogger("tidelog.spark.sink")

MARKER_PARTITION = 0
MAX_OFFSET_COMMIT_VERSION = 7  # v8+ only add KIP-848's member epochs
MAX_DESCRIBE_TRANSACTIONS_VERSION = 0
DECISION_SUFFIX = "-commit"
DEFAULT_ATOMIC_TXN_TIMEOUT_MS = 300_000
"""``transaction.timeout.ms`` when atomic and not given: a transaction spans the whole micro-batch (from a task's
first record to the driver's EndTxn), not one task; Kafka's broker caps it at ``transaction.max.timeout.ms``
(15 min)."""
METADATA_BUDGET = 4000
"""Kafka's ``offset.metadata.max.bytes`` is 4096: a decision naming more transactions than fit leaves them out
(the replay then asks the coordinator, DescribeTransactions, instead)."""
ENDED_ELSEWHERE = ("PRODUCER_FENCED", "INVALID_PRODUCER_ID_MAPPING", "INVALID_TXN_STATE", "INVALID_PRODUCER_EPOCH")
"""EndTxn COMMIT of a recorded transaction answered with these: it is no longer open with that epoch (aborted by
the timeout or fenced); the partition must be written again."""


@dataclass
class AtomicCommit(WriterCommitMessage):
    """What an atomic task did (pickled back to the driver): ``skipped`` = already committed (or finished from an
    earlier decision); otherwise its transaction is open, to be ended by the driver."""

    transactional_id: str
    batch_id: int
    records: int
    skipped: bool
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: list[tuple[str, int]] = field(default_factory=list)


def decision_group(prefix: str) -> str:
    return prefix + DECISION_SUFFIX


def prefix_of(transactional_id: str) -> str:
    return transactional_id.rsplit("-", 1)[0]


class TxnClient(RawProducer):
    """A raw client that ends, describes and decides transactions of other processes' transactional ids."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(conf, transactional_id=None)
        self.coordinators: dict[str, int] = {}

    def _as(self, tid: str, pid: int, epoch: int) -> None:
        self.tid = tid
        self.producer_id, self.epoch = pid, epoch
        self.coordinator = self.coordinators.get(tid)

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, timeout_s: float | None = None) -> None:
        """EndTxn for ``tid`` with the producer id and epoch its owner reported (a commit of a transaction already
        committed with that epoch is answered NONE, so a retry after a lost answer succeeds)."""
        self._as(tid, pid, epoch)
        try:
            self._coordinated(f"EndTxn({tid!r})", ApiKey.END_TXN, 3,
                              {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                               "committed": commit}, lambda r: [r["error_code"]], timeout_s=timeout_s)
        finally:
            if self.coordinator is not None:
                self.coordinators[tid] = self.coordinator
            self.tid = None

    def describe(self, tid: str) -> dict[str, Any]:
        """DescribeTransactions (KIP-664) of ``tid``: state, producer id and epoch (NOT_COORDINATOR retried)."""
        self._as(tid, -1, -1)
        not_found = 105  # TRANSACTIONAL_ID_NOT_FOUND
        try:
            r = self._coordinated(f"DescribeTransactions({tid!r})", ApiKey.DESCRIBE_TRANSACTIONS,
                                  MAX_DESCRIBE_TRANSACTIONS_VERSION, {"transactional_ids": [tid]},
                                  lambda r: [s["error_code"] for s in r["transaction_states"]
                                             if s["error_code"] != not_found])
        finally:
            self.tid = None
        (state,) = r["transaction_states"]
        return dict(state)

    def commit_offset(self, group: str, topic: str, partition: int, offset: int, metadata: str) -> None:
        """A plain OffsetCommit (generation -1: no group membership), as an admin or a manual commit does."""
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "retention_time_ms": -1,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                           "committed_leader_epoch": -1, "commit_timestamp": -1,
                                                           "committed_metadata": metadata}]}]}
        self._coordinated("OffsetCommit", ApiKey.OFFSET_COMMIT, MAX_OFFSET_COMMIT_VERSION, body,
                          lambda r: [p["error_code"] for t in r["topics"] for p in t["partitions"]], key=(0, group))


# -- the task ------------------------------------------------------------------------------------------------


def _marker_batch(found: tuple[int, str] | None) -> int:
    return found[0] if found is not None else -1


def _records(found: tuple[int, str] | None) -> int:
    try:
        meta = json.loads(found[1] or "{}") if found is not None else {}
    except ValueError:
        meta = {}
    return int(meta.get("records", 0)) if isinstance(meta, dict) else 0


def finish_decided(conf: Mapping[str, Any], producer: RawProducer, tid: str, prefix: str, marker_topic: str,
                   batch: int) -> bool:
    """If batch ``batch`` was decided (the driver wrote its decision) but ``tid``'s transaction was not ended,
    end it now (COMMIT with the recorded producer id and epoch; a no-op success when it was ended). True when a
    decided transaction of ``tid`` is committed; False when there is none (or it was aborted meanwhile)."""
    txns = decided_txns(producer, prefix, marker_topic, batch)
    if txns is None:
        return False
    client = TxnClient(conf)
    try:
        if txns:
            rec = txns.get(tid.rsplit("-", 1)[1])
            if rec is None:
                return False  # not part of the decided batch (e.g. a task count that changed)
            pid, epoch = int(rec[0]), int(rec[1])
        else:  # too many tasks to name in the decision: ask the coordinator what is open
            state = client.describe(tid)
            if state.get("transaction_state") != "Ongoing":
                return False
            pid, epoch = int(state["producer_id"]), int(state["producer_epoch"])
        try:
            client.end_txn(tid, pid, epoch, commit=True)
        except DeliveryError as exc:
            if any(name in str(exc) for name in ENDED_ELSEWHERE):
                log.warning("exactly-once sink: the transaction of %s decided for batch %d is gone (%s); writing "
                            "the partition again", tid, batch, exc)
                return False
            raise
    finally:
        client.close()
    log.info("exactly-once sink: finished the transaction of %s for batch %d (decided by an earlier driver)",
             tid, batch)
    return True


def write_atomic(conf: Mapping[str, Any], topic_option: str | None, tid: str, partition: int, batch: int,
                 marker_topic: str, batches: Iterator[Any], reused: Callable[[int], Exception]) -> AtomicCommit:
    """One task's partition of one (micro-)batch written in a transaction that is left open for the driver.

    1. the batch's decision (a plain commit, never pending): if the driver decided this batch id and this id's
       transaction is still open, end it (COMMIT) before step 2 would abort it;
    2. InitProducerId: fences earlier attempts and aborts (or completes) what they left open, so that
    3. the marker read (stable offsets) is final: this batch id = already written, nothing to do;
    4. otherwise produce, flush, commit the marker in the transaction, and report it open."""
    producer = RawProducer(conf, transactional_id=tid)
    try:
        finish_decided(conf, producer, tid, prefix_of(tid), marker_topic, batch)
        producer.init_producer_id()
        found = producer.committed_offset(tid, marker_topic, MARKER_PARTITION)
        done = _marker_batch(found)
        if done > batch:
            raise reused(done)
        if done == batch:
            for _ in batches:  # already written: consume the input, write nothing
                pass
            return AtomicCommit(tid, batch, _records(found), skipped=True)
        producer.begin()
        try:
            count = producer.produce_arrow(batches, topic_option)
            producer.flush()
            marker = json.dumps({"batch": batch, "records": count, "partition": partition})
            producer.send_offsets(tid, marker_topic, MARKER_PARTITION, batch, marker)
        except BaseException:
            try:
                producer.end_transaction(False, timeout_s=10.0)
            except Exception:  # fenced or unreachable: the next attempt (or the timeout) aborts it
                pass
            raise
        parts = sorted((producer.slot_tp[s][0].name, producer.slot_tp[s][1]) for s in producer.txn_slots)
        return AtomicCommit(tid, batch, count, skipped=False, producer_id=producer.producer_id,
                            producer_epoch=producer.epoch, partitions=parts)
    finally:
        producer.close()


# -- the driver ----------------------------------------------------------------------------------------------


def decision_metadata(batch: int, open_txns: list[AtomicCommit]) -> str:
    """``{"b": batch, "n": tasks, "t": {"<partition>": [producer id, epoch], ...}}``; ``t`` left out when it does
    not fit Kafka's default ``offset.metadata.max.bytes``."""
    txns = {m.transactional_id.rsplit("-", 1)[1]: [m.producer_id, m.producer_epoch] for m in open_txns}
    full = json.dumps({"b": batch, "n": len(open_txns), "t": txns}, separators=(",", ":"))
    if len(full) <= METADATA_BUDGET:
        return full
    return json.dumps({"b": batch, "n": len(open_txns)}, separators=(",", ":"))


def commit_batch(conf: Mapping[str, Any], marker_topic: str, batch: int, messages: list[Any],
                 after_end_txn: Callable[[int], None] | None = None) -> list[AtomicCommit]:
    """The driver's ``commit``: the decision, then EndTxn COMMIT for every transaction the tasks left open.
    Returns the transactions ended."""
    open_txns = [m for m in messages if isinstance(m, AtomicCommit) and not m.skipped and m.producer_id >= 0]
    if not open_txns:
        return []
    client = TxnClient(conf)
    try:
        client.commit_offset(decision_group(prefix_of(open_txns[0].transactional_id)), marker_topic,
                             MARKER_PARTITION, batch, decision_metadata(batch, open_txns))
        for i, m in enumerate(open_txns):
            client.end_txn(m.transactional_id, m.producer_id, m.producer_epoch, commit=True)
            if after_end_txn is not None:
                after_end_txn(i)
    finally:
        client.close()
    return open_txns


def decided_txns(client: RawProducer, prefix: str, marker_topic: str, batch: int,
                 timeout_s: float | None = None) -> dict[str, list[int]] | None:
    """The transactions the decision of ``batch`` names (partition -> [producer id, epoch]); None = no decision
    for this batch; empty = a decision too big to name them (all of the batch's transactions count as decided)."""
    decided = client.committed_offset(decision_group(prefix), marker_topic, MARKER_PARTITION, timeout_s=timeout_s)
    if decided is None or decided[0] != batch:
        return None
    try:
        meta = json.loads(decided[1] or "{}")
    except ValueError:
        meta = {}
    txns = meta.get("t") if isinstance(meta, dict) else None
    return txns if isinstance(txns, dict) else {}


def abort_batch(conf: Mapping[str, Any], marker_topic: str, batch: int, messages: list[Any],
                timeout_s: float = 10.0) -> list[str]:
    """The driver's ``abort`` for the tasks that reported an open transaction: EndTxn ABORT (best effort, bounded;
    what is not aborted here is aborted by the replay's InitProducerId or by ``transaction.timeout.ms``), except
    the transactions a decision of this batch names: some may be committed already (Spark calls ``abort`` when
    ``commit`` failed, and in another process), so they are left for the replay to finish. Returns the ids left
    open."""
    open_txns = [m for m in messages if isinstance(m, AtomicCommit) and not m.skipped and m.producer_id >= 0]
    if not open_txns:
        return []
    left = []
    client = TxnClient(conf)
    try:
        try:
            decided = decided_txns(client, prefix_of(open_txns[0].transactional_id), marker_topic, batch, timeout_s)
        except (DeliveryError, OSError) as exc:  # no broker answers (within timeout_s): some may be committed
            log.warning("exactly-once sink: batch %d: its commit decision cannot be read (%s); its transactions "
                        "are left for the replay of the batch", batch, exc)
            return [m.transactional_id for m in open_txns]
        for m in open_txns:
            named = decided is not None and (
                not decided or decided.get(m.transactional_id.rsplit("-", 1)[1]) == [m.producer_id, m.producer_epoch])
            if named:
                log.warning("exactly-once sink: batch %d failed after its commit decision; %s is left for the "
                            "replay of the batch to commit", batch, m.transactional_id)
                left.append(m.transactional_id)
                continue
            try:
                client.end_txn(m.transactional_id, m.producer_id, m.producer_epoch, commit=False,
                               timeout_s=timeout_s)
            except (DeliveryError, OSError) as exc:
                log.warning("exactly-once sink: could not abort %s (%s)", m.transactional_id, exc)
                left.append(m.transactional_id)
    finally:
        client.close()
    return left
