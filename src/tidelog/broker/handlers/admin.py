"""Admin APIs on topics: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, and DescribeCluster (the
config APIs, DescribeConfigs/AlterConfigs/IncrementalAlterConfigs, are in ``configs.py``).

The handlers translate between request/response bodies and the broker's :class:`TopicManager`; validation of
topic names, partition counts, replication factors and config values lives there and is reported as
``TopicError(ErrorCode.X, message)``, which becomes a per-topic (or per-resource) error code and message
here, as Kafka does: one bad topic never fails the others.

Kafka behaviours reproduced (sources: Kafka ``ControllerApis``/``KafkaApis``, ``ReplicationControlManager``,
``ConfigAdminManager``, ``UnifiedLog.deleteRecords``):

* A topic named twice in one CreateTopics / DeleteTopics / CreatePartitions request: INVALID_REQUEST for it.
* CreateTopics with explicit ``assignments`` must leave ``num_partitions``/``replication_factor`` at -1.
  Assignments must cover partitions 0..n-1, every partition the same non-empty set of distinct brokers; on one
  node that means ``[[node_id]]`` per partition, anything else is INVALID_REPLICA_ASSIGNMENT. In ZooKeeper mode
  (the topic manager has ``registered_brokers``) every broker must be registered, with the messages of Kafka's
  ``ReplicationControlManager``, and the assignment is used as given; CreatePartitions ``assignments`` are
  checked there with ZK-mode Kafka's messages (``ZkAdminManager``/``AdminZkClient``).
* CreateTopics v5+ answers the topic's configs (with sources), partition count and replication factor; v7 the
  topic id. ``validate_only`` answers the same without creating anything.
* DeleteTopics v6 deletes by name or by topic id (not both: INVALID_REQUEST); unknown id is UNKNOWN_TOPIC_ID.
* DeleteRecords: offset -1 means the high watermark; an offset below 0 or above the high watermark is
  OFFSET_OUT_OF_RANGE; a topic whose ``cleanup.policy`` lacks ``delete`` is POLICY_VIOLATION. The answer is
  the partition's new low watermark (log start offset).
* DescribeCluster with ``endpoint_type`` 2 (controllers) sent to a broker listener: UNSUPPORTED_ENDPOINT_TYPE.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from tidelog.broker.errors import error_of, is_client_error
from tidelog.broker.handlers import RequestContext, handles, topic_change
from tidelog.broker.handlers.admin_common import (
    TOPIC_AUTHORIZATION_FAILED,
    auth_message,
    duplicates,
    node_id,
    topic_uuid,
)
from tidelog.broker.handlers.bodies import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatePartitionsTopicResult,
    DeletableTopicResult,
    DeleteRecordsPartitionResult,
    DeleteRecordsTopicResult,
)
from tidelog.broker.handlers.configs import describe_entry
from tidelog.broker.quotas import (
    THROTTLING_QUOTA_EXCEEDED_MESSAGE,
    mutation_refused,
    mutation_throttle,
    record_mutations,
)
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.broker.topics import INTERNAL_TOPICS, ConfigEntry, TopicInfo
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_code

_TOPIC, _CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER

# AclOperation codes; without an authorizer Kafka reports every operation the resource type supports.
_ACL_OPS_CLUSTER = (
    5,
    7,
    8,
    9,
    10,
    11,
    12,
)  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE/ALTER_CONFIGS IDEMPOTENT_WRITE
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2



# ---------------------------------------------------------------------------------------------------------------
# CreateTopics


def _validate_assignments(ctx: RequestContext, assignments: list[CreatableReplicaAssignment]) -> tuple[int, int] | tuple[ErrorCode, str]:
    """(num_partitions, replication_factor) for a valid manual assignment, else (error_name, message)."""
    node = node_id(ctx)
    indexes = sorted(int(a.get("partition_index", -1)) for a in assignments)
    if indexes != list(range(len(assignments))):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Partitions should be a consecutive 0-based integer sequence.",
        )
    rf = None
    for a in assignments:
        brokers = [int(b) for b in a.get("broker_ids") or []]
        if not brokers:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes an empty replica "
                f"list for partition {a.get('partition_index')}.",
            )
        if len(set(brokers)) != len(brokers):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker "
                f"{brokers} more than once for partition {a.get('partition_index')}.",
            )
        unknown = [b for b in brokers if b != node]
        if unknown:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker(s) {unknown}, "
                f"but only broker {node} is registered.",
            )
        if rf is None:
            rf = len(brokers)
        elif rf != len(brokers):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes partitions with different replication factors.",
            )
    return len(assignments), rf or 1


def _validate_cluster_assignments(assignments: list[CreatableReplicaAssignment], registered: set[int]) -> dict[int, list[int]] | tuple[ErrorCode, str]:
    """ZooKeeper mode: {partition: brokers}, else (error name, message) as Kafka's ``ReplicationControlManager``."""
    out: dict[int, list[int]] = {}
    rf: int | None = None
    for a in assignments:
        index = int(a.get("partition_index", -1))
        if index in out:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Found multiple manual partition assignments for partition {index}")
        brokers = [int(b) for b in a.get("broker_ids") or []]
        if not brokers:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
        prev = None
        for b in sorted(brokers):
            if b not in registered:
                return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {b}, but no such broker is registered.")
            if b == prev:
                return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes the broker {b} more than once.")
            prev = b
        if rf is not None and len(brokers) != rf:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes a partition with {len(brokers)} replica(s), but "
                    f"this is not consistent with previous partitions, which have {rf} replica(s).")
        rf = len(brokers)
        out[index] = brokers
    if sorted(out) != list(range(len(out))):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"
    return out


