"""``format("tidelog-log")``: reading the broker's data directory directly (compressed batches, several
segments, index splits, filters, a torn tail)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _cols(r: Any) -> tuple[Any, ...]:
    hs = None if r.headers is None else tuple((h.key, h.value) for h in r.headers)
    return (r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, r.timestampType, hs)


@pytest.fixture(scope="module")
def written(kt: Any) -> tuple[str, int]:
    """A 2-partition topic, ~2.5 MiB per partition (several 1 MiB segments), one producer per codec."""
    # records stamped in 2023: without retention.ms=-1 the broker's retention check (every 5 min) deletes them
    # while a slow run of this module still reads them
    topic = kt.new_topic(2, {"retention.ms": "-1"})
    n = 0
    for codec in CODECS:
        # half random (so that compressed segments still roll), half text
        recs = [(f"k{n + i}".encode(), f"{codec}-{n + i}-".encode() + os.urandom(500) + b"x" * 500, (n + i) % 2,
                 [("codec", codec.encode())] if i % 3 == 0 else None, 1_700_000_000_000 + n + i)
                for i in range(1000)]
        kt.produce(topic, recs, {"compression.type": codec, "linger.ms": 20})
        n += len(recs)
    return topic, n


def _log(spark: Any, path: str, **opts: str) -> Any:
    r = spark.read.format("tidelog-log")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load(path)


def test_same_rows_as_the_broker_serves(spark: Any, kt: Any, spark_broker: Any, written: tuple[str, int]) -> None:
    topic, n = written
    df = _log(spark, str(spark_broker.data_dir), subscribe=topic, includeHeaders="true")
    segments = len(list((spark_broker.data_dir / f"{topic}-0").glob("*.log")))
    assert segments >= 2
    assert df.rdd.getNumPartitions() >= 2 * segments - 1
    from_dir = sorted(_cols(r) for r in df.collect())
    from_broker = sorted(_cols(r) for r in spark.read.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap)
                         .option("subscribe", topic).option("includeHeaders", "true").load().collect())
    assert len(from_dir) == n
    assert from_dir == from_broker


def test_index_splits_read_each_record_once(spark: Any, spark_broker: Any, written: tuple[str, int]) -> None:
    topic, n = written
    whole = _log(spark, str(spark_broker.data_dir), subscribe=topic)
    split = _log(spark, str(spark_broker.data_dir), subscribe=topic, maxBytesPerPartition=str(100_000))
    assert split.rdd.getNumPartitions() > whole.rdd.getNumPartitions()
    keys = [(r.partition, r.offset) for r in split.select("partition", "offset").collect()]
    assert len(keys) == len(set(keys)) == n


def test_filters(spark: Any, spark_broker: Any, written: tuple[str, int]) -> None:
    topic, _n = written
    d = str(spark_broker.data_dir)
    df = _log(spark, d, assign=json.dumps({topic: [1]}),
              startingOffsets=json.dumps({topic: {"1": 100}}), endingOffsets=json.dumps({topic: {"1": 1500}}))
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100, 1500))
    assert {r.partition for r in df.select("partition").collect()} == {1}
    # timestamps: record j has timestamp base + j; [base+1000, base+1010) = records 1000..1009
    df = _log(spark, d, subscribe=topic, startingTimestamp=str(1_700_000_000_000 + 1000),
              endingTimestamp=str(1_700_000_000_000 + 1010))
    assert sorted(r.key for r in df.collect()) == sorted(f"k{j}".encode() for j in range(1000, 1010))
    # topic filters: pattern and the default (everything but internal topics)
    assert _log(spark, d, subscribePattern=topic[:6] + ".*").where(f"topic = '{topic}'").count() == _n
    assert _log(spark, d).where("topic LIKE '\\_\\_%'").count() == 0


def test_torn_tail_of_active_segment(spark: Any, spark_broker: Any, written: tuple[str, int], tmp_path: Path) -> None:
    topic, n = written
    copy = tmp_path / "logdir"
    shutil.copytree(spark_broker.data_dir / f"{topic}-0", copy / f"{topic}-0")
    last = sorted((copy / f"{topic}-0").glob("*.log"))[-1]
    data = last.read_bytes()
    with open(last, "ab") as f:
        f.write(data[:200])  # a batch cut short, as a crash mid-append leaves it
    got = _log(spark, str(copy), subscribe=topic).select("offset").collect()
    assert sorted(r.offset for r in got) == list(range(n // 2))
    # the same bytes in the middle of a closed segment are corruption, not a tail
    first = sorted((copy / f"{topic}-0").glob("*.log"))[0]
    with open(first, "ab") as f:
        f.write(data[:200])
    with pytest.raises(Exception, match="truncated batch"):
        _log(spark, str(copy), subscribe=topic).count()


def test_columnar_path_same_rows_as_the_broker_serves(spark: Any, kt: Any, spark_broker: Any,
                                                      written: tuple[str, int]) -> None:
    """Without includeHeaders the data directory is decoded column-wise (tidelog.client.columnar): the same
    rows as the broker serves, also with null keys and values, empty values and LogAppendTime."""
    topic, n = written
    cols = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

    def same(t: str, expected: int, **opts: str) -> None:
        def order(r: Any) -> tuple[int, int]:
            return r[3], r[4]

        from_dir = sorted((tuple(r) for r in _log(spark, str(spark_broker.data_dir), subscribe=t, **opts)
                           .select(*cols).collect()), key=order)
        broker = spark.read.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", t)
        from_broker = sorted((tuple(r) for r in broker.load().select(*cols).collect()), key=order)
        assert len(from_dir) == expected
        assert from_dir == from_broker

    same(topic, n)
    odd = kt.new_topic(2, {"message.timestamp.type": "LogAppendTime"})
    recs = [(None if i % 3 == 0 else f"k{i}".encode(), None if i % 5 == 0 else (b"" if i % 7 == 0 else b"v" * i),
             i % 2) for i in range(3000)]
    kt.produce(odd, recs, {"compression.type": "lz4", "linger.ms": 20})
    kt.produce(odd, recs[:500], {"linger.ms": 0})
    same(odd, 3500)
    # filters inside batches
    got = _log(spark, str(spark_broker.data_dir), assign=json.dumps({odd: [0]}),
               startingOffsets=json.dumps({odd: {"0": 7}}), endingOffsets=json.dumps({odd: {"0": 1234}}))
    assert sorted(r.offset for r in got.select("offset").collect()) == list(range(7, 1234))
