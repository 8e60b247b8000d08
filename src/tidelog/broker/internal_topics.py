"""Appending to the coordinators' internal topics (``__consumer_offsets``, ``__transaction_state``).

A coordinator writes its state as one batch to one partition of its topic and answers the client only once the ISR
has it (Kafka's ``ReplicaManager.appendRecords`` with ``acks=-1`` and ``internalTopicsAllowed``):
:func:`append_and_wait` does that for both coordinators, on the network loop (or with the append on a worker
thread, ``off_loop``), and returns the Kafka error name of a failure for the caller to map (each coordinator maps
them its own way, as Kafka's ``GroupMetadataManager`` and ``TransactionStateManager`` do).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tidelog.broker.purgatory import DelayedProduce
from tidelog.errors import ApiError, ErrorCode
from tidelog.records.batch import BatchHeader, Record, build_batch, decode_batches
from tidelog.records.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.storage.log.partition_log import PartitionLog

log = logging.getLogger("tidelog.broker.internal_topics")


async def append_and_wait(broker: Broker, topic: str, partition: int, entries: list[tuple[bytes, bytes | None]],
                          timeout_ms: int, *, off_loop: bool = False, producer_id: int = NO_PRODUCER_ID,
                          producer_epoch: int = NO_PRODUCER_EPOCH,
                          on_appended: Callable[[int], None] | None = None) -> ErrorCode | None:
    """Append ``(key, value)`` records as one batch to ``topic-partition`` as its leader and wait until the ISR has
    it (``timeout_ms``). ``None`` on success, else the Kafka error name (``NOT_ENOUGH_REPLICAS`` when the ISR is
    below the partition's ``min.insync.replicas``; an exception without a Kafka error gives its ``repr``).
    ``off_loop``: build and append the batch in a worker thread (large loads). ``producer_id`` >= 0: a
    transactional batch of that producer, as Kafka's coordinators write one (TxnOffsetCommit): producer id and epoch,
    transactional attribute, base sequence -1 (``coordinator_origin``). ``on_appended(first offset)`` is called on
    the loop once the batch is in the local log, before the wait for the ISR."""
    if not entries:
        return None
    tp = (topic, partition)
    txn = producer_id >= 0

    def build() -> bytes:
        if not txn:
            return build_batch(list(entries))
        return build_batch(list(entries), producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=NO_SEQUENCE, is_transactional=True)

    try:
        plog = broker.leader_log(*tp)
        if len(broker.isr(*tp)) < plog.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        epoch = broker.leader_epoch(*tp)
        if off_loop:
            appended: Any = await asyncio.to_thread(
                lambda: plog.append_as_leader(build(), leader_epoch=epoch, coordinator_origin=txn))
        else:
            appended = plog.append_as_leader(build(), leader_epoch=epoch, coordinator_origin=txn)
        broker.on_append(tp, plog)
    except Exception as exc:
        if isinstance(exc, ApiError):
            return exc.kafka_error
        log.warning("internal topic append failed", extra={"kv": {"topic": topic, "error": repr(exc)}})
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if on_appended is not None:
        on_appended(appended.first_offset)
    status = await wait_replicated(broker, {tp: appended.last_offset + 1}, timeout_ms)
    return status.get(tp)


async def wait_replicated(broker: Broker, required: dict[tuple[str, int], int],
                          timeout_ms: int) -> dict[tuple[str, int], ErrorCode | None]:
    """Wait until each partition's high watermark reaches its required offset (acks=-1): ``{tp: None | error
    name}``, REQUEST_TIMED_OUT for a partition still short after ``timeout_ms``."""
    op = DelayedProduce(required, timeout_ms, broker.high_watermark)
    broker.purgatory.produce.try_complete_else_watch(op, list(required))
    return await op.wait()


#: how much of an internal topic's log one read takes while it is replayed into memory
LOAD_CHUNK = 1 << 20


def replay_log(lg: PartitionLog) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Blocking: every batch of an internal topic's partition (``__consumer_offsets``, ``__transaction_state``) from
    its log start to its end, as ``decode_batches`` yields them, read ``LOAD_CHUNK`` at a time; the coordinators'
    loaders replay these into memory."""
    offset, end = lg.log_start_offset, lg.log_end_offset
    while offset < end:
        info = lg.read(offset, LOAD_CHUNK, max_offset=end, min_one_batch=True)
        if info.size == 0:
            return
        advanced = False
        for _, header, records in decode_batches(info.read_bytes(), max_decompressed=64 << 20):
            offset = max(offset, header.last_offset + 1)
            advanced = True
            yield header, records
        if not advanced:
            return
