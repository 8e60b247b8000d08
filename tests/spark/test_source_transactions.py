"""Transactions through the sources: ``kafka.isolation.level`` on both read paths of ``tidelog`` (raw fetch and
librdkafka), the LSO as the end offset, ``tidelog-log``'s committed reads from ``.txnindex`` files and markers,
and a streaming query that sees a transaction only once it is committed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _txn_producer(bootstrap: str) -> Any:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 0, "transaction.timeout.ms": 600_000})
    p.init_transactions(30)
    return p


def _send(p: Any, topic: str, values: list[str]) -> None:
    """One flush per call: each call is its own batch, so the producers' batches interleave in the log."""
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    assert p.flush(30) == 0


def _vals(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + n)]


@pytest.fixture(scope="module")
def txn_topic(kt: Any) -> Iterator[dict[str, Any]]:
    """One partition, short-lived segments (rolls, so producer snapshots hold an open transaction):
    plain records, a committed transaction (A), an aborted one (B) interleaved with a committed one (C), an aborted
    one of A again, plain records, then D left open across more segments, with plain records after it."""
    topic = kt.new_topic(1, {"segment.ms": "5"})  # rolls at appends: many segments, snapshots
    plain = Producer({"bootstrap.servers": kt.bootstrap, "linger.ms": 0})
    a, b, c, d = (_txn_producer(kt.bootstrap) for _ in range(4))
    _send(plain, topic, _vals("p", 5))
    a.begin_transaction()
    _send(a, topic, _vals("a", 5))
    _send(a, topic, _vals("a", 5, 5))
    a.commit_transaction(30)
    b.begin_transaction()
    c.begin_transaction()
    _send(b, topic, _vals("b", 5))
    _send(c, topic, _vals("c", 3))
    _send(b, topic, _vals("b", 5, 5))
    _send(c, topic, _vals("c", 2, 3))
    b.abort_transaction(30)
    c.commit_transaction(30)
    a.begin_transaction()
    _send(a, topic, _vals("a", 5, 10))
    a.abort_transaction(30)
    _send(plain, topic, _vals("p", 5, 5))
    d.begin_transaction()
    for i in range(5):
        _send(d, topic, [f"d{i}"])
        _send(plain, topic, [f"q{i}"])  # past the LSO: not committed-readable while D is open
    committed = _vals("p", 5) + _vals("a", 10) + _vals("c", 5) + _vals("p", 5, 5)
    everything = committed + _vals("b", 10) + _vals("a", 5, 10) + _vals("d", 5) + _vals("q", 5)
    try:
        yield {"topic": topic, "committed": committed, "all": everything}
    finally:
        d.abort_transaction(30)


def _read(spark: Any, bootstrap: str, topic: str, **opts: str) -> list[Any]:
    r = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return sorted(r.load().select("offset", "value").collect())


@pytest.mark.parametrize("client", ["raw", "librdkafka"])
def test_batch_read_committed_and_uncommitted(spark: Any, kt: Any, txn_topic: dict[str, Any], client: str) -> None:
    topic = txn_topic["topic"]
    rows = _read(spark, kt.bootstrap, topic, fetchClient=client, **{"kafka.isolation.level": "read_committed"})
    values = [r.value.decode() for r in rows]
    assert sorted(values) == sorted(txn_topic["committed"])  # exactly the committed records, each once
    # in log order, and the end offset is the LSO: nothing of D nor the plain records after it
    assert values[:5] == _vals("p", 5) and values[-5:] == _vals("p", 5, 5)

    rows = _read(spark, kt.bootstrap, topic, fetchClient=client)  # Spark's default: read_uncommitted
    values = [r.value.decode() for r in rows]
    assert sorted(values) == sorted(txn_topic["all"])  # every data record, never a control record
    assert len({r.offset for r in rows}) == len(rows)


def test_end_offsets_are_the_lso(kt: Any, txn_topic: dict[str, Any]) -> None:
    from tidelog.spark.kafka_source import KafkaMetadata
    from tidelog.spark.options import SourceOptions

    topic = txn_topic["topic"]
    marks = {}
    for iso in ("read_committed", "read_uncommitted"):
        opts = SourceOptions.parse({"kafka.bootstrap.servers": kt.bootstrap, "subscribe": topic,
                                    "kafka.isolation.level": iso}, streaming=False)
        meta = KafkaMetadata(opts)
        try:
            marks[iso] = meta.watermarks([(topic, 0)])[(topic, 0)][1]
        finally:
            meta.close()
    # read_uncommitted: the high watermark = every record and marker written; read_committed: D's first offset
    assert marks["read_uncommitted"] > marks["read_committed"]
    hw_records = len(txn_topic["all"])
    assert marks["read_uncommitted"] >= hw_records
    assert marks["read_committed"] < marks["read_uncommitted"] - 9  # D and q0..q4 at least


