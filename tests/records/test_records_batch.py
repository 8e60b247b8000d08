"""build_batch / decode_records / control records / rewrite_batch_for_append."""

from __future__ import annotations

import struct

import pytest
from records_helpers import recrc, set_count

from tidelog.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    BatchHeader,
    CompressionType,
    ControlRecordType,
    CorruptRecordError,
    DecompressionLimitError,
    InvalidMagicError,
    InvalidRecordError,
    Record,
    RecordSpec,
    build_batch,
    build_control_batch,
    decode_batch,
    decode_batches,
    decode_records,
    parse_control_record,
    read_keys,
    rewrite_batch_for_append,
    validate_batch,
)

T0 = 1_700_000_000_000


def test_single_record_bytes_match_the_layout() -> None:
    batch = build_batch([(b"k", b"v", (), T0)], base_offset=5)
    header = validate_batch(batch)
    # length 8 (zig-zag 0x10) | attributes 0 | tsDelta 0 | offsetDelta 0 | key len 1 (0x02) 'k' | value len 1 'v'
    # | 0 headers
    assert batch[61:] == bytes.fromhex("10 00 00 00 02 6b 02 76 00")
    assert header.base_offset == 5
    assert header.batch_length == len(batch) - 12
    assert header.partition_leader_epoch == -1
    assert header.magic == 2
    assert header.attributes == 0
    assert header.last_offset_delta == 0
    assert header.base_timestamp == header.max_timestamp == T0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.records_count == 1


def test_nulls_and_headers_bytes() -> None:
    batch = build_batch([(None, None, [("a", None), ("bc", b"\x01")], T0)])
    body = "00 00 00 01 01 04 02 61 01 04 62 63 02 01"
    assert batch[61:] == bytes([len(bytes.fromhex(body)) * 2]) + bytes.fromhex(body)


def test_header_fields_and_attributes() -> None:
    batch = build_batch(
        [(b"a", b"1", (), T0 + 5), (b"b", b"2", (), T0 - 3), (b"c", b"3", (), T0 + 1)],
        base_offset=1000,
        compression=CompressionType.ZSTD,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = validate_batch(batch)
    assert header.compression == CompressionType.ZSTD
    assert header.is_transactional and not header.is_control and not header.has_delete_horizon
    assert header.timestamp_type == CREATE_TIME
    assert header.base_timestamp == T0 + 5  # the first record's timestamp
    assert header.max_timestamp == T0 + 5
    assert header.last_offset_delta == 2 and header.last_offset == 1002
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 40)
    assert header.last_sequence == 42
    assert header.partition_leader_epoch == 9
    records = decode_records(batch)
    assert [(r.offset, r.timestamp, r.timestamp_delta) for r in records] == [
        (1000, T0 + 5, 0),
        (1001, T0 - 3, -8),
        (1002, T0 + 1, -4),
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_round_trip_every_codec(codec: CompressionType) -> None:
    specs = [
        RecordSpec(b"key-%d" % i, b"value " * i if i % 7 else None, [(f"h{i}", b"x" * i)] * (i % 3), T0 + i)
        for i in range(300)
    ]
    specs.append(RecordSpec(None, b"no key", (), T0 + 400))
    header, records = decode_batch(build_batch(specs, base_offset=50, compression=codec))
    assert header.compression == codec
    assert len(records) == len(specs)
    for i, (spec, rec) in enumerate(zip(specs, records)):
        assert (rec.key, rec.value, rec.headers, rec.timestamp) == (
            spec.key,
            spec.value,
            list(spec.headers),
            spec.timestamp,
        )
        assert rec.offset == 50 + i and rec.offset_delta == i


def test_tuples_records_and_default_timestamps() -> None:
    batch = build_batch([(b"a", b"1"), (b"b", b"2", [("h", b"")]), (b"c", b"3", (), 42)], now_ms=T0)
    records = decode_records(batch)
    assert [r.timestamp for r in records] == [T0, T0, 42]
    assert records[1].headers == [("h", b"")]
    header = BatchHeader.parse(batch)
    assert header.base_timestamp == T0 and header.max_timestamp == T0


def test_explicit_offset_deltas_and_last_offset_delta() -> None:
    batch = build_batch(
        [RecordSpec(b"a", b"1", (), T0, 0), RecordSpec(b"b", b"2", (), T0, 4)],
        base_offset=10,
        last_offset_delta=9,
    )
    header, records = decode_batch(batch)
    assert header.last_offset_delta == 9 and header.records_count == 2
    assert [r.offset for r in records] == [10, 14]
    # decoded records rebuild into the same bytes (the cleaner path)
    assert build_batch(records, base_offset=10, last_offset_delta=9) == batch


@pytest.mark.parametrize(
    ("specs", "kwargs", "message"),
    [
        ([RecordSpec(b"a", b"", (), T0, 3), RecordSpec(b"b", b"", (), T0, 3)], {}, "must increase"),
        ([RecordSpec(b"a", b"", (), T0, 3)], {"last_offset_delta": 2}, "below"),
        ([], {}, "empty batch"),
        ([(b"a", b"")], {"timestamp_type": LOG_APPEND_TIME}, "max_timestamp"),
        ([(b"a", b"")], {"timestamp_type": 2}, "timestamp_type"),
        ([(b"a",)], {}, "a record is"),
    ],
)
def test_build_rejects_bad_input(specs, kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_batch(specs, **kwargs)


def test_empty_batch_for_the_cleaner() -> None:
    batch = build_batch(
        [],
        base_offset=100,
        last_offset_delta=4,
        producer_id=8,
        producer_epoch=1,
        base_sequence=17,
        max_timestamp=T0,
    )
    assert len(batch) == 61
    header, records = decode_batch(batch)
    assert records == []
    assert header.records_count == 0 and header.last_offset == 104
    assert (
        header.base_timestamp == -1 and header.max_timestamp == T0
    )  # as DefaultRecordBatch.writeEmptyHeader
    assert header.compression == 0
    assert (header.base_sequence, header.last_sequence) == (17, 21)


def test_log_append_time_batch() -> None:
    batch = build_batch(
        [(b"a", b"1", (), T0), (b"b", b"2", (), T0 + 9)],
        timestamp_type=LOG_APPEND_TIME,
        max_timestamp=T0 + 50,
    )
    header, records = decode_batch(batch)
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.base_timestamp == T0 and header.max_timestamp == T0 + 50
    assert [r.timestamp for r in records] == [T0 + 50, T0 + 50]
    assert [r.timestamp_delta for r in records] == [0, 9]


def test_delete_horizon() -> None:
    batch = build_batch([(b"a", None, (), T0 + 7)], delete_horizon_ms=T0)
    header, records = decode_batch(batch)
    assert header.has_delete_horizon and header.base_timestamp == T0
    assert records[0].timestamp == T0 + 7 and records[0].timestamp_delta == 7


def test_max_timestamp_override() -> None:
    header = validate_batch(build_batch([(b"a", b"", (), T0)], max_timestamp=T0 + 1))
    assert header.max_timestamp == T0 + 1


# ------------------------------------------------------------------------------------------ bad batches


def _batch(n: int = 3, codec: CompressionType = CompressionType.NONE) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, b"v%d" % i, (), T0) for i in range(n)], compression=codec))


