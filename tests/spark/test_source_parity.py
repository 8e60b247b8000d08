"""Spark Kafka-source parity: ``minOffsetsPerTrigger`` / ``maxTriggerDelay`` (a trigger is skipped until enough
offsets are available or the delay has passed), ``groupIdPrefix``, and the sink's save modes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from tidelog.spark.kafka_source import KafkaStreamReader, driver_consumer_config, executor_consumer_config
from tidelog.spark.options import OptionError, SourceOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _reader(bootstrap: str, topic: str, **opts: str) -> KafkaStreamReader:
    return KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                              "startingOffsets": "earliest", **opts})


def _total(offset: dict) -> int:
    return sum(int(o) for parts in offset.values() for o in parts.values())


def test_min_offsets_per_trigger_skips_until_enough(kt: Any) -> None:
    topic = kt.new_topic(2)
    kt.produce(topic, [(None, b"v", i % 2) for i in range(3)])
    r = _reader(kt.bootstrap, topic, minOffsetsPerTrigger="10", maxTriggerDelay="1h", maxOffsetsPerTrigger="12")
    try:
        limit = r.getDefaultReadLimit()
        assert limit == ReadMinRows(10)
        start = r.initialOffset()
        first = r.latestOffset(start, limit)
        assert _total(first) == 3  # the first trigger always runs (Spark: lastTriggerMillis starts at 0)
        kt.produce(topic, [(None, b"v", i % 2) for i in range(4)])
        assert r.latestOffset(first, limit) == first  # 4 < 10: skipped, the start offsets unchanged
        kt.produce(topic, [(None, b"v", i % 2) for i in range(16)])
        second = r.latestOffset(first, limit)
        assert _total(second) - _total(first) == 12  # 20 available >= 10; maxOffsetsPerTrigger caps it at 12
        # Trigger.Once hands ReadAllAvailable: everything, whatever the minimum
        assert _total(r.latestOffset(second, ReadAllAvailable())) == 23
    finally:
        r.stop()


def test_max_trigger_delay_fires_a_small_trigger(kt: Any) -> None:
    topic = kt.new_topic(1)
    kt.produce(topic, [(None, b"v")])
    r = _reader(kt.bootstrap, topic, minOffsetsPerTrigger="100", maxTriggerDelay="300ms")
    try:
        limit = r.getDefaultReadLimit()
        first = r.latestOffset(r.initialOffset(), limit)
        fired_at = time.monotonic()
        kt.produce(topic, [(None, b"v")] * 2)
        assert r.latestOffset(first, limit) == first  # 2 < 100 and the delay has not passed
        deadline = time.monotonic() + 10
        while (nxt := r.latestOffset(first, limit)) == first:
            assert time.monotonic() < deadline, "maxTriggerDelay never fired the trigger"
            time.sleep(0.02)
        assert time.monotonic() - fired_at >= 0.3
        assert _total(nxt) == 3
    finally:
        r.stop()


def test_min_offsets_in_a_query(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(1)
    kt.produce(topic, [(None, b"a")] * 3)
    name = f"mem_{topic.replace('-', '_')}"
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").option("minOffsetsPerTrigger", "10")
         .option("maxTriggerDelay", "1h").load().writeStream.format("memory").queryName(name).start())
    try:
        q.processAllAvailable()
        assert spark.sql(f"SELECT * FROM {name}").count() == 3  # the first trigger
        kt.produce(topic, [(None, b"b")] * 4)
        q.processAllAvailable()
        assert spark.sql(f"SELECT * FROM {name}").count() == 3  # 4 new offsets < 10: no micro-batch
        kt.produce(topic, [(None, b"c")] * 6)
        q.processAllAvailable()
        assert spark.sql(f"SELECT * FROM {name}").count() == 13
        assert q.exception() is None
    finally:
        q.stop()


def test_options_are_checked() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "t"}
    for bad in ({"maxTriggerDelay": "soon"}, {"minOffsetsPerTrigger": "0"}, {"kafka.isolation.level": "dirty"}):
        with pytest.raises(OptionError):
            SourceOptions.parse({**base, **bad}, streaming=True)
    assert SourceOptions.parse({**base, "maxTriggerDelay": "2s"}, streaming=True).max_trigger_delay_ms == 2000
    assert SourceOptions.parse({**base, "maxTriggerDelay": "250"}, streaming=True).max_trigger_delay_ms == 250
    assert SourceOptions.parse(base, streaming=True).max_trigger_delay_ms == 15 * 60 * 1000
    r = KafkaStreamReader({**base, "maxOffsetsPerTrigger": "5"})
    assert r.getDefaultReadLimit() == ReadMaxRows(5)


def test_group_id_prefix() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "t"}
    stream = SourceOptions.parse(base, streaming=True)
    batch = SourceOptions.parse(base, streaming=False)
    assert driver_consumer_config(stream)["group.id"].startswith("spark-kafka-source-")  # Spark's defaults
    assert executor_consumer_config(batch)["group.id"].startswith("spark-kafka-relation-")
    o = SourceOptions.parse({**base, "groupIdPrefix": "etl"}, streaming=True)
    drv, exe = driver_consumer_config(o)["group.id"], executor_consumer_config(o)["group.id"]
    assert drv.startswith("etl-") and drv.endswith("-driver")
    assert exe.startswith("etl-") and exe.endswith("-executor") and exe[:-9] == drv[:-7]
    assert SourceOptions.parse({**base, "groupIdPrefix": "etl"}, streaming=True).unique_group_id != o.unique_group_id
    fixed = SourceOptions.parse({**base, "groupIdPrefix": "etl", "kafka.group.id": "mine"}, streaming=True)
    assert driver_consumer_config(fixed)["group.id"] == executor_consumer_config(fixed)["group.id"] == "mine"
    # librdkafka's default isolation is read_committed; Spark's (the Java client's) is read_uncommitted
    assert executor_consumer_config(o)["isolation.level"] == "read_uncommitted"


def test_group_id_prefix_read(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(1)
    kt.produce(topic, [(None, b"x")] * 5)
    df = (spark.read.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", topic)
          .option("fetchClient", "librdkafka").option("groupIdPrefix", "my-etl").load())
    assert df.count() == 5


def test_sink_save_modes(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(1)
    df = spark.createDataFrame([("v",)], "value string")
    w = df.write.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("topic", topic)
    with pytest.raises(Exception, match='Append'):  # PySpark itself refuses ErrorIfExists for Python sources
        w.save()
    with pytest.raises(Exception, match=r'Save mode Overwrite is not allowed .*Use \.mode\("append"\)'):
        w.mode("overwrite").save()
    w.mode("append").save()
    rows = spark.read.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", topic).load()
    assert [r.value for r in rows.collect()] == [b"v"]  # only the append wrote
