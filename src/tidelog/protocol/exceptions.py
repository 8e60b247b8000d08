"""Exceptions raised by the protocol layer. A malformed frame raises only these."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every exception the protocol layer raises on bad input."""


class InvalidRequestError(ProtocolError):
    """A frame is truncated or malformed (bad length, bad UTF-8, trailing garbage, ...).

    The broker answers INVALID_REQUEST where it can, or closes the connection (as Kafka does).
    ``correlation_id`` is set when the header could be read.
    """

    def __init__(self, message: str, correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


class FrameTooLargeError(InvalidRequestError):
    """The 4-byte size prefix announces more than the configured maximum (or is negative).

    ``size`` is the announced size, ``max_size`` the limit (the broker's ``socket.request.max.bytes``)."""

    def __init__(self, size: int, max_size: int) -> None:
        what = "negative frame size" if size < 0 else "frame size above the maximum"
        super().__init__(f"{what}: {size} (allowed 0..{max_size})")
        self.size = size
        self.max_size = max_size


class CorrelationIdMismatchError(ProtocolError, ConnectionError):
    """A response's correlation id is not the one of the oldest request in flight on its connection (``expected``
    is None when no request was in flight). The stream is out of step: the connection must be closed, which is
    why this is also a ConnectionError."""

    def __init__(self, expected: int | None, got: int) -> None:
        if expected is None:
            message = f"response with correlation id {got} while no request is in flight"
        else:
            message = f"response correlation id {got} does not match request {expected}"
        super().__init__(message)
        self.expected = expected
        self.got = got


class _ApiError(ProtocolError):
    def __init__(self, api_key: int, version: int, correlation_id: int, client_id: str | None = None) -> None:
        super().__init__(f"api_key={api_key} version={version} correlation_id={correlation_id}")
        self.api_key = api_key
        self.version = version
        self.api_version = version
        self.correlation_id = correlation_id
        self.client_id = client_id


class UnsupportedVersionError(_ApiError):
    """The API is known but this version is outside what we accept: answer UNSUPPORTED_VERSION (35).

    For ApiVersions the broker answers in v0 format (KIP-511).
    """


class UnknownApiKeyError(_ApiError):
    """The api key is not one we serve: Kafka closes the connection."""


class EncodeError(ValueError):
    """A body cannot be encoded at the requested version (bad type, value out of range,
    or a non-ignorable field set to a non-default value that this version cannot carry)."""
