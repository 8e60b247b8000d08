"""Transaction markers: writing COMMIT/ABORT control batches to the partitions of a transaction.

Two sides, as in Kafka:

* the **partition-leader side** (:func:`append_markers_locally`, also the WriteTxnMarkers handler's): for each
  partition this broker leads, ``PartitionLog.append_txn_marker`` on a request handler thread (in the partition's
  append order, :class:`~tidelog.broker.request_pool.AppendSequencer`), then the ISR wait (acks=-1, Kafka's
  ``appendRecords`` for markers); after a marker in ``__consumer_offsets-N`` the group coordinator is told
  (``on_txn_marker``), so the producer's pending transactional offsets become visible or vanish.
* the **coordinator side** (:class:`TxnMarkerChannel`, Kafka's ``TransactionMarkerChannelManager``): the markers of
  one transaction, grouped by partition leader, retried until each partition acknowledged. Partitions this broker
  leads take the local path; a partition led elsewhere goes as a WriteTxnMarkers request through the replica manager's
  ``broker_request(node_id, api_key, version, body, timeout=...)`` (ZooKeeper mode's inter-broker requests; the
  single node's replica manager has none and never needs it), to every leader at once. A partition whose topic no
  longer exists is dropped (Kafka skips partitions without a leader: "likely deleted already"); INVALID_PRODUCER_EPOCH or
  TRANSACTION_COORDINATOR_FENCED stop the sending (a newer coordinator or epoch owns the transaction, Kafka's
  ``abortSending``); every other error is retried after ``retry_backoff_ms``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tidelog.broker.group.records import OFFSETS_TOPIC
from tidelog.broker.internal_topics import wait_replicated
from tidelog.errors import ApiError, ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import ERRORS_BY_CODE

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.txn.markers")

TopicPartition = tuple[str, int]
# errors after which sending stops: the marker is refused for good (Kafka's abortSending)
FATAL_MARKER_ERRORS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


async def append_markers_locally(broker: Broker, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                 commit: bool, partitions: Iterable[TopicPartition],
                                 timeout_ms: int) -> dict[TopicPartition, ErrorCode | None]:
    """Append one marker to each partition (this broker must lead it) and wait for the ISR.
    Returns ``{tp: None | Kafka error name}``."""
    result: dict[TopicPartition, ErrorCode | None] = {}
    required: dict[TopicPartition, int] = {}
    for tp in partitions:
        try:
            plog = broker.leader_log(*tp)
        except Exception as exc:
            result[tp] = exc.kafka_error if isinstance(exc, ApiError) else ErrorCode.UNKNOWN_SERVER_ERROR
            continue
        ticket = broker.append_sequencer.ticket(tp)
        try:
            await ticket.turn()
            info = await broker.request_pool.run(
                plog.append_txn_marker, producer_id, producer_epoch, coordinator_epoch, commit,
                leader_epoch=broker.leader_epoch(*tp))
            broker.on_append(tp, plog)
        except Exception as exc:
            name = exc.kafka_error if isinstance(exc, ApiError) else None
            if name is None:
                log.exception("appending a transaction marker failed", extra={"kv": {"partition": f"{tp[0]}-{tp[1]}"}})
            result[tp] = name or ErrorCode.UNKNOWN_SERVER_ERROR
            continue
        finally:
            ticket.release()
        required[tp] = info.last_offset + 1
    if required:
        status = await wait_replicated(broker, required, timeout_ms)
        for tp in required:
            err = status.get(tp)
            result[tp] = err
            if err is None and tp[0] == OFFSETS_TOPIC:
                gc = broker.group_coordinator
                if gc is not None:  # pending transactional offsets become visible (commit) or vanish (abort)
                    gc.on_txn_marker(tp[1], producer_id, commit)
    return result


def write_txn_markers_request(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                              partitions: Iterable[TopicPartition], transaction_version: int = 0) -> dict[str, Any]:
    """The WriteTxnMarkers request body for one transaction's partitions on one broker (``transaction_version``:
    the v2 field, 2 for a transactions-v2 transaction)."""
    topics: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        topics.setdefault(topic, []).append(p)
    return {"markers": [{
        "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
        "coordinator_epoch": coordinator_epoch, "transaction_version": transaction_version,
    }]}


def _errors_of_response(body: dict[str, Any], producer_id: int) -> dict[TopicPartition, ErrorCode | None]:
    out: dict[TopicPartition, ErrorCode | None] = {}
    for m in body.get("markers") or ():
        if m.get("producer_id") != producer_id:
            continue
        for t in m.get("topics") or ():
            for p in t.get("partitions") or ():
                code = int(p.get("error_code", 0))
                err = ERRORS_BY_CODE.get(code)
                out[(t["name"], int(p["partition_index"]))] = (
                    None if code == 0 else (ErrorCode(code) if err is not None else ErrorCode.UNKNOWN_SERVER_ERROR))
    return out


class TxnMarkerChannel:
    """Sends the markers of transactions until every partition acknowledged (see the module docstring)."""

    def __init__(self, broker: Broker, *, retry_backoff_ms: int = 100, request_timeout_ms: int = 30000) -> None:
        self.broker = broker
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms

    def _partition_exists(self, tp: TopicPartition) -> bool:
        topics = self.broker.topics
        info = topics.get(tp[0]) if topics is not None else None
        return info is not None and 0 <= tp[1] < info.num_partitions

    def _leader(self, tp: TopicPartition) -> int | None:
        """The node that leads ``tp``: this broker's id, another's, or None (unknown now: retry)."""
        md = self.broker.partition_metadata(*tp)
        if md is None:  # one node: this broker leads everything it hosts
            return self.broker.node_id
        leader = md.get("leader_id", -1)
        return leader if leader is not None and leader >= 0 else None

    async def send(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                   partitions: Iterable[TopicPartition], *, still_valid: Callable[[], bool],
                   on_done: Callable[[TopicPartition], None], transaction_version: int = 0) -> bool:
        """Write the markers; ``on_done(tp)`` for each partition acknowledged or dropped. Returns True when every
        partition is done, False when sending stopped (``still_valid()`` turned false, or a fatal marker error)."""
        pending = set(partitions)
        attempt = 0
        while pending:
            if not still_valid():
                return False
            local: list[TopicPartition] = []
            remote: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                if not self._partition_exists(tp):
                    log.info("transaction marker skipped: partition no longer exists",
                             extra={"kv": {"partition": f"{tp[0]}-{tp[1]}", "producer_id": producer_id}})
                    pending.discard(tp)
                    on_done(tp)
                    continue
                leader = self._leader(tp)
                if leader is None:
                    continue
                if leader == self.broker.node_id:
                    local.append(tp)
                else:
                    remote.setdefault(leader, []).append(tp)
            # this broker's partitions and every other leader's at once: a slow or dead one holds up no other
            jobs = [self._send_remote(node, producer_id, producer_epoch, coordinator_epoch, commit, tps,
                                      transaction_version) for node, tps in remote.items()]
            if local:
                jobs.append(append_markers_locally(self.broker, producer_id, producer_epoch, coordinator_epoch,
                                                   commit, local, self.request_timeout_ms))
            results: dict[TopicPartition, ErrorCode | None] = {}
            for answer in await asyncio.gather(*jobs):
                results.update(answer)
            for tp, err in results.items():
                if err is None:
                    pending.discard(tp)
                    on_done(tp)
                elif err in FATAL_MARKER_ERRORS:
                    log.warning("transaction markers refused; sending stopped",
                                extra={"kv": {"partition": f"{tp[0]}-{tp[1]}", "producer_id": producer_id,
                                              "error": err}})
                    return False
                elif err == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not self._partition_exists(tp):
                    pending.discard(tp)
                    on_done(tp)
            if pending:
                attempt += 1
                if attempt % 50 == 1:
                    log.info("transaction markers pending, retrying",
                             extra={"kv": {"producer_id": producer_id, "partitions": len(pending),
                                           "errors": sorted({e for e in results.values() if e})}})
                await asyncio.sleep(self.retry_backoff_ms / 1000.0)
        return True

    async def _send_remote(self, node: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                           commit: bool, tps: list[TopicPartition],
                           transaction_version: int = 0) -> dict[TopicPartition, ErrorCode | None]:
        """WriteTxnMarkers (v1) to the leader ``node`` through the replica manager's inter-broker requests
        (``broker_request``; one node has no other broker: the partition is not led here, retried)."""
        request = self.broker.replica_manager.broker_request
        body = write_txn_markers_request(producer_id, producer_epoch, coordinator_epoch, commit, tps,
                                         transaction_version)
        version = 2 if transaction_version >= 2 else 1  # v2 carries TransactionVersion (Kafka 4)
        try:
            response = await request(node, ApiKey.WRITE_TXN_MARKERS, version, body,
                                     timeout=self.request_timeout_ms / 1000.0)
        except Exception as exc:
            log.info("WriteTxnMarkers to a partition leader failed",
                     extra={"kv": {"node": node, "error": repr(exc)}})
            return dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION)
        errors = _errors_of_response(response, producer_id)
        return {tp: errors.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in tps}
