"""Committed offsets and groups survive broker restarts (clean and kill -9); delivery semantics under a crash
between processing and commit (at-least-once: duplicates, no gaps; at-most-once: gaps, no duplicates)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import FAST_GROUPS, MemberProcess, create_topic, produce_values, wait_until

PARTITIONS = 3


def _commit_as_member(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Join ``group`` (subscribe), then commit ``offsets`` synchronously and leave."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 3000})
    c.subscribe([topic])
    try:
        wait_until(lambda: len(c.assignment()) == PARTITIONS, 30, "assignment", step=lambda: c.poll(0.1))
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def _first_offsets_confluent(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 3000})
    c.subscribe([topic])
    first: dict[int, int] = {}

    def step() -> None:
        m = c.poll(0.1)
        if m is not None and not m.error():
            first.setdefault(m.partition(), m.offset())

    try:
        wait_until(lambda: len(first) == PARTITIONS, 30, "a record from every partition", step=step)
    finally:
        c.close()
    return first


def _first_offsets_kafka_python(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=3000, heartbeat_interval_ms=300)
    first: dict[int, int] = {}

    def step() -> None:
        for _tp, msgs in c.poll(timeout_ms=100).items():
            for m in msgs:
                first.setdefault(m.partition, m.offset)

    try:
        wait_until(lambda: len(first) == PARTITIONS, 30, "a record from every partition", step=step)
    finally:
        c.close()
    return first


def _groups(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until the result arrives
    res = admin.list_consumer_groups().result(30)
    assert not res.errors, res.errors
    return {g.group_id for g in res.valid}


@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_restart_resumes_at_committed_offsets(broker_factory: Any, how: str) -> None:
    b = broker_factory(FAST_GROUPS)
    topic, group = f"resume-{how}", f"g-resume-{how}"
    create_topic(b.bootstrap, topic, PARTITIONS)
    produce_values(b.bootstrap, topic, [f"v{i}" for i in range(90)], PARTITIONS)  # 30 per partition
    committed = {0: 7, 1: 13, 2: 29}
    _commit_as_member(b.bootstrap, group, topic, committed)
    if how == "clean":
        b.stop()
    else:
        b.kill()
    b.start()
    assert group in _groups(b.bootstrap), "the group was lost"
    assert _first_offsets_confluent(b.bootstrap, group, topic) == committed
    # a second commit, a second restart, resumed by another client
    committed2 = {0: 20, 1: 21, 2: 22}
    _commit_as_member(b.bootstrap, group, topic, committed2)
    b.kill()
    b.start()
    assert _first_offsets_kafka_python(b.bootstrap, group, topic) == committed2


def _run_crash(bootstrap: str, mode: str) -> tuple[list[str], list[str]]:
    topic, group = f"sem-{mode}", f"g-sem-{mode}"
    create_topic(bootstrap, topic, PARTITIONS)
    values = [f"m{i}" for i in range(30)]
    produce_values(bootstrap, topic, values, PARTITIONS)
    crasher = MemberProcess("confluent", bootstrap, group, topic, mode=mode, crash_after=10, session_ms=3000)
    try:
        wait_until(crasher.exited, 30, "the member to crash")
        crashed_seen = crasher.values()
        resumer = MemberProcess("confluent", bootstrap, group, topic, mode=mode, session_ms=3000)
        try:
            # at-most-once loses the crashed record: everything else must arrive
            target = len(values) - (1 if mode == "at-most-once" else 0)
            wait_until(lambda: len(set(crashed_seen + resumer.values())) >= target, 40, "the rest consumed")
        finally:
            resumer.kill()
        return values, crashed_seen + resumer.values()
    finally:
        crasher.kill()


def test_at_least_once_crash_between_processing_and_commit(broker_factory: Any) -> None:
    b = broker_factory(FAST_GROUPS)
    values, seen = _run_crash(b.bootstrap, "at-least-once")
    gaps = set(values) - set(seen)
    duplicates = len(seen) - len(set(seen))
    assert not gaps, f"at-least-once lost {sorted(gaps)}"
    assert duplicates == 1, f"expected exactly the crashed record twice, got {duplicates} duplicates"


def test_at_most_once_crash_between_commit_and_processing(broker_factory: Any) -> None:
    b = broker_factory(FAST_GROUPS)
    values, seen = _run_crash(b.bootstrap, "at-most-once")
    gaps = set(values) - set(seen)
    duplicates = len(seen) - len(set(seen))
    assert duplicates == 0, "at-most-once processed a record twice"
    assert len(gaps) == 1, f"expected exactly the crashed record lost, got {sorted(gaps)}"
