"""``auto.create.topics.enable`` in ZooKeeper mode: a Metadata request for an unknown topic creates it in
ZooKeeper with the broker defaults (the ZooKeeper writes run off the event loop), answers LEADER_NOT_AVAILABLE
until the controller has placed it, and a producer that only knows the topic's name writes to it."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from helpers import racing_metadata
from support import kazoo, read_all, request, state, topic_assignment, until

from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METADATA = ApiKey.METADATA
NONE, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION = 0, 5, 3


def _metadata(broker: Any, topic: str, allow: bool) -> dict:
    return request(broker, METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": allow,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False}, timeout=15)["topics"][0]


@pytest.fixture(scope="module")
def auto_cluster(cluster_with: Any) -> Any:
    return cluster_with({"auto.create.topics.enable": "true", "num.partitions": "2"})


def test_metadata_and_produce_auto_create_topics(auto_cluster: Any) -> None:
    c = auto_cluster
    b = next(iter(c.brokers.values()))
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    assert _metadata(b, topic, allow=False)["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    first = _metadata(b, topic, allow=True)
    assert first["error_code"] in (LEADER_NOT_AVAILABLE, NONE), first
    with kazoo(c.zk.connect) as zk:
        assignment = topic_assignment(zk, topic)
        assert sorted(assignment.partitions) == [0, 1]
        assert all(len(r) == 3 for r in assignment.partitions.values())  # default.replication.factor 3
        until(f"{topic} led with a full ISR", lambda: all(
            (s := state(zk, topic, p)).leader > 0 and len(s.isr) == 3 for p in range(2)))
    until(f"{topic} in every broker's Metadata", lambda: all(
        (m := _metadata(x, topic, allow=False))["error_code"] == NONE and len(m["partitions"]) == 2
        for x in c.brokers.values()))
    # a producer naming a topic nobody created: its Metadata request creates it
    from confluent_kafka import Producer

    produced = f"auto-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "message.timeout.ms": 60000})
    for i in range(10):
        p.produce(produced, value=b"v%d" % i, partition=i % 2)
    assert p.flush(60) == 0
    got = read_all(c.bootstrap, produced, 2)
    assert sorted(v for recs in got.values() for _, v in recs) == sorted(b"v%d" % i for i in range(10))


def test_concurrent_auto_creation_never_answers_topic_already_exists(auto_cluster: Any) -> None:
    """Many Metadata requests auto-creating one new topic at once, on every broker: the races lost (in this broker,
    or in ZooKeeper against another broker) answer LEADER_NOT_AVAILABLE, never TOPIC_ALREADY_EXISTS (issue 25)."""
    c = auto_cluster
    for _ in range(3):
        topic = f"race-{uuid.uuid4().hex[:8]}"
        with ThreadPoolExecutor(len(c.brokers)) as pool:
            answers = [t for ts in pool.map(lambda x, t=topic: racing_metadata(x.port, t, clients=6), c.brokers.values())
                       for t in ts]
        codes = {t["error_code"] for t in answers}
        assert codes <= {NONE, LEADER_NOT_AVAILABLE}, answers
        until(f"{topic} in every broker's Metadata", lambda topic=topic: all(
            (m := _metadata(x, topic, allow=False))["error_code"] == NONE and len(m["partitions"]) == 2
            for x in c.brokers.values()))


CREATE_TOPICS, CREATE_PARTITIONS = 19, 37
POLICY_VIOLATION = ErrorCode.POLICY_VIOLATION


def test_open_file_budget_in_zookeeper_mode(cluster_with: Any) -> None:
    """A creation whose replicas would not fit in a broker's open-file headroom is refused POLICY_VIOLATION by the
    broker that takes it, before anything is written to ZooKeeper (validate_only too); one that fits is created.
    The brokers inherit this process's ``ulimit -n``; the reserve leaves them about 500 descriptors."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        pytest.skip("no open-file limit to keep to")
    c = cluster_with({"tidelog.open.files.reserve": str(max(0, soft - 500))})
    b = next(iter(c.brokers.values()))

    def create(name: str, partitions: int, validate_only: bool = False) -> dict:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 3, "assignments": [],
                            "configs": []}], "timeout_ms": 30000, "validate_only": validate_only}
        return request(b, CREATE_TOPICS, 5, body)["topics"][0]

    big = f"fds-{uuid.uuid4().hex[:8]}"
    for validate_only in (True, False):
        refused = create(big, 2000, validate_only)
        assert refused["error_code"] == POLICY_VIOLATION, refused
        assert "open files" in refused["error_message"]
    small = f"fds-{uuid.uuid4().hex[:8]}"
    created = create(small, 4)
    assert created["error_code"] == NONE, created
    until(f"{small} in the broker's Metadata", lambda: _metadata(b, small, allow=False)["error_code"] == NONE)
    grow = request(b, CREATE_PARTITIONS, 3, {"topics": [{"name": small, "count": 2004, "assignments": None}],
                                              "timeout_ms": 30000, "validate_only": False})["results"][0]
    assert grow["error_code"] == POLICY_VIOLATION, grow
    with kazoo(c.zk.connect) as zk:
        assert zk.exists(f"/brokers/topics/{big}") is None
        assert sorted(topic_assignment(zk, small).partitions) == [0, 1, 2, 3]
