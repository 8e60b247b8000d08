"""What a ShareFetch reads of a partition's log: the batch headers of the records it may acquire, and the file
regions to answer with (sent by ``sendfile`` as the classic Fetch path's, never copied into memory).

Kafka's share fetch reads the log with the partition's max bytes (zero-copy ``FileRecords`` slices) and hands the
acquired batches out whole. Reading the same way into memory costs a copy of up to ``MaxBytes`` (50 MiB by default
for librdkafka) per ShareFetch even when ``MaxRecords`` (e.g. 500 or 2000) acquire a fraction of it, so this reads
only the 61-byte v2 batch headers (``storage.header_scan``, 4 KiB preads) and stops after the batch that completes
``max_records`` records from ``start``: what one acquisition can take. The answer is the acquired batches as slices
of the segment files (:class:`tidelog.storage.file_handles.FileRegion`, whose ``handle`` keeps the descriptor open).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidelog.records.header import (
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    LOG_OVERHEAD,
)
from tidelog.storage.file_handles import FileRegion
from tidelog.storage.header_scan import iter_header_tuples

_CONTROL = 0x20


@dataclass(slots=True)
class ReadBatch:
    """One whole v2 batch of the log: where it lies (``region``'s file, ``position``, ``length``) and its offsets."""

    region: FileRegion
    position: int
    length: int
    base: int
    last: int
    control: bool


def read_batches(plog: Any, start: int, max_bytes: int, hw: int, max_records: int) -> list[ReadBatch]:
    """Blocking (a request-pool thread): the whole batches from the one holding ``start``, below the high
    watermark, within ``max_bytes`` (at least one batch), up to the batch that completes ``max_records`` records
    at or after ``start``. Only headers are read."""
    info = plog.read(start, max_bytes, max_offset=hw, min_one_batch=True)
    out: list[ReadBatch] = []
    counted = 0
    for region in info.regions:
        end = region.position + region.length
        for pos, f in iter_header_tuples(region.fd, region.position, end):
            base = f[H_BASE_OFFSET]
            last = base + f[H_LAST_OFFSET_DELTA]
            if base >= hw:
                return out
            out.append(ReadBatch(region, pos, f[H_BATCH_LENGTH] + LOG_OVERHEAD, base, last,
                                 bool(f[H_ATTRIBUTES] & _CONTROL)))
            if last >= start:
                counted += last - max(base, start) + 1
            if counted >= max_records:
                return out
    return out


def regions_of(batches: list[ReadBatch]) -> list[FileRegion]:
    """The file regions covering ``batches`` (consecutive in the log), one per segment file they lie in."""
    out: list[FileRegion] = []
    for b in batches:
        if out and out[-1].fd == b.region.fd and out[-1].position + out[-1].length == b.position:
            out[-1].length += b.length
            out[-1].next_offset = b.last + 1
        else:
            out.append(FileRegion(b.region.fd, b.position, b.length, b.base, b.region.handle, b.last + 1))
    return out
