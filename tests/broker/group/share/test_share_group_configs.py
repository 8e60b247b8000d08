"""A share group's GROUP configs (Kafka 4's ``kafka-configs.sh --entity-type groups``) applied to its share
partitions: ``share.auto.offset.reset`` (earliest, by_duration) decides where a group that never read a partition
starts, group by group, over the broker's default (latest), with confluent-kafka's ShareConsumer."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.integration

BROKER = {"group.share.heartbeat.interval.ms": "500", "offsets.topic.num.partitions": "1"}  # reset: latest


def _set_group_config(admin: AdminClient, group: str, name: str, value: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def _values(bootstrap: str, group: str, topic: str, timeout: float = 60) -> list[bytes]:
    """What the group's first consumer gets of the topic, up to a marker of its own: markers are produced every
    1.5 s until one comes back (a group whose reset is ``latest`` starts wherever the log ends when its share
    partition is first made, which the client does not tell)."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 500})
    c.subscribe([topic])
    p = Producer({"bootstrap.servers": bootstrap})
    got: list[bytes] = []
    marker = f"mark-{group}".encode()
    deadline = time.monotonic() + timeout
    next_marker = time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline:
            got += [m.value() for m in c.poll(0.5) if m.error() is None]
            if marker in got:
                c.commit_sync(30)
                return got
            if time.monotonic() >= next_marker:
                p.produce(topic, marker)
                assert p.flush(30) == 0
                next_marker = time.monotonic() + 1.5
        raise AssertionError(f"{group}: no marker within {timeout}s (got {len(got)})")
    finally:
        c.close()


def test_share_auto_offset_reset_per_group(broker_factory: Any) -> None:
    b = broker_factory(BROKER)
    topic = "sgc-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(10):  # two hours old
        p.produce(topic, f"old{i}".encode(), timestamp=now - 2 * 3600_000 + i)
    for i in range(10):  # recent
        p.produce(topic, f"new{i}".encode(), timestamp=now - 60_000 + i)
    assert p.flush(30) == 0
    old = [f"old{i}".encode() for i in range(10)]
    new = [f"new{i}".encode() for i in range(10)]

    g_latest, g_earliest, g_hour = (f"{k}-{uuid.uuid4().hex[:6]}" for k in ("latest", "earliest", "hour"))
    _set_group_config(admin, g_earliest, "share.auto.offset.reset", "earliest")
    _set_group_config(admin, g_hour, "share.auto.offset.reset", "by_duration:PT1H")

    latest = _values(b.bootstrap, g_latest, topic)  # the broker's default: latest
    assert not set(latest) & set(old + new), latest
    earliest = _values(b.bootstrap, g_earliest, topic)
    assert earliest[:20] == old + new, earliest[:20]
    hour = _values(b.bootstrap, g_hour, topic)  # from one hour back: the recent ones, not the old ones
    assert hour[:10] == new and not set(hour) & set(old), hour[:12]
