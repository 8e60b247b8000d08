"""TopicManager: Kafka's validation rules, persistence of the registry, config overrides and their sources."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.broker.purgatory import Purgatory
from tidelog.broker.topics import (
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    REGISTRY_FILE,
    STATIC_BROKER_CONFIG,
    LocalTopicBackend,
    TopicError,
    TopicManager,
    validate_topic_name,
)
from tidelog.errors import ErrorCode
from tidelog.storage.manager import LogManager


def _open(tmp_path: Path, **props: str) -> Any:
    cfg = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **props})
    broker = SimpleNamespace(config=cfg, node_id=0, cluster_id="", purgatory=Purgatory(), metrics=None, logs=None,
                             loop=None, group_coordinator=None, partitions_changed=lambda: None)  # a TopicHost
    broker.topics = TopicManager(broker)  # type: ignore[arg-type]
    broker.logs = LogManager(cfg.log_dirs, cfg.log_config(), **broker.topics.log_manager_kwargs())
    broker.logs.startup(broker.topics.topic_config)
    broker.topics.load()
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    b = _open(tmp_path, **{"log.retention.hours": "24"})
    yield b
    b.logs.shutdown()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/y", "ümlaut"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(TopicError) as info:
        validate_topic_name(name)
    assert info.value.kafka_error == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_valid_names() -> None:
    for name in ["a", "a.b_c-D9", "x" * 249, "__consumer_offsets"]:
        validate_topic_name(name)


def test_create_errors(broker: Any) -> None:
    t = broker.topics
    t.create_topic("orders", 3)
    cases = [
        (("orders",), {}, ErrorCode.TOPIC_ALREADY_EXISTS),
        (("orders.x",), {"num_partitions": 0}, ErrorCode.INVALID_PARTITIONS),
        (("rf",), {"replication_factor": 3}, ErrorCode.INVALID_REPLICATION_FACTOR),
        (("rf0",), {"replication_factor": 0}, ErrorCode.INVALID_REPLICATION_FACTOR),
        (("cfg",), {"configs": {"retention.ms": "soon"}}, ErrorCode.INVALID_CONFIG),
        (("cfg2",), {"configs": {"no.such.config": "1"}}, ErrorCode.INVALID_CONFIG),
        (("cfg3",), {"configs": {"retention.ms": None}}, ErrorCode.INVALID_CONFIG),
    ]
    for args, kw, err in cases:
        with pytest.raises(TopicError) as info:
            t.create_topic(*args, **kw)
        assert info.value.kafka_error == err, (args, kw)
    t.create_topic("a_b")
    with pytest.raises(TopicError, match="collides"):
        t.create_topic("a.b")


def test_validate_only_creates_nothing(broker: Any) -> None:
    info = broker.topics.create_topic("dry", 2, validate_only=True)
    assert info.num_partitions == 2
    assert not broker.topics.exists("dry")
    assert broker.logs.get_log("dry", 0) is None


def test_create_persist_reload_delete(tmp_path: Path) -> None:
    b = _open(tmp_path)
    info = b.topics.create_topic("t", 2, configs={"retention.ms": "1000"})
    assert b.topics.get_log("t", 1) is not None
    b.topics.create_partitions("t", 4)
    with pytest.raises(TopicError) as e:
        b.topics.create_partitions("t", 3)
    assert e.value.kafka_error == ErrorCode.INVALID_PARTITIONS
    b.logs.shutdown()
    data = json.loads((tmp_path / REGISTRY_FILE).read_text())
    assert data["topics"]["t"] == {"topic_id": info.topic_id_str, "partitions": 4, "configs": {"retention.ms": "1000"}}

    b2 = _open(tmp_path)
    again = b2.topics.get("t")
    assert again is not None and again.topic_id == info.topic_id and again.num_partitions == 4
    assert b2.topics.get_log("t", 3).config.retention_ms == 1000  # per-topic config applied at start
    assert b2.topics.by_id(info.topic_id) is again
    b2.topics.delete_topic("t")
    assert not b2.topics.exists("t") and b2.topics.get_log("t", 0) is None
    with pytest.raises(TopicError):
        b2.topics.delete_topic("t")
    b2.logs.shutdown()
    assert "t" not in json.loads((tmp_path / REGISTRY_FILE).read_text())["topics"]


def test_unregistered_partition_dirs_are_adopted(tmp_path: Path) -> None:
    b = _open(tmp_path)
    b.topics.create_topic("lost", 2)
    b.logs.shutdown()
    (tmp_path / REGISTRY_FILE).unlink()
    b2 = _open(tmp_path)
    info = b2.topics.get("lost")
    assert info is not None and info.num_partitions == 2
    b2.logs.shutdown()


def test_load_creates_missing_hosted_partitions_only(tmp_path: Path) -> None:
    """One node hosts every partition: a registered partition whose directory is gone is created again at load.
    The backend's ``hosted_partitions`` (cluster mode asks ZooKeeper) limits that to the partitions it names."""
    import shutil

    b = _open(tmp_path)
    b.topics.create_topic("h", 3)
    b.logs.shutdown()
    shutil.rmtree(tmp_path / "h-1")
    shutil.rmtree(tmp_path / "h-2")
    b2 = _open(tmp_path)
    assert [b2.topics.get_log("h", p) is not None for p in range(3)] == [True, True, True]
    assert (tmp_path / "h-1").is_dir() and (tmp_path / "h-2").is_dir()
    b2.logs.shutdown()

    class OnlyPartitionOne(LocalTopicBackend):
        def hosted_partitions(self, info: Any) -> list[int]:
            return [1]

    shutil.rmtree(tmp_path / "h-1")
    shutil.rmtree(tmp_path / "h-2")
    cfg = BrokerConfig.from_properties({"log.dirs": str(tmp_path)})
    b3 = SimpleNamespace(config=cfg, node_id=0, cluster_id="", purgatory=Purgatory(), metrics=None, logs=None,
                         loop=None, group_coordinator=None, partitions_changed=lambda: None)
    b3.topics = TopicManager(b3, OnlyPartitionOne)  # type: ignore[arg-type]
    b3.logs = LogManager(cfg.log_dirs, cfg.log_config(), **b3.topics.log_manager_kwargs())
    b3.logs.startup(b3.topics.topic_config)
    b3.topics.load()
    # h-0 was on disk (loaded as found), h-1 is hosted (created), h-2 is neither (not created)
    assert [b3.topics.get_log("h", p) is not None for p in range(3)] == [True, True, False]
    assert not (tmp_path / "h-2").exists()
    assert b3.topics.get("h").num_partitions == 3
    b3.logs.shutdown()


