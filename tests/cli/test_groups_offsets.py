"""``tidelog groups``: the rest of kafka-consumer-groups' reset scenarios (--to-datetime, --by-duration,
--to-current, --all-topics, --from-file, --export), --delete-offsets and the --members / --state views, against
a real broker (issue 25, item 6)."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import new_topic, wait_for

from tidelog.cli.groups import groups

pytestmark = pytest.mark.integration


def _run(broker: Any, *args: str) -> Any:
    return CliRunner().invoke(groups, [*args, "--bootstrap-server", broker.bootstrap], catch_exceptions=False)


def _committed(broker: Any, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        c.close()


def _commit(broker: Any, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


@pytest.fixture(scope="module")
def timed_topic(broker: Any) -> tuple[str, int]:
    """5 records two hours old, then 5 of now; returns (topic, now in ms)."""
    topic = new_topic("reset")
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, partition=0, timestamp=now - 7_200_000 if i < 5 else now)
    assert p.flush(30) == 0
    return topic, now


def test_reset_to_datetime_and_by_duration(broker: Any, timed_topic: tuple[str, int]) -> None:
    topic, now = timed_topic
    group = new_topic("g")
    _commit(broker, group, topic, 10)
    hour_ago = datetime.datetime.fromtimestamp((now - 3_600_000) / 1000, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.000Z")
    for args in (["--to-datetime", hour_ago], ["--by-duration", "PT1H"]):
        r = _run(broker, "reset-offsets", group, "--topic", topic, *args, "--export")
        assert r.exit_code == 0, r.output
        assert r.output.strip() == f"{topic},0,5"  # the first record of the last hour
    r = _run(broker, "reset-offsets", group, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00.000",
             "--export")
    assert r.output.strip() == f"{topic},0,0"
    assert _committed(broker, group, topic) == 10  # dry runs change nothing
    r = _run(broker, "reset-offsets", group, "--topic", topic, "--by-duration", "PT1H", "--execute")
    assert r.exit_code == 0, r.output
    assert _committed(broker, group, topic) == 5


def test_export_from_file_current_and_all_topics(broker: Any, timed_topic: tuple[str, int], tmp_path: Path) -> None:
    topic, _ = timed_topic
    group = new_topic("g")
    _commit(broker, group, topic, 7)
    r = _run(broker, "reset-offsets", group, "--all-topics", "--to-current", "--export")
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"{topic},0,7"
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,3\n")
    r = _run(broker, "reset-offsets", group, "--from-file", str(plan), "--execute")
    assert r.exit_code == 0, r.output
    assert _committed(broker, group, topic) == 3
    plan.write_text(f"other-group,{topic},0,9\n{group},{topic},0,2\n")  # a file of several groups
    r = _run(broker, "reset-offsets", group, "--from-file", str(plan), "--execute")
    assert r.exit_code == 0, r.output
    assert _committed(broker, group, topic) == 2


@pytest.mark.parametrize("args, message", [
    (["--to-earliest", "--to-current"], "give exactly one of"),
    (["--to-datetime", "yesterday"], "--to-datetime 'yesterday': expected"),
    (["--by-duration", "1h"], "--by-duration '1h': expected an ISO-8601 duration"),
])
def test_reset_usage_errors(broker: Any, timed_topic: tuple[str, int], args: list[str], message: str) -> None:
    topic, _ = timed_topic
    r = CliRunner().invoke(groups, ["reset-offsets", "g", "--topic", topic, *args,
                                   "--bootstrap-server", broker.bootstrap])
    assert r.exit_code == 2
    assert message in r.stderr


def test_delete_offsets_and_views(broker: Any, timed_topic: tuple[str, int]) -> None:
    topic, _ = timed_topic
    group = new_topic("g")
    _commit(broker, group, topic, 4)
    r = _run(broker, "describe", group, "--state")
    assert r.exit_code == 0, r.output
    (state,) = [line.split() for line in r.output.splitlines() if line.startswith(f"{group} ")]
    assert state[-2:] == ["Empty", "0"]  # kafka-consumer-groups' STATE and #MEMBERS (no strategy when empty)
    r = _run(broker, "describe", group, "--members")
    assert f"Consumer group '{group}' has no active members." in r.output
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "viewer",
                  "enable.auto.commit": False})
    try:
        assigned: list[Any] = []
        c.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))
        wait_for(lambda: c.poll(0.2) is not None or assigned, what="the assignment")
        r = _run(broker, "describe", group, "--members", "--verbose")
        assert r.exit_code == 0, r.output
        line = next(x for x in r.output.splitlines() if "viewer" in x)
        assert line.split()[-2:] == ["1", f"{topic}(0)"]
        r = _run(broker, "delete-offsets", group, "--topic", topic)  # refused while subscribed
        assert r.exit_code == 1
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in r.output
    finally:
        c.close()
    wait_for(lambda: " Empty " in _run(broker, "describe", group, "--state").output, what="the group empty")
    r = _run(broker, "delete-offsets", group, "--topic", topic)
    assert r.exit_code == 0, r.output
    assert [topic, "0", "Successful"] in [line.split() for line in r.output.splitlines()]
    assert _committed(broker, group, topic) < 0  # no committed offset any more
