"""Cross-check against an independent implementation: kafka-python 3.0's record code.

kafka-python builds batches (every codec) that we decode; we build batches that kafka-python parses. Its
snappy support needs the ``python-snappy`` module, which is not installed: the test lends it cramjam's raw
snappy block codec, while the xerial stream framing on both sides stays each project's own code.
"""

from __future__ import annotations

import types

import cramjam
import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tidelog.records import (
    LOG_APPEND_TIME,
    CompressionType,
    ControlRecordType,
    RecordSpec,
    build_batch,
    build_control_batch,
    decode_batch,
)

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def snappy_for_kafka_python(monkeypatch: pytest.MonkeyPatch) -> None:
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


def _specs(n: int) -> list[RecordSpec]:
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 11 == 3 else b"value %d " % i * (1 + i % 9)
        hdrs = [("trace", b"t%d" % i), ("empty", None)][: i % 3]
        out.append(RecordSpec(key, value, hdrs, T0 + (i * 37) % 1000 - 300))
    return out


def _kafka_python_build(specs: list[RecordSpec], codec: int, **producer) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=producer.get("is_transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 24,
    )
    for offset, spec in enumerate(specs):
        assert builder.append(offset, spec.timestamp, spec.key, spec.value, list(spec.headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", list(CompressionType))
def test_we_read_what_kafka_python_builds(codec: CompressionType) -> None:
    specs = _specs(250)
    raw = _kafka_python_build(
        specs, codec, producer_id=42, producer_epoch=1, base_sequence=10, is_transactional=True
    )
    header, records = decode_batch(raw)
    assert header.compression == codec  # kafka-python really compressed (it falls back when it does not pay)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 1, 10)
    assert header.is_transactional
    assert header.max_timestamp == max(s.timestamp for s in specs)
    assert len(records) == len(specs)
    for offset, (spec, rec) in enumerate(zip(specs, records)):
        assert (rec.offset, rec.timestamp, rec.key, rec.value, rec.headers) == (
            offset,
            spec.timestamp,
            spec.key,
            spec.value,
            list(spec.headers),
        )


def _kafka_python_read(raw: bytes) -> tuple[DefaultRecordBatch, list]:
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    return batch, list(batch)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_reads_what_we_build(codec: CompressionType) -> None:
    specs = _specs(250)
    raw = build_batch(
        specs, base_offset=1000, compression=codec, producer_id=7, producer_epoch=2, base_sequence=0
    )
    batch, records = _kafka_python_read(raw)
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (1000, 1249, 250)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 0)
    assert batch.max_timestamp == max(s.timestamp for s in specs)
    for i, (spec, rec) in enumerate(zip(specs, records)):
        assert (rec.offset, rec.timestamp, rec.key, rec.value, rec.headers) == (
            1000 + i,
            spec.timestamp,
            spec.key,
            spec.value,
            list(spec.headers),
        )


def test_kafka_python_reads_log_append_time_and_memory_records() -> None:
    first = build_batch(
        [(b"a", b"1", (), T0)], base_offset=0, timestamp_type=LOG_APPEND_TIME, max_timestamp=T0 + 99
    )
    second = build_batch([(b"b", b"2", (), T0)], base_offset=1, compression=CompressionType.LZ4)
    memory = MemoryRecords(first + second)
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        seen.extend((r.offset, r.timestamp, r.key) for r in batch)
    assert seen == [(0, T0 + 99, b"a"), (1, T0, b"b")]


@pytest.mark.parametrize("kind", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_kafka_python_reads_our_control_batches(kind: ControlRecordType) -> None:
    raw = build_control_batch(
        kind, producer_id=5, producer_epoch=0, coordinator_epoch=3, base_offset=10, timestamp=T0
    )
    batch, records = _kafka_python_read(raw)
    assert batch.is_control_batch and batch.is_transactional
    (record,) = records
    assert record.type == kind and record.version == 0
    assert record.commit == (kind == ControlRecordType.COMMIT)


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(
        st.builds(
            RecordSpec,
            st.none() | st.binary(max_size=50),
            st.none() | st.binary(max_size=200),
            st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
            st.integers(0, 2**41),
            offset_delta=st.none(),
        ),
        min_size=1,
        max_size=20,
    ),
    codec=st.sampled_from(list(CompressionType)),
)
def test_both_directions_random(specs: list[RecordSpec], codec: CompressionType) -> None:
    ours = build_batch(specs, compression=codec)
    _, theirs_read = _kafka_python_read(ours)
    expected = [(i, s.timestamp, s.key, s.value, list(s.headers)) for i, s in enumerate(specs)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs_read] == expected
    theirs = _kafka_python_build(specs, codec)
    _, our_read = decode_batch(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in our_read] == expected
