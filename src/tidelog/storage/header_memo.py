"""The batch headers a segment's reads found last, so the next read does not ``pread`` and parse them again.

A follower fetches from where its previous answer ended: its fetch offset is the base offset of the batch after
the last one it was sent, and the other follower reads the same batches a moment later. Without a memo every
follower answer cost a header ``pread`` for the index entry's batch, one per batch returned (a 64 KiB batch is
larger than the 4 KiB scan chunk) and the parse of each (issue 30: ~3 ``pread`` per follower answer on the
leader). :class:`HeaderMemo` keeps the last :data:`MEMO_ENTRIES` headers a read of the segment yielded, by file
position and by base offset; a read starting at a remembered base offset and walking remembered positions reads
nothing from the file until it reaches a position it has not seen.

Why it stays right: a position below the segment's size holds the same batch until the segment is truncated
(``truncate_to``, recovery), which clears the memo; appends only add batches after the end, and a read never
looks past the size it was given. It is bounded: :data:`MEMO_ENTRIES` headers (~4 KiB) per segment that is read,
the older half dropped when it fills up, all of it by the idle sweep of inactive segments."""

from __future__ import annotations

from collections.abc import Iterator

from tidelog.records.header import (
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    HeaderTuple,
)
from tidelog.storage.header_scan import iter_header_tuples

MEMO_ENTRIES = 8
"""Headers kept per segment: a follower round's answer is 2-3 batches of 64 KiB at the cluster bench's load, and
two followers read the same ones; small batches simply fall back to the 4 KiB chunked scan sooner. Bounded for
brokers with many partitions read (a header tuple with its ints is ~0.5 KiB)."""


class HeaderMemo:
    """Headers of one segment read last: position -> header tuple, base offset -> position."""

    __slots__ = ("_at", "_start")

    def __init__(self) -> None:
        self._at: dict[int, HeaderTuple] = {}
        self._start: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._at)

    def clear(self) -> None:
        self._at = {}
        self._start = {}

    def find(self, base_offset: int) -> tuple[int, HeaderTuple] | None:
        """``(position, header)`` of the remembered batch whose base offset is ``base_offset``, or None."""
        pos = self._start.get(base_offset)
        if pos is None:
            return None
        fields = self._at.get(pos)
        return None if fields is None else (pos, fields)

    def headers(self, fd: int, start: int, end: int) -> Iterator[tuple[int, HeaderTuple]]:
        """:func:`~tidelog.storage.header_scan.iter_header_tuples` of ``[start, end)``: remembered headers first,
        then the file's (each remembered as it is yielded)."""
        at = self._at
        pos = start
        fields = at.get(pos)
        while fields is not None:
            size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
            if pos + size > end:
                return
            yield pos, fields
            pos += size
            fields = at.get(pos)
        if end - pos < RECORD_BATCH_OVERHEAD:
            return
        for found, fields in iter_header_tuples(fd, pos, end):
            self.remember(found, fields)
            yield found, fields

    def remember(self, position: int, fields: HeaderTuple) -> None:
        at = self._at
        if len(at) >= MEMO_ENTRIES:
            # keep the newer half (inserted last: reads go forward) in new dicts, so a concurrent reader of the old
            # ones never sees them change size under it
            kept = list(at.items())[MEMO_ENTRIES // 2:]
            at = self._at = dict(kept)
            self._start = {f[H_BASE_OFFSET]: p for p, f in kept}
        at[position] = fields
        self._start[fields[H_BASE_OFFSET]] = position
