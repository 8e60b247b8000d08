"""Admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster.

The handlers translate between request/response bodies and the broker's :class:`TopicManager`; validation of
topic names, partition counts, replication factors and config values lives there and is reported as
``TopicError(kafka_error_name, message)``, which becomes a per-topic (or per-resource) error code and message
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
* AlterConfigs/IncrementalAlterConfigs/DescribeConfigs on a BROKER resource: dynamic broker configs, see
  ``handlers/broker_configs.py``.
* DescribeCluster with ``endpoint_type`` 2 (controllers) sent to a broker listener: UNSUPPORTED_ENDPOINT_TYPE.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from tidelog.broker import config as bc
from tidelog.broker.errors import error_of, is_client_error
from tidelog.broker.handlers import RequestContext, broker_configs, handles, topic_change
from tidelog.broker.handlers.bodies import (
    AlterConfigsResourceResponse,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatePartitionsTopicResult,
    DeletableTopicResult,
    DeleteRecordsPartitionResult,
    DeleteRecordsTopicResult,
    DescribeConfigsResult,
)
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
from tidelog.protocol.errors import error_code, error_for_code
from tidelog.storage import config as sc

_T = TypeVar("_T")
_C = TypeVar("_C")
_C_contra = TypeVar("_C_contra", contravariant=True)


class _ConfigAlter(Protocol[_C_contra]):
    """``TopicManager.alter_configs`` (overrides) or ``incremental_alter_configs`` (operations)."""

    def __call__(self, name: str, changes: _C_contra, /, validate_only: bool = False) -> TopicInfo: ...

log = logging.getLogger("tidelog.broker.admin")

# ConfigResource.Type
RESOURCE_UNKNOWN = 0
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# DescribeConfigsResponse.ConfigSource
SOURCE_UNKNOWN = 0
SOURCE_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

# DescribeConfigsResponse.ConfigType
TYPE_UNKNOWN = 0
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3
TYPE_SHORT = 4
TYPE_LONG = 5
TYPE_DOUBLE = 6
TYPE_LIST = 7
TYPE_CLASS = 8
TYPE_PASSWORD = 9

# IncrementalAlterConfigs OpType
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

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
# helpers


TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_TOPIC, _CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER


def _auth_message(code: int) -> str:
    return error_for_code(code).message


def _uuid(value: object) -> uuid.UUID:
    """Topic ids are 16 raw bytes in the TopicManager and ``uuid.UUID`` in protocol bodies."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | bytearray) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(int=0)


def _duplicates(names: Iterable[_T]) -> set[_T]:
    return {n for n, c in Counter(names).items() if c > 1}


def _node_id(ctx: RequestContext) -> int:
    nid = getattr(ctx.broker, "node_id", None)
    return int(nid) if nid is not None else int(ctx.broker.config.node_id)


