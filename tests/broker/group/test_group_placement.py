"""Which ``__consumer_offsets`` partition holds a group: Kafka's ``Utils.abs(groupId.hashCode()) % n``.

tidelog used ``hashCode & 0x7fffffff`` before (the producer partitioner's ``Utils.toPositive``), which differs for
every negative hash; data directories written then hold those groups' records in another partition. On one node
the load keeps them for keys the group's own partition has no record of and moves them there once (appended to
the group's partition, tombstoned where found: Kafka's layout afterwards); when a single partition is loaded
(ZooKeeper mode) they are skipped. The last tests upgrade a data directory under a broker in this process and
under a real ``tidelog serve``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tidelog.broker.config import BrokerConfig
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
from tidelog.records.batch import build_batch, decode_batches
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog

from .conftest import create_topic, produce_values, wait_until

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
        groups, offsets, misplaced, migration, _ = _read_partitions(list(logs.values()), N, adopt_misplaced=True)
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
    # the move: the adopted keys' latest records (bytes as found) to the group's partition; a tombstone at the old
    # placement for every key whose latest record there is a value, adopted or not ("gone" is deleted there)
    assert migration.moves == {new: [_commit("my-group", "t", 0, 10), _commit("my-group", "t", 3, 14)]}
    assert sorted(migration.tombstones[old]) == sorted(
        [rec.encode_offset_key("my-group", "t", p) for p in range(4)] + [rec.encode_group_key("my-group")])
    assert set(migration.tombstones) == {old}
    assert migration.groups == {"my-group"}


def test_replay_after_a_move_cut_short_writes_only_the_tombstones(tmp_path: Path) -> None:
    # a crash after the records reached the group's partition, before the tombstones at the old placement
    old, new = legacy_partition_for("my-group", N), partition_for("my-group", N)
    logs = {p: _log(tmp_path, p) for p in (old, new)}
    try:
        _append(logs[old], _commit("my-group", "t", 0, 10), _group_record("my-group", 4))
        _append(logs[new], _commit("my-group", "t", 0, 10), _group_record("my-group", 4))
        groups, offsets, misplaced, migration, _ = _read_partitions(list(logs.values()), N, adopt_misplaced=True)
    finally:
        for lg in logs.values():
            lg.close()
    assert {k: v.offset for k, v in offsets.items()} == {("my-group", "t", 0): 10}
    assert groups["my-group"].generation == 4
    assert misplaced == set()  # nothing adopted: the group's partition has every key
    assert migration.moves == {}
    assert sorted(migration.tombstones[old]) == sorted([rec.encode_offset_key("my-group", "t", 0),
                                                        rec.encode_group_key("my-group")])


def test_replay_of_one_partition_skips_groups_it_does_not_coordinate(tmp_path: Path) -> None:
    old = legacy_partition_for("my-group", N)
    lg = _log(tmp_path, old)
    own = next(g for g in (f"g{i}" for i in range(10_000)) if partition_for(g, N) == old)
    try:
        _append(lg, _commit("my-group", "t", 0, 10), _group_record("my-group", 1), _commit(own, "t", 0, 3))
        groups, offsets, skipped, migration, _ = _read_partitions([lg], N, adopt_misplaced=False)
    finally:
        lg.close()
    assert {k: v.offset for k, v in offsets.items()} == {(own, "t", 0): 3}
    assert groups == {}
    assert skipped == {"my-group"}
    assert not migration  # another broker may lead the group's partition: nothing is moved in ZooKeeper mode


# ------------------------------------------------------------------------------------------- on disk


def _records(partition_dir: Path) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) of a ``__consumer_offsets`` partition's segments, in offset order."""
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        for _, header, records in decode_batches(seg.read_bytes()):
            if not header.is_control:
                out += [(bytes(r.key), None if r.value is None else bytes(r.value)) for r in records if r.key]
    return out


def _latest(partition_dir: Path) -> dict[bytes, bytes | None]:
    """Latest value (None: tombstone) per key bytes, as the cleaner keeps it."""
    return dict(_records(partition_dir))


def _compacted_away(data_dir: Path, into: Path) -> list[PartitionLog]:
    """The worst the cleaner can do to ``__consumer_offsets``: only each key's latest record kept, and every
    tombstone gone (past ``delete.retention.ms``). Written to fresh logs under ``into``."""
    logs = []
    for d in sorted(data_dir.glob(f"{OFFSETS_TOPIC}-*")):
        lg = _log(into, int(d.name.rsplit("-", 1)[1]))
        live = [(k, v) for k, v in _latest(d).items() if v is not None]
        if live:
            _append(lg, *live)
        logs.append(lg)
    return logs


def _in_process(data_dir: Path, scenario: Callable[[Any], Awaitable[None]]) -> None:
    """Start a Broker in this process on ``data_dir`` (free port, metrics off), wait for the group coordinator
    to report loaded, run ``scenario(coordinator)``, shut down."""
    from tidelog.broker.broker import Broker

    async def main() -> None:
        cfg = BrokerConfig.from_properties({"log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
                                            "tidelog.metrics.listener": "off"})
        broker = Broker(cfg)
        await broker.start()
        try:
            await asyncio.wait_for(broker.group_coordinator.loaded.wait(), 30)
            await scenario(broker.group_coordinator)
        finally:
            await broker.shutdown()

    asyncio.run(main())


