"""Every compression codec with every client against a real ``tidelog serve``, read back by every client.

A fixed set of awkward records (headers incl. repeated keys and empty values, null keys, tombstones, empty and
binary values, explicit timestamps) is produced by one client (confluent-kafka, kafka-python 3, aiokafka, kcat)
with one codec (none, gzip, snappy, lz4, zstd) and read back by all four; every reader must see identical
offsets, keys, values, headers and timestamps. The data dir is then decoded with ``tidelog.records`` to check
that the segment files hold exactly what the clients sent, compressed with the codec the producer chose.

kafka-python needs the ``python-snappy`` module for snappy, which is not installed; it only uses that module's
raw-block ``compress``/``decompress`` (its own code does the xerial framing), so the tests hand it an adapter over
``cramjam.snappy`` (installed) instead of skipping.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import types
from pathlib import Path
from typing import Any

import helpers as h
import pytest

from tidelog.records import CompressionType

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KCAT = shutil.which("kcat")
BASE_TS = 1_750_000_000_000

Msg = tuple  # (key, value, headers: tuple[(str, bytes)], timestamp)


def _messages() -> list[Msg]:
    binary = bytes(range(256)) * 3 + b"\x00\n|\r\xff"
    out: list[Msg] = [
        (b"k0", b"plain", (("h1", b"v1"), ("h2", b"")), BASE_TS),
        (None, b"null key", (), BASE_TS + 1),
        (b"tombstone", None, (("deleted", b"yes"),), BASE_TS + 2),
        (b"empty", b"", (), BASE_TS + 3),
        (b"\x00bin\xff", binary, (("bin", bytes(range(32))),), BASE_TS + 4),
        (b"dup", b"repeated header keys", (("h", b"1"), ("h", b"2"), ("h", b"3")), BASE_TS + 5),
        (b"big", b"compressible text " * 2000, (), BASE_TS + 6),
    ]
    out += [(f"k{i}".encode(), f"value {i} ".encode() * 5, (("i", str(i).encode()),), BASE_TS + 10 + i)
            for i in range(30)]
    return out


MESSAGES = _messages()


@pytest.fixture(scope="module", autouse=True)
def _kafka_python_snappy() -> Any:
    """Give kafka-python a python-snappy compatible module backed by cramjam (restored afterwards)."""
    import cramjam
    import kafka.codec

    old = kafka.codec.snappy
    if old is None:
        kafka.codec.snappy = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        )
    yield
    kafka.codec.snappy = old


# ------------------------------------------------------------------------------------------------ producers


def produce_confluent(bootstrap: str, topic: str, codec: str, msgs: list[Msg]) -> list[int]:
    delivered = h.confluent_produce(
        bootstrap, topic,
        [{"key": k, "value": v, "headers": list(hd), "timestamp": ts} for k, v, hd, ts in msgs],
        **{"compression.type": codec, "acks": "all", "linger.ms": 50, "batch.num.messages": 1000},
    )
    return [m.offset() for m in delivered]


def produce_kafka_python(bootstrap: str, topic: str, codec: str, msgs: list[Msg]) -> list[int]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=50,
                      compression_type=None if codec == "none" else codec)
    try:
        futs = [p.send(topic, key=k, value=v, headers=list(hd), timestamp_ms=ts, partition=0)
                for k, v, hd, ts in msgs]
        p.flush(30)
        return [f.get(timeout=10).offset for f in futs]
    finally:
        p.close(timeout=10)


def produce_aiokafka(bootstrap: str, topic: str, codec: str, msgs: list[Msg]) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def main() -> list[int]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=50,
                             compression_type=None if codec == "none" else codec)
        await p.start()
        try:
            futs = [await p.send(topic, key=k, value=v, headers=list(hd), timestamp_ms=ts, partition=0)
                    for k, v, hd, ts in msgs]
            return [(await asyncio.wait_for(f, 30)).offset for f in futs]
        finally:
            await p.stop()

    return asyncio.run(main())


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python, "aiokafka": produce_aiokafka}

# ------------------------------------------------------------------------------------------------ consumers

Seen = tuple  # (offset, key, value, headers, timestamp)


def consume_confluent(bootstrap: str, topic: str, n: int) -> list[Seen]:
    msgs = h.confluent_consume(bootstrap, topic, n)
    return [(m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]) for m in msgs]


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> list[Seen]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100,
                      consumer_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list[Seen] = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in recs]
        return out
    finally:
        c.close()


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> list[Seen]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def main() -> list[Seen]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out: list[Seen] = []
            deadline = time.monotonic() + 30
            while len(out) < n and time.monotonic() < deadline:
                batch = await asyncio.wait_for(c.getmany(tp, timeout_ms=500), 20)
                for recs in batch.values():
                    out += [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in recs]
            return out
        finally:
            await c.stop()

    return asyncio.run(main())


KCAT_FORMAT = "%o|%T|%K|%k|%S|%s|%h\n"


def _kcat_parse(out: bytes) -> list[Seen]:
    """Parse kcat output in KCAT_FORMAT (key and value are length-prefixed, so binary data is safe)."""
    seen: list[Seen] = []
    pos = 0

    def until(sep: bytes) -> bytes:
        nonlocal pos
        end = out.index(sep, pos)
        field = out[pos:end]
        pos = end + 1
        return field

    def take(length: int) -> bytes | None:
        nonlocal pos
        if length < 0:
            return None
        field = out[pos:pos + length]
        pos += length
        return field

    for _ in range(100_000):
        if pos >= len(out):
            break
        offset = int(until(b"|"))
        ts = int(until(b"|"))
        key = take(int(until(b"|")))
        assert out[pos:pos + 1] == b"|"
        pos += 1
        value = take(int(until(b"|")))
        assert out[pos:pos + 1] == b"|"
        pos += 1
        raw_headers = until(b"\n")
        headers = tuple((k.decode(), v) for k, _, v in (item.partition(b"=") for item in raw_headers.split(b",")
                                                           if item))
        seen.append((offset, key, value, headers, ts))
    return seen


def consume_kcat(bootstrap: str, topic: str, n: int) -> list[Seen]:
    out = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", KCAT_FORMAT], capture_output=True, check=True, timeout=60).stdout
    return _kcat_parse(out)


CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python, "aiokafka": consume_aiokafka}
if KCAT:
    CONSUMERS["kcat"] = consume_kcat


def _normalise(seen: list[Seen], *, kcat: bool = False) -> list[Seen]:
    out = []
    for offset, key, value, headers, ts in seen:
        if kcat:
            # kcat's %h prints headers as key=value: binary header values are not representable there
            headers = tuple((k, v) for k, v in headers if k != "bin")
        out.append((offset, key, value, tuple((k, bytes(v) if v is not None else None) for k, v in headers), ts))
    return out


def _expected(msgs: list[Msg], *, kcat: bool = False) -> list[Seen]:
    return _normalise([(i, k, v, hd, ts) for i, (k, v, hd, ts) in enumerate(msgs)], kcat=kcat)


def _check_disk(data_dir: Path, topic: str, codec: str, msgs: list[Msg]) -> None:
    """The segment files hold exactly the produced records, in batches compressed with the producer's codec."""
    assert h.segment_logs(data_dir, topic), "no segment file"
    on_disk = h.records_on_disk(data_dir, topic)
    got = [(r.offset, r.key, r.value, tuple((k, v) for k, v in r.headers), r.timestamp) for _, r in on_disk]
    assert got == _expected(msgs)
    codecs = {hdr.attributes & 0x07 for hdr, _ in on_disk}
    # librdkafka sends a batch uncompressed when compressing it does not make it smaller: allow "none" batches
    assert CODEC_IDS[codec] in codecs and codecs <= {0, CODEC_IDS[codec]}, (
        f"batches on disk use codecs {codecs}, producer used {codec}")
    for hdr, _ in on_disk:
        assert hdr.magic == 2 and hdr.partition_leader_epoch == 0
    assert (h.partition_dir(data_dir, topic) / "00000000000000000000.index").exists()
    assert (h.partition_dir(data_dir, topic) / "00000000000000000000.timeindex").exists()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_codec_round_trip_across_clients(broker: Any, producer: str, codec: str) -> None:
    topic = h.new_topic(f"{producer}-{codec}")
    offsets = PRODUCERS[producer](broker.bootstrap, topic, codec, MESSAGES)
    assert offsets == list(range(len(MESSAGES)))
    for name, consume in CONSUMERS.items():
        seen = consume(broker.bootstrap, topic, len(MESSAGES))
        assert _normalise(seen, kcat=name == "kcat") == _expected(MESSAGES, kcat=name == "kcat"), (
            f"{name} read something else than {producer} wrote with {codec}")
    _check_disk(broker.data_dir, topic, codec, MESSAGES)