def _str_value(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------------------------------------------------------
# config entries (DescribeConfigs, CreateTopics v5+)


def _config_type(entry: ConfigEntry, value: str | None) -> int:
    if entry.config_type is not None:
        return entry.config_type
    known = _topic_config_type(entry.name)
    return known if known != TYPE_UNKNOWN else _guess_type(value)


def _guess_type(value: str | None) -> int:
    if value is None:
        return TYPE_STRING
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    try:
        v = int(value)
    except ValueError:
        pass
    else:
        return TYPE_INT if -(2**31) <= v < 2**31 else TYPE_LONG
    try:
        float(value)
    except ValueError:
        return TYPE_LIST if "," in value else TYPE_STRING
    return TYPE_DOUBLE


def _synonyms(entry: ConfigEntry, value: str | None) -> list[dict]:
    """The entry's synonyms; a sensitive entry's synonyms carry no value either (Kafka: null)."""
    out = [{"name": x.name, "value": None if entry.is_sensitive else _str_value(x.value), "source": x.source}
           for x in entry.synonyms]
    return out or [{"name": entry.name, "value": None if entry.is_sensitive else value, "source": entry.source}]


def _describe_entry(entry: ConfigEntry, version: int, include_synonyms: bool, include_documentation: bool) -> dict:
    """A DescribeConfigs result entry with only the fields ``version`` carries."""
    value = _str_value(entry.value)
    out: dict[str, Any] = {
        "name": entry.name,
        "value": None if entry.is_sensitive else value,
        "read_only": entry.read_only,
        "is_sensitive": entry.is_sensitive,
    }
    if version == 0:
        out["is_default"] = entry.source == SOURCE_DEFAULT_CONFIG
    else:
        out["config_source"] = entry.source
        out["synonyms"] = _synonyms(entry, value) if include_synonyms else []
    if version >= 3:
        out["config_type"] = _config_type(entry, value)
        out["documentation"] = entry.documentation if include_documentation else None
    return out


def _broker_config_entries(ctx: RequestContext) -> list[ConfigEntry]:
    """Every broker config with its effective value. All are static (read-only) in tidelog."""
    cfg = ctx.broker.config
    out: list[ConfigEntry] = []
    seen: set[str] = set()
    for key in bc.BROKER_KEYS.values():
        raw = cfg.props.get(key.name, key.default)
        if key.name == "log.dirs" and raw is None:
            raw = ",".join(str(d) for d in cfg.log_dirs)
        if key.name == "node.id" and raw is None:
            raw = str(cfg.node_id)
        if key.name == "tidelog.metrics.listener" and cfg.metrics_listener is not None and ctx.broker.metrics.port:
            # the address bound (a configured port 0 becomes the real one): `tidelog topics describe` finds each
            # partition leader's cleaner metrics through it
            raw = f"{cfg.metrics_listener[0]}:{ctx.broker.metrics.port}"
        parsed = cfg.values.get(key.name)
        if parsed is None and raw is not None:
            try:
                parsed = key.parse(raw)
            except (ValueError, TypeError):
                parsed = None
        if isinstance(parsed, bool):
            ctype = TYPE_BOOLEAN
        elif isinstance(parsed, list):
            ctype = TYPE_LIST
        elif isinstance(parsed, int):
            ctype = TYPE_LONG if (key.name.endswith(".ms") or abs(parsed) >= 2**31) else TYPE_INT
        else:
            ctype = TYPE_STRING
        syns = broker_configs.synonyms(ctx, key.name, key.default)
        out.append(ConfigEntry(key.name, raw, broker_configs.entry_source(syns),
                               read_only=broker_configs.read_only(key.name),
                               is_sensitive=bc.is_sensitive_config(key.name), synonyms=syns,
                               config_type=ctype, documentation=key.doc or None))
        seen.add(key.name)
    defaults = _broker_log_defaults(ctx)
    for name in sorted(set(bc.LOG_DEFAULT_KEYS) | set(defaults)):
        if name in seen:
            continue
        raw = cfg.props.get(name, defaults.get(name))
        if raw is None:
            continue
        syns = broker_configs.synonyms(ctx, name, defaults.get(name))
        out.append(ConfigEntry(name, raw, broker_configs.entry_source(syns), read_only=broker_configs.read_only(name),
                               is_sensitive=bc.is_sensitive_config(name), synonyms=syns))
        seen.add(name)
    for name in sorted(cfg.props):  # unknown keys are kept and shown, as Kafka does
        if name not in seen:
            syns = broker_configs.synonyms(ctx, name, None)
            out.append(ConfigEntry(name, cfg.props[name], broker_configs.entry_source(syns),
                                   read_only=broker_configs.read_only(name), is_sensitive=bc.is_sensitive_config(name),
                                   synonyms=syns))
    return out


# Kafka defaults of the hour-based broker keys (ServerLogConfigs); the ms/minutes variants default to null.
_HOUR_KEY_DEFAULTS = {"log.retention.hours": "168", "log.roll.hours": "168", "log.roll.jitter.hours": "0"}


def _broker_log_defaults(ctx: RequestContext) -> dict[str, str]:
    """Defaults of the broker-level topic-default keys (``log.segment.bytes`` ...): Kafka's topic defaults
    under their broker names."""
    out = dict(_HOUR_KEY_DEFAULTS)
    for broker_name, topic_name in sc.BROKER_TO_TOPIC_CONFIG.items():
        value = sc.TOPIC_CONFIG_DEFAULTS.get(topic_name)
        if value is not None:
            out[broker_name] = value
    return out


def _topic_config_type(name: str) -> int:
    """ConfigType of a topic config from the storage layer's spec (int/long/double/boolean/string/list)."""
    spec = getattr(sc, "_BY_NAME", {}).get(name)
    kind = getattr(spec, "kind", None)
    return {
        "int": TYPE_INT,
        "long": TYPE_LONG,
        "double": TYPE_DOUBLE,
        "boolean": TYPE_BOOLEAN,
        "string": TYPE_STRING,
        "list": TYPE_LIST,
    }.get(kind or "", TYPE_UNKNOWN)


# ---------------------------------------------------------------------------------------------------------------
# CreateTopics


def _validate_assignments(ctx: RequestContext, assignments: list[CreatableReplicaAssignment]) -> tuple[int, int] | tuple[ErrorCode, str]:
    """(num_partitions, replication_factor) for a valid manual assignment, else (error_name, message)."""
    node = _node_id(ctx)
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
    dups = _duplicates(t.get("name") for t in topics_req)
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
    if _duplicates(names):
        return ErrorCode.INVALID_REQUEST, f"Duplicate configs in request: {sorted(_duplicates(names))}"
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
        result["topic_id"] = _uuid(info.topic_id)
    return result


def _create_topic_configs(entries: list[ConfigEntry]) -> list[dict]:
    out = []
    for e in entries:
        d = _describe_entry(e, 1, include_synonyms=False, include_documentation=False)
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
            wanted.append((t.get("name"), _uuid(t.get("topic_id"))))
    else:
        for n in request.get("topic_names") or []:
            wanted.append((n, uuid.UUID(int=0)))
    name_dups = _duplicates(n for n, _ in wanted if n is not None)
    id_dups = _duplicates(i for n, i in wanted if n is None and i.int != 0)
    responses: list[DeletableTopicResult] = []
    for name, topic_id in wanted:
        resp: DeletableTopicResult = {"name": name, "error_code": 0, "error_message": None}
        if v >= 6:
            resp["topic_id"] = topic_id
        code, msg = await _delete_one(ctx, name, topic_id, name_dups, id_dups, resp)
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
            return TOPIC_AUTHORIZATION_FAILED, _auth_message(TOPIC_AUTHORIZATION_FAILED)
    if not ctx.authorize(AclOperation.DELETE, _TOPIC, name):
        return TOPIC_AUTHORIZATION_FAILED, _auth_message(TOPIC_AUTHORIZATION_FAILED)
    if name in INTERNAL_TOPICS:
        # Kafka's brokers leave this to kafka-topics.sh (same message); tidelog refuses it server-side for every
        # client: the coordinators' state would be lost (issue 16; docs/decisions/0030-internal-topics-protected.md)
        return ErrorCode.INVALID_TOPIC_EXCEPTION, (
            f"Topic {name} is a kafka internal topic and is not allowed to be marked for deletion.")
    if mutation_refused(ctx):
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE
    try:
        deleted: TopicInfo = await topic_change(topics.delete_topic, name)  # off the loop (files, checkpoints)
    except Exception as exc:
        if not is_client_error(exc):
            raise
        return error_of(exc)
    record_mutations(ctx, int(deleted.num_partitions))
    if "topic_id" in resp:
        resp["topic_id"] = _uuid(deleted.topic_id)
    return 0, None


# ---------------------------------------------------------------------------------------------------------------
# CreatePartitions


@handles(ApiKey.CREATE_PARTITIONS)
async def create_partitions(ctx: RequestContext, request: dict) -> dict:
    topics = ctx.broker.topics
    validate_only = bool(request.get("validate_only", False))
    req = request.get("topics") or []
    dups = _duplicates(t.get("name") for t in req)
    node = _node_id(ctx)
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
                await topic_change(topics.create_partitions, name, count, validate_only=validate_only, assignments=manual)
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
                    await topic_change(topics.create_partitions, name, count, validate_only=validate_only)
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
# DescribeConfigs


@handles(ApiKey.DESCRIBE_CONFIGS)
async def describe_configs(ctx: RequestContext, request: dict) -> dict:
    include_synonyms = bool(request.get("include_synonyms", False)) and ctx.api_version >= 1
    include_doc = bool(request.get("include_documentation", False)) and ctx.api_version >= 3
    topics = ctx.broker.topics
    results: list[DescribeConfigsResult] = []
    for r in request.get("resources") or []:
        rtype = int(r.get("resource_type", RESOURCE_UNKNOWN))
        rname = r.get("resource_name") or ""
        keys = r.get("configuration_keys")
        res: DescribeConfigsResult = {
            "error_code": 0,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
            "configs": [],
        }
        results.append(res)
        entries: list[ConfigEntry]
        refused = _config_refusal(ctx, rtype, rname, AclOperation.DESCRIBE_CONFIGS)
        if refused:
            res["error_code"], res["error_message"] = refused, _auth_message(refused)
            continue
        if rtype == RESOURCE_TOPIC:
            if not topics.exists(rname):
                res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                res["error_message"] = f"Topic '{rname}' does not exist."
                continue
            try:
                entries = broker_configs.relabel_topic_entries(ctx, list(topics.describe_configs(rname, keys) or []))
            except Exception as exc:
                if not is_client_error(exc):
                    raise
                res["error_code"], res["error_message"] = error_of(exc)
                continue
        elif rtype == RESOURCE_BROKER:
            if rname and rname != str(_node_id(ctx)):
                res["error_code"] = ErrorCode.INVALID_REQUEST
                res["error_message"] = f"Unexpected broker id, expected {_node_id(ctx)} but received {rname}"
                continue
            entries = (broker_configs.default_layer_entries(ctx, ConfigEntry) if rname == ""
                       else _broker_config_entries(ctx))
        elif rtype == RESOURCE_BROKER_LOGGER:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = "Describing broker loggers is not supported."
            continue
        else:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Unsupported resource type {rtype}."
            continue
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        res["configs"] = [_describe_entry(e, ctx.api_version, include_synonyms, include_doc) for e in entries]
    return {"throttle_time_ms": 0, "results": results}


def _config_refusal(ctx: RequestContext, rtype: int, rname: str, op: AclOperation) -> int:
    """KafkaApis: a topic's configs need ``op`` on the topic, the broker's (and its loggers') ``op`` on the
    cluster; 0 when allowed."""
    if ctx.broker.authorizer is None:
        return 0
    if rtype == RESOURCE_TOPIC:
        return 0 if ctx.authorize(op, _TOPIC, rname) else TOPIC_AUTHORIZATION_FAILED
    if rtype in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return 0 if ctx.authorize(op, _CLUSTER, CLUSTER_NAME) else CLUSTER_AUTHORIZATION_FAILED
    return 0


# ---------------------------------------------------------------------------------------------------------------
# AlterConfigs / IncrementalAlterConfigs


def _broker_alter_refusal(ctx: RequestContext, rname: str, names: list[str]) -> tuple[ErrorCode, str] | None:
    if rname and rname != str(_node_id(ctx)):
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {_node_id(ctx)} but received {rname}"
    return None


async def _alter_config_resources(
    ctx: RequestContext,
    request: dict,
    *,
    bad_operation: Callable[[list[dict]], str | None],
    null_allowed: Callable[[dict], bool],
    alter: _ConfigAlter[_C],
    changes: Callable[[list[dict]], _C],
) -> dict:
    """AlterConfigs / IncrementalAlterConfigs: the same per-resource checks (Kafka's order), then
    ``alter(topic, changes(configs), validate_only=...)`` for a topic resource that passed them."""
    validate_only = bool(request.get("validate_only", False))
    topics = ctx.broker.topics
    responses: list[AlterConfigsResourceResponse] = []
    for r in request.get("resources") or []:
        rtype = int(r.get("resource_type", RESOURCE_UNKNOWN))
        rname = r.get("resource_name") or ""
        res: AlterConfigsResourceResponse = {
            "error_code": 0,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
        }
        responses.append(res)
        configs = r.get("configs") or []
        names = [c.get("name") for c in configs]
        refusal: tuple[ErrorCode, str] | None = None
        bad_op = bad_operation(configs)
        refused = _config_refusal(ctx, rtype, rname, AclOperation.ALTER_CONFIGS)
        if refused:
            refusal = (ErrorCode(refused), _auth_message(refused))
        elif _duplicates(names):
            refusal = (ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {sorted(_duplicates(names))}")
        elif bad_op is not None:
            refusal = (ErrorCode.INVALID_REQUEST, bad_op)
        elif rtype == RESOURCE_BROKER:
            refusal = _broker_alter_refusal(ctx, rname, names)
        elif rtype != RESOURCE_TOPIC:
            refusal = (ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}.")
        elif not topics.exists(rname):
            refusal = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{rname}' does not exist.")
        else:
            nulls = [c.get("name") for c in configs if c.get("value") is None and not null_allowed(c)]
            if nulls:
                refusal = (ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
        if refusal is not None:
            res["error_code"], res["error_message"] = error_code(refusal[0]), refusal[1]
            continue
        change_set = changes(configs)
        if rtype == RESOURCE_BROKER:  # dynamic broker configs
            refused_change = await broker_configs.alter_broker(ctx, rname, change_set, validate_only)
            if refused_change is not None:
                res["error_code"], res["error_message"] = refused_change
            continue
        try:
            await topic_change(alter, rname, change_set, validate_only=validate_only)  # off the loop (fsyncs)
        except Exception as exc:
            if not is_client_error(exc):
                raise
            res["error_code"], res["error_message"] = error_of(exc)
    return {"throttle_time_ms": 0, "responses": responses}


@handles(ApiKey.ALTER_CONFIGS)
async def alter_configs(ctx: RequestContext, request: dict) -> dict:
    return await _alter_config_resources(
        ctx,
        request,
        bad_operation=lambda configs: None,
        null_allowed=lambda c: False,
        alter=ctx.broker.topics.alter_configs,
        changes=lambda configs: {c["name"]: c["value"] for c in configs},
    )


def _unknown_config_operation(configs: list[dict]) -> str | None:
    bad_ops = [c for c in configs if int(c.get("config_operation", -1)) not in OP_NAMES]
    return f"Unknown config operation {bad_ops[0].get('config_operation')}" if bad_ops else None


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def incremental_alter_configs(ctx: RequestContext, request: dict) -> dict:
    return await _alter_config_resources(
        ctx,
        request,
        bad_operation=_unknown_config_operation,
        null_allowed=lambda c: int(c.get("config_operation", 0)) == OP_DELETE,
        alter=ctx.broker.topics.incremental_alter_configs,
        changes=lambda configs: [(c["name"], int(c["config_operation"]), c.get("value")) for c in configs],
    )


# ---------------------------------------------------------------------------------------------------------------
# DescribeCluster


@handles(ApiKey.DESCRIBE_CLUSTER)
async def describe_cluster(ctx: RequestContext, request: dict) -> dict:
    endpoint_type = int(request.get("endpoint_type", ENDPOINT_BROKERS)) if ctx.api_version >= 1 else 1
    node = _node_id(ctx)
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