def test_alter_and_incremental_alter(broker: Any) -> None:
    t = broker.topics
    t.create_topic("c", configs={"retention.ms": "5000", "segment.ms": "60000"})
    t.alter_configs("c", {"retention.bytes": "1000"})  # replaces all overrides
    assert t.get("c").overrides == {"retention.bytes": "1000"}
    assert t.get_log("c", 0).config.retention_bytes == 1000  # applied live
    t.incremental_alter_configs("c", [("cleanup.policy", OP_APPEND, "compact"), ("retention.ms", OP_SET, "7")])
    assert t.get("c").overrides["cleanup.policy"] == "delete,compact"
    t.incremental_alter_configs("c", [("cleanup.policy", OP_SUBTRACT, "delete"), ("retention.bytes", OP_DELETE, None)])
    assert t.get("c").overrides == {"cleanup.policy": "compact", "retention.ms": "7"}
    with pytest.raises(TopicError) as e:
        t.incremental_alter_configs("c", [("retention.ms", OP_APPEND, "1")])
    assert e.value.kafka_error == ErrorCode.INVALID_CONFIG
    with pytest.raises(TopicError):
        t.alter_configs("c", {"retention.ms": "-5"})
    assert t.get("c").overrides == {"cleanup.policy": "compact", "retention.ms": "7"}  # unchanged on error
    t.alter_configs("c", {"retention.bytes": "1"}, validate_only=True)
    assert "retention.bytes" not in t.get("c").overrides


def test_describe_configs_sources(broker: Any) -> None:
    t = broker.topics
    t.create_topic("d", configs={"segment.bytes": "2097152"})
    entries = {e.name: e for e in t.describe_configs("d")}
    assert entries["segment.bytes"].source == DYNAMIC_TOPIC_CONFIG and entries["segment.bytes"].value == "2097152"
    assert entries["retention.ms"].source == STATIC_BROKER_CONFIG  # log.retention.hours=24 in the broker config
    assert entries["retention.ms"].value == str(24 * 3600 * 1000)
    assert [s.name for s in entries["retention.ms"].synonyms] == ["log.retention.hours", "retention.ms"]
    assert entries["compression.type"].source == DEFAULT_CONFIG and entries["compression.type"].value == "producer"
    only = t.describe_configs("d", ["segment.bytes", "nope"])
    assert [e.name for e in only] == ["segment.bytes"]


def test_auto_create(tmp_path: Path) -> None:
    b = _open(tmp_path, **{"num.partitions": "3"})
    assert b.topics.maybe_auto_create("auto").num_partitions == 3
    b.logs.shutdown()
    b2 = _open(tmp_path / "off", **{"auto.create.topics.enable": "false"})
    assert b2.topics.maybe_auto_create("auto") is None
    b2.logs.shutdown()
