"""Kafka's ``LogValidator``: every check of a client batch that needs no log state, and its rewrites.

Header, sizes, CRC-32C, the client checks (control batches, record count, producer id / sequence,
transactional flag), the record walk of the decompressed records, the timestamps (CreateTime within
``message.timestamp.before/after.max.ms``, or LogAppendTime), and the rewrite of a batch whose bytes under the
CRC change: LogAppendTime, a client's LogAppendTime bit on a CreateTime topic, or the topic's
``compression.type``.  :meth:`LogValidator.validate_leader_batch` takes no lock and changes nothing, so the
broker runs it on request handler threads; the log's ``append_validated`` writes what it returns.

One :class:`LogValidator` per log configuration (the log makes a new one when its configuration changes), so
every setting an append reads is derived once.  See :meth:`tidelog.storage.log.PartitionLog.append_as_leader`
for the late checks (CRC and record walk right after the write) this module leaves to the C writer.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from tidelog.records.batch import (
    DEFAULT_MAX_DECOMPRESSED,
    build_batch,
    check_record_structure,
    decode_records,
    rewrite_batch_for_append,
)
from tidelog.records.batch import c_validate_single_batch as _c_validate_single_batch
from tidelog.records.compression import CompressionType
from tidelog.records.errors import InvalidRecordError, RecordTooLargeError
from tidelog.records.header import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    H_ATTRIBUTES,
    H_BASE_SEQUENCE,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    HeaderTuple,
    check_batch_crc,
    parse_header_tuple,
    restamp_crc,
    validate_batch_tuple,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import InvalidTimestampError

_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ValidatedBatch(NamedTuple):
    """A client batch that passed :meth:`LogValidator.validate_leader_batch`, ready for
    :meth:`PartitionLog.append_validated`."""

    batch: bytes | bytearray | memoryview  # the caller's bytes
    fields: HeaderTuple  # the header of what is stored (of ``copy`` when there is one)
    copy: bytearray | None  # the rewritten batch (LogAppendTime, the topic's codec), else None
    late: bool  # the CRC and the record walk are left to the writer (uncompressed batches only)
    now: int
    log_append: bool
    decompressed: int = 0  # bytes the records inflated to (0: not compressed)


def check_late(batch: bytes | bytearray | memoryview, fields: HeaderTuple) -> None:
    """The checks a late append (of an uncompressed batch) leaves to the C writer (see
    :meth:`PartitionLog.append_as_leader`), run now in their check-first order: the CRC-32C, then the record
    walk; raises the exact error."""
    check_batch_crc(batch, fields)
    check_record_structure(batch, 0, fields)


def stamp_batch(
    buf: bytearray, header: BatchHeader, base_offset: int, leader_epoch: int, log_append_time: int | None
) -> BatchHeader:
    """Assign ``base_offset`` and ``leader_epoch`` to the rewritten batch ``buf`` (and LogAppendTime when given),
    clearing a client's LogAppendTime bit on a CreateTime topic as Kafka's ``setMaxTimestamp`` does."""
    header = rewrite_batch_for_append(
        buf,
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        log_append_time=log_append_time,
    )
    if log_append_time is None and header.timestamp_type == LOG_APPEND_TIME:
        # a CreateTime topic: clear a LogAppendTime bit the client set, as Kafka's setMaxTimestamp does
        ATTRIBUTES_FIELD.pack_into(buf, ATTRIBUTES_OFFSET, header.attributes & ~TIMESTAMP_TYPE_MASK)
        restamp_crc(buf)
        header = BatchHeader.parse(buf)
    return header


class LogValidator:
    """The checks and rewrites of client batches for one log configuration (see module docstring)."""

    __slots__ = ("config", "fast_limits", "log_append_time", "name", "no_fast_append", "recompress_to")

    def __init__(self, config: LogConfig, name: str) -> None:
        self.config = config
        self.name = name  # "<topic>-<partition>", for error messages
        self.log_append_time = config.log_append_time
        # the topic's compression.type: None keeps the producer's codec, else every batch is stored with this one
        ct = config.compression_type
        self.recompress_to = None if ct == "producer" else _CODECS[ct]
        # what the C fast path (uncompressed CreateTime batches only) must leave to the Python steps
        self.no_fast_append = self.log_append_time or self.recompress_to not in (None, CompressionType.NONE)
        # the limits it checks (segment_state.c_append_leader_fast's ``limits``)
        self.fast_limits = (
            config.max_message_bytes, config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms,
            config.segment_bytes, config.segment_ms,
        )

    def recompresses(self, codec: int) -> bool:
        """True when a client batch with compression ``codec`` is rebuilt with the topic's ``compression.type``
        (per-record work) before it is stored."""
        to = self.recompress_to
        return to is not None and codec != to

    def validate_leader_batch(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        now_ms: int | None = None,
        reject_control_batches: bool = False,
        check_all: bool = False,
        coordinator_origin: bool = False,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> ValidatedBatch:
        """The first half of :meth:`PartitionLog.append_as_leader`: every check of a client batch that needs no
        log state (Kafka's LogValidator: header, sizes, CRC, client checks, the record walk of the decompressed
        records, timestamps) and the rewrite for LogAppendTime or the topic's ``compression.type``. Takes no lock
        and changes nothing, so it may run on any thread, in parallel with appends and with other validations of
        the same log (the broker runs it on a worker thread for batches whose check is expensive, e.g.
        compressed ones). ``check_all``: no check is left to the writer (the late CRC and walk), so the caller
        knows the batch is valid once this returns. ``max_decompressed``: the most its records may inflate to
        (the broker passes less for its light pass, see ``request_pool.DecompressionBudget``). Raises the exact
        error, in Kafka's order."""
        config = self.config
        log_append = self.log_append_time
        c_check = _c_validate_single_batch
        # late: the CRC and the record walk are left to the C writer, right after its write (see above)
        late = c_check is not None and not check_all
        fields = None if c_check is None else c_check(batch, config.max_message_bytes, check_all, check_all)
        # with check_all, an uncompressed batch the C check passed has had its CRC and its record walk
        walked = fields is not None and check_all and not fields[H_ATTRIBUTES] & COMPRESSION_MASK
        if fields is None:  # the Python checks raise the exact error (or the extension is not in use)
            fields = validate_batch_tuple(batch, 0, config.max_message_bytes, check_crc=not late)
        (_, batch_length, _, _, _, attributes, last_delta, base_ts, max_ts, pid, _, base_seq, count) = fields
        size = batch_length + LOG_OVERHEAD
        if late and (
            attributes & (TIMESTAMP_TYPE_MASK | COMPRESSION_MASK)
            or self.no_fast_append  # LogAppendTime or the topic's codec: the batch is rewritten
            or size != len(batch)
        ):
            # a rewrite, decompression or an error come next: every check before, in their order
            check_batch_crc(batch, fields)
            late = False
        if size != len(batch):
            raise InvalidRecordError(
                f"a produce request may carry exactly one batch per partition; {len(batch) - size} "
                f"bytes follow the first batch"
            )
        # Kafka's LogValidator checks on a client batch, from the header only (see validate_client_batch)
        if (
            (reject_control_batches and attributes & CONTROL_MASK)
            or count <= 0
            or count != last_delta + 1
            or (pid >= 0 and base_seq < 0 and not attributes & CONTROL_MASK and not coordinator_origin)
            or (pid < 0 and attributes & TRANSACTIONAL_MASK)
        ):
            if late:
                check_batch_crc(batch, fields)
            validate_client_batch(BatchHeader(*fields), reject_control_batches, coordinator_origin)  # raises
        # Kafka's LogValidator walk of every record (decompressed, bounded): a batch no consumer could decode
        # never reaches the log
        decompressed = 0
        if not late and not walked:
            decompressed = check_record_structure(batch, 0, fields, max_decompressed=max_decompressed)
        now = _now_ms() if now_ms is None else now_ms
        if not log_append:
            low = now - config.message_timestamp_before_max_ms
            high = now + config.message_timestamp_after_max_ms
            if (base_ts != NO_TIMESTAMP and not low <= base_ts <= high) or (
                max_ts != NO_TIMESTAMP and not low <= max_ts <= high
            ):
                if late:
                    check_late(batch, fields)
                self.check_create_time(BatchHeader(*fields), now)  # raises
        # bytes under the CRC change only for LogAppendTime (or to clear a client's LogAppendTime bit), or when
        # the topic's compression.type differs from the batch's codec (not for control batches, as in Kafka)
        copy = bytearray(batch) if log_append or attributes & TIMESTAMP_TYPE_MASK else None
        codec = self.recompress_to
        if codec is not None and attributes & COMPRESSION_MASK != codec and not attributes & CONTROL_MASK:
            copy = recompressed(batch, fields, codec)
            fields = parse_header_tuple(copy)
            batch_length, attributes, max_ts = fields[H_BATCH_LENGTH], fields[H_ATTRIBUTES], fields[H_MAX_TIMESTAMP]
            size = batch_length + LOG_OVERHEAD
            if size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"the batch is {size} bytes once stored with compression.type {config.compression_type}, "
                    f"larger than max.message.bytes {config.max_message_bytes}"
                )
        return ValidatedBatch(batch, fields, copy, late, now, log_append, decompressed)

    def check_create_time(self, header: BatchHeader, now: int) -> None:
        """CreateTime timestamps within ``message.timestamp.before.max.ms`` / ``after.max.ms`` of ``now``."""
        before = self.config.message_timestamp_before_max_ms
        after = self.config.message_timestamp_after_max_ms
        for ts in (header.base_timestamp, header.max_timestamp):
            if ts == NO_TIMESTAMP:
                continue
            if ts < now - before or ts > now + after:
                raise InvalidTimestampError(
                    f"timestamp {ts} of a batch is out of range for {self.name}: "
                    f"must be within [{now - before}, {now + after}] "
                    f"(message.timestamp.before.max.ms={before}, message.timestamp.after.max.ms={after})"
                )


