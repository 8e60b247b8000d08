"""KIP-848 consumer groups in a ZooKeeper-mode cluster (3 brokers + ZooKeeper): the coordinator of a group is the
leader of its ``__consumer_offsets`` partition, as for classic groups; the other brokers answer its heartbeats
NOT_COORDINATOR; members bootstrapping from different brokers form one group; when the coordinator is killed
the members find the new one, rejoin (members are kept in memory: the new coordinator does not know them) and
resume from the committed offsets."""

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
    refused: list[str] = []  # records whose commit the new coordinator refused (the member had to rejoin)

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
                        # members are not persisted (decision 0062): after the coordinator moved, a member's
                        # commit is refused until its next heartbeat rejoins; the record may be read again
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
        cluster.brokers[coord].kill()
        for i in range(40):
            p.produce(topic, f"b{i}".encode(), partition=i % partitions)
        assert p.flush(60) == 0
        pump(lambda: len(set(seen)) == 80, 180, "batch b read after the coordinator moved")
        assert agreed_coordinator(cluster, group) != coord
        dupes = len(seen) - len(set(seen))
        # commit per record: at most the record in flight per partition again, plus those whose commit was refused
        assert dupes <= partitions + len(refused), (dupes, refused)
    finally:
        c1.close()
        c2.close()
        if not cluster.brokers[coord].running:
            cluster.brokers[coord].start(timeout=120)
