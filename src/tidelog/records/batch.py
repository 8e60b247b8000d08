"""Build and decode the records of v2 batches (Kafka's ``DefaultRecordBatch`` / ``DefaultRecord``).

A record inside a batch (all varints zig-zag, see :mod:`tidelog.records.varint`)::

    length varint | attributes int8 (unused, 0) | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value
    | headersCount varint | [headerKeyLength varint | headerKey utf8 | headerValueLength varint | headerValue]

A length of -1 means null (key, value, header value). When the batch is compressed, everything after
recordsCount is one compressed block. The record offset is baseOffset + offsetDelta; its timestamp is
baseTimestamp + timestampDelta, except in a LogAppendTime batch, where every record reads as maxTimestamp.

Header keys are UTF-8; they are decoded with ``surrogateescape`` so that bytes which are not UTF-8 survive a
decode/build round trip unchanged (Kafka's Java reader would replace them instead of failing).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple, cast

from tidelog.records.compression import CompressionType, compress, decompress
from tidelog.records.crc import crc32c
from tidelog.records.errors import InvalidRecordError
from tidelog.records.header import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_FIELD,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_FIELD,
    CRC_OFFSET,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    H_ATTRIBUTES,
    H_BATCH_LENGTH,
    H_RECORDS_COUNT,
    LENGTH_OFFSET,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_FIELD,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    seal_batch,
    stamp_base_offset,
    stamp_partition_leader_epoch,
    validate_batch,
)
from tidelog.records.recwalk import MIN_RECORD_SIZE as MIN_RECORD_SIZE
from tidelog.records.recwalk import (
    R_KEY_LEN,
    R_KEY_POS,
    check_records,
    parse_headers,
    walk_records,
)
from tidelog.records.varint import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    ONE_BYTE,
    encode_unsigned,
    encode_zigzag_varlong,
)

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024
"""Default bound on the decompressed records of one batch (a compression bomb stops here)."""


_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

_NULL = b"\x01"  # zig-zag varint of -1


@dataclass(slots=True)
class Record:
    """One decoded record. ``offset`` and ``timestamp`` are absolute (as a consumer sees them)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    offset_delta: int = 0
    timestamp_delta: int = 0


