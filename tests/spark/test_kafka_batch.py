"""Batch reads through ``format("tidelog")`` against a real ``tidelog serve`` (each source option)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


FETCH_CLIENT = {"name": "raw"}


@pytest.fixture(scope="module", autouse=True, params=["raw", "librdkafka"])
def fetch_client(request: Any) -> Any:
    """Every test of this module runs through both executor paths (``fetchClient``)."""
    FETCH_CLIENT["name"] = request.param
    yield request.param
    FETCH_CLIENT["name"] = "raw"


def _read(spark: Any, bootstrap: str, **opts: str) -> Any:
    r = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
    r = r.option("fetchClient", FETCH_CLIENT["name"])
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def three(kt: Any) -> tuple[str, str]:
    """A 3-partition topic: partition p holds values b"p-i" for i in 0..99, key b"k{i}", timestamps 1000*i + p."""
    bs = kt.bootstrap
    topic = kt.new_topic(3)
    recs = [(f"k{i}".encode(), f"{p}-{i}".encode(), p, [("h", f"{i}".encode())] if i % 2 else None, 1_000_000 + 1000 * i + p)
            for p in range(3) for i in range(100)]
    kt.produce(topic, recs)
    return bs, topic


def test_schema_and_all_records(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    df = _read(spark, bs, subscribe=topic)
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                   "timestampType"]
    rows = df.collect()
    assert len(rows) == 300
    by = {(r.partition, r.offset): r for r in rows}
    assert set(by) == {(p, i) for p in range(3) for i in range(100)}
    r = by[(2, 7)]
    assert (r.key, r.value, r.topic, r.timestampType) == (b"k7", b"2-7", topic, 0)
    assert int(r.timestamp.timestamp() * 1000) == 1_000_000 + 7000 + 2


def test_include_headers(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    df = _read(spark, bs, subscribe=topic, includeHeaders="true").where("partition = 0")
    rows = {r.offset: r for r in df.collect()}
    assert rows[0].headers is None
    assert [(h.key, h.value) for h in rows[3].headers] == [("h", b"3")]


def test_assign_and_json_offsets(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    df = _read(spark, bs, assign=json.dumps({topic: [0, 2]}),
               startingOffsets=json.dumps({topic: {"0": 10, "2": -2}}),
               endingOffsets=json.dumps({topic: {"0": 20, "2": -1}}))
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, i) for i in range(10, 20)] + [(2, i) for i in range(100)]


def test_subscribe_pattern(spark: Any, kt: Any) -> None:
    bs = kt.bootstrap
    run = FETCH_CLIENT["name"]  # the module runs twice on one broker: topics of its own run only
    a = kt.new_topic(1, prefix=f"pat-{run}-x")
    b = kt.new_topic(1, prefix=f"pat-{run}-x")
    c = kt.new_topic(1, prefix=f"pat-{run}-y")
    for t in (a, b, c):
        kt.produce(t, [(None, t.encode())])
    df = _read(spark, bs, subscribePattern=rf"pat-{run}-x-.*")
    got = sorted(r.topic for r in df.collect())
    assert got == sorted([a, b])


def test_timestamps_and_precedence(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    # startingTimestamp wins over startingOffsetsByTimestamp and startingOffsets
    df = _read(spark, bs, subscribe=topic, startingTimestamp=str(1_000_000 + 90_000),
               startingOffsetsByTimestamp=json.dumps({topic: {"0": 0, "1": 0, "2": 0}}),
               startingOffsets="earliest",
               endingOffsetsByTimestamp=json.dumps({topic: {"0": 1_000_000 + 95_000, "1": 1_000_000 + 95_000,
                                                             "2": 1_000_000 + 95_000}}))
    got = sorted((r.partition, r.offset) for r in df.collect())
    # partition p: first ts >= 1090000 is i=90 (1090000+p >= 1090000); end: first ts >= 1095000 -> i=95 (p=0), 95 else
    exp = [(0, i) for i in range(90, 95)] + [(1, i) for i in range(90, 95)] + [(2, i) for i in range(90, 95)]
    assert got == exp
    df = _read(spark, bs, subscribe=topic, startingTimestamp=str(int(time.time() * 1000) + 3_600_000))
    with pytest.raises(Exception, match="No offset matched"):
        df.collect()
    df = _read(spark, bs, subscribe=topic, startingTimestamp=str(int(time.time() * 1000) + 3_600_000),
               startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0


def test_min_partitions_and_max_records(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    df = _read(spark, bs, subscribe=topic, minPartitions="12")
    assert df.rdd.getNumPartitions() == 12
    assert df.count() == 300
    df = _read(spark, bs, subscribe=topic, maxRecordsPerPartition="30")
    assert df.rdd.getNumPartitions() == 12  # ceil(100/30) = 4 per partition
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(p, i) for p in range(3) for i in range(100)]


def test_kafka_options_passed_to_client(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    df = _read(spark, bs, subscribe=topic, **{"kafka.client.id": "spark-test", "kafka.fetch.wait.max.ms": "50"})
    assert df.count() == 300
    with pytest.raises(Exception, match=r"auto\.offset\.reset"):
        _read(spark, bs, subscribe=topic, **{"kafka.auto.offset.reset": "earliest"}).count()
    with pytest.raises(Exception, match=r"No such configuration property|not.*known|Unknown"):
        _read(spark, bs, subscribe=topic, **{"kafka.no.such.setting": "1"}).count()


def test_option_errors(spark: Any, three: tuple[str, str]) -> None:
    bs, topic = three
    with pytest.raises(Exception, match="One of the following options must be specified"):
        _read(spark, bs).count()
    with pytest.raises(Exception, match="One of the following options must be specified"):
        _read(spark, bs, subscribe=topic, subscribePattern="x.*").count()
    with pytest.raises(Exception, match="can't be latest for batch queries"):
        _read(spark, bs, subscribe=topic, startingOffsets="latest").count()
    with pytest.raises(Exception, match="can't be earliest for batch queries"):
        _read(spark, bs, subscribe=topic, endingOffsets="earliest").count()
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers"):
        spark.read.format("tidelog").option("subscribe", topic).load().count()


def test_compacted_gaps_and_transaction_markers(spark: Any, kt: Any) -> None:
    """Offsets taken by transaction markers are gaps that are not data loss."""
    from confluent_kafka import Producer

    bs = kt.bootstrap
    topic = kt.new_topic(1)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{topic}"})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"v{i}".encode())
    p.commit_transaction(30)
    kt.produce(topic, [(None, b"after")])
    rows = _read(spark, bs, subscribe=topic).collect()
    assert [r.value for r in sorted(rows, key=lambda r: r.offset)] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"after"]
