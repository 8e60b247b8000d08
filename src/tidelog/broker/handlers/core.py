"""Core APIs: ApiVersions, Metadata, Produce, Fetch, ListOffsets.

Kafka behaviours reproduced (sources: Kafka ``KafkaApis``, ``ReplicaManager``, ``Partition``, ``UnifiedLog``):

* ApiVersions advertises Produce with min version 0 although v0-2 are rejected (KAFKA-18659: librdkafka
  < 2.11.1 silently disables compression otherwise). An unsupported ApiVersions version is answered by the
  server in v0 (KIP-511).
* Metadata: ``topics`` null = all topics (v0: empty list = all). An unknown topic with
  ``allow_auto_topic_creation`` and ``auto.create.topics.enable`` is created at once with broker defaults and
  returned in the same response (creation is synchronous here, so there is no window in which Kafka would
  answer LEADER_NOT_AVAILABLE). Invalid names: INVALID_TOPIC_EXCEPTION.
* Produce: ``acks`` 0 (no response; on error the connection is closed, as Kafka does so the producer
  notices), 1, -1 (through :class:`DelayedProduce`: completes once the HW covers the batch; with one node at
  once). Other acks: INVALID_REQUIRED_ACKS. ``min.insync.replicas`` above the ISR size with acks=-1:
  NOT_ENOUGH_REPLICAS and nothing is appended. Duplicates (idempotent retries) answer the original offsets.
* Fetch: parsed here, read by the read service (:mod:`tidelog.broker.fetch`, Kafka's ``readFromLog``), the one
  read path for consumers (up to the HW, or the LSO for read_committed) and followers (up to the LEO; without
  replication, i.e. on a single node, answered NOT_LEADER_OR_FOLLOWER); KIP-74: the first batch of the
  response is returned whole even if larger than the limits; long poll through :class:`DelayedFetch`.
  Incremental fetch sessions (KIP-227, :mod:`tidelog.broker.fetch_session`) for consumers: epoch 0 opens one,
  later epochs list only changed partitions and get only partitions with news; sessionless requests (epoch -1)
  as before.
* ListOffsets: -1 latest (HW), -2 earliest (log start), -3 max timestamp, -4 earliest local (= log start),
  -5 latest tiered and -6 earliest pending upload (-1: no tiered storage); by timestamp only offsets below the HW
  are returned. A sentinel sent in a version older than its own (-3: v7, -4: v8, -5: v9, -6: v11) and an unknown
  negative timestamp are UNSUPPORTED_VERSION for that partition, as Kafka's ReplicaManager answers.

All storage/record exceptions become error codes in one place, :func:`tidelog.broker.errors.error_of`.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from tidelog.broker.errors import PartitionError, code_of, error_of
from tidelog.broker.features import api_versions_fields
from tidelog.broker.fetch import MAX_INT32, FetchParams, FetchPartition, last_stable_offset, response_entry
from tidelog.broker.fetch_session import INITIAL_EPOCH, CachedPartition
from tidelog.broker.handlers import DeferredResponse, RequestContext, handles, topic_change
from tidelog.broker.purgatory import DelayedProduce
from tidelog.broker.quotas import fetch_throttle
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.broker.topics import ADMIN_CLIENT_ID, INTERNAL_TOPICS, TopicError
from tidelog.protocol import codec
from tidelog.protocol.errors import error_for_code
from tidelog.records.batch import DEFAULT_MAX_DECOMPRESSED
from tidelog.records.errors import DecompressionLimitError, RecordError

log = logging.getLogger("tidelog.broker.core")

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
INVALID_RECORD = 87
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_TOPIC_ID = 100
TOPIC_AUTHORIZATION_FAILED = 29
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
_TOPIC = ResourceType.TOPIC
_CLUSTER = ResourceType.CLUSTER

NO_LEADER = -1  # Kafka's MetadataResponse.NO_LEADER_ID
LEADER_EPOCH = 0  # one node, never re-elected: epoch 0 (the epoch stamped into batches)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# Kafka AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. No ACLs: everything is allowed.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

ZERO_UUID = bytes(16)


def _uuid_bytes(value: Any) -> bytes:
    if value is None:
        return ZERO_UUID
    if isinstance(value, uuid.UUID):
        return value.bytes
    return bytes(value)


def _leader_epoch_error(requested: int | None, current: int = LEADER_EPOCH) -> int:
    """Kafka's check of ``current_leader_epoch`` (-1 = not given) against the partition's epoch."""
    if requested is None or requested < 0 or requested == current:
        return NONE
    return FENCED_LEADER_EPOCH if requested < current else UNKNOWN_LEADER_EPOCH


# ------------------------------------------------------------------------------------------------------------
# ApiVersions


def _supported_versions() -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for key, rng in {**codec.SUPPORTED_VERSIONS, **codec.GROUP_API_VERSIONS}.items():
        if isinstance(rng, tuple):
            lo, hi = rng
        else:
            lo = getattr(rng, "min", getattr(rng, "min_version", None))
            hi = getattr(rng, "max", getattr(rng, "max_version", None))
        out[int(key)] = (int(lo), int(hi))  # type: ignore[arg-type]
    return out


_API_LISTS: dict[frozenset[int], list[dict]] = {}


def api_versions_list(handlers: Mapping[int, Any]) -> list[dict]:
    """The ApiVersions ``api_keys`` of a broker whose handler table is ``handlers``: every API with a handler and
    a codec, Produce advertised from 0. Built once per set of APIs."""
    keys = frozenset(handlers)
    entries = _API_LISTS.get(keys)
    if entries is None:
        supported = _supported_versions()
        entries = []
        for key in sorted(keys):
            if key not in supported:
                continue
            lo, hi = supported[key]
            if key == PRODUCE:
                lo = 0  # KAFKA-18659: librdkafka < 2.11.1 needs Produce min 0 to enable compression
            entries.append({"api_key": key, "min_version": lo, "max_version": hi})
        _API_LISTS[keys] = entries
    return entries


@handles(API_VERSIONS)
async def api_versions(ctx: RequestContext, request: dict) -> dict:
    handlers = ctx.broker.handlers
    # v3+: SupportedFeatures / FinalizedFeatures (broker/features.py); v4 lists features whose minimum is 0 too
    return {"error_code": NONE, "api_keys": api_versions_list(handlers), "throttle_time_ms": 0,
            **api_versions_fields(handlers, ctx.api_version)}


# ------------------------------------------------------------------------------------------------------------
# Metadata


def partition_entries(broker: Any, name: str, num_partitions: int, v: int, start: int = 0,
                      stop: int | None = None) -> list[dict]:
    """Metadata's partition entries of a topic's partitions ``start`` up to ``stop`` (default: all)."""
    node = broker.node_id
    get_log = broker.topics.get_log
    parts = []
    for p in range(start, num_partitions if stop is None else min(stop, num_partitions)):
        cluster_view = broker.partition_metadata(name, p)
        if cluster_view is not None:
            parts.append(cluster_view)
            continue
        log_ = get_log(name, p)
        if log_ is not None and log_.offline:
            # its log directory is offline (JBOD): Kafka's MetadataCache answers a partition without a live leader
            # with LEADER_NOT_AVAILABLE and leader -1, this replica among the offline ones, so clients hold their
            # records for it instead of sending them here (they get KAFKA_STORAGE_ERROR until the restart)
            parts.append({"error_code": LEADER_NOT_AVAILABLE, "partition_index": p, "leader_id": NO_LEADER,
                          "leader_epoch": LEADER_EPOCH, "replica_nodes": [node], "isr_nodes": [node],
                          "offline_replicas": [node]})
            continue
        parts.append(
            {
                "error_code": NONE,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [node],
                "isr_nodes": list(broker.isr(name, p)),
                "offline_replicas": [],
            }
        )
    return parts


def topic_operations(ctx: RequestContext, name: str) -> int:
    """KIP-430: the operations the request's principal may do on a topic (all without an authorizer)."""
    auth = ctx.broker.authorizer
    return TOPIC_OPERATIONS if auth is None else auth.authorized_operations(ctx.principal, ctx.client_host, _TOPIC,
                                                                            name)


