"""AlterConfigs / IncrementalAlterConfigs in ZooKeeper mode reach every broker, as in Kafka: the receiving broker
writes ``/config/topics/<t>`` (``{"version":1,"config":{...}}``) and a ``/config/changes/config_change_<seq>``
notification (``{"version":2,"entity_path":"topics/<t>"}``); every broker applies the new overrides to its logs,
a broker that was down reads ``/config/topics/<t>`` when it starts, and ``validate_only`` writes nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from support import all_up, create_topic, kazoo, request, state, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC = 2  # resource type
SET, DELETE = 0, 1
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
DEFAULT_RETENTION_MS = "604800000"
CHANGE = re.compile(r"config_change_\d{10}\Z")


def _described(broker: Any, topic: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs of ``topic`` sent to this one broker: name -> (value, source)."""
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False}
    [res] = request(broker, DESCRIBE_CONFIGS, 1, body)["results"]
    assert res["error_code"] == 0, res
    return {c["name"]: (c["value"], c["config_source"]) for c in res["configs"]}


def _has(broker: Any, topic: str, expected: dict[str, tuple[str, int]]) -> bool:
    got = _described(broker, topic)
    return all(got.get(k) == v for k, v in expected.items())


def _everywhere(cluster: Any, topic: str, expected: dict[str, tuple[str, int]], timeout: float = 30.0) -> None:
    for i, b in cluster.brokers.items():
        until(f"broker {i} describing {topic} with {expected}", lambda b=b: _has(b, topic, expected), timeout=timeout)


def _zk_config(zk: Any, topic: str) -> dict:
    from tidelog.cluster import zkdata as zd

    return json.loads(zk.get(zd.topic_config_path(topic))[0])


def _notifications(zk: Any) -> dict[str, dict]:
    """The config change notifications under ``/config/changes`` (none if it does not exist)."""
    if zk.exists("/config/changes") is None:
        return {}
    return {c: json.loads(zk.get(f"/config/changes/{c}")[0]) for c in sorted(zk.get_children("/config/changes"))}


