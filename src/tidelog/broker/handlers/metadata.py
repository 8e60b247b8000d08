"""Metadata: topics, partitions, brokers, controller and authorized operations (Kafka's ``KafkaApis.handleTopicMetadataRequest``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.broker.errors import error_of
from tidelog.broker.handlers import RequestContext, handles, topic_change
from tidelog.broker.handlers.core_shared import (
    _CLUSTER,
    _TOPIC,
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
    INVALID_TOPIC_EXCEPTION,
    LEADER_EPOCH,
    LEADER_NOT_AVAILABLE,
    METADATA,
    NO_LEADER,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    TOPIC_OPERATIONS,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    ZERO_UUID,
    _uuid_bytes,
)
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation
from tidelog.broker.topics import INTERNAL_TOPICS, TopicError, TopicInfo

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker


def partition_entries(broker: Broker, name: str, num_partitions: int, v: int, start: int = 0,
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


def _topic_metadata(broker: Broker, info: TopicInfo, v: int, include_ops: bool, ctx: RequestContext | None = None) -> dict:
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
            if name == "" and tid != ZERO_UUID:
                name = None  # by id: the Java client sends its generated default "" as the name (Kafka uses the id)
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
                        # ZooKeeper: off the loop
                        info = await topic_change(ctx.broker.request_pool, topics_mgr.maybe_auto_create, name)
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


