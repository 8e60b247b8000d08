"""The ``tidelog`` sink: batch and streaming writes, headers, explicit partitions, topic column, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _read_back(spark: Any, bootstrap: str, topic: str) -> list[Any]:
    return (spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load()
            .orderBy("partition", "offset").collect())


def test_batch_round_trip_headers_and_partitions(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(3)
    rows = [(f"k{i}", f"v{i}".encode(), i % 3, [(f"h{i}", f"x{i}".encode())] if i % 2 else None) for i in range(60)]
    df = spark.createDataFrame(
        rows, "key string, value binary, partition int, headers array<struct<key:string,value:binary>>"
    )
    # one task, so that the order within each partition is the order of the rows
    df.coalesce(1).write.mode("append").format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap) \
        .option("topic", topic).save()
    got = _read_back(spark, kt.bootstrap, topic)
    assert len(got) == 60
    by_value = {r.value: r for r in got}
    for k, v, p, h in rows:
        r = by_value[v]
        assert r.key == k.encode() and r.partition == p
        assert (None if r.headers is None else [(x.key, x.value) for x in r.headers]) == h
    # order within a partition is kept
    for p in range(3):
        vals = [r.value for r in got if r.partition == p]
        assert vals == sorted(vals, key=lambda b: int(b[1:]))


def test_topic_column_and_missing_topic(spark: Any, kt: Any) -> None:
    a, b = kt.new_topic(1), kt.new_topic(1)
    df = spark.createDataFrame([(a, "1"), (b, "2"), (a, "3")], "topic string, value string")
    df.write.mode("append").format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).save()
    assert sorted(r.value for r in _read_back(spark, kt.bootstrap, a)) == [b"1", b"3"]
    assert [r.value for r in _read_back(spark, kt.bootstrap, b)] == [b"2"]
    with pytest.raises(Exception, match="topic option required"):
        spark.createDataFrame([("x",)], "value string").write.mode("append").format("tidelog") \
            .option("kafka.bootstrap.servers", kt.bootstrap).save()
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        spark.createDataFrame([("x",)], "key string").write.mode("append").format("tidelog") \
            .option("kafka.bootstrap.servers", kt.bootstrap).option("topic", a).save()


def test_delivery_error_fails_with_broker_error(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(1, config={"max.message.bytes": "2048"})
    df = spark.createDataFrame([("x" * 10_000,)], "value string")
    with pytest.raises(Exception, match=r"Failed to send record .*(too large|MSG_SIZE_TOO_LARGE|MESSAGE_TOO_LARGE)"):
        df.write.mode("append").format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("topic", topic) \
            .option("kafka.compression.type", "none").save()


def test_streaming_write(spark: Any, kt: Any, tmp_path: Path) -> None:
    src, dst = kt.new_topic(2), kt.new_topic(1)
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(100)])
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30").load()
         .selectExpr("key", "CAST(CAST(value AS STRING) AS INT) * 2 AS n")
         .selectExpr("key", "CAST(n AS STRING) AS value")
         .writeStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    got = _read_back(spark, kt.bootstrap, dst)
    assert sorted(int(r.value) for r in got) == [2 * i for i in range(100)]
    assert {r.key for r in got} == {f"k{i}".encode() for i in range(100)}
