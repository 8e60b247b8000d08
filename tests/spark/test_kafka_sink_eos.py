"""The exactly-once ``tidelog`` sink (``exactlyOnce=true``) under faults: a writer killed in the middle of its
transaction (the retry fences it), a streaming query stopped and restarted from its checkpoint, a replayed batch
id (commit log without its last batch), and a broker killed and restarted mid-query. Every case reads the output
with a read_committed consumer and compares count and content with the input."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from helpers import read_to_end
from pyspark import cloudpickle as spark_cloudpickle

from tidelog.spark.kafka_sink import EosOptions
from tidelog.spark.options import OptionError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# the fault-injecting data source is a module of the tests (not importable by the Python workers): by value
_spec = importlib.util.spec_from_file_location("tidelog_spark_eos_faults", Path(__file__).with_name("eos_faults.py"))
assert _spec is not None and _spec.loader is not None
eos_faults = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = eos_faults
_spec.loader.exec_module(eos_faults)
spark_cloudpickle.register_pickle_by_value(eos_faults)


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple[bytes | None, bytes]]:
    """Every record of ``topic`` up to the end (the LSO for read_committed), as (key, value)."""
    return [(m.key(), m.value()) for m in read_to_end(bootstrap, topic, isolation)]


def marker(bootstrap: str, group: str, topic: str) -> int:
    """The batch id the group of a transactional id committed on ``topic``-0 (-1 = none)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])], require_stable=True)[group].result(30)
    (tp,) = res.topic_partitions
    return int(tp.offset)


def test_exactly_once_options() -> None:
    assert EosOptions.parse({"topic": "t"}, streaming=True) is None  # at-least-once stays the default
    eos = EosOptions.parse({"exactlyOnce": "true", "topic": "t", "checkpointLocation": "/ck"}, streaming=True)
    assert eos == EosOptions(prefix=None, marker_topic="t", checkpoint="/ck")  # prefix from the query id
    batch = EosOptions.parse({"exactlyOnce": "true", "topic": "t"}, streaming=False)
    assert batch is not None and batch.prefix is not None and batch.prefix.startswith("tidelog-spark-batch-")
    fixed = EosOptions.parse({"exactlyOnce": "true", "topic": "t", "markerTopic": "m",
                              "transactionalIdPrefix": "job"}, streaming=False)
    assert fixed is not None and (fixed.prefix, fixed.marker_topic) == ("job", "m")
    with pytest.raises(OptionError, match="'topic' or 'markerTopic'"):
        EosOptions.parse({"exactlyOnce": "true"}, streaming=True)
    with pytest.raises(OptionError, match=r"'transactional\.id' is not supported"):
        EosOptions.parse({"exactlyOnce": "true", "topic": "t", "kafka.transactional.id": "x"}, streaming=True)
    with pytest.raises(OptionError, match="must not be empty"):
        EosOptions.parse({"exactlyOnce": "true", "topic": "t", "transactionalIdPrefix": " "}, streaming=True)
    with pytest.raises(OptionError, match="true or false"):
        EosOptions.parse({"exactlyOnce": "maybe", "topic": "t"}, streaming=True)


# -- (a) a writer killed in the middle of its transaction; the retry fences it ---------------------------------


def test_killed_writer_is_fenced_by_its_retry(spark: Any, kt: Any) -> None:
    spark.dataSource.register(eos_faults.KillFirstAttemptSource)
    topic = kt.new_topic(1)
    df = spark.range(0, 100, 1, 2).selectExpr("CAST(id AS STRING) AS key", "concat('v', id) AS value")
    (df.write.mode("append").format("tidelog-kill-first-attempt").option("kafka.bootstrap.servers", kt.bootstrap)
     .option("topic", topic).option("exactlyOnce", "true").save())
    expected = sorted((str(i).encode(), f"v{i}".encode()) for i in range(100))
    assert sorted(read_topic(kt.bootstrap, topic)) == expected
    # the killed attempt's rows are in the log, aborted: read_uncommitted sees them twice, read_committed once
    everything = read_topic(kt.bootstrap, topic, "read_uncommitted")
    assert len(everything) > 100 and set(everything) == set(expected)


@pytest.mark.parametrize("client", ["raw", "librdkafka"])
def test_batch_write_with_a_fixed_prefix_is_written_once(spark: Any, kt: Any, client: str) -> None:
    """The same batch job run again with the same transactionalIdPrefix writes nothing (its markers say done), with
    the raw producer and with librdkafka's (whose path reads the markers through ``kafka_sink.read_marker``)."""
    topic = kt.new_topic(1)
    prefix = f"job-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 40, 1, 2).selectExpr("CAST(id AS STRING) AS value")
    for _ in range(2):
        (df.write.mode("append").format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap)
         .option("topic", topic).option("exactlyOnce", "true").option("transactionalIdPrefix", prefix)
         .option("produceClient", client).save())
    assert sorted(int(v) for _, v in read_topic(kt.bootstrap, topic, "read_uncommitted")) == list(range(40))
    assert [marker(kt.bootstrap, f"{prefix}-{p}", topic) for p in (0, 1)] == [0, 0]


