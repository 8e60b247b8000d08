"""KIP-848 consumer groups in a ZooKeeper-mode cluster (3 brokers + ZooKeeper): the coordinator of a group is the
leader of its ``__consumer_offsets`` partition, as for classic groups; the other brokers answer its heartbeats
NOT_COORDINATOR; members bootstrapping from different brokers form one group; when the coordinator is killed
the members find the new one, which loaded the group from its ``__consumer_offsets`` partition (Kafka's
ConsumerGroup* records, decision 0062): it knows the members with their epochs and assignments, so nobody rejoins,
no partition moves and no commit is refused."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from support import agreed_coordinator, create_topic, request

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONSUMER_GROUP_HEARTBEAT, NOT_COORDINATOR = 68, 16


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                     "topic.metadata.refresh.interval.ms": 2000})


def _described(bootstrap: str, group: str) -> Any:
    import asyncio

    from tidelog.cli.group_kip848 import describe_consumer_group

    g, err = asyncio.run(describe_consumer_group(bootstrap, group, 15))
    assert g is not None, err
    return g


def test_consumer_protocol_group_across_brokers_and_coordinator_kill(cluster: Any) -> None:
    topic, group = f"k848-{uuid.uuid4().hex[:8]}", f"g848-{uuid.uuid4().hex[:8]}"
    partitions = 4
    create_topic(cluster.bootstrap, topic, partitions, 3)
    coord = agreed_coordinator(cluster, group)
    others = [i for i in cluster.brokers if i != coord]
    r = request(cluster.brokers[others[0]], CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 5000,
        "subscribed_topic_names": [topic], "topic_partitions": []}, timeout=15)
    assert r["error_code"] == NOT_COORDINATOR

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(40):
        p.produce(topic, f"a{i}".encode(), partition=i % partitions)
    assert p.flush(60) == 0

    c1 = _consumer(cluster.brokers[others[0]].bootstrap, group)
    c2 = _consumer(cluster.brokers[others[1]].bootstrap, group)
    seen: list[str] = []
    refused: list[str] = []  # records whose commit a coordinator refused as from an unknown or stale member

    def pump(until: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {c1.assignment()} / {c2.assignment()}")
            for c in (c1, c2):
                m = c.poll(0.2)
                if m is not None and not m.error():
                    seen.append(m.value().decode())
                    try:
                        c.commit(message=m, asynchronous=False)
                    except KafkaException as exc:
                        if exc.args[0].code() not in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.STALE_MEMBER_EPOCH,
                                                      KafkaError.FENCED_MEMBER_EPOCH):
                            raise
                        refused.append(m.value().decode())

    try:
        c1.subscribe([topic])
        c2.subscribe([topic])

        def split() -> bool:
            a1 = {tp.partition for tp in c1.assignment()}
            a2 = {tp.partition for tp in c2.assignment()}
            return bool(a1 and a2 and not a1 & a2 and a1 | a2 == set(range(partitions)))

        pump(lambda: split() and len(set(seen)) == 40, 120, "two members split the partitions and read batch a")
        before = _described(cluster.bootstrap, group)
        owned = ({tp.partition for tp in c1.assignment()}, {tp.partition for tp in c2.assignment()})
        cluster.brokers[coord].kill()
        for i in range(40):
            p.produce(topic, f"b{i}".encode(), partition=i % partitions)
        assert p.flush(60) == 0
        pump(lambda: len(set(seen)) == 80, 180, "batch b read after the coordinator moved")
        assert agreed_coordinator(cluster, group) != coord
        dupes = len(seen) - len(set(seen))
        # commit per record: at most the record in flight per partition (its commit lost with the coordinator)
        assert dupes <= partitions, dupes
        assert refused == []
        # the new coordinator replayed the group: same members, epochs and assignments; nobody rejoined
        assert ({tp.partition for tp in c1.assignment()}, {tp.partition for tp in c2.assignment()}) == owned
        after = _described(cluster.bootstrap, group)
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert {m.member_id: (m.epoch, sorted(m.assignment)) for m in after.members} == \
            {m.member_id: (m.epoch, sorted(m.assignment)) for m in before.members}
    finally:
        c1.close()
        c2.close()
        if not cluster.brokers[coord].running:
            cluster.brokers[coord].start(timeout=120)
