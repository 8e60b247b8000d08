"""Dynamic group configs: the GROUP config resource (type 32) of Kafka 4 (KIP-848 / KIP-932).

``kafka-configs.sh --entity-type groups --entity-name G --alter --add-config share.auto.offset.reset=earliest``
sends IncrementalAlterConfigs with a GROUP resource; DescribeConfigs shows every group config with its effective
value (``GROUP_CONFIG`` where the group has its own, ``DEFAULT_CONFIG`` otherwise: the broker's
``group.consumer.*`` / ``group.share.*`` value), ListConfigResources v1 lists the groups that have configs.

The configs (Kafka's ``GroupConfig``) and where each one's default comes from:

==================================== ========================================= ==============================
group config                         broker default                            broker bounds (min / max)
==================================== ========================================= ==============================
``consumer.session.timeout.ms``      ``group.consumer.session.timeout.ms``     ``group.consumer.min/max.session.timeout.ms``
``consumer.heartbeat.interval.ms``   ``group.consumer.heartbeat.interval.ms``  ``group.consumer.min/max.heartbeat.interval.ms``
``share.session.timeout.ms``         ``group.share.session.timeout.ms``        ``group.share.min/max.session.timeout.ms``
``share.heartbeat.interval.ms``      ``group.share.heartbeat.interval.ms``     ``group.share.min/max.heartbeat.interval.ms``
``share.record.lock.duration.ms``    ``group.share.record.lock.duration.ms``   ``group.share.min/max.record.lock.duration.ms``
``share.delivery.count.limit``       ``group.share.delivery.count.limit``      ``group.share.min/max.delivery.count.limit``
``share.partition.max.record.locks`` ``group.share.partition.max.record.locks`` ``group.share.min/max.partition.max.record.locks``
``share.auto.offset.reset``          ``share.auto.offset.reset`` (tidelog)     latest / earliest / by_duration:<ISO-8601>
``share.isolation.level``            read_uncommitted                          read_committed / read_uncommitted
``share.renew.acknowledge.enable``   true (no broker config)                   true / false (KIP-1222)
==================================== ========================================= ==============================

An alteration is validated as Kafka's ``GroupConfig.validate`` does: the group's configs merged with the broker
defaults, every name known ("Unknown group config name: X"), every value parsed and within the broker's bounds,
the session timeout above the heartbeat interval; a failure is INVALID_CONFIG for that resource only. The values
read by the coordinators are clamped to the broker's bounds (``GroupConfig.evaluate``), so lowering a broker
bound later caps a group's value instead of breaking the group. Kafka's ``streams.*`` configs are refused as
unknown: tidelog has no streams groups (KIP-1071).

Where they are kept: Kafka keeps them in the KRaft metadata log (``ConfigRecord`` of resource type GROUP); Kafka's
ZooKeeper mode never had group configs. tidelog keeps them, on one node, in ``group-configs.json`` in the first
log dir (written atomically); in ZooKeeper mode in ``/config/groups/<sanitized group>`` with a
``/config/changes`` notification, every broker caching them all (``tidelog.cluster.group_configs``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tidelog.errors import ApiError, ErrorCode
from tidelog.storage.checkpoints import atomic_write

log = logging.getLogger("tidelog.broker.group_configs")

RESOURCE_GROUP = 32  # ConfigResource.Type.GROUP
SOURCE_GROUP_CONFIG = 8  # DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
STORE_FILE = "group-configs.json"
STORE_VERSION = 1
#: the most configs one store may hold, as JSON (as a ZooKeeper znode is bounded by jute.maxbuffer)
MAX_STORE_BYTES = 16_000_000
#: the most groups that may have configs (a bound on what a client with ALTER_CONFIGS makes every broker hold)
MAX_CONFIGURED_GROUPS = 100_000


class GroupConfigError(ApiError):
    """An alteration refused for one resource (INVALID_CONFIG, or INVALID_REQUEST for a bad resource)."""

    def __init__(self, message: str, kafka_error: ErrorCode = ErrorCode.INVALID_CONFIG) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error
        self.message = message


@dataclass(frozen=True)
class GroupConfigKey:
    name: str
    broker_key: str | None  # where the default comes from
    default: str  # Kafka's default when the broker key is unset
    kind: str  # "int" or "string"
    at_least: int | None = None  # GroupConfig's own range (atLeast)
    bounds: tuple[str, str, int, int] | None = None  # broker min key, max key, their defaults
    choices: tuple[str, ...] = ()
    doc: str = ""


_KEYS = (
    GroupConfigKey("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", "45000", "int", 1,
                   ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms", 45000, 60000),
                   doc="The timeout to detect client failures when using the consumer group protocol."),
    GroupConfigKey("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", "5000", "int", 1,
                   ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", 5000, 15000),
                   doc="The heartbeat interval given to the members of a consumer group."),
    GroupConfigKey("share.session.timeout.ms", "group.share.session.timeout.ms", "45000", "int", 1,
                   ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms", 45000, 60000),
                   doc="The timeout to detect client failures when using the share group protocol."),
    GroupConfigKey("share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms", "5000", "int", 1,
                   ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms", 5000, 15000),
                   doc="The heartbeat interval given to the members of a share group."),
    GroupConfigKey("share.record.lock.duration.ms", "group.share.record.lock.duration.ms", "30000", "int", 1000,
                   ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms", 15000, 60000),
                   doc="The record acquisition lock duration in milliseconds for share groups."),
    GroupConfigKey("share.delivery.count.limit", "group.share.delivery.count.limit", "5", "int", 2,
                   ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit", 2, 10),
                   doc="The maximum number of delivery attempts for a record delivered to a share group."),
    GroupConfigKey("share.partition.max.record.locks", "group.share.partition.max.record.locks", "2000", "int", 100,
                   ("group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks",
                    100, 10000),
                   doc="Share-group record lock limit per share-partition."),
    GroupConfigKey("share.auto.offset.reset", "share.auto.offset.reset", "latest", "string",
                   doc="The strategy to initialize the share-partition start offset: earliest, latest, or "
                       "by_duration:<ISO-8601 duration>."),
    GroupConfigKey("share.isolation.level", None, "read_uncommitted", "string",
                   choices=("read_committed", "read_uncommitted"),
                   doc="Controls how to read records written transactionally."),
    # KIP-1222 (Kafka 4.2): Kafka's GroupConfig BOOLEAN, default true, no broker-level default (share_renew.py)
    GroupConfigKey("share.renew.acknowledge.enable", None, "true", "boolean",
                   doc="Whether the renew acknowledge type is enabled for the share group."),
)
GROUP_CONFIG_KEYS: dict[str, GroupConfigKey] = {k.name: k for k in _KEYS}
_UNBOUNDED_DEFAULTS = frozenset({"share.session.timeout.ms", "share.heartbeat.interval.ms"})
_SESSION_PAIRS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                  ("share.session.timeout.ms", "share.heartbeat.interval.ms"))

# java.time.Duration.parse's text: PnDTnHnMn.nS, each part optional, an optional sign in front of each
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
                       re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as ``java.time.Duration.parse`` reads it; ValueError otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if not m or text.strip().upper().endswith("T") or not any(m.group(i) for i in range(2, 6)):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    sign = -1 if m.group(1) == "-" else 1
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in range(2, 6))
    frac = m.group(6) or ""
    ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000
    if frac:
        part = int((frac + "000")[:3])
        ms += -part if seconds < 0 or m.group(5).startswith("-") else part
    return sign * ms


def parse_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """``share.auto.offset.reset``: ("earliest"|"latest", None) or ("by_duration", ms back from now)."""
    v = value.strip().lower()
    if v in ("earliest", "latest"):
        return v, None
    if v.startswith("by_duration:"):
        ms = parse_duration_ms(value.strip()[len("by_duration:"):])
        if ms < 0:
            raise ValueError("Negative duration is not allowed.")
        return "by_duration", ms
    raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset: "
                     "must be earliest, latest or by_duration:<ISO-8601 duration>")


def parse_boolean(value: str, default: bool | None) -> bool | None:
    """A BOOLEAN config as Kafka's ``ConfigDef`` parses it: ``true`` / ``false``, any case, around blanks."""
    v = str(value).strip().lower()
    return True if v == "true" else False if v == "false" else default


