"""The ``tidelog`` source's raw-fetch executor path (``fetchClient=raw``) against confluent-kafka
(``fetchClient=librdkafka``) and the produced records: compression, ranges cutting through batches,
LogAppendTime, data loss, errors, and when the raw path is used."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from tidelog.spark.fetcher import KafkaFetchError, raw_fetch_allowed, read_range_raw
from tidelog.spark.kafka_source import OffsetRange, executor_consumer_config, read_range
from tidelog.spark.options import DataLossError, SourceOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 400


def _rows(spark: Any, bootstrap: str, client: str, **opts: str) -> list[tuple[Any, ...]]:
    r = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("fetchClient", client)
    for k, v in opts.items():
        r = r.option(k, v)
    return sorted((x.partition, x.offset, x.key, x.value, x.topic, x.timestamp, x.timestampType)
                  for x in r.load().collect())


@pytest.fixture(scope="module")
def mixed(kt: Any) -> tuple[str, str, dict[tuple[int, int], tuple[bytes | None, bytes, int]]]:
    """2 partitions; each holds PER_CODEC records of every codec in turn (many multi-record batches), some
    null keys, some empty values. Returns the expected (key, value, timestamp) by (partition, offset)."""
    topic = kt.new_topic(2)
    expected: dict[tuple[int, int], tuple[bytes | None, bytes, int]] = {}
    nxt = [0, 0]
    for codec in CODECS:
        recs = []
        for i in range(PER_CODEC):
            p = i % 2
            key = None if i % 5 == 0 else f"{codec}-k{i}".encode()
            value = b"" if i % 11 == 0 else f"{codec}-v{i}-".encode() * (1 + i % 4)
            ts = 1_600_000_000_000 + 10 * i + p
            recs.append((key, value, p, None, ts))
            expected[(p, nxt[p])] = (key, value, ts)
            nxt[p] += 1
        kt.produce(topic, recs, {"compression.type": codec, "batch.num.messages": 37, "linger.ms": 50})
    return kt.bootstrap, topic, expected


def test_raw_equals_librdkafka_and_produced(spark: Any, mixed: Any) -> None:
    bs, topic, expected = mixed
    raw = _rows(spark, bs, "raw", subscribe=topic)
    lib = _rows(spark, bs, "librdkafka", subscribe=topic)
    assert raw == lib
    assert len(raw) == len(expected) == len(CODECS) * PER_CODEC
    for p, off, key, value, t, ts, ts_type in raw:
        k, v, ms = expected[(p, off)]
        assert (key, value, t, ts_type) == (k, v, topic, 0)
        assert int(ts.timestamp() * 1000) == ms


def test_ranges_cutting_through_batches(spark: Any, mixed: Any) -> None:
    bs, topic, expected = mixed
    opts = {"assign": json.dumps({topic: [0, 1]}),
            "startingOffsets": json.dumps({topic: {"0": 13, "1": 201}}),
            "endingOffsets": json.dumps({topic: {"0": 777, "1": 950}}),
            "maxRecordsPerPartition": "53"}
    raw = _rows(spark, bs, "raw", **opts)
    assert raw == _rows(spark, bs, "librdkafka", **opts)
    assert [(r[0], r[1]) for r in raw] == [(0, i) for i in range(13, 777)] + [(1, i) for i in range(201, 950)]
    assert all((r[2], r[3]) == expected[(r[0], r[1])][:2] for r in raw)


def test_log_append_time(spark: Any, kt: Any) -> None:
    topic = kt.new_topic(1, {"message.timestamp.type": "LogAppendTime"})
    kt.produce(topic, [(None, f"v{i}".encode(), None, None, 1000 + i) for i in range(50)], {"compression.type": "lz4"})
    raw = _rows(spark, kt.bootstrap, "raw", subscribe=topic)
    assert raw == _rows(spark, kt.bootstrap, "librdkafka", subscribe=topic)
    assert {r[6] for r in raw} == {1} and len(raw) == 50
    assert all(int(r[5].timestamp() * 1000) > 1_000_000 for r in raw)


def _table(batches: Any) -> pa.Table:
    return pa.Table.from_batches(list(batches))


@pytest.mark.parametrize("fail", [True, False])
def test_fail_on_data_loss_in_executor(kt: Any, fail: bool) -> None:
    """Records of a planned range deleted before the executor reads them (OFFSET_OUT_OF_RANGE): both paths
    fail with Spark's message, or skip to the log start offset."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = kt.new_topic(1)
    kt.produce(topic, [(None, f"v{i}".encode()) for i in range(100)])
    admin = AdminClient({"bootstrap.servers": kt.bootstrap})
    fut = admin.delete_records([TopicPartition(topic, 0, 40)])
    next(iter(fut.values())).result(30)
    client = {"bootstrap.servers": kt.bootstrap}
    raw = lambda: read_range_raw(client, topic, 0, 10, 90, fail_on_data_loss=fail, poll_timeout_ms=10_000)  # noqa: E731
    conf = executor_consumer_config(SourceOptions.parse({"kafka.bootstrap.servers": kt.bootstrap, "subscribe": topic},
                                                        streaming=False))
    lib = lambda: read_range(conf, OffsetRange(topic, 0, 10, 90), fail_on_data_loss=fail,  # noqa: E731
                             include_headers=False, poll_timeout_ms=10_000)
    if fail:
        for gen in (raw, lib):
            with pytest.raises(DataLossError, match="Some data may have been lost"):
                _table(gen())
        return
    a, b = _table(raw()), _table(lib())
    assert a.column("offset").to_pylist() == list(range(40, 90))
    assert a.to_pylist() == b.to_pylist()