def validate_client_batch(header: BatchHeader, reject_control: bool, coordinator_origin: bool = False) -> None:
    """Header-only checks Kafka's LogValidator makes on a client batch. ``coordinator_origin``: a group
    coordinator's transactional offset batch (Kafka's AppendOrigin.COORDINATOR), which has a producer id and no
    base sequence."""
    if reject_control and header.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record count {header.records_count} does not match lastOffsetDelta {header.last_offset_delta}"
        )
    if header.producer_id >= 0 and header.base_sequence < 0 and not header.is_control and not coordinator_origin:
        # Kafka allows baseSequence -1 on control batches (the coordinator's transaction markers)
        raise InvalidRecordError(f"producer {header.producer_id} sent a batch without a base sequence")
    if header.is_transactional and header.producer_id < 0:
        raise InvalidRecordError("a transactional batch must carry a producer id")


def recompressed(batch: bytes | bytearray | memoryview, fields: HeaderTuple, codec: int) -> bytearray:
    """The validated client batch rebuilt with the topic's codec (Kafka's LogValidator when compression.type
    is not ``producer`` and differs from the batch's): the same records, timestamps, headers, producer id,
    epoch, base sequence and transactional flag."""
    records = decode_records(batch, verify_crc=False)
    return bytearray(
        build_batch(
            records,
            compression=codec,
            producer_id=fields[H_PRODUCER_ID],
            producer_epoch=fields[H_PRODUCER_EPOCH],
            base_sequence=fields[H_BASE_SEQUENCE],
            is_transactional=bool(fields[H_ATTRIBUTES] & TRANSACTIONAL_MASK),
            last_offset_delta=fields[H_LAST_OFFSET_DELTA],
        )
    )


__all__ = ["LogValidator", "ValidatedBatch", "check_late", "stamp_batch", "validate_client_batch"]