@dataclass(frozen=True)
class EffectiveGroupConfig:
    """A group's configs as the coordinators read them (clamped to the broker's bounds)."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str
    share_isolation_level: str
    share_renew_acknowledge_enable: bool = True


class GroupConfigStore(Protocol):
    """Where group configs are kept: ``read`` every group's, ``write`` one group's (blocking)."""

    def read(self) -> dict[str, dict[str, str]]: ...

    def write(self, group: str, configs: dict[str, str]) -> None: ...

    def watch(self, on_change: Callable[[str, dict[str, str]], None]) -> None:
        """Call ``on_change(group, configs)`` (on any thread) when another broker changed a group's configs."""
        ...


class FileGroupConfigStore:
    """One node's group configs in a JSON file in the first log dir."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def watch(self, on_change: Callable[[str, dict[str, str]], None]) -> None:
        """One node: nobody else writes the file."""

    def read(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("group configs unreadable, ignoring them", extra={"kv": {"path": self.path, "error": exc}})
            return {}
        if not isinstance(data, dict) or data.get("version") != STORE_VERSION:
            log.error("group configs of an unknown version, ignoring them", extra={"kv": {"path": self.path}})
            return {}
        groups = data.get("groups") or {}
        return {str(g): {str(k): str(v) for k, v in (c or {}).items()} for g, c in groups.items()}

    def write(self, group: str, configs: dict[str, str]) -> None:
        groups = self.read()
        if configs:
            groups[group] = dict(configs)
        else:
            groups.pop(group, None)
        body = json.dumps({"version": STORE_VERSION, "groups": groups}, indent=1, sort_keys=True).encode()
        if len(body) > MAX_STORE_BYTES:
            raise GroupConfigError(f"group configs would exceed {MAX_STORE_BYTES} bytes", ErrorCode.POLICY_VIOLATION)
        atomic_write(self.path, body)


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(str(props.get(key, default)).strip())
    except ValueError:
        return default


class GroupConfigs:
    """Every group's dynamic configs, their validation against the broker's, and the effective values."""

    def __init__(self, props: Mapping[str, str], store: GroupConfigStore,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.props = props
        self.store = store
        self.loop = loop  # where the in-memory configs change (the coordinators read them there); None: here
        self._lock = threading.Lock()
        self._groups: dict[str, dict[str, str]] = store.read()
        self._effective: dict[str, EffectiveGroupConfig] = {}
        self.listeners: list[Callable[[str], None]] = []

    # -- reads (on the loop: memory only) ----------------------------------------------------------------------

    def defaults(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for k in _KEYS:
            out[k.name] = str(self.props.get(k.broker_key, k.default)) if k.broker_key else k.default
        return out

    def overrides(self, group: str) -> dict[str, str]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def effective(self, group: str) -> EffectiveGroupConfig:
        cached = self._effective.get(group)
        if cached is not None:
            return cached
        own = self._groups.get(group, {})
        merged = {**self.defaults(), **own}
        ints: dict[str, int] = {}
        for k in _KEYS:
            if k.kind != "int":
                continue
            value = _int(merged, k.name, int(k.default))
            # a group's own value is capped by the broker's bounds (Kafka's GroupConfig.evaluate); the broker's own
            # default is used as the coordinators always did (the share session/heartbeat ones unbounded)
            if k.bounds is not None and (k.name in own or k.name not in _UNBOUNDED_DEFAULTS):
                lo = _int(self.props, k.bounds[0], k.bounds[2])
                hi = _int(self.props, k.bounds[1], k.bounds[3])
                value = min(max(value, lo), hi)
            ints[k.name] = value
        session, heartbeat = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
        if ints[heartbeat] >= ints[session]:  # the member still needs a usable interval (Kafka logs this)
            ints[heartbeat] = max(ints[session] // 3, 1)
        session, heartbeat = "share.session.timeout.ms", "share.heartbeat.interval.ms"
        ints[heartbeat] = min(ints[heartbeat], max(ints[session] // 3, 1))
        reset = merged["share.auto.offset.reset"]
        try:
            parse_auto_offset_reset(reset)
        except ValueError:
            reset = "latest"
        out = EffectiveGroupConfig(
            consumer_session_timeout_ms=ints["consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=ints["consumer.heartbeat.interval.ms"],
            share_session_timeout_ms=ints["share.session.timeout.ms"],
            share_heartbeat_interval_ms=ints["share.heartbeat.interval.ms"],
            share_record_lock_duration_ms=ints["share.record.lock.duration.ms"],
            share_delivery_count_limit=ints["share.delivery.count.limit"],
            share_partition_max_record_locks=ints["share.partition.max.record.locks"],
            share_auto_offset_reset=reset,
            share_isolation_level=merged["share.isolation.level"],
            share_renew_acknowledge_enable=parse_boolean(merged["share.renew.acknowledge.enable"], True) is not False,
        )
        if len(self._effective) > 10_000:  # a cache, bounded: every entry can be rebuilt
            self._effective.clear()
        self._effective[group] = out
        return out

    # -- validation and changes --------------------------------------------------------------------------------

    def validate(self, group: str, configs: Mapping[str, str]) -> None:
        """Kafka's ``GroupConfig.validate``: raises :class:`GroupConfigError` (INVALID_CONFIG)."""
        if not group:
            raise GroupConfigError("Group name must not be empty", ErrorCode.INVALID_REQUEST)
        for name in configs:
            if name not in GROUP_CONFIG_KEYS:
                raise GroupConfigError(f"Unknown group config name: {name}")
        merged = {**self.defaults(), **configs}
        values: dict[str, int] = {}
        for k in _KEYS:
            raw = merged[k.name]
            if k.kind == "int":
                try:
                    value = int(str(raw).strip())
                except ValueError:
                    raise GroupConfigError(f"Invalid value {raw} for configuration {k.name}: Not a number of type "
                                           "INT") from None
                if not -(2**31) <= value < 2**31:
                    raise GroupConfigError(f"Invalid value {raw} for configuration {k.name}: Not a number of type INT")
                if k.at_least is not None and value < k.at_least:
                    raise GroupConfigError(f"Invalid value {value} for configuration {k.name}: Value must be at "
                                           f"least {k.at_least}")
                values[k.name] = value
                if k.name in configs and k.bounds is not None:
                    lo = _int(self.props, k.bounds[0], k.bounds[2])
                    hi = _int(self.props, k.bounds[1], k.bounds[3])
                    if value < lo:
                        raise GroupConfigError(f"{k.name} must be greater than or equal to {k.bounds[0]}")
                    if value > hi:
                        raise GroupConfigError(f"{k.name} must be less than or equal to {k.bounds[1]}")
            elif k.kind == "boolean":
                if parse_boolean(str(raw), None) is None:
                    raise GroupConfigError(f"Invalid value {raw} for configuration {k.name}: Expected value to be "
                                           "either true or false")
            elif k.choices and str(raw).strip().lower() not in k.choices:
                raise GroupConfigError(f"Invalid value {raw} for configuration {k.name}: String must be one of: "
                                       + ", ".join(k.choices))
            elif k.name == "share.auto.offset.reset":
                try:
                    parse_auto_offset_reset(str(raw))
                except ValueError as exc:
                    raise GroupConfigError(str(exc)) from None
        for session, heartbeat in _SESSION_PAIRS:
            if (session in configs or heartbeat in configs) and values[session] <= values[heartbeat]:
                raise GroupConfigError(f"{session} must be greater than {heartbeat}")

    def alter(self, group: str, configs: dict[str, str], validate_only: bool = False) -> None:
        """Blocking (the store writes; a request handler thread): replaces the group's configs after validating
        them; the in-memory copy changes on the loop, in the order of the writes."""
        self.validate(group, configs)
        if configs and group not in self._groups and len(self._groups) >= MAX_CONFIGURED_GROUPS:
            raise GroupConfigError(f"{MAX_CONFIGURED_GROUPS} groups have configs already", ErrorCode.POLICY_VIOLATION)
        if validate_only:
            return
        with self._lock:
            self.store.write(group, configs)
            self._changed(group, dict(configs))

    def _changed(self, group: str, configs: dict[str, str]) -> None:
        if self.loop is None:
            self.set_group(group, configs)
        else:
            self.loop.call_soon_threadsafe(self.set_group, group, configs)

    def incremental(self, group: str, ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
        """IncrementalAlterConfigs' SET (0) / DELETE (1) on the group's configs; APPEND / SUBTRACT are refused
        as Kafka refuses them for a config that is not a list."""
        out = self.overrides(group)
        for name, op, value in ops:
            if op == 0:
                out[name] = "" if value is None else value
            elif op == 1:
                out.pop(name, None)
            else:
                raise GroupConfigError(
                    f"Config value {'append' if op == 2 else 'subtract'} is not allowed for config key: {name}",
                    ErrorCode.INVALID_CONFIG)
        return out

    def set_group(self, group: str, configs: Mapping[str, str]) -> None:
        """A group's configs replaced in memory (after a write here, or a change seen in ZooKeeper)."""
        if configs:
            self._groups[group] = dict(configs)
        else:
            self._groups.pop(group, None)
        self._effective.pop(group, None)
        for listener in list(self.listeners):
            try:
                listener(group)
            except Exception:
                log.exception("group config listener failed")



def open_group_configs(props: Mapping[str, str], store: GroupConfigStore,
                       loop: asyncio.AbstractEventLoop | None) -> GroupConfigs:
    """Blocking (the store's first read): the broker's group configs, with the changes the store reports (made
    through other brokers, in ZooKeeper mode) applied on ``loop``."""
    configs = GroupConfigs(props, store, loop)
    store.watch(configs._changed)
    return configs