@handles(ApiKey.CREATE_TOPICS)
async def create_topics(ctx: RequestContext, request: dict) -> dict:
    topics_req = request.get("topics") or []
    validate_only = bool(request.get("validate_only", False))
    dups = duplicates(t.get("name") for t in topics_req)
    results: list[dict] = []
    answered: set[str] = set()
    # KafkaApis: CREATE on the cluster, else on each topic; DESCRIBE_CONFIGS on the topic to see its configs
    cluster_create = ctx.broker.authorizer is None or ctx.authorize(AclOperation.CREATE, _CLUSTER, CLUSTER_NAME)
    for t in topics_req:
        name = t.get("name")
        if name in answered:
            continue
        answered.add(name)
        allowed = cluster_create or ctx.authorize(AclOperation.CREATE, _TOPIC, name or "")
        results.append(await _create_one(ctx, t, name in dups, validate_only, allowed))
    mutation_throttle(ctx)  # controller_mutation_rate (KIP-599): the server answers the throttle and mutes
    return {"throttle_time_ms": 0, "topics": results}


def _config_problem(configs: list[CreatableTopicConfig]) -> tuple[ErrorCode, str] | None:
    names = [c.get("name") for c in configs]
    for c in configs:
        if c.get("value") is None:
            return ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {c.get('name')}"
    if duplicates(names):
        return ErrorCode.INVALID_REQUEST, f"Duplicate configs in request: {sorted(duplicates(names))}"
    return None


async def _create_one(ctx: RequestContext, t: CreatableTopic, duplicated: bool, validate_only: bool,
                      allowed: bool = True) -> dict:
    v = ctx.api_version
    name = t["name"]  # not nullable in any version: the codec always sets it
    result: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
    if v >= 5:
        result.update(num_partitions=-1, replication_factor=-1, configs=None)

    def fail(err: ErrorCode, msg: str) -> dict:
        result["error_code"] = error_code(err)
        result["error_message"] = msg
        return result

    if duplicated:
        return fail(ErrorCode.INVALID_REQUEST, f"Create topics request contains multiple entries for the topic {name}.")
    if not allowed:
        return fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
    num_partitions = int(t.get("num_partitions", -1))
    replication_factor = int(t.get("replication_factor", -1))
    assignments = t.get("assignments") or []
    manual_assignments: dict[int, list[int]] | None = None
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            return fail(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        registered = ctx.broker.topics.registered_brokers
        if registered is not None:  # a cluster: the registered brokers
            manual = _validate_cluster_assignments(assignments, registered())
            if isinstance(manual, tuple):
                return fail(*manual)
            manual_assignments = manual
            num_partitions, replication_factor = len(manual), len(manual[0])
        else:
            checked = _validate_assignments(ctx, assignments)
            if isinstance(checked[0], ErrorCode):
                return fail(checked[0], str(checked[1]))
            num_partitions, replication_factor = int(checked[0]), int(checked[1])
    config_list = t.get("configs") or []
    problem = _config_problem(config_list)
    if problem is not None:
        return fail(*problem)
    configs = {c["name"]: c["value"] for c in config_list}
    topics = ctx.broker.topics
    if not validate_only and mutation_refused(ctx):
        return fail(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE)
    try:
        info = await topic_change(
            ctx.broker.request_pool,
            topics.create_topic,
            name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=configs,
            validate_only=validate_only,
            assignments=manual_assignments,
        )
    except Exception as exc:
        if not is_client_error(exc):
            raise
        code, msg = error_of(exc)
        result["error_code"], result["error_message"] = code, msg
        return result
    if not validate_only:
        record_mutations(ctx, int(info.num_partitions))
    if v >= 5:
        result["num_partitions"] = int(info.num_partitions)
        rf = replication_factor if replication_factor > 0 else ctx.broker.config.default_replication_factor
        result["replication_factor"] = int(rf)
        if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, _TOPIC, name):
            result["topic_config_error_code"] = TOPIC_AUTHORIZATION_FAILED  # KIP-525: no configs shown
        else:
            # from the overrides the creation validated, not from the store: in ZooKeeper mode the topic reaches
            # this broker's store through its watch, which may not have fired yet
            entries = list(topics.describe_default_configs(info.overrides) or [])
            result["configs"] = _create_topic_configs(entries)
    if v >= 7:
        result["topic_id"] = topic_uuid(info.topic_id)
    return result


