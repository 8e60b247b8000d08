"""Errors raised by the sans-io record layer.

Every error names what is wrong so a broker can log it and map it to a Kafka error code
(``kafka_error`` is the Kafka error the broker answers with; :class:`tidelog.errors.ApiError` is the base).
"""

from __future__ import annotations

from tidelog.errors import ApiError, ErrorCode


class RecordError(ApiError, ValueError):
    """Base class: the bytes are not a valid record batch."""

    kafka_error = ErrorCode.CORRUPT_MESSAGE


class CorruptRecordError(RecordError):
    """CRC mismatch, truncated batch, lengths that contradict each other, undecodable records."""

    kafka_error = ErrorCode.CORRUPT_MESSAGE


class InvalidMagicError(RecordError):
    """The magic byte is not 2 (tidelog reads and writes only v2 batches).

    The Kafka error depends on the magic, as in Kafka's produce path: a known older format (0 or 1) in a
    Produce v3+ request is INVALID_RECORD (``ProduceRequest.validateRecords``: "Produce requests with version
    N are only allowed to contain record batches with magic version 2", an ``InvalidRecordException``); an
    unknown magic (negative or > 2) is CORRUPT_MESSAGE (``ByteBufferLogInputStream.nextBatch``: "Invalid magic
    found in record", a ``CorruptRecordException``, thrown while iterating the batches).
    """

    def __init__(self, message: str, magic: int | None = None) -> None:
        super().__init__(message)
        self.magic = magic
        self.kafka_error = ErrorCode.INVALID_RECORD if magic in (0, 1) else ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(RecordError):
    """Structurally valid batch that the broker must refuse (e.g. record count mismatch)."""

    kafka_error = ErrorCode.INVALID_RECORD


class RecordTooLargeError(RecordError):
    """The batch exceeds max.message.bytes."""

    kafka_error = ErrorCode.MESSAGE_TOO_LARGE


class DecompressionLimitError(CorruptRecordError):
    """Decompressed data would exceed the allowed size (a compression bomb or a lying header)."""


class UnsupportedCompressionError(RecordError):
    """Compression codec bits 5..7 are not a known codec."""

    kafka_error = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
