"""The 61-byte header of a v2 record batch, read and validated without decoding records.

Layout (big-endian), from Kafka's DefaultRecordBatch::

    0  baseOffset            int64
    8  batchLength           int32   (bytes after this field: total size - 12)
    12 partitionLeaderEpoch  int32   (outside the CRC: the broker stamps it in place)
    16 magic                 int8    (= 2)
    17 crc                   uint32  (CRC-32C of bytes 21..end)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...

This is the hot path of produce, fetch and recovery: one ``struct.unpack_from`` and one CRC call.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from tidelog.records.crc import _crc32c as _crc32c_raw
from tidelog.records.crc import crc32c
from tidelog.records.errors import CorruptRecordError, InvalidMagicError, RecordTooLargeError

MAGIC = 2
LOG_OVERHEAD = 12  # baseOffset + batchLength
RECORD_BATCH_OVERHEAD = 61
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43  # producerId, producerEpoch, baseSequence follow each other (PRODUCER_FIELDS)
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
#: the low byte of the big-endian attributes: every attribute bit below (the masks) sits in it, so a reader that
#: only needs the codec or the transactional/control bits reads ``buf[pos + ATTRIBUTES_LOW_OFFSET]``
ATTRIBUTES_LOW_OFFSET = ATTRIBUTES_OFFSET + 1
#: the high byte of producerId: below 0x80 when the batch has a producer id (producerId >= 0)
PRODUCER_ID_HIGH_OFFSET = PRODUCER_ID_OFFSET

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1

#: the whole 61-byte header, fields in the order of the layout above (see the ``H_*`` positions below)
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
#: baseOffset, batchLength: the first LOG_OVERHEAD bytes of a batch
LOG_HEADER = struct.Struct(">qi")
#: baseOffset, batchLength, partitionLeaderEpoch: the first 16 bytes, all outside the CRC (what the leader stamps)
STAMPED_HEAD = struct.Struct(">qii")
STAMPED_HEAD_SIZE = 16
# single fields, each at its ``*_OFFSET``
BASE_OFFSET_FIELD = struct.Struct(">q")
BATCH_LENGTH_FIELD = struct.Struct(">i")
PARTITION_LEADER_EPOCH_FIELD = struct.Struct(">i")
CRC_FIELD = struct.Struct(">I")
ATTRIBUTES_FIELD = struct.Struct(">h")
MAX_TIMESTAMP_FIELD = struct.Struct(">q")
LAST_OFFSET_DELTA_FIELD = struct.Struct(">i")
PRODUCER_ID_FIELD = struct.Struct(">q")
PRODUCER_EPOCH_FIELD = struct.Struct(">h")
#: producerId, producerEpoch, baseSequence, at ``PRODUCER_ID_OFFSET`` (inside the CRC)
PRODUCER_FIELDS = struct.Struct(">qhi")


@dataclass(slots=True, frozen=True)
class BatchHeader:
    """The decoded fixed header of one v2 batch. ``size`` is the whole batch in bytes."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
        """Decode the header at ``buf[pos:]``; checks only that 61 bytes and magic 2 are there."""
        if len(buf) - pos < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"truncated batch header: {len(buf) - pos} bytes at position {pos}, need {RECORD_BATCH_OVERHEAD}"
            )
        header = cls(*BATCH_HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC:
            raise InvalidMagicError(
                f"unsupported magic {header.magic} at position {pos} (only v2 batches)", header.magic
            )
        return header

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def check_sizes(self, available: int, max_size: int | None = None) -> None:
        """Check the declared length against the bytes present and against ``max_size``."""
        if self.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"batch length {self.batch_length} is smaller than the v2 header ({RECORD_BATCH_OVERHEAD - LOG_OVERHEAD})"
            )
        if max_size is not None and self.size > max_size:
            raise RecordTooLargeError(f"batch of {self.size} bytes exceeds max.message.bytes {max_size}")
        if self.size > available:
            raise CorruptRecordError(f"batch declares {self.size} bytes but only {available} are present")
        if self.last_offset_delta < 0 or self.records_count < 0:
            raise CorruptRecordError(
                f"negative lastOffsetDelta {self.last_offset_delta} or recordsCount {self.records_count}"
            )

    def check_crc(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        """Compare the stored CRC with CRC-32C over attributes..end of batch."""
        end = pos + self.size
        with memoryview(buf) as view:
            actual = crc32c(view[pos + ATTRIBUTES_OFFSET : end])
        if actual != self.crc:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset} is corrupt: stored CRC {self.crc:#010x}, computed {actual:#010x}"
            )


def validate_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, max_size: int | None = None, available: int | None = None
) -> BatchHeader:
    """Header view + size checks + one CRC call: everything except decoding the records."""
    header = BatchHeader.parse(buf, pos)
    header.check_sizes((len(buf) - pos) if available is None else available, max_size)
    header.check_crc(buf, pos)
    return header


# ------------------------------------------------------------------------------------------ lean tuple path
# The hot paths of the storage layer (append, recovery, lookups) take the header as the plain tuple that
# ``BATCH_HEADER.unpack_from`` returns: building a frozen dataclass costs more than the unpack and the CRC of a
# 16 KiB batch together.  The field positions in that tuple:
H_BASE_OFFSET = 0
H_BATCH_LENGTH = 1
H_PARTITION_LEADER_EPOCH = 2
H_MAGIC = 3
H_CRC = 4
H_ATTRIBUTES = 5
H_LAST_OFFSET_DELTA = 6
H_BASE_TIMESTAMP = 7
H_MAX_TIMESTAMP = 8
H_PRODUCER_ID = 9
H_PRODUCER_EPOCH = 10
H_BASE_SEQUENCE = 11
H_RECORDS_COUNT = 12

