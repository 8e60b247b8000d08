"""KIP-848 consumer groups with confluent-kafka's ``group.protocol=consumer`` against ``tidelog serve``.

Three members share six partitions; one is SIGKILLed (no leave: its session times out on the broker), one leaves
(closes), one joins. A ledger of the whole history (every record processed and every commit, per member) shows
that every record was consumed, that a record was consumed twice only where a member died between processing
it and committing it, and that no partition was ever owned by two live members at once (revocation before
reassignment).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import MemberProcess, create_topic, exclusive_cover, produce_values, wait_until

PARTITIONS = 6

# the broker's KIP-848 timing, lowered (with their minimums) so a killed member is noticed within the test
FAST_CONSUMER_GROUPS = {
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "4000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "250",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def kip848_broker(broker_factory: Any) -> Any:
    return broker_factory(FAST_CONSUMER_GROUPS)


def _member(bootstrap: str, group: str, topic: str, **opts: Any) -> MemberProcess:
    return MemberProcess("confluent", bootstrap, group, topic, protocol="consumer", **opts)


def _check_ledger(members: list[MemberProcess], expected: list[str], crashed: set[MemberProcess]) -> None:
    """Every value consumed; a value consumed twice was processed (and not committed) by a member that crashed."""
    seen: dict[str, int] = {}
    for m in members:
        for v in m.values():
            seen[v] = seen.get(v, 0) + 1
    missing = set(expected) - set(seen)
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    crashed_values = {v for m in crashed for v in m.values()}
    dupes = {v for v, n in seen.items() if n > 1}
    assert not dupes - crashed_values, f"consumed twice without a crash: {sorted(dupes - crashed_values)[:5]}"
    # at most one record per partition of a crashed member can be processed and not committed (commit per record)
    assert len(dupes) <= PARTITIONS


def _committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    res = a.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def test_three_members_kill_leave_join(kip848_broker: Any) -> None:
    bootstrap = kip848_broker.bootstrap
    topic, group = "kip848-life", "g-kip848-life"
    create_topic(bootstrap, topic, PARTITIONS)
    batches = [[f"{tag}{i}" for i in range(60)] for tag in ("a", "b", "c", "d")]
    produce_values(bootstrap, topic, batches[0], PARTITIONS)
    members = [_member(bootstrap, group, topic) for _ in range(3)]
    everyone = list(members)
    try:
        wait_until(lambda: exclusive_cover(members, PARTITIONS) and all(len(m.assigned) == 2 for m in members), 60,
                   "3 members with 2 partitions each (uniform assignor)")
        wait_until(lambda: set(batches[0]) <= {v for m in everyone for v in m.values()}, 30, "batch a consumed")

        victim = members.pop(0)
        victim.kill()  # SIGKILL: no leave heartbeat; the broker removes it after the session timeout
        wait_until(lambda: exclusive_cover(members, PARTITIONS) and all(len(m.assigned) == 3 for m in members), 60,
                   "the 2 survivors own the 6 partitions")
        produce_values(bootstrap, topic, batches[1], PARTITIONS)
        wait_until(lambda: set(batches[1]) <= {v for m in everyone for v in m.values()}, 30, "batch b consumed")

        leaver = members.pop(0)
        leaver.stop()  # SIGTERM: close() sends the leave heartbeat (epoch -1)
        wait_until(lambda: exclusive_cover(members, PARTITIONS), 60, "the last member owns everything")
        produce_values(bootstrap, topic, batches[2], PARTITIONS)
        wait_until(lambda: set(batches[2]) <= {v for m in everyone for v in m.values()}, 30, "batch c consumed")

        joiner = _member(bootstrap, group, topic)
        members.append(joiner)
        everyone.append(joiner)
        wait_until(lambda: exclusive_cover(members, PARTITIONS) and all(len(m.assigned) == 3 for m in members), 60,
                   "the joiner gets half the partitions")
        produce_values(bootstrap, topic, batches[3], PARTITIONS)
        wait_until(lambda: set(batches[3]) <= {v for m in everyone for v in m.values()}, 30, "batch d consumed")

        expected = [v for b in batches for v in b]
        _check_ledger(everyone, expected, {victim})
        # the committed offsets are the ends of the partitions: nothing left to consume
        committed = wait_until(lambda: (lambda c: c if all(c.get(p) == 40 for p in range(PARTITIONS)) else None)(
            _committed_offsets(bootstrap, group, topic)), 30, "committed offsets at the log ends")
        assert committed
    finally:
        for m in everyone:
            m.kill()


def test_group_describe_and_list(kip848_broker: Any) -> None:
    """The Admin client sees a consumer-protocol group: ListGroups v5 type, ConsumerGroupDescribe members."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    bootstrap = kip848_broker.bootstrap
    topic, group = "kip848-describe", "g-kip848-describe"
    create_topic(bootstrap, topic, 4)
    m = _member(bootstrap, group, topic)
    try:
        wait_until(lambda: len(m.assigned) == 4, 60, "the member owns the 4 partitions")
        a = AdminClient({"bootstrap.servers": bootstrap})
        listed = a.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
        assert group in {g.group_id for g in listed.valid}
        assert all(g.type == ConsumerGroupType.CONSUMER for g in listed.valid)
        classic = a.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(30)
        assert group not in {g.group_id for g in classic.valid}
        desc = a.describe_consumer_groups([group])[group].result(30)
        assert desc.type == ConsumerGroupType.CONSUMER
        assert len(desc.members) == 1
        assert sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions) == [0, 1, 2, 3]
    finally:
        m.kill()


