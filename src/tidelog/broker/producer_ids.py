"""Producer id allocation for idempotent producers (InitProducerId).

A producer id must never be handed out twice, not even after ``kill -9``: the storage layer's producer state
(sequence numbers per producer id, kept in ``.snapshot`` files and rebuilt from the log) would otherwise treat a
new producer as the continuation of an old one and reject or, worse, drop its batches as duplicates.

Kafka allocates producer ids in blocks. With ZooKeeper the next block lives in the znode
``/latest_producer_id_block`` (``ProducerIdBlockZNode``: JSON ``{"version":1,"broker":N,"block_start":S,
"block_end":E}``); under KRaft the controller hands out blocks with the ``AllocateProducerIds`` API and records
them in the metadata log (``ProducerIdsRecord``). Both reserve a whole block *before* any id of it is used, so a
crash wastes at most the unused rest of one block and never reuses an id.

The manager below keeps the per-producer logic (ids handed out in order from a reserved block, epoch bumps) and
gets its blocks from a *block source*: :class:`FileBlockSource` on one node, and in ZooKeeper mode
``tidelog.cluster.producer_ids.ZkBlockSource``, Kafka's ``/latest_producer_id_block`` shared by every broker
(this module does not import kazoo).

On one node the file ``tidelog-producer-id-block`` at the root of every log dir
holds the first id of the next block that may be reserved. Reserving a block rewrites the file atomically (write
``<file>.tmp``, fsync, rename, fsync the directory) *before* the first id of the block is returned. The file is
written to every log dir and the largest value found wins on load, so losing (or restoring an old copy of) one
log dir cannot make ids go backwards as long as one copy is current.

File format (text, like Kafka's checkpoint files)::

    version: 0
    next_block_start: 3000
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

PRODUCER_ID_BLOCK_FILE = "tidelog-producer-id-block"
DEFAULT_BLOCK_SIZE = 1000
FORMAT_VERSION = 0

# Kafka: producer epochs are int16; a producer whose epoch would overflow gets a fresh producer id instead
# (TransactionMetadata.isEpochExhausted: epoch >= Short.MaxValue - 1).
MAX_PRODUCER_EPOCH = 32767 - 1
# How many bumped epochs to remember (only producers that bumped are tracked; see ProducerIdManager.bump_epoch).
_MAX_TRACKED_EPOCHS = 100_000


class ProducerIdBlockFileError(OSError):
    """The producer id block file exists but does not parse."""


def _parse_block_file(path: Path) -> int:
    text = path.read_text(encoding="utf-8")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ProducerIdBlockFileError(f"{path}: malformed line {line!r}")
        fields[key.strip()] = value.strip()
    try:
        version = int(fields["version"])
        next_start = int(fields["next_block_start"])
    except (KeyError, ValueError) as exc:
        raise ProducerIdBlockFileError(f"{path}: malformed producer id block file") from exc
    if version != FORMAT_VERSION:
        raise ProducerIdBlockFileError(f"{path}: unsupported version {version}")
    if next_start < 0:
        raise ProducerIdBlockFileError(f"{path}: negative next_block_start {next_start}")
    return next_start


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_block_files(log_dirs: Iterable[Path | str]) -> int:
    """The largest ``next_block_start`` over the block files of ``log_dirs`` (0 when there is none)."""
    best = 0
    for d in log_dirs:
        path = Path(d) / PRODUCER_ID_BLOCK_FILE
        if path.exists():
            best = max(best, _parse_block_file(path))
    return best


class BlockSource(Protocol):
    """Where a :class:`ProducerIdManager` gets its blocks. ``reserve`` may block (disk, network); the manager
    calls it under its lock, at most once per ``block_size`` ids."""

    def issued_below(self) -> int:
        """Every id below this bound was (or may have been) handed out by an earlier run *of this node*: such
        ids may ask for an epoch bump. 0 when the source cannot tell."""
        ...

    def reserve(self, size: int) -> tuple[int, int]:
        """Durably reserve ``size`` ids that no one else will ever be given; return ``[start, end)``."""
        ...


class FileBlockSource:
    """One node: blocks follow each other, the next start kept in ``tidelog-producer-id-block``."""

    def __init__(self, log_dirs: Iterable[Path | str]) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("ProducerIdManager needs at least one log dir")
        self._loaded = read_block_files(self.log_dirs)
        self._next_start = self._loaded

    def _files(self) -> list[Path]:
        return [d / PRODUCER_ID_BLOCK_FILE for d in self.log_dirs]

    def issued_below(self) -> int:
        return self._loaded

    def reserve(self, size: int) -> tuple[int, int]:
        start, end = self._next_start, self._next_start + size
        data = f"version: {FORMAT_VERSION}\nnext_block_start: {end}\n".encode()
        for d, path in zip(self.log_dirs, self._files()):
            d.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, data)
        self._next_start = end
        return start, end


class ProducerIdManager:
    """Hands out producer ids that are never handed out twice (for the life of the data directories on one node,
    cluster-wide with a ZooKeeper block source).

    ``allocate()`` is cheap except once per block, when the source reserves the next block (one fsync, or one
    ZooKeeper round trip, per ``block_size`` producers). It is thread-safe; from an event loop call the
    ``*_nowait`` variants and fall back to a worker thread when they answer None.
    """

    def __init__(self, log_dirs: Iterable[Path | str] | None = None, block_size: int = DEFAULT_BLOCK_SIZE, *,
                 source: BlockSource | None = None) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        if source is None:
            if log_dirs is None:
                raise ValueError("ProducerIdManager needs log dirs or a block source")
            source = FileBlockSource(log_dirs)
        self.source = source
        self.block_size = block_size
        self._lock = threading.Lock()
        # Ids in [_next_id, _block_end) are reserved by the source and not yet handed out.
        self._next_id = 0
        self._block_end = 0
        # Ids this node handed out (or, below issued_below(), an earlier run did): disjoint [start, end) ranges in
        # increasing order, merged when contiguous (on one node: a single range).
        floor = source.issued_below()
        self._starts: list[int] = [0] if floor > 0 else []
        self._ends: list[int] = [floor] if floor > 0 else []
        # pid -> latest epoch handed out by bump_epoch, for pids that bumped (LRU-bounded).
        self._epochs: OrderedDict[int, int] = OrderedDict()

    # -- allocation (callers hold self._lock) ------------------------------------------------------------------

    def _take(self) -> int:
        if self._next_id >= self._block_end:
            # Reserve first: if we crash after this line, no id of the block is ever handed out again.
            start, end = self.source.reserve(self.block_size)
            if end <= start or (self._ends and start < self._ends[-1]):
                raise RuntimeError(f"producer id block source returned an unusable block [{start}, {end})")
            self._next_id, self._block_end = start, end
        pid = self._next_id
        self._next_id += 1
        if self._ends and self._ends[-1] == pid:
            self._ends[-1] = pid + 1
        else:
            self._starts.append(pid)
            self._ends.append(pid + 1)
        return pid

    def _known(self, producer_id: int) -> bool:
        i = bisect_right(self._starts, producer_id) - 1
        return i >= 0 and producer_id < self._ends[i]

    def _bump(self, producer_id: int, producer_epoch: int) -> tuple[int, int] | None:
        latest = self._epochs.get(producer_id)
        current_ok = latest is None or latest == producer_epoch
        if self._known(producer_id) and current_ok and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
            new_epoch = producer_epoch + 1
            self._epochs[producer_id] = new_epoch
            self._epochs.move_to_end(producer_id)
            while len(self._epochs) > _MAX_TRACKED_EPOCHS:
                self._epochs.popitem(last=False)
            return producer_id, new_epoch
        return None

    # -- public API ----------------------------------------------------------------------------------------------

    @property
    def reserved_until(self) -> int:
        """The end of the current block: every id this node handed out is below it."""
        with self._lock:
            return self._block_end

    def block_exhausted(self) -> bool:
        """True when the next ``allocate()`` will reserve a new block (and block on the source)."""
        with self._lock:
            return self._next_id >= self._block_end

    def allocate(self) -> int:
        """Return a producer id never returned before (may block once per block)."""
        with self._lock:
            return self._take()

    def allocate_nowait(self) -> int | None:
        """``allocate()`` when that cannot block: None if the lock is busy or a block must be reserved first."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._take() if self._next_id < self._block_end else None
        finally:
            self._lock.release()

    def is_issued(self, producer_id: int) -> bool:
        """True if ``producer_id`` was handed out here (now, or on one node by an earlier run)."""
        with self._lock:
            return self._known(producer_id)

    def bump_epoch(self, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        """Epoch bump for an idempotent producer (InitProducerId v3+ with a producer id and epoch).

        Returns ``(producer_id, epoch + 1)`` when the producer id was issued here and ``producer_epoch`` is
        the latest epoch we know of for it; a fresh ``(new_id, 0)`` otherwise (unknown id, stale epoch, or an
        epoch that would overflow), which is what Kafka answers a non-transactional InitProducerId with. In
        ZooKeeper mode only ids this broker handed out since it started can bump; others get a fresh id.
        """
        with self._lock:
            bumped = self._bump(producer_id, producer_epoch)
            return bumped if bumped is not None else (self._take(), 0)

    def bump_epoch_nowait(self, producer_id: int, producer_epoch: int) -> tuple[int, int] | None:
        """``bump_epoch()`` when that cannot block, else None."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            bumped = self._bump(producer_id, producer_epoch)
            if bumped is not None:
                return bumped
            return (self._take(), 0) if self._next_id < self._block_end else None
        finally:
            self._lock.release()
