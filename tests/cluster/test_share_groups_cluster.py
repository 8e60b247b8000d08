"""Share groups (KIP-932) in a ZooKeeper-mode cluster (3 brokers + ZooKeeper): the group's coordinator (the leader
of its ``__consumer_offsets`` partition) keeps its members, each partition's leader keeps its share-partition state
and the members' share sessions; two confluent-kafka ``ShareConsumer`` members bootstrapping from different brokers
share a topic whose partitions are led by all three brokers, and every record is delivered to exactly one of them."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from support import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def share_cluster(cluster_with: Any) -> Any:
    return cluster_with({"share.auto.offset.reset": "earliest"})


def test_share_group_across_brokers(share_cluster: Any) -> None:
    cluster = share_cluster
    topic, group = f"share-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    partitions = 6
    create_topic(cluster.bootstrap, topic, partitions, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10})
    values = [f"c{i}" for i in range(300)]
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(60) == 0
    brokers = list(cluster.brokers.values())
    members = [ShareConsumer({"bootstrap.servers": brokers[k].bootstrap, "group.id": group,
                              "max.poll.records": 20}) for k in (0, 1)]
    for m in members:
        m.subscribe([topic])
    seen: list[list[tuple[str, int]]] = [[], []]
    try:
        deadline = time.monotonic() + 90
        while sum(len(s) for s in seen) < len(values) and time.monotonic() < deadline:
            for k, m in enumerate(members):
                seen[k] += [(x.value().decode(), x.partition()) for x in m.poll(0.2) if x.error() is None]
        for m in members:
            m.commit_sync(30)
    finally:
        for m in members:
            m.close()
    got = [v for s in seen for v, _ in s]
    assert sorted(got) == sorted(values), f"{len(set(values) - set(got))} missing, {len(got) - len(set(got))} twice"
    assert seen[0] and seen[1]
    # every partition was read (leaders on every broker)
    assert {p for s in seen for _, p in s} == set(range(partitions))