def _describe(bootstrap: str, group: str) -> Any:
    import asyncio

    from tidelog.cli.group_kip848 import describe_consumer_group

    g, err = asyncio.run(describe_consumer_group(bootstrap, group, 10))
    assert g is not None, err
    return g


def test_members_keep_epochs_across_broker_restart(broker_factory: Any) -> None:
    """Members, epochs and assignments are written to ``__consumer_offsets`` as Kafka's ConsumerGroup* records and
    replayed at load (docs/decisions/0062): after a one-node restart the members' heartbeats are accepted with
    their member ids and epochs, no partition moves, no commit is refused and no record is read twice."""
    b = broker_factory(FAST_CONSUMER_GROUPS)
    topic, group = "kip848-restart", "g-kip848-restart"
    create_topic(b.bootstrap, topic, PARTITIONS)
    first = [f"r{i}" for i in range(60)]
    produce_values(b.bootstrap, topic, first, PARTITIONS)
    members = [_member(b.bootstrap, group, topic) for _ in range(2)]
    try:
        wait_until(lambda: set(first) <= {v for m in members for v in m.values()}, 60, "first batch consumed")
        wait_until(lambda: exclusive_cover(members, PARTITIONS) and all(len(m.assigned) == 3 for m in members), 60,
                   "the members share the partitions")
        before = wait_until(lambda: (lambda g: g if g.state == "Stable" else None)(_describe(b.bootstrap, group)),
                            30, "a stable group")
        assignments_before = [sum(ev["event"] == "assigned" for ev in m.snapshot()) for m in members]
        b.restart()
        second = [f"s{i}" for i in range(60)]
        produce_values(b.bootstrap, topic, second, PARTITIONS)
        wait_until(lambda: set(second) <= {v for m in members for v in m.values()}, 90,
                   "second batch consumed after the restart")
        after = _describe(b.bootstrap, group)
        assert after.group_epoch == before.group_epoch
        assert after.assignment_epoch == before.assignment_epoch
        assert {m.member_id: (m.epoch, sorted(m.assignment)) for m in after.members} == \
            {m.member_id: (m.epoch, sorted(m.assignment)) for m in before.members}
        # no rebalance on the clients' side: no new assignment, no refused commit, nothing read twice
        assert [sum(ev["event"] == "assigned" for ev in m.snapshot()) for m in members] == assignments_before
        assert not [ev for m in members for ev in m.snapshot() if ev["event"] == "commit_failed"]
        values = [v for m in members for v in m.values()]
        assert len(values) == len(set(values)) == 120
        assert all(not m.exited() for m in members)
        _check_dump_log(b.data_dir, group, {m.member_id: m.epoch for m in after.members})
    finally:
        for m in members:
            m.kill()


def _check_dump_log(data_dir: Any, group: str, epochs: dict[str, int]) -> None:
    """``tidelog dump-log --offsets-decoder`` shows the group's ConsumerGroup* records (types 3-8) as Kafka's
    DumpLogSegments does; the last current-assignment record of each member carries its epoch."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from tidelog.broker.group.records import partition_for
    from tidelog.cli.dump_log import dump_log

    part = Path(data_dir) / f"__consumer_offsets-{partition_for(group, 3)}"
    files = sorted(str(f) for f in part.glob("*.log"))
    res = CliRunner().invoke(dump_log, ["--files", *files, "--offsets-decoder"])
    assert res.exit_code == 0, res.output
    types: set[str] = set()
    last: dict[str, int] = {}
    for line in res.output.splitlines():
        if " key: {" not in line or " payload: " not in line:
            continue
        key_text, payload_text = line.split(" key: ", 1)[1].split(" payload: ", 1)
        key = json.loads(key_text)
        if key["data"].get("groupId") != group:
            continue
        types.add(key["type"])
        if key["type"] == "8" and payload_text != "<DELETE>":
            last[key["data"]["memberId"]] = json.loads(payload_text)["data"]["memberEpoch"]
    assert {"3", "5", "6", "7", "8"} <= types
    assert last == epochs


def test_send_offsets_to_transaction(kip848_broker: Any) -> None:
    """Consume-transform-produce with a consumer-protocol member: TxnOffsetCommit carries the member id and member
    epoch (``consumer_group_metadata()``), validated as Kafka's ConsumerGroup does; committed with the
    transaction."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = kip848_broker.bootstrap
    topic, group = "kip848-txn", "g-kip848-txn"
    create_topic(bootstrap, topic, 2)
    produce_values(bootstrap, topic, [f"t{i}" for i in range(10)], 2)
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-kip848"})
    tp.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        assert seen == 10
        positions = consumer.position([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert {p.partition: p.offset for p in positions} == {0: 5, 1: 5}
        tp.begin_transaction()
        tp.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        tp.commit_transaction(30)
        got = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
        assert {p.partition: p.offset for p in got} == {0: 5, 1: 5}
    finally:
        consumer.close()
