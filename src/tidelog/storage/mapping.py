"""A shared memory mapping of a file that holds no file descriptor (the index files' mapping).

Kafka closes an index file as soon as it is mapped (``AbstractIndex``: a ``RandomAccessFile`` opened, mapped and
closed in ``finally``): the mapping outlives the descriptor, so an index costs no file descriptor. Python's
``mmap.mmap`` (before 3.13's ``trackfd=False``) keeps a ``dup`` of the descriptor it maps for as long as the map
lives, which made every index cost one descriptor even after its file was closed. :class:`FileMapping` calls
libc's ``mmap``/``munmap``/``msync`` through ctypes instead and exposes the mapped bytes as a ctypes ``c_char``
array (the buffer protocol: ``struct.unpack_from``, slicing to bytes, slice assignment), with the few ``mmap``
methods the indexes use (``find``, ``flush``, ``close``). Where libc cannot be loaded, :func:`map_file` falls back
to ``mmap.mmap`` (and its duplicated descriptor).

Accessing a closed mapping would fault, so its users (the indexes) reach it only under their lock and drop their
reference when they close it; :meth:`FileMapping.close` also refuses while a buffer export is alive
(``BufferError``, as ``mmap.close`` does).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from typing import Any

__all__ = ["FileMapping", "map_file"]


def _libc() -> Any:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long)
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        lib.msync.restype = ctypes.c_int
        lib.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        lib.memmem.restype = ctypes.c_void_p
        lib.memmem.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
    except (OSError, AttributeError):
        return None
    return lib


_LIBC: Any = _libc() if os.name == "posix" else None
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = getattr(mmap, "MS_SYNC", 4)


class FileMapping:
    """``length`` bytes of a file mapped shared and writable, without keeping a descriptor.

    ``view`` is the mapped bytes as a ctypes array: ``view[a:b]`` is a copy (bytes), ``view[a:b] = data``
    stores, and it is a buffer (``struct.unpack_from(fmt, view, pos)``). Indexing the mapping itself does the
    same (``m[a:b]``)."""

    __slots__ = ("_addr", "_length", "view")

    def __init__(self, fd: int, length: int) -> None:
        if length <= 0:
            raise ValueError("cannot map an empty file")
        addr = _LIBC.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap: {os.strerror(err)}")
        self._addr: int | None = addr
        self._length = length
        self.view: Any = (ctypes.c_char * length).from_address(addr)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: Any) -> Any:
        return self.view[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.view[key] = value

    def find(self, sub: bytes, start: int = 0) -> int:
        """The lowest position >= ``start`` where ``sub`` starts, or -1 (``mmap.find``)."""
        if self._addr is None:
            raise ValueError("mapping closed")
        if start < 0 or start >= self._length:
            return -1
        hit = _LIBC.memmem(self._addr + start, self._length - start, sub, len(sub))
        return -1 if hit is None else hit - self._addr

    def flush(self) -> None:
        """msync(MS_SYNC) of the whole mapping (``mmap.flush``)."""
        if self._addr is None:
            raise ValueError("mapping closed")
        if _LIBC.msync(self._addr, self._length, _MS_SYNC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"msync: {os.strerror(err)}")

    def close(self) -> None:
        addr, self._addr = self._addr, None
        if addr is None:
            return
        self.view = None
        _LIBC.munmap(addr, self._length)

    def __del__(self) -> None:
        # an index dropped without close (a failed open): its owner held the only references to ``view``
        if getattr(self, "_addr", None) is not None:
            self.close()


def map_file(fd: int, length: int) -> Any:
    """A shared writable mapping of ``fd``'s first ``length`` bytes that does not keep ``fd`` (a
    :class:`FileMapping`), or ``mmap.mmap`` (which keeps a duplicate) where libc is not reachable."""
    if _LIBC is not None:
        return FileMapping(fd, length)
    return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE)
