"""Issue 27 item 6: ``tidelog groups`` shows a KIP-848 (``consumer`` type) group as Kafka 4's
``kafka-consumer-groups.sh`` does, against a real broker with confluent-kafka members of ``group.protocol=consumer``.

The expected layouts are written here from Kafka 4's ConsumerGroupCommand format strings (printStates with
``--verbose``: ``%-Gs %-Cs %-20s %-20s %-15s %-25s %s``; printMembers with ``--verbose``: ``%-Gs %-Ms %-Hs %-Ls %-15s ``
then ``%-15s %-As %-15s %-Ts``; ``--list --type --state``: ``%-Ns %-20s %-20s``), independently of tidelog's table
code; the values are checked against what the members themselves report (member ids, assignments)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import new_topic, wait_for

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))
PARTITIONS = 3
PER_PARTITION = 4

# the broker's KIP-848 timing lowered (with their minimums), so a second member's join reconciles within ~1 s
FAST = {"group.consumer.min.session.timeout.ms": "2000", "group.consumer.session.timeout.ms": "4000",
        "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "250",
        "group.initial.rebalance.delay.ms": "0"}


def java_printf(fmt: str, *values: object) -> str:
    return fmt % tuple(str(v) for v in values)


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    return broker_factory(FAST)


def tl(b: Any, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([TIDELOG, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TIDELOG_BOOTSTRAP=b.bootstrap))
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def as_json(b: Any, *args: str) -> Any:
    out = tl(b, *args, "--output", "json").stdout
    assert len(out.splitlines()) == 1, out
    return json.loads(out)


class Group:
    def __init__(self, topic: str, group: str, members: list[Any]) -> None:
        self.topic, self.group, self.members = topic, group, members


def _poll_all(members: list[Any], seconds: float = 0.2) -> int:
    got = 0
    for c in members:
        m = c.poll(seconds)
        if m is not None and m.error() is None:
            got += 1
    return got


@pytest.fixture(scope="module")
def kip(b: Any) -> Iterator[Group]:
    """Two consumer-protocol members of one group over a 3-partition topic, every record consumed and committed;
    a classic (offsets only) group beside it."""
    topic, group = new_topic("kip"), new_topic("kipg")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(topic, value=b"v%d" % i, partition=part)
    assert p.flush(30) == 0
    members = [Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "client.id": f"kip-c{i}", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
               for i in range(2)]
    try:
        for c in members:
            c.subscribe([topic])
        consumed = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            consumed += _poll_all(members)
            sets = [{tp.partition for tp in c.assignment()} for c in members]
            if consumed >= PARTITIONS * PER_PARTITION and all(sets) and set().union(*sets) == set(range(PARTITIONS)) \
                    and not sets[0] & sets[1]:
                break
        assert consumed == PARTITIONS * PER_PARTITION, consumed
        for c in members:
            c.commit(asynchronous=False)
        g = Group(topic, group, members)

        def settled() -> bool:  # every member holds its target assignment: the group is Stable
            _poll_all(members, 0.05)
            state = as_json(b, "groups", "describe", group, "--state")
            return bool(state[0]["STATE"] == "Stable")

        wait_for(settled, 30, "a Stable consumer group")
        classic = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"{group}-classic",
                            "enable.auto.commit": False})
        try:
            classic.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            classic.close()
        yield g
    finally:
        for c in members:
            c.close()


def test_state_view_is_kafka4_layout(b: Any, kip: Group) -> None:
    (state,) = as_json(b, "groups", "describe", kip.group, "--state", "--verbose")
    coordinator = f"127.0.0.1:{b.port}  (0)"
    epoch = state["GROUP-EPOCH"]
    assert state == {"GROUP": kip.group, "COORDINATOR (ID)": coordinator, "ASSIGNMENT-STRATEGY": "uniform",
                     "STATE": "Stable", "GROUP-EPOCH": epoch, "TARGET-ASSIGNMENT-EPOCH": epoch, "#MEMBERS": 2}
    assert epoch >= 2  # two members joined: two bumps at least

    r = tl(b, "groups", "describe", kip.group, "--state", "--verbose")
    fmt = f"%-{max(15, len(kip.group))}s %-{max(25, len(coordinator))}s %-20s %-20s %-15s %-25s %s"
    assert r.stdout == ("\n" + java_printf(fmt, "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                           "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS")
                        + "\n" + java_printf(fmt, kip.group, coordinator, "uniform", "Stable", epoch, epoch, 2) + "\n")
    assert r.stderr == ""

    r = tl(b, "groups", "describe", kip.group, "--state")  # without --verbose: no epochs, as Kafka
    fmt = f"%-{max(15, len(kip.group))}s %-{max(25, len(coordinator))}s %-20s %-20s %s"
    assert r.stdout == ("\n" + java_printf(fmt, "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                           "#MEMBERS")
                        + "\n" + java_printf(fmt, kip.group, coordinator, "uniform", "Stable", 2) + "\n")


def test_members_view_has_epochs_and_target_assignments(b: Any, kip: Group) -> None:
    rows = as_json(b, "groups", "describe", kip.group, "--members", "--verbose")
    (state,) = as_json(b, "groups", "describe", kip.group, "--state", "--verbose")
    epoch = state["TARGET-ASSIGNMENT-EPOCH"]
    expected = []
    for i, c in enumerate(kip.members):
        parts = sorted(tp.partition for tp in c.assignment())
        text = f"{kip.topic}:{','.join(map(str, parts))}"
        expected.append({"GROUP": kip.group, "CONSUMER-ID": c.memberid(), "HOST": "/127.0.0.1",
                         "CLIENT-ID": f"kip-c{i}", "#PARTITIONS": len(parts),
                         "CURRENT-EPOCH": epoch, "CURRENT-ASSIGNMENT": text, "TARGET-EPOCH": epoch,
                         "TARGET-ASSIGNMENT": text})
    assert sorted(rows, key=lambda r: r["CONSUMER-ID"]) == sorted(expected, key=lambda r: r["CONSUMER-ID"])

    r = tl(b, "groups", "describe", kip.group, "--members", "--verbose")
    ordered = sorted(rows, key=lambda r: r["CONSUMER-ID"])
    m = max(15, *(len(x["CONSUMER-ID"]) for x in ordered))
    a = max(20, *(len(x["CURRENT-ASSIGNMENT"]) for x in ordered))
    t = max(20, *(len(x["TARGET-ASSIGNMENT"]) for x in ordered))
    fmt = f"%-{max(15, len(kip.group))}s %-{m}s %-15s %-15s %-15s %-15s %-{a}s %-15s %-{t}s"
    keys = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
            "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    lines = [java_printf(fmt, *keys).rstrip()] + [java_printf(fmt, *(x[k] for k in keys)).rstrip() for x in ordered]
    assert r.stdout == "\n" + "\n".join(lines) + "\n"

    plain = as_json(b, "groups", "describe", kip.group, "--members")  # without --verbose: Kafka's five columns
    assert [sorted(x) for x in plain] == [sorted(keys[:5])] * 2


def test_offsets_view_names_the_owners(b: Any, kip: Group) -> None:
    rows = as_json(b, "groups", "describe", kip.group)
    owner = {tp.partition: c for c in kip.members for tp in c.assignment()}
    assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"],
             r["CLIENT-ID"]) for r in rows] == [
        (kip.topic, p, PER_PARTITION, PER_PARTITION, 0, owner[p].memberid(), f"kip-c{kip.members.index(owner[p])}")
        for p in range(PARTITIONS)]


def test_list_type_filters_as_kafka(b: Any, kip: Group) -> None:
    listed = as_json(b, "groups", "list", "--type")
    assert {"GROUP": kip.group, "TYPE": "Consumer", "STATE": "Stable"} in listed
    assert {"GROUP": f"{kip.group}-classic", "TYPE": "Classic", "STATE": "Empty"} in listed
    assert [g["GROUP"] for g in as_json(b, "groups", "list", "--type", "consumer")] == [kip.group]
    assert kip.group not in [g["GROUP"] for g in as_json(b, "groups", "list", "--type", "Classic")]

    r = tl(b, "groups", "list", "--type", "consumer")
    fmt = f"%-{max(15, len(kip.group)) + 10}s %-20s %-20s"
    assert r.stdout == (java_printf(fmt, "GROUP", "TYPE", "STATE").rstrip() + "\n"
                        + java_printf(fmt, kip.group, "Consumer", "Stable").rstrip() + "\n")
    bad = tl(b, "groups", "list", "--type", "share", code=2)
    assert "Invalid types list 'share'. Valid types are: classic, consumer" in bad.stderr
    # the default list is unchanged: GROUP STATE TYPE, consumer (with a protocol) or simple (offsets only)
    default = as_json(b, "groups", "list")
    assert {"GROUP": f"{kip.group}-classic", "STATE": "Empty", "TYPE": "simple"} in default
