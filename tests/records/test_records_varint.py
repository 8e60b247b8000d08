"""Varint / varlong / unsigned varint against encodings derived by hand from the protobuf rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.records.errors import CorruptRecordError
from tidelog.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)

# zig-zag: 0->0, -1->1, 1->2, -2->3, 63->126, -64->127, 64->128 (two bytes: 0x80 0x01).
VARINT_CASES = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (150, "ac02"),  # zig-zag 300, the protobuf documentation example
    (INT32_MAX, "feffffff0f"),  # zig-zag 0xFFFFFFFE
    (INT32_MIN, "ffffffff0f"),  # zig-zag 0xFFFFFFFF
]

VARLONG_CASES = [
    *VARINT_CASES,
    (INT64_MAX, "feffffffffffffffff01"),  # zig-zag 2**64 - 2
    (INT64_MIN, "ffffffffffffffffff01"),  # zig-zag 2**64 - 1
    (1 << 31, "8080808010"),  # zig-zag 2**32 needs 33 bits: 5 bytes
]


@pytest.mark.parametrize(("value", "hexbytes"), VARINT_CASES)
def test_varint_known_encodings(value: int, hexbytes: str) -> None:
    encoded = bytes.fromhex(hexbytes)
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@pytest.mark.parametrize(("value", "hexbytes"), VARLONG_CASES)
def test_varlong_known_encodings(value: int, hexbytes: str) -> None:
    encoded = bytes.fromhex(hexbytes)
    assert encode_varlong(value) == encoded
    assert decode_varlong(encoded) == (value, len(encoded))
    assert size_of_varlong(value) == len(encoded)


@pytest.mark.parametrize(
    ("value", "hexbytes"),
    [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**32 - 1, "ffffffff0f")],
)
def test_unsigned_varint_known_encodings(value: int, hexbytes: str) -> None:
    encoded = bytes.fromhex(hexbytes)
    assert encode_unsigned_varint(value) == encoded
    assert decode_unsigned_varint(encoded) == (value, len(encoded))
    assert size_of_unsigned_varint(value) == len(encoded)


def test_decode_at_position_and_from_memoryview() -> None:
    buf = b"\xaa\xbb" + encode_varint(-300) + encode_varlong(1 << 40)
    value, pos = decode_varint(memoryview(buf), 2)
    assert value == -300
    assert decode_varlong(bytearray(buf), pos) == (1 << 40, len(buf))


@pytest.mark.parametrize("decoder", [decode_varint, decode_varlong, decode_unsigned_varint])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x02\x80"])
def test_truncated_input_is_corrupt(decoder, data: bytes) -> None:
    pos = 1 if data == b"\x02\x80" else 0
    with pytest.raises(CorruptRecordError, match="truncated"):
        decoder(data, pos)


def test_too_long() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\xff" * 5 + b"\x01")
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_unsigned_varint(b"\x80" * 5 + b"\x00")
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\xff" * 10 + b"\x01")
    # exactly 10 bytes is fine for a varlong but not for a varint
    assert decode_varlong(b"\x80" * 9 + b"\x00") == (0, 10)


def test_fifth_byte_high_bits_are_dropped_like_kafka() -> None:
    # Kafka's readVarint shifts the 5th byte left by 28 in a 32-bit int: bits above 32 fall off.
    assert decode_varint(b"\xff\xff\xff\xff\x7f") == (INT32_MIN, 5)
    assert decode_unsigned_varint(b"\xff\xff\xff\xff\x7f") == (2**32 - 1, 5)


@pytest.mark.parametrize(
    ("encoder", "value"),
    [
        (encode_varint, INT32_MAX + 1),
        (encode_varint, INT32_MIN - 1),
        (encode_varlong, INT64_MAX + 1),
        (encode_varlong, INT64_MIN - 1),
        (encode_unsigned_varint, -1),
        (encode_unsigned_varint, 2**32),
    ],
)
def test_encode_out_of_range(encoder, value: int) -> None:
    with pytest.raises(ValueError):
        encoder(value)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(encoded + b"\x00") == (value, len(encoded))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


@given(st.integers(0, 2**32 - 1))
def test_unsigned_round_trip(value: int) -> None:
    encoded = encode_unsigned_varint(value)
    assert decode_unsigned_varint(encoded) == (value, len(encoded))


@given(st.binary(max_size=12), st.integers(0, 12))
def test_random_bytes_only_raise_corrupt(data: bytes, pos: int) -> None:
    for decoder in (decode_varint, decode_varlong, decode_unsigned_varint):
        try:
            _, new_pos = decoder(data, pos)
        except CorruptRecordError:
            continue
        assert pos < new_pos <= len(data)
