"""check_record_structure: the produce-time walk of every record (Kafka's LogValidator)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from records_helpers import recrc, set_count

from tidelog.errors import ErrorCode
from tidelog.records import (
    CompressionType,
    CorruptRecordError,
    DecompressionLimitError,
    InvalidMagicError,
    InvalidRecordError,
    RecordError,
    RecordSpec,
    build_batch,
    check_record_structure,
    decode_records,
    validate_batch,
)
from tidelog.records import batch as batch_module
from tidelog.records.header import validate_batch_tuple

try:
    from tidelog.records._recwalk import check_records as c_check_records
except ImportError:  # the optional C extension is not built: only the Python walker is tested
    c_check_records = None


@pytest.fixture(autouse=True, params=["c", "python"])
def walker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs against both record walkers: the C extension and the pure-Python fallback."""
    if request.param == "c":
        if c_check_records is None:
            pytest.skip("the C extension tidelog.records._recwalk is not built")
        monkeypatch.setattr(batch_module, "_c_check_records", c_check_records)
    else:
        monkeypatch.setattr(batch_module, "_c_check_records", None)
    return request.param

RECORDS = [
    (b"k%d" % i, b"value-%d" % i * (1 + i * 7), [("h", b"x"), ("empty", None)] if i % 2 else ())
    for i in range(20)
] + [(None, None), (b"", b""), (b"key", b"v" * 300, [("big", b"h" * 200)])]


def check(batch: bytes | bytearray, **kw: object) -> None:
    """Validate header + CRC as the log does, then the records, with both header forms."""
    header = validate_batch(batch)
    check_record_structure(batch, 0, header, **kw)  # type: ignore[arg-type]
    check_record_structure(memoryview(batch), 0, validate_batch_tuple(batch), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_valid_batches_of_every_codec_pass(codec: CompressionType) -> None:
    batch = build_batch(RECORDS, compression=codec, now_ms=1_000)
    check(batch)
    assert len(decode_records(batch)) == len(RECORDS)


def test_batch_at_a_position_inside_a_larger_buffer() -> None:
    batch = build_batch(RECORDS)
    buf = b"\xee" * 17 + batch + b"\xee" * 5
    check_record_structure(buf, 17, validate_batch(buf, 17))
    zbatch = build_batch(RECORDS, compression=CompressionType.ZSTD)
    buf = bytearray(b"\x00" * 3 + zbatch)
    check_record_structure(buf, 3, validate_batch(buf, 3))


def test_large_varints_pass() -> None:
    """Lengths, deltas and timestamps that need 2..5-byte varints take the slow paths."""
    recs = [RecordSpec(b"k" * 70_000, b"v" * 9_000, [("k" * 200, b"x" * 20_000)], 10**12 + i * 10**9, None)
            for i in range(3)]
    for codec in (CompressionType.NONE, CompressionType.GZIP):
        check(build_batch(recs, compression=codec))
    check(build_batch([r._replace(offset_delta=i * 300) for i, r in enumerate(recs)]))  # 2-byte deltas


def _record_length_lie() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"value")]))
    batch[61] = 0x7E  # zig-zag 63: runs past the end of the batch
    return recrc(batch)


def _records_missing() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v1"), (b"k", b"v2")]))
    struct.pack_into(">i", batch, 23, 2)  # lastOffsetDelta and recordsCount agree on 3, two records follow
    return set_count(batch, 3)


def _extra_record() -> bytearray:
    return set_count(bytearray(build_batch([(b"k", b"v1"), (b"k", b"v2")])), 1)


def _garbage() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v" * 40)]))
    batch[61:] = b"\xff" * (len(batch) - 61)
    return recrc(batch)


def _key_length_lie() -> bytearray:
    batch = bytearray(build_batch([(b"key", b"value")]))
    # record: length, attributes, tsDelta, offsetDelta, keyLength at 61+4
    assert batch[65] == 3 << 1
    batch[65] = 40 << 1  # the key now claims 40 bytes inside a record of 13
    return recrc(batch)


def _value_length_lie() -> bytearray:
    batch = bytearray(build_batch([(b"key", b"valu\x00")]))
    assert batch[69] == 5 << 1
    batch[69] = 4 << 1  # one byte short: the fields no longer fill the record
    return recrc(batch)


def _negative_header_key() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v", [("h", b"x")])]))
    i = batch.index(b"\x02h\x02x")  # header key length 1, "h", value length 1, "x"
    batch[i] = 0x01  # key length -1
    return recrc(batch)


def _header_count_lie() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v", [("h", b"x")])]))
    i = batch.index(b"\x02\x02h\x02x")  # header count 1 then the header
    batch[i] = 50 << 1
    return recrc(batch)


def _overlong_varint() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v" * 30)]))
    batch[61:67] = b"\xff" * 6  # a length varint longer than 5 bytes
    return recrc(batch)