def test_load_moves_misplaced_records_to_the_group_partition_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    group = "my-group"
    old, new = legacy_partition_for(group, N), partition_for(group, N)

    async def create(coord: Any) -> None:
        assert coord._create_topic(1) is not None  # __consumer_offsets, 50 partitions, compacted

    _in_process(data, create)
    before = {  # written before the upgrade at the old placement; after it, in the group's partition
        old: [_commit(group, "t", 0, 10), _commit(group, "t", 1, 11), _group_record(group, 4),
              _commit(group, "t", 2, 12), (rec.encode_offset_key(group, "t", 2), None)],
        new: [_commit(group, "t", 1, 100)],
    }
    for p, entries in before.items():
        lg = PartitionLog.open(data / f"{OFFSETS_TOPIC}-{p}", LogConfig(cleanup_policy=("compact",)))
        try:
            _append(lg, *entries)
            lg.flush()
        finally:
            lg.close()

    def offsets(coord: Any) -> dict[tuple[str, int], int]:
        err, got = coord.fetch_offsets(group, None)
        assert err == 0
        return {(t, p): ov.offset for t, p, ov, _ in got}

    seen: list[dict[tuple[str, int], int]] = []

    async def first(coord: Any) -> None:
        seen.append(offsets(coord))
        assert coord.groups[group].generation == 4

    with caplog.at_level(logging.INFO, logger="tidelog.broker.group"):
        _in_process(data, first)
    assert seen == [{("t", 0): 10, ("t", 1): 100}]
    moved = [r for r in caplog.records if r.getMessage().startswith("moved misplaced __consumer_offsets records")]
    assert len(moved) == 1
    assert moved[0].kv == {"groups": 1, "records": 2, "tombstones": 3, "complete": True,  # type: ignore[attr-defined]
                           "seconds": moved[0].kv["seconds"]}  # type: ignore[attr-defined]

    # Kafka's layout: the adopted records, same key and value bytes, in the group's partition; at the old
    # placement every key's latest record is a tombstone (t-2 was one already: nothing written for it)
    home = _latest(data / f"{OFFSETS_TOPIC}-{new}")
    assert home == {**dict(before[new]), **dict([before[old][0], before[old][2]])}
    at_old = _records(data / f"{OFFSETS_TOPIC}-{old}")
    assert at_old[len(before[old]):] == [(k, None) for k, _ in before[old][:3]]
    assert all(v is None for v in _latest(data / f"{OFFSETS_TOPIC}-{old}").values())

    # a second start finds nothing to move; then a deletion after the migration
    caplog.clear()

    async def second(coord: Any) -> None:
        seen.append(offsets(coord))
        err, results = await coord.delete_offsets(group, [("t", 0)])
        assert (err, results) == (0, {("t", 0): 0})

    with caplog.at_level(logging.INFO, logger="tidelog.broker.group"):
        _in_process(data, second)
    assert seen[1] == seen[0]
    assert not [r for r in caplog.records if "misplaced" in r.getMessage()]

    async def third(coord: Any) -> None:
        seen.append(offsets(coord))

    _in_process(data, third)
    assert seen[2] == {("t", 1): 100}
    # stays deleted however far compaction went: with every tombstone gone, nothing of t-0 is left anywhere
    logs = _compacted_away(data, tmp_path / "compacted")
    try:
        _, offs, misplaced, migration, _ = _read_partitions(logs, N, adopt_misplaced=True)
    finally:
        for lg in logs:
            lg.close()
    assert {k: v.offset for k, v in offs.items()} == {(group, "t", 1): 100}
    assert not misplaced and not migration


# ------------------------------------------------------------------------------------------- a real upgrade


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.error is None and tp.offset >= 0}


def _started_and_loaded(b: Any) -> str:
    """(Re)start ``b`` and wait until its group coordinator reported loaded; the log lines of this start."""
    mark = len(b.log_text())
    b.restart()
    wait_until(lambda: "group coordinator loaded" in b.log_text()[mark:], 30, "the group coordinator to load")
    return b.log_text()[mark:]


def test_upgrade_moves_offsets_committed_at_the_old_placement(broker_factory: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

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
    old, new = legacy_partition_for(group, N), partition_for(group, N)
    assert (old, new) == (36, 12)
    old_dir, new_dir = (b.data_dir / f"{OFFSETS_TOPIC}-{p}" for p in (old, new))
    written = [_commit(group, topic, 0, 7), _commit(group, topic, 1, 9)]
    lg = PartitionLog.open(old_dir, LogConfig(cleanup_policy=("compact",)))
    try:
        _append(lg, *written)
        lg.flush()
    finally:
        lg.close()

    started = _started_and_loaded(b)
    assert _committed(b.bootstrap, group, topic, 2) == {0: 7, 1: 9}
    assert started.count("moved misplaced __consumer_offsets records") == 1
    # on disk, Kafka's layout: the records (same bytes) in the group's partition, tombstones at the old placement
    home = _latest(new_dir)  # test-group is in __consumer_offsets-12 too
    assert {k: home.get(k) for k, _ in written} == dict(written)
    assert _latest(old_dir) == {k: None for k, _ in written}

    # a commit after the upgrade (to the group's own partition) wins, across a restart that moves nothing more
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
        assert {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                                               timeout=30)} == {0: 20, 1: 9}
    finally:
        c.close()
    started = _started_and_loaded(b)
    assert "misplaced" not in started
    assert _committed(b.bootstrap, group, topic, 2) == {0: 20, 1: 9}

    # a deletion after the migration stays deleted: the group's partition has its tombstones, and nothing at the
    # old placement holds a value the cleaner could leave behind once they are compacted away
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_consumer_groups([group])[group].result(30)
    assert _committed(b.bootstrap, group, topic, 2) == {}
    started = _started_and_loaded(b)
    assert "misplaced" not in started
    assert _committed(b.bootstrap, group, topic, 2) == {}
    home = _latest(new_dir)
    assert [home[k] for k, _ in written] == [None, None]
    assert all(v is None for v in _latest(old_dir).values())
