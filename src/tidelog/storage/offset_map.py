"""A fixed-memory map from record key to the last offset at which the key was seen.

The cleaner's dedupe map (Kafka's idea of a "skimpy" offset map, ``SkimpyOffsetMap``): every key is reduced to a 16-byte
MD5 digest, and digest + offset live in two preallocated arrays sized from ``log.cleaner.dedupe.buffer.size``.
The memory used is fixed when the map is created (24 bytes per slot) and never grows, whatever the keys look
like. A digest collision merges two keys; with 128-bit digests that is astronomically unlikely, and Kafka
accepts the same risk.

Open addressing with linear probing; the map is "full" at ``load_factor`` of its slots, and the caller stops
adding keys there (a dirty section larger than that is cleaned in several rounds).

The home slot of a digest is its first 8 bytes read as a little-endian unsigned int, modulo ``slots`` (the
digest is already uniform), so that the C walkers of ``tidelog.storage._cleanwalk`` compute the same slots
and both paths build byte-identical maps. The cleaner uses the C walkers when the extension is built
(:meth:`OffsetMap.put_records`, and ``filter_records`` on :meth:`OffsetMap.buffers`), else the bulk methods
:meth:`OffsetMap.put_many` / :meth:`OffsetMap.get_many`, one call per batch, whose loops inline the digest and
the probe; :meth:`OffsetMap.put` / :meth:`OffsetMap.get` are the same thing for one key.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Any

DIGEST_SIZE = 16
OFFSET_SIZE = 8
BYTES_PER_ENTRY = DIGEST_SIZE + OFFSET_SIZE

_EMPTY = -1

_home = struct.Struct("<Q").unpack_from
"""``_home(digest)[0]``: the digest's first 8 bytes as a little-endian unsigned int (``% slots``: the home slot)."""

try:  # MD5 as Kafka's map uses; the plain constructor is the fastest call (keyword arguments cost ~50 %)
    hashlib.md5(b"")
    _md5 = hashlib.md5
except ValueError:  # a FIPS build refuses MD5 unless it is declared not for security
    def _md5(data: bytes | bytearray | memoryview) -> hashlib._Hash:  # type: ignore[name-defined,misc]
        return hashlib.md5(data, usedforsecurity=False)