def test_log_source_committed_by_default(spark: Any, spark_broker: Any, txn_topic: dict[str, Any]) -> None:
    topic = txn_topic["topic"]
    pdir = spark_broker.data_dir / f"{topic}-0"
    assert len(list(pdir.glob("*.log"))) >= 3 and list(pdir.glob("*.txnindex")) and list(pdir.glob("*.snapshot"))

    def read(**opts: str) -> list[str]:
        r = spark.read.format("tidelog-log").option("subscribe", topic)
        for k, v in opts.items():
            r = r.option(k, v)
        return [x.value.decode() for x in sorted(r.load(str(spark_broker.data_dir)).select("offset", "value").collect())]

    assert sorted(read()) == sorted(txn_topic["committed"])
    assert sorted(read(includeHeaders="true")) == sorted(txn_topic["committed"])  # the row-wise reader too
    assert sorted(read(isolationLevel="read_uncommitted")) == sorted(txn_topic["all"])
    with pytest.raises(Exception, match="isolationLevel"):
        read(isolationLevel="serializable")


def test_partition_txn_state_from_files(spark_broker: Any, txn_topic: dict[str, Any]) -> None:
    """The LSO computed from the files is the offset of D's first record, as the broker's."""
    import os

    from tidelog.spark.log_source import partition_txn_state

    topic = txn_topic["topic"]
    pdir = spark_broker.data_dir / f"{topic}-0"
    bases = sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    state = partition_txn_state(pdir, bases)
    assert len(state.aborted) == 2  # B, and A's second transaction
    assert {last - first > 0 for _, first, last in state.aborted} == {True}
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": spark_broker.bootstrap, "group.id": "x", "isolation.level": "read_committed"})
    try:
        _, lso = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    finally:
        c.close()
    assert state.last_stable_offset == lso


def test_stream_sees_a_transaction_only_after_its_commit(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(1)
    name = f"mem_{topic.replace('-', '_')}"
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("kafka.isolation.level", "read_committed").load()
         .selectExpr("CAST(value AS STRING) AS value").writeStream.format("memory").queryName(name).start())
    p = _txn_producer(kt.bootstrap)
    try:
        p.begin_transaction()
        _send(p, topic, _vals("x", 3))
        q.processAllAvailable()
        assert spark.sql(f"SELECT * FROM {name}").count() == 0  # open: nothing yet
        p.commit_transaction(30)
        p.begin_transaction()
        _send(p, topic, _vals("y", 3))
        p.abort_transaction(30)
        p.begin_transaction()
        _send(p, topic, _vals("z", 2))
        q.processAllAvailable()
        assert sorted(r.value for r in spark.sql(f"SELECT * FROM {name}").collect()) == _vals("x", 3)
        p.commit_transaction(30)
        q.processAllAvailable()
        assert q.exception() is None
        assert sorted(r.value for r in spark.sql(f"SELECT * FROM {name}").collect()) == _vals("x", 3) + _vals("z", 2)
    finally:
        q.stop()


@pytest.mark.parametrize("client", ["raw", "librdkafka"])
def test_range_ending_in_aborted_data(spark: Any, kt: Any, client: str) -> None:
    """The last offsets before the end are an aborted transaction and its marker: the read ends there (the range's
    end is never a record), with no timeout and no data loss."""
    topic = kt.new_topic(1)
    p = _txn_producer(kt.bootstrap)
    p.begin_transaction()
    _send(p, topic, _vals("x", 3))
    p.commit_transaction(30)
    p.begin_transaction()
    _send(p, topic, _vals("y", 3))
    p.abort_transaction(30)
    rows = _read(spark, kt.bootstrap, topic, fetchClient=client, **{"kafka.isolation.level": "read_committed",
                                                                    "kafkaConsumer.pollTimeoutMs": "20000"})
    assert [(r.offset, r.value.decode()) for r in rows] == [(0, "x0"), (1, "x1"), (2, "x2")]
