"""Option parsing for the ``tidelog`` and ``tidelog-log`` data sources.

Names and semantics follow Spark's Kafka connector (``spark-sql-kafka-0-10``) so that a job migrating from
``format("kafka")`` changes only the format name. Options are case-insensitive (PySpark hands a
case-insensitive dict to the data source). Everything here is pure Python and runs on the driver.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidelog.client.security import ClientConfigError, librdkafka_config

TopicPartition = tuple[str, int]

EARLIEST = -2
"""In a JSON offset spec, -2 means the earliest offset (as in Spark)."""
LATEST = -1
"""In a JSON offset spec, -1 means the latest offset (as in Spark)."""

# librdkafka does not know the Java client's (de)serializer settings; Spark sets them itself, so a job that
# carries them over from a JVM config should not fail on them.
_JAVA_ONLY = {"key.deserializer", "value.deserializer", "key.serializer", "value.serializer"}
# Settings Spark refuses for its source, because the source manages them itself.
_REFUSED_SOURCE = {
    "auto.offset.reset": "Instead set the source option 'startingOffsets' to 'earliest' or 'latest' to specify "
    "where to start.",
    "enable.auto.commit": "Offsets are tracked by Spark (and committed to a group with 'commitOffsetsToGroup').",
    "interceptor.classes": "Interceptors are not supported.",
}


class OptionError(ValueError):
    """An invalid data source option (raised on the driver, shown to the user as is)."""


READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
DEFAULT_MAX_TRIGGER_DELAY = "15m"
"""Spark's default ``maxTriggerDelay``."""
STREAM_GROUP_ID_PREFIX = "spark-kafka-source"
"""Spark's ``groupIdPrefix`` default for streaming queries."""
BATCH_GROUP_ID_PREFIX = "spark-kafka-relation"
"""Spark's ``groupIdPrefix`` default for batch queries."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is earliest | latest | offsets | timestamp | timestamps.

    ``offsets`` maps (topic, partition) to an offset (-2 earliest, -1 latest); ``timestamps`` maps to a
    timestamp in ms; ``timestamp`` is one timestamp for every partition.
    """

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return None if value is None else str(value)


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionError(f"Option '{name}' must be true or false, got {raw!r}")


PACK_RECORDS = 1_000_000
"""The offsets one task of the ``tidelog`` source reads at most when it packs small ranges (``packPartitions``,
:mod:`tidelog.spark.packing`): about 100 MB of 100 B records, near Spark's 128 MiB file partition."""


def parse_int(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"Option '{name}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"Option '{name}' must be at least {minimum}, got {value}")
    return value


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    """A duration as Spark's ``Utils.timeStringAsMs`` reads it: ``15m``, ``30s``, ``100ms``, ``1h``; a bare number
    is milliseconds."""
    raw = _get(options, name)
    text = (raw if raw is not None else default).strip().lower()
    m = re.fullmatch(r"(-?\d+)\s*([a-z]*)", text)
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS_MS):
        raise OptionError(f"Option '{name}' must be a duration such as 15m, 30s or 100ms, got {raw!r}")
    value = int(m.group(1)) * _TIME_UNITS_MS[m.group(2) or "ms"]
    if value < 0:
        raise OptionError(f"Option '{name}' must not be negative, got {raw!r}")
    return int(value)


def parse_isolation_level(value: str | None, name: str, default: str) -> str:
    """``read_committed`` or ``read_uncommitted`` (Kafka's ``isolation.level`` values)."""
    text = (value if value is not None else default).strip().lower()
    if text not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise OptionError(f"Option '{name}' must be read_committed or read_uncommitted, got {value!r}")
    return text


def overwrite_refused_message(fmt: str = "tidelog") -> str:
    """The sink's answer to ``.mode("overwrite")`` (Spark's Kafka sink refuses it as well)."""
    return (
        f"Save mode Overwrite is not allowed for the {fmt} sink: records are appended to Kafka topics. "
        'Use .mode("append"). (PySpark refuses the default mode ErrorIfExists, and Ignore, for Python data '
        'sources before the sink is called, so .mode("append") is needed for batch writes.)'
    )


