"""Transactions (KIP-98, KIP-447, KIP-890 part 1): the coordinator's APIs and the partition leader's side.

* InitProducerId with a transactional id (the idempotent path stays in ``producer_id.py``, which routes here),
  AddPartitionsToTxn (v0-3 from clients; v4-5 batched from brokers, with ``verify_only``), AddOffsetsToTxn,
  EndTxn, DescribeTransactions and ListTransactions answer from ``broker.txn_coordinator``
  (:mod:`tidelog.broker.txn.coordinator`).
* WriteTxnMarkers is the partition leader's side: the coordinator (of this or another broker) asks for COMMIT/ABORT
  markers in partitions this broker leads; answered per partition.

Errors per request version as Kafka's ``KafkaApis``: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for clients
that predate it (InitProducerId < 4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < 2). AddPartitionsToTxn checks
every partition first: an unknown one gets UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, and
nothing is added.
"""

from __future__ import annotations

import logging
from typing import Any

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.group import fit
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.broker.txn import tv2
from tidelog.broker.txn.markers import append_markers_locally
from tidelog.errors import ErrorCode, error_code
from tidelog.protocol.api_keys import ApiKey

log = logging.getLogger("tidelog.broker.txn")

TopicPartition = tuple[str, int]
WRITE, READ, DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
TXN_ID, TOPIC, GROUP, CLUSTER = (ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP,
                                 ResourceType.CLUSTER)


def _code(name: ErrorCode | None) -> int:
    return 0 if name is None else error_code(name)


def _fenced_for(version: int, first_with_fenced: int, err: ErrorCode | None) -> ErrorCode | None:
    """PRODUCER_FENCED (KIP-588) to INVALID_PRODUCER_EPOCH for request versions before ``first_with_fenced``."""
    if err == ErrorCode.PRODUCER_FENCED and version < first_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return err


def _coordinator(ctx: RequestContext) -> Any:
    return ctx.broker.txn_coordinator


# ------------------------------------------------------------------------------------------ InitProducerId


async def init_transactional_producer_id(ctx: RequestContext, request: dict) -> dict:
    """InitProducerId with a transactional id (routed here by ``producer_id.init_producer_id``)."""
    v = ctx.api_version

    def answer(err: ErrorCode | None, pid: int = -1, epoch: int = -1) -> dict:
        return {"throttle_time_ms": 0, "error_code": _code(_fenced_for(v, 4, err)), "producer_id": pid,
                "producer_epoch": epoch}

    if not ctx.authorize(WRITE, TXN_ID, str(request.get("transactional_id"))):
        return answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coord = _coordinator(ctx)
    if coord is None:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    pid = int(request.get("producer_id", -1)) if v >= 3 else -1
    epoch = int(request.get("producer_epoch", -1)) if v >= 3 else -1
    if (pid >= 0) != (epoch >= 0):
        return answer(ErrorCode.INVALID_REQUEST)  # Kafka: both or neither of producerId and producerEpoch
    res = await coord.init_producer_id(str(request.get("transactional_id")), int(request.get("transaction_timeout_ms", 0)),
                                       (pid, epoch) if pid >= 0 else None)
    return answer(res.error, res.producer_id, res.producer_epoch)


# ------------------------------------------------------------------------------------------ AddPartitionsToTxn


def _unknown_partitions(ctx: RequestContext, partitions: list[TopicPartition]) -> set[TopicPartition]:
    topics = ctx.broker.topics
    out = set()
    for tp in partitions:
        info = topics.get(tp[0]) if topics is not None else None
        if info is None or not 0 <= tp[1] < info.num_partitions:
            out.add(tp)
    return out


def _topic_results(errors: dict[TopicPartition, ErrorCode | None], version: int) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, p), err in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "partition_error_code": _code(_fenced_for(version, 2, err))})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