HeaderTuple = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]

#: ``unpack_header_tuple(buf, pos)``: the 13 header fields at ``buf[pos:]``, no checks (61 bytes must be there)
unpack_header_tuple = BATCH_HEADER.unpack_from


def parse_header_tuple(buf: bytes | bytearray | memoryview, pos: int = 0) -> HeaderTuple:
    """:meth:`BatchHeader.parse` as a plain tuple (same checks, same errors)."""
    if len(buf) - pos < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"truncated batch header: {len(buf) - pos} bytes at position {pos}, need {RECORD_BATCH_OVERHEAD}"
        )
    fields: HeaderTuple = BATCH_HEADER.unpack_from(buf, pos)
    if fields[H_MAGIC] != MAGIC:
        raise InvalidMagicError(f"unsupported magic {fields[H_MAGIC]} at position {pos} (only v2 batches)", fields[H_MAGIC])
    return fields


def validate_batch_tuple(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    max_size: int | None = None,
    available: int | None = None,
    *,
    check_crc: bool = True,
) -> HeaderTuple:
    """:func:`validate_batch` returning the header as a plain tuple: the same checks in the same order, with
    the same errors (header, magic, sizes, one CRC-32C call), without building a :class:`BatchHeader`.

    ``check_crc=False`` leaves the CRC to the caller (:func:`check_batch_crc`), e.g. to checksum a large
    batch right after writing it, while it is still in the CPU cache.
    """
    n = len(buf) - pos
    if n < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"truncated batch header: {n} bytes at position {pos}, need {RECORD_BATCH_OVERHEAD}"
        )
    fields: HeaderTuple = BATCH_HEADER.unpack_from(buf, pos)
    _, batch_length, _, magic, crc, _, last_offset_delta, _, _, _, _, _, records_count = fields
    if magic != MAGIC:
        raise InvalidMagicError(f"unsupported magic {magic} at position {pos} (only v2 batches)", magic)
    size = batch_length + LOG_OVERHEAD
    if (
        batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
        or (max_size is not None and size > max_size)
        or size > (n if available is None else available)
        or last_offset_delta < 0
        or records_count < 0
    ):
        BatchHeader(*fields).check_sizes(n if available is None else available, max_size)  # raises
    if not check_crc:
        return fields
    # the slice's view is released as soon as the call returns (refcount), no context manager needed
    actual = _crc32c_raw(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    if actual != crc:
        raise CorruptRecordError(
            f"batch at offset {fields[H_BASE_OFFSET]} is corrupt: stored CRC {crc:#010x}, computed {actual:#010x}"
        )
    return fields


def check_batch_crc(buf: bytes | bytearray | memoryview, fields: HeaderTuple, pos: int = 0) -> None:
    """The CRC-32C check of :func:`validate_batch_tuple` alone, for a header it returned unchecked."""
    actual = _crc32c_raw(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + fields[H_BATCH_LENGTH] + LOG_OVERHEAD])
    if actual != fields[H_CRC]:
        raise CorruptRecordError(
            f"batch at offset {fields[H_BASE_OFFSET]} is corrupt: stored CRC {fields[H_CRC]:#010x}, computed {actual:#010x}"
        )


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Whole size of the batch starting at ``pos`` from its first 12 bytes, or None if fewer are present."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return LOG_HEADER.unpack_from(buf, pos)[1] + LOG_OVERHEAD


def iter_batch_headers(buf: bytes | bytearray | memoryview, validate: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each whole batch in ``buf``; stops at a partial trailing batch.

    With ``validate`` each batch's sizes and CRC are checked and the first bad one raises.
    """
    pos = 0
    end = len(buf)
    while end - pos >= RECORD_BATCH_OVERHEAD:
        size = peek_size(buf, pos)
        assert size is not None
        if size > end - pos:
            return
        header = validate_batch(buf, pos) if validate else BatchHeader.parse(buf, pos)
        yield pos, header
        pos += header.size


def stamp_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Write baseOffset in place (outside the CRC, so the CRC stays valid)."""
    BASE_OFFSET_FIELD.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def stamp_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Write partitionLeaderEpoch in place (outside the CRC)."""
    PARTITION_LEADER_EPOCH_FIELD.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def restamp_crc(buf: bytearray | memoryview) -> None:
    """Recompute the CRC-32C of the one batch that fills ``buf`` (attributes..end) after a field it covers was
    changed in place (attributes, producer id/epoch/sequence, ...)."""
    with memoryview(buf) as view:
        CRC_FIELD.pack_into(buf, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))


def seal_batch(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    records: bytes | bytearray | memoryview,
) -> bytes:
    """A whole v2 batch: the header of these fields (magic 2, batchLength from ``records``' size) with its
    CRC-32C over attributes..end, followed by ``records`` (the encoded, possibly compressed, records)."""
    header = bytearray(
        BATCH_HEADER.pack(
            base_offset,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    )
    CRC_FIELD.pack_into(header, CRC_OFFSET, crc32c(records, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])))
    header += records
    return bytes(header)
