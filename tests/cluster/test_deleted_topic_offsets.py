"""A deleted topic's committed offsets leave every group in ZooKeeper mode (issue 25 item 1): each broker's
coordinator removes them from the groups it coordinates when it sees the topic gone, and writes tombstones to the
replicated ``__consumer_offsets``, so a new coordinator (the old one stopped) and a restarted broker load the groups
without them, and a topic created again under the same name is read from its start."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from confluent_kafka.admin import AdminClient, NewTopic
from helpers import committed_offsets, consume_and_commit
from support import agreed_coordinator, all_up, create_topic, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000})
    for v in values:
        p.produce(topic, v.encode(), partition=0)
    assert p.flush(60) == 0


def _create_again(bootstrap: str, topic: str) -> None:
    """Create ``topic`` once the cluster has finished deleting the old one (TOPIC_ALREADY_EXISTS meanwhile)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def created() -> bool:
        try:
            admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
            return True
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
            return False

    until(f"{topic} created again", created)


def test_deleted_topic_offsets_leave_every_group_across_brokers(cluster: Any) -> None:
    c = cluster
    create_topic(c.bootstrap, "t1", 1, 3)
    create_topic(c.bootstrap, "t2", 1, 3)
    _produce(c.bootstrap, "t1", [str(i) for i in range(100)])
    _produce(c.bootstrap, "t2", [str(i) for i in range(10)])
    groups = ["app", "both", "app-2", "app-3"]  # groups of several __consumer_offsets partitions
    for g in groups:
        consume_and_commit(c.bootstrap, g, "t1", 100)
    consume_and_commit(c.bootstrap, "both", "t2", 10)
    coordinators = {g: agreed_coordinator(c, g) for g in groups}
    assert committed_offsets(c.bootstrap, "both") == {("t1", 0): 100, ("t2", 0): 10}

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.delete_topics(["t1"], operation_timeout=30)["t1"].result(60)
    for g in groups:  # each coordinator, whichever broker it is, removed them
        until(f"{g}'s offsets of t1 removed", lambda g=g: ("t1", 0) not in committed_offsets(c.bootstrap, g))
    assert committed_offsets(c.bootstrap, "both") == {("t2", 0): 10}

    # the coordinator of "app" stops: another broker leads its partition and loads it from its replica, where the
    # tombstones are; then it comes back
    c.brokers[coordinators["app"]].stop()
    assert agreed_coordinator(c, "app") != coordinators["app"]
    for g in groups:
        assert ("t1", 0) not in committed_offsets(c.bootstrap, g)
    all_up(c)
    for g in groups:
        agreed_coordinator(c, g)
        assert ("t1", 0) not in committed_offsets(c.bootstrap, g)
    assert committed_offsets(c.bootstrap, "both") == {("t2", 0): 10}

    _create_again(c.bootstrap, "t1")
    until("t1 led again", lambda: c.wait_for("t1 led", lambda md: (p := c.partition(md, "t1")) is not None
                                                and p.leader > 0))
    _produce(c.bootstrap, "t1", [f"new{i}" for i in range(160)])
    assert consume_and_commit(c.bootstrap, "app", "t1", 160) == [f"new{i}".encode() for i in range(160)]