def test_crc_mismatch() -> None:
    batch = _batch()
    batch[-2] ^= 0xFF  # the last byte of the last value
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(batch)
    # verify_crc=False skips only the CRC; the records themselves still decode (the value changed)
    assert decode_records(batch, verify_crc=False)[-1].value != b"v2"


def test_bad_magic() -> None:
    batch = _batch()
    batch[16] = 1
    with pytest.raises(InvalidMagicError):
        decode_records(batch)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_declared_count_larger_than_records(codec: CompressionType) -> None:
    batch = set_count(_batch(3, codec), 4)
    with pytest.raises((InvalidRecordError, CorruptRecordError), match=r"record 3|can hold at most"):
        decode_records(batch)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_declared_count_smaller_than_records(codec: CompressionType) -> None:
    batch = set_count(_batch(3, codec), 2)
    with pytest.raises(InvalidRecordError, match=r"declares 2 records but .* bytes remain"):
        decode_records(batch)
    with pytest.raises(InvalidRecordError):
        read_keys(batch)


def test_negative_count() -> None:
    with pytest.raises(CorruptRecordError, match="negative"):
        decode_records(set_count(_batch(), -1))


def test_huge_count_is_refused_cheaply() -> None:
    with pytest.raises(InvalidRecordError, match="can hold at most"):
        decode_records(set_count(_batch(), 2**31 - 1))


def test_record_length_mismatch() -> None:
    batch = _batch(2)
    # first record: length byte at 61; make it one byte longer than its fields
    assert batch[61] == 2 * 10
    batch[61] = 2 * 11
    with pytest.raises(CorruptRecordError, match="record 0"):
        decode_records(recrc(batch))


def test_key_longer_than_record() -> None:
    batch = _batch(1)
    # key length varint sits at 61 + 4
    batch[65] = 2 * 50
    with pytest.raises(CorruptRecordError, match="record 0: its key runs past"):
        decode_records(recrc(batch))


def test_trailing_bytes_after_records() -> None:
    batch = _batch(2) + b"\x00"
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(InvalidRecordError, match="1 bytes remain"):
        decode_records(recrc(batch))


def test_truncated_buffer() -> None:
    batch = bytes(_batch(2))
    with pytest.raises(CorruptRecordError, match="declares"):
        decode_records(batch[:-1])
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_records(batch[:30])


def test_unknown_codec_bits() -> None:
    batch = _batch()
    batch[22] |= 0x06  # codec 6
    from tidelog.records import UnsupportedCompressionError

    with pytest.raises(UnsupportedCompressionError):
        decode_records(recrc(batch))


def test_decompression_bound() -> None:
    batch = build_batch([(b"k", bytes(100_000), (), T0)], compression=CompressionType.GZIP)
    assert len(batch) < 1000
    with pytest.raises(DecompressionLimitError, match="50000"):
        decode_records(batch, max_decompressed=50_000)
    assert len(decode_records(batch, max_decompressed=200_000)[0].value) == 100_000


