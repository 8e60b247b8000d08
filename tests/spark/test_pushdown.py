"""Filter pushdown (issue 29, item 1): ``WHERE`` on ``topic``, ``partition``, ``offset`` and ``timestamp`` narrows
what both sources plan and read (with ``spark.sql.python.filterPushdown.enabled``), and the rows are those of
the same query without pushdown: random predicates over a topic with out-of-order timestamps, a compacted topic
(gaps) and a transactional one (markers, an aborted transaction)."""

from __future__ import annotations

import datetime
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringStartsWith,
)

from tidelog.spark.pushdown import PushedFilters, push_filters

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = 1_700_000_000_000  # ms
CONF = "spark.sql.python.filterPushdown.enabled"
UTC = datetime.UTC


def _dt(ms: int, extra_us: int = 0) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, UTC) + datetime.timedelta(microseconds=extra_us)


def test_which_filters_are_taken() -> None:
    p = PushedFilters()
    ts = GreaterThan(("timestamp",), _dt(T0, 500))
    filters = [EqualTo(("topic",), "a"), In(("partition",), (0, 2, None)), Not(EqualTo(("partition",), 2)),
               GreaterThanOrEqual(("offset",), 10), LessThan(("offset",), 20), LessThanOrEqual(("offset",), 30),
               ts, LessThan(("timestamp",), _dt(T0 + 5000)), IsNotNull(("offset",)),
               StringContains(("topic",), "x"), EqualTo(("value",), b"v"), StringStartsWith(("topic",), "a")]
    rest = list(push_filters(p, filters))
    # the timestamp bounds and what is not about topic/partition/offset stay with Spark, by reference
    assert [id(f) for f in rest] == [id(f) for f in (ts, filters[7], filters[9], filters[10])]
    assert (p.topics, p.topic_prefixes, p.partitions, p.partitions_excluded) == ({"a"}, ["a"], {0, 2}, {2})
    assert (p.offset_lo, p.offset_hi) == (10, 20)
    assert p.timestamp_lo_ms == T0 + 1  # timestamp > T0 ms + 500 us: the first whole ms after it
    assert [p.wants("a", i) for i in range(3)] == [True, False, False] and not p.wants("b", 0)
    assert p.clamp(0, 100) == (10, 20)
    q = PushedFilters()
    assert list(push_filters(q, [GreaterThanOrEqual(("timestamp",), _dt(T0, 1))])) and q.timestamp_lo_ms == T0 + 1
    r = PushedFilters()
    offsets_in = In(("offset",), (7, 3, 9))
    assert list(push_filters(r, [offsets_in])) == [offsets_in] and (r.offset_lo, r.offset_hi) == (3, 10)


# ------------------------------------------------------------------------------------------------- the data


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)  # polling interval of a bounded wait for the broker's cleaner


@pytest.fixture(scope="module")
def topics(kt: Any, spark: Any, spark_broker: Any) -> Iterator[dict[str, Any]]:
    """Three topics under one prefix: ``plain`` (3 partitions, CreateTime out of order by up to 5 s),
    ``compacted`` (1 partition, compacted by the cleaner: offsets with gaps) and ``txn`` (2 partitions, a
    committed and an aborted transaction between plain records)."""
    from confluent_kafka import Producer

    prefix = f"pd{id(spark) % 10_000}"
    # records stamped in 2023 (T0): retention.ms=-1, or the broker's retention check (every 5 min) deletes them
    # while a slow run of this module still reads them
    plain = kt.new_topic(3, {"retention.ms": "-1"}, prefix=f"{prefix}-plain")
    kt.produce(plain, [(f"k{i % 50}".encode(), f"v{i}".encode(), i % 3, None,
                        T0 + 1000 * i + (i * 7919) % 10_000 - 5000) for i in range(3000)],
               {"batch.num.messages": 20})  # small batches: a range's cost is not one batch of the whole partition
    compacted = kt.new_topic(1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                 "segment.bytes": str(1024 * 1024)}, prefix=f"{prefix}-compacted")
    kt.produce(compacted, [(f"k{i % 40}".encode(), b"x" * 300 + b"%d" % i, None, None, T0 + 1000 * i)
                           for i in range(8000)])
    data = spark_broker.data_dir

    def compacted_has_gaps() -> bool:
        try:
            return spark.read.format("tidelog-log").option("path", str(data)).option("subscribe", compacted) \
                .load().count() < 8000
        except Exception as exc:  # the cleaner swapped a segment during the read (failOnDataLoss): look again
            if "was deleted before it could be read" not in str(exc):
                raise
            return False
    _wait_for(compacted_has_gaps, 120, "the cleaner to compact the compacted topic")
    txn = kt.new_topic(2, {"retention.ms": "-1"}, prefix=f"{prefix}-txn")
    kt.produce(txn, [(None, f"a{i}".encode(), i % 2, None, T0 + 1000 * i) for i in range(100)])
    p = Producer({"bootstrap.servers": kt.bootstrap, "transactional.id": f"{txn}-tx"})
    p.init_transactions(30)
    for n, commit in ((0, True), (1, False), (2, True)):
        p.begin_transaction()
        for i in range(100):
            p.produce(txn, value=f"t{n}-{i}".encode(), partition=i % 2, timestamp=T0 + 1000 * (100 * (n + 1) + i))
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    kt.produce(txn, [(None, f"z{i}".encode(), i % 2, None, T0 + 1000 * (400 + i)) for i in range(100)])
    yield {"prefix": prefix, "plain": plain, "compacted": compacted, "txn": txn}