class RecordSpec(NamedTuple):
    """A record to build. ``timestamp`` None = now; ``offset_delta`` None = its index in the batch."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


RecordLike = RecordSpec | Record | tuple


def _normalize(records: Iterable[RecordLike]) -> list[tuple]:
    """Records as (key, value, headers, timestamp, offset_delta) tuples."""
    out: list[tuple] = []
    append = out.append
    for rec in records:
        if type(rec) is Record:
            append((rec.key, rec.value, rec.headers, rec.timestamp, rec.offset_delta))
        elif type(rec) is RecordSpec:
            append(rec)
        else:
            seq = cast("tuple[Any, ...]", rec)  # the tuple forms (told apart by length)
            n = len(seq)
            if n == 5:
                append(tuple(seq))
            elif n == 2:
                append((seq[0], seq[1], (), None, None))
            elif n == 3:
                append((seq[0], seq[1], seq[2], None, None))
            elif n == 4:
                append((seq[0], seq[1], seq[2], seq[3], None))
            else:
                raise ValueError(
                    f"a record is (key, value[, headers[, timestamp[, offset_delta]]]), got {rec!r}"
                )
    return out


def _encode_records(recs: list[tuple], base_timestamp: int, now: int) -> tuple[bytes, int, int]:
    """Encode records; returns (bytes, max timestamp, last offset delta)."""
    parts: list[bytes] = []
    extend = parts.extend
    uv = encode_unsigned
    uv1 = ONE_BYTE
    max_ts = NO_TIMESTAMP
    prev_delta = -1
    for index, (key, value, headers, ts, od) in enumerate(recs):
        if ts is None:
            ts = now
        if od is None:
            od = index
        if od <= prev_delta or od > INT32_MAX:
            raise ValueError(
                f"record {index}: offset delta {od} must increase and fit an int32 (previous {prev_delta})"
            )
        prev_delta = od
        if ts > max_ts:
            max_ts = ts
        tsd = ts - base_timestamp
        if tsd > INT64_MAX or tsd < INT64_MIN:
            raise ValueError(f"record {index}: timestamp delta {tsd} does not fit an int64")
        body = [b"\x00", encode_zigzag_varlong(tsd), uv1[od << 1] if od < 64 else uv(od << 1)]
        if key is None:
            body.append(_NULL)
        else:
            n = len(key)
            body.append(uv1[n << 1] if n < 64 else uv(n << 1))
            body.append(key)
        if value is None:
            body.append(_NULL)
        else:
            n = len(value)
            body.append(uv1[n << 1] if n < 64 else uv(n << 1))
            body.append(value)
        if headers:
            n = len(headers)
            body.append(uv(n << 1))
            for hkey, hval in headers:
                hk = hkey.encode("utf-8", "surrogateescape") if type(hkey) is str else bytes(hkey)
                body.append(uv(len(hk) << 1))
                body.append(hk)
                if hval is None:
                    body.append(_NULL)
                else:
                    body.append(uv(len(hval) << 1))
                    body.append(hval)
        else:
            body.append(b"\x00")
        encoded = b"".join(body)
        n = len(encoded)
        extend((uv1[n << 1] if n < 64 else uv(n << 1), encoded))
    return b"".join(parts), max_ts, prev_delta


def build_batch(
    records: Iterable[RecordLike],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    now_ms: int | None = None,
) -> bytes:
    """Build one v2 batch and return its bytes (CRC-32C included).

    ``records`` are :class:`RecordSpec`, :class:`Record` (rebuilding keeps offset deltas and timestamps) or
    tuples ``(key, value[, headers[, timestamp[, offset_delta]]])``. Missing timestamps are ``now_ms``
    (default: the wall clock).

    * baseTimestamp is the first record's timestamp, or ``delete_horizon_ms`` when given (which also sets the
      delete-horizon attribute; record deltas are then relative to it, as in Kafka).
    * maxTimestamp is the largest record timestamp for CreateTime, unless ``max_timestamp`` overrides it; for
      LogAppendTime ``max_timestamp`` is the append time and is required.
    * ``last_offset_delta`` defaults to the last record's offset delta; it may be larger (the cleaner keeps the
      last offset of a batch whose tail it removed) and is required for an empty batch.
    * An empty batch is written as Kafka's ``writeEmptyHeader`` does: uncompressed, baseTimestamp -1 (or the
      delete horizon), maxTimestamp = ``max_timestamp`` or -1.
    """
    recs = _normalize(records)
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(
            f"timestamp_type must be CREATE_TIME (0) or LOG_APPEND_TIME (1), got {timestamp_type}"
        )
    if timestamp_type == LOG_APPEND_TIME and max_timestamp is None:
        raise ValueError("a LogAppendTime batch needs max_timestamp (the log append time)")
    codec = CompressionType(compression)
    if recs:
        now = now_ms
        if now is None and any(r[3] is None for r in recs):
            now = int(time.time() * 1000)
        first_ts: int = recs[0][3] if recs[0][3] is not None else (now or 0)  # now is set when one is missing
        base_timestamp = first_ts if delete_horizon_ms is None else delete_horizon_ms
        payload, record_max_ts, last_delta = _encode_records(recs, base_timestamp, now or 0)
        if last_offset_delta is None:
            last_offset_delta = last_delta
        elif last_offset_delta < last_delta:
            raise ValueError(
                f"last_offset_delta {last_offset_delta} is below the last record's delta {last_delta}"
            )
        if max_timestamp is None:
            max_timestamp = record_max_ts
        if codec != CompressionType.NONE:
            payload = compress(codec, payload, compression_level)
    else:
        if last_offset_delta is None:
            raise ValueError("an empty batch needs last_offset_delta")
        codec = CompressionType.NONE
        payload = b""
        base_timestamp = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
        if max_timestamp is None:
            max_timestamp = NO_TIMESTAMP
    if not 0 <= last_offset_delta <= INT32_MAX:
        raise ValueError(f"last_offset_delta {last_offset_delta} out of range")

    attributes = int(codec)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK

    size = RECORD_BATCH_OVERHEAD + len(payload)
    if size - LOG_OVERHEAD > INT32_MAX:
        raise ValueError(f"batch of {size} bytes does not fit an int32 length")
    return seal_batch(
        base_offset,
        partition_leader_epoch,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
        payload,
    )


# ---------------------------------------------------------------------------------------------- decoding


def parse_records(
    data: bytes, count: int, base_offset: int = 0, base_timestamp: int = 0, log_append_time: int | None = None
) -> list[Record]:
    """Decode ``count`` records from uncompressed record bytes; ``data`` must hold exactly those records
    (checked by the one record walk, :func:`tidelog.records.recwalk.walk_records`)."""
    records: list[Record] = []
    append = records.append
    new_record = Record
    for _end, tsd, od, kpos, klen, vpos, vlen, hpos, hcount in walk_records(data, 0, len(data), count):
        append(
            new_record(
                base_offset + od,
                base_timestamp + tsd,
                None if klen < 0 else data[kpos : kpos + klen],
                None if vlen < 0 else data[vpos : vpos + vlen],
                parse_headers(data, hpos, hcount)[0] if hcount else [],
                od,
                tsd,
            )
        )
    if log_append_time is not None:
        for rec in records:
            rec.timestamp = log_append_time
    return records


def _header_for_decode(buf: Buffer, pos: int, verify_crc: bool) -> BatchHeader:
    if verify_crc:
        return validate_batch(buf, pos)
    header = BatchHeader.parse(buf, pos)
    header.check_sizes(len(buf) - pos)
    return header


def _records_bytes(buf: Buffer, pos: int, header: BatchHeader, max_decompressed: int) -> bytes:
    payload = memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : pos + header.size]
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        return decompress(codec, payload, max_decompressed)
    return payload.tobytes()


def decode_batch(
    buf: Buffer, pos: int = 0, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, verify_crc: bool = True
) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at ``buf[pos:]`` (header, sizes, CRC) and decode all its records.

    ``verify_crc=False`` skips only the CRC (for a batch the caller validated already). Raises
    :class:`CorruptRecordError` / :class:`InvalidRecordError` (or another RecordError) naming what is wrong.
    """
    header = _header_for_decode(buf, pos, verify_crc)
    data = _records_bytes(buf, pos, header, max_decompressed)
    lat = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    records = parse_records(data, header.records_count, header.base_offset, header.base_timestamp, lat)
    return header, records