def test_invalid_utf8_header_key_survives_round_trip() -> None:
    batch = _batch(1)
    records = decode_records(build_batch([(b"k", b"v", [("ok", b"")], T0)]))
    assert records[0].headers == [("ok", b"")]
    raw = build_batch([(b"k", b"v", [(b"\xff\xfe", b"x")], T0)])  # bytes keys are accepted too
    decoded = decode_records(raw)
    assert build_batch(decoded) == raw
    assert batch  # unchanged helper batch still fine


# ------------------------------------------------------------------------------------------- more reads


def test_decode_batches_and_position() -> None:
    first = build_batch([(b"a", b"1", (), T0)], base_offset=0)
    second = build_batch(
        [(b"b", b"2", (), T0), (b"c", b"3", (), T0)], base_offset=1, compression=CompressionType.SNAPPY
    )
    buf = first + second + second[:20]
    found = list(decode_batches(buf))
    assert [(pos, h.base_offset, [r.key for r in recs]) for pos, h, recs in found] == [
        (0, 0, [b"a"]),
        (len(first), 1, [b"b", b"c"]),
    ]
    assert decode_records(buf, len(first))[1].offset == 2


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_read_keys(codec: CompressionType) -> None:
    batch = build_batch(
        [(b"a", b"1", [("h", b"v")], T0), (None, b"2", (), T0), (b"c" * 200, None, (), T0)], compression=codec
    )
    assert read_keys(batch) == [b"a", None, b"c" * 200]


# ------------------------------------------------------------------------------------------ control


@pytest.mark.parametrize("kind", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_end_txn_marker(kind: ControlRecordType) -> None:
    batch = build_control_batch(
        kind, producer_id=12, producer_epoch=3, coordinator_epoch=7, base_offset=99, timestamp=T0
    )
    header, records = decode_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (12, 3, -1)
    assert header.base_offset == 99 and header.records_count == 1 and header.compression == 0
    (record,) = records
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 7)
    assert record.timestamp == T0
    parsed = parse_control_record(record)
    assert parsed.type == kind and parsed.version == 0 and parsed.coordinator_epoch == 7 and parsed.is_end_txn


def test_parse_control_record_errors_and_other_types() -> None:
    with pytest.raises(InvalidRecordError, match="key of 2 bytes"):
        parse_control_record(Record(0, 0, b"\x00\x00", None))
    with pytest.raises(InvalidRecordError, match="key version"):
        parse_control_record(Record(0, 0, struct.pack(">hh", -1, 1), None))
    with pytest.raises(InvalidRecordError, match="value of 2 bytes"):
        parse_control_record(Record(0, 0, struct.pack(">hh", 0, 1), b"\x00\x00"))
    leader_change = parse_control_record(Record(0, 0, struct.pack(">hh", 0, 2), b"anything"))
    assert leader_change.type == ControlRecordType.LEADER_CHANGE and leader_change.coordinator_epoch is None
    assert parse_control_record(Record(0, 0, struct.pack(">hh", 0, 99), None)).type == 99
    with pytest.raises(ValueError):
        build_control_batch(2, 1, 1, 1, 0, T0)


# ------------------------------------------------------------------------------------------ append path


def test_rewrite_for_append_stamps_outside_crc() -> None:
    batch = _batch(3, CompressionType.LZ4)
    before = bytes(batch[17:])
    header = rewrite_batch_for_append(batch, base_offset=500, partition_leader_epoch=4)
    assert bytes(batch[17:]) == before  # CRC and everything it covers untouched
    assert header.base_offset == 500 and header.partition_leader_epoch == 4
    assert validate_batch(batch) == header
    assert [r.offset for r in decode_records(batch)] == [500, 501, 502]


def test_rewrite_for_append_log_append_time() -> None:
    batch = _batch(3, CompressionType.ZSTD)
    batch[22] |= 0x10  # make it transactional too (bit must survive)
    recrc(batch)
    old = validate_batch(batch)
    header = rewrite_batch_for_append(
        batch, base_offset=7, partition_leader_epoch=2, log_append_time=T0 + 1000
    )
    assert validate_batch(batch) == header  # CRC recomputed
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == T0 + 1000
    assert header.base_timestamp == old.base_timestamp  # Kafka's setMaxTimestamp leaves it alone
    assert header.compression == CompressionType.ZSTD and header.is_transactional
    assert [r.timestamp for r in decode_records(batch)] == [T0 + 1000] * 3
    # idempotent: a second identical rewrite changes nothing
    snapshot = bytes(batch)
    rewrite_batch_for_append(batch, base_offset=7, partition_leader_epoch=2, log_append_time=T0 + 1000)
    assert bytes(batch) == snapshot


def test_rewrite_at_position_in_a_larger_buffer() -> None:
    first = build_batch([(b"a", b"1", (), T0)])
    buf = bytearray(first + _batch(2))
    header = rewrite_batch_for_append(
        buf, base_offset=1, partition_leader_epoch=0, log_append_time=T0, pos=len(first)
    )
    assert validate_batch(buf, len(first)) == header
    assert validate_batch(buf).base_offset == 0  # the first batch is untouched
