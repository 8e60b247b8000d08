from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode
from tidelog.storage import config as config_module
from tidelog.storage.config import (
    LONG_MAX,
    TOPIC_CONFIG_DEFAULTS,
    LogConfig,
)
from tidelog.storage.errors import InvalidConfigError


def test_defaults_match_kafka() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.segment_jitter_ms == 0
    assert c.segment_index_bytes == 10485760
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000
    assert c.retention_bytes == -1
    assert c.cleanup_policy == ("delete",)
    assert c.min_cleanable_dirty_ratio == 0.5
    assert c.delete_retention_ms == 86400000
    assert c.min_compaction_lag_ms == 0
    assert c.max_compaction_lag_ms == LONG_MAX == 9223372036854775807
    assert c.message_timestamp_type == "CreateTime"
    assert c.message_timestamp_before_max_ms == LONG_MAX
    assert c.message_timestamp_after_max_ms == 3600000
    assert c.compression_type == "producer"
    assert c.max_message_bytes == 1048588
    assert c.file_delete_delay_ms == 60000
    assert c.flush_messages == LONG_MAX
    assert c.flush_ms == LONG_MAX
    assert c.min_insync_replicas == 1
    assert c.unclean_leader_election_enable is False
    assert c.preallocate is False


def test_defaults_table_is_strings_and_round_trips() -> None:
    assert TOPIC_CONFIG_DEFAULTS["segment.bytes"] == "1073741824"
    assert TOPIC_CONFIG_DEFAULTS["cleanup.policy"] == "delete"
    assert TOPIC_CONFIG_DEFAULTS["unclean.leader.election.enable"] == "false"
    assert TOPIC_CONFIG_DEFAULTS["min.cleanable.dirty.ratio"] == "0.5"
    assert LogConfig().to_properties() == TOPIC_CONFIG_DEFAULTS
    assert LogConfig.from_properties(TOPIC_CONFIG_DEFAULTS) == LogConfig()


def test_from_properties_overlays_base() -> None:
    base = LogConfig.from_properties({"retention.ms": "1000"})
    c = LogConfig.from_properties({"cleanup.policy": "compact, delete", "preallocate": "TRUE"}, base)
    assert c.retention_ms == 1000
    assert c.cleanup_policy == ("compact", "delete")
    assert c.compact and c.delete
    assert c.preallocate is True
    assert c.overrides() == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "preallocate": "true",
    }
    assert c.get("retention.ms") == 1000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("no.such.config", "1"),
        ("segment.bytes", "abc"),
        ("segment.bytes", "1.5"),
        ("segment.bytes", str(2**31)),  # int overflow
        ("segment.bytes", "1000"),  # below the 1 MiB minimum of Kafka 4
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("cleanup.policy", "forever"),
        ("cleanup.policy", ""),
        ("message.timestamp.type", "WallClock"),
        ("compression.type", "brotli"),
        ("unclean.leader.election.enable", "yes"),
        ("flush.messages", "0"),
        ("max.compaction.lag.ms", "0"),
        ("segment.index.bytes", "3"),
        ("flush.ms", str(2**63)),  # long overflow
    ],
)
def test_invalid_values_raise(name: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as err:
        LogConfig.from_properties({name: value})
    assert err.value.name == name
    assert err.value.value == value
    assert err.value.kafka_error == ErrorCode.INVALID_CONFIG


def test_tiny_segments_for_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LogConfig.from_properties({"segment.bytes": "1000"}, min_segment_bytes=14).segment_bytes == 1000
    monkeypatch.setattr(config_module, "MIN_SEGMENT_BYTES", 100)
    assert LogConfig.from_properties({"segment.bytes": "1000"}).segment_bytes == 1000
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({"segment.bytes": "99"})


def test_broker_properties_map_to_topic_names() -> None:
    c = LogConfig.from_broker_properties(
        {
            "log.segment.bytes": "2097152",
            "log.roll.hours": "2",
            "log.retention.hours": "24",
            "log.index.interval.bytes": "100",
            "log.flush.interval.messages": "10",
            "log.flush.interval.ms": "500",
            "message.max.bytes": "2000000",
            "log.message.timestamp.type": "LogAppendTime",
            "log.cleanup.policy": "compact",
            "broker.id": "1",  # not a log config: ignored
        }
    )
    assert c.segment_bytes == 2097152
    assert c.segment_ms == 2 * 3600000
    assert c.retention_ms == 24 * 3600000
    assert c.index_interval_bytes == 100
    assert c.flush_messages == 10
    assert c.flush_ms == 500
    assert c.max_message_bytes == 2000000
    assert c.log_append_time
    assert c.cleanup_policy == ("compact",)


def test_broker_precedence_ms_over_minutes_over_hours() -> None:
    c = LogConfig.from_broker_properties(
        {
            "log.retention.ms": "5",
            "log.retention.minutes": "3",
            "log.retention.hours": "1",
            "log.roll.ms": "7",
            "log.roll.hours": "1",
        }
    )
    assert c.retention_ms == 5
    assert c.segment_ms == 7
    c = LogConfig.from_broker_properties({"log.retention.minutes": "3", "log.retention.hours": "1"})
    assert c.retention_ms == 180000
    c = LogConfig.from_broker_properties({"log.retention.hours": "-1"})
    assert c.retention_ms == -1
    with pytest.raises(InvalidConfigError):
        LogConfig.from_broker_properties({"log.retention.hours": "x"})
