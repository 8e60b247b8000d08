"""DescribeTopicPartitions (API 75, KIP-966): topic metadata paginated by partitions, with a cursor.

Kafka's ``DescribeTopicPartitionsRequestHandler`` and ``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``:

* ``topics`` empty: every topic the principal may DESCRIBE (the others are left out silently); named topics: each
  one, unknown ones answered UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name), the ones
  the principal may not DESCRIBE TOPIC_AUTHORIZATION_FAILED with a zero topic id, after the others (existence is
  not even checked). Topic names are answered sorted, each name once.
* At most ``min(max.request.partition.size.limit, ResponsePartitionLimit)`` partitions (at least 1) per response;
  when more remain, ``NextCursor`` names the topic and partition to ask from next. The topics before the cursor's
  are skipped; with named topics the cursor's topic must be one of them, and its partition index >= 0, else the
  request is INVALID_REQUEST (Kafka's InvalidRequestException: every named topic gets the error).
* ``TopicAuthorizedOperations`` is always given (all topic operations without an authorizer). The ELR fields are
  empty lists: tidelog has no eligible leader replicas (``eligible.leader.replicas.version`` 0).
* Partition entries are Metadata's (a partition whose log directory is offline has LEADER_NOT_AVAILABLE and
  leader -1; Kafka answers error 0 with leader -1 there).
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.metadata import partition_entries, topic_operations
from tidelog.broker.security.acls import AclOperation, ResourceType
from tidelog.broker.topics import INTERNAL_TOPICS, TopicError, validate_topic_name
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.error_response import error_response

ZERO_UUID = bytes(16)
LIMIT_CONFIG = "max.request.partition.size.limit"
_METADATA_VERSION = 13  # partition entries as Metadata v13 has them


def _error_topic(name: str, code: int) -> dict:
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": name in INTERNAL_TOPICS,
            "partitions": []}


def _unknown_code(name: str) -> int:
    try:
        validate_topic_name(name)
    except TopicError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _elr_free(entry: dict) -> dict:
    return {**entry, "eligible_leader_replicas": [], "last_known_elr": []}


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
async def describe_topic_partitions(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    topics_mgr = broker.topics
    requested = request.get("topics") or []
    fetch_all = not requested
    cursor = request.get("cursor")
    cursor_topic = cursor["topic_name"] if cursor is not None else ""
    if fetch_all:
        names = {n for n in topics_mgr.names() if n >= cursor_topic}
    else:
        names = {t["name"] for t in requested if t.get("name") is not None and t["name"] >= cursor_topic}
        if cursor is not None and cursor_topic not in names:
            return error_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS, ctx.api_version, request,
                                  ErrorCode.INVALID_REQUEST)
    if cursor is not None and int(cursor["partition_index"]) < 0:
        return error_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS, ctx.api_version, request,
                              ErrorCode.INVALID_REQUEST)
    limit = max(min(int(broker.config.get(LIMIT_CONFIG)), int(request.get("response_partition_limit", 2000))), 1)
    unauthorized: list[dict] = []
    authorized: list[str] = []
    for name in sorted(names):
        if broker.authorizer is None or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            authorized.append(name)
        elif not fetch_all:
            unauthorized.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    out: list[dict] = []
    next_cursor: dict[str, Any] | None = None
    remaining = limit
    for name in authorized:
        if remaining == 0:
            # every partition of the topics before fitted: the next page starts at this topic
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = topics_mgr.get(name)
        if info is None:
            if not fetch_all:
                out.append(_error_topic(name, _unknown_code(name)))
            continue
        start = int(cursor["partition_index"]) if cursor is not None and name == cursor_topic else 0
        stop = min(info.num_partitions, start + remaining)
        parts = [_elr_free(e) for e in partition_entries(broker, name, info.num_partitions, _METADATA_VERSION,
                                                         start, stop)]
        out.append({"error_code": 0, "name": name, "topic_id": info.topic_id, "is_internal": name in INTERNAL_TOPICS,
                    "partitions": parts, "topic_authorized_operations": topic_operations(ctx, name)})
        if stop < info.num_partitions:
            next_cursor = {"topic_name": name, "partition_index": stop}
            break
        remaining -= len(parts)
    return {"throttle_time_ms": 0, "topics": out + unauthorized, "next_cursor": next_cursor}
