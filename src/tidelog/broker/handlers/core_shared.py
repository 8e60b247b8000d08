"""What the core APIs' handlers (ApiVersions, Metadata, Produce, Fetch, ListOffsets) share: their API keys,
the error codes they answer with, the leader-epoch check and how a request names a topic (name or id)."""

from __future__ import annotations

import uuid

from tidelog.broker.handlers import RequestContext
from tidelog.broker.security.acls import ResourceType
from tidelog.errors import ErrorCode

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
UNKNOWN_SERVER_ERROR = ErrorCode.UNKNOWN_SERVER_ERROR
OFFSET_OUT_OF_RANGE = ErrorCode.OFFSET_OUT_OF_RANGE
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE
NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER
INVALID_TOPIC_EXCEPTION = ErrorCode.INVALID_TOPIC_EXCEPTION
NOT_ENOUGH_REPLICAS = ErrorCode.NOT_ENOUGH_REPLICAS
INVALID_REQUIRED_ACKS = ErrorCode.INVALID_REQUIRED_ACKS
INVALID_RECORD = ErrorCode.INVALID_RECORD
FETCH_SESSION_ID_NOT_FOUND = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
INVALID_FETCH_SESSION_EPOCH = ErrorCode.INVALID_FETCH_SESSION_EPOCH
FENCED_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH = ErrorCode.UNKNOWN_LEADER_EPOCH
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
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


def _uuid_bytes(value: uuid.UUID | bytes | bytearray | memoryview | None) -> bytes:
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

