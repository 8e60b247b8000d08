"""Property tests: round trips over every codec, and hostile bytes only ever raise RecordError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from records_helpers import recrc

from tidelog.records import (
    LOG_APPEND_TIME,
    CompressionType,
    RecordError,
    RecordSpec,
    build_batch,
    decode_batch,
    decode_records,
    iter_batch_headers,
    read_keys,
    validate_batch,
)

optional_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=4)
timestamps = st.integers(0, 2**45)
record_specs = st.builds(
    RecordSpec, optional_bytes, optional_bytes, headers, timestamps, offset_delta=st.none()
)
codecs = st.sampled_from(list(CompressionType))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(record_specs, min_size=1, max_size=40),
    codec=codecs,
    base_offset=st.integers(0, 2**62),
    log_append=st.booleans(),
    gaps=st.lists(st.integers(1, 1000), min_size=40, max_size=40),
)
def test_build_decode_round_trip(specs, codec, base_offset: int, log_append: bool, gaps: list[int]) -> None:
    deltas = [sum(gaps[:i]) for i in range(len(specs))]
    specs = [spec._replace(offset_delta=d) for spec, d in zip(specs, deltas)]
    append_time = 2**44 if log_append else None
    batch = build_batch(
        specs,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=LOG_APPEND_TIME if log_append else 0,
        max_timestamp=append_time,
    )
    header, records = decode_batch(batch)
    assert header.compression == codec and header.records_count == len(specs)
    assert header.last_offset_delta == deltas[-1]
    assert header.max_timestamp == (append_time if log_append else max(s.timestamp for s in specs))
    for spec, rec, delta in zip(specs, records, deltas):
        assert rec.key == spec.key and rec.value == spec.value
        assert rec.headers == list(spec.headers)
        assert rec.offset == base_offset + delta
        assert rec.timestamp == (append_time if log_append else spec.timestamp)
    assert read_keys(batch) == [s.key for s in specs]
    # Record objects rebuild the identical batch (uncompressed bytes are deterministic)
    if codec == CompressionType.NONE and not log_append:
        assert build_batch(records, base_offset=base_offset) == batch


def _all_readers(buf: bytes) -> None:
    """Every reader either succeeds or raises a RecordError subclass."""
    for reader in (
        lambda: validate_batch(buf),
        lambda: decode_records(buf, max_decompressed=1 << 16),
        lambda: decode_records(buf, max_decompressed=1 << 16, verify_crc=False),
        lambda: read_keys(buf, max_decompressed=1 << 16, verify_crc=False),
        lambda: list(iter_batch_headers(buf)),
    ):
        try:
            reader()
        except RecordError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(buf: bytes) -> None:
    _all_readers(buf)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200), codec=st.integers(0, 7), count=st.integers(-3, 40))
def test_random_records_behind_a_valid_header(body: bytes, codec: int, count: int) -> None:
    """A well-formed header with a correct CRC over garbage records: the record parser must cope."""
    batch = bytearray(build_batch([], last_offset_delta=0)) + body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    batch[22] = codec
    struct.pack_into(">i", batch, 57, count)
    _all_readers(bytes(recrc(batch)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(record_specs, min_size=1, max_size=5),
    codec=codecs,
    flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.none() | st.integers(0),
    fix_crc=st.booleans(),
)
def test_mutated_valid_batches(specs, codec, flips, cut, fix_crc: bool) -> None:
    batch = bytearray(build_batch(specs, compression=codec))
    for where, byte in flips:
        # mostly mutate the records (past the 61-byte header) so the record parser is exercised
        batch[61 + where % (len(batch) - 61) if where % 4 else where % len(batch)] = byte
    if cut is not None:
        del batch[cut % len(batch) :]
    if fix_crc and len(batch) >= 61:
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        batch[16] = 2
        recrc(batch)
    _all_readers(bytes(batch))


@pytest.mark.parametrize("codec", list(CompressionType))
def test_every_single_byte_truncation(codec: CompressionType) -> None:
    batch = build_batch([(b"key", b"value" * 20, [("h", b"v")], 5)] * 3, compression=codec)
    for cut in range(len(batch)):
        _all_readers(batch[:cut])
        fixed = bytearray(batch[:cut])
        if len(fixed) >= 61:
            struct.pack_into(">i", fixed, 8, len(fixed) - 12)
            with pytest.raises(RecordError):
                decode_records(bytes(recrc(fixed)))
