"""Topic-level log configuration with Kafka's names, defaults and validation (Kafka's ``TopicConfig`` / ``LogConfig``).

``LogConfig`` holds the parsed values (snake_case attributes); ``from_properties`` takes Kafka's dotted names
(``segment.bytes`` ...) as strings, validates strictly and raises :class:`InvalidConfigError` for unknown
names, unparsable values and out-of-range values.  ``from_broker_properties`` maps the broker-level defaults
(``log.segment.bytes``, ``log.retention.hours`` ...) onto the topic-level names.

Kafka 4 requires ``segment.bytes`` >= 1 MiB (KIP-1030).  Tests need tiny segments: they either build
``LogConfig(segment_bytes=...)`` directly (the constructor does not validate), pass
``min_segment_bytes=`` to ``from_properties``, or monkeypatch the module-level :data:`MIN_SEGMENT_BYTES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
INT_MIN = -(2**31)

#: Kafka 4.0's minimum for segment.bytes (KIP-1030).  Monkeypatch in tests that need tiny segments.
MIN_SEGMENT_BYTES = 1024 * 1024

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES = ("delete", "compact")


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    attr: str
    kind: str  # int | long | double | boolean | string | list
    default: Any
    check: Callable[[Any], str | None] | None = None


def _at_least(minimum: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def _between(lo: int | float, hi: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be in [{lo}, {hi}]"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _policies(v: tuple[str, ...]) -> str | None:
    bad = [p for p in v if p not in CLEANUP_POLICIES]
    if bad:
        return f"unknown cleanup policy {bad[0]!r} (delete, compact)"
    if len(set(v)) != len(v):
        return "duplicate cleanup policy"
    return None


def _segment_bytes_min(v: int) -> str | None:
    # resolved at call time so a monkeypatched MIN_SEGMENT_BYTES applies
    return None if v >= MIN_SEGMENT_BYTES else f"must be at least {MIN_SEGMENT_BYTES}"


_SPECS: tuple[_Spec, ...] = (
    _Spec("segment.bytes", "segment_bytes", "int", 1073741824, _segment_bytes_min),
    _Spec("segment.ms", "segment_ms", "long", 604800000, _at_least(1)),
    _Spec("segment.jitter.ms", "segment_jitter_ms", "long", 0, _at_least(0)),
    _Spec("segment.index.bytes", "segment_index_bytes", "int", 10485760, _at_least(4)),
    _Spec("index.interval.bytes", "index_interval_bytes", "int", 4096, _at_least(0)),
    _Spec("retention.ms", "retention_ms", "long", 604800000, _at_least(-1)),
    _Spec("retention.bytes", "retention_bytes", "long", -1, None),
    _Spec("cleanup.policy", "cleanup_policy", "list", ("delete",), _policies),
    _Spec("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "double", 0.5, _between(0.0, 1.0)),
    _Spec("delete.retention.ms", "delete_retention_ms", "long", 86400000, _at_least(0)),
    _Spec("min.compaction.lag.ms", "min_compaction_lag_ms", "long", 0, _at_least(0)),
    _Spec("max.compaction.lag.ms", "max_compaction_lag_ms", "long", LONG_MAX, _at_least(1)),
    _Spec(
        "message.timestamp.type",
        "message_timestamp_type",
        "string",
        CREATE_TIME,
        _one_of(CREATE_TIME, LOG_APPEND_TIME),
    ),
    _Spec(
        "message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "long", LONG_MAX, _at_least(0)
    ),
    _Spec("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "long", 3600000, _at_least(0)),
    _Spec("compression.type", "compression_type", "string", "producer", _one_of(*COMPRESSION_TYPES)),
    _Spec(
        "compression.gzip.level",
        "compression_gzip_level",
        "int",
        -1,
        lambda v: None if v == -1 or 1 <= v <= 9 else "must be -1 or in [1, 9]",
    ),
    _Spec("compression.lz4.level", "compression_lz4_level", "int", 9, _between(1, 17)),
    _Spec("compression.zstd.level", "compression_zstd_level", "int", 3, _between(-131072, 22)),
    _Spec("max.message.bytes", "max_message_bytes", "int", 1048588, _at_least(0)),
    _Spec("file.delete.delay.ms", "file_delete_delay_ms", "long", 60000, _at_least(0)),
    _Spec("flush.messages", "flush_messages", "long", LONG_MAX, _at_least(1)),
    _Spec("flush.ms", "flush_ms", "long", LONG_MAX, _at_least(0)),
    _Spec("min.insync.replicas", "min_insync_replicas", "int", 1, _at_least(1)),
    _Spec("unclean.leader.election.enable", "unclean_leader_election_enable", "boolean", False, None),
    _Spec("preallocate", "preallocate", "boolean", False, None),
)

_BY_NAME: dict[str, _Spec] = {s.name: s for s in _SPECS}


def _format(spec: _Spec, value: Any) -> str:
    if spec.kind == "boolean":
        return "true" if value else "false"
    if spec.kind == "list":
        return ",".join(value)
    return str(value)


#: Topic config name -> default value as Kafka's DescribeConfigs shows it.
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {s.name: _format(s, s.default) for s in _SPECS}


def _parse(spec: _Spec, raw: object) -> Any:
    name = spec.name
    if spec.kind in ("int", "long"):
        if isinstance(raw, bool):
            raise InvalidConfigError(name, raw, "expected an integer")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            try:
                value = int(text, 10)
            except ValueError:
                raise InvalidConfigError(name, raw, "expected an integer") from None
        lo, hi = (INT_MIN, INT_MAX) if spec.kind == "int" else (LONG_MIN, LONG_MAX)
        if not lo <= value <= hi:
            raise InvalidConfigError(name, raw, f"out of range for a {spec.kind}")
        return value
    if spec.kind == "double":
        try:
            value_f = float(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(name, raw, "expected a number") from None
        if value_f != value_f:  # NaN
            raise InvalidConfigError(name, raw, "expected a number")
        return value_f
    if spec.kind == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise InvalidConfigError(name, raw, "expected true or false")
        return text == "true"
    if spec.kind == "list":
        if isinstance(raw, (list, tuple)):
            items = [str(x).strip() for x in raw]
        else:
            items = [x.strip() for x in str(raw).split(",")]
        items = [x for x in items if x]
        if not items:
            raise InvalidConfigError(name, raw, "expected a non-empty comma-separated list")
        return tuple(x.lower() for x in items)
    text = str(raw).strip()
    if name == "compression.type":
        text = text.lower()
    return text


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic-level log configs.  Attribute names are the dotted names with '_' for '.'."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False

    # ------------------------------------------------------------------ derived
    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    # ------------------------------------------------------------------ conversions
    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(s.name for s in _SPECS)

    @staticmethod
    def is_known(name: str) -> bool:
        return name in _BY_NAME

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, object],
        base: LogConfig | None = None,
        *,
        min_segment_bytes: int | None = None,
    ) -> LogConfig:
        """Overlay ``props`` (Kafka names -> string values) on ``base`` (defaults if None), validating each.

        ``min_segment_bytes`` overrides the 1 MiB minimum of segment.bytes (tests use tiny segments).
        """
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            spec = _BY_NAME.get(name)
            if spec is None:
                raise InvalidConfigError(name, raw, "unknown topic configuration")
            value = _parse(spec, raw)
            if spec.name == "segment.bytes" and min_segment_bytes is not None:
                problem = None if value >= min_segment_bytes else f"must be at least {min_segment_bytes}"
            else:
                problem = spec.check(value) if spec.check is not None else None
            if problem is not None:
                raise InvalidConfigError(name, raw, problem)
            changes[spec.attr] = value
        return dataclasses.replace(base if base is not None else cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Every topic config as Kafka name -> string value."""
        return {s.name: _format(s, getattr(self, s.attr)) for s in _SPECS}

    def overrides(self, base: LogConfig | None = None) -> dict[str, str]:
        """The configs that differ from ``base`` (defaults if None)."""
        ref = (base or LogConfig()).to_properties()
        return {k: v for k, v in self.to_properties().items() if ref[k] != v}

    def get(self, name: str) -> Any:
        spec = _BY_NAME.get(name)
        if spec is None:
            raise KeyError(name)
        return getattr(self, spec.attr)

    @classmethod
    def from_broker_properties(
        cls, props: Mapping[str, object], *, min_segment_bytes: int | None = None
    ) -> LogConfig:
        """Topic defaults from broker-level names (``log.segment.bytes`` ...); other names are ignored.

        Precedence as in Kafka: ``log.roll.ms`` over ``log.roll.hours``, ``log.roll.jitter.ms`` over
        ``log.roll.jitter.hours``, ``log.retention.ms`` over ``.minutes`` over ``.hours``.
        """
        topic: dict[str, object] = {}
        for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
            if broker_name in props:
                topic[topic_name] = props[broker_name]

        def hours_or_ms(
            ms_name: str, hours_name: str, topic_name: str, minutes_name: str | None = None
        ) -> None:
            if ms_name in props:
                topic[topic_name] = props[ms_name]
                return
            if minutes_name is not None and minutes_name in props:
                topic[topic_name] = _scaled(minutes_name, props[minutes_name], 60_000)
                return
            if hours_name in props:
                topic[topic_name] = _scaled(hours_name, props[hours_name], 3_600_000)

        hours_or_ms("log.roll.ms", "log.roll.hours", "segment.ms")
        hours_or_ms("log.roll.jitter.ms", "log.roll.jitter.hours", "segment.jitter.ms")
        hours_or_ms("log.retention.ms", "log.retention.hours", "retention.ms", "log.retention.minutes")
        return cls.from_properties(topic, min_segment_bytes=min_segment_bytes)


def _scaled(name: str, raw: object, factor: int) -> int:
    try:
        value = int(str(raw).strip(), 10)
    except ValueError:
        raise InvalidConfigError(name, raw, "expected an integer") from None
    return -1 if value < 0 else value * factor


#: Broker-level default name -> topic-level name (the ms/minutes/hours families are handled separately).
BROKER_TO_TOPIC_CONFIG: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "message.max.bytes": "max.message.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "log.preallocate": "preallocate",
}