def decode_records(
    buf: Buffer, pos: int = 0, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, verify_crc: bool = True
) -> list[Record]:
    """The records of the batch at ``buf[pos:]`` (see :func:`decode_batch`)."""
    return decode_batch(buf, pos, max_decompressed=max_decompressed, verify_crc=verify_crc)[1]


def decode_batches(
    buf: Buffer, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> Iterator[tuple[int, BatchHeader, list[Record]]]:
    """Yield ``(position, header, records)`` for each whole batch in ``buf``; a partial tail is ignored."""
    pos = 0
    end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        (length,) = BATCH_LENGTH_FIELD.unpack_from(buf, pos + LENGTH_OFFSET)
        if length + LOG_OVERHEAD > end - pos:
            return
        header, records = decode_batch(buf, pos, max_decompressed=max_decompressed)
        yield pos, header, records
        pos += header.size


def read_keys(
    buf: Buffer, pos: int = 0, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, verify_crc: bool = True
) -> list[bytes | None]:
    """Only the keys of the batch's records (the compacted-topic "records must have keys" check); the records
    are walked and checked as :func:`parse_records` does, but values and headers are not built."""
    header = _header_for_decode(buf, pos, verify_crc)
    data = _records_bytes(buf, pos, header, max_decompressed)
    return [
        None if f[R_KEY_LEN] < 0 else data[f[R_KEY_POS] : f[R_KEY_POS] + f[R_KEY_LEN]]
        for f in walk_records(data, 0, len(data), header.records_count)
    ]


# ------------------------------------------------------------------------------------ produce-time check


def _load_c_walker():  # type: ignore[no-untyped-def]
    """``tidelog.records._recwalk.check_records`` (the C walk, built by setup.py when a compiler is there),
    or None: not built, or ``TIDELOG_PURE_PYTHON`` is set (to anything but "" or "0")."""
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from tidelog.records._recwalk import check_records
    except ImportError:
        return None
    return check_records


_c_check_records = _load_c_walker()
"""The C record walker used by :func:`check_record_structure`, or None for the pure-Python
:func:`_walk_records` (same checks, same exceptions and messages)."""


def _load_c(name: str):  # type: ignore[no-untyped-def]
    """``tidelog.records._recwalk.<name>`` when the C walker is in use, else None (also for an extension built
    before that function existed)."""
    if _c_check_records is None:
        return None
    from tidelog.records import _recwalk

    return getattr(_recwalk, name, None)


c_validate_single_batch = _load_c("validate_single_batch")
"""``c_validate_single_batch(buf, max_size, check_crc, walk=True)``: the produce-time check of ``buf`` as exactly
one v2 batch in one C call (header and magic, the sizes of :func:`validate_batch_tuple` plus ``size == len(buf)``,
the CRC-32C when ``check_crc``, and for an uncompressed batch, when ``walk``, the record walk of
:func:`check_record_structure`),
returning the header tuple of :func:`validate_batch_tuple`, or None when any check fails (it raises nothing:
the caller then runs the Python checks, which raise the exact error in their order). None itself when the C
extension is not built or ``TIDELOG_PURE_PYTHON`` is set."""


def check_record_structure(
    buf: Buffer,
    pos: int,
    header: BatchHeader | tuple,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> int:
    """Check that the records of the batch at ``buf[pos:]`` decode, without decoding them (Kafka's
    ``LogValidator`` walk of every record on a client produce).

    ``header`` is the batch's validated header, a :class:`BatchHeader` or the plain tuple of
    ``validate_batch_tuple`` (sizes and CRC are the caller's job). A compressed batch is decompressed with the
    bounded :func:`decompress` first; its records must also carry consecutive offset deltas 0, 1, 2, ... as
    Kafka requires of the inner records of a compressed batch.

    Depth: every record is walked field by field (length, attributes, timestampDelta, offsetDelta, key and
    value lengths, header count, every header's key and value lengths), every length must stay inside its
    record, the fields must fill the record exactly, the records must tile the records area exactly and
    their number must be recordsCount. These are exactly the conditions under which :func:`parse_records`
    fails, so a batch that passes is one every consumer can decode. Walking lengths only would be about
    half the cost but would let a record whose key or value length lies through to disk (measured in
    ``bench/record_check_bench.py``). Nothing is copied or built per record: ints are read by indexing the
    bytes, varints of one byte (every length under 64) are decoded inline.

    Returns the size of the decompressed records (0 for an uncompressed batch).

    Raises :class:`CorruptRecordError` (framing: a length past its record or the batch, an undecodable or
    over-long varint, bad compressed data, a decompressed size over ``max_decompressed``) or
    :class:`InvalidRecordError` (recordsCount does not match the records present, inner offsets of a
    compressed batch not consecutive), each naming the record and what is wrong.

    The walk runs in C (``tidelog.records._recwalk``: same checks and messages, 40-140x faster on
    uncompressed batches, the GIL released for records areas over 64 KiB) when that optional extension is
    built and ``TIDELOG_PURE_PYTHON`` is not set; otherwise in Python (:func:`_walk_records`).
    """
    if type(header) is tuple:
        size = header[H_BATCH_LENGTH] + LOG_OVERHEAD
        attributes = header[H_ATTRIBUTES]
        count = header[H_RECORDS_COUNT]
    else:
        assert isinstance(header, BatchHeader)
        size = header.size
        attributes = header.attributes
        count = header.records_count
    codec = attributes & COMPRESSION_MASK
    c_walk = _c_check_records
    if codec:
        data = decompress(codec, memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : pos + size], max_decompressed)
        if c_walk is not None:
            c_walk(data, count, True)
        else:
            _walk_records(data, 0, len(data), count, True)
        return len(data)
    elif c_walk is not None:
        # no copy: the C walk reads the records area in place (and drops the GIL for large batches)
        c_walk(buf, count, False, pos + RECORD_BATCH_OVERHEAD, pos + size)
    elif pos == 0 and size == len(buf) and type(buf) is bytes:
        _walk_records(buf, RECORD_BATCH_OVERHEAD, size, count, False)
    else:
        # indexing bytes is faster than indexing a memoryview; one copy of the records area is cheaper than
        # the per-record work it speeds up
        data = bytes(memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : pos + size])
        _walk_records(data, 0, len(data), count, False)
    return 0


