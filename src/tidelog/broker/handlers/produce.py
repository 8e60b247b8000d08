"""Produce: validation (inline or in the request pool, decompression budget), appends, acks and transactional verification."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidelog.broker.errors import PartitionError, error_of
from tidelog.broker.handlers import DeferredResponse, RequestContext, handles
from tidelog.broker.handlers.core_shared import (
    _TOPIC,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    NOT_ENOUGH_REPLICAS,
    PRODUCE,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    ZERO_UUID,
    _resolve_topic,
)
from tidelog.broker.purgatory import DelayedProduce
from tidelog.broker.security.acls import AclOperation, ResourceType
from tidelog.broker.topics import ADMIN_CLIENT_ID, INTERNAL_TOPICS
from tidelog.broker.txn import tv2
from tidelog.errors import ErrorCode, error_code
from tidelog.protocol.errors import error_for_code
from tidelog.records.batch import DEFAULT_MAX_DECOMPRESSED
from tidelog.records.errors import DecompressionLimitError, RecordError
from tidelog.records.header import (
    ATTRIBUTES_LOW_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    PRODUCER_EPOCH_FIELD,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_FIELD,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
)
from tidelog.storage.log.partition_log import PartitionLog
from tidelog.storage.log.validator import ValidatedBatch

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

#: a produce partition's record batch as the request decoder hands it over
Records = bytes | bytearray | memoryview


class CloseConnection(Exception):
    """Raised by a handler to close the connection without answering (acks=0 produce that failed)."""

    quiet = True


log = logging.getLogger("tidelog.broker.core")

# What validating a produce batch may cost, to decide where it runs (see
# docs/decisions/0021-request-execution.md). Measured on the 2-core VM (bench/loop_stall_bench.py --calibrate): a round trip to a worker thread
# costs 80-90 us; header + CRC-32C + record walk of an uncompressed batch ~0.06 ns per byte (1 MiB: ~65 us);
# decompression + walk per byte of records ~2.5 ns for gzip, ~0.4 snappy, 0.3-1.0 lz4, ~0.35 zstd. A compressed
# batch's output is bounded before it is inflated only by the codec's largest ratio (deflate 1032:1, lz4 ~255:1,
# snappy ~21:1, zstd ~32768:1 with RLE blocks) and by the 64 MiB cap (a 2 KB zstd bomb costs ~30 ms, a 64 KB
# gzip one ~60 ms). A request whose worst case costs more than one round trip to a worker is validated on a
# worker; the rest (uncompressed batches up to ~1.1 MB in total, lz4 and snappy batches of a few hundred bytes)
# stays on the loop, where the C fast path checks and writes in one call.
_NS_PER_OUTPUT_BYTE = (0.07, 2.7, 0.4, 1.0, 0.35)  # by codec id: none, gzip, snappy, lz4, zstd
_MAX_RATIO = (1, 1032, 22, 256, 32768)
INLINE_VALIDATION_NS = 80_000


def validation_cost_ns(records: Records) -> float:
    """Worst-case cost of validating one produce batch (header only: nothing is decompressed)."""
    n = len(records)
    if n < RECORD_BATCH_OVERHEAD:
        return 0.0
    codec = records[ATTRIBUTES_LOW_OFFSET] & COMPRESSION_MASK
    if codec > 4:
        return 0.0  # refused from the header
    return min(n * _MAX_RATIO[codec], DEFAULT_MAX_DECOMPRESSED) * _NS_PER_OUTPUT_BYTE[codec]


class _ProducePartition:
    __slots__ = ("guard", "index", "name", "plog", "pr", "records", "validated")

    def __init__(self, name: str, index: int, plog: PartitionLog, records: Records, pr: dict) -> None:
        self.name = name
        self.index = index
        self.plog = plog
        self.records = records
        self.pr = pr
        self.validated: ValidatedBatch | BaseException | _NeedsHeavySlot | None = None  # or the exception its validation raised
        self.guard: object | None = None  # KIP-890: a transactional batch's verification guard (see produce)


class _NeedsHeavySlot:
    """The mark of a batch whose light pass stopped at the unbudgeted bytes: validate it under a heavy slot."""

    __slots__ = ()


_NEEDS_HEAVY_SLOT = _NeedsHeavySlot()


def _validate_all(parts: list[_ProducePartition], now_ms: int, unbudgeted: int | None = None) -> bool:
    """On a worker thread: every batch's checks and rewrites (validate_leader_batch, nothing left to the
    writer); each result or exception is kept for the append on the loop. ``unbudgeted``: the light pass (see
    ``request_pool.DecompressionBudget``): the request's batches may inflate to that many bytes in all; a batch
    that would go past it (and every compressed batch after it) is marked ``_NEEDS_HEAVY_SLOT`` instead. True
    when one was."""
    left = DEFAULT_MAX_DECOMPRESSED if unbudgeted is None else unbudgeted
    deferred = False
    for pp in parts:
        limit = min(left, DEFAULT_MAX_DECOMPRESSED)
        try:
            pp.validated = v = pp.plog.validate_leader_batch(pp.records, now_ms=now_ms, reject_control_batches=True,
                                                             check_all=True, max_decompressed=limit)
            if unbudgeted is not None:
                left -= v.decompressed
        except DecompressionLimitError as exc:
            if limit < DEFAULT_MAX_DECOMPRESSED:
                pp.validated = _NEEDS_HEAVY_SLOT
                deferred = True
                left = 0  # the rest of the request's compressed batches go heavy too
            else:
                pp.validated = _detached(exc)
        except RecordError as exc:
            pp.validated = _detached(exc)
        except Exception as exc:
            pp.validated = exc
    return deferred


def _detached(exc: BaseException) -> BaseException:
    """A record error without its traceback (and its context's), kept until the request is answered: its frames
    held the decompressed chunks (up to 64 MiB a batch), so a request of 107 bombs kept 7 GB alive until its
    answer (four at once: the broker killed by the kernel's OOM killer)."""
    seen: BaseException | None = exc
    while seen is not None:
        seen.__traceback__ = None
        seen = seen.__context__
    return exc


@handles(PRODUCE)
async def produce(ctx: RequestContext, request: dict) -> dict | DeferredResponse | None:
    broker = ctx.broker
    acks = request.get("acks", 1)
    timeout_ms = request.get("timeout_ms", 30000)
    now_ms = time.time_ns() // 1_000_000
    responses: list[dict] = []
    appended: dict[tuple[str, int], int] = {}  # tp -> required offset for acks=-1
    results: dict[tuple[str, int], dict] = {}
    any_error = False
    todo: list[_ProducePartition] = []
    cost = 0.0
    ordered = False  # an earlier request still holds one of these partitions (AppendSequencer)
    sequencer = broker.append_sequencer
    txn_parts: list[_ProducePartition] | None = None  # partitions with a transactional batch (KIP-890 check)
    denied: set[str] | None = None
    if broker.authorizer is not None:  # KafkaApis: WRITE on the transactional id first, then WRITE per topic
        if _has_transactional_batch(request):
            txn_id = request.get("transactional_id")
            if txn_id is None or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
                if acks == 0:
                    raise CloseConnection("produce: transactional id authorization failed")
                return _produce_refused(request, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = set()
    for t in request.get("topic_data") or ():
        # v13 (KIP-516) names topics by id: resolved to the name here (UNKNOWN_TOPIC_ID when no topic has it, before
        # any ACL check, as KafkaApis), then WRITE is checked on the name as for v3-12
        name, tid, topic_err = _resolve_topic(ctx, t)
        if denied is not None and not topic_err and (name in denied or not ctx.authorize(AclOperation.WRITE, _TOPIC,
                                                                                          name or "")):
            denied.add(name or "")
            topic_err = TOPIC_AUTHORIZATION_FAILED
        parts_out: list[dict] = []
        responses.append({"name": name or "", "topic_id": tid, "partition_responses": parts_out})
        for pd in t.get("partition_data") or ():
            pr = _partition_response(pd.get("index", 0))
            parts_out.append(pr)
            pp = _checked_partition(ctx, name, topic_err, acks, pd.get("records"), pr)
            if pp is None:
                any_error = True
                continue
            if (
                len(pp.records) >= RECORD_BATCH_OVERHEAD
                and pp.records[ATTRIBUTES_LOW_OFFSET] & (TRANSACTIONAL_MASK | CONTROL_MASK) == TRANSACTIONAL_MASK
            ):  # transactional, not control: KIP-890
                if txn_parts is None:
                    txn_parts = []
                txn_parts.append(pp)
            todo.append(pp)
            cost += _validation_cost(pp)
            ordered = ordered or sequencer.busy((pp.name, pp.index))

    if txn_parts is not None:
        # transactional batches of a producer with no open transaction on the partition: verified with the
        # transaction coordinator before anything is appended (refused ones are dropped from todo)
        refused = await _verify_transactional(ctx, request.get("transactional_id"), txn_parts)
        if refused:
            any_error = True
            todo = [pp for pp in todo if pp not in refused]
            cost = sum(validation_cost_ns(pp.records) for pp in todo) if cost != float("inf") else cost
            ordered = any(sequencer.busy((pp.name, pp.index)) for pp in todo)

    any_error |= await _append_all(ctx, todo, now_ms, cost, ordered, appended, results)
    _record_produce_bytes(ctx)
    if acks == 0:
        if any_error:
            raise CloseConnection("acks=0 produce failed")
        return None
    body = {"responses": responses, "throttle_time_ms": 0}
    return await _wait_for_acks(ctx, acks, timeout_ms, appended, results, body)


async def produce_one(ctx: RequestContext, acks: int, timeout_ms: int, name: str | None, index: int,
                      records: Records | None, topic_id: bytes | None = None) -> dict | DeferredResponse:
    """The Produce of one partition of one topic, non-transactional, acks 1 or -1 (the server's fast lane, which
    parsed the request in C and encodes the response in C: see ``Connection.process``). The same steps as
    :func:`produce`, through the same functions; returns the partition's response entry, or with ``ctx.defer``
    a :class:`DeferredResponse` whose ``finish`` gives the whole response body (:func:`produce_one_body`).
    ``topic_id`` (Produce v13): the id the request named the topic by, ``name`` its topic's name, None when no topic
    has that id (UNKNOWN_TOPIC_ID, before any ACL check, as :func:`produce`)."""
    broker = ctx.broker
    now_ms = time.time_ns() // 1_000_000
    topic_err = NONE
    if name is None:
        topic_err = UNKNOWN_TOPIC_ID
    elif broker.authorizer is not None and not ctx.authorize(AclOperation.WRITE, _TOPIC, name):
        topic_err = TOPIC_AUTHORIZATION_FAILED
    pr = _partition_response(index)
    pp = _checked_partition(ctx, name, topic_err, acks, records, pr)
    appended: dict[tuple[str, int], int] = {}
    results: dict[tuple[str, int], dict] = {}
    if pp is not None:
        cost = _validation_cost(pp)
        ordered = broker.append_sequencer.busy((pp.name, index))
        if cost > INLINE_VALIDATION_NS or ordered:
            await _append_all(ctx, [pp], now_ms, cost, ordered, appended, results)
        else:  # the common case, _append_all's inline branch without its coroutine (issue 30, goal 3)
            _append_one(ctx, pp, now_ms, appended, results)
    if broker.client_quotas.enabled:
        _record_produce_bytes(ctx)
    # acks=-1 whose high watermark already covers the batch (one node, always; Kafka's tryCompleteElseWatch
    # completes at once): answered now, without the response body a waiting produce needs (issue 30, goal 3)
    if acks == -1 and appended and not _replicated(broker, appended):
        done = await _wait_for_acks(ctx, acks, timeout_ms, appended, results,
                                    produce_one_body(name or "", pr, 0, topic_id))
        if type(done) is DeferredResponse:
            return done
    return pr


def produce_one_body(name: str, pr: dict, throttle_ms: int, topic_id: bytes | None = None) -> dict:
    """The Produce response body of :func:`produce_one`'s one partition (for the generic encoder); v13 answers
    with ``topic_id``."""
    topic: dict = {"name": name, "partition_responses": [pr]} if topic_id is None else {
        "topic_id": topic_id, "partition_responses": [pr]}
    return {"responses": [topic], "throttle_time_ms": throttle_ms}


def _partition_response(index: int) -> dict:
    return {
        "index": index,
        "error_code": NONE,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": None,
    }


def _checked_partition(ctx: RequestContext, name: str | None, topic_err: int, acks: int, records: Records | None,
                       pr: dict) -> _ProducePartition | None:
    """One partition's checks before its append (topic error, acks, internal topic, leadership, min ISR, records
    present), in Kafka's order. None when one failed (its error is in ``pr``)."""
    index = pr["index"]
    if topic_err:
        pr["error_code"] = topic_err
        return None
    if acks not in (0, 1, -1):
        pr["error_code"] = INVALID_REQUIRED_ACKS
        return None
    if name in INTERNAL_TOPICS and ctx.client_id != ADMIN_CLIENT_ID:
        pr["error_code"] = INVALID_TOPIC_EXCEPTION
        pr["error_message"] = f"Cannot append to internal topic {name}"
        return None
    broker = ctx.broker
    try:
        assert name is not None
        plog = broker.leader_log(name, index)
    except Exception as exc:
        _produce_error(ctx, pr, name, index, exc)
        return None
    if acks == -1 and len(broker.isr(name, index)) < plog.config.min_insync_replicas:
        pr["error_code"] = NOT_ENOUGH_REPLICAS
        pr["error_message"] = (
            f"The size of the current ISR {len(broker.isr(name, index))} is insufficient to satisfy "
            f"the min.isr requirement of {plog.config.min_insync_replicas} for partition {name}-{index}"
        )
        return None
    if records is None or len(records) == 0:
        pr["error_code"] = INVALID_RECORD
        pr["error_message"] = (
            "Produce requests with version 3 or later must have at least one record batch per partition."
        )
        return None
    return _ProducePartition(name, index, plog, records, pr)


def _validation_cost(pp: _ProducePartition) -> float:
    records = pp.records
    if len(records) >= RECORD_BATCH_OVERHEAD and pp.plog.recompresses(
        records[ATTRIBUTES_LOW_OFFSET] & COMPRESSION_MASK
    ):
        return float("inf")  # rebuilt with the topic's codec: per-record Python
    return validation_cost_ns(records)


async def _append_all(ctx: RequestContext, todo: list[_ProducePartition], now_ms: int, cost: float, ordered: bool,
                      appended: dict, results: dict) -> bool:
    """Append the checked partitions: on the loop, or validated on a worker first (``cost`` above one round trip
    to it) and, when a partition is still held by an earlier request (``ordered``), in arrival order. True when
    one failed."""
    any_error = False
    if cost > INLINE_VALIDATION_NS or ordered:
        sequencer = ctx.broker.append_sequencer
        # tickets for every partition before the first await: appends keep the order requests arrived in
        tickets = [sequencer.ticket((pp.name, pp.index)) for pp in todo]
        try:
            if cost > INLINE_VALIDATION_NS:
                broker = ctx.broker
                budget = broker.decompression_budget
                if await broker.request_pool.run(_validate_all, todo, now_ms, budget.unbudgeted_bytes):
                    # past the light pass's bytes: again under one of the broker-wide heavy slots
                    heavy = [pp for pp in todo if pp.validated is _NEEDS_HEAVY_SLOT]
                    await budget.run(_validate_all, heavy, now_ms)
            for pp, ticket in zip(todo, tickets, strict=True):
                await ticket.turn()
                try:
                    any_error |= _append_one(ctx, pp, now_ms, appended, results)
                finally:
                    ticket.release()
        finally:
            for ticket in tickets:
                ticket.release()
    else:
        for pp in todo:
            any_error |= _append_one(ctx, pp, now_ms, appended, results)
    return any_error


def _record_produce_bytes(ctx: RequestContext) -> None:
    """producer_byte_rate: the request's bytes (the server writes the throttle, then mutes)."""
    quotas = ctx.broker.client_quotas
    if quotas.enabled:
        ctx.throttle_ms = quotas.record(quotas.produce, ctx.principal, ctx.client_id, ctx.request_size)
        if ctx.throttle_ms:
            quotas.throttled(quotas.produce, ctx.principal, ctx.client_id, ctx.throttle_ms)


async def _wait_for_acks(ctx: RequestContext, acks: int, timeout_ms: int, appended: dict, results: dict,
                         body: dict) -> dict | DeferredResponse:
    """acks=-1: until the high watermark covers every appended batch (at once when it already does), or the
    timeout; a partition that failed meanwhile has its error in its response entry. Returns ``body``, or with
    ``ctx.defer`` (pipelined produce, see the server) a :class:`DeferredResponse` that finishes it later."""
    broker = ctx.broker
    if acks == -1 and appended and not _replicated(broker, appended):
        op = DelayedProduce(appended, timeout_ms, broker.high_watermark)
        broker.purgatory.produce.try_complete_else_watch(op, list(appended))
        if ctx.defer:  # the appends are done: the connection reads its next request while this one waits
            return DeferredResponse(op, functools.partial(_acked, body, results))
        waited = time.perf_counter()
        status = await op.wait()
        ctx.wait_s = time.perf_counter() - waited  # not handler time (request_percentage)
        _acked(body, results, status)
    return body


def _acked(body: dict, results: dict[tuple[str, int], dict], status: Mapping[tuple[str, int], ErrorCode | None] | BaseException) -> dict:
    """The acks=-1 answer once its DelayedProduce completed: each partition still short gets its error. A deferred
    answer (ctx.defer) whose operation failed gets UNKNOWN_SERVER_ERROR in each partition it appended to."""
    if isinstance(status, BaseException):
        status = dict.fromkeys(results, ErrorCode.UNKNOWN_SERVER_ERROR)
    for tp, err in status.items():
        if err is not None:
            results[tp]["error_code"] = error_code(err)
    return body


def _replicated(broker: Broker, appended: dict[tuple[str, int], int]) -> bool:
    """Every partition's high watermark already covers its batch (on one node, always, right after the append):
    acks=-1 is satisfied without a DelayedProduce, as Kafka's ``tryCompleteElseWatch`` completes at once. False
    when one is short or cannot be read (the DelayedProduce then waits, or reports the partition's error)."""
    hw = broker.high_watermark
    try:
        for tp, required in appended.items():
            if hw(tp) < required:
                return False
    except Exception:
        return False
    return True


def _has_transactional_batch(request: dict) -> bool:
    for t in request.get("topic_data") or ():
        for pd in t.get("partition_data") or ():
            records = pd.get("records")
            if (
                records is not None
                and len(records) >= RECORD_BATCH_OVERHEAD
                and records[ATTRIBUTES_LOW_OFFSET] & TRANSACTIONAL_MASK
            ):
                return True
    return False


def _produce_refused(request: dict, code: int) -> dict:
    """Kafka's ProduceRequest.getErrorResponse: every partition answered ``code``."""
    return {"throttle_time_ms": 0, "responses": [
        {"name": t.get("name", ""), "topic_id": t.get("topic_id", ZERO_UUID), "partition_responses": [
            {"index": pd.get("index", 0), "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
             "log_start_offset": -1, "record_errors": [], "error_message": None}
            for pd in t.get("partition_data") or ()]}
        for t in request.get("topic_data") or ()]}


# KIP-890 part 1: a failed verification as Kafka's ReplicaManager / AddPartitionsToTxnManager answer it. Retriable
# coordinator errors become NOT_ENOUGH_REPLICAS (older clients retry it without a metadata refresh);
# TRANSACTION_ABORTABLE only from Produce v11 on (INVALID_TXN_STATE before); PRODUCER_FENCED as INVALID_PRODUCER_EPOCH.
_VERIFY_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


_NOT_VERIFIED = object()  # the guard of a batch that joined a transaction open at the time of the produce


def _verification_error(err: ErrorCode, version: int) -> ErrorCode:
    if err in _VERIFY_RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if err == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if err == ErrorCode.TRANSACTION_ABORTABLE and version < 11:
        return ErrorCode.INVALID_TXN_STATE
    return err


async def _verify_transactional(ctx: RequestContext, transactional_id: str | None,
                                parts: list[_ProducePartition]) -> set[_ProducePartition]:
    """KIP-890: each transactional batch whose producer has no open transaction on its partition must be in the
    producer's transaction at the coordinator (``verify_transaction``; a local call on one node). Returns the
    partitions refused (their response entries carry the error)."""
    coord = ctx.broker.txn_coordinator
    # transactions v2 (Produce v12, KIP-890 part 2): the partition is added to the transaction here, whatever
    # transaction.partition.verification.enable says (the client sends no AddPartitionsToTxn)
    implicit = tv2.implicit_add(ctx.broker, ctx.api_version, tv2.PRODUCE_V2_VERSION)
    if coord is None or not (coord.verification_enabled or implicit):
        return set()
    by_producer: dict[tuple[int, int], list[_ProducePartition]] = {}
    for pp in parts:
        rec = pp.records
        (pid,) = PRODUCER_ID_FIELD.unpack_from(rec, PRODUCER_ID_OFFSET)
        ps = pp.plog.producer_state
        if ps is not None and implicit and ps.has_open_transaction(pid):
            # v2: the open transaction is this batch's only at the same epoch (Kafka's hasOngoingTransaction
            # with the epoch); a batch of the bumped epoch starts the next transaction and must be added first
            entry = ps.last_entry(pid)
            if entry is not None and entry.producer_epoch != int.from_bytes(rec[51:53], "big", signed=True):
                ps.clear_verification(pid)
                pp.guard = ps.start_verification(pid)
                by_producer.setdefault((pid, int.from_bytes(rec[51:53], "big", signed=True)), []).append(pp)
                continue
        if ps is None or ps.has_open_transaction(pid):
            # verified when its transaction began on this partition; should that transaction end before the
            # append, the batch is refused there (a guard that is never live)
            pp.guard = _NOT_VERIFIED
            continue
        # Kafka's VerificationGuard: taken before asking the coordinator, checked at the append, cleared by a
        # marker in between, so a batch verified in a transaction that then ended cannot open a new one
        pp.guard = ps.start_verification(pid)
        (epoch,) = PRODUCER_EPOCH_FIELD.unpack_from(rec, PRODUCER_EPOCH_OFFSET)
        by_producer.setdefault((pid, epoch), []).append(pp)
    refused: set[_ProducePartition] = set()
    for (pid, epoch), pps in by_producer.items():
        if not transactional_id:
            errors = dict.fromkeys(((pp.name, pp.index) for pp in pps), ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            tps = [(pp.name, pp.index) for pp in pps]
            if implicit:
                codes = await tv2.add_partitions(coord, transactional_id, pid, epoch, tps)  # KIP-890 part 2
            else:
                codes = await coord.verify_transaction(transactional_id, pid, epoch, tps)
            errors = {tp: error_code(error_for_code(c).name) for tp, c in codes.items() if c}
        for pp in pps:
            err = errors.get((pp.name, pp.index))
            if err is None:
                continue
            name = _verification_error(err, ctx.api_version)
            pp.pr["error_code"] = error_code(name)
            pp.pr["error_message"] = (f"Partition {pp.name}-{pp.index} was not verified in the transaction: {err}"
                                      if ctx.api_version >= 8 else None)
            refused.add(pp)
            if pp.plog.producer_state is not None:
                pp.plog.producer_state.clear_verification(pid)
    if refused:
        log.info("transactional produce refused: partition not in the transaction",
                 extra={"kv": {"transactional_id": transactional_id, "partitions": len(refused),
                               "client_id": ctx.client_id}})
    return refused


def _produce_error(ctx: RequestContext, pr: dict, name: str | None, index: int, exc: BaseException) -> None:
    code, message = error_of(exc)
    pr["error_code"] = code
    pr["error_message"] = message if ctx.api_version >= 8 else None
    if code != UNKNOWN_TOPIC_OR_PARTITION:
        log.info(
            "produce rejected",
            extra={"kv": {"topic": name, "partition": index, "error": code, "reason": message,
                          "client_id": ctx.client_id}},
        )


def _append_one(ctx: RequestContext, pp: _ProducePartition, now_ms: int, appended: dict, results: dict) -> bool:
    """Append one partition's batch on the loop (validated already on a worker, or checked here as it is written).
    Returns True on an error (answered in the partition's entry)."""
    broker = ctx.broker
    name, index, pr = pp.name, pp.index, pp.pr
    try:
        validated = pp.validated
        if validated is None:
            info = pp.plog.append_as_leader(pp.records, leader_epoch=broker.leader_epoch(name, index), now_ms=now_ms,
                                            reject_control_batches=True, verification_guard=pp.guard)
        else:
            if isinstance(validated, Exception):
                raise validated
            assert isinstance(validated, ValidatedBatch)  # a heavy batch was validated again under a slot
            # leadership may have moved (or the topic gone) while the batch was validated on a worker
            plog = broker.leader_log(name, index)
            if plog is not pp.plog:
                raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{name}-{index} changed while the batch was checked")
            info = plog.append_validated(validated, leader_epoch=broker.leader_epoch(name, index),
                                         verification_guard=pp.guard)
    except Exception as exc:
        err: BaseException = exc
        if broker.topics.get_log(name, index) is not pp.plog:  # deleted meanwhile (on a worker thread)
            err = PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{name}-{index} was deleted")
        _produce_error(ctx, pr, name, index, err)
        return True
    pr["base_offset"] = info.first_offset
    pr["log_append_time_ms"] = info.log_append_time
    pr["log_start_offset"] = info.log_start_offset
    tp = (name, index)
    if not info.duplicate:
        broker.metrics.record_produce(name, info.size, info.record_count)
        broker.on_append(tp, pp.plog)
    appended[tp] = info.last_offset + 1
    results[tp] = pr
    return False