def _truncated_record() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v")]))
    # keep the header, replace the record by a length claiming 6 bytes followed by only 6 bytes that stop
    # in the middle of the headers count
    batch[61:] = bytes([6 << 1, 0, 0, 0, 0x80, 0x80, 0x80])
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    return recrc(batch)


def _not_zstd() -> bytearray:
    batch = bytearray(build_batch([(b"k", b"v" * 40)]))
    struct.pack_into(">h", batch, 21, CompressionType.ZSTD)
    return recrc(batch)


@pytest.mark.parametrize(
    "make,error,words",
    [
        (_record_length_lie, CorruptRecordError, "declares length"),
        (_records_missing, InvalidRecordError, "declares 3 records"),
        (_extra_record, InvalidRecordError, "remain after the last"),
        (_garbage, RecordError, "record 0"),
        (_key_length_lie, CorruptRecordError, "key runs past"),
        (_value_length_lie, CorruptRecordError, "does not match its fields"),
        (_negative_header_key, CorruptRecordError, "header key length -1"),
        (_header_count_lie, CorruptRecordError, "header count 50"),
        (_overlong_varint, CorruptRecordError, "longer than 5 bytes"),
        (_truncated_record, CorruptRecordError, "record 0"),
        (_not_zstd, CorruptRecordError, "zstd"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[:30] if callable(v) else None,
)
def test_malformed_records_fail_with_a_named_error(make, error, words) -> None:  # type: ignore[no-untyped-def]
    batch = make()
    header = validate_batch(batch)  # the header and the CRC are fine: only the records are wrong
    with pytest.raises(error, match=words):
        check_record_structure(batch, 0, header)
    with pytest.raises(RecordError):
        decode_records(batch)  # and indeed no consumer could read it


def test_count_too_large_for_the_bytes_is_invalid_record() -> None:
    batch = set_count(bytearray(build_batch([(b"k", b"v")])), 1000)
    with pytest.raises(InvalidRecordError, match="1000 records"):
        check_record_structure(batch, 0, validate_batch(batch))


def test_compressed_inner_offsets_must_be_consecutive() -> None:
    recs = [RecordSpec(b"k", b"v", (), 5, d) for d in (0, 2, 3)]
    plain = build_batch(recs)
    check(plain)  # Kafka checks inner offsets of compressed batches only
    batch = build_batch(recs, compression=CompressionType.LZ4)
    with pytest.raises(InvalidRecordError, match=r"record 1 .* offset delta 2"):
        check_record_structure(batch, 0, validate_batch(batch))


def test_decompression_is_bounded() -> None:
    batch = build_batch([(None, b"\x00" * 100_000)], compression=CompressionType.GZIP)
    with pytest.raises(DecompressionLimitError):
        check_record_structure(batch, 0, validate_batch(batch), max_decompressed=10_000)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(list(CompressionType)),
    n=st.integers(1, 6),
    mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    count_delta=st.sampled_from([0, 0, 0, -1, 1]),
    data=st.data(),
)
def test_mutated_batches_pass_check_only_if_they_decode(codec, n, mutations, count_delta, data) -> None:  # type: ignore[no-untyped-def]
    values = data.draw(st.lists(st.none() | st.binary(max_size=80), min_size=n, max_size=n))
    hdrs = data.draw(st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=5)), max_size=2))
    batch = bytearray(build_batch([(b"k%d" % i, v, hdrs) for i, v in enumerate(values)], compression=codec,
                                  now_ms=0))
    body = len(batch) - 61
    for where, byte in mutations:
        batch[61 + where % body] = byte
    if count_delta:
        struct.pack_into(">i", batch, 57, max(0, n + count_delta))
    recrc(batch)
    header = validate_batch(batch)
    try:
        check_record_structure(batch, 0, header)
    except RecordError:
        checked = False
    else:
        checked = True
    try:
        decode_records(batch)
    except RecordError:
        decoded = False
    else:
        decoded = True
    if checked:
        assert decoded, "check passed but the batch does not decode"
    if codec == CompressionType.NONE:
        # uncompressed: the check is exactly the decoder's structural conditions
        assert checked == decoded


@pytest.mark.parametrize("magic,kafka_error", [(0, ErrorCode.INVALID_RECORD), (1, ErrorCode.INVALID_RECORD), (3, ErrorCode.CORRUPT_MESSAGE),
                                               (0x7F, ErrorCode.CORRUPT_MESSAGE), (-1, ErrorCode.CORRUPT_MESSAGE)])
def test_wrong_magic_maps_to_kafkas_error(magic: int, kafka_error: str) -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">b", batch, 16, magic)
    with pytest.raises(InvalidMagicError) as info:
        validate_batch_tuple(batch)
    assert info.value.kafka_error == kafka_error
    with pytest.raises(InvalidMagicError) as info2:
        validate_batch(batch)
    assert info2.value.kafka_error == kafka_error
