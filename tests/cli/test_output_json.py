"""``--output json`` on the describe/list commands (issue 25, item 7): each table one JSON array of objects keyed
by the column names, numbers as numbers, against a real broker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from helpers import confluent_produce, new_topic

from tidelog.cli.main import cli

pytestmark = pytest.mark.integration


def _json_lines(broker: Any, *args: str) -> list[Any]:
    r = CliRunner().invoke(cli, [*args, "--output", "json", "--bootstrap-server", broker.bootstrap],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_topics_and_groups_as_json(broker: Any) -> None:
    topic, group = new_topic("js"), new_topic("js-g")
    confluent_produce(broker.bootstrap, topic, [{"value": b"v"}] * 4)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()
    (names,) = _json_lines(broker, "topics", "list")
    assert topic in names and all(not n.startswith("__") for n in names)
    (parts,) = _json_lines(broker, "topics", "describe", topic)
    assert parts == [{"topic": topic, "partition": 0, "leader": 0, "replicas": "0", "isr": "0",
                      "log_start_offset": 0, "log_end_offset": 4}]
    (offsets,) = _json_lines(broker, "groups", "describe", group)
    assert [(o["TOPIC"], o["PARTITION"], o["CURRENT-OFFSET"], o["LOG-END-OFFSET"], o["LAG"]) for o in offsets] == [
        (topic, 0, 1, 4, 3)]
    (state,) = _json_lines(broker, "groups", "describe", group, "--state")
    assert state[0]["STATE"] == "Empty" and state[0]["#MEMBERS"] == 0
    (listed,) = _json_lines(broker, "groups", "list")
    (mine,) = [g for g in listed if g["GROUP"] == group]
    assert mine["STATE"] == "Empty"
