"""Variable-length integers as Kafka writes them (``ByteUtils``), which is the protobuf encoding.

* unsigned varint: 7 bits per byte, least significant group first, high bit = "more bytes follow".
* varint (int32) / varlong (int64): zig-zag mapped first, ``(n << 1) ^ (n >> 31|63)``, so small magnitudes of
  either sign take few bytes; then written as an unsigned varint.

A varint is at most 5 bytes and a varlong at most 10. Like Kafka's reader, the bits the last allowed byte
carries beyond 32 (64) are dropped; a continuation bit on the last allowed byte is an error.

Decoders take ``(buf, pos)`` and return ``(value, new_pos)``; ``buf`` is anything indexable to ints
(``bytes``, ``bytearray``, ``memoryview`` of bytes). Truncated or over-long input raises
:class:`CorruptRecordError`. Encoders raise ``ValueError`` for values out of range (a programming error,
not corrupt data).
"""

from __future__ import annotations

from tidelog.records.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

# One-byte encodings of 0..127, so the common case of encoding is a list lookup.
ONE_BYTE: list[bytes] = [bytes((i,)) for i in range(128)]


def encode_unsigned(value: int) -> bytes:
    """Unsigned varint of a non-negative ``value`` (no range check: for callers that know the range; the one
    encoder every Python writer of record bytes uses)."""
    if value < 0x80:
        return ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_unsigned_varint(value: int) -> bytes:
    """Unsigned varint of ``value`` in 0..2**32-1 (Kafka's ``writeUnsignedVarint``)."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint must be >= 0, got {value}")
        return ONE_BYTE[value]
    if value > UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    return encode_unsigned(value)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of an int32 (Kafka's ``writeVarint``)."""
    if value > INT32_MAX or value < INT32_MIN:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Zig-zag varlong of an int64 (Kafka's ``writeVarlong``)."""
    if value > INT64_MAX or value < INT64_MIN:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_unsigned((value << 1) ^ (value >> 63))


def encode_zigzag_varlong(value: int) -> bytes:
    """Zig-zag varlong of a value the caller knows fits an int64 (no range check)."""
    return encode_unsigned((value << 1) ^ (value >> 63))


def zigzag(value: int) -> int:
    """Zig-zag map a signed int64 to an unsigned one."""
    return (value << 1) ^ (value >> 63)


def size_of_unsigned_varint(value: int) -> int:
    """Bytes needed for ``value`` as an unsigned varint."""
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def size_of_varint(value: int) -> int:
    """Bytes needed for the int32 ``value`` as a zig-zag varint."""
    return size_of_unsigned_varint((value << 1) ^ (value >> 31))


def size_of_varlong(value: int) -> int:
    """Bytes needed for the int64 ``value`` as a zig-zag varlong."""
    return size_of_unsigned_varint((value << 1) ^ (value >> 63))


def _read_unsigned(buf: Buffer, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    """Read the raw (not zig-zag decoded) groups of a varint of at most ``max_bytes``."""
    start = pos
    result = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
            if pos - start >= max_bytes:
                raise CorruptRecordError(f"{what} at position {start} is longer than {max_bytes} bytes")
    except IndexError:
        raise CorruptRecordError(f"truncated {what} at position {start}: input ends at {len(buf)}") from None


def decode_unsigned_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned varint (at most 5 bytes, value kept to 32 bits as Kafka does)."""
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptRecordError(
            f"truncated unsigned varint at position {pos}: input ends at {len(buf)}"
        ) from None
    if b < 0x80:
        return b, pos + 1
    raw, pos = _read_unsigned(buf, pos, MAX_VARINT_BYTES, "unsigned varint")
    return raw & UINT32_MAX, pos


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag varint (int32, at most 5 bytes)."""
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptRecordError(f"truncated varint at position {pos}: input ends at {len(buf)}") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_unsigned(buf, pos, MAX_VARINT_BYTES, "varint")
    raw &= UINT32_MAX
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag varlong (int64, at most 10 bytes)."""
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptRecordError(f"truncated varlong at position {pos}: input ends at {len(buf)}") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_unsigned(buf, pos, MAX_VARLONG_BYTES, "varlong")
    raw &= (1 << 64) - 1
    return (raw >> 1) ^ -(raw & 1), pos
