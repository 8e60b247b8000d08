"""Helpers shared by the records tests."""

from __future__ import annotations

import struct

from tidelog.records.crc import crc32c


def recrc(batch: bytearray, pos: int = 0) -> bytearray:
    """Recompute the CRC of the batch at ``pos`` after a test mutated it (so the record parser sees it)."""
    (length,) = struct.unpack_from(">i", batch, pos + 8)
    struct.pack_into(">I", batch, pos + 17, crc32c(memoryview(batch)[pos + 21 : pos + 12 + length]))
    return batch


def set_count(batch: bytearray, count: int) -> bytearray:
    struct.pack_into(">i", batch, 57, count)
    return recrc(batch)
