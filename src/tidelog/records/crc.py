"""CRC-32C (Castagnoli), hardware accelerated through the ``crc32c`` package."""

from __future__ import annotations

from crc32c import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return the CRC-32C of ``data`` (optionally continuing from ``value``)."""
    return _crc32c(data, value)