def _incremental(broker: Any, topic: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> dict:
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                           "configs": [{"name": n, "config_operation": o, "value": v} for n, o, v in ops]}],
            "validate_only": validate_only}
    [res] = request(broker, INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    return res


def _produce(cluster: Any, topic: str, partition: int, size: int) -> int | None:
    """One record of ``size`` bytes to ``partition``: None when acknowledged, else the error code."""
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 60000,
                  "linger.ms": 0})
    p.produce(topic, b"x" * size, partition=partition, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(90) == 0
    [err] = errors
    return None if err is None else err.code()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_topic_config_changes_reach_every_broker(cluster: Any) -> None:
    all_up(cluster)
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])  # each broker leads one
    for p in range(3):
        assert _produce(cluster, topic, p, 2000) is None
    cluster.brokers[3].kill()
    cluster.wait_for("broker 3 unregistered", lambda md: 3 not in md.brokers)
    cluster.wait_for("partition 2 led by broker 1", lambda md: (q := cluster.partition(md, topic, 2)) is not None
                     and q.leader == 1)

    with kazoo(cluster.zk.connect) as zk:
        before = _notifications(zk)
        # IncrementalAlterConfigs through a real client (librdkafka sends it to the controller)
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "1024", incremental_operation=AlterConfigOpType.SET)])
        admin = cluster.admin()  # kept alive until its future completes
        admin.incremental_alter_configs([res])[res].result(30)
        assert _zk_config(zk, topic) == {"version": 1, "config": {"retention.ms": "3600000",
                                                                  "max.message.bytes": "1024"}}
        new = {c: v for c, v in _notifications(zk).items() if c not in before}
        assert new and all(CHANGE.match(c) for c in new), new
        assert list(new.values())[-1] == {"version": 2, "entity_path": f"topics/{topic}"}
        changed = {"retention.ms": ("3600000", DYNAMIC_TOPIC_CONFIG), "max.message.bytes": ("1024", DYNAMIC_TOPIC_CONFIG)}
        for i in (1, 2):
            until(f"broker {i} describing the change", lambda i=i: _has(cluster.brokers[i], topic, changed), timeout=30)
        # every leader applies max.message.bytes to its log (partition 2 is led by broker 1 now)
        for p in range(3):
            until(f"partition {p} refusing 2000 bytes",
                  lambda p=p: _produce(cluster, topic, p, 2000) == KafkaError.MSG_SIZE_TOO_LARGE, timeout=30)
            assert _produce(cluster, topic, p, 100) is None

        # the broker that was down reads /config/topics/<t> when it starts, and applies it to its log once it leads
        cluster.brokers[3].start()
        cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
        assert _has(cluster.brokers[3], topic, changed)
        until("broker 3 back in the ISR of partition 2", lambda: 3 in state(zk, topic, 2).isr)
        subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "elect-leaders", "-z", cluster.zk.connect,
                        "--topic", topic, "--partition", "2"], check=True, capture_output=True, timeout=120)
        cluster.wait_for("partition 2 led by broker 3", lambda md: (q := cluster.partition(md, topic, 2)) is not None
                         and q.leader == 3)
        until("broker 3 refusing 2000 bytes on partition 2",
              lambda: _produce(cluster, topic, 2, 2000) == KafkaError.MSG_SIZE_TOO_LARGE, timeout=30)

        # validate_only (sent to a broker that is not the controller) checks and writes nothing
        marks = (_zk_config(zk, topic), _notifications(zk))
        res2 = _incremental(cluster.brokers[2], topic, [("retention.ms", SET, "1")], validate_only=True)
        assert res2["error_code"] == 0, res2
        bad = _incremental(cluster.brokers[2], topic, [("retention.ms", SET, "-5")], validate_only=True)
        assert bad["error_code"] != 0
        assert (_zk_config(zk, topic), _notifications(zk)) == marks
        assert all(_described(b, topic)["retention.ms"] == ("3600000", DYNAMIC_TOPIC_CONFIG)
                   for b in cluster.brokers.values())

        # DELETE of an override through another broker: read back there at once, everywhere soon after
        res3 = _incremental(cluster.brokers[2], topic, [("retention.ms", DELETE, None)])
        assert res3["error_code"] == 0, res3
        assert _described(cluster.brokers[2], topic)["retention.ms"] == (DEFAULT_RETENTION_MS, DEFAULT_CONFIG)
        assert _zk_config(zk, topic) == {"version": 1, "config": {"max.message.bytes": "1024"}}
        _everywhere(cluster, topic, {"retention.ms": (DEFAULT_RETENTION_MS, DEFAULT_CONFIG),
                                     "max.message.bytes": ("1024", DYNAMIC_TOPIC_CONFIG)})

        # AlterConfigs (replaces the whole override set) through a real client
        res4 = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "4096"})
        admin = cluster.admin()
        admin.alter_configs([res4])[res4].result(30)
        assert _zk_config(zk, topic) == {"version": 1, "config": {"max.message.bytes": "4096"}}
        latest = {"max.message.bytes": ("4096", DYNAMIC_TOPIC_CONFIG), "retention.ms": (DEFAULT_RETENTION_MS,
                                                                                       DEFAULT_CONFIG)}
        _everywhere(cluster, topic, latest)
        for p in range(3):
            until(f"partition {p} taking 2000 bytes again", lambda p=p: _produce(cluster, topic, p, 2000) is None,
                  timeout=30)

    # a broker restarted afterwards has the latest overrides too
    cluster.brokers[1].kill()
    cluster.wait_for("broker 1 unregistered", lambda md: 1 not in md.brokers)
    cluster.brokers[1].start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    assert _has(cluster.brokers[1], topic, latest)