def parse_partition_json(text: str, what: str) -> dict[TopicPartition, int]:
    """``{"t":{"0":23,"1":-2}}`` -> ``{("t", 0): 23, ("t", 1): -2}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}}}} for {what}, got {text!r}: {exc}") from None
    if not isinstance(data, dict):
        raise OptionError(f"Expected a JSON object of topics for {what}, got {text!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OptionError(f"Expected a JSON object of partitions for topic {topic!r} in {what}")
        for part, value in parts.items():
            try:
                out[(str(topic), int(part))] = int(value)
            except (TypeError, ValueError):
                raise OptionError(f"Invalid partition {part!r} or value {value!r} for topic {topic!r} in {what}") from None
    return out


def parse_assign(text: str) -> list[TopicPartition]:
    """``{"t":[0,1]}`` -> ``[("t", 0), ("t", 1)]``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise OptionError(f"Expected e.g. {{\"topicA\":[0,1],\"topicB\":[0,1]}} for 'assign', got {text!r}")
    return [(str(t), int(p)) for t, parts in data.items() for p in parts]


def _offset_spec(options: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    """``prefix`` is "starting" or "ending"; precedence: Timestamp > OffsetsByTimestamp > Offsets."""
    ts = _get(options, f"{prefix}Timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts))
        except ValueError:
            raise OptionError(f"Option '{prefix}Timestamp' must be a timestamp in ms, got {ts!r}") from None
    by_ts = _get(options, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", offsets=parse_partition_json(by_ts, f"{prefix}OffsetsByTimestamp"))
    raw = _get(options, f"{prefix}Offsets")
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    return OffsetSpec("offsets", offsets=parse_partition_json(text, f"{prefix}Offsets"))


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: topics (subscribe), pattern (subscribePattern), partitions (assign)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches_topic(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.partitions:
            return any(t == topic for t, _ in self.partitions)
        return topic in self.topics


def parse_subscription(options: Mapping[str, str], required: bool = True) -> Subscription | None:
    given = {k: v for k in ("assign", "subscribe", "subscribePattern") if (v := _get(options, k)) is not None}
    if len(given) > 1 or (required and not given):
        raise OptionError(
            "One of the following options must be specified for Kafka source: subscribe, subscribePattern, "
            f"assign. See the docs for more details. (given: {sorted(given) or 'none'})"
        )
    if not given:
        return None
    (name, value), = given.items()
    if name == "assign":
        return Subscription(partitions=tuple(parse_assign(value)))
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified topics are [{value}]")
        return Subscription(topics=topics)
    if not value.strip():
        raise OptionError("Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''")
    try:
        re.compile(value)
    except re.error as exc:
        raise OptionError(f"Invalid 'subscribePattern' {value!r}: {exc}") from None
    return Subscription(pattern=value)


def client_config(options: Mapping[str, str], *, refuse: bool = True) -> dict[str, str]:
    """The ``kafka.*`` options without the prefix, for librdkafka; ``kafka.bootstrap.servers`` is required.
    Security settings may be the Java client's, as a job for Spark's Kafka connector has them
    (``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` with ``ssl.truststore.type=PEM``,
    ``kafka.ssl.keystore.*``): they become librdkafka's (``sasl.username``/``sasl.password``,
    ``ssl.ca.location``, ...) as ``--command-config`` does; librdkafka's own names pass unchanged."""
    conf: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith("kafka."):
            continue
        name = key[len("kafka."):]
        low = name.lower()
        if low in _JAVA_ONLY:
            continue
        if refuse and low in _REFUSED_SOURCE:
            raise OptionError(f"Kafka option '{name}' is not supported. {_REFUSED_SOURCE[low]}")
        conf[low if low == "bootstrap.servers" else name] = str(value)
    if not conf.get("bootstrap.servers"):
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    try:
        return librdkafka_config(conf)
    except ClientConfigError as exc:
        raise OptionError(f"Kafka option: {exc}") from None


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options of the ``tidelog`` source (see the module docstring of :mod:`tidelog.spark`)."""

    client: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_by_ts_strategy: str
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    include_headers: bool
    poll_timeout_ms: int
    commit_group: str | None
    group_id: str | None
    fetch_client: str = "raw"
    isolation_level: str = READ_UNCOMMITTED
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    pack_partitions: bool = True
    """``packPartitions`` (tidelog extra): with pushed filters, small ranges are read together by one task up to
    :data:`PACK_RECORDS` offsets (:mod:`tidelog.spark.packing`); false: one task per range, as Spark."""
    unique_group_id: str = ""
    """``<groupIdPrefix>-<uuid>``, the base of the consumers' group ids when ``kafka.group.id`` is not set (driver:
    ``-driver``, executors: ``-executor``, as Spark names them)."""

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    @property
    def driver_group_id(self) -> str:
        return self.group_id or f"{self.unique_group_id}-driver"

    @property
    def executor_group_id(self) -> str:
        return self.group_id or f"{self.unique_group_id}-executor"

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        client = client_config(options)
        group_id = client.pop("group.id", None)
        # Spark's default is the Java client's read_uncommitted (librdkafka's own default is read_committed)
        isolation = parse_isolation_level(client.pop("isolation.level", None), "kafka.isolation.level",
                                          READ_UNCOMMITTED)
        prefix = _get(options, "groupIdPrefix")
        prefix = prefix.strip() if prefix and prefix.strip() else (
            STREAM_GROUP_ID_PREFIX if streaming else BATCH_GROUP_ID_PREFIX)
        sub = parse_subscription(options)
        assert sub is not None
        starting = _offset_spec(options, "starting", "latest" if streaming else "earliest")
        ending = _offset_spec(options, "ending", "latest")
        if not streaming:
            if starting.kind == "latest":
                raise OptionError("starting offset can't be latest for batch queries on Kafka")
            if starting.kind == "offsets" and any(v == LATEST for v in starting.offsets.values()):
                raise OptionError(
                    "startingOffsets for "
                    + ", ".join(f"{t}-{p}" for (t, p), v in starting.offsets.items() if v == LATEST)
                    + " can't be latest for batch queries on Kafka"
                )
            if ending.kind == "earliest":
                raise OptionError("ending offset can't be earliest for batch queries on Kafka")
            if ending.kind == "offsets" and any(v == EARLIEST for v in ending.offsets.values()):
                raise OptionError(
                    "endingOffsets for "
                    + ", ".join(f"{t}-{p}" for (t, p), v in ending.offsets.items() if v == EARLIEST)
                    + " can't be earliest for batch queries on Kafka"
                )
        else:
            for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
                if _get(options, name) is not None:
                    raise OptionError(f"Option '{name}' is not supported for streaming queries")
        strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(f"Option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}")
        commit_group = _get(options, "commitOffsetsToGroup")
        fetch_client = (_get(options, "fetchClient") or "raw").strip().lower()
        if fetch_client not in ("raw", "librdkafka"):
            raise OptionError(f"Option 'fetchClient' must be raw or librdkafka, got {fetch_client!r}")
        return cls(
            client=client,
            subscription=sub,
            starting=starting,
            ending=ending,
            starting_by_ts_strategy=strategy,
            fail_on_data_loss=parse_bool(options, "failOnDataLoss", True),
            min_partitions=parse_int(options, "minPartitions", None),
            max_records_per_partition=parse_int(options, "maxRecordsPerPartition", None),
            pack_partitions=parse_bool(options, "packPartitions", True),
            max_offsets_per_trigger=parse_int(options, "maxOffsetsPerTrigger", None),
            include_headers=parse_bool(options, "includeHeaders", False),
            poll_timeout_ms=parse_int(options, "kafkaConsumer.pollTimeoutMs", 120_000) or 120_000,
            commit_group=commit_group.strip() if commit_group and commit_group.strip() else None,
            group_id=group_id,
            fetch_client=fetch_client,
            isolation_level=isolation,
            min_offsets_per_trigger=parse_int(options, "minOffsetsPerTrigger", None),
            max_trigger_delay_ms=parse_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
            unique_group_id=f"{prefix}-{uuid.uuid4()}",
        )


def stream_offset_to_map(offset: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """Spark's Kafka stream offset ``{"topic": {"0": 23}}`` -> ``{("topic", 0): 23}``."""
    return {(t, int(p)): int(o) for t, parts in offset.items() for p, o in parts.items()}


def map_to_stream_offset(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


# -- data loss (failOnDataLoss): shared by both sources and the raw fetcher ---------------------------------


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention, DeleteRecords, topic deletion) and failOnDataLoss is true."""


def data_loss_message(detail: str, fail: bool = True) -> str:
    """Spark's wording, so that users recognise it."""
    if fail:
        return (
            f"{detail}\nSome data may have been lost because they are not available in Kafka any more; either the "
            "data was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
            "processed. If you don't want your streaming query to fail on such cases, set the source option "
            '"failOnDataLoss" to "false".'
        )
    return (
        f"{detail}\nSome data may have been lost because they are not available in Kafka any more; either the "
        "data was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
        'processed. If you want your streaming query to fail on such cases, set the source option "failOnDataLoss" '
        'to "true".'
    )


def report_data_loss(fail: bool, detail: str) -> None:
    if fail:
        raise DataLossError(data_loss_message(detail, True))
    logging.getLogger("tidelog.spark").warning(data_loss_message(detail, False))