def _topic_metadata(broker: Any, info: Any, v: int, include_ops: bool, ctx: RequestContext | None = None) -> dict:
    ops = AUTHORIZED_OPERATIONS_OMITTED
    if include_ops:
        ops = topic_operations(ctx, info.name)  # type: ignore[arg-type]
    return {
        "error_code": NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.name in INTERNAL_TOPICS,
        "partitions": partition_entries(broker, info.name, info.num_partitions, v),
        "topic_authorized_operations": ops,
    }


def _topic_error(name: str | None, code: int, topic_id: bytes = ZERO_UUID) -> dict:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


@handles(METADATA)
async def metadata(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    topics_mgr = broker.topics
    v = ctx.api_version
    include_ops = bool(request.get("include_topic_authorized_operations", False))
    requested = request.get("topics")
    allow_auto = bool(request.get("allow_auto_topic_creation", True)) if v >= 4 else True
    out: list[dict] = []
    auth = broker.authorizer
    if requested is None or (v == 0 and not requested):
        for name in sorted(topics_mgr.names()):
            info = topics_mgr.get(name)
            if info is not None and (auth is None or ctx.authorize(AclOperation.DESCRIBE, _TOPIC, name)):
                out.append(_topic_metadata(broker, info, v, include_ops, ctx))
    else:
        create_on_cluster: bool | None = None
        for t in requested:
            name = t.get("name")
            tid = _uuid_bytes(t.get("topic_id")) if v >= 10 else ZERO_UUID
            if name is None:
                if tid == ZERO_UUID:
                    out.append(_topic_error(None, INVALID_TOPIC_EXCEPTION))
                    continue
                info = topics_mgr.by_id(tid)
                if info is None:
                    out.append(_topic_error(None, UNKNOWN_TOPIC_ID, tid))
                elif auth is not None and not ctx.authorize(AclOperation.DESCRIBE, _TOPIC, info.name):
                    out.append(_topic_error(None, TOPIC_AUTHORIZATION_FAILED, tid))  # ids are not secret
                else:
                    out.append(_topic_metadata(broker, info, v, include_ops, ctx))
                continue
            if auth is not None and not ctx.authorize(AclOperation.DESCRIBE, _TOPIC, name):
                out.append(_topic_error(name, TOPIC_AUTHORIZATION_FAILED))  # existence is not even checked
                continue
            info = topics_mgr.get(name)
            if info is None:
                try:
                    topics_mgr.validate_topic_name(name)
                except TopicError:
                    out.append(_topic_error(name, INVALID_TOPIC_EXCEPTION))
                    continue
                if allow_auto and auth is not None and broker.config.get("auto.create.topics.enable"):
                    # auto-creation needs CREATE on the cluster or on the topic
                    if create_on_cluster is None:
                        create_on_cluster = ctx.authorize(AclOperation.CREATE, _CLUSTER, CLUSTER_NAME)
                    if not create_on_cluster and not ctx.authorize(AclOperation.CREATE, _TOPIC, name):
                        out.append(_topic_error(name, TOPIC_AUTHORIZATION_FAILED))
                        continue
                if allow_auto:
                    try:
                        info = await topic_change(topics_mgr.maybe_auto_create, name)  # ZooKeeper: off the loop
                    except TopicError as exc:
                        code, _ = error_of(exc)
                        out.append(_topic_error(name, code))
                        continue
                if info is None:
                    out.append(_topic_error(name, UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            out.append(_topic_metadata(broker, info, v, include_ops, ctx))
    rack = broker.config.props.get("broker.rack")
    brokers = broker.metadata_brokers(ctx.listener)
    if brokers is None:
        host, port = broker.endpoint(ctx.listener)
        brokers = [{"node_id": broker.node_id, "host": host, "port": port, "rack": rack}]
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.metadata_controller_id(),
        "topics": out,
        "cluster_authorized_operations": (
            AUTHORIZED_OPERATIONS_OMITTED if not request.get("include_cluster_authorized_operations")
            else CLUSTER_OPERATIONS if auth is None
            # KafkaApis: without DESCRIBE on the cluster the field is 0, whatever else the principal may do
            else 0 if not ctx.authorize(AclOperation.DESCRIBE, _CLUSTER, CLUSTER_NAME)
            else auth.authorized_operations(ctx.principal, ctx.client_host, _CLUSTER, CLUSTER_NAME)),
    }


# ------------------------------------------------------------------------------------------------------------
# Produce


class CloseConnection(Exception):
    """Raised by a handler to close the connection without answering (acks=0 produce that failed)."""

    quiet = True


def _resolve_topic(ctx: RequestContext, t: dict) -> tuple[str | None, bytes, int]:
    """(name, topic_id, error) for a request topic given by name (old versions) or id (new versions)."""
    topics = ctx.broker.topics
    name = t.get("name", t.get("topic"))
    tid = _uuid_bytes(t.get("topic_id"))
    if name is None or name == "":
        if tid == ZERO_UUID:
            return None, tid, UNKNOWN_TOPIC_ID
        info = topics.by_id(tid)
        if info is None:
            return None, tid, UNKNOWN_TOPIC_ID
        return info.name, tid, NONE
    info = topics.get(name)
    return name, (info.topic_id if info is not None else ZERO_UUID), NONE


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


def validation_cost_ns(records: Any) -> float:
    """Worst-case cost of validating one produce batch (header only: nothing is decompressed)."""
    n = len(records)
    if n < 61:
        return 0.0
    codec = records[22] & 0x07
    if codec > 4:
        return 0.0  # refused from the header
    return min(n * _MAX_RATIO[codec], DEFAULT_MAX_DECOMPRESSED) * _NS_PER_OUTPUT_BYTE[codec]


class _ProducePartition:
    __slots__ = ("guard", "index", "name", "plog", "pr", "records", "ticket", "validated")

    def __init__(self, name: str, index: int, plog: Any, records: Any, pr: dict) -> None:
        self.name = name
        self.index = index
        self.plog = plog
        self.records = records
        self.pr = pr
        self.ticket: Any = None
        self.validated: Any = None  # ValidatedBatch, or the exception its validation raised
        self.guard: object | None = None  # KIP-890: a transactional batch's verification guard (see produce)


_NEEDS_HEAVY_SLOT = object()  # a batch's light pass stopped at the unbudgeted bytes: validate it under a slot


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
async def produce(ctx: RequestContext, request: dict) -> dict | None:
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
        denied = {t.get("name", "") for t in request.get("topic_data") or ()
                  if not ctx.authorize(AclOperation.WRITE, _TOPIC, t.get("name", ""))}
    for t in request.get("topic_data") or ():
        name, tid, topic_err = _resolve_topic(ctx, t)
        if denied and name in denied:
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
            if len(pp.records) >= 61 and pp.records[22] & 0x30 == 0x10:  # transactional, not control: KIP-890
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


async def produce_one(ctx: RequestContext, acks: int, timeout_ms: int, name: str, index: int,
                      records: Any) -> dict | DeferredResponse:
    """The Produce of one partition of one topic, non-transactional, acks 1 or -1 (the server's fast lane, which
    parsed the request in C and encodes the response in C: see ``Connection.process``). The same steps as
    :func:`produce`, through the same functions; returns the partition's response entry, or with ``ctx.defer``
    a :class:`DeferredResponse` whose ``finish`` gives the whole response body (:func:`produce_one_body`)."""
    broker = ctx.broker
    now_ms = time.time_ns() // 1_000_000
    topic_err = NONE
    if broker.authorizer is not None and not ctx.authorize(AclOperation.WRITE, _TOPIC, name):
        topic_err = TOPIC_AUTHORIZATION_FAILED
    pr = _partition_response(index)
    pp = _checked_partition(ctx, name, topic_err, acks, records, pr)
    appended: dict[tuple[str, int], int] = {}
    results: dict[tuple[str, int], dict] = {}
    if pp is not None:
        await _append_all(ctx, [pp], now_ms, _validation_cost(pp), broker.append_sequencer.busy((name, index)),
                          appended, results)
    _record_produce_bytes(ctx)
    done = await _wait_for_acks(ctx, acks, timeout_ms, appended, results, produce_one_body(name, pr, 0))
    return done if type(done) is DeferredResponse else pr


def produce_one_body(name: str, pr: dict, throttle_ms: int) -> dict:
    """The Produce response body of :func:`produce_one`'s one partition (for the generic encoder)."""
    return {"responses": [{"name": name, "partition_responses": [pr]}], "throttle_time_ms": throttle_ms}


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


def _checked_partition(ctx: RequestContext, name: str | None, topic_err: int, acks: int, records: Any,
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
    if len(records) >= 61 and pp.plog.recompresses(records[22] & 0x07):
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
        for pp in todo:
            pp.ticket = sequencer.ticket((pp.name, pp.index))
        try:
            if cost > INLINE_VALIDATION_NS:
                broker = ctx.broker
                budget = broker.decompression_budget
                if await broker.request_pool.run(_validate_all, todo, now_ms, budget.unbudgeted_bytes):
                    # past the light pass's bytes: again under one of the broker-wide heavy slots
                    heavy = [pp for pp in todo if pp.validated is _NEEDS_HEAVY_SLOT]
                    await budget.run(_validate_all, heavy, now_ms)
            for pp in todo:
                await pp.ticket.turn()
                try:
                    any_error |= _append_one(ctx, pp, now_ms, appended, results)
                finally:
                    pp.ticket.release()
        finally:
            for pp in todo:
                pp.ticket.release()
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


def _acked(body: dict, results: dict[tuple[str, int], dict], status: Any) -> dict:
    """The acks=-1 answer once its DelayedProduce completed: each partition still short gets its error. A deferred
    answer (ctx.defer) whose operation failed gets UNKNOWN_SERVER_ERROR in each partition it appended to."""
    if isinstance(status, BaseException):
        status = dict.fromkeys(results, "UNKNOWN_SERVER_ERROR")
    for tp, err in status.items():
        if err is not None:
            results[tp]["error_code"] = code_of(err)
    return body


def _replicated(broker: Any, appended: dict[tuple[str, int], int]) -> bool:
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
            if records is not None and len(records) >= 61 and records[22] & 0x10:
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
_VERIFY_RETRIABLE = frozenset({"CONCURRENT_TRANSACTIONS", "NETWORK_EXCEPTION", "COORDINATOR_LOAD_IN_PROGRESS",
                               "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"})


_NOT_VERIFIED = object()  # the guard of a batch that joined a transaction open at the time of the produce


def _verification_error(err: str, version: int) -> str:
    if err in _VERIFY_RETRIABLE:
        return "NOT_ENOUGH_REPLICAS"
    if err == "PRODUCER_FENCED":
        return "INVALID_PRODUCER_EPOCH"
    if err == "TRANSACTION_ABORTABLE" and version < 11:
        return "INVALID_TXN_STATE"
    return err


async def _verify_transactional(ctx: RequestContext, transactional_id: str | None,
                                parts: list[_ProducePartition]) -> set[_ProducePartition]:
    """KIP-890: each transactional batch whose producer has no open transaction on its partition must be in the
    producer's transaction at the coordinator (``verify_transaction``; a local call on one node). Returns the
    partitions refused (their response entries carry the error)."""
    coord = ctx.broker.txn_coordinator
    if coord is None or not coord.verification_enabled:
        return set()
    by_producer: dict[tuple[int, int], list[_ProducePartition]] = {}
    for pp in parts:
        rec = pp.records
        pid = int.from_bytes(rec[43:51], "big", signed=True)
        ps = pp.plog.producer_state
        if ps is None or ps.has_open_transaction(pid):
            # verified when its transaction began on this partition; should that transaction end before the
            # append, the batch is refused there (a guard that is never live)
            pp.guard = _NOT_VERIFIED
            continue
        # Kafka's VerificationGuard: taken before asking the coordinator, checked at the append, cleared by a
        # marker in between, so a batch verified in a transaction that then ended cannot open a new one
        pp.guard = ps.start_verification(pid)
        epoch = int.from_bytes(rec[51:53], "big", signed=True)
        by_producer.setdefault((pid, epoch), []).append(pp)
    refused: set[_ProducePartition] = set()
    for (pid, epoch), pps in by_producer.items():
        if not transactional_id:
            errors = dict.fromkeys(((pp.name, pp.index) for pp in pps), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        else:
            codes = await coord.verify_transaction(transactional_id, pid, epoch, [(pp.name, pp.index) for pp in pps])
            errors = {tp: error_for_code(c).name for tp, c in codes.items() if c}
        for pp in pps:
            err = errors.get((pp.name, pp.index))
            if err is None:
                continue
            name = _verification_error(err, ctx.api_version)
            pp.pr["error_code"] = code_of(name)
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
            # leadership may have moved (or the topic gone) while the batch was validated on a worker
            plog = broker.leader_log(name, index)
            if plog is not pp.plog:
                raise PartitionError("NOT_LEADER_OR_FOLLOWER", f"{name}-{index} changed while the batch was checked")
            info = plog.append_validated(validated, leader_epoch=broker.leader_epoch(name, index),
                                         verification_guard=pp.guard)
    except Exception as exc:
        err: BaseException = exc
        if broker.topics.get_log(name, index) is not pp.plog:  # deleted meanwhile (on a worker thread)
            err = PartitionError("UNKNOWN_TOPIC_OR_PARTITION", f"{name}-{index} was deleted")
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


# ------------------------------------------------------------------------------------------------------------
# Fetch


@handles(FETCH)
async def fetch(ctx: RequestContext, request: dict) -> dict:
    """Parse the request (and the consumer's fetch session) into FetchParams and FetchPartitions, read them
    through the broker's read service (:mod:`tidelog.broker.fetch`, the one read path for consumers and
    followers), answer (a session only with the partitions that have news)."""
    broker = ctx.broker
    v = ctx.api_version
    replica_id = request.get("replica_id", -1)
    if v >= 15:
        state = request.get("replica_state") or {}
        replica_id = state.get("replica_id", -1) if isinstance(state, dict) else -1
    session_id = request.get("session_id", 0)
    session_epoch = request.get("session_epoch", -1)
    isolation = request.get("isolation_level", 0)
    response_max = request.get("max_bytes", MAX_INT32)
    if response_max <= 0:
        response_max = MAX_INT32
    max_bytes = min(response_max, broker.config.get("fetch.max.bytes"))
    quotas = broker.client_quotas
    if quotas.enabled:
        if replica_id >= 0:
            ctx.throttle_ms = -1  # replication is exempt from client quotas
        else:  # consumer_byte_rate: no more than the quota window can take (Kafka's maxValueInQuotaWindow)
            # (infinite without a fetch quota for this client: min first, then int)
            max_bytes = int(min(max_bytes, quotas.max_value_in_window(quotas.fetch, ctx.principal, ctx.client_id)))
    params = FetchParams(
        replica_id=replica_id,
        max_wait_ms=request.get("max_wait_ms", 0),
        min_bytes=min(request.get("min_bytes", 1), max_bytes),
        max_bytes=max_bytes,
        isolation_level=isolation,
        hard_max_bytes_limit=v <= 2,
    )
    # KIP-320's divergence check serves followers; a consumer's last_fetched_epoch is not checked (Kafka checks it)
    from_follower = replica_id >= 0 and v >= 12

    sessions = broker.fetch_sessions
    session = None
    if session_epoch > 0:  # incremental: the session's partitions, updated by this request
        session = sessions.get(session_id) if sessions is not None else None
        if session is None:
            return _session_error(FETCH_SESSION_ID_NOT_FOUND)
        if session_epoch != session.next_epoch:
            return _session_error(INVALID_FETCH_SESSION_EPOCH)
        session.advance()
    elif session_id != 0 and sessions is not None:  # a full request naming a session: -1 closes it, 0 replaces it
        sessions.remove(session_id)

    parts: list[FetchPartition] = []
    responses: list[dict] = []
    if session is not None:
        cached = session.partitions
        for t in request.get("topics") or ():
            name, tid, _ = _resolve_topic(ctx, {"name": t.get("topic"), "topic_id": t.get("topic_id")})
            for p in t.get("partitions") or ():
                key = (name or "", p.get("partition", 0))
                cp = cached.get(key)
                if cp is None:
                    cached[key] = CachedPartition(tid, p.get("fetch_offset", 0), p.get("partition_max_bytes", 1 << 20),
                                                  p.get("current_leader_epoch", -1),
                                                  p.get("last_fetched_epoch", -1) if from_follower else -1)
                else:
                    cp.fetch_offset = p.get("fetch_offset", 0)
                    cp.max_bytes = p.get("partition_max_bytes", 1 << 20)
                    cp.current_leader_epoch = p.get("current_leader_epoch", -1)
                    cp.last_fetched_epoch = p.get("last_fetched_epoch", -1) if from_follower else -1
        for t in request.get("forgotten_topics_data") or ():
            name, _, _ = _resolve_topic(ctx, {"name": t.get("topic"), "topic_id": t.get("topic_id")})
            for index in t.get("partitions") or ():
                cached.pop((name or "", index), None)
        for (name, index), cp in cached.items():
            fp = FetchPartition(name, cp.topic_id, index, cp.fetch_offset, cp.max_bytes,
                                response_entry(index, isolation), cp.current_leader_epoch, cp.last_fetched_epoch)
            if not name:
                fp.error = UNKNOWN_TOPIC_ID if v >= 13 else UNKNOWN_TOPIC_OR_PARTITION
            parts.append(fp)
    else:
        for t in request.get("topics") or ():
            name, tid, topic_err = _resolve_topic(ctx, {"name": t.get("topic"), "topic_id": t.get("topic_id")})
            parts_out: list[dict] = []
            responses.append({"topic": name or "", "topic_id": tid, "partitions": parts_out})
            for p in t.get("partitions") or ():
                index = p.get("partition", 0)
                entry = response_entry(index, isolation)
                parts_out.append(entry)
                fp = FetchPartition(name, tid, index, p.get("fetch_offset", 0), p.get("partition_max_bytes", 1 << 20),
                                    entry, p.get("current_leader_epoch", -1),
                                    p.get("last_fetched_epoch", -1) if from_follower else -1)
                fp.error = topic_err
                parts.append(fp)

    if broker.authorizer is not None:
        # KafkaApis: a follower needs CLUSTER_ACTION on the cluster (else every partition is refused), a consumer
        # READ on each topic; refused partitions are answered TOPIC_AUTHORIZATION_FAILED and never read
        if replica_id >= 0:
            if not ctx.authorize(AclOperation.CLUSTER_ACTION, _CLUSTER, CLUSTER_NAME):
                for fp in parts:
                    fp.error = TOPIC_AUTHORIZATION_FAILED
        else:
            for fp in parts:
                if fp.name and not fp.error and not ctx.authorize(AclOperation.READ, _TOPIC, fp.name):
                    fp.error = TOPIC_AUTHORIZATION_FAILED
    body = {"throttle_time_ms": 0, "error_code": NONE, "session_id": 0, "responses": responses}
    if quotas.enabled and replica_id < 0:
        started = waited = time.perf_counter()
        total = await broker.read_service.fetch_messages(params, parts)
        if params.max_wait_ms > 0:
            ctx.wait_s = time.perf_counter() - waited  # a long poll is not handler time (request_percentage)
        throttle = fetch_throttle(quotas, ctx, total, time.perf_counter() - started)
        if throttle:
            # Kafka: a throttled fetch (bandwidth or request quota) answers no data (the bytes are taken back from
            # the rate) and the same session, whose cached state is left as it was
            ctx.throttle_ms = throttle
            return {"throttle_time_ms": throttle, "error_code": NONE,
                    "session_id": session.session_id if session is not None else 0, "responses": []}
    else:
        await broker.read_service.fetch_messages(params, parts)

    if v >= 16:
        _leader_hints(ctx, parts, body)
    if session is not None:  # only what the client does not know yet, grouped by topic in session order
        body["session_id"] = session.session_id
        by_topic: dict[str, dict] = {}
        for fp in parts:
            if session.partitions[(fp.name, fp.index)].must_respond(fp.entry):  # type: ignore[index]
                t = by_topic.get(fp.name)  # type: ignore[arg-type]
                if t is None:
                    t = by_topic[fp.name] = {"topic": fp.name, "topic_id": fp.topic_id, "partitions": []}  # type: ignore[index]
                    responses.append(t)
                t["partitions"].append(fp.entry)
    elif session_epoch == INITIAL_EPOCH and sessions is not None:  # consumers and followers (issue 30)
        cached = OrderedDict()
        for fp in parts:
            if fp.name:
                cp = CachedPartition(fp.topic_id, fp.fetch_offset, fp.max_bytes,
                                     fp.current_leader_epoch if replica_id >= 0 else -1, fp.last_fetched_epoch)
                cp.must_respond(fp.entry)  # the full response told the client everything
                cached[(fp.name, fp.index)] = cp
        new = sessions.create(cached)
        if new is not None:
            body["session_id"] = new.session_id
    return body


def _leader_hints(ctx: RequestContext, parts: list[FetchPartition], body: dict) -> None:
    """KIP-951 (Fetch v16+): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its current
    leader and epoch, and the response lists those leaders' endpoints, so the client moves without a Metadata
    round trip (Kafka's ``KafkaApis.handleFetchRequest``)."""
    broker = ctx.broker
    leaders: set[int] = set()
    for fp in parts:
        if fp.entry.get("error_code") not in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) or not fp.name:
            continue
        md = broker.partition_metadata(fp.name, fp.index)
        if md is None:  # one node: this broker leads every partition
            leader, epoch = broker.node_id, broker.leader_epoch(fp.name, fp.index)
        else:
            leader, epoch = md["leader_id"], md["leader_epoch"]
        fp.entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        if leader >= 0:
            leaders.add(leader)
    if not leaders:
        return
    listed = broker.metadata_brokers(ctx.listener)
    if listed is None:
        host, port = broker.endpoint(ctx.listener)
        listed = [{"node_id": broker.node_id, "host": host, "port": port, "rack": broker.config.props.get("broker.rack")}]
    body["node_endpoints"] = [{"node_id": b["node_id"], "host": b["host"], "port": int(b["port"]), "rack": b["rack"]}
                              for b in listed if b["node_id"] in leaders]


def _session_error(code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}


# ------------------------------------------------------------------------------------------------------------
# ListOffsets

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
UNSUPPORTED_VERSION = 35
# the first ListOffsets version of each timestamp sentinel (Kafka's ReplicaManager.isListOffsetsTimestampUnsupported:
# a sentinel sent in an older version, or an unknown negative timestamp, is UNSUPPORTED_VERSION for its partition)
_SENTINEL_MIN_VERSION = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                         EARLIEST_PENDING_UPLOAD: 11}


def _list_offset(broker: Any, name: str, index: int, timestamp: int, isolation: int, replica_id: int) -> tuple[int, int, int]:
    """(error_code, offset, timestamp) for one partition."""
    plog = broker.leader_log(name, index)
    if replica_id == -2:  # debugging consumer: may see up to the LEO
        last_fetchable = plog.log_end_offset
    else:
        last_fetchable = last_stable_offset(plog) if isolation == 1 else plog.high_watermark
    if timestamp == LATEST:
        return NONE, last_fetchable, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return NONE, plog.log_start_offset, -1
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):  # nothing is tiered: no such offset (-1), as Kafka
        return NONE, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.offset_of_max_timestamp()
    elif timestamp < 0:
        return error_of(PartitionError("INVALID_REQUEST"))[0], -1, -1
    else:
        found = plog.find_offset_by_timestamp(timestamp)
    if found is None or found[0] >= last_fetchable:
        return NONE, -1, -1
    return NONE, found[0], found[1]


@handles(LIST_OFFSETS)
async def list_offsets(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    replica_id = request.get("replica_id", -1)
    isolation = request.get("isolation_level", 0)
    out_topics = []
    auth = broker.authorizer
    for t in request.get("topics") or ():
        name = t.get("name")
        parts_out = []
        out_topics.append({"name": name, "partitions": parts_out})
        allowed = auth is None or ctx.authorize(AclOperation.DESCRIBE, _TOPIC, name)
        for p in t.get("partitions") or ():
            index = p.get("partition_index", 0)
            entry = {
                "partition_index": index,
                "error_code": NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            parts_out.append(entry)
            if not allowed:
                entry["error_code"] = TOPIC_AUTHORIZATION_FAILED
                continue
            timestamp = p.get("timestamp", LATEST)
            if timestamp < 0 and _SENTINEL_MIN_VERSION.get(timestamp, 1 << 15) > ctx.api_version:
                entry["error_code"] = UNSUPPORTED_VERSION
                continue
            err = _leader_epoch_error(p.get("current_leader_epoch", -1), broker.leader_epoch(name, index))
            if err:
                entry["error_code"] = err
                continue
            try:
                code, offset, ts = _list_offset(broker, name, index, timestamp, isolation, replica_id)
            except Exception as exc:
                entry["error_code"], _ = error_of(exc)
                continue
            entry["error_code"] = code
            entry["offset"] = offset
            entry["timestamp"] = ts
            if ctx.api_version >= 4:  # not ignorable: only versions that carry it may see a non-default
                entry["leader_epoch"] = broker.leader_epoch(name, index) if offset >= 0 else -1
    return {"throttle_time_ms": 0, "topics": out_topics}
