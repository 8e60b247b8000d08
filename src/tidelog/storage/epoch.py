"""Leader-epoch cache: leader epoch -> first offset written in that epoch, persisted in
``leader-epoch-checkpoint`` (Kafka's ``LeaderEpochFileCache``).

Invariants (as Kafka): epochs strictly increase and so do their start offsets; an entry, once
assigned, is only replaced by a conflicting newer assignment (which truncates the non-monotonic tail)
or by the truncations below. ``-1`` (:data:`UNDEFINED_EPOCH`, :data:`UNDEFINED_EPOCH_OFFSET`) means "none".

Every change is written to the checkpoint synchronously and atomically. Kafka writes truncations
asynchronously; writing them at once costs one small fsync and keeps the file never staler than memory, except
when the process is out of file descriptors (EMFILE/ENFILE): the write is then deferred to the log manager's next
tick (``unwritten``, :meth:`LeaderEpochCache.write_pending`), not a log directory failure (issue 24).
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from tidelog.storage.checkpoints import read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from tidelog.storage.errors import CorruptCheckpointError
from tidelog.storage.open_files import FD_EXHAUSTED, SHORTAGE

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Thread-safe epoch -> start offset map backed by a ``leader-epoch-checkpoint`` file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._epochs: list[int] = []  # sorted ascending
        self._starts: list[int] = []  # start offset of self._epochs[i], ascending
        #: a write of the file was deferred (EMFILE/ENFILE): :meth:`write_pending` retries it
        self.unwritten = False
        for epoch, start in read_leader_epoch_checkpoint(self.path):
            if epoch < 0 or start < 0:
                raise CorruptCheckpointError(f"{self.path}: invalid leader epoch entry ({epoch}, {start})")
            self._assign(epoch, start)

    # ------------------------------------------------------------------------------------------ updates

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True (and persists) if anything changed.

        As Kafka: nothing happens when ``epoch`` is the latest epoch and ``start_offset`` is not lower
        than its start. Otherwise every trailing entry with an epoch >= ``epoch`` or a start offset >=
        ``start_offset`` is removed first, so the map stays monotonic in both columns.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        with self._lock:
            changed = self._assign(epoch, start_offset)
            if changed:
                self._write()
            return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._starts[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry whose start offset is >= ``end_offset`` (the log was truncated to it)."""
        with self._lock:
            if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
                return
            while self._starts and self._starts[-1] >= end_offset:
                self._epochs.pop()
                self._starts.pop()
            self._write_if_dir_exists()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before ``start_offset``: the newest entry starting at or before it is kept
        and moved to start exactly at ``start_offset`` (so ``truncate_from_start(6)`` keeps offset 6)."""
        with self._lock:
            n = bisect.bisect_right(self._starts, start_offset)
            if n == 0:
                return
            keep_epoch = self._epochs[n - 1]
            del self._epochs[:n], self._starts[:n]
            self._epochs.insert(0, keep_epoch)
            self._starts.insert(0, start_offset)
            self._write_if_dir_exists()

    def clear_and_flush(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._starts.clear()
            self._write()

    # ------------------------------------------------------------------------------------------ queries

    def latest_epoch(self) -> int:
        """The newest epoch, or :data:`UNDEFINED_EPOCH` (-1) when the cache is empty."""
        with self._lock:
            return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def latest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[0], self._starts[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that ``offset`` was written in (greatest start <= offset), or -1 if before all entries."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset)
            return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101/KIP-279): ``(epoch, end_offset)`` for ``requested_epoch``.

        * undefined (-1) requested, or requested above every known epoch -> ``(-1, -1)``;
        * requested == latest epoch -> ``(latest, log_end_offset)``;
        * otherwise the largest epoch <= requested and the start offset of the first epoch > requested.
          When requested is below the earliest cached epoch, Kafka (since KAFKA-7026/2.0) answers
          ``(requested, start of the earliest epoch)`` so a follower truncates to the leader's start,
          and this cache does the same.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._epochs[-1]:
                return requested_epoch, log_end_offset
            higher = bisect.bisect_right(self._epochs, requested_epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._starts[0]
            return self._epochs[higher - 1], self._starts[higher]

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._starts))

    def __len__(self) -> int:
        with self._lock:
            return len(self._epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {self.entries()})"

    # ------------------------------------------------------------------------------------------ persistence

    def _write(self) -> None:
        try:
            write_leader_epoch_checkpoint(self.path, zip(self._epochs, self._starts))
        except OSError as exc:
            if exc.errno not in FD_EXHAUSTED:
                raise
            # out of descriptors (issue 24): the entries are kept in memory, where every reader looks, and the
            # file is written again by the log manager's next tick (:meth:`write_pending`); an append that made a
            # new epoch does not fail after its records reached the log
            self.unwritten = True
            SHORTAGE.note("leader-epoch-checkpoint", exc, self.path)
            return
        self.unwritten = False

    def write_pending(self) -> None:
        """Write the file if a write was deferred for want of a descriptor (a no-op otherwise)."""
        if self.unwritten:
            with self._lock:
                if self.unwritten:
                    self._write_if_dir_exists()

    def _write_if_dir_exists(self) -> None:
        # A partition directory may have been renamed for deletion meanwhile (as Kafka's writeIfDirExists).
        if self.path.parent.is_dir():
            self._write()
