"""Config APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, and the config entries CreateTopics v5+
answers with (Kafka's ``ConfigAdminManager``/``KafkaApis``).

Topic configs are the :class:`TopicManager`'s (validated there, a refusal is a ``TopicError``); BROKER and
BROKER_LOGGER resources are dynamic broker configs, see ``handlers/broker_configs.py``. A resource named twice,
a null value or an unknown operation is INVALID_REQUEST for that resource only, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from tidelog.broker import config as bc
from tidelog.broker import group_configs as gcs
from tidelog.broker.errors import error_of, is_client_error
from tidelog.broker.handlers import RequestContext, broker_configs, handles, topic_change
from tidelog.broker.handlers.admin_common import (
    CLUSTER_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    auth_message,
    duplicates,
    node_id,
    str_value,
)
from tidelog.broker.handlers.bodies import (
    AlterConfigsResourceResponse,
    DescribeConfigsResult,
)
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.broker.topics import ConfigEntry, ConfigSynonym, TopicInfo
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_code
from tidelog.storage import config as sc

_T = TypeVar("_T")
_C = TypeVar("_C")
_C_contra = TypeVar("_C_contra", contravariant=True)


class _ConfigAlter(Protocol[_C_contra]):
    """``TopicManager.alter_configs`` (overrides) or ``incremental_alter_configs`` (operations)."""

    def __call__(self, name: str, changes: _C_contra, /, validate_only: bool = False) -> TopicInfo: ...

log = logging.getLogger("tidelog.broker.configs")

_TOPIC, _CLUSTER, _GROUP = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.GROUP

# ConfigResource.Type
RESOURCE_UNKNOWN = 0
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = gcs.RESOURCE_GROUP

# DescribeConfigsResponse.ConfigSource
SOURCE_UNKNOWN = 0
SOURCE_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
SOURCE_GROUP_CONFIG = gcs.SOURCE_GROUP_CONFIG

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
    out = [{"name": x.name, "value": None if entry.is_sensitive else str_value(x.value), "source": x.source}
           for x in entry.synonyms]
    return out or [{"name": entry.name, "value": None if entry.is_sensitive else value, "source": entry.source}]


def describe_entry(entry: ConfigEntry, version: int, include_synonyms: bool, include_documentation: bool) -> dict:
    """A DescribeConfigs result entry with only the fields ``version`` carries."""
    value = str_value(entry.value)
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
            res["error_code"], res["error_message"] = refused, auth_message(refused)
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
            if rname and rname != str(node_id(ctx)):
                res["error_code"] = ErrorCode.INVALID_REQUEST
                res["error_message"] = f"Unexpected broker id, expected {node_id(ctx)} but received {rname}"
                continue
            entries = (broker_configs.default_layer_entries(ctx, ConfigEntry) if rname == ""
                       else _broker_config_entries(ctx))
        elif rtype == RESOURCE_BROKER_LOGGER:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = "Describing broker loggers is not supported."
            continue
        elif rtype == RESOURCE_GROUP and ctx.broker.group_configs is not None:
            if not rname:
                res["error_code"] = ErrorCode.INVALID_REQUEST
                res["error_message"] = "Group name must not be empty"
                continue
            entries = _group_config_entries(ctx.broker.group_configs, rname)
        else:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Unsupported resource type {rtype}."
            continue
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        res["configs"] = [describe_entry(e, ctx.api_version, include_synonyms, include_doc) for e in entries]
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
    if rtype == RESOURCE_GROUP:
        return 0 if ctx.authorize(op, _GROUP, rname) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return 0


def _group_config_entries(gc: gcs.GroupConfigs, group: str) -> list[ConfigEntry]:
    """Every group config (Kafka's ``ConfigHelper`` for GROUP): the group's own value (GROUP_CONFIG) or the
    broker's default (DEFAULT_CONFIG), with both as synonyms."""
    own, defaults = gc.overrides(group), gc.defaults()
    out: list[ConfigEntry] = []
    for name, key in gcs.GROUP_CONFIG_KEYS.items():
        syns = [ConfigSynonym(name, own[name], SOURCE_GROUP_CONFIG)] if name in own else []
        syns.append(ConfigSynonym(name, defaults[name], SOURCE_DEFAULT_CONFIG))
        out.append(ConfigEntry(name, own.get(name, defaults[name]), syns[0].source, synonyms=syns,
                               config_type={"int": TYPE_INT, "boolean": TYPE_BOOLEAN}.get(key.kind, TYPE_STRING),
                               documentation=key.doc or None))
    return out


# ---------------------------------------------------------------------------------------------------------------
# AlterConfigs / IncrementalAlterConfigs


def _broker_alter_refusal(ctx: RequestContext, rname: str, names: list[str]) -> tuple[ErrorCode, str] | None:
    if rname and rname != str(node_id(ctx)):
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id(ctx)} but received {rname}"
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
            refusal = (ErrorCode(refused), auth_message(refused))
        elif duplicates(names):
            refusal = (ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {sorted(duplicates(names))}")
        elif bad_op is not None:
            refusal = (ErrorCode.INVALID_REQUEST, bad_op)
        elif rtype == RESOURCE_BROKER:
            refusal = _broker_alter_refusal(ctx, rname, names)
        elif rtype == RESOURCE_GROUP and ctx.broker.group_configs is not None:
            nulls = [c.get("name") for c in configs if c.get("value") is None and not null_allowed(c)]
            if not rname:
                refusal = (ErrorCode.INVALID_REQUEST, "Group name must not be empty")
            elif nulls:
                refusal = (ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
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
        if rtype == RESOURCE_GROUP and ctx.broker.group_configs is not None:
            try:
                await _alter_group(ctx, ctx.broker.group_configs, rname, change_set, validate_only)
            except gcs.GroupConfigError as exc:
                res["error_code"], res["error_message"] = error_code(exc.kafka_error), exc.message
            continue
        if rtype == RESOURCE_BROKER:  # dynamic broker configs
            refused_change = await broker_configs.alter_broker(ctx, rname, change_set, validate_only)
            if refused_change is not None:
                res["error_code"], res["error_message"] = refused_change
            continue
        try:
            # off the loop (fsyncs)
            await topic_change(ctx.broker.request_pool, alter, rname, change_set, validate_only=validate_only)
        except Exception as exc:
            if not is_client_error(exc):
                raise
            res["error_code"], res["error_message"] = error_of(exc)
    return {"throttle_time_ms": 0, "responses": responses}


async def _alter_group(ctx: RequestContext, gc: gcs.GroupConfigs, group: str, change_set: object,
                       validate_only: bool) -> None:
    """A GROUP resource: AlterConfigs replaces the group's configs, IncrementalAlterConfigs applies its operations;
    the store's write runs in the request pool (a file fsync, or a ZooKeeper transaction)."""
    if isinstance(change_set, dict):
        layer = {str(k): str(v) for k, v in change_set.items()}
    elif isinstance(change_set, list):
        layer = gc.incremental(group, [(str(n), int(op), v) for n, op, v in change_set])
    else:
        raise TypeError(f"unexpected config changes {change_set!r}")
    await ctx.broker.request_pool.run(gc.alter, group, layer, validate_only)


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
# ListConfigResources (KIP-1142; v0 was KIP-714's ListClientMetricsResources)

#: ListConfigResourcesRequest.supportedResourceTypes: v0 CLIENT_METRICS only; v1 adds the others
_LISTABLE_V1 = (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP)


@handles(ApiKey.LIST_CONFIG_RESOURCES)
async def list_config_resources(ctx: RequestContext, request: dict) -> dict:
    """The resources a DescribeConfigs / IncrementalAlterConfigs can name (``kafka-configs.sh --describe`` without
    an entity name): every topic, every live broker (as BROKER and as BROKER_LOGGER), the client-metrics
    subscriptions (tidelog has none: KIP-714 telemetry is accepted, not configured) and the groups that have
    configs. Needs DESCRIBE_CONFIGS on the cluster; a type the version does not know is UNSUPPORTED_VERSION."""
    resp: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "config_resources": []}
    if ctx.broker.authorizer is not None and not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, _CLUSTER, CLUSTER_NAME):
        resp["error_code"] = CLUSTER_AUTHORIZATION_FAILED
        return resp
    supported = _LISTABLE_V1 if ctx.api_version >= 1 else (RESOURCE_CLIENT_METRICS,)
    wanted = [int(t) for t in (request.get("resource_types") or [])] if ctx.api_version >= 1 else []
    if any(t not in supported for t in wanted):
        resp["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        return resp
    types = set(wanted or supported)
    out: list[dict[str, Any]] = resp["config_resources"]

    def add(rtype: int, names: Iterable[str]) -> None:
        out.extend({"resource_name": n, "resource_type": rtype} for n in names)

    if RESOURCE_TOPIC in types:
        add(RESOURCE_TOPIC, sorted(ctx.broker.topics.names()))
    if types & {RESOURCE_BROKER, RESOURCE_BROKER_LOGGER}:
        listed = ctx.broker.metadata_brokers(ctx.listener)
        ids = sorted(int(b["node_id"]) for b in listed) if listed is not None else [node_id(ctx)]
        for rtype in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
            if rtype in types:
                add(rtype, [str(i) for i in ids])
    if RESOURCE_GROUP in types and ctx.broker.group_configs is not None:
        add(RESOURCE_GROUP, ctx.broker.group_configs.groups())
    return resp
