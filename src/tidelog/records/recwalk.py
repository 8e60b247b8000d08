"""The one Python walk over the records of a v2 batch (Kafka's ``DefaultRecord.readFrom``), the reference that
every Python reader uses (batch decoding and checking, the time index scan of the log, the cleaner's map build
and filter, dump-log) and that the C cursor (``_recwalk.h``) mirrors.

A record (all varints zig-zag, see :mod:`tidelog.records.varint`)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value
    | headersCount varint | [headerKeyLength varint | headerKey | headerValueLength varint | headerValue]

:func:`walk_records` checks everything :func:`tidelog.records.batch.parse_records` needs to decode a record
(every length inside its record, the fields filling the record exactly, the records tiling the area exactly,
their number) and yields, per record, where its parts are; it builds nothing. One-byte varints (every length
under 64) are decoded inline, which is what makes a Python walk affordable.

The record-length bound: Kafka's smallest record body is attributes (1) + timestampDelta (1) + offsetDelta (1)
+ keyLength -1 (1) + valueLength -1 (1) + headersCount 0 (1) = 6 bytes, 7 with its length varint
(``DefaultRecord.MAX_RECORD_OVERHEAD``'s counterpart; a body under 6 bytes cannot hold the six fields), so a
declared length under :data:`MIN_RECORD_BODY` is corrupt, and a batch of ``n`` record bytes holds at most
``n // MIN_RECORD_SIZE`` records.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from tidelog.records.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.varint import decode_varint, decode_varlong

MIN_RECORD_SIZE = 7
"""Smallest encoded record: length, attributes, timestampDelta, offsetDelta, key -1, value -1, 0 headers."""
MIN_RECORD_BODY = MIN_RECORD_SIZE - 1
"""Smallest declared record length (the bytes after the length varint)."""

#: what :func:`walk_records` yields per record: ``(end, timestamp_delta, offset_delta, key_pos, key_len,
#: value_pos, value_len, headers_pos, header_count)``; a length < 0 is null (its ``*_pos`` is where the bytes
#: would be); the record starts where the previous one ended.
RecordFields = tuple[int, int, int, int, int, int, int, int, int]

R_END = 0
R_TIMESTAMP_DELTA = 1
R_OFFSET_DELTA = 2
R_KEY_POS = 3
R_KEY_LEN = 4
R_VALUE_POS = 5
R_VALUE_LEN = 6
R_HEADERS_POS = 7
R_HEADER_COUNT = 8


def check_count(count: int, n: int) -> None:
    """``count`` records cannot fit ``n`` bytes: :class:`InvalidRecordError`."""
    if count * MIN_RECORD_SIZE > n:
        raise InvalidRecordError(
            f"batch declares {count} records but its {n} bytes of records can hold at most {n // MIN_RECORD_SIZE}"
        )


def truncated(index: int, pos: int, n: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record {index} is truncated: it runs past the end of the records ({n} bytes) near byte {pos}"
    )


def not_consecutive(index: int, offset_delta: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"record {index} of a compressed batch has offset delta {offset_delta}: the inner records of a "
        f"compressed batch must have consecutive offsets from 0"
    )


def walk_records(data: bytes, pos: int, n: int, count: int, consecutive: bool = False) -> Iterator[RecordFields]:
    """The ``count`` records of ``data[pos:n]``, each checked and yielded as :data:`RecordFields`.

    ``consecutive``: offset deltas must be 0, 1, 2, ... (the inner records of a compressed batch).
    Positions in messages are relative to ``pos``. Raises :class:`CorruptRecordError` (framing) or
    :class:`InvalidRecordError` (recordsCount does not match the records present, offsets not consecutive)
    naming the record; the generator raises at the record that is wrong, after yielding the good ones before it.
    """
    start = pos
    check_count(count, n - pos)
    dvarint = decode_varint
    dvarlong = decode_varlong
    index = 0
    try:
        for index in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = dvarint(data, pos)
            end = pos + length
            if length < MIN_RECORD_BODY or end > n:
                raise CorruptRecordError(
                    f"record {index} at byte {pos - start} declares length {length}, but {n - pos} bytes remain"
                )
            # attributes (unused in v2), then timestampDelta
            b = data[pos + 1]
            if b < 0x80:
                tsd = (b >> 1) ^ -(b & 1)
                pos += 2
            elif data[pos + 2] < 0x80:
                b = (b & 0x7F) | (data[pos + 2] << 7)
                tsd = (b >> 1) ^ -(b & 1)
                pos += 3
            else:
                tsd, pos = dvarlong(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                od = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                od = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                od, pos = dvarint(data, pos)
            if consecutive and od != index:
                raise not_consecutive(index, od)
            # key and value: a zig-zag varint, even = a length, odd = negative = null
            b = data[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                klen = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                klen, pos = dvarint(data, pos)
            kpos = pos
            if klen > 0:
                pos += klen
            if pos > end:
                raise CorruptRecordError(f"record {index}: its key runs past the record's end")
            b = data[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                vlen = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                vlen, pos = dvarint(data, pos)
            vpos = pos
            if vlen > 0:
                pos += vlen
            if pos > end:
                raise CorruptRecordError(f"record {index}: its value runs past the record's end")
            b = data[pos]
            if b == 0:
                pos += 1
                hpos = pos
                hcount = 0
            else:
                if b < 0x80:
                    hcount = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    hcount, pos = dvarint(data, pos)
                if hcount < 0 or 2 * hcount > end - pos:
                    raise CorruptRecordError(f"record {index}: invalid header count {hcount}")
                hpos = pos
                for _ in range(hcount):
                    hklen, pos = dvarint(data, pos)
                    if hklen < 0:
                        raise CorruptRecordError(f"record {index}: header key length {hklen} is negative")
                    pos += hklen
                    if pos > end:
                        raise CorruptRecordError(f"record {index}: a header key runs past the record's end")
                    hvlen, pos = dvarint(data, pos)
                    if hvlen > 0:
                        pos += hvlen
                        if pos > end:
                            raise CorruptRecordError(f"record {index}: a header value runs past the record's end")
            if pos != end:
                raise CorruptRecordError(
                    f"record {index}: declared length {length} does not match its fields "
                    f"({length + pos - end} bytes)"
                )
            yield end, tsd, od, kpos, klen, vpos, vlen, hpos, hcount
    except IndexError:
        raise truncated(index, pos - start, n - start) from None
    except CorruptRecordError as exc:
        if str(exc).startswith("record "):
            raise
        raise CorruptRecordError(f"record {index}: {exc}") from None  # a varint error: name the record
    if pos != n:
        raise InvalidRecordError(f"batch declares {count} records but {n - pos} bytes remain after the last one")


def check_records(data: bytes, pos: int, n: int, count: int, consecutive: bool = False) -> None:
    """:func:`walk_records` for its checks alone (consumed in C: no Python loop over the records)."""
    deque(walk_records(data, pos, n, count, consecutive), maxlen=0)


def parse_headers(data: bytes, pos: int, count: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """The ``count`` headers at ``data[pos:]`` of a record :func:`walk_records` checked; keys decoded as UTF-8
    with ``surrogateescape`` (bytes that are not UTF-8 survive a round trip)."""
    headers: list[tuple[str, bytes | None]] = []
    append = headers.append
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = decode_varint(data, pos)
        kend = pos + klen
        hkey = data[pos:kend].decode("utf-8", "surrogateescape")
        b = data[kend]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos = kend + 1
        else:
            vlen, pos = decode_varint(data, kend)
        if vlen < 0:
            append((hkey, None))
        else:
            append((hkey, data[pos : pos + vlen]))
            pos += vlen
    return headers, pos
