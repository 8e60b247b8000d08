"""Kafka 4's GROUP config resource (type 32) and ListConfigResources (74) against a real ``tidelog serve``: the
configs set with confluent-kafka's AdminClient, raw IncrementalAlterConfigs / AlterConfigs / DescribeConfigs as
the Java Admin sends them, and ``tidelog configs --entity-type groups``; Kafka's refusals (unknown name, a value
outside the broker's bounds, session timeout not above the heartbeat interval), survival across a restart, and
the effect on a KIP-848 group (the heartbeat interval its members are told)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from helpers import RawClient

from tidelog.broker.group_configs import STORE_FILE, parse_auto_offset_reset, parse_duration_ms
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration

TIMEOUT = 30
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, LIST_CONFIG_RESOURCES = 32, 33, 44, 74
CONSUMER_GROUP_HEARTBEAT = 68
GROUP, TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 32, 2, 4, 8, 16
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5


def _inc(b: Any, group: str, ops: dict[str, str | None], validate_only: bool = False, op: int | None = None
         ) -> tuple[int, str | None]:
    body = {"resources": [{"resource_type": GROUP, "resource_name": group,
                           "configs": [{"name": k, "config_operation": op if op is not None else (0 if v is not None
                                                                                                  else 1),
                                        "value": v} for k, v in ops.items()]}],
            "validate_only": validate_only}
    with RawClient(b.port) as c:
        r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]
    assert r["resource_type"] == GROUP and r["resource_name"] == group
    return r["error_code"], r["error_message"]


def _describe(b: Any, group: str) -> dict[str, Any]:
    with RawClient(b.port) as c:
        body = {"resources": [{"resource_type": GROUP, "resource_name": group, "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": True}
        return c.request(DESCRIBE_CONFIGS, 4, body)["results"][0]  # type: ignore[no-any-return]


def _values(result: dict[str, Any]) -> dict[str, tuple[str | None, int]]:
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def test_group_configs_set_described_listed_and_kept_across_restart(broker_factory: Any) -> None:
    b = broker_factory({"group.share.record.lock.duration.ms": "20000"})
    result = _describe(b, "g-new")
    assert result["error_code"] == 0
    values = _values(result)
    # every group config, each from the broker's default (the broker's own group.share.* value)
    assert values["share.record.lock.duration.ms"] == ("20000", DEFAULT_CONFIG)
    assert values["consumer.session.timeout.ms"] == ("45000", DEFAULT_CONFIG)
    assert values["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG)
    assert not any(n.startswith("streams.") for n in values)  # no streams groups here

    # confluent-kafka's AdminClient names a GROUP config resource (librdkafka maps it to type 32)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ResourceType.GROUP, "g1", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "g1")])
    entries = next(iter(described.values())).result(TIMEOUT)
    assert entries["share.auto.offset.reset"].value == "earliest"
    assert entries["consumer.session.timeout.ms"].value == "50000"
    assert entries["share.record.lock.duration.ms"].value == "20000"

    values = _values(_describe(b, "g1"))
    assert values["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG)
    assert values["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT_CONFIG)
    syn = next(c for c in _describe(b, "g1")["configs"] if c["name"] == "consumer.session.timeout.ms")["synonyms"]
    assert [(s["value"], s["source"]) for s in syn] == [("50000", GROUP_CONFIG), ("45000", DEFAULT_CONFIG)]

    # a second group; then one config of g1 deleted
    assert _inc(b, "g2", {"share.isolation.level": "read_committed"}) == (0, None)
    assert _inc(b, "g1", {"consumer.session.timeout.ms": None}) == (0, None)
    assert _values(_describe(b, "g1"))["consumer.session.timeout.ms"] == ("45000", DEFAULT_CONFIG)

    with RawClient(b.port) as c:
        listed = c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})
        everything = c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
        v0 = c.request(LIST_CONFIG_RESOURCES, 0, {})
        bad = c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP, 1]})
    assert listed["error_code"] == 0
    assert [(r["resource_name"], r["resource_type"]) for r in listed["config_resources"]] == [("g1", GROUP),
                                                                                              ("g2", GROUP)]
    kinds = {(r["resource_type"], r["resource_name"]) for r in everything["config_resources"]}
    assert {(BROKER, "0"), (BROKER_LOGGER, "0"), (GROUP, "g1")} <= kinds or \
        {(BROKER, str(b.node_id)), (GROUP, "g1")} <= kinds
    assert v0["error_code"] == 0 and v0["config_resources"] == []  # no client-metrics subscriptions
    assert bad["error_code"] == ErrorCode.UNSUPPORTED_VERSION and bad["config_resources"] == []

    store = json.loads((b.data_dir / STORE_FILE).read_text())
    assert store["groups"] == {"g1": {"share.auto.offset.reset": "earliest"},
                               "g2": {"share.isolation.level": "read_committed"}}
    b.restart()
    assert _values(_describe(b, "g1"))["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG)
    assert _values(_describe(b, "g2"))["share.isolation.level"] == ("read_committed", GROUP_CONFIG)


def test_refusals_as_kafka(broker: Any) -> None:
    b = broker
    code, msg = _inc(b, "g", {"streams.session.timeout.ms": "50000"})
    assert code == ErrorCode.INVALID_CONFIG and msg == "Unknown group config name: streams.session.timeout.ms"
    code, msg = _inc(b, "g", {"consumer.session.timeout.ms": "1000"})  # below group.consumer.min (45000)
    assert code == ErrorCode.INVALID_CONFIG
    assert msg == "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"
    code, msg = _inc(b, "g", {"share.record.lock.duration.ms": "500"})  # GroupConfig's own atLeast(1000)
    assert code == ErrorCode.INVALID_CONFIG and "Value must be at least 1000" in (msg or "")
    code, msg = _inc(b, "g", {"share.auto.offset.reset": "by_duration:-PT1H"})
    assert code == ErrorCode.INVALID_CONFIG and "Negative duration" in (msg or "")
    code, msg = _inc(b, "g", {"share.isolation.level": "serializable"})
    assert code == ErrorCode.INVALID_CONFIG
    code, msg = _inc(b, "g", {"consumer.heartbeat.interval.ms": "abc"})
    assert code == ErrorCode.INVALID_CONFIG and "Not a number" in (msg or "")
    code, msg = _inc(b, "g", {"share.auto.offset.reset": "earliest"}, op=2)  # APPEND: not a list config
    assert code == ErrorCode.INVALID_CONFIG and "append is not allowed" in (msg or "")
    code, msg = _inc(b, "", {"share.auto.offset.reset": "earliest"})
    assert code == ErrorCode.INVALID_REQUEST
    # validate_only: accepted, nothing kept; nothing above was kept either
    assert _inc(b, "g", {"share.auto.offset.reset": "by_duration:P1DT2H"}, validate_only=True) == (0, None)
    assert _values(_describe(b, "g"))["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG)
    assert not (b.data_dir / STORE_FILE).exists()
    # the legacy AlterConfigs replaces the whole set
    with RawClient(b.port) as c:
        r = c.request(ALTER_CONFIGS, 2, {"resources": [{"resource_type": GROUP, "resource_name": "g", "configs": [
            {"name": "share.delivery.count.limit", "value": "3"}]}], "validate_only": False})["responses"][0]
    assert r["error_code"] == 0
    assert _values(_describe(b, "g"))["share.delivery.count.limit"] == ("3", GROUP_CONFIG)


def test_kip848_heartbeat_interval_comes_from_the_group_config(broker_factory: Any) -> None:
    b = broker_factory({"group.consumer.min.heartbeat.interval.ms": "1000"})
    with RawClient(b.port) as c:
        c.request(19, 4, {"topics": [{"name": "gc-t", "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})

    def interval(group: str) -> int:
        with RawClient(b.port) as c:
            r = c.request(CONSUMER_GROUP_HEARTBEAT, 0, {
                "group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["gc-t"], "server_assignor": None,
                "topic_partitions": []})
        assert r["error_code"] == 0, r
        return int(r["heartbeat_interval_ms"])

    assert interval("kip848-a") == 5000  # the broker's group.consumer.heartbeat.interval.ms
    assert _inc(b, "kip848-b", {"consumer.heartbeat.interval.ms": "1500"}) == (0, None)
    assert interval("kip848-b") == 1500
    assert interval("kip848-a") == 5000


def test_cli_groups_entity(broker: Any) -> None:
    b = broker

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).with_name("tidelog")), "configs", *args, "--bootstrap-server", b.bootstrap],
                              capture_output=True, text=True, timeout=60)

    out = cli("alter", "--entity-type", "groups", "--entity-name", "cli-g", "--add-config",
              "share.auto.offset.reset=earliest,share.record.lock.duration.ms=20000")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Completed updating config for group cli-g."
    out = cli("describe", "--entity-type", "groups", "--entity-name", "cli-g")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Dynamic configs for group cli-g are:"
    assert any(line.startswith("  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
                               "share.auto.offset.reset=earliest") for line in lines[1:])
    out = cli("describe", "--entity-type", "groups")  # every group that has configs
    assert "Dynamic configs for group cli-g are:" in out.stdout
    out = cli("alter", "--entity-type", "groups", "--entity-name", "cli-g", "--add-config",
              "consumer.session.timeout.ms=5")
    assert out.returncode != 0 and "INVALID_CONFIG" in out.stderr


def test_duration_and_reset_parsing() -> None:
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    assert parse_duration_ms("PT0.001S") == 1
    assert parse_auto_offset_reset("by_duration:PT15M") == ("by_duration", 900_000)
    assert parse_auto_offset_reset("EARLIEST") == ("earliest", None)
    for bad in ("P", "PT", "1H", "by_duration:", "by_duration:-PT1S", "sometimes"):
        with pytest.raises(ValueError):
            parse_auto_offset_reset(bad) if not bad.startswith("P") and bad[0] != "1" else parse_duration_ms(bad)


def test_zookeeper_mode_a_change_through_one_broker_reaches_the_other(broker_factory: Any) -> None:
    """ZooKeeper mode: /config/groups/<group> with a /config/changes notification; the other broker (which may
    coordinate the group) applies the change from its watch, and both keep it across their restarts."""
    from helpers import wait_for
    from zkpair import zk_broker_pair

    pair = zk_broker_pair(broker_factory, {}, "tidelog-groupcfg-zk-")
    _zk, (b1, b2) = next(pair)
    try:
        assert _inc(b1, "zk/g 1", {"share.auto.offset.reset": "earliest"}) == (0, None)
        wait_for(lambda: _values(_describe(b2, "zk/g 1"))["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG),
                 timeout=20, what="broker 2 to see the group config set through broker 1")
        assert _inc(b2, "zk/g 1", {"share.auto.offset.reset": None}) == (0, None)
        wait_for(lambda: _values(_describe(b1, "zk/g 1"))["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG),
                 timeout=20, what="broker 1 to see the deletion made through broker 2")
        assert _inc(b2, "zk-g2", {"share.delivery.count.limit": "4"}) == (0, None)
        b1.restart()
        assert _values(_describe(b1, "zk-g2"))["share.delivery.count.limit"] == ("4", GROUP_CONFIG)
        with RawClient(b1.port) as c:
            listed = c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})["config_resources"]
        assert [r["resource_name"] for r in listed] == ["zk-g2"]  # "zk/g 1" has no configs left
    finally:
        pair.close()
