"""Consumer groups with real clients against ``tidelog serve``: partitions shared exclusively, failover after a
member dies without LeaveGroup (session timeout), every message consumed at least once."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import FAST_GROUPS, MemberProcess, create_topic, exclusive_cover, produce_values, wait_until

PARTITIONS = 6


@pytest.fixture(scope="module")
def fast_broker(broker_factory: Any) -> Any:
    return broker_factory(FAST_GROUPS)


def _run_failover(bootstrap: str, clients: list[str], topic: str, group: str, strategy: str = "range") -> None:
    create_topic(bootstrap, topic, PARTITIONS)
    first = [f"a{i}" for i in range(60)]
    produce_values(bootstrap, topic, first, PARTITIONS)
    members = [MemberProcess(c, bootstrap, group, topic, strategy=strategy, session_ms=3000) for c in clients]
    try:
        wait_until(lambda: exclusive_cover(members, PARTITIONS) and all(m.assigned for m in members), 40,
                   "3 members sharing 6 partitions")
        wait_until(lambda: set(first) <= {v for m in members for v in m.values()}, 30, "first batch consumed")
        victim = members[0]
        victim_parts = victim.assigned
        victim.kill()  # no LeaveGroup: the coordinator notices after the session timeout
        survivors = members[1:]
        covered = wait_until(lambda: exclusive_cover(survivors, PARTITIONS), 40, "survivors own all partitions")
        assert covered
        assert any(p in s.assigned for s in survivors for p in victim_parts)
        second = [f"b{i}" for i in range(60)]
        produce_values(bootstrap, topic, second, PARTITIONS)
        wait_until(lambda: set(second) <= {v for m in survivors for v in m.values()}, 30, "second batch consumed")
        seen = [v for m in members for v in m.values()]
        assert set(first + second) <= set(seen), "a message was skipped"
        # each partition had one owner at a time: values of the first batch consumed more than once can only be
        # the victim's uncommitted tail (at-least-once), never a concurrent double assignment
        dupes = {v for v in seen if seen.count(v) > 1}
        assert not dupes - {v for v in victim.values()}
    finally:
        for m in members:
            m.kill()


def test_confluent_three_members_failover(fast_broker: Any) -> None:
    _run_failover(fast_broker.bootstrap, ["confluent"] * 3, "grp-confluent", "g-confluent")


def test_kafka_python_three_members_failover(fast_broker: Any) -> None:
    _run_failover(fast_broker.bootstrap, ["kafka-python"] * 3, "grp-kp", "g-kp")


def test_aiokafka_three_members_failover(fast_broker: Any) -> None:
    _run_failover(fast_broker.bootstrap, ["aiokafka"] * 3, "grp-aio", "g-aio")


def test_mixed_group_roundrobin(fast_broker: Any) -> None:
    # the classic "consumer" protocol is shared: one group of three different clients agreeing on roundrobin
    _run_failover(fast_broker.bootstrap, ["confluent", "kafka-python", "aiokafka"], "grp-mixed", "g-mixed",
                  strategy="roundrobin")


def test_confluent_cooperative_sticky(fast_broker: Any) -> None:
    _run_failover(fast_broker.bootstrap, ["confluent"] * 3, "grp-coop", "g-coop", strategy="cooperative-sticky")