@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_with_every_codec(broker: Any, codec: str) -> None:
    topic = h.new_topic(f"kcat-{codec}")
    # key and value delimited, one header on every message, -z codec
    lines = [(f"key{i}".encode(), f"kcat value {i} ".encode() * 10) for i in range(40)]
    data = b"".join(k + b"\t" + v + b"\n" for k, v in lines)
    subprocess.run([KCAT, "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", "\t",
                    "-H", "origin=kcat", "-X", "linger.ms=50"], input=data, check=True, timeout=60)
    n = len(lines)
    reads = {name: consume(broker.bootstrap, topic, n) for name, consume in CONSUMERS.items()}
    first = _normalise(reads.pop("confluent"))
    assert [(o, k, v, hd) for o, k, v, hd, _ in first] == [
        (i, k, v, (("origin", b"kcat"),)) for i, (k, v) in enumerate(lines)]
    for name, seen in reads.items():
        assert _normalise(seen) == first, f"{name} differs from confluent-kafka"
    on_disk = h.records_on_disk(broker.data_dir, topic)
    assert [(r.key, r.value) for _, r in on_disk] == lines
    codecs = {hdr.attributes & 0x07 for hdr, _ in on_disk}
    assert CODEC_IDS[codec] in codecs and codecs <= {0, CODEC_IDS[codec]}, codecs


