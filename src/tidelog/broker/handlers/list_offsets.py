"""ListOffsets: offsets by timestamp and the sentinels (-1 latest ... -6 earliest pending upload)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.broker.errors import PartitionError, error_of
from tidelog.broker.fetch import last_stable_offset
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.core_shared import (
    _TOPIC,
    LIST_OFFSETS,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    _leader_epoch_error,
)
from tidelog.broker.security.acls import AclOperation
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
# the first ListOffsets version of each timestamp sentinel (Kafka's ReplicaManager.isListOffsetsTimestampUnsupported:
# a sentinel sent in an older version, or an unknown negative timestamp, is UNSUPPORTED_VERSION for its partition)
_SENTINEL_MIN_VERSION = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                         EARLIEST_PENDING_UPLOAD: 11}


def _list_offset(broker: Broker, name: str, index: int, timestamp: int, isolation: int, replica_id: int) -> tuple[int, int, int]:
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
        return error_of(PartitionError(ErrorCode.INVALID_REQUEST))[0], -1, -1
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
        parts_out: list[dict] = []
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
