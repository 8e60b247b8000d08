"""The transaction coordinator (Kafka's ``TransactionCoordinator`` with its ``TransactionStateManager``).

Runs on the broker's event loop (like the group coordinator): the metadata of every transactional id it
coordinates is in memory; every change is first written to the id's ``__transaction_state`` partition (one record,
acks=-1, :func:`~tidelog.broker.internal_topics.append_and_wait`) and applied only once written. A change in
flight marks the id *pending* (:mod:`tidelog.broker.txn.state`); other requests for it meanwhile get
CONCURRENT_TRANSACTIONS, as in Kafka.

* **Ownership.** The coordinator of a transactional id leads partition ``partition_for(id, n)`` of
  ``__transaction_state``; the coordinator epoch is that partition's leader epoch. Single node: the topic is created
  on first use (FindCoordinator or InitProducerId; ``transaction.state.log.num.partitions``, compacted, RF 1) and
  this broker owns every partition; at start the partitions are read in a worker thread (latest record per id,
  tombstones delete) and requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile. ZooKeeper mode: the replica
  manager calls :meth:`TransactionCoordinator.on_leadership_change`, which loads or unloads one partition
  (Kafka's ``onElection`` / ``onResignation``); FindCoordinator names the partition's leader.
* **Completing.** EndTxn writes PrepareCommit/PrepareAbort, answers the client, then sends the markers
  (:class:`~tidelog.broker.txn.markers.TxnMarkerChannel`) and writes CompleteCommit/CompleteAbort. A Prepare state
  found at load is completed the same way.
* **Timeouts.** Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` an Ongoing transaction older
  than its timeout is aborted with a bumped epoch (PrepareEpochFence, then PrepareAbort), so the old producer is
  fenced; every ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle in Empty/Complete* for
  ``transactional.id.expiration.ms`` are removed (a tombstone).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidelog.broker.group.records import OFFSETS_TOPIC
from tidelog.broker.group.records import partition_for as group_partition_for
from tidelog.broker.internal_topics import append_and_wait, replay_log
from tidelog.broker.re2j import PatternError, compile_pattern
from tidelog.broker.txn import records as rec
from tidelog.broker.txn import tv2
from tidelog.broker.txn.markers import TxnMarkerChannel
from tidelog.broker.txn.records import TRANSACTION_STATE_TOPIC, partition_for
from tidelog.broker.txn.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
    TxnTransit,
    is_epoch_exhausted,
)
from tidelog.errors import ApiError, ErrorCode, error_code
from tidelog.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.txn")

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class InitResult:
    error: ErrorCode | None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


class TransactionCoordinator:
    """Every transactional id of the ``__transaction_state`` partitions this broker leads."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.configured_partitions = int(cfg.get("transaction.state.log.num.partitions"))
        self.replication_factor = int(cfg.get("transaction.state.log.replication.factor"))
        self.min_isr = int(cfg.get("transaction.state.log.min.isr"))
        self.segment_bytes = int(cfg.get("transaction.state.log.segment.bytes"))
        self.max_timeout_ms = int(cfg.get("transaction.max.timeout.ms"))
        self.id_expiration_ms = int(cfg.get("transactional.id.expiration.ms"))
        self.abort_interval_ms = int(cfg.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"))
        self.expire_interval_ms = int(cfg.get("transaction.remove.expired.transaction.cleanup.interval.ms"))
        self.request_timeout_ms = int(cfg.get("request.timeout.ms"))
        self.verification_enabled = bool(cfg.get("transaction.partition.verification.enable"))
        self.markers = TxnMarkerChannel(broker, request_timeout_ms=self.request_timeout_ms)
        self.txns: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}  # __transaction_state partition -> coordinator epoch
        self.loading_partitions: set[int] = set()
        self._load_generation: dict[int, int] = {}
        self._elected: dict[int, int] = {}  # elected, not yet loading: partition -> load generation (one batch)
        self.active = False
        self.loaded = asyncio.Event()  # set while no partition is loading
        self._creating: asyncio.Task[Any] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self.completions: dict[str, asyncio.Task[Any]] = {}  # transactional id -> markers + Complete* in flight
        metrics = broker.metrics
        self._marker_latency = metrics.txn_marker_latency
        metrics.add_rows_source(self._metric_rows)

    # ============================================================== lifecycle

    @property
    def num_partitions(self) -> int:
        topics = self.broker.topics
        info = topics.get(TRANSACTION_STATE_TOPIC) if topics is not None else None
        return info.num_partitions if info is not None else self.configured_partitions

    async def start(self) -> None:
        self.active = True
        loop = asyncio.get_running_loop()
        self.loaded.set()  # partitions arrive with leadership (on_leadership_change)
        self._tasks.append(loop.create_task(self._periodic(self.abort_interval_ms, self.abort_timed_out_transactions)))
        self._tasks.append(loop.create_task(self._periodic(self.expire_interval_ms, self.remove_expired_transactional_ids)))

    def shutdown(self) -> None:
        self.active = False
        for t in [*self._tasks, *self._background]:
            t.cancel()

    async def _periodic(self, interval_ms: int, fn: Any) -> None:
        while self.active:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await fn()
            except Exception:
                log.exception("transaction coordinator periodic task failed")

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _load(self, partitions: list[int], generation: dict[int, int] | None = None) -> None:
        t0 = time.monotonic()
        logs = [lg for p in partitions if (lg := self.broker.topics.get_log(TRANSACTION_STATE_TOPIC, p)) is not None]
        try:
            found = await asyncio.to_thread(_read_partitions, logs)
        except Exception:
            log.exception("loading __transaction_state failed; its transactional ids start empty")
            found = {}
        installed = 0
        for tid, value in found.items():
            p = partition_for(tid, self.num_partitions)
            if p not in self.owned or (generation is not None and self._load_generation.get(p) != generation.get(p)):
                continue
            try:
                md = TransactionMetadata.from_log(tid, value)
            except ValueError as exc:
                log.warning("skipping undecodable transaction state", extra={"kv": {"id": tid, "error": str(exc)}})
                continue
            self.txns[tid] = md
            installed += 1
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                # a commit/abort whose markers may not all be written: finish it (Kafka's load does the same)
                self._start_completion(md, self.owned[p])
        log.info("transaction coordinator loaded", extra={"kv": {
            "partitions": len(partitions), "transactional_ids": installed,
            "seconds": round(time.monotonic() - t0, 3)}})

    # ============================================================== partition leadership

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """Called on the loop when this broker becomes or stops being leader of a partition (both modes:
        :class:`~tidelog.broker.leadership.LeadershipListener`). The partitions elected in one turn of the loop
        load as one batch; a partition holding nothing (just created) is coordinated at once."""
        if topic != TRANSACTION_STATE_TOPIC:
            return
        gen = self._load_generation.get(partition, 0) + 1
        self._load_generation[partition] = gen
        if is_leader:
            if self.owned.get(partition) == leader_epoch:
                return
            self.owned[partition] = leader_epoch
            self._unload(partition)
            plog = self.broker.topics.get_log(TRANSACTION_STATE_TOPIC, partition)
            if plog is not None and plog.log_end_offset == 0:
                self.loading_partitions.discard(partition)
                self._elected.pop(partition, None)
                self._loaded_if_idle()
                return  # nothing to replay: coordinated now
            self.loading_partitions.add(partition)
            self.loaded.clear()
            if not self._elected:
                self._spawn(self._load_elected())
            self._elected[partition] = gen
            return
        self.owned.pop(partition, None)
        self.loading_partitions.discard(partition)
        self._elected.pop(partition, None)
        self._unload(partition)
        self._loaded_if_idle()

    async def _load_elected(self) -> None:
        """The partitions elected in the turn of the loop that spawned this, loaded as one batch."""
        batch, self._elected = self._elected, {}
        try:
            await self._load(sorted(batch), batch)
        finally:
            for p, gen in batch.items():
                if self._load_generation.get(p) == gen:
                    self.loading_partitions.discard(p)
            self._loaded_if_idle()

    def _loaded_if_idle(self) -> None:
        if not self.loading_partitions:
            self.loaded.set()

    def _unload(self, partition: int) -> None:
        n = self.num_partitions
        for tid in [t for t in self.txns if partition_for(t, n) == partition]:
            del self.txns[tid]
            task = self.completions.pop(tid, None)
            if task is not None:
                task.cancel()

    async def find_coordinator(self, transactional_id: str) -> tuple[ErrorCode | None, tuple[int, str, int] | None]:
        """(error name, (node id, host, port)) of this id's coordinator: the leader of its ``__transaction_state``
        partition, this broker once it has loaded it. The topic is created on first use (one node: here, led at
        once; ZooKeeper mode: through ZooKeeper, its leaders elected by the controller)."""
        if not self.active or self.broker.stopping:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        b = self.broker
        if not await self.ensure_topic():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        info = b.topics.get(TRANSACTION_STATE_TOPIC)
        if info is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        p = partition_for(transactional_id, info.num_partitions)
        if p in self.owned:
            if not self.loaded.is_set() or p in self.loading_partitions:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            return None, (b.node_id, b.host, b.port)
        md = b.partition_metadata(TRANSACTION_STATE_TOPIC, p)
        leader = md.get("leader_id", -1) if md else -1
        for node in b.metadata_brokers() or ():
            if node["node_id"] == leader >= 0:
                return None, (node["node_id"], node["host"], node["port"])
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

    def _topic_configs(self, replication_factor: int) -> dict[str, str | None]:
        # Kafka's TransactionStateManager.transactionTopicConfigs
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.segment_bytes),
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(min(self.min_isr, replication_factor)),
        }

    async def ensure_topic(self) -> bool:
        """Create ``__transaction_state`` on first use (the replica manager's replication factor for internal
        topics: 1 on one node); True once it exists here."""
        if self.broker.topics.get(TRANSACTION_STATE_TOPIC) is not None:
            return True
        if self._creating is None or self._creating.done():
            self._creating = self._spawn(self._create_topic())
        await asyncio.shield(self._creating)
        return self.broker.topics.get(TRANSACTION_STATE_TOPIC) is not None

    async def _create_topic(self) -> None:
        rm = self.broker.replica_manager
        rf = rm.internal_topic_replication_factor(self.replication_factor)
        live = len(rm.live_brokers())
        if live < rf:
            log.warning("__transaction_state not created: fewer live brokers than "
                        "transaction.state.log.replication.factor",
                        extra={"kv": {"live": live, "replication_factor": rf}})
            return
        try:
            info = await self.broker.request_pool.run(
                self.broker.topics.create_topic, TRANSACTION_STATE_TOPIC, self.configured_partitions, rf,
                self._topic_configs(rf))
            log.info("__transaction_state created", extra={"kv": {"partitions": info.num_partitions,
                                                                   "replication_factor": rf}})
        except Exception as exc:
            if not (isinstance(exc, ApiError) and exc.kafka_error == ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create __transaction_state", extra={"kv": {"error": repr(exc)}})

    # ============================================================== state access

    def _partition(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def _check(self, transactional_id: str) -> ErrorCode | None:
        """Kafka's ``getTransactionState`` preconditions: is this id coordinated here, and loaded?"""
        if not self.active or self.broker.stopping or not self.broker.replica_manager.coordinating:
            return ErrorCode.NOT_COORDINATOR  # (the last: cut from ZooKeeper, its view may be stale)
        if not self.loaded.is_set():
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if self.broker.topics.get(TRANSACTION_STATE_TOPIC) is None:
            return ErrorCode.NOT_COORDINATOR
        p = self._partition(transactional_id)
        if p in self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _get(self, transactional_id: str) -> TransactionMetadata | None:
        md = self.txns.get(transactional_id)
        return None if md is None or md.state is TxnState.DEAD else md

    def _coordinator_epoch(self, transactional_id: str) -> int:
        return self.owned.get(self._partition(transactional_id), -1)

    async def _write(self, transactional_id: str, transit: TxnTransit | None) -> ErrorCode | None:
        """Write the id's new state (a tombstone for None) to its partition; the error name Kafka's
        ``appendTransactionToLog`` answers with, or None."""
        p = self._partition(transactional_id)
        epoch = self.owned.get(p)
        value = None if transit is None else rec.encode_value(transit.log_value(), tv2.log_value_version(self.broker))
        err = await append_and_wait(self.broker, TRANSACTION_STATE_TOPIC, p,
                                    [(rec.encode_key(transactional_id), value)], self.request_timeout_ms)
        if err is None:
            if self.owned.get(p) != epoch:  # leadership moved while writing
                return ErrorCode.NOT_COORDINATOR
            return None
        log.warning("__transaction_state append failed", extra={"kv": {"id": transactional_id, "error": err}})
        if err in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                   ErrorCode.REQUEST_TIMED_OUT):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if err in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH):
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def _apply(self, md: TransactionMetadata, transit: TxnTransit) -> ErrorCode | None:
        err = await self._write(md.transactional_id, transit)
        if self.txns.get(md.transactional_id) is not md:
            return err or ErrorCode.NOT_COORDINATOR  # unloaded meanwhile
        if err is None:
            md.complete_transition(transit)
        else:
            md.abort_transition()
        return err

    # ============================================================== InitProducerId

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> InitResult:
        """InitProducerId with a transactional id. ``expected``: (producer id, epoch) of a KIP-360 bump."""
        if not transactional_id:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        await self.ensure_topic()
        err = self._check(transactional_id)
        if err:
            return InitResult(err)
        md = self._get(transactional_id)
        if md is None:
            try:
                pid = await self._new_producer_id()
            except Exception as exc:
                log.warning("no producer id available", extra={"kv": {"error": repr(exc)}})
                return InitResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            md = self._get(transactional_id)  # created meanwhile by a concurrent request?
            if md is None:
                md = TransactionMetadata(transactional_id, pid, timeout_ms, txn_last_update_timestamp=_now_ms())
                self.txns[transactional_id] = md
        if md.pending_transition_in_progress:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == md.producer_id
                or (expected[0] == md.previous_producer_id and is_epoch_exhausted(expected[1]))):
            return InitResult(ErrorCode.PRODUCER_FENCED)
        state = md.state
        if state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state is TxnState.ONGOING:
            # fence the current producer: abort its transaction with a bumped epoch, let the new one retry
            transit = md.prepare_fence_producer_epoch()
            err = await self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                              commit=False, from_client=False)
            return InitResult(err or ErrorCode.CONCURRENT_TRANSACTIONS)
        if state not in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        now = _now_ms()
        if md.is_producer_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
            try:
                new_pid = await self._new_producer_id()
            except Exception:
                return InitResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            if md.pending_transition_in_progress or self.txns.get(transactional_id) is not md:
                return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            transit_or_err: TxnTransit | ErrorCode = md.prepare_producer_id_rotation(new_pid, timeout_ms, now,
                                                                                expected is not None)
        else:
            transit_or_err = md.prepare_increment_producer_epoch(
                timeout_ms, expected[1] if expected is not None else None, now)
        if isinstance(transit_or_err, ErrorCode):
            return InitResult(transit_or_err)
        err = await self._apply(md, transit_or_err)
        if err:
            return InitResult(err)
        log.info("initialized transactional id", extra={"kv": {
            "id": transactional_id, "producer_id": md.producer_id, "epoch": md.producer_epoch,
            "partition": self._partition(transactional_id)}})
        return InitResult(None, md.producer_id, md.producer_epoch)

    async def _new_producer_id(self) -> int:
        mgr = self.broker.producer_ids
        pid = mgr.allocate_nowait()
        if pid is None:
            pid = await asyncio.to_thread(mgr.allocate)
        return int(pid)

    # ============================================================== AddPartitionsToTxn / AddOffsetsToTxn

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition], client_transaction_version: int = 0) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        err = self._check(transactional_id)
        if err:
            return err
        md = self._get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending_transition_in_progress or md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        parts = set(partitions)
        if md.state is TxnState.ONGOING and parts <= md.partitions:
            return None  # already in the transaction: nothing to write
        return await self._apply(md, md.prepare_add_partitions(parts, _now_ms(), client_transaction_version))

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """``__consumer_offsets``'s partition of ``group_id`` (AddOffsetsToTxn adds it to the transaction)."""
        gc = self.broker.group_coordinator
        n = gc.num_partitions if gc is not None else int(self.broker.config.get("offsets.topic.num.partitions"))
        return (OFFSETS_TOPIC, group_partition_for(group_id, n))

    async def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890: are ``partitions`` in the producer's ongoing transaction? Error code per partition, as Kafka's
        ``handleVerifyPartitionsInTransaction`` (TRANSACTION_ABORTABLE for a partition not added)."""
        if (transactional_id and self.broker.topics.get(TRANSACTION_STATE_TOPIC) is not None
                and self._partition(transactional_id) not in self.owned):
            return await self.add_partitions_remote(transactional_id, producer_id, producer_epoch, partitions,
                                                    verify_only=True)
        return {tp: _code(e) for tp, e in self.verify_errors(transactional_id, producer_id, producer_epoch,
                                                              partitions).items()}

    async def add_partitions_remote(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: list[TopicPartition], verify_only: bool) -> dict[TopicPartition, int]:
        """ZooKeeper mode: the id's coordinator is another broker; AddPartitionsToTxn to it through the replica
        manager's ``broker_request`` (Kafka's AddPartitionsToTxnManager): v4 ``verify_only`` (KIP-890 part 1, are
        the partitions in the transaction?) or v5 adding them (transactions v2's implicit add). An error code per
        partition."""
        err, node = await self.find_coordinator(transactional_id)
        request = self.broker.replica_manager.broker_request
        if err is not None or node is None or node[0] == self.broker.node_id:
            return dict.fromkeys(partitions, _code(err or ErrorCode.NOT_COORDINATOR))
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": verify_only,
                                  "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]}
        try:
            resp = await request(node[0], ApiKey.ADD_PARTITIONS_TO_TXN, 4 if verify_only else 5, body,
                                 timeout=self.request_timeout_ms / 1000.0)
        except Exception as exc:
            log.info("AddPartitionsToTxn at the coordinator failed",
                     extra={"kv": {"node": node[0], "verify_only": verify_only, "error": repr(exc)}})
            return dict.fromkeys(partitions, _code(ErrorCode.NETWORK_EXCEPTION))
        got: dict[TopicPartition, int] = {}
        if resp.get("error_code"):
            return dict.fromkeys(partitions, int(resp["error_code"]))
        for txn in resp.get("results_by_transaction") or ():
            for t in txn.get("topic_results") or ():
                for p in t.get("results_by_partition") or ():
                    got[(t["name"], int(p["partition_index"]))] = int(p["partition_error_code"])
        return {tp: got.get(tp, _code(ErrorCode.UNKNOWN_SERVER_ERROR)) for tp in partitions}

    def verify_errors(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode | None]:
        def all_(err: ErrorCode) -> dict[TopicPartition, ErrorCode | None]:
            return dict.fromkeys(partitions, err)

        if not transactional_id:
            return all_(ErrorCode.INVALID_REQUEST)
        err = self._check(transactional_id)
        if err:
            return all_(err)
        md = self._get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return all_(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return all_(ErrorCode.PRODUCER_FENCED)
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return all_(ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: None if tp in md.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    # ============================================================== EndTxn

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> ErrorCode | None:
        """EndTxn from a client. Answers once PrepareCommit/PrepareAbort is written; the markers follow."""
        return await self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True)

    async def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                               from_client: bool) -> ErrorCode | None:
        md = self._get(transactional_id) if transactional_id else None
        # the coordinator's own abort (fencing, timeout) comes with PrepareEpochFence pending
        fence = not from_client and md is not None and md.pending_state is TxnState.PREPARE_EPOCH_FENCE
        try:
            if not transactional_id:
                return ErrorCode.INVALID_REQUEST
            err = self._check(transactional_id)
            if err:
                return err
            if md is None or md.producer_id != producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
                return ErrorCode.PRODUCER_FENCED
            if md.pending_transition_in_progress and not fence:
                return ErrorCode.CONCURRENT_TRANSACTIONS  # (a client's EndTxn never clears the coordinator's fence)
            state = md.state
            if state is TxnState.ONGOING:
                if fence:
                    if commit:
                        return ErrorCode.INVALID_TXN_STATE
                    # clear the fence to make way for PrepareAbort, which carries the bumped epoch
                    md.pending_state = None
                    md.producer_epoch = producer_epoch
                    md.last_producer_epoch = NO_PRODUCER_EPOCH
                    fence = False
                transit = md.prepare_abort_or_commit(  # a client's EndTxn < v5: version 1 (v5: txn/tv2.py)
                    TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, _now_ms(),
                    client_transaction_version=0 if from_client else tv2.finalized_level(self.broker))
            elif state is TxnState.COMPLETE_COMMIT:
                return None if commit else ErrorCode.INVALID_TXN_STATE
            elif state is TxnState.COMPLETE_ABORT:
                return None if not commit else ErrorCode.INVALID_TXN_STATE
            elif state is TxnState.PREPARE_COMMIT:
                return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
            elif state is TxnState.PREPARE_ABORT:
                return ErrorCode.CONCURRENT_TRANSACTIONS if not commit else ErrorCode.INVALID_TXN_STATE
            elif state is TxnState.EMPTY:
                return ErrorCode.INVALID_TXN_STATE
            else:
                raise IllegalTransitionError(f"{transactional_id}: EndTxn in state {state.state_name}")
        finally:
            if fence and md is not None:  # the fence was not turned into an abort: drop it
                md.abort_transition()
        was_fence = not from_client
        err = await self._apply(md, transit)
        if err:
            if was_fence and self.txns.get(transactional_id) is md:
                md.has_failed_epoch_fence = True  # do not bump again on the next try
            return err
        self._start_completion(md, self._coordinator_epoch(transactional_id))
        log.info("transaction prepared", extra={"kv": {
            "id": transactional_id, "producer_id": md.producer_id, "epoch": md.producer_epoch,
            "result": "commit" if commit else "abort", "partitions": len(md.partitions),
            "by": "client" if from_client else "coordinator"}})
        return None

    def _start_completion(self, md: TransactionMetadata, coordinator_epoch: int) -> None:
        tid = md.transactional_id
        old = self.completions.get(tid)
        if old is not None and not old.done():
            return
        self.completions[tid] = self._spawn(self._complete(md, coordinator_epoch))

    async def _complete(self, md: TransactionMetadata, coordinator_epoch: int) -> None:
        """Markers to every partition of the transaction, then Complete* written (Kafka's marker channel and
        ``tryAppendToLog``). Retried until done or until this broker no longer coordinates the id."""
        tid = md.transactional_id
        commit = md.state is TxnState.PREPARE_COMMIT
        t0 = time.monotonic()
        p = self._partition(tid)

        def still_valid() -> bool:
            return self.active and self.txns.get(tid) is md and self.owned.get(p) == coordinator_epoch

        try:
            done = await self.markers.send(md.producer_id, md.producer_epoch, coordinator_epoch, commit,
                                           set(md.partitions), still_valid=still_valid, on_done=md.remove_partition,
                                           transaction_version=md.client_transaction_version)
            if not done:
                return
            while still_valid():
                if md.pending_transition_in_progress:
                    await asyncio.sleep(0.05)
                    continue
                if md.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    return
                err = await self._apply(md, md.prepare_complete(_now_ms()))
                if err is None:
                    if self._marker_latency is not None:
                        self._marker_latency.observe(time.monotonic() - t0)
                    log.info("transaction completed", extra={"kv": {
                        "id": tid, "producer_id": md.producer_id, "epoch": md.producer_epoch,
                        "result": "commit" if commit else "abort"}})
                    return
                if err == ErrorCode.NOT_COORDINATOR:
                    return
                await asyncio.sleep(0.1)
        finally:
            if self.completions.get(tid) is asyncio.current_task():
                del self.completions[tid]

    # ============================================================== timeouts and expiration

    async def abort_timed_out_transactions(self, now_ms: int | None = None) -> int:
        """Abort (with a bumped epoch) every Ongoing transaction older than its timeout; returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        timed_out = [md for md in self.txns.values()
                     if md.state is TxnState.ONGOING and not md.pending_transition_in_progress
                     and md.txn_start_timestamp + md.txn_timeout_ms < now
                     and self._check(md.transactional_id) is None]
        n = 0
        for md in timed_out:
            if md.pending_transition_in_progress or md.state is not TxnState.ONGOING:
                continue
            transit = md.prepare_fence_producer_epoch()
            log.info("aborting timed out transaction", extra={"kv": {
                "id": md.transactional_id, "producer_id": md.producer_id, "epoch": transit.producer_epoch,
                "timeout_ms": md.txn_timeout_ms}})
            err = await self._end_transaction(md.transactional_id, transit.producer_id, transit.producer_epoch,
                                              commit=False, from_client=False)
            if err is None:
                n += 1
        return n

    async def remove_expired_transactional_ids(self, now_ms: int | None = None) -> int:
        """Tombstone ids idle for ``transactional.id.expiration.ms`` in a state that allows it; returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        expired = [md for md in self.txns.values()
                   if md.state.expiration_allowed and not md.pending_transition_in_progress
                   and md.txn_last_update_timestamp + self.id_expiration_ms <= now
                   and self._check(md.transactional_id) is None]
        n = 0
        for md in expired:
            if md.pending_transition_in_progress or not md.state.expiration_allowed:
                continue
            md.prepare_dead()
            err = await self._write(md.transactional_id, None)
            if err is None and self.txns.get(md.transactional_id) is md:
                del self.txns[md.transactional_id]
                n += 1
                log.info("transactional id expired", extra={"kv": {"id": md.transactional_id}})
            else:
                md.abort_transition()
        return n

    # ============================================================== Describe / List

    def describe(self, transactional_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": 0, "transactional_id": transactional_id, "transaction_state": "",
                               "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                               "producer_epoch": -1, "topics": []}
        if not self.active:
            out["error_code"] = _code(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return out
        if not transactional_id:
            out["error_code"] = _code(ErrorCode.INVALID_REQUEST)
            return out
        err = self._check(transactional_id)
        if err:
            out["error_code"] = _code(err)
            return out
        md = self._get(transactional_id)
        if md is None:
            out["error_code"] = _code(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
            return out
        topics: dict[str, list[int]] = {}
        for t, p in sorted(md.partitions):
            topics.setdefault(t, []).append(p)
        out.update(transaction_state=md.state.state_name, transaction_timeout_ms=md.txn_timeout_ms,
                   transaction_start_time_ms=md.txn_start_timestamp, producer_id=md.producer_id,
                   producer_epoch=md.producer_epoch,
                   topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
        return out

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1, pattern: str | None = None,
                          now_ms: int | None = None) -> tuple[ErrorCode | None, list[str], list[TxnListing]]:
        """(error, unknown state filters, transactions) as Kafka's ``listTransactionStates``."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        if self.loading_partitions or not self.loaded.is_set():
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in states:
            s = TxnState.from_name(name)
            if s is None:
                unknown.append(name)
            else:
                wanted.add(s)
        if states and not wanted:
            return None, unknown, []  # only unknown states asked for: nothing matches
        pids = set(producer_ids)
        regex = None
        if pattern:
            try:  # RE2 as Kafka's RE2J (KIP-1152): a client's pattern matches in linear time (broker/re2j.py)
                regex = compile_pattern(pattern)
            except PatternError:
                return ErrorCode.INVALID_REGULAR_EXPRESSION, unknown, []
        now = _now_ms() if now_ms is None else now_ms
        n = self.num_partitions
        out = []
        for tid, md in self.txns.items():
            if md.state is TxnState.DEAD or partition_for(tid, n) not in self.owned:
                continue
            if pids and md.producer_id not in pids:
                continue
            if wanted and md.state not in wanted:
                continue
            if duration_ms >= 0 and now - md.txn_start_timestamp <= duration_ms:
                continue
            if regex is not None and regex.fullmatch(tid) is None:
                continue
            out.append(TxnListing(tid, md.producer_id, md.state.state_name))
        return None, unknown, out

    # ============================================================== metrics

    def _metric_rows(self) -> Iterable[tuple[str, str, dict[str, str], float]]:
        counts: dict[str, int] = {}
        for md in self.txns.values():
            counts[md.state.state_name] = counts.get(md.state.state_name, 0) + 1
        open_ = sum(counts.get(s, 0) for s in ("Ongoing", "PrepareCommit", "PrepareAbort"))
        yield ("tidelog_txn_open_transactions", "Transactions not yet completed (Ongoing, PrepareCommit, "
               "PrepareAbort) coordinated here", {}, float(open_))
        for state in TxnState:
            if state is TxnState.PREPARE_EPOCH_FENCE:
                continue
            yield ("tidelog_txn_transactional_ids", "Transactional ids coordinated here per state",
                   {"state": state.state_name}, float(counts.get(state.state_name, 0)))


def _code(name: ErrorCode | None) -> int:
    return 0 if name is None else error_code(name)


def _read_partitions(logs: list[Any]) -> dict[str, rec.TxnLogValue]:
    """Blocking: replay ``__transaction_state`` partitions (latest record per id wins, tombstones delete)."""
    state: dict[str, rec.TxnLogValue] = {}
    for lg in logs:
        for header, records in replay_log(lg):
            if header.is_control:
                continue
            for r in records:
                if r.key is None:
                    continue
                try:
                    tid = rec.decode_key(r.key)
                    if r.value is None:
                        state.pop(tid, None)
                    else:
                        state[tid] = rec.decode_value(r.value)
                except rec.TxnSchemaError as exc:
                    log.warning("skipping undecodable __transaction_state record",
                                extra={"kv": {"partition": lg.partition, "offset": r.offset, "error": str(exc)}})
    return state
