"""Replication through ZooKeeper: 3 brokers + 1 ZooKeeper on loopback, RF=3, min.insync.replicas=2, acks=all."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _create(cluster: Any, name: str, partitions: int = 1) -> None:
    admin = cluster.admin()
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(30)

    def ready(md: Any) -> bool:
        ps = [cluster.partition(md, name, p) for p in range(partitions)]
        return all(p is not None and p.leader > 0 and len(p.isrs) == 3 for p in ps)

    cluster.wait_for(f"{name} led with a full ISR", ready)


def _leader(cluster: Any, topic: str, p: int = 0, not_in: tuple[int, ...] = ()) -> int:
    def pred(md: Any) -> int | None:
        part = cluster.partition(md, topic, p)
        if part is not None and part.leader > 0 and part.leader not in not_in:
            return part.leader
        return None

    return cluster.wait_for(f"a leader of {topic}-{p} outside {not_in}", pred)


def _segment_bytes(broker: Any, topic: str, p: int = 0) -> bytes:
    d = Path(broker.data_dir) / f"{topic}-{p}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def _consume(bootstrap: str, topic: str, n: int, timeout: float = 60.0) -> list[bytes]:
    import time

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


def _producer(cluster: Any) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100})


def test_acks_all_replicates_byte_identical(cluster: Any) -> None:
    topic = f"rep-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    acked: list[Any] = []
    errors: list[Any] = []
    p = _producer(cluster)
    for i in range(2000):
        p.produce(topic, f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: (errors if err else acked).append(err or msg))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert errors == []
    assert len(acked) == 2000
    # every ack means HW >= that offset + 1, i.e. every ISR member holds it: all replicas hold the same bytes
    leader = _leader(cluster, topic)
    copies = {i: _segment_bytes(b, topic) for i, b in cluster.brokers.items()}
    assert len(copies[leader]) > 0
    for i, data in copies.items():
        assert data == copies[leader], f"broker {i} differs from the leader {leader}"
    values = _consume(cluster.bootstrap, topic, 2000)
    assert values == [f"v{i}".encode() for i in range(2000)]
    # tidelog cluster describe reads the same state from ZooKeeper
    out = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "describe", "-z",
                          cluster.zk.connect, "--json"], capture_output=True, text=True, timeout=60, check=True)
    described = json.loads(out.stdout)
    assert sorted(b["id"] for b in described["brokers"]) == [1, 2, 3]
    assert described["controller"] in (1, 2, 3) and described["controller_epoch"] >= 1
    (part,) = next(t for t in described["topics"] if t["topic"] == topic)["partitions"]
    assert part["leader"] == leader and sorted(part["isr"]) == [1, 2, 3] and sorted(part["replicas"]) == [1, 2, 3]


def test_kill_leader_no_acked_record_lost(cluster: Any) -> None:
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    acked: dict[bytes, int] = {}
    errors: list[Any] = []
    stop = threading.Event()

    def produce_forever() -> None:
        p = _producer(cluster)
        i = 0

        def cb(err: Any, msg: Any) -> None:
            if err:
                errors.append(err)
            else:
                acked[msg.value()] = msg.offset()

        while not stop.is_set():
            p.produce(topic, f"r{i}".encode(), partition=0, on_delivery=cb)
            i += 1
            p.poll(0.002)
        assert p.flush(120) == 0

    t = threading.Thread(target=produce_forever, daemon=True)
    t.start()
    kills = 3
    for _ in range(kills):
        before = len(acked)
        cluster.wait_for("acks flowing", lambda _md, before=before: len(acked) > before + 50)
        leader = _leader(cluster, topic)
        cluster.brokers[leader].kill()
        _leader(cluster, topic, not_in=(leader,))
        cluster.brokers[leader].start()
        cluster.wait_for("the killed broker back in the ISR",
                         lambda md, leader=leader: (p := cluster.partition(md, topic)) is not None
                         and leader in p.isrs)
    before = len(acked)
    cluster.wait_for("acks after the last failover", lambda _md: len(acked) > before + 50)
    stop.set()
    t.join(180)
    assert not t.is_alive()
    assert errors == []
    values = _consume(cluster.bootstrap, topic, len(acked) + 1000, timeout=30)
    seen: dict[bytes, int] = {}
    for v in values:
        seen[v] = seen.get(v, 0) + 1
    lost = [v for v in acked if v not in seen]
    dups = [v for v, n in seen.items() if n > 1]
    assert lost == [], f"{len(lost)} acknowledged records lost"
    assert dups == [], f"{len(dups)} duplicates"


def test_two_of_three_down_not_enough_replicas(cluster: Any) -> None:
    from confluent_kafka import KafkaError

    topic = f"nerep-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    leader = _leader(cluster, topic)
    victims = [b for b in cluster.brokers if b != leader][:2]
    survivors = [b for b in cluster.brokers if b not in victims]
    for v in victims:
        cluster.brokers[v].kill()
    cluster.wait_for("the ISR shrunk to the survivor",
                     lambda md: (p := cluster.partition(md, topic)) is not None and list(p.isrs) == survivors)
    errors: list[Any] = []
    acked: list[Any] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 5000,
                  "retries": 0})
    for i in range(5):
        p.produce(topic, f"x{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: (errors if err else acked).append(err or msg))
    p.flush(30)
    assert acked == []
    assert errors and all(e.code() == KafkaError.NOT_ENOUGH_REPLICAS for e in errors), errors
