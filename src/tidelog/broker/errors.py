"""The broker's errors and the one mapping from an exception to the Kafka error a client is answered with.

Every exception meant to reach a client names its Kafka error in ``kafka_error`` (a name of
:mod:`tidelog.protocol.errors`): the records layer's (:mod:`tidelog.records.errors`), the storage layer's
(:mod:`tidelog.storage.errors`), and the broker's own, which derive from :class:`BrokerError`:
:class:`PartitionError` here and ``TopicError`` (:mod:`tidelog.broker.topics`). :func:`error_of` turns any of
them into ``(error code, message)``; an OSError of the disk or of the descriptor table (EMFILE, ENOSPC, EIO, ...)
is KAFKA_STORAGE_ERROR; anything else is a bug and becomes UNKNOWN_SERVER_ERROR, logged.
"""

from __future__ import annotations

import errno
import logging

from tidelog.protocol.errors import ERRORS_BY_NAME
from tidelog.storage.open_files import describe_os_error

log = logging.getLogger("tidelog.broker.errors")

_UNKNOWN_SERVER_ERROR = ERRORS_BY_NAME["UNKNOWN_SERVER_ERROR"].code
_KAFKA_STORAGE_ERROR = ERRORS_BY_NAME["KAFKA_STORAGE_ERROR"].code
#: OSErrors of the disk or of the descriptor table, answered KAFKA_STORAGE_ERROR
STORAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


class BrokerError(Exception):
    """Base of the broker's errors: ``kafka_error`` is the Kafka error name to answer with."""

    kafka_error: str = "UNKNOWN_SERVER_ERROR"


class PartitionError(BrokerError):
    """A partition-level failure carrying the Kafka error name to answer with."""

    def __init__(self, kafka_error: str, message: str = "") -> None:
        super().__init__(message or kafka_error)
        self.kafka_error = kafka_error


# Kafka's Errors.UNKNOWN_SERVER_ERROR message: what a client is told of an unexpected failure (issue 16)
UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."


def is_client_error(exc: BaseException) -> bool:
    """Whether ``exc`` names the Kafka error to answer with (anything else is a bug)."""
    return isinstance(getattr(exc, "kafka_error", None), str)


def code_of(name: str) -> int:
    """The code of a Kafka error name; UNKNOWN_SERVER_ERROR for a name Kafka does not have."""
    err = ERRORS_BY_NAME.get(name)
    return _UNKNOWN_SERVER_ERROR if err is None else err.code


def error_of(exc: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for an exception from records, storage, topics or the broker.

    The message is the exception's ``message`` attribute when it has one, else its text, else Kafka's
    description of the error. An exception naming no known Kafka error is UNKNOWN_SERVER_ERROR, logged.
    """
    name = getattr(exc, "kafka_error", None)
    err = ERRORS_BY_NAME.get(name) if isinstance(name, str) else None
    if err is None and isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        # the disk or the process's descriptors refused (Kafka: an IOException in a log dir is a
        # KafkaStorageException): KAFKA_STORAGE_ERROR with what happened, never UNKNOWN_SERVER_ERROR
        log.error("storage error answered KAFKA_STORAGE_ERROR: %s", exc)
        return _KAFKA_STORAGE_ERROR, describe_os_error(exc)
    if err is None:
        # the detail stays in the broker's log: a client gets Kafka's generic message, never exception text
        log.error("unexpected error mapped to UNKNOWN_SERVER_ERROR", exc_info=exc)
        return _UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR_MESSAGE
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = str(exc)
    return err.code, message or err.message
