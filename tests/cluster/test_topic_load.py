"""TopicManager.load() in ZooKeeper mode: a restarting broker creates logs only for the partitions ZooKeeper
assigns to it (``hosted_partitions``), never directories of partitions hosted elsewhere that would then have to
be deleted again."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _until(what: str, fn: Any, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as exc:  # a broker still starting
            last = exc
        time.sleep(0.2)  # polling interval
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def _dirs(data_dir: Any, topic: str) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith(topic + "-"))


def test_restart_creates_only_assigned_partitions(cluster: Any) -> None:
    from confluent_kafka.admin import NewTopic
    from kazoo.client import KazooClient

    from tidelog.cluster import zkdata as zd

    topic = f"load-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    futures[topic].result(timeout=60)
    zk = KazooClient(hosts=cluster.zk.connect)
    zk.start(timeout=30)
    try:
        assignment = zd.decode_topic(zk.get(zd.topic_path(topic))[0]).partitions
    finally:
        zk.stop()
        zk.close()
    hosted = {b: sorted(p for p, reps in assignment.items() if b in reps) for b in cluster.brokers}
    b = next(b for b, ps in hosted.items() if ps and len(ps) < 3)
    proc = cluster.brokers[b]
    expected = [f"{topic}-{p}" for p in hosted[b]]

    def led() -> bool:
        md = cluster.admin().list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        return t is not None and t.error is None and all(t.partitions[p].leader == b for p in hosted[b])

    _until(f"broker {b} leads {hosted[b]}", led)
    assert _dirs(proc.data_dir, topic) == expected
    # the registry (tidelog-topics.json) knows all 3 partitions; at restart only the assigned ones are created
    proc.kill()
    mark = len(proc.log_text())
    proc.start()
    _until(f"broker {b} leads {hosted[b]} again", led)
    after = proc.log_text()[mark:]
    assert "storage ready" in after
    assert not [line for line in after.splitlines() if "replica deleted" in line and topic in line], after[-3000:]
    assert _dirs(proc.data_dir, topic) == expected