# -- streaming: stop and restart, replayed batch id, broker restart ------------------------------------------


def _stream(spark: Any, bootstrap: str, src: str, dst: str, ck: Path, per_trigger: int = 40) -> Any:
    return (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", src).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(per_trigger)).load()
            .selectExpr("key", "concat('out-', CAST(value AS STRING)) AS value")
            .writeStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
            .option("exactlyOnce", "true").option("checkpointLocation", str(ck)))


def _run_available_now(spark: Any, bootstrap: str, src: str, dst: str, ck: Path) -> Any:
    q = _stream(spark, bootstrap, src, dst, ck).trigger(availableNow=True).start()
    assert q.awaitTermination(300), "query did not finish"
    assert q.exception() is None, q.exception()
    return q


def _expected(n: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return sorted((f"k{i}".encode(), f"out-{i}".encode()) for i in range(start, n))


def test_stream_stopped_between_batches_and_restarted(spark: Any, kt: Any, tmp_path: Path) -> None:
    src, dst = kt.new_topic(2), kt.new_topic(2)
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(60)])
    q1 = _run_available_now(spark, kt.bootstrap, src, dst, tmp_path / "ck")
    assert sorted(read_topic(kt.bootstrap, dst)) == _expected(60)
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(60, 120)])
    q2 = _run_available_now(spark, kt.bootstrap, src, dst, tmp_path / "ck")
    assert q2.id == q1.id  # same checkpoint, same query: the same transactional ids
    assert sorted(read_topic(kt.bootstrap, dst)) == _expected(120)
    last = max(int(f.name) for f in (tmp_path / "ck" / "commits").iterdir() if f.name.isdigit())
    # both tasks of the last batch committed its id inside their transactions
    assert [marker(kt.bootstrap, f"tidelog-spark-{q1.id}-{p}", dst) for p in (0, 1)] == [last, last]


def test_replayed_batch_writes_nothing_twice(spark: Any, kt: Any, tmp_path: Path) -> None:
    src, dst = kt.new_topic(2), kt.new_topic(1)
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(100)])
    ck = tmp_path / "ck"
    _run_available_now(spark, kt.bootstrap, src, dst, ck)
    assert sorted(read_topic(kt.bootstrap, dst)) == _expected(100)
    # as if the driver died after the tasks committed but before Spark's commit log got the batch
    last = max(int(f.name) for f in (ck / "commits").iterdir() if f.name.isdigit())
    assert last >= 1
    (ck / "commits" / str(last)).unlink()
    (ck / "commits" / f".{last}.crc").unlink(missing_ok=True)
    q = _run_available_now(spark, kt.bootstrap, src, dst, ck)
    assert (ck / "commits" / str(last)).exists()  # the batch id was run again and committed
    replayed = [p for p in q.recentProgress if p["batchId"] == last]
    assert replayed and replayed[0]["numInputRows"] > 0, q.recentProgress
    # nothing written a second time, not even aborted: read_uncommitted sees each record once too
    assert sorted(read_topic(kt.bootstrap, dst)) == _expected(100)
    assert sorted(read_topic(kt.bootstrap, dst, "read_uncommitted")) == _expected(100)


def test_broker_restarted_mid_query(spark: Any, own_broker: Any, tmp_path: Path) -> None:
    bootstrap = own_broker.bootstrap
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("src", 2, 1), NewTopic("dst", 2, 1)]).values():
        f.result(30)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(300):
        p.produce("src", key=f"k{i}", value=f"{i}", partition=i % 2)
    assert p.flush(30) == 0
    ck = tmp_path / "ck"
    q = _stream(spark, bootstrap, "src", "dst", ck, per_trigger=30).trigger(processingTime="100 milliseconds").start()
    try:
        deadline = time.monotonic() + 180
        while not [x for x in q.recentProgress if x["batchId"] >= 2 and x["numInputRows"]]:
            assert q.isActive and time.monotonic() < deadline, (q.exception(), q.recentProgress)
            time.sleep(0.1)
        committed_before = [f for f in (ck / "commits").iterdir() if f.name.isdigit()]
        own_broker.kill()  # SIGKILL in the middle of the query (300 records / 30 per batch = 10 batches)
        assert 3 <= len(committed_before) < 10
        own_broker.start()
        try:
            q.processAllAvailable()
        except Exception:
            pass  # the query may have failed while the broker was away: it restarts from its checkpoint
    finally:
        q.stop()
    done_before = len(read_topic(bootstrap, "dst"))
    q2 = _run_available_now(spark, bootstrap, "src", "dst", ck)
    assert q2.id == q.id
    got = read_topic(bootstrap, "dst")
    assert sorted(got) == _expected(300), (done_before, len(got))
    assert json.loads((ck / "offsets" / max((f.name for f in (ck / "offsets").iterdir() if f.name.isdigit()),
                                             key=int)).read_text().splitlines()[-1]) == {"src": {"0": 150, "1": 150}}
