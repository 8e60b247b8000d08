"""File access for the dump tool: a read-ahead window over a ``.log`` (:class:`LogFile`) and the fixed-size
entries of an index file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

_WINDOW = 1 << 20  # read-ahead for .log files
_INDEX_CHUNK = 1 << 20


class LogFile:
    """Positional, bounded-memory access to a ``.log`` file (``os.pread`` through a read-ahead window)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self._buf = b""
        self._buf_start = 0

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> LogFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, pos: int, n: int) -> memoryview:
        """``n`` bytes at ``pos`` (fewer at end of file), served from the window when possible."""
        start = pos - self._buf_start
        if start < 0 or start + n > len(self._buf):
            self._buf = os.pread(self.fd, max(n, _WINDOW), pos)
            self._buf_start = pos
            start = 0
        return memoryview(self._buf)[start : start + n]

    def pread(self, pos: int, n: int) -> bytes:
        """``n`` bytes at ``pos`` without touching the window (random access for index checks)."""
        return os.pread(self.fd, n, pos)


# ------------------------------------------------------------------------------------------ index reading


def read_entries(path: Path, entry: struct.Struct) -> tuple[list[tuple[int, int]], int]:
    """All fixed-size entries of an index file, and the file size (chunked reads)."""
    entries: list[tuple[int, int]] = []
    size = entry.size
    with open(path, "rb", buffering=0) as f:
        file_size = os.fstat(f.fileno()).st_size
        carry = b""
        while True:
            chunk = f.read(_INDEX_CHUNK)
            if not chunk:
                break
            data = carry + chunk
            whole = len(data) - len(data) % size
            entries.extend(entry.iter_unpack(data[:whole]))
            carry = data[whole:]
    return entries, file_size


def valid_prefix(entries: list[tuple[int, int]], offset_field: int) -> list[tuple[int, int]]:
    """Entries up to the preallocated zero tail.

    Kafka stops at the first entry after the first whose relative offset is 0. An index whose first two
    entries are both all zeros is an empty preallocated index.
    """
    if len(entries) >= 2 and entries[0] == (0, 0) and entries[1] == (0, 0):
        return []
    for i in range(1, len(entries)):
        if entries[i][offset_field] == 0:
            return entries[:i]
    return entries
