"""Kafka error codes for the protocol layer: the table lives in :mod:`tidelog.errors` (the bottom of the house, so
records and storage name their errors with the same enum); this module re-exports it for protocol/'s readers."""

from __future__ import annotations

from tidelog.errors import (
           ERRORS,
           ERRORS_BY_CODE,
           ERRORS_BY_NAME,
           ErrorCode,
           KafkaError,
           error_code,
           error_for_code,
)

#: the one error enum under its former name
KafkaErrorCode = ErrorCode

__all__ = ["ERRORS", "ERRORS_BY_CODE", "ERRORS_BY_NAME", "ErrorCode", "KafkaError", "KafkaErrorCode", "error_code",
           "error_for_code"]
