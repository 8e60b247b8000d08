"""broker/server.py and broker/topics.py were split by concept (issue 26): the names callers, tests and bench/ use
stay importable from the old modules and are the very objects of their new homes, and each new room stays under
the project's ~800 lines."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from tidelog.broker import server, topics

_MOVED = {
    server: {
        "Connection": "tidelog.broker.connection",
        "TlsConnection": "tidelog.broker.tls_connection",
        "_ConnectionClosed": "tidelog.broker.connection_io",
        "_parse_produce": "tidelog.broker.produce_lane",
        "_encode_produce": "tidelog.broker.produce_lane",
        "api_name": "tidelog.broker.api_names",
        "error_name": "tidelog.broker.api_names",
        "api_versions_unsupported_body": "tidelog.broker.api_names",
    },
    topics: {
        "TopicError": "tidelog.broker.topic_model",
        "TopicInfo": "tidelog.broker.topic_model",
        "ConfigEntry": "tidelog.broker.topic_model",
        "ConfigSynonym": "tidelog.broker.topic_model",
        "validate_topic_name": "tidelog.broker.topic_model",
        "new_topic_id": "tidelog.broker.topic_model",
        "new_cluster_id": "tidelog.broker.topic_model",
        "INTERNAL_TOPICS": "tidelog.broker.topic_model",
        "ADMIN_CLIENT_ID": "tidelog.broker.topic_model",
        "TopicBackend": "tidelog.broker.topic_backend",
        "LocalTopicBackend": "tidelog.broker.topic_backend",
    },
}


@pytest.mark.parametrize(("old", "name", "home"), [(m, n, h) for m, names in _MOVED.items() for n, h in names.items()],
                         ids=lambda v: v.__name__ if inspect.ismodule(v) else str(v))
def test_moved_names_stay_importable_from_the_old_module(old: object, name: str, home: str) -> None:
    new = importlib.import_module(home)
    new_name = "ConnectionClosed" if name == "_ConnectionClosed" else name
    assert getattr(old, name) is getattr(new, new_name)


def test_the_connection_classes_keep_their_behaviour_flags() -> None:
    # the fast lane is on exactly when the C parser loaded, and TLS connections are not plain (no pipelining)
    assert server.Connection.fast_produce is (server._parse_produce is not None)
    assert server.Connection._plain is True
    assert server.TlsConnection._plain is False
    assert issubclass(server.TlsConnection, server.Connection)


@pytest.mark.parametrize("module", ["server", "connection", "connection_io", "authenticator", "produce_lane",
                                    "tls_connection", "api_names", "topics", "topic_model", "topic_backend",
                                    "handlers.admin", "handlers.configs", "handlers.admin_common"])
def test_split_rooms_stay_under_800_lines(module: str) -> None:
    path = Path(importlib.import_module(f"tidelog.broker.{module}").__file__ or "")
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 800


# broker/handlers/core.py was split the same way: one module per core API, what they share in core_shared
_CORE_MOVED = {
    "api_versions": "api_versions", "api_versions_list": "api_versions",
    "metadata": "metadata", "partition_entries": "metadata", "topic_operations": "metadata",
    "produce": "produce", "produce_one": "produce", "produce_one_body": "produce", "CloseConnection": "produce",
    "INLINE_VALIDATION_NS": "produce", "validation_cost_ns": "produce",
    "fetch": "fetch_handler", "list_offsets": "list_offsets", "_list_offset": "list_offsets",
    "NONE": "core_shared", "_leader_epoch_error": "core_shared", "_resolve_topic": "core_shared",
}


@pytest.mark.parametrize(("name", "home"), sorted(_CORE_MOVED.items()))
def test_core_handler_names_stay_importable_from_core(name: str, home: str) -> None:
    from tidelog.broker.handlers import core

    assert getattr(core, name) is getattr(importlib.import_module(f"tidelog.broker.handlers.{home}"), name)


def test_the_split_core_handlers_are_the_registered_ones() -> None:
    from tidelog.broker.broker import REGISTRY
    from tidelog.broker.handlers import core
    from tidelog.protocol.api_keys import ApiKey

    for key, handler in ((ApiKey.API_VERSIONS, core.api_versions), (ApiKey.METADATA, core.metadata),
                         (ApiKey.PRODUCE, core.produce), (ApiKey.FETCH, core.fetch),
                         (ApiKey.LIST_OFFSETS, core.list_offsets)):
        assert REGISTRY[key] is handler


@pytest.mark.parametrize("module", ["core", "core_shared", "api_versions", "metadata", "produce", "fetch_handler",
                                    "list_offsets"])
def test_split_core_handler_rooms_stay_under_800_lines(module: str) -> None:
    path = Path(importlib.import_module(f"tidelog.broker.handlers.{module}").__file__ or "")
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 800


def test_partition_log_is_a_unified_log_over_a_local_log() -> None:
    # storage/log/partition_log.py was split the same way: the directory-and-segments part is its base class
    from tidelog.storage.log import PartitionLog, ReadInfo, local_log, parse_topic_partition, partition_log

    assert PartitionLog.__mro__[1] is local_log.LocalLog
    assert ReadInfo is local_log.ReadInfo and parse_topic_partition is local_log.parse_topic_partition
    for module in (local_log, partition_log):
        assert len(Path(module.__file__ or "").read_text(encoding="utf-8").splitlines()) <= 800


def test_the_config_handlers_split_from_admin_are_the_registered_ones() -> None:
    """handlers/admin.py (950 lines) was split: the config APIs moved to handlers/configs.py (issue 26)."""
    from tidelog.broker.broker import REGISTRY
    from tidelog.broker.handlers import admin, configs
    from tidelog.protocol.api_keys import ApiKey

    for key, handler in ((ApiKey.DESCRIBE_CONFIGS, configs.describe_configs),
                         (ApiKey.ALTER_CONFIGS, configs.alter_configs),
                         (ApiKey.INCREMENTAL_ALTER_CONFIGS, configs.incremental_alter_configs),
                         (ApiKey.CREATE_TOPICS, admin.create_topics), (ApiKey.DESCRIBE_CLUSTER, admin.describe_cluster)):
        assert REGISTRY[key] is handler
