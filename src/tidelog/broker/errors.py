"""The broker's errors and the one mapping from an exception to the Kafka error a client is answered with.

Every exception meant to reach a client derives from :class:`tidelog.errors.ApiError` and names its Kafka error
in ``kafka_error`` (an :class:`~tidelog.errors.ErrorCode`): the records layer's (:mod:`tidelog.records.errors`), the
storage layer's (:mod:`tidelog.storage.errors`), and the broker's own, which derive from :class:`BrokerError`:
:class:`PartitionError` here, ``TopicError`` (:mod:`tidelog.broker.topic_model`) and ``DynamicConfigError``.
:func:`error_of` turns any of them into ``(error code, message)``; an OSError of the disk or of the descriptor
table (EMFILE, ENOSPC, EIO, ...) is KAFKA_STORAGE_ERROR; anything else is a bug and becomes UNKNOWN_SERVER_ERROR,
logged.
"""

from __future__ import annotations

import errno
import logging

from tidelog.errors import ERRORS_BY_CODE, ApiError, ErrorCode
from tidelog.storage.open_files import describe_os_error

log = logging.getLogger("tidelog.broker.errors")

#: OSErrors of the disk or of the descriptor table, answered KAFKA_STORAGE_ERROR
STORAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


class BrokerError(ApiError):
    """Base of the broker's errors: ``kafka_error`` is the Kafka error to answer with."""


class PartitionError(BrokerError):
    """A partition-level failure carrying the Kafka error to answer with (its name is the default message)."""

    def __init__(self, kafka_error: ErrorCode, message: str = "") -> None:
        super().__init__(message or kafka_error.name)
        self.kafka_error = kafka_error


# Kafka's Errors.UNKNOWN_SERVER_ERROR message: what a client is told of an unexpected failure (issue 16)
UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."


def is_client_error(exc: BaseException) -> bool:
    """Whether ``exc`` names the Kafka error to answer with (anything else is a bug)."""
    return isinstance(exc, ApiError)


def error_of(exc: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for an exception from records, storage, topics or the broker.

    The message is the exception's ``message`` attribute when it has one, else its text, else Kafka's
    description of the error. An exception naming no known Kafka error is UNKNOWN_SERVER_ERROR, logged.
    """
    err = ERRORS_BY_CODE.get(exc.kafka_error) if isinstance(exc, ApiError) else None
    if err is None and isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        # the disk or the process's descriptors refused (Kafka: an IOException in a log dir is a
        # KafkaStorageException): KAFKA_STORAGE_ERROR with what happened, never UNKNOWN_SERVER_ERROR
        log.error("storage error answered KAFKA_STORAGE_ERROR: %s", exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, describe_os_error(exc)
    if err is None:
        # the detail stays in the broker's log: a client gets Kafka's generic message, never exception text
        log.error("unexpected error mapped to UNKNOWN_SERVER_ERROR", exc_info=exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR_MESSAGE
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = str(exc)
    return err.code, message or err.message
