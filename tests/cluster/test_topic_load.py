"""TopicManager.load() in ZooKeeper mode: a restarting broker creates logs only for the partitions ZooKeeper
assigns to it (``hosted_partitions``), never directories of partitions hosted elsewhere that would then have to
be deleted again."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from support import create_topic, kazoo, replica_dirs, topic_assignment, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_restart_creates_only_assigned_partitions(cluster: Any) -> None:
    topic = f"load-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 1)
    with kazoo(cluster.zk.connect) as zk:
        assignment = topic_assignment(zk, topic).partitions
    hosted = {b: sorted(p for p, reps in assignment.items() if b in reps) for b in cluster.brokers}
    b = next(b for b, ps in hosted.items() if ps and len(ps) < 3)
    proc = cluster.brokers[b]
    expected = [f"{topic}-{p}" for p in hosted[b]]

    def led() -> bool:
        md = cluster.admin().list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        return t is not None and t.error is None and all(t.partitions[p].leader == b for p in hosted[b])

    until(f"broker {b} leads {hosted[b]}", led)
    assert replica_dirs(proc.data_dir, topic) == expected
    # the registry (tidelog-topics.json) knows all 3 partitions; at restart only the assigned ones are created
    proc.kill()
    mark = len(proc.log_text())
    proc.start()
    until(f"broker {b} leads {hosted[b]} again", led)
    after = proc.log_text()[mark:]
    assert "storage ready" in after
    assert not [line for line in after.splitlines() if "replica deleted" in line and topic in line], after[-3000:]
    assert replica_dirs(proc.data_dir, topic) == expected