def _create_topic_configs(entries: list[ConfigEntry]) -> list[dict]:
    out = []
    for e in entries:
        d = describe_entry(e, 1, include_synonyms=False, include_documentation=False)
        out.append(
            {
                "name": d["name"],
                "value": d["value"],
                "read_only": d["read_only"],
                "config_source": d["config_source"],
                "is_sensitive": d["is_sensitive"],
            }
        )
    return out


# ---------------------------------------------------------------------------------------------------------------
# DeleteTopics


def _delete_disabled(ctx: RequestContext) -> bool:
    try:
        return not bool(ctx.broker.config.get("delete.topic.enable"))
    except (KeyError, AttributeError):
        return False


@handles(ApiKey.DELETE_TOPICS)
async def delete_topics(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    wanted: list[tuple[str | None, uuid.UUID]] = []
    if v >= 6:
        for t in request.get("topics") or []:
            wanted.append((t.get("name"), topic_uuid(t.get("topic_id"))))
    else:
        for n in request.get("topic_names") or []:
            wanted.append((n, uuid.UUID(int=0)))
    name_dups = duplicates(n for n, _ in wanted if n is not None)
    id_dups = duplicates(i for n, i in wanted if n is None and i.int != 0)
    responses: list[DeletableTopicResult] = []
    # one deadline for the whole request, as Kafka's DelayedDeleteTopics (cluster mode; one node deletes at once)
    deadline = time.monotonic() + int(request.get("timeout_ms", 0) or 0) / 1000
    for name, topic_id in wanted:
        resp: DeletableTopicResult = {"name": name, "error_code": 0, "error_message": None}
        if v >= 6:
            resp["topic_id"] = topic_id
        code, msg = await _delete_one(ctx, name, topic_id, name_dups, id_dups, resp, deadline)
        resp["error_code"], resp["error_message"] = code, msg
        responses.append(resp)
    mutation_throttle(ctx)  # controller_mutation_rate (KIP-599)
    return {"throttle_time_ms": 0, "responses": responses}


async def _delete_one(
    ctx: RequestContext,
    name: str | None,
    topic_id: uuid.UUID,
    name_dups: set[str],
    id_dups: set[uuid.UUID],
    resp: DeletableTopicResult,
    deadline: float,
) -> tuple[int, str | None]:
    topics = ctx.broker.topics
    if name is not None and topic_id.int != 0:
        return ErrorCode.INVALID_REQUEST, "Deleting topics by both name and id is not supported."
    if name is None and topic_id.int == 0:
        return ErrorCode.INVALID_REQUEST, "Neither topic name nor topic id was specified."
    if (name is not None and name in name_dups) or (name is None and topic_id in id_dups):
        return ErrorCode.INVALID_REQUEST, "Duplicate topic name or id in the request."
    if _delete_disabled(ctx):
        return ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled (delete.topic.enable=false)."
    if name is None:
        info = topics.by_id(topic_id.bytes)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist."
        name = info.name
        resp["name"] = name
        if not ctx.authorize(AclOperation.DESCRIBE, _TOPIC, name):
            resp["name"] = None  # the name is not disclosed; the id is not secret
            return TOPIC_AUTHORIZATION_FAILED, auth_message(TOPIC_AUTHORIZATION_FAILED)
    if not ctx.authorize(AclOperation.DELETE, _TOPIC, name):
        return TOPIC_AUTHORIZATION_FAILED, auth_message(TOPIC_AUTHORIZATION_FAILED)
    if name in INTERNAL_TOPICS:
        # Kafka's brokers leave this to kafka-topics.sh (same message); tidelog refuses it server-side for every
        # client: the coordinators' state would be lost (issue 16; docs/decisions/0030-internal-topics-protected.md)
        return ErrorCode.INVALID_TOPIC_EXCEPTION, (
            f"Topic {name} is a kafka internal topic and is not allowed to be marked for deletion.")
    if mutation_refused(ctx):
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE
    try:
        # off the loop (files, checkpoints); ZooKeeper mode's delete waits on the loop up to the request's timeout_ms
        deleted: TopicInfo = await topic_change(ctx.broker.request_pool, topics.delete_topic, name,
                                                deadline - time.monotonic())
    except Exception as exc:
        if not is_client_error(exc):
            raise
        return error_of(exc)
    record_mutations(ctx, int(deleted.num_partitions))
    if "topic_id" in resp:
        resp["topic_id"] = topic_uuid(deleted.topic_id)
    return 0, None


# ---------------------------------------------------------------------------------------------------------------
# CreatePartitions


@handles(ApiKey.CREATE_PARTITIONS)
async def create_partitions(ctx: RequestContext, request: dict) -> dict:
    topics = ctx.broker.topics
    validate_only = bool(request.get("validate_only", False))
    req = request.get("topics") or []
    dups = duplicates(t.get("name") for t in req)
    node = node_id(ctx)
    results: list[CreatePartitionsTopicResult] = []
    answered: set[str] = set()
    for t in req:
        name = t.get("name")
        if name in answered:
            continue
        answered.add(name)
        res: CreatePartitionsTopicResult = {"name": name, "error_code": 0, "error_message": None}

        def fail(err: ErrorCode, msg: str, res: CreatePartitionsTopicResult = res) -> None:
            res["error_code"] = error_code(err)
            res["error_message"] = msg

        count = int(t.get("count", 0))
        assignments = t.get("assignments")
        before = int(topics.require(name).num_partitions) if name not in dups and topics.exists(name) else 0
        if name in dups:
            fail(ErrorCode.INVALID_REQUEST, f"Duplicate topic in request: {name}")
        elif not ctx.authorize(AclOperation.ALTER, _TOPIC, name):
            fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")
        elif not topics.exists(name):
            fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        elif not validate_only and mutation_refused(ctx):
            fail(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE)
        elif topics.registered_brokers is not None:  # a cluster: the topic store's backend checks assignments
            manual = None if assignments is None else [[int(b) for b in a.get("broker_ids") or []]
                                                       for a in assignments]
            try:
                await topic_change(ctx.broker.request_pool, topics.create_partitions, name, count,
                                   validate_only=validate_only, assignments=manual)
            except Exception as exc:
                if not is_client_error(exc):
                    raise
                res["error_code"], res["error_message"] = error_of(exc)
        else:
            current = int(topics.require(name).num_partitions)
            problem = None
            if assignments is not None and count > current:
                if len(assignments) != count - current:
                    problem = (
                        f"Attempted to add {count - current} additional partition(s), but only "
                        f"{len(assignments)} assignment(s) were specified."
                    )
                else:
                    for a in assignments:
                        brokers = [int(b) for b in a.get("broker_ids") or []]
                        if brokers != [node]:
                            problem = (
                                f"The manual partition assignment includes broker(s) {brokers}, but only "
                                f"broker {node} is registered and the replication factor is 1."
                            )
                            break
            if problem is not None:
                fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            else:
                try:
                    await topic_change(ctx.broker.request_pool, topics.create_partitions, name, count,
                                       validate_only=validate_only)
                except Exception as exc:
                    if not is_client_error(exc):
                        raise
                    res["error_code"], res["error_message"] = error_of(exc)
        if res["error_code"] == 0 and not validate_only:
            record_mutations(ctx, count - before)
        results.append(res)
    mutation_throttle(ctx)  # controller_mutation_rate (KIP-599)
    return {"throttle_time_ms": 0, "results": results}


# ---------------------------------------------------------------------------------------------------------------
# DeleteRecords


def _allows_delete(info: TopicInfo) -> bool:
    return "delete" in info.log_config.cleanup_policy


@handles(ApiKey.DELETE_RECORDS)
async def delete_records(ctx: RequestContext, request: dict) -> dict:
    topics = ctx.broker.topics
    out_topics: list[DeleteRecordsTopicResult] = []
    for t in request.get("topics") or []:
        name: str = t.get("name")
        parts_out: list[DeleteRecordsPartitionResult] = []
        exists = topics.exists(name)
        info = topics.get(name) if exists else None
        allowed = ctx.authorize(AclOperation.DELETE, _TOPIC, name)
        for p in t.get("partitions") or []:
            index = int(p.get("partition_index", -1))
            offset = int(p.get("offset", -1))
            res: DeleteRecordsPartitionResult = {"partition_index": index, "low_watermark": -1, "error_code": 0}
            parts_out.append(res)
            if not allowed:
                res["error_code"] = TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or not 0 <= index < int(info.num_partitions):
                res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if name in INTERNAL_TOPICS:
                # Kafka's ReplicaManager.deleteRecordsOnLocalLog: InvalidTopicException for internal topics
                res["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
                continue
            try:
                plog = topics.get_log(name, index)
            except Exception as exc:
                if not is_client_error(exc):
                    raise
                res["error_code"] = error_of(exc)[0]
                continue
            if plog is None:
                res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not _allows_delete(info):
                res["error_code"] = ErrorCode.POLICY_VIOLATION
                res["low_watermark"] = int(plog.log_start_offset)
                continue
            hw = int(plog.high_watermark)
            target = hw if offset == -1 else offset
            if target < 0 or target > hw:
                res["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                res["low_watermark"] = int(plog.log_start_offset)
                continue
            try:
                plog.maybe_increment_log_start_offset(target)
            except Exception as exc:
                if not is_client_error(exc):
                    raise
                res["error_code"] = error_of(exc)[0]
            res["low_watermark"] = int(plog.log_start_offset)
        out_topics.append({"name": name, "partitions": parts_out})
    return {"throttle_time_ms": 0, "topics": out_topics}


# ---------------------------------------------------------------------------------------------------------------
# DescribeCluster


@handles(ApiKey.DESCRIBE_CLUSTER)
async def describe_cluster(ctx: RequestContext, request: dict) -> dict:
    endpoint_type = int(request.get("endpoint_type", ENDPOINT_BROKERS)) if ctx.api_version >= 1 else 1
    node = node_id(ctx)
    resp: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": str(ctx.broker.cluster_id),
        "controller_id": node,
        "brokers": [],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    if endpoint_type != ENDPOINT_BROKERS:
        resp["error_code"] = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        resp["error_message"] = (
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
        )
        resp["controller_id"] = -1
        return resp
    b = ctx.broker  # host/port are the advertised endpoint (the bound port when the listener asked for 0)
    listed = b.metadata_brokers(ctx.listener)  # cluster mode: the registered brokers, as Metadata lists them
    if listed is None:  # one node
        host, port = b.endpoint(ctx.listener)
        listed = [{"node_id": node, "host": host, "port": port, "rack": b.config.props.get("broker.rack")}]
    else:
        resp["controller_id"] = b.metadata_controller_id()
    resp["brokers"] = [{"broker_id": x["node_id"], "host": x["host"], "port": int(x["port"]), "rack": x["rack"],
                        "is_fenced": False} for x in listed]
    if request.get("include_cluster_authorized_operations"):
        bits = 0
        for op in _ACL_OPS_CLUSTER:
            bits |= 1 << op
        auth = ctx.broker.authorizer
        # AuthHelper.computeDescribeClusterResponse: 0 without DESCRIBE on the cluster
        resp["cluster_authorized_operations"] = (
            bits if auth is None else 0 if not ctx.authorize(AclOperation.DESCRIBE, _CLUSTER, CLUSTER_NAME)
            else auth.authorized_operations(ctx.principal, ctx.client_host, _CLUSTER, CLUSTER_NAME))
    return resp
