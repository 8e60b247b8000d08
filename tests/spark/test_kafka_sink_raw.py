"""The sink's raw producer (``produceClient=raw``, the default; :mod:`tidelog.spark.producer`): partitions as
librdkafka's ``murmur2_random`` (Kafka's default partitioner), headers, null keys and timestamps round trip, the
fallback rules, errors, and a broker killed in the middle of a write (the retries resend with the same sequence
numbers: every record once, in order)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import RawClient, produce_raw, read_to_end

from tidelog.client.columnar import py_murmur2
from tidelog.records import build_batch
from tidelog.spark.kafka_sink import parse_produce_client, producer_config
from tidelog.spark.options import OptionError
from tidelog.spark.producer import DeliveryError, RawProducer, raw_produce_unsupported

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def consume_all(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` as confluent-kafka Messages (partition order kept)."""
    return read_to_end(bootstrap, topic, "read_uncommitted")


def _write(df: Any, bootstrap: str, topic: str, **opts: str) -> None:
    df.write.mode("append").format("tidelog").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", topic).options(**opts).save()


def test_partitions_equal_librdkafka_murmur2_random(spark: Any, kt: Any) -> None:
    """The same keys land on the same partitions whether written by the raw path, by the librdkafka path or by a
    plain confluent-kafka producer with ``partitioner=murmur2_random``: murmur2 of the key, as Kafka's Java
    producer (and Spark's Kafka sink) place them."""
    raw, rdk, ref = kt.new_topic(7), kt.new_topic(7), kt.new_topic(7)
    keys = [f"key-{i}" for i in range(200)] + ["", "é", "a", "ab", "abc", "abcd"]
    df = spark.createDataFrame([(k, f"v{i}") for i, k in enumerate(keys)], "key string, value string")
    _write(df, kt.bootstrap, raw)
    _write(df, kt.bootstrap, rdk, produceClient="librdkafka")
    p = Producer({"bootstrap.servers": kt.bootstrap, "partitioner": "murmur2_random"})
    for i, k in enumerate(keys):
        p.produce(ref, key=k.encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0
    placed = {t: {m.key(): m.partition() for m in consume_all(kt.bootstrap, t)} for t in (raw, rdk, ref)}
    assert len(placed[raw]) == len(keys)
    assert placed[raw] == placed[rdk]
    # the empty key: Kafka hashes it (only a null key is unkeyed); librdkafka's producer may treat it as null
    assert {k: v for k, v in placed[raw].items() if k} == {k: v for k, v in placed[ref].items() if k}
    for k, part in placed[raw].items():
        assert part == (py_murmur2(k) & 0x7FFFFFFF) % 7


def test_headers_null_keys_and_timestamps_round_trip(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(3)
    rows = []
    for i in range(300):
        headers = None if i % 5 == 0 else [] if i % 5 == 1 else [
            ("a", f"x{i}".encode()), ("é", None), ("a", b"")][: i % 4]
        rows.append((None if i % 3 == 0 else f"k{i}", f"v{i}".encode(), headers))
    df = spark.createDataFrame(rows, "key string, value binary, headers array<struct<key:string,value:binary>>")
    before = int(time.time() * 1000)
    _write(df.coalesce(1), kt.bootstrap, topic)
    after = int(time.time() * 1000)
    got = (spark.read.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", topic)
           .option("includeHeaders", "true").load().collect())
    assert len(got) == 300
    by_value = {r.value: r for r in got}
    for key, value, headers in rows:
        r = by_value[value]
        assert r.key == (None if key is None else key.encode())
        assert [(h.key, h.value) for h in r.headers or []] == list(headers or [])
        assert r.timestampType == 0  # CreateTime, set by the producer
        ts = int(r.timestamp.timestamp() * 1000)
        assert before - 1000 <= ts <= after + 1000  # (Spark's timestamp is local time; the test session is UTC)
    # null keys stick to one partition per input batch: one task, one Arrow batch here
    assert len({r.partition for r in got if r.key is None}) == 1


def test_topic_column_and_explicit_partitions(spark: Any, kt: Any) -> None:
    a, b = kt.new_topic(2), kt.new_topic(3)
    rows = [(a if i % 2 else b, f"k{i}", f"{i}", i % 2 if i % 4 else None) for i in range(80)]
    df = spark.createDataFrame(rows, "topic string, key string, value string, partition int")
    df.coalesce(1).write.mode("append").format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).save()
    got = {t: consume_all(kt.bootstrap, t) for t in (a, b)}
    for topic, key, value, part in rows:
        (m,) = [m for m in got[topic] if m.value() == value.encode()]
        n = 2 if topic == a else 3
        assert m.partition() == (part if part is not None else (py_murmur2(key.encode()) & 0x7FFFFFFF) % n)
    # order within a partition is the order of the rows (one task)
    for topic in (a, b):
        for part in range(3):
            vals = [int(m.value()) for m in got[topic] if m.partition() == part]
            assert vals == sorted(vals)


def test_unknown_partition_fails_the_task(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(2)
    df = spark.createDataFrame([("a", 0), ("b", 5)], "value string, partition int")
    with pytest.raises(Exception, match=rf"Failed to send record to {topic}-5: Local: Unknown partition"):
        _write(df, kt.bootstrap, topic)


def test_which_producer() -> None:
    base = producer_config({"kafka.bootstrap.servers": "127.0.0.1:1"})
    assert base["partitioner"] == "murmur2_random"
    assert raw_produce_unsupported(base) is None
    assert parse_produce_client({}, base) is True
    assert parse_produce_client({"produceClient": "librdkafka"}, base) is False
    with pytest.raises(OptionError, match="produceClient"):
        parse_produce_client({"produceClient": "java"}, base)
    for extra, why in [({"partitioner": "consistent_random"}, "partitioner"),
                       ({"compression.type": "brotli"}, "compression"),
                       ({"acks": "0"}, "acks=0"),
                       ({"acks": "1"}, "acks=1 with enable.idempotence"),
                       ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "security")]:
        assert why in (raw_produce_unsupported({**base, **extra}) or ""), extra
        assert parse_produce_client({}, {**base, **extra}) is False
    for extra in [{"compression.type": "zstd"}, {"acks": "1", "enable.idempotence": "false"},
                  {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
                   "sasl.password": "p"}]:
        assert raw_produce_unsupported({**base, **extra}) is None, extra


def test_compressed_and_not_idempotent(spark: Any, kt: Any) -> None:
    for opts in ({"kafka.compression.type": "lz4"}, {"kafka.enable.idempotence": "false", "kafka.acks": "1"}):
        topic = kt.new_topic(2)
        df = spark.createDataFrame([(f"k{i}", f"v{i}" * 20) for i in range(500)], "key string, value string")
        _write(df, kt.bootstrap, topic, **opts)
        assert sorted(m.value() for m in consume_all(kt.bootstrap, topic)) == \
            sorted(f"v{i}".encode() * 20 for i in range(500))


def _arrow_batches(first: int, count: int, per: int) -> Any:
    for start in range(first, first + count, per):
        n = min(per, first + count - start)
        yield pa.RecordBatch.from_arrays(
            [pa.array([f"k{i % 97}".encode() for i in range(start, start + n)], pa.binary()),
             pa.array([f"{i:08d}".encode() + b"x" * 200 for i in range(start, start + n)], pa.binary())],
            names=["key", "value"])


def test_broker_killed_mid_write_every_record_once_in_order(own_broker: Any) -> None:
    """SIGKILL the broker while Produce requests are in flight, start it again: the producer reconnects,
    resends every unacknowledged batch with its sequence numbers, and the broker (its producer state rebuilt
    from the log) drops what it had already appended. Every record once, per-partition order kept."""
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("retry", 3, 1)])["retry"].result(30)
    total = 60_000
    prod = RawProducer({"bootstrap.servers": bootstrap, "batch.size": "65536", "retry.backoff.ms": "50"})
    restarted = threading.Event()

    def batches() -> Any:
        yield from _arrow_batches(0, total // 2, 2000)
        own_broker.kill()  # requests of the last batches may be in flight

        def start() -> None:
            time.sleep(0.5)
            own_broker.start()
            restarted.set()

        threading.Thread(target=start, daemon=True).start()
        yield from _arrow_batches(total // 2, total // 2, 2000)

    try:
        assert prod.produce_arrow(batches(), "retry") == total
        prod.flush()
    finally:
        prod.close()
    assert restarted.is_set()
    assert prod.resent > 0  # the kill did hit requests in flight or queued
    assert prod.delivered == total
    got = consume_all(bootstrap, "retry")
    values = [int(m.value()[:8]) for m in got]
    assert len(values) == total and set(values) == set(range(total))
    for part in range(3):
        seq = [int(m.value()[:8]) for m in got if m.partition() == part]
        assert seq == sorted(seq)


def test_fatal_error_names_the_partition(own_broker: Any) -> None:
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("small", 1, 1, config={"max.message.bytes": "1024"})])["small"].result(30)
    prod = RawProducer({"bootstrap.servers": bootstrap})
    try:
        with pytest.raises(DeliveryError, match=r"Failed to send record to small-0: (MESSAGE|RECORD)_TOO_LARGE"):
            prod.produce_arrow(_arrow_batches(0, 100, 100), "small")
            prod.flush()
    finally:
        prod.close()