# --------------------------------------------------------------------------------------------- offsets by time


@pytest.fixture(scope="module")
def timed_topic(broker: Any) -> tuple[str, list[tuple[int, int]]]:
    """A topic of zstd batches with several records each: (offset, timestamp) per record. Timestamps rise by
    10 ms per record inside a batch, and one record in the middle holds the maximum timestamp."""
    topic = h.new_topic("times")
    msgs: list[Msg] = []
    for i in range(60):
        ts = BASE_TS + 10 * i
        if i == 37:
            ts = BASE_TS + 1_000_000  # the max timestamp, in the middle of the log
        msgs.append((b"k%d" % i, b"v%d" % i, (), ts))
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd", "linger.ms": 1000,
                  "batch.num.messages": 20})
    for k, v, _, ts in msgs:
        p.produce(topic, v, key=k, partition=0, timestamp=ts)
    assert p.flush(30) == 0
    headers = [hdr for hdr, _ in h.records_on_disk(broker.data_dir, topic)]
    assert len({hdr.base_offset for hdr in headers}) >= 3, "expected several multi-record batches"
    return topic, [(i, ts) for i, (_, _, _, ts) in enumerate(msgs)]


def _first_at_or_after(records: list[tuple[int, int]], ts: int) -> int:
    return next((o for o, t in records if t >= ts), -1)


PROBES = [BASE_TS - 5, BASE_TS, BASE_TS + 1, BASE_TS + 125, BASE_TS + 365, BASE_TS + 370, BASE_TS + 590,
          BASE_TS + 591, BASE_TS + 999_999, BASE_TS + 1_000_000, BASE_TS + 1_000_001]


def test_offsets_for_times_confluent(broker: Any, timed_topic: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic, records = timed_topic
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        found = c.offsets_for_times([TopicPartition(topic, 0, ts) for ts in PROBES[:1]], timeout=10)
        for ts in PROBES:
            found = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert found[0].error is None
            assert found[0].offset == _first_at_or_after(records, ts), ts
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, len(records))
    finally:
        c.close()