_walk_records = check_records
"""The pure-Python walk of :func:`check_record_structure` (:func:`tidelog.records.recwalk.check_records`)."""


# ---------------------------------------------------------------------------------------- control records


class ControlRecordType(IntEnum):
    """Type of a control record, from its key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class ControlRecord(NamedTuple):
    """A parsed control record. ``coordinator_epoch`` is set for end-txn markers (ABORT/COMMIT) only."""

    type: int
    version: int
    coordinator_epoch: int | None = None

    @property
    def is_end_txn(self) -> bool:
        return self.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT)


def build_control_batch(
    kind: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int,
    timestamp: int,
    *,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """An end-transaction marker batch (``kind`` COMMIT=1 or ABORT=0), as Kafka's
    ``MemoryRecords.withEndTransactionMarker`` writes it: transactional control batch, one record, no
    sequence, CreateTime, uncompressed."""
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError(f"end-txn marker kind must be ABORT (0) or COMMIT (1), got {kind}")
    key = _CONTROL_KEY.pack(0, kind)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [RecordSpec(key, value, (), timestamp, 0)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record: Record) -> ControlRecord:
    """Read a control record's key (version int16, type int16) and, for end-txn markers, its value
    (version int16, coordinatorEpoch int32). Unknown types are returned as their raw number."""
    key = record.key
    if key is None or len(key) < 4:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has a key of {0 if key is None else len(key)} bytes, need 4"
        )
    version, ctype = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has invalid key version {version}"
        )
    if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        try:
            ctype = ControlRecordType(ctype)
        except ValueError:
            pass
        return ControlRecord(ctype, version)
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidRecordError(
            f"end-txn marker at offset {record.offset} has a value of {0 if value is None else len(value)} bytes, need 6"
        )
    value_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecordError(
            f"end-txn marker at offset {record.offset} has invalid value version {value_version}"
        )
    return ControlRecord(ControlRecordType(ctype), version, coordinator_epoch)


# ------------------------------------------------------------------------------------------------ append


def rewrite_batch_for_append(
    batch: bytearray | memoryview,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    log_append_time: int | None = None,
    pos: int = 0,
) -> BatchHeader:
    """Assign offsets and the leader epoch in place; return the updated header.

    baseOffset and partitionLeaderEpoch sit outside the CRC. With ``log_append_time`` the batch becomes a
    LogAppendTime batch as Kafka's ``DefaultRecordBatch.setMaxTimestamp`` does it: the timestamp-type bit and
    maxTimestamp are written (other attribute bits and baseTimestamp are kept) and the CRC is recomputed, only
    when something changed. The caller is expected to have validated the batch.
    """
    stamp_base_offset(batch, base_offset, pos)
    stamp_partition_leader_epoch(batch, partition_leader_epoch, pos)
    if log_append_time is not None:
        (attributes,) = ATTRIBUTES_FIELD.unpack_from(batch, pos + ATTRIBUTES_OFFSET)
        (current_max,) = MAX_TIMESTAMP_FIELD.unpack_from(batch, pos + MAX_TIMESTAMP_OFFSET)
        new_attributes = attributes | TIMESTAMP_TYPE_MASK
        if new_attributes != attributes or current_max != log_append_time:
            (length,) = BATCH_LENGTH_FIELD.unpack_from(batch, pos + LENGTH_OFFSET)
            ATTRIBUTES_FIELD.pack_into(batch, pos + ATTRIBUTES_OFFSET, new_attributes)
            MAX_TIMESTAMP_FIELD.pack_into(batch, pos + MAX_TIMESTAMP_OFFSET, log_append_time)
            with memoryview(batch) as view:
                crc = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length])
            CRC_FIELD.pack_into(batch, pos + CRC_OFFSET, crc)
    return BatchHeader.parse(batch, pos)
