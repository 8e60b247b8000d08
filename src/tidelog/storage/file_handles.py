"""File descriptors shared by segments and the reads they hand out: :class:`FileHandle` (closes itself when the
last holder is gone) and :class:`FileRegion` (a stretch of a segment file, ready for ``os.sendfile``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tidelog.records.errors import CorruptRecordError


class FileHandle:
    """An open file descriptor that closes itself when no segment or region references it any more.

    Regions returned by reads hold the handle, so a segment deleted or closed by retention while a fetch
    response is still being sent keeps a valid descriptor until the response is done with it.
    """

    __slots__ = ("__weakref__", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


@dataclass(slots=True)
class FileRegion:
    """``length`` bytes of a segment file from ``position``: what reads return, ready for ``os.sendfile``.

    ``first_offset`` is the base offset of the first batch in the region (-1 if empty), ``next_offset`` the
    offset after its last batch (-1 if empty or unknown).  The ``handle`` keeps the descriptor open for as long
    as the region lives.
    """

    fd: int
    position: int
    length: int
    first_offset: int = -1
    handle: FileHandle | None = field(default=None, repr=False)
    next_offset: int = -1

    def read_bytes(self) -> bytes:
        """Copy the region into memory (tools and tests; the broker uses sendfile)."""
        chunks: list[bytes] = []
        done = 0
        while done < self.length:
            chunk = os.pread(self.fd, self.length - done, self.position + done)
            if not chunk:
                raise CorruptRecordError(
                    f"file region ended after {done} of {self.length} bytes (position {self.position})"
                )
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


def _preadv_full(fd: int, into: memoryview, position: int) -> int:
    """Fill ``into`` from ``position``; returns the bytes read (fewer only at the end of the file)."""
    n = len(into)
    got = os.preadv(fd, [into], position)
    while 0 < got < n:
        more = os.preadv(fd, [into[got:]], position + got)
        if more <= 0:
            break
        got += more
    return got
