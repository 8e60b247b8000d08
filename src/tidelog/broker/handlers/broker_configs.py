"""The BROKER resource in DescribeConfigs / AlterConfigs / IncrementalAlterConfigs (issue 27 item 5).

Hooks called from ``handlers/admin.py``; the layers and the live reconfiguration are in
:mod:`tidelog.broker.dynamic_config`.

Kafka's behaviours reproduced (``ConfigAdminManager``, ``ZkAdminManager.alterBrokerConfigs``, ``ConfigHelper``):

* resource name ``"<id>"`` (this broker) changes the per-broker layer, ``""`` the cluster default; another id is
  INVALID_REQUEST "Unexpected broker id, expected <id> but received <name>";
* AlterConfigs (legacy) replaces the whole layer; IncrementalAlterConfigs applies SET / DELETE / APPEND / SUBTRACT
  to it (APPEND / SUBTRACT only for list configs);
* a refused change is INVALID_REQUEST with "Invalid config value for resource ConfigResource(type=BROKER,
  name='<name>'): <reason>", the reason Kafka's ("Cannot update these configs dynamically: Set(..)", ...);
* DescribeConfigs of ``""`` answers the dynamic default layer only (source DYNAMIC_DEFAULT_BROKER_CONFIG); of
  ``"<id>"`` every config with its source and, asked for, its synonyms by precedence: DYNAMIC_BROKER_CONFIG,
  DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG (and for ``log.retention.*`` / ``log.roll.*``
  the same per synonym name, in Kafka's order); ``read_only`` is false exactly for Kafka's dynamic configs.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker import config as bc
from tidelog.broker.dynamic_config import (
    ALL_DYNAMIC_CONFIGS,
    DynamicBrokerConfig,
    DynamicConfigError,
    incremented,
    synonyms_of,
)
from tidelog.broker.handlers import RequestContext
from tidelog.broker.topics import ConfigSynonym
from tidelog.errors import ErrorCode
from tidelog.protocol.errors import error_code

SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

_LIST_CONFIGS = {"log.cleanup.policy", "listeners", "advertised.listeners", "sasl.enabled.mechanisms",
                 "ssl.cipher.suites", "ssl.enabled.protocols", "metric.reporters",
                 "sasl.kerberos.principal.to.local.rules", "max.connections.per.ip.overrides"}


def dynamic(ctx: RequestContext) -> DynamicBrokerConfig:
    return ctx.broker.dynamic_config  # type: ignore[no-any-return]


def read_only(name: str) -> bool:
    """Kafka: read-only unless among ``DynamicBrokerConfig.AllDynamicConfigs`` (or a listener-prefixed one)."""
    return not (name in ALL_DYNAMIC_CONFIGS or name.startswith("listener.name."))


#: Kafka's defaults of the synonym names that have one (``KafkaConfig``): the DEFAULT_CONFIG synonyms
_SYNONYM_DEFAULTS = {"log.retention.hours": "168", "log.roll.hours": "168", "log.roll.jitter.hours": "0",
                     "log.flush.scheduler.interval.ms": "9223372036854775807"}


def synonyms(ctx: RequestContext, name: str, default_value: str | None) -> list[ConfigSynonym]:
    """The synonyms of a broker config in Kafka's order (``ConfigHelper.configSynonyms``): by source (dynamic
    broker, dynamic default, static, default), within a source by synonym name (``log.retention.ms``,
    ``.minutes``, ``.hours``), then the leading ones of other names dropped."""
    d = dynamic(ctx)
    names = synonyms_of(name)
    out: list[ConfigSynonym] = []
    for layer, source in ((d.broker, SOURCE_DYNAMIC_BROKER_CONFIG), (d.default, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (d.static, SOURCE_STATIC_BROKER_CONFIG)):
        out.extend(ConfigSynonym(n, layer[n], source) for n in names if n in layer)
    for n in names:
        value = default_value if n == name else _SYNONYM_DEFAULTS.get(n)
        if value is not None:
            out.append(ConfigSynonym(n, value, SOURCE_DEFAULT_CONFIG))
    while out and out[0].name != name:
        out.pop(0)
    return out


def entry_source(syns: list[ConfigSynonym]) -> int:
    """Kafka: the source of the first synonym, DEFAULT_CONFIG when there is none."""
    return syns[0].source if syns else SOURCE_DEFAULT_CONFIG


def default_layer_entries(ctx: RequestContext, entry_type: Any) -> list[Any]:
    """DescribeConfigs of the cluster default (empty resource name): the dynamic default layer only."""
    d = dynamic(ctx)
    return [entry_type(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, read_only=False,
                       is_sensitive=bc.is_sensitive_config(name),
                       synonyms=[ConfigSynonym(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)])
            for name, value in sorted(d.default.items())]


def _list_default(ctx: RequestContext, name: str) -> list[str] | None:
    if name not in _LIST_CONFIGS:
        return None
    raw = dynamic(ctx).config.props.get(name)
    if raw is None:
        key = bc.BROKER_KEYS.get(name)
        raw = getattr(key, "default", None)
    return [s.strip() for s in str(raw or "").split(",") if s.strip()]


def _message(rname: str, reason: str) -> str:
    return f"Invalid config value for resource ConfigResource(type=BROKER, name='{rname}'): {reason}"


async def alter_broker(ctx: RequestContext, rname: str, change_set: Any, validate_only: bool) -> tuple[int, str] | None:
    """Apply ``change_set`` (AlterConfigs: {name: value}; IncrementalAlterConfigs: [(name, op, value)]) to the
    layer ``rname`` names; (error code, message) when refused."""
    d = dynamic(ctx)
    current = d.default if rname == "" else d.broker
    try:
        if isinstance(change_set, dict):
            nulls = [k for k, v in change_set.items() if v is None]
            if nulls:
                raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
            new_layer = {str(k): str(v) for k, v in change_set.items()}
            changed = set(new_layer) | set(current)
        else:
            nulls = [name for name, op, value in change_set if value is None and op != 1]  # only DELETE takes null
            if nulls:
                raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
            new_layer = incremented(current, list(change_set), lambda n: _list_default(ctx, n))
            changed = {name for name, _, _ in change_set}
        if not changed:
            return None
        await ctx.broker.request_pool.run(d.alter, rname, new_layer, changed, validate_only)
    except DynamicConfigError as exc:
        return error_code(exc.kafka_error), _message(rname, exc.message)
    return None


def relabel_topic_entries(ctx: RequestContext, entries: list[Any]) -> list[Any]:
    """A topic's DescribeConfigs entries with the broker-level synonyms labelled by the layer that sets them:
    the topic store sees only the effective broker properties (static and dynamic merged)."""
    d = dynamic(ctx)
    if not d.default and not d.broker:
        return entries
    for e in entries:
        synonyms: list[ConfigSynonym] = []
        for s in e.synonyms:
            if s.source != SOURCE_STATIC_BROKER_CONFIG:
                synonyms.append(s)
                continue
            if s.name in d.broker:
                synonyms.append(ConfigSynonym(s.name, d.broker[s.name], SOURCE_DYNAMIC_BROKER_CONFIG))
            if s.name in d.default:
                synonyms.append(ConfigSynonym(s.name, d.default[s.name], SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG))
            if s.name in d.static:
                synonyms.append(ConfigSynonym(s.name, d.static[s.name], SOURCE_STATIC_BROKER_CONFIG))
        e.synonyms = synonyms
        if e.source == SOURCE_STATIC_BROKER_CONFIG and synonyms:
            e.source = synonyms[0].source
    return entries