async def _add_or_verify(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
                         partitions: list[TopicPartition], verify_only: bool,
                         from_client: bool = True, client_transaction_version: int = 0
                         ) -> dict[TopicPartition, ErrorCode | None]:
    coord = _coordinator(ctx)
    if ctx.broker.authorizer is not None:
        # KafkaApis: a client's request (v3 and below) needs WRITE on the transactional id; every partition
        # WRITE on its topic (refused: TOPIC_AUTHORIZATION_FAILED, unknown ones UNKNOWN_TOPIC_OR_PARTITION, the
        # rest OPERATION_NOT_ATTEMPTED)
        if from_client and not ctx.authorize(WRITE, TXN_ID, transactional_id):
            return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        refused = {tp for tp in partitions if not ctx.authorize(WRITE, TOPIC, tp[0])}
        if refused:
            unknown = _unknown_partitions(ctx, partitions)
            return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in refused else
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions}
    unknown = _unknown_partitions(ctx, partitions)
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions}
    if coord is None:
        return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if verify_only:
        return coord.verify_errors(transactional_id, producer_id, producer_epoch, partitions)
    err = await coord.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                     client_transaction_version=client_transaction_version)
    return dict.fromkeys(partitions, err)


def _partitions_of(topics: Any) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for t in topics or ():
        for p in t.get("partitions") or ():
            tp = (str(t.get("name")), int(p))
            if tp not in out:
                out.append(tp)
    return out


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    if v < 4:
        partitions = _partitions_of(request.get("v3_and_below_topics"))
        errors = await _add_or_verify(ctx, str(request.get("v3_and_below_transactional_id") or ""),
                                      int(request.get("v3_and_below_producer_id", -1)),
                                      int(request.get("v3_and_below_producer_epoch", -1)), partitions, False)
        return fit(ApiKey.ADD_PARTITIONS_TO_TXN, v, {
            "throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(errors, v)})
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):  # v4+: from brokers only
        return fit(ApiKey.ADD_PARTITIONS_TO_TXN, v, {"throttle_time_ms": 0,
                                                      "error_code": _code(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                                      "results_by_transaction": []})
    results = []
    for txn in request.get("transactions") or ():
        tid = str(txn.get("transactional_id") or "")
        partitions = _partitions_of(txn.get("topics"))
        verify_only = bool(txn.get("verify_only"))
        # v5 without verify_only: a partition leader adds a transactions-v2 producer's partition (KIP-890 part 2)
        errors = await _add_or_verify(ctx, tid, int(txn.get("producer_id", -1)), int(txn.get("producer_epoch", -1)),
                                      partitions, verify_only, from_client=False,
                                      client_transaction_version=tv2.TV2 if v >= 5 and not verify_only else 0)
        results.append({"transactional_id": tid, "topic_results": _topic_results(errors, v)})
    return fit(ApiKey.ADD_PARTITIONS_TO_TXN, v, {"throttle_time_ms": 0, "error_code": 0,
                                                  "results_by_transaction": results})


# ------------------------------------------------------------------------------------------ AddOffsetsToTxn / EndTxn


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(WRITE, TXN_ID, str(request.get("transactional_id") or "")):
        return {"throttle_time_ms": 0, "error_code": _code(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
    if not ctx.authorize(READ, GROUP, str(request.get("group_id") or "")):
        return {"throttle_time_ms": 0, "error_code": _code(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    coord = _coordinator(ctx)
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": _code(ErrorCode.COORDINATOR_NOT_AVAILABLE)}
    tp = coord.offsets_partition(str(request.get("group_id") or ""))
    err = await coord.add_partitions(str(request.get("transactional_id") or ""), int(request.get("producer_id", -1)),
                                     int(request.get("producer_epoch", -1)), [tp])
    return {"throttle_time_ms": 0, "error_code": _code(_fenced_for(ctx.api_version, 2, err))}


@handles(ApiKey.END_TXN)
async def end_txn(ctx: RequestContext, request: dict) -> dict:
    coord = _coordinator(ctx)
    pid, epoch = -1, -1
    if not ctx.authorize(WRITE, TXN_ID, str(request.get("transactional_id") or "")):
        err: ErrorCode | None = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif coord is None:
        err = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif tv2.end_txn_version(ctx.api_version) >= tv2.TV2:  # v5: transactions v2, the epoch bumped and returned
        err, pid, epoch = await tv2.end_transaction(
            coord, str(request.get("transactional_id") or ""), int(request.get("producer_id", -1)),
            int(request.get("producer_epoch", -1)), bool(request.get("committed")))
    else:
        err = await coord.end_transaction(str(request.get("transactional_id") or ""),
                                          int(request.get("producer_id", -1)), int(request.get("producer_epoch", -1)),
                                          bool(request.get("committed")))
    return fit(ApiKey.END_TXN, ctx.api_version, {
        "throttle_time_ms": 0, "error_code": _code(_fenced_for(ctx.api_version, 2, err)),
        "producer_id": pid, "producer_epoch": epoch})


# ------------------------------------------------------------------------------------------ WriteTxnMarkers


@handles(ApiKey.WRITE_TXN_MARKERS)
async def write_txn_markers(ctx: RequestContext, request: dict) -> dict:
    """The partition leader's side: append each marker to the partitions named, answer per partition."""
    broker = ctx.broker
    timeout_ms = int(broker.config.get("request.timeout.ms"))
    out = []
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):  # inter-broker: nothing is written
        denied = _code(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {"markers": [{"producer_id": m.get("producer_id", -1), "topics": [
            {"name": t.get("name"), "partitions": [{"partition_index": p, "error_code": denied}
                                                   for p in t.get("partition_indexes") or ()]}
            for t in m.get("topics") or ()]} for m in request.get("markers") or ()]}
    for m in request.get("markers") or ():
        pid = int(m.get("producer_id", -1))
        partitions = _partitions_of([{"name": t.get("name"), "partitions": t.get("partition_indexes")}
                                     for t in m.get("topics") or ()])
        errors = await append_markers_locally(broker, pid, int(m.get("producer_epoch", -1)),
                                              int(m.get("coordinator_epoch", -1)), bool(m.get("transaction_result")),
                                              partitions, timeout_ms)
        by_topic: dict[str, list[dict]] = {}
        for (topic, p) in partitions:
            by_topic.setdefault(topic, []).append({"partition_index": p, "error_code": _code(errors.get((topic, p)))})
        out.append({"producer_id": pid, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {"markers": out}


# ------------------------------------------------------------------------------------------ Describe / List


@handles(ApiKey.DESCRIBE_TRANSACTIONS)
async def describe_transactions(ctx: RequestContext, request: dict) -> dict:
    coord = _coordinator(ctx)
    states = []
    for tid in request.get("transactional_ids") or ():
        if not ctx.authorize(DESCRIBE, TXN_ID, str(tid)):
            states.append({"error_code": _code(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
        elif coord is None:
            states.append({"error_code": _code(ErrorCode.COORDINATOR_NOT_AVAILABLE), "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
        else:
            state = coord.describe(str(tid))
            if ctx.broker.authorizer is not None and state.get("topics"):  # only topics it may DESCRIBE
                state["topics"] = [t for t in state["topics"] if ctx.authorize(DESCRIBE, TOPIC, t.get("topic", ""))]
            states.append(state)
    return {"throttle_time_ms": 0, "transaction_states": states}


@handles(ApiKey.LIST_TRANSACTIONS)
async def list_transactions(ctx: RequestContext, request: dict) -> dict:
    coord = _coordinator(ctx)
    v = ctx.api_version
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": _code(ErrorCode.COORDINATOR_NOT_AVAILABLE), "unknown_state_filters": [],
                "transaction_states": []}
    err, unknown, listed = coord.list_transactions(
        [str(s) for s in request.get("state_filters") or ()],
        [int(p) for p in request.get("producer_id_filters") or ()],
        int(request.get("duration_filter", -1)) if v >= 1 else -1,
        request.get("transactional_id_pattern") if v >= 2 else None)
    if ctx.broker.authorizer is not None:
        listed = [t for t in listed if ctx.authorize(DESCRIBE, TXN_ID, t.transactional_id)]
    return {"throttle_time_ms": 0, "error_code": _code(err), "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                    "transaction_state": t.state} for t in listed]}
