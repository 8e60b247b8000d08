"""DescribeLogDirs, DescribeProducers and AlterReplicaLogDirs against a real ``tidelog serve``: kafka-python's
``describe_log_dirs`` / ``alter_replica_log_dirs``, confluent-kafka producers, and raw requests for the cases no
Python client exposes (the Java client's calls are in tests/java)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from helpers import RawClient, confluent_produce, consume_all, new_topic, wait_for
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration

DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 35, 61
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_test_storage_admin_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
JbodBroker = _fixtures.JbodBroker


def _sizes(data_dir: Path, topic: str, partitions: int) -> dict[int, int]:
    return {p: sum(f.stat().st_size for f in (data_dir / f"{topic}-{p}").glob("*.log")) for p in range(partitions)}


def test_kafka_python_describe_log_dirs(broker: Any) -> None:
    topic = "ldirs"
    confluent_produce(broker.bootstrap, topic, [{"value": b"x" * 100, "partition": 0} for _ in range(30)])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        [every] = admin.describe_log_dirs()
        [asked] = admin.describe_log_dirs(topic_partitions={topic: [0], "no-such-topic": [0]})
    finally:
        admin.close()
    assert every["broker"] == 0
    [d] = every["log_dirs"]
    assert d["error_code"] == 0 and d["log_dir"] == str(Path(broker.data_dir).resolve())
    assert 0 < d["usable_bytes"] <= d["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in d["topics"] for p in t["partitions"]}
    for p, size in _sizes(Path(broker.data_dir), topic, 1).items():
        assert sizes[(topic, p)] == size > 0
    # named partitions only; one not hosted here is left out, as Kafka does
    [d2] = asked["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in d2["topics"]] == [(topic, [0])]


def test_describe_producers_raw(broker: Any) -> None:
    topic = "dprod"
    confluent_produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(12)],
                      **{"enable.idempotence": True})
    with RawClient(broker.port) as c:
        r = c.request(DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": topic, "partition_indexes": [0, 99]}, {"name": "no-such-topic", "partition_indexes": [0]}]})
    [t, missing] = r["topics"]
    p0, p99 = t["partitions"]
    assert p0["error_code"] == 0 and len(p0["active_producers"]) == 1
    prod = p0["active_producers"][0]
    assert prod["producer_id"] >= 0 and prod["last_sequence"] == 11 and prod["current_txn_start_offset"] == -1
    assert p99["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and p99["active_producers"] == []
    assert missing["partitions"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION


MOVE_RATE = 1024 * 1024  # replica.alter.log.dirs.io.max.bytes.per.second: the 8 MB partition moves in ~8 s


@pytest.fixture()
def jbod(tmp_path: Path) -> Iterator[Any]:
    b = JbodBroker([tmp_path / "a", tmp_path / "b"],
                   {"num.partitions": "1", "replica.alter.log.dirs.io.max.bytes.per.second": str(MOVE_RATE)})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _dirs(bootstrap: str, topic: str) -> dict[str, list[bool]]:
    """log dir -> is_future_key of each replica of ``topic`` there (kafka-python's DescribeLogDirs)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    return {str(Path(d["log_dir"])): [p["is_future_key"] for t in d["topics"] if t["name"] == topic
                                      for p in t["partitions"]] for d in answer["log_dirs"]}


def test_clients_are_served_while_a_replica_moves(jbod: Any) -> None:
    """AlterReplicaLogDirs answers at once and the partition moves in the background: produces to the moving
    partition and to another topic are acknowledged, and Metadata answered, while DescribeLogDirs still shows the
    future replica (so before the move finished); afterwards every record is there, in order. Before, the move
    ran inside the request holding the partition's lock (its appends and reads waited, and the event loop with
    them: every client of the broker stalled)."""
    moved, other = new_topic("moving"), new_topic("bystander")
    admin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(moved, 1, 1, topic_configs={"segment.bytes": str(1 << 20)}),
                             NewTopic(other, 1, 1)])
        before = [b"%06d" % i + b"." * 10000 for i in range(800)]  # 8 MB, several segments
        confluent_produce(jbod.bootstrap, moved, [{"value": v, "partition": 0} for v in before])
        [src] = [d for d, keys in _dirs(jbod.bootstrap, moved).items() if keys == [False]]
        [dst] = [d for d in map(str, jbod.dirs) if str(Path(d)) != src]
        result = admin.alter_replica_log_dirs({(moved, 0, 0): dst})
        assert [e.errno for e in result.values()] == [0], result
    finally:
        admin.close()
    assert _dirs(jbod.bootstrap, moved)[dst] == [True], "the move should still be under way"

    acked: list[tuple[str, bytes]] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append((msg.topic(), msg.value()))

    during = [b"during-%03d" % i for i in range(100)]
    p = Producer({"bootstrap.servers": jbod.bootstrap, "acks": "all", "linger.ms": 2, "enable.idempotence": True})
    for v in during:
        p.produce(moved, v, partition=0, on_delivery=delivered)
        p.produce(other, v, partition=0, on_delivery=delivered)
    assert p.flush(30) == 0
    md = AdminClient({"bootstrap.servers": jbod.bootstrap}).list_topics(timeout=10)
    assert {moved, other} <= set(md.topics)
    assert len(acked) == 200
    # every ack and the Metadata answer came while the future replica was still being filled
    assert _dirs(jbod.bootstrap, moved)[dst] == [True], "the move finished before the clients were served"

    wait_for(lambda: _dirs(jbod.bootstrap, moved) == {src: [], dst: [False]}, 60, "the move to finish")
    assert [m.value() for m in consume_all(jbod.bootstrap, moved)] == before + during
    assert [m.value() for m in consume_all(jbod.bootstrap, other)] == during
    assert (Path(dst) / f"{moved}-0").is_dir() and not (Path(src) / f"{moved}-0").exists()