def test_offsets_for_times_kafka_python(broker: Any, timed_topic: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic, records = timed_topic
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        by_ts = dict(records)
        for ts in PROBES:
            got = c.offsets_for_times({tp: ts})[tp]
            want = _first_at_or_after(records, ts)
            if want < 0:
                assert got is None, ts
            else:
                assert (got.offset, got.timestamp) == (want, by_ts[want]), ts
        assert c.beginning_offsets([tp])[tp] == 0
        assert c.end_offsets([tp])[tp] == len(records)
    finally:
        c.close()


def test_offsets_for_times_aiokafka(broker: Any, timed_topic: Any) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    topic, records = timed_topic

    async def main() -> None:
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            for ts in PROBES:
                got = (await c.offsets_for_times({tp: ts}))[tp]
                want = _first_at_or_after(records, ts)
                assert (got.offset if got else -1) == want, ts
            assert (await c.end_offsets([tp]))[tp] == len(records)
        finally:
            await c.stop()

    asyncio.run(main())


def test_list_offsets_max_timestamp_confluent_admin(broker: Any, timed_topic: Any) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic, records = timed_topic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)
    specs = {"max": OffsetSpec.max_timestamp(), "earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "ts": OffsetSpec.for_timestamp(BASE_TS + 365)}
    results = {}
    for name, spec in specs.items():
        futures = admin.list_offsets({tp: spec}, request_timeout=10)
        results[name] = futures[tp].result(timeout=10)
    max_off, max_ts = max(records, key=lambda r: r[1])
    assert (results["max"].offset, results["max"].timestamp) == (max_off, max_ts) == (37, BASE_TS + 1_000_000)
    assert results["earliest"].offset == 0
    assert results["latest"].offset == len(records)
    assert results["ts"].offset == _first_at_or_after(records, BASE_TS + 365)


@pytest.mark.parametrize("version", [1, 4, 7, 8])
def test_list_offsets_raw_every_spec(broker: Any, timed_topic: Any, version: int) -> None:
    topic, records = timed_topic
    with h.RawClient(broker.port) as c:
        assert h.list_offset_raw(c, topic, 0, -1, version)["offset"] == len(records)
        assert h.list_offset_raw(c, topic, 0, -2, version)["offset"] == 0
        mid = h.list_offset_raw(c, topic, 0, BASE_TS + 125, version)
        assert (mid["offset"], mid["timestamp"]) == (13, BASE_TS + 130)
        if version >= 7:
            top = h.list_offset_raw(c, topic, 0, -3, version)
            assert (top["error_code"], top["offset"], top["timestamp"]) == (0, 37, BASE_TS + 1_000_000)
        if version >= 8:
            assert h.list_offset_raw(c, topic, 0, -4, version)["offset"] == 0


def test_codec_is_per_batch_mixed_codecs_in_one_partition(broker: Any) -> None:
    """Batches of every codec interleaved in one partition read back in order by every client."""
    topic = h.new_topic("mixed")
    expected: list[Msg] = []
    for round_ in range(2):
        for codec, produce in zip(CODECS, [produce_confluent, produce_kafka_python, produce_aiokafka,
                                           produce_confluent, produce_kafka_python], strict=True):
            chunk = [(f"{codec}-{round_}-{i}".encode(), f"{codec} value {i} ".encode() * 20, (("c", codec.encode()),),
                      BASE_TS + len(expected) + i) for i in range(5)]
            offsets = produce(broker.bootstrap, topic, codec, chunk)
            assert offsets == list(range(len(expected), len(expected) + 5))
            expected += chunk
    for name, consume in CONSUMERS.items():
        assert _normalise(consume(broker.bootstrap, topic, len(expected)), kcat=name == "kcat") == _expected(
            expected, kcat=name == "kcat"), name
    on_disk = h.records_on_disk(broker.data_dir, topic)
    assert [hdr.attributes & 0x07 for hdr, r in on_disk if r.offset % 5 == 0] == [
        CompressionType(CODEC_IDS[c]) for c in CODECS] * 2


@pytest.mark.parametrize("topic_codec", ["zstd", "uncompressed", "gzip"])
def test_topic_compression_type_is_applied_to_every_batch(broker: Any, topic_codec: str) -> None:
    """A topic created with compression.type (confluent-kafka's admin client): every batch, whatever codec its
    producer chose, is stored with the topic's codec, as Kafka's LogValidator does, and every client reads the
    records unchanged."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = h.new_topic(f"ct-{topic_codec}")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": topic_codec})])[topic].result(30)
    expected: list[Msg] = []
    for codec, produce in zip(CODECS, [produce_confluent, produce_kafka_python, produce_aiokafka,
                                       produce_confluent, produce_kafka_python], strict=True):
        chunk = [(f"{codec}-{i}".encode(), f"{codec} value {i} ".encode() * 20, (("c", codec.encode()),),
                  BASE_TS + len(expected) + i) for i in range(5)]
        assert produce(broker.bootstrap, topic, codec, chunk) == list(range(len(expected), len(expected) + 5))
        expected += chunk
    for name, consume in CONSUMERS.items():
        assert _normalise(consume(broker.bootstrap, topic, len(expected)), kcat=name == "kcat") == _expected(
            expected, kcat=name == "kcat"), name
    stored = {hdr.attributes & 0x07 for hdr, _ in h.records_on_disk(broker.data_dir, topic)}
    assert stored == {CODEC_IDS["none" if topic_codec == "uncompressed" else topic_codec]}
