"""A fixed-memory map from record key to the last offset at which the key was seen.

The cleaner's dedupe map (Kafka's idea of a "skimpy" offset map, facts 1.7): every key is reduced to a 16-byte
MD5 digest, and digest + offset live in two preallocated arrays sized from ``log.cleaner.dedupe.buffer.size``.
The memory used is fixed when the map is created (24 bytes per slot) and never grows, whatever the keys look
like. A digest collision merges two keys; with 128-bit digests that is astronomically unlikely, and Kafka
accepts the same risk.

Open addressing with linear probing; the map is "full" at ``load_factor`` of its slots, and the caller stops
adding keys there (a dirty section larger than that is cleaned in several rounds).
"""

from __future__ import annotations

import hashlib
from array import array

DIGEST_SIZE = 16
OFFSET_SIZE = 8
BYTES_PER_ENTRY = DIGEST_SIZE + OFFSET_SIZE

_EMPTY = -1


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
    def digest(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def _slot(self, digest: bytes) -> int:
        """The slot holding ``digest``, or the empty slot where it would go."""
        slots = self._slots
        i = int.from_bytes(digest[:8], "big") % slots
        digests = self._digests
        offsets = self._offsets
        self.lookups += 1
        while True:
            if offsets[i] == _EMPTY:
                return i
            start = i * DIGEST_SIZE
            if digests[start : start + DIGEST_SIZE] == digest:
                return i
            self.probes += 1
            i += 1
            if i == slots:
                i = 0

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the latest for ``key``; raises when the map is full and the key is new."""
        d = self.digest(key)
        i = self._slot(d)
        if self._offsets[i] == _EMPTY:
            if self._size >= self._max_entries:
                raise OverflowError("offset map is full")
            start = i * DIGEST_SIZE
            self._digests[start : start + DIGEST_SIZE] = d
            self._size += 1
        self._offsets[i] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        i = self._slot(self.digest(key))
        return self._offsets[i]

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
