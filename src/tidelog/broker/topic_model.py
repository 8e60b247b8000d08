"""The topic store's model: topic metadata (:class:`TopicInfo`), config descriptions (:class:`ConfigEntry`), the
topic error, names and ids (Kafka's ``Topic.validate``, Uuids), and the constants of the protocol's config APIs.
The store itself is :class:`tidelog.broker.topics.TopicManager`, which re-exports these names."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog.broker.errors import BrokerError
from tidelog.errors import ErrorCode
from tidelog.storage.checkpoints import new_uuid, uuid_from_str

if TYPE_CHECKING:
    from tidelog.storage.config import LogConfig
    from tidelog.storage.log.partition_log import PartitionLog

# Kafka's internal topics (``Topic.INTERNAL_TOPICS``): written only by their coordinators; a client's Produce to
# them is refused with INVALID_TOPIC_EXCEPTION unless its client id is ``ADMIN_CLIENT_ID`` (Kafka's
# ``AdminUtils.ADMIN_CLIENT_ID``, the same rule as ``ReplicaManager.appendToLocalLog``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ADMIN_CLIENT_ID = "__admin_client"

REGISTRY_FILE = "tidelog-topics.json"
REGISTRY_VERSION = 1
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+\Z")

# DescribeConfigs sources (Kafka's ConfigSource / DescribeConfigsResponse.ConfigSource)
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# Topic config -> broker-level synonyms, in Kafka's precedence order (LogConfig.TopicConfigSynonyms).
_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
}


class TopicError(BrokerError):
    """A topic operation refused with a Kafka error (e.g. ``ErrorCode.TOPIC_ALREADY_EXISTS``)."""

    def __init__(self, kafka_error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error
        self.message = message


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes
    num_partitions: int
    overrides: dict[str, str]
    log_config: LogConfig

    @property
    def topic_id_str(self) -> str:
        return _uuid_str(self.topic_id)


@dataclass(slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    config_type: int | None = None  # Kafka's ConfigType code; None: derived from the config's name
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG


def _uuid_str(value: bytes) -> str:
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode("ascii")


def _uuid_bytes(text: str) -> bytes:
    return uuid_from_str(text)


def new_topic_id() -> bytes:
    return new_uuid()


def new_cluster_id() -> str:
    return _uuid_str(new_topic_id())


def validate_topic_name(name: object) -> None:
    """Kafka's ``Topic.validate``: non-empty, not ``.``/``..``, at most 249 chars of ``[a-zA-Z0-9._-]``."""
    if not isinstance(name, str) or not name:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL.match(name):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' "
            "and '-'",
        )


def _holds_no_records(lg: PartitionLog) -> bool:
    """Whether a log has never held a record (what an interrupted creation leaves)."""
    return lg.log_end_offset == 0 and lg.log_start_offset == 0


def _collision_key(name: str) -> str:
    return name.replace(".", "_")
