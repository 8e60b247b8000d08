"""A classic group upgraded online to the consumer protocol while its members consume, and back
(``group.consumer.migration.policy`` = bidirectional, Kafka 4's default), with confluent-kafka consumers.

Three classic members (``group.protocol=classic``, range: eager) share six partitions. One by one each is restarted
with ``group.protocol=consumer``: the first restart's heartbeat upgrades the group, the classic members still in it
become members using the classic protocol (they keep consuming and rejoin when told), until every member uses the
consumer protocol. Then one by one each is restarted with ``group.protocol=classic`` again: classic members join
the consumer group, and when the last consumer-protocol member leaves the group becomes a classic group again.
A batch of records is produced at each step and must be consumed before the next.

The whole-history ledger (every record processed, every commit) shows: no record lost; a record processed twice
only when its commit was refused by a rebalance (``commit_failed``: at-least-once's allowance — processed, not
committed, read again by the partition's next owner); the committed offsets at the end equal the log end offsets
(offsets kept through both conversions). ListGroups and DescribeGroups/ConsumerGroupDescribe (through the
AdminClient, which asks ConsumerGroupDescribe and falls back to DescribeGroups) give the group type at each step.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import MemberProcess, create_topic, exclusive_cover, produce_values, wait_until

PARTITIONS = 6
PER_BATCH = 36

CONFIG = {
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "4000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "250",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def migration_broker(broker_factory: Any) -> Any:
    return broker_factory(CONFIG)


def _member(bootstrap: str, group: str, topic: str, protocol: str, strategy: str = "range") -> MemberProcess:
    if protocol == "consumer":
        return MemberProcess("confluent", bootstrap, group, topic, protocol="consumer", graceful=True)
    return MemberProcess("confluent", bootstrap, group, topic, strategy=strategy, graceful=True,
                         survive_commit_errors=True)


def _group_type(bootstrap: str, group: str) -> tuple[str, str]:
    """(ListGroups type, DescribeConsumerGroups type) as the AdminClient reports them."""
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap})
    listed = a.list_consumer_groups(request_timeout=20).result(30)
    rows = [g for g in listed.valid if g.group_id == group]
    described = a.describe_consumer_groups([group], request_timeout=20)[group].result(30)
    listed_type = rows[0].type.name.lower() if rows and rows[0].type is not None else "missing"
    return listed_type, described.type.name.lower()


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    res = a.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


@pytest.mark.parametrize(("strategy", "restart"), [("range", "close"), ("cooperative-sticky", "close"),
                                                   ("range", "kill")])
def test_classic_group_upgraded_online_and_back(migration_broker: Any, strategy: str, restart: str) -> None:
    """``range``: eager classic members (revoke everything, rejoin); ``cooperative-sticky``: incremental ones (they
    list their owned partitions in their JoinGroup and give up only the revoked ones). ``close``: a member restarts
    after closing its consumer (LeaveGroup / leave heartbeat); ``kill``: after a SIGKILL (the broker removes it when
    its session expires: the last consumer-protocol member's expiry is what downgrades the group) — a record it
    processed and had not committed is read again by the partition's next owner."""
    bootstrap = migration_broker.bootstrap
    topic, group = f"migr-life-{strategy}-{restart}", f"g-migr-life-{strategy}-{restart}"
    killed: list[MemberProcess] = []
    create_topic(bootstrap, topic, PARTITIONS)
    produced: list[str] = []
    everyone: list[MemberProcess] = []

    def consumed() -> set[str]:
        return {v for m in everyone for v in m.values()}

    def step(tag: str, live: list[MemberProcess]) -> None:
        values = [f"{tag}-{i}" for i in range(PER_BATCH)]
        produce_values(bootstrap, topic, values, PARTITIONS)
        produced.extend(values)
        try:
            wait_until(lambda: exclusive_cover(live, PARTITIONS) and all(len(m.assigned) == 2 for m in live)
                       and set(produced) <= consumed(), 45,
                       f"step {tag}: two partitions per live member, each owned once, everything consumed")
        except AssertionError:
            print("\n".join(line for line in migration_broker.log_text().splitlines() if "group" in line)[-6000:])
            raise

    types: list[tuple[str, tuple[str, str]]] = []
    try:
        live = [_member(bootstrap, group, topic, "classic", strategy) for _ in range(3)]
        everyone += live
        step("classic", live)
        types.append(("3 classic", _group_type(bootstrap, group)))
        def stop(old: MemberProcess) -> None:
            if restart == "kill":
                old.kill()
                killed.append(old)
            else:
                old.stop()

        for i in range(3):  # upgrade: restart each member with group.protocol=consumer
            old = live.pop(0)
            stop(old)
            new = _member(bootstrap, group, topic, "consumer")
            live.append(new)
            everyone.append(new)
            step(f"up{i}", live)
            types.append((f"{i + 1} consumer", _group_type(bootstrap, group)))
        for i in range(3):  # and back: restart each with group.protocol=classic
            old = live.pop(0)
            stop(old)
            new = _member(bootstrap, group, topic, "classic", strategy)
            live.append(new)
            everyone.append(new)
            step(f"down{i}", live)
            types.append((f"{i + 1} classic again", _group_type(bootstrap, group)))
        assert types == [
            ("3 classic", ("classic", "classic")),
            ("1 consumer", ("consumer", "consumer")),  # upgraded by the first consumer-protocol heartbeat
            ("2 consumer", ("consumer", "consumer")),
            ("3 consumer", ("consumer", "consumer")),
            ("1 classic again", ("consumer", "consumer")),  # classic members inside the consumer group
            ("2 classic again", ("consumer", "consumer")),
            ("3 classic again", ("classic", "classic")),  # the last consumer-protocol member left: downgraded
        ], types
        # the ledger: nothing lost; twice only where a commit was refused (processed, not committed)
        seen: dict[str, int] = {}
        for m in everyone:
            for v in m.values():
                seen[v] = seen.get(v, 0) + 1
        assert set(produced) == set(seen)
        refused = {(ev["p"], ev["o"]) for m in everyone for ev in m.snapshot() if ev["event"] == "commit_failed"}
        refused_values = {ev["v"] for m in everyone for ev in m.snapshot()
                          if ev["event"] == "msg" and (ev["p"], ev["o"] + 1) in refused}
        # a killed member's last record per partition may be processed and not committed
        uncommitted: set[str] = set()
        for m in killed:
            last: dict[int, dict[str, Any]] = {}
            done: set[tuple[int, int]] = set()
            for ev in m.snapshot():
                if ev["event"] == "msg":
                    last[ev["p"]] = ev
                elif ev["event"] == "committed":
                    done.add((ev["p"], ev["o"]))
            uncommitted |= {ev["v"] for p, ev in last.items() if (p, ev["o"] + 1) not in done}
        dupes = {v for v, n in seen.items() if n > 1}
        allowed = refused_values | uncommitted
        assert dupes <= allowed, f"consumed twice without a refused commit or a crash: {sorted(dupes - allowed)}"
        # committed offsets kept through both conversions: every partition's end
        per_partition = [0] * PARTITIONS
        for i in range(len(produced)):
            per_partition[i % PER_BATCH % PARTITIONS] += 1
        wait_until(lambda: _committed(bootstrap, group, topic) == dict(enumerate(per_partition)), 20,
                   "committed offsets at the log end")
        print(f"migration ledger: {len(produced)} records, {len(dupes)} consumed twice, "
              f"{len(refused)} commits refused by rebalances")
    finally:
        for m in everyone:
            m.stop()