def _load(spark: Any, broker: Any, fmt: str, topics: dict[str, Any]) -> Any:
    r = spark.read.format(fmt).option("subscribePattern", f"{topics['prefix']}-.*")
    if fmt == "tidelog":
        return r.option("kafka.bootstrap.servers", broker.bootstrap).option("kafka.isolation.level",
                                                                           "read_committed").load()
    return r.option("path", str(broker.data_dir)).load()


def _rows(spark: Any, broker: Any, fmt: str, topics: dict[str, Any], where: str, pushdown: bool) -> list[Any]:
    spark.conf.set(CONF, "true" if pushdown else "false")
    try:
        df = _load(spark, broker, fmt, topics).where(where)
        return sorted(tuple(r) for r in df.select("topic", "partition", "offset", "key", "value", "timestamp",
                                                  "timestampType").collect())
    finally:
        spark.conf.unset(CONF)


def _ts(ms: int, us: int = 0) -> str:
    return f"timestamp '{_dt(ms, us).strftime('%Y-%m-%d %H:%M:%S.%f')}'"


@st.composite
def predicates(draw: Any, names: dict[str, Any]) -> str:
    cmp = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
    atoms = st.one_of(
        st.builds(lambda o, v: f"partition {o} {v}", cmp, st.integers(-1, 3)),
        st.builds(lambda vs, neg: f"partition {'NOT ' if neg else ''}IN ({', '.join(map(str, vs))})",
                  st.lists(st.integers(0, 3), min_size=1, max_size=3), st.booleans()),
        st.builds(lambda o, v: f"offset {o} {v}", cmp, st.integers(-5, 8100)),
        st.builds(lambda vs: f"offset IN ({', '.join(map(str, vs))})", st.lists(st.integers(0, 3000), min_size=1,
                                                                                 max_size=4)),
        st.builds(lambda o, ms, us: f"timestamp {o} {_ts(T0 + ms, us)}", cmp, st.integers(-10_000, 8_100_000),
                  st.sampled_from([0, 1, 500, 999])),
        # twice as likely, in the plain topic's out-of-order time range: lower bounds that cut through it
        st.builds(lambda o, ms: f"timestamp {o} {_ts(T0 + ms)}", st.sampled_from([">=", ">", "="]),
                  st.integers(0, 3_000_000)),
        st.builds(lambda k: f"topic = '{names[k]}'", st.sampled_from(["plain", "compacted", "txn"])),
        st.builds(lambda k: f"topic <> '{names[k]}'", st.sampled_from(["plain", "compacted", "txn"])),
        st.builds(lambda k: f"topic LIKE '{names[k][:-3]}%'", st.sampled_from(["plain", "compacted", "txn"])),
        st.builds(lambda d: f"value LIKE '%{d}'", st.integers(0, 9)),
        st.builds(lambda a, b: f"(partition = {a} OR offset < {b})", st.integers(0, 2), st.integers(0, 3000)),
    )
    return " AND ".join(draw(st.lists(atoms, min_size=1, max_size=4)))


@pytest.mark.parametrize("fmt", ["tidelog", "tidelog-log"])
def test_same_rows_with_and_without_pushdown(spark: Any, spark_broker: Any, topics: dict[str, Any],
                                             fmt: str) -> None:
    everything = _rows(spark, spark_broker, fmt, topics, "true", pushdown=False)
    assert len({r[0] for r in everything}) == 3

    plain = topics["plain"]

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(where=predicates(topics))
    # a lower bound on time cutting through out-of-order CreateTime: records after the start offset are older
    @example(where=f"topic = '{plain}' AND timestamp >= {_ts(T0 + 1_500_000)}")
    @example(where=f"partition = 1 AND timestamp = {_ts(T0 + 1000 * 2998 + (2998 * 7919) % 10_000 - 5000)}")
    def check(where: str) -> None:
        assert _rows(spark, spark_broker, fmt, topics, where, pushdown=True) == \
            _rows(spark, spark_broker, fmt, topics, where, pushdown=False), where

    check()


