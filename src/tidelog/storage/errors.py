"""Storage-layer errors. ``kafka_error`` is the Kafka error a broker answers with (base: ``tidelog.errors.ApiError``)."""

from __future__ import annotations

from tidelog.errors import ApiError, ErrorCode


class StorageError(ApiError):
    kafka_error = ErrorCode.KAFKA_STORAGE_ERROR


class KafkaStorageError(StorageError):
    """The partition's log directory failed (Kafka's KafkaStorageException): an I/O error (EIO, ENOSPC, EROFS, a
    failed fsync) took the directory offline, or read-only when it was the last one (see ``LogManager``)."""


class OffsetOutOfRangeError(StorageError):
    kafka_error = ErrorCode.OFFSET_OUT_OF_RANGE


class InvalidTimestampError(StorageError):
    kafka_error = ErrorCode.INVALID_TIMESTAMP


class OutOfOrderSequenceError(StorageError):
    kafka_error = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(StorageError):
    kafka_error = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    kafka_error = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer with an open transaction (Kafka's InvalidTxnStateException)."""

    kafka_error = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from a coordinator epoch older than the producer's (Kafka's
    TransactionCoordinatorFencedException)."""

    kafka_error = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class UnknownProducerIdError(StorageError):
    kafka_error = ErrorCode.UNKNOWN_PRODUCER_ID


class CorruptCheckpointError(StorageError):
    """A checkpoint or metadata file does not parse strictly (wrong version, count mismatch, bad line)."""


class InvalidConfigError(ApiError, ValueError):
    kafka_error = ErrorCode.INVALID_CONFIG

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value!r} for configuration {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


class LogDirNotFoundError(StorageError):
    """AlterReplicaLogDirs named a directory that is not one of the broker's ``log.dirs``."""

    kafka_error = ErrorCode.LOG_DIR_NOT_FOUND


class ReplicaNotAvailableError(StorageError):
    kafka_error = ErrorCode.REPLICA_NOT_AVAILABLE


class InvalidTopicError(StorageError):
    """AlterReplicaLogDirs of a topic whose future directory name would exceed 255 characters (KAFKA-4893)."""

    kafka_error = ErrorCode.INVALID_TOPIC_EXCEPTION
