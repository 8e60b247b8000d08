"""Which ``__consumer_offsets`` partition holds a group: Kafka's ``Utils.abs(groupId.hashCode()) % n``.

tidelog used ``hashCode & 0x7fffffff`` before (the producer partitioner's ``Utils.toPositive``), which differs for
every negative hash; data directories written then hold those groups' records in another partition. The replay
keeps them on one node for keys the group's own partition has no record of, and skips them when a single
partition is loaded (ZooKeeper mode). The last test upgrades a real data directory under a real broker.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tidelog.broker.group import records as rec
from tidelog.broker.group.coordinator import _read_partitions
from tidelog.broker.group.records import (
    OFFSETS_TOPIC,
    GroupValue,
    OffsetValue,
    java_string_hash,
    legacy_partition_for,
    partition_for,
)
from tidelog.records.batch import build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog

from .conftest import create_topic, produce_values

N = 50  # Kafka's default offsets.topic.num.partitions


# ------------------------------------------------------------------------------------------- the rule


def test_known_kafka_placements() -> None:
    # "my-group": hashCode -1906497762; Kafka puts it in __consumer_offsets-12 (tidelog used to say 36)
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", N) == 12
    assert legacy_partition_for("my-group", N) == 36
    assert partition_for("kafka-txn-0", N) == 30  # same rule as the transaction coordinator's, known value


def test_hash_of_integer_min_value_goes_to_partition_zero() -> None:
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", N) == 0
    assert partition_for("polygenelubricants", 7) == 0  # Utils.abs maps it to 0, whatever n


@pytest.mark.parametrize("group", ["test-group", "console-consumer-1"])
def test_positive_hash_unchanged(group: str) -> None:
    h = java_string_hash(group)
    assert h > 0
    assert partition_for(group, N) == h % N == legacy_partition_for(group, N)


def test_negative_hash_is_math_abs() -> None:
    for group in ("my-group", "g-positive", "kafka-txn-0"):
        h = java_string_hash(group)
        assert h < 0
        assert partition_for(group, N) == (-h) % N


# ------------------------------------------------------------------------------------------- the replay

NOW = int(time.time() * 1000)


def _log(root: Path, partition: int) -> PartitionLog:
    return PartitionLog.open(root / f"{OFFSETS_TOPIC}-{partition}", LogConfig())


def _append(lg: PartitionLog, *entries: tuple[bytes, bytes | None]) -> None:
    lg.append_as_leader(build_batch(list(entries)))


def _commit(group: str, topic: str, part: int, offset: int) -> tuple[bytes, bytes]:
    return rec.encode_offset_key(group, topic, part), rec.encode_offset_value(OffsetValue(offset, -1, "", NOW))


def _group_record(group: str, generation: int) -> tuple[bytes, bytes]:
    return rec.encode_group_key(group), rec.encode_group_value(GroupValue("consumer", generation, "range", None, NOW))


def test_replay_keeps_misplaced_records_the_own_partition_has_nothing_for(tmp_path: Path) -> None:
    old, new = legacy_partition_for("my-group", N), partition_for("my-group", N)
    logs = {p: _log(tmp_path, p) for p in sorted({0, old, new})}
    try:
        # before the upgrade, at the old placement
        _append(logs[old], _commit("my-group", "t", 0, 10), _commit("my-group", "t", 1, 11),
                _commit("my-group", "t", 2, 12), _commit("my-group", "t", 3, 13), _group_record("my-group", 4))
        _append(logs[old], _commit("my-group", "t", 3, 14))  # latest of the old partition wins there
        _append(logs[old], _commit("my-group", "gone", 0, 1), (rec.encode_offset_key("my-group", "gone", 0), None))
        # after the upgrade, in the group's partition: a newer commit, a deleted offset, newer group metadata
        _append(logs[new], _commit("my-group", "t", 1, 100), (rec.encode_offset_key("my-group", "t", 2), None),
                _group_record("my-group", 5))
        # a group whose records are all where they belong, in the same partition as the misplaced ones
        _append(logs[0], _commit("polygenelubricants", "t", 0, 7))
        groups, offsets, misplaced = _read_partitions(list(logs.values()), N, adopt_misplaced=True)
    finally:
        for lg in logs.values():
            lg.close()
    assert {k: v.offset for k, v in offsets.items()} == {
        ("my-group", "t", 0): 10,  # only at the old placement: kept
        ("my-group", "t", 1): 100,  # written since: wins
        ("my-group", "t", 3): 14,
        ("polygenelubricants", "t", 0): 7,
    }  # t-2 deleted since the upgrade: stays deleted; "gone" was deleted before it
    assert groups["my-group"].generation == 5
    assert misplaced == {"my-group"}


def test_replay_of_one_partition_skips_groups_it_does_not_coordinate(tmp_path: Path) -> None:
    old = legacy_partition_for("my-group", N)
    lg = _log(tmp_path, old)
    own = next(g for g in (f"g{i}" for i in range(10_000)) if partition_for(g, N) == old)
    try:
        _append(lg, _commit("my-group", "t", 0, 10), _group_record("my-group", 1), _commit(own, "t", 0, 3))
        groups, offsets, skipped = _read_partitions([lg], N, adopt_misplaced=False)
    finally:
        lg.close()
    assert {k: v.offset for k, v in offsets.items()} == {(own, "t", 0): 3}
    assert groups == {}
    assert skipped == {"my-group"}


# ------------------------------------------------------------------------------------------- a real upgrade


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.error is None and tp.offset >= 0}


def test_upgrade_keeps_offsets_committed_at_the_old_placement(broker_factory: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    group, topic = "my-group", "placement"
    b = broker_factory()  # offsets.topic.num.partitions = 50, Kafka's default
    create_topic(b.bootstrap, topic, 2)
    produce_values(b.bootstrap, topic, [f"v{i}" for i in range(40)], 2)
    # another group's commit makes the broker create __consumer_offsets (its 50 partitions, compacted)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "test-group", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()
    assert b.stop() == 0

    # what tidelog wrote before the fix: my-group's commits in __consumer_offsets-36, not Kafka's 12
    old = legacy_partition_for(group, N)
    assert (old, partition_for(group, N)) == (36, 12)
    lg = PartitionLog.open(b.data_dir / f"{OFFSETS_TOPIC}-{old}", LogConfig(cleanup_policy=("compact",)))
    try:
        _append(lg, _commit(group, topic, 0, 7), _commit(group, topic, 1, 9))
        lg.flush()
    finally:
        lg.close()

    b.start()
    assert _committed(b.bootstrap, group, topic, 2) == {0: 7, 1: 9}
    assert "groups read from misplaced __consumer_offsets records" in b.log_text()
    # a commit after the upgrade (to the group's own partition) wins over the old one, across a restart
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
        assert {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                                               timeout=30)} == {0: 20, 1: 9}
    finally:
        c.close()
    b.restart()
    assert _committed(b.bootstrap, group, topic, 2) == {0: 20, 1: 9}
    own = b.data_dir / f"{OFFSETS_TOPIC}-{partition_for(group, N)}"
    assert any(f.stat().st_size > 0 for f in own.glob("*.log")), "the new commit is not in the group's partition"