def _bytes_out(broker: Any, topic: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tidelog_topic_bytes_out_total{") and f'topic="{topic}"' in line)


def test_pushdown_narrows_what_is_fetched(spark: Any, spark_broker: Any, topics: dict[str, Any]) -> None:
    """Through the broker: a partition and offset range, and the last 1 % by timestamp, cost a fraction of the
    topic's bytes; explain() names the pushed filters (the Filter above the scan keeps only the others)."""
    plain = topics["plain"]
    queries = {f"topic = '{plain}' AND partition = 1 AND offset >= 100 AND offset < 200": 100,
               f"topic = '{plain}' AND timestamp >= {_ts(T0 + 2_990_000 + 5000)}": None}
    for where, expected in queries.items():
        costs = {}
        for pushdown in (False, True):
            before = _bytes_out(spark_broker, plain)
            rows = _rows(spark, spark_broker, "tidelog", topics, where, pushdown)
            costs[pushdown] = _bytes_out(spark_broker, plain) - before
            if expected is not None:
                assert len(rows) == expected
            else:
                assert 0 < len(rows) < 30
        assert costs[True] * 10 < costs[False], (where, costs)
    spark.conf.set(CONF, "true")
    try:
        df = _load(spark, spark_broker, "tidelog", topics).where("partition = 1 AND offset < 5 AND value IS NOT NULL")
        plan = spark._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted")  # explain("formatted")
    finally:
        spark.conf.unset(CONF)
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    assert "EqualTo(partition,1)" in pushed and "LessThan(offset,5)" in pushed and "value" not in pushed, plan


def test_pack_groups_small_partitions() -> None:
    from tidelog.spark.packing import PackedPartition, members, pack

    assert pack([5, 5, 5, 20, 1, 1], lambda x: x, 10) == [PackedPartition((5, 5)), 5, 20, PackedPartition((1, 1))]
    assert pack([5, 5], lambda x: x, 0) == [5, 5]  # no budget: unchanged
    assert [m for p in pack(list(range(7)), lambda x: 1, 3) for m in members(p)] == list(range(7))  # order kept


@pytest.mark.parametrize("fmt", ["tidelog", "tidelog-log"])
def test_small_ranges_packed_into_fewer_tasks(spark: Any, spark_broker: Any, topics: dict[str, Any],
                                              fmt: str) -> None:
    """The last records of each of the plain topic's 3 partitions, by a pushed lower bound on time: one task
    (packed) instead of one per partition (``packPartitions=false``, as Spark's Kafka source plans), same rows."""
    where = f"timestamp >= {_ts(T0 + 2_900_000)}"
    spark.conf.set(CONF, "true")
    try:
        got = {}
        for packed in ("true", "false"):
            r = spark.read.format(fmt).option("subscribe", topics["plain"]).option("packPartitions", packed)
            r = (r.option("kafka.bootstrap.servers", spark_broker.bootstrap) if fmt == "tidelog"
                 else r.option("path", str(spark_broker.data_dir)))
            df = r.load().where(where)
            got[packed] = (df.rdd.getNumPartitions(), sorted(tuple(x) for x in df.select("partition", "offset",
                                                                                          "value").collect()))
    finally:
        spark.conf.unset(CONF)
    assert got["true"][0] == 1 and got["false"][0] >= 3, {k: v[0] for k, v in got.items()}
    assert got["true"][1] == got["false"][1] and {p for p, _, _ in got["true"][1]} == {0, 1, 2}


def test_time_index_floor(tmp_path: Any) -> None:
    """The offset below which a segment's records are older than a time, from its ``.timeindex``: the last entry
    below the time; none from an empty (preallocated, all zeros) index, whose first entry would read as (0, 0)."""
    from tidelog.spark.log_source import time_index_floor
    from tidelog.storage.format import TIME_INDEX_ENTRY

    path = tmp_path / "00000000000000000100.timeindex"
    path.write_bytes(bytes(12 * 1000))
    assert time_index_floor(path, 100, 10_000_000, T0) is None
    path.write_bytes(b"".join(TIME_INDEX_ENTRY.pack(T0 + 1000 * k, 10 * k) for k in range(1, 4)) + bytes(12 * 100))
    assert time_index_floor(path, 100, 10_000_000, T0) is None  # every entry at or after the time
    assert time_index_floor(path, 100, 10_000_000, T0 + 1001) == 110
    assert time_index_floor(path, 100, 10_000_000, T0 + 3000) == 120
    assert time_index_floor(path, 100, 10_000_000, T0 + 10**9) == 130
    assert time_index_floor(tmp_path / "missing.timeindex", 0, 100, T0) is None
