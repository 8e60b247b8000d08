"""OffsetForLeaderEpoch (23), ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments
(46) on one node (issue 27 item 5), answered as a Kafka cluster of one broker answers them. In ZooKeeper mode the
replica manager's own handlers (``tidelog.cluster.handlers``) replace these.

* OffsetForLeaderEpoch: the leader's answer from the log's leader-epoch cache (one node: leader epoch 0, never
  re-elected; a ``current_leader_epoch`` above it is UNKNOWN_LEADER_EPOCH, below FENCED_LEADER_EPOCH); DESCRIBE
  on the topic, or CLUSTER_ACTION on the cluster for a follower's request (``replica_id`` >= 0), as KafkaApis.
* ElectLeaders: every partition already has its preferred leader (the only replica), so each partition named is
  ELECTION_NOT_NEEDED, an unknown one UNKNOWN_TOPIC_OR_PARTITION with the controller's message ("No such topic as
  t", "No such partition as t-p"); with ``topic_partitions`` null every topic is listed with no partition (Kafka
  leaves out the partitions whose election is not needed). ALTER on the cluster.
* AlterPartitionReassignments: the only assignment a one-broker cluster can take is ``[<this broker>]``, the
  current one: accepted and complete at once; another broker id is INVALID_REPLICA_ASSIGNMENT ("... includes
  broker N, but no such broker is registered."), an empty list or a repeated broker likewise, a cancellation
  (``replicas`` null) NO_REASSIGNMENT_IN_PROGRESS, an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION
  (Kafka's ``ReplicationControlManager`` messages). ALTER on the cluster.
* ListPartitionReassignments: nothing is ever being reassigned: no topics. DESCRIBE on the cluster.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.errors import PartitionError, error_of
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_code

_CLUSTER_AUTH = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _check_epoch(ctx: RequestContext, topic: str, partition: int, requested: int) -> None:
    if requested < 0:
        return
    current = ctx.broker.leader_epoch(topic, partition)
    if requested < current:
        raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH)
    if requested > current:
        raise PartitionError(ErrorCode.UNKNOWN_LEADER_EPOCH)


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    follower_ok = None
    if broker.authorizer is not None and int(request.get("replica_id", -1)) >= 0:
        follower_ok = ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    topics_out = []
    for t in request.get("topics") or ():
        name = t.get("topic") or ""
        parts: list[dict] = []
        topics_out.append({"topic": name, "partitions": parts})
        allowed = follower_ok if follower_ok is not None else ctx.authorize(AclOperation.DESCRIBE,
                                                                            ResourceType.TOPIC, name)
        for p in t.get("partitions") or ():
            index = int(p.get("partition", 0))
            out = {"error_code": 0, "partition": index, "leader_epoch": -1, "end_offset": -1}
            parts.append(out)
            if not allowed:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                plog = broker.leader_log(name, index)
                _check_epoch(ctx, name, index, int(p.get("current_leader_epoch", -1)))
                cache = plog.epoch_cache
                if cache is None:
                    continue
                out["leader_epoch"], out["end_offset"] = cache.end_offset_for(int(p.get("leader_epoch", -1)),
                                                                              plog.log_end_offset)
            except PartitionError as exc:
                out["error_code"], _ = error_of(exc)
    return {"throttle_time_ms": 0, "topics": topics_out}


def _partition_problem(ctx: RequestContext, topic: Any, partition: int) -> str | None:
    """None if (topic, partition) exists; else the controller's message for it."""
    info = ctx.broker.topics.get(topic) if isinstance(topic, str) else None
    if info is None:
        return f"No such topic as {topic}"
    if not 0 <= partition < int(info.num_partitions):
        return f"No such partition as {topic}-{partition}"
    return None


@handles(ApiKey.ELECT_LEADERS)
async def elect_leaders(ctx: RequestContext, request: dict) -> dict:
    topics = request.get("topic_partitions")
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": []}
    allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    election_type = int(request.get("election_type", 0)) if ctx.api_version >= 1 else 0
    if not allowed:
        out["error_code"] = error_code(_CLUSTER_AUTH)
    if topics is None:
        if allowed:
            out["replica_election_results"] = [{"topic": n, "partition_result": []}
                                               for n in sorted(ctx.broker.topics.names())]
        return out
    for t in topics:
        results = []
        for p in t.get("partitions") or ():
            p = int(p)
            if not allowed:
                code, message = error_code(_CLUSTER_AUTH), None
            elif election_type not in (0, 1):
                code, message = ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}"
            elif (problem := _partition_problem(ctx, t.get("topic"), p)) is not None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, problem
            else:  # the only replica leads: the preferred leader, and a leader for an unclean election
                code, message = ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            results.append({"partition_id": p, "error_code": code, "error_message": message})
        out["replica_election_results"].append({"topic": t.get("topic"), "partition_result": results})
    return out


def _reassignment_problem(ctx: RequestContext, topic: Any, partition: int,
                          replicas: list[int] | None) -> tuple[ErrorCode, str] | None:
    info = ctx.broker.topics.get(topic) if isinstance(topic, str) else None
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if not 0 <= partition < int(info.num_partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress for this topic-partition."
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    node = int(ctx.broker.node_id)
    seen: set[int] = set()
    for b in replicas:
        if b != node:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if b in seen:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker {b} more than once."
        seen.add(b)
    return None  # [node]: the current assignment, nothing to move


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
async def alter_partition_reassignments(ctx: RequestContext, request: dict) -> dict:
    allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0 if allowed else error_code(_CLUSTER_AUTH),
                           "error_message": None, "responses": []}
    if ctx.api_version >= 1:
        out["allow_replication_factor_change"] = bool(request.get("allow_replication_factor_change", True))
    seen: set[tuple[Any, int]] = set()
    dup = False
    for t in request.get("topics") or ():
        for p in t.get("partitions") or ():
            tp = (t.get("name"), int(p.get("partition_index", -1)))
            dup = dup or tp in seen
            seen.add(tp)
    if allowed and dup:
        out["error_code"], out["error_message"] = ErrorCode.INVALID_REQUEST, "Duplicate partitions in the request"
    for t in request.get("topics") or ():
        parts = []
        for p in t.get("partitions") or ():
            index = int(p.get("partition_index", -1))
            problem = None
            if allowed and not dup:
                replicas = p.get("replicas")
                problem = _reassignment_problem(ctx, t.get("name"), index,
                                                None if replicas is None else [int(b) for b in replicas])
            parts.append({"partition_index": index, "error_code": error_code(problem[0]) if problem else 0,
                          "error_message": problem[1] if problem else None})
        out["responses"].append({"name": t.get("name"), "partitions": parts})
    return out


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS)
async def list_partition_reassignments(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": error_code(_CLUSTER_AUTH), "error_message": None, "topics": []}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []}  # nothing ever moves
