"""`__consumer_offsets` is compacted by the same cleaner as any compacted topic (issue 5), and compaction
loses no group's latest committed offset: a restarted broker answers OffsetFetch with the newest commit."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helpers
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.records.batch import decode_batches

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
COMMITS = 200


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    return helpers.wait_for(predicate, timeout, what)


def cleaner_runs(srv: Any) -> float:
    series = f'tidelog_cleaner_log_runs_total{{partition="0",topic="{OFFSETS}"}}'
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series):
                return float(line.split()[-1])
    return 0.0


def offset_commit_records(srv: Any, group: str) -> int:
    """How many records of ``__consumer_offsets-0`` carry an offset commit of ``group`` (key version 1)."""
    count = 0
    for log in sorted((Path(srv.data_dir) / f"{OFFSETS}-0").glob("*.log")):
        for _pos, _header, records in decode_batches(log.read_bytes()):
            count += sum(1 for r in records if r.key and r.key[:2] == b"\x00\x01" and group.encode() in r.key)
    return count


def committed(srv: Any, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        c.close()


def test_consumer_offsets_is_compacted_and_keeps_the_latest_commit(broker_factory: Any) -> None:
    srv = broker_factory(
        {
            "tidelog.min.segment.bytes": "1",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.segment.bytes": "1024",
            "log.segment.delete.delay.ms": "0",
            "log.cleaner.backoff.ms": "50",
            "tidelog.log.tick.interval.ms": "50",
            "tidelog.metrics.listener": "127.0.0.1:0",
        }
    )
    topic, group = "oc-topic", "oc-group"
    p = Producer({"bootstrap.servers": srv.bootstrap})
    p.produce(topic, value=b"x")
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for i in range(1, COMMITS + 1):
            c.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    finally:
        c.close()

    wait_for(lambda: cleaner_runs(srv) >= 1, what="a cleaner run on __consumer_offsets")
    # superseded commits left the cleaned segments; only the newest commit per key and the uncleaned tail remain
    wait_for(lambda: offset_commit_records(srv, group) < COMMITS // 4, what="superseded offset commits removed")
    assert committed(srv, group, topic) == COMMITS

    srv.restart()  # the group's offsets are reloaded from the compacted topic
    assert committed(srv, group, topic) == COMMITS
