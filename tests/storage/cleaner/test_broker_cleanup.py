"""Retention and compaction in a running ``tidelog serve``, observed by real clients (confluent-kafka).

Retention by size, by time and by log start offset (DeleteRecords): consumers asking for a deleted offset get
OFFSET_OUT_OF_RANGE and their auto.offset.reset policy applies. Compaction: the cleaner thread compacts a
topic off the request path; its state shows on /metrics and in ``tidelog topics describe``.
Waiting is bounded polling with deadlines, never a fixed sleep.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for

pytestmark = pytest.mark.integration

OVERRIDES = {
    "tidelog.min.segment.bytes": "1",
    "log.retention.check.interval.ms": "100",
    "tidelog.log.tick.interval.ms": "50",
    "log.cleaner.backoff.ms": "50",
    "tidelog.metrics.listener": "127.0.0.1:0",
}


@pytest.fixture(scope="module")
def srv(broker_factory: Any) -> Any:
    return broker_factory(OVERRIDES)


def create(srv: Any, configs: dict[str, str]) -> str:
    name = f"cl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)
    return name


def produce(srv: Any, topic: str, items: list[tuple[bytes | None, bytes | None]], ts: int | None = None) -> None:
    p = Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for k, v in items:
        if ts is None:
            p.produce(topic, key=k, value=v)
        else:
            p.produce(topic, key=k, value=v, timestamp=ts)
    assert p.flush(30) == 0


def watermarks(srv: Any, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def consume_from(srv: Any, topic: str, offset: int, reset: str, want: int = 1, timeout: float = 15.0) -> list[Any]:
    """Messages (and error events) polled after assigning ``offset``; stops after ``want`` items."""
    c = Consumer(
        {
            "bootstrap.servers": srv.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
        }
    )
    out: list[Any] = []
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                out.append(m)
    finally:
        c.close()
    return out


def segment_files(srv: Any, topic: str) -> list[str]:
    d = Path(srv.data_dir) / f"{topic}-0"
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".log"))


def check_out_of_range_and_resets(srv: Any, topic: str) -> None:
    low, high = watermarks(srv, topic)
    assert low > 0
    first = consume_from(srv, topic, 0, "earliest")
    assert first and first[0].error() is None and first[0].offset() == low
    err = consume_from(srv, topic, 0, "error")
    assert err and err[0].error() is not None
    assert err[0].error().code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in err[0].error().str().lower() or "OFFSET_OUT_OF_RANGE" in err[0].error().str()
    # "latest": nothing old is delivered; the consumer's fetch position (from its statistics) moves to the end,
    # and the next message written is the first one it gets
    import json

    state: dict[str, Any] = {}

    def on_stats(raw: str) -> None:
        part = json.loads(raw).get("topics", {}).get(topic, {}).get("partitions", {}).get("0", {})
        state.update(part)

    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "u2", "auto.offset.reset": "latest",
                  "statistics.interval.ms": 100, "stats_cb": on_stats})
    try:
        c.assign([TopicPartition(topic, 0, 0)])

        def at_end() -> bool:
            m = c.poll(0.1)
            assert m is None or m.error() is not None, "an old message was delivered after reset to latest"
            return state.get("fetch_state") == "active" and state.get("next_offset") == high

        wait_for(at_end, what="reset to latest")
        produce(srv, topic, [(b"k", b"after-reset")])
        m = wait_for(lambda: c.poll(0.2), what="message after reset")
        assert m.error() is None and m.value() == b"after-reset" and m.offset() == high
    finally:
        c.close()


def test_retention_by_size(srv: Any) -> None:
    topic = create(srv, {"segment.bytes": "1024", "retention.bytes": "3000", "file.delete.delay.ms": "0",
                         "retention.ms": "-1"})
    produce(srv, topic, [(b"k%d" % i, b"x" * 100) for i in range(120)])
    wait_for(lambda: watermarks(srv, topic)[0] > 0, what="size retention")
    low, high = watermarks(srv, topic)
    assert high == 120
    files = wait_for(lambda: (f := segment_files(srv, topic)) and len(f) <= 5 and f, what="files removed")
    assert int(files[0].split(".")[0]) == low
    check_out_of_range_and_resets(srv, topic)


def test_retention_by_time(srv: Any) -> None:
    topic = create(srv, {"segment.bytes": "1024", "retention.ms": "60000", "file.delete.delay.ms": "0"})
    old = int(time.time() * 1000) - 3_600_000
    produce(srv, topic, [(b"old", b"y" * 100) for _ in range(30)], ts=old)
    produce(srv, topic, [(b"new", b"z" * 100) for _ in range(3)])
    # the old segments go; the segment holding new records stays
    wait_for(lambda: watermarks(srv, topic)[0] >= 20, what="time retention")
    msgs = consume_from(srv, topic, watermarks(srv, topic)[0], "earliest", want=40, timeout=3)
    assert [m.key() for m in msgs if m.error() is None][-3:] == [b"new"] * 3
    check_out_of_range_and_resets(srv, topic)


def test_retention_by_log_start_offset(srv: Any) -> None:
    topic = create(srv, {"segment.bytes": "1024", "file.delete.delay.ms": "0"})
    produce(srv, topic, [(b"k", b"w" * 100) for _ in range(60)])
    before = segment_files(srv, topic)
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    fut = admin.delete_records([TopicPartition(topic, 0, 40)])
    res = next(iter(fut.values())).result(30)
    assert res.low_watermark == 40
    # DeleteRecords moves the log start at once; whole segments below it leave at the next retention check
    wait_for(lambda: len(segment_files(srv, topic)) < len(before), what="segments below the log start removed")
    assert all(int(f.split(".")[0]) <= 40 for f in segment_files(srv, topic)[:1])
    assert watermarks(srv, topic)[0] == 40
    check_out_of_range_and_resets(srv, topic)


def metrics_text(srv: Any) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=5) as r:
        return r.read().decode()


def test_compaction_in_the_broker(srv: Any) -> None:
    topic = create(srv, {"cleanup.policy": "compact", "segment.bytes": "1024",
                         "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
    items = [(b"key-%d" % (i % 8), b"value-%04d" % i) for i in range(300)]
    produce(srv, topic, items)
    produce(srv, topic, [(b"key-3", None)])
    runs = f'tidelog_cleaner_log_runs_total{{partition="0",topic="{topic}"}}'
    wait_for(lambda: any(line.startswith(runs) and float(line.split()[-1]) >= 1
                         for line in metrics_text(srv).splitlines()), what="cleaner run in metrics")
    # read everything back: the newest value per key is there, superseded values are gone from cleaned segments
    msgs = [m for m in consume_from(srv, topic, 0, "earliest", want=400, timeout=3) if m.error() is None]
    latest: dict[bytes, bytes | None] = {}
    for m in msgs:
        latest[m.key()] = m.value()
    expected = {b"key-%d" % k: b"value-%04d" % max(i for i in range(300) if i % 8 == k) for k in range(8)}
    expected[b"key-3"] = None
    assert latest == expected
    assert len(msgs) < 300
    offsets = [m.offset() for m in msgs]
    assert offsets == sorted(set(offsets))
    assert (Path(srv.data_dir) / "cleaner-offset-checkpoint").read_text().count(topic) == 1
    # tidelog topics describe shows the cleaner's columns
    from tidelog.cli.topics import topics as topics_cli

    for extra in (["--metrics", f"127.0.0.1:{srv.metrics_port}"], []):  # given, or found through the leader
        r = CliRunner().invoke(topics_cli, ["describe", topic, "--bootstrap-server", srv.bootstrap, *extra],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        assert "\tDirtyRatio: " in r.output and "\tFirstDirtyOffset: " in r.output and "\tCleanerRuns: " in r.output
