"""Issue 27 (cg27): a KIP-848 group subscribed by regular expression (confluent-kafka, ``group.protocol=consumer``,
``subscribe(["^cg27-.*"])``) across a one-node broker restart: the group's ConsumerGroupRegularExpression record is
replayed with the rest, so the members resume with the same member epochs and assignment (no new group epoch, no
new assignment on the clients' side), every record is consumed once and committed, and a topic created later that
matches is picked up (a new resolution, a new group epoch)."""

from __future__ import annotations

from typing import Any

from .conftest import create_topic, produce_values, wait_until
from .test_consumer_protocol import FAST_CONSUMER_GROUPS, _describe
from .test_consumer_regex_records import regex_records

GROUP = "g-cg27-clients"
PATTERN = "^cg27-.*"
SENT = f"({PATTERN})"  # librdkafka sends its regex subscriptions joined as (re1)|(re2)...


class Member:
    """A confluent-kafka consumer of the regex, polled by the test's thread; what it read and was assigned."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "topic.metadata.refresh.interval.ms": 1000})
        self.c.subscribe([PATTERN])
        self.values: list[str] = []
        self.assignments: list[frozenset[tuple[str, int]]] = []

    def poll(self) -> None:
        m = self.c.poll(0.05)
        now = frozenset((tp.topic, tp.partition) for tp in self.c.assignment())
        if not self.assignments or self.assignments[-1] != now:
            self.assignments.append(now)
        if m is None or m.error():
            return
        self.values.append(m.value().decode())
        self.c.commit(message=m, asynchronous=False)

    @property
    def assigned(self) -> frozenset[tuple[str, int]]:
        return self.assignments[-1] if self.assignments else frozenset()


def _members_view(d: Any) -> dict[str, tuple[int, list[tuple[str, int]]]]:
    return {m.member_id: (m.epoch, sorted(m.assignment)) for m in d.members}


def test_regex_group_resumes_after_restart(broker_factory: Any) -> None:
    b = broker_factory(FAST_CONSUMER_GROUPS)
    for name, n in (("cg27-a", 2), ("cg27-b", 2), ("other-cg27", 1)):
        create_topic(b.bootstrap, name, n)
    first = [f"a{i}" for i in range(20)]
    produce_values(b.bootstrap, "cg27-a", first, 2)
    produce_values(b.bootstrap, "cg27-b", [f"b{i}" for i in range(20)], 2)
    produce_values(b.bootstrap, "other-cg27", ["not-matched"], 1)
    members = [Member(b.bootstrap), Member(b.bootstrap)]

    def step() -> None:
        for m in members:
            m.poll()

    def read() -> set[str]:
        return {v for m in members for v in m.values}

    try:
        matched = {("cg27-a", 0), ("cg27-a", 1), ("cg27-b", 0), ("cg27-b", 1)}
        wait_until(lambda: len(read()) == 40 and all(len(m.assigned) == 2 for m in members)
                   and members[0].assigned | members[1].assigned == matched, 20,
                   "both topics consumed, two partitions each", step)
        before = wait_until(lambda: (lambda d: d if d.state == "Stable" else None)(_describe(b.bootstrap, GROUP)),
                            10, "a stable group", step)
        recs = regex_records(b.data_dir, GROUP)
        assert recs and recs[-1][0] == SENT and recs[-1][1] is not None
        assert recs[-1][1]["topics"] == ["cg27-a", "cg27-b"]  # internal and unmatched topics left out
        assigned_before = [len(m.assignments) for m in members]
        b.restart()
        second = [f"a2-{i}" for i in range(20)]
        produce_values(b.bootstrap, "cg27-a", second, 2)
        wait_until(lambda: set(second) <= read(), 20, "records produced after the restart consumed", step)
        after = _describe(b.bootstrap, GROUP)
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert _members_view(after) == _members_view(before)  # same member ids, epochs and partitions
        assert [len(m.assignments) for m in members] == assigned_before  # the clients saw no reassignment
        values = [v for m in members for v in m.values]
        assert len(values) == len(set(values)) == 60 and "not-matched" not in values
        # a new topic matching the regex: resolved again, a new group epoch, its partition assigned
        create_topic(b.bootstrap, "cg27-c", 1)
        produce_values(b.bootstrap, "cg27-c", ["c0"], 1)
        wait_until(lambda: "c0" in read(), 15, "the new topic's record", step)
        assert _describe(b.bootstrap, GROUP).group_epoch > before.group_epoch
        regex, value = regex_records(b.data_dir, GROUP)[-1]
        assert regex == SENT and value is not None and value["topics"] == ["cg27-a", "cg27-b", "cg27-c"]
    finally:
        for m in members:
            m.c.close()