def test_errors_carry_the_kafka_name(kt: Any) -> None:
    client = {"bootstrap.servers": kt.bootstrap}
    with pytest.raises(KafkaFetchError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        list(read_range_raw(client, "no-such-topic-xyz", 0, 0, 10, fail_on_data_loss=True, poll_timeout_ms=2000))
    topic = kt.new_topic(1)
    with pytest.raises(KafkaFetchError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        list(read_range_raw(client, topic, 5, 0, 10, fail_on_data_loss=True, poll_timeout_ms=2000))
    # the range's end was never written: bounded by kafkaConsumer.pollTimeoutMs
    kt.produce(topic, [(None, b"x")])
    with pytest.raises(TimeoutError, match="Cannot fetch record for offset 1"):
        list(read_range_raw(client, topic, 0, 0, 10, fail_on_data_loss=True, poll_timeout_ms=1500))


def test_when_raw_is_used(spark: Any, kt: Any) -> None:
    ok = {"bootstrap.servers": "x:1"}
    assert raw_fetch_allowed(ok, False, "raw")
    assert not raw_fetch_allowed(ok, True, "raw")
    assert not raw_fetch_allowed(ok, False, "librdkafka")
    assert raw_fetch_allowed({**ok, "security.protocol": "PLAINTEXT"}, False, "raw")
    # TLS and SASL PLAIN/SCRAM are spoken by the raw path too; a mechanism it lacks (Kafka's default, GSSAPI)
    # goes to librdkafka
    assert raw_fetch_allowed({**ok, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.username": "u", "sasl.password": "p"}, False, "raw")
    assert raw_fetch_allowed({**ok, "security.protocol": "SSL"}, False, "raw")
    assert not raw_fetch_allowed({**ok, "security.protocol": "SASL_SSL"}, False, "raw")
    assert not raw_fetch_allowed({**ok, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
                                 False, "raw")
    # both isolation levels read raw (read_committed: isolation level 1 and the aborted transactions)
    assert raw_fetch_allowed({**ok, "isolation.level": "read_committed"}, False, "raw")
    topic = kt.new_topic(1)
    with pytest.raises(Exception, match="fetchClient"):
        _rows(spark, kt.bootstrap, "bogus", subscribe=topic)