def _intrude(port: int, topic: str, prod: RawProducer, transactional: bool = False) -> None:
    """Append one record under ``prod``'s producer id, epoch and next sequence number, from another client: the
    broker's producer state moves past the producer's, as when the records a producer sent were lost and
    replaced on the broker (an unclean election, a truncation). Its next batch is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    batch = build_batch([(None, b"intruder")], producer_id=prod.producer_id, producer_epoch=prod.epoch,
                        base_sequence=prod.seq[prod.topics[topic].base], is_transactional=transactional)
    with RawClient(port) as c:
        assert produce_raw(c, topic, 0, batch, version=9)["error_code"] == 0


def test_lost_sequence_idempotent_new_producer_id_resends_everything(own_broker: Any) -> None:
    """The broker answers OUT_OF_ORDER_SEQUENCE_NUMBER for the producer's oldest undelivered batch: an idempotent
    producer takes a new producer id and resends every undelivered batch from sequence 0 (the Java client since
    KIP-360, librdkafka's epoch bump) instead of failing the task; no record handed over is lost."""
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("gap", 1, 1)])["gap"].result(30)
    prod = RawProducer({"bootstrap.servers": bootstrap, "batch.size": "16384", "retry.backoff.ms": "20"})
    try:
        assert prod.produce_arrow(_arrow_batches(0, 1000, 500), "gap") == 1000
        prod.flush()
        first_id = prod.producer_id
        _intrude(own_broker.port, "gap", prod)
        assert prod.produce_arrow(_arrow_batches(1000, 1000, 500), "gap") == 1000
        prod.flush()
    finally:
        prod.close()
    assert prod.epoch_bumps == 1 and prod.producer_id != first_id
    assert prod.delivered == 2000
    values = [m.value() for m in consume_all(bootstrap, "gap")]
    assert values.count(b"intruder") == 1
    ours = [int(v[:8]) for v in values if v != b"intruder"]
    assert ours == list(range(2000))  # every record once, in order


def test_lost_sequence_transactional_fails_the_transaction(own_broker: Any) -> None:
    """Transactional, the same error is not papered over with a new producer id (that would leave the transaction
    behind): the write fails, the transaction is aborted, nothing of it is visible read_committed (the exactly-once
    sink then fails the task and Spark retries it)."""
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("gap-txn", 1, 1)])["gap-txn"].result(30)
    prod = RawProducer({"bootstrap.servers": bootstrap, "batch.size": "16384", "retry.backoff.ms": "20"},
                       transactional_id="gap-txn-0")
    try:
        prod.init_producer_id()
        prod.begin()
        prod.produce_arrow(_arrow_batches(0, 1000, 500), "gap-txn")
        prod.flush()
        _intrude(own_broker.port, "gap-txn", prod, transactional=True)
        with pytest.raises(DeliveryError, match=r"gap-txn-0: OUT_OF_ORDER_SEQUENCE_NUMBER"):
            prod.produce_arrow(_arrow_batches(1000, 1000, 500), "gap-txn")
            prod.flush()
        prod.end_transaction(False, timeout_s=30)
    finally:
        prod.close()
    assert prod.epoch_bumps == 0
    assert read_to_end(bootstrap, "gap-txn", "read_committed") == []
