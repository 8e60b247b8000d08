"""Storage admin APIs: DescribeLogDirs (``kafka-log-dirs.sh --describe``) and DescribeProducers
(``kafka-transactions.sh describe-producers``).

Kafka behaviours reproduced (sources: Kafka ``KafkaApis.handleDescribeLogDirsRequest``,
``ReplicaManager.describeLogDirs``, ``KafkaApis.handleDescribeProducersRequest``):

* DescribeLogDirs answers for this broker's own replicas, one result per log directory (``log.dirs``), each with
  the partitions it holds: ``partition_size`` is the log's size in bytes, ``offset_lag`` 0 and
  ``is_future_key`` false; a replica being moved (AlterReplicaLogDirs) also appears in its destination with
  ``is_future_key`` true, the future log's size and its ``offset_lag`` behind the current log's end (Kafka's
  ``getLogEndOffsetLag``). DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no results.
  ``topics`` null means every partition; partitions named
  but not hosted here are left out (not errors). v3+ carry a top-level error code, v4+ the directory's total
  and usable bytes (``statvfs``), v5 ``is_cordoned`` (KIP-1066), always false: tidelog has no cordoning (every
  log dir may take new replicas); a directory that failed (``LogManager.fail_dir``: offline, or read-only as the
  broker's last) or that cannot be read is answered KAFKA_STORAGE_ERROR with no topics (Kafka's offline dir).
* AlterReplicaLogDirs (``kafka-reassign-partitions.sh`` with ``log_dirs``): ALTER on the cluster, else every
  partition named CLUSTER_AUTHORIZATION_FAILED (``KafkaApis``). Each named partition hosted here starts moving
  into the named directory and the answer comes at once, as Kafka's (``LogManager.alter_log_dir``: a future log
  filled in the background and swapped in when it caught up, ``storage/log_move.py``); DescribeLogDirs shows the
  progress. LOG_DIR_NOT_FOUND for a directory that is not one of ``log.dirs``, KAFKA_STORAGE_ERROR for a failed
  one, REPLICA_NOT_AVAILABLE for a partition not hosted here (Kafka also accepts a future directory for a replica
  not created yet; tidelog does not), INVALID_TOPIC_EXCEPTION when the future directory's name would be longer
  than 255 characters.
* DescribeProducers: per partition, the producers of the leader's producer state (id, epoch, last sequence,
  last timestamp, coordinator epoch, current transaction's first offset, -1 where none);
  UNKNOWN_TOPIC_OR_PARTITION for an unknown partition, NOT_LEADER_OR_FOLLOWER on a follower.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidelog.broker.errors import PartitionError, error_of
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_code


def _wanted(request_topics: list[dict] | None) -> set[tuple[str, int]] | None:
    if request_topics is None:
        return None
    return {(t["topic"], int(p)) for t in request_topics for p in t.get("partitions") or []}


@handles(ApiKey.DESCRIBE_LOG_DIRS)
async def describe_log_dirs(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    wanted = _wanted(request.get("topics"))
    logs = broker.logs
    by_dir: dict[Path, dict[str, list[dict]]] = {Path(d).absolute(): {} for d in broker.config.log_dirs}
    failed = logs.failed_dirs()
    for (topic, partition), plog in sorted(logs.all_logs().items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        root = logs.log_dir_of(topic, partition)
        if root is None:
            continue
        by_dir.setdefault(Path(root), {}).setdefault(topic, []).append({
            "partition_index": partition, "partition_size": int(plog.size_in_bytes), "offset_lag": 0,
            "is_future_key": False,
        })
    for move in logs.moves():
        topic, partition = move.tp
        if wanted is not None and (topic, partition) not in wanted:
            continue
        by_dir.setdefault(move.dest, {}).setdefault(topic, []).append({
            "partition_index": partition, "partition_size": move.size_in_bytes, "offset_lag": move.offset_lag,
            "is_future_key": True,
        })
    results = []
    for root, topics in by_dir.items():
        result: dict[str, Any] = {"error_code": 0, "log_dir": str(root.resolve()),
                                  "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                                  "total_bytes": -1, "usable_bytes": -1,
                                  "is_cordoned": False}  # v5 (KIP-1066): tidelog never cordons a log dir
        try:
            if root in failed:
                raise OSError(f"log directory {root} failed: {failed[root]}")
            st = os.statvfs(root)
        except OSError:
            result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, topics=[])
        else:
            result["total_bytes"] = st.f_blocks * st.f_frsize
            result["usable_bytes"] = st.f_bavail * st.f_frsize
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": 0, "results": results}


def _producers(entries: Iterable[Any]) -> list[dict]:
    return [{
        "producer_id": e.producer_id,
        "producer_epoch": e.producer_epoch,
        "last_sequence": e.last_seq,
        "last_timestamp": e.last_timestamp,
        "coordinator_epoch": e.coordinator_epoch,
        "current_txn_start_offset": -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
    } for e in entries]


@handles(ApiKey.DESCRIBE_PRODUCERS)
async def describe_producers(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    topics_out = []
    for t in request.get("topics") or []:
        name = t.get("name")
        parts = []
        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name or "")
        for index in t.get("partition_indexes") or []:
            res: dict[str, Any] = {"partition_index": index, "error_code": 0, "error_message": None,
                                   "active_producers": []}
            if not allowed:
                res["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(res)
                continue
            try:
                plog = broker.leader_log(name, index)
            except PartitionError as exc:
                res.update(error_code=error_code(exc.kafka_error), error_message=str(exc))
            else:
                ps = plog.producer_state
                if ps is not None:
                    res["active_producers"] = _producers(
                        e for _, e in sorted(ps.active_producers().items()))
            parts.append(res)
        topics_out.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics_out}


def _alter_dirs_denied(request: dict) -> dict:
    """Kafka's ``AlterReplicaLogDirsRequest.getErrorResponse``: every partition named, one topic result per
    (directory, topic) entry, CLUSTER_AUTHORIZATION_FAILED."""
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return {"throttle_time_ms": 0, "results": [
        {"topic_name": t.get("name"), "partitions": [{"partition_index": p, "error_code": denied}
                                                     for p in t.get("partitions") or []]}
        for d in request.get("dirs") or [] for t in d.get("topics") or []]}


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS)
async def alter_replica_log_dirs(ctx: RequestContext, request: dict) -> dict:
    # KafkaApis.handleAlterReplicaLogDirsRequest: ALTER on the cluster, before anything is looked at
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _alter_dirs_denied(request)
    logs = ctx.broker.logs
    by_topic: dict[str, list[dict]] = {}
    for d in request.get("dirs") or []:
        dest = Path(d.get("path") or "")
        for t in d.get("topics") or []:
            name = t.get("name")
            for index in t.get("partitions") or []:
                try:
                    if not dest.is_absolute():
                        raise PartitionError(ErrorCode.LOG_DIR_NOT_FOUND, f"{dest} is not an absolute path")
                    await asyncio.to_thread(logs.alter_log_dir, name, int(index), dest)
                    code = 0
                except Exception as exc:
                    code = error_of(exc)[0]
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]}