class OffsetMap:
    """key digest -> last offset, in ``memory`` bytes (see module docstring)."""

    __slots__ = ("_digests", "_max_entries", "_offsets", "_size", "_slots", "latest_offset", "lookups", "probes")

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must be in (0, 1], got {load_factor}")
        slots = memory // BYTES_PER_ENTRY
        if slots < 1:
            raise ValueError(f"a dedupe buffer of {memory} bytes holds no entry (need >= {BYTES_PER_ENTRY})")
        self._slots = slots
        self._max_entries = max(1, int(slots * load_factor))
        if self._max_entries >= slots:  # always leave one empty slot so a probe terminates
            self._max_entries = slots - 1 if slots > 1 else 1
        self._digests = bytearray(slots * DIGEST_SIZE)
        self._offsets = array("q", [_EMPTY]) * slots  # one allocation of exactly 8 bytes per slot
        self._size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0

    # ------------------------------------------------------------------ properties
    @property
    def slots(self) -> int:
        return self._slots

    @property
    def max_entries(self) -> int:
        """Entries the map accepts before it counts as full."""
        return self._max_entries

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self._max_entries

    @property
    def utilization(self) -> float:
        """Used share of the usable entries (Kafka's buffer-utilization metric)."""
        return self._size / self._max_entries

    @property
    def memory_bytes(self) -> int:
        return len(self._digests) + self._offsets.itemsize * len(self._offsets)

    # ------------------------------------------------------------------ operations
    @staticmethod
    def digest(key: bytes | bytearray | memoryview) -> bytes:
        return _md5(key).digest()

    def _slot(self, digest: bytes) -> int:
        """The slot holding ``digest``, or the empty slot where it would go."""
        slots = self._slots
        i = _home(digest)[0] % slots
        at = self._digests.startswith
        offsets = self._offsets
        self.lookups += 1
        while offsets[i] != _EMPTY and not at(digest, i * DIGEST_SIZE):
            self.probes += 1
            i += 1
            if i == slots:
                i = 0
        return i

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Record ``offset`` as the latest for ``key``; raises when the map is full and the key is new."""
        self.put_many((key,), (offset,))

    def put_many(
        self, keys: Sequence[bytes | bytearray | memoryview], offsets: Sequence[int]
    ) -> None:
        """:meth:`put` of ``keys[i] -> offsets[i]`` in order (a later duplicate key wins). On OverflowError the
        keys before the one that did not fit are in the map."""
        slots = self._slots
        digests = self._digests
        at = digests.startswith
        offs = self._offsets
        size = self._size
        max_entries = self._max_entries
        latest = self.latest_offset
        probes = 0
        md5 = _md5
        home = _home
        try:
            for key, offset in zip(keys, offsets):
                d = md5(key).digest()
                i = home(d)[0] % slots
                while True:
                    if offs[i] == _EMPTY:
                        if size >= max_entries:
                            raise OverflowError("offset map is full")
                        start = i * DIGEST_SIZE
                        digests[start : start + DIGEST_SIZE] = d
                        size += 1
                        break
                    if at(d, i * DIGEST_SIZE):
                        break
                    probes += 1
                    i += 1
                    if i == slots:
                        i = 0
                offs[i] = offset
                if offset > latest:
                    latest = offset
        finally:
            self._size = size
            self.latest_offset = latest
            self.lookups += len(keys)
            self.probes += probes

    def put_records(
        self, c_put: Callable[..., Any], data: bytes, p: int, n: int, count: int, base: int, min_delta: int
    ) -> bool:
        """The C ``put_records`` (``tidelog.storage._cleanwalk``) of one batch: :meth:`put_many` of the non-null
        keys of the ``count`` records in ``data[p:n]`` whose offset delta is >= ``min_delta``, at ``base`` +
        delta, in place. False, with the map unchanged, when the C walk declines the records (a framing error
        or an unusual case: the caller runs the Python path, which raises or handles it). OverflowError as
        :meth:`put_many`."""
        res = c_put(
            self._digests, self._offsets, self._slots, self._max_entries, self._size, self.latest_offset,
            data, p, n, count, base, min_delta,
        )
        if res is None:
            return False
        self._size, self.latest_offset, keys, probes, full = res
        self.lookups += keys
        self.probes += probes
        if full:
            raise OverflowError("offset map is full")
        return True

    def buffers(self) -> tuple[bytearray, array[int], int]:
        """``(digests, offsets, slots)``: the map's storage, for the C walkers (which read it in place)."""
        return self._digests, self._offsets, self._slots

    def count_lookups(self, lookups: int, probes: int) -> None:
        """Add lookups a C walker made on :meth:`buffers` to the map's counters."""
        self.lookups += lookups
        self.probes += probes

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset recorded for ``key``, or -1."""
        return self._offsets[self._slot(_md5(key).digest())]

    def get_many(self, keys: Iterable[bytes | bytearray | memoryview]) -> list[int]:
        """:meth:`get` of every key."""
        slots = self._slots
        at = self._digests.startswith
        offs = self._offsets
        md5 = _md5
        home = _home
        out: list[int] = []
        append = out.append
        probes = 0
        n = 0
        for key in keys:
            d = md5(key).digest()
            i = home(d)[0] % slots
            while True:
                o = offs[i]
                if o == _EMPTY or at(d, i * DIGEST_SIZE):
                    break
                probes += 1
                i += 1
                if i == slots:
                    i = 0
            append(o)
            n += 1
        self.lookups += n
        self.probes += probes
        return out

    def contains(self, key: bytes) -> bool:
        return self.get(key) != _EMPTY

    def clear(self) -> None:
        # only the offsets mark a slot as used; reset them in chunks so no slot-sized temporary is allocated
        chunk = min(self._slots, 65536)
        empty = array("q", [_EMPTY]) * chunk
        offsets = self._offsets
        for start in range(0, self._slots, chunk):
            n = min(chunk, self._slots - start)
            offsets[start : start + n] = empty if n == chunk else empty[:n]
        self._size = 0
        self.latest_offset = -1
        self.lookups = self.probes = 0


__all__ = ["BYTES_PER_ENTRY", "OffsetMap"]
