"""Log compaction: keep only the newest record per key (``cleanup.policy`` containing ``compact``).

What the cleaner does, following the behaviour Kafka documents (``LogCleaner``):

* **Choosing a log.** Each compacted log splits at its *first dirty offset* (from ``cleaner-offset-checkpoint``,
  reset to the log start offset when out of range) into a clean head and a dirty tail. The dirty section ends at
  the *first uncleanable offset*: the active segment, the high watermark / first unstable (open transaction)
  offset, and the first segment younger than ``min.compaction.lag.ms``, rounded down to a segment boundary.
  The dirty ratio is dirty bytes / (clean + dirty bytes). A log is eligible when the ratio exceeds
  ``min.cleanable.dirty.ratio``, when its oldest dirty record is older than ``max.compaction.lag.ms``, or when a
  delete horizon it wrote has passed (tombstones are due for removal). The eligible log with the highest ratio
  goes first; a log is never cleaned by two threads at once.
* **Offset map.** One pass over the dirty section records key -> last offset in a fixed-size
  :class:`~tidelog.storage.offset_map.OffsetMap` (``log.cleaner.dedupe.buffer.size`` split over the threads).
  When the map fills, the round ends at the last batch that fit; the rest is cleaned in later rounds.
* **Rewrite.** Every inactive segment below the map's end is recopied, grouped so that a group's original
  ``.log`` and index sizes fit ``segment.bytes`` / ``segment.index.bytes`` and its offsets fit relative to
  the group's base. A record survives when no later offset for its key is in the map. Tombstones (null value)
  survive until the batch's delete horizon: the first cleaning that keeps a tombstone rewrites its batch with
  the delete-horizon attribute and baseTimestamp = now + ``delete.retention.ms``; a cleaning after that time
  drops them. A batch that loses all its records is kept empty when it is its producer's last batch (producer
  state needs its offsets and sequence). Batches keep their base offset, last offset delta, producer fields,
  leader epoch and codec; an unchanged batch is copied byte for byte.
* **Swap.** A group is written to ``<base>.log.cleaned`` (+ indexes), fsynced, renamed ``.swap``, swapped into
  the segment list under the log's lock, the originals renamed ``.deleted`` (removed after
  ``file.delete.delay.ms``), and the swap renamed to the final names (:meth:`PartitionLog.replace_segments`).
  When the group's last offset was not retained, an empty batch at that offset ends the cleaned segment, so a
  recovered ``.swap`` covers the whole range it replaces. ``cleaner-offset-checkpoint`` then records the map's
  end as the next first dirty offset.

* **Transactions** (Kafka's ``CleanedTransactionMetadata``, :mod:`.txn_metadata`): the records of aborted
  transactions (from the ``.txnindex`` files) are neither put in the map nor kept, whatever their keys; committed
  transactional records are compacted like others; a marker is kept while batches of its transaction are seen,
  then gets the delete horizon and goes after it (kept when it is its producer's last record); the cleaned
  segment's ``.txnindex`` holds the entries of the ABORT markers kept. The first unstable offset bounds the
  dirty section.

Per-record work: both passes call C once per batch (``tidelog.storage._cleanwalk``, when built and
``TIDELOG_PURE_PYTHON`` is not set): :data:`.build_map.c_put_records` for the map,
:data:`.batch_filter.c_filter_records` for the keep/drop and the re-encoded kept records. The pure-Python
loops (:func:`.build_map._keys_and_deltas`, :func:`.batch_filter._scan_records`,
:func:`.batch_filter._retained_records`) stay the reference; the C walk declines any batch that is not plainly
well-formed (Python then raises the exact error), and both paths build byte-identical maps and segments. Each
hook is a global of the module that calls it: set it to None there to run the Python path.

Threads: ``log.cleaner.threads`` daemon threads, each waiting ``log.cleaner.backoff.ms`` between idle checks.
All file I/O happens on them, never on the broker's event loop. ``log.cleaner.io.max.bytes.per.second`` limits
the bytes read + written per second across all threads.

The modules, along Kafka's lines (each imports only those above it):

* :mod:`.config` -- :class:`CleanerConfig` (Kafka's ``CleanerConfig``);
* :mod:`.throttler` -- :class:`Throttler`;
* :mod:`.context` -- what a round carries through both passes: :class:`CleanResult` (Kafka's
  ``CleanerStats``), the abort check and throttling, :data:`FAULT_STEPS`, the errors;
* :mod:`.batches` -- reading a segment's batches (shared by both passes) and the C loader;
* :mod:`.txn_metadata` -- :class:`CleanedTransactionMetadata` (Kafka's), the aborted transactions and markers of
  the range being cleaned;
* :mod:`.manager` -- which logs need cleaning (Kafka's ``LogCleanerManager``): :func:`plan_log`,
  :func:`group_segments_by_size`, :class:`LogCleanerManager` (the filthiest log, logs in progress, checkpoints,
  per-log stats);
* :mod:`.build_map` -- the offset map (Kafka's ``Cleaner.buildOffsetMap``);
* :mod:`.batch_filter` -- the per-batch keep/drop and rebuild (Kafka's ``MemoryRecords.filterTo``);
* :mod:`.clean` -- one round: recopy into ``.cleaned`` and swap (Kafka's ``Cleaner.clean``/``cleanSegments``);
* :mod:`.threads` -- the cleaner threads, cleaner-wide totals and metrics (Kafka's ``LogCleaner``).
"""

from __future__ import annotations

from tidelog.storage.cleaner.clean import clean_log
from tidelog.storage.cleaner.config import CleanerConfig
from tidelog.storage.cleaner.context import (
    FAULT_STEPS,
    CleanerAbortedError,
    CleanResult,
    DedupeBufferTooSmallError,
)
from tidelog.storage.cleaner.manager import (
    LogCleanerManager,
    LogCleanerStats,
    LogToClean,
    group_segments_by_size,
    plan_log,
)
from tidelog.storage.cleaner.threads import LogCleaner
from tidelog.storage.cleaner.throttler import Throttler

__all__ = [
    "FAULT_STEPS",
    "CleanResult",
    "CleanerAbortedError",
    "CleanerConfig",
    "DedupeBufferTooSmallError",
    "LogCleaner",
    "LogCleanerManager",
    "LogCleanerStats",
    "LogToClean",
    "Throttler",
    "clean_log",
    "group_segments_by_size",
    "plan_log",
]
