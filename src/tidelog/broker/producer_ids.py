"""Producer id allocation for idempotent producers (InitProducerId).

A producer id must never be handed out twice, not even after ``kill -9``: the storage layer's producer state
(sequence numbers per producer id, kept in ``.snapshot`` files and rebuilt from the log) would otherwise treat a
new producer as the continuation of an old one and reject or, worse, drop its batches as duplicates.

Kafka allocates producer ids in blocks. With ZooKeeper the next block lives in the znode
``/latest_producer_id_block`` (``ProducerIdBlockZNode``: JSON ``{"version":1,"broker":N,"block_start":S,
"block_end":E}``); under KRaft the controller hands out blocks with the ``AllocateProducerIds`` API and records
them in the metadata log (``ProducerIdsRecord``). Both reserve a whole block *before* any id of it is used, so a
crash wastes at most the unused rest of one block and never reuses an id.

tidelog keeps the same idea on one node: the file ``tidelog-producer-id-block`` at the root of every log dir
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
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

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


class ProducerIdManager:
    """Hands out producer ids that are unique for the life of the data directories.

    ``allocate()`` is cheap except once per block, when it fsyncs the block file (one fsync per
    ``block_size`` producers). It is thread-safe, so a handler may run it in a worker thread.
    """

    def __init__(self, log_dirs: Iterable[Path | str], block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("ProducerIdManager needs at least one log dir")
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self._lock = threading.Lock()
        # Ids in [_next_id, _block_end) are reserved on disk and not yet handed out.
        start = self._load()
        self._next_id = start
        self._block_end = start
        # pid -> latest epoch handed out by bump_epoch, for pids that bumped (LRU-bounded).
        self._epochs: OrderedDict[int, int] = OrderedDict()

    # -- persistence -------------------------------------------------------------------------------------

    def _files(self) -> list[Path]:
        return [d / PRODUCER_ID_BLOCK_FILE for d in self.log_dirs]

    def _load(self) -> int:
        best = 0
        for path in self._files():
            if path.exists():
                best = max(best, _parse_block_file(path))
        return best

    def _persist(self, next_block_start: int) -> None:
        data = f"version: {FORMAT_VERSION}\nnext_block_start: {next_block_start}\n".encode()
        for d, path in zip(self.log_dirs, self._files()):
            d.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, data)

    # -- allocation --------------------------------------------------------------------------------------

    @property
    def reserved_until(self) -> int:
        """Every producer id ever handed out (by any run on these dirs) is below this bound."""
        with self._lock:
            return self._block_end

    def block_exhausted(self) -> bool:
        """True when the next ``allocate()`` will reserve a new block (and fsync)."""
        with self._lock:
            return self._next_id >= self._block_end

    def allocate(self) -> int:
        """Return a producer id never returned before on these log dirs."""
        with self._lock:
            if self._next_id >= self._block_end:
                new_end = self._block_end + self.block_size
                # Reserve on disk first: if we crash after this line, restart starts at new_end.
                self._persist(new_end)
                self._next_id = self._block_end
                self._block_end = new_end
            pid = self._next_id
            self._next_id += 1
            return pid

    def is_issued(self, producer_id: int) -> bool:
        """True if ``producer_id`` may have been handed out by this manager (now or in an earlier run)."""
        with self._lock:
            return 0 <= producer_id < self._next_id

    def bump_epoch(self, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        """Epoch bump for an idempotent producer (InitProducerId v3+ with a producer id and epoch).

        Returns ``(producer_id, epoch + 1)`` when the producer id was issued here and ``producer_epoch`` is
        the latest epoch we know of for it; a fresh ``(new_id, 0)`` otherwise (unknown id, stale epoch, or an
        epoch that would overflow), which is what Kafka answers a non-transactional InitProducerId with.
        """
        with self._lock:
            # ids below _next_id were handed out now or by an earlier run (which started below our block)
            known = 0 <= producer_id < self._next_id
            latest = self._epochs.get(producer_id)
            current_ok = latest is None or latest == producer_epoch
            if known and current_ok and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
                new_epoch = producer_epoch + 1
                self._epochs[producer_id] = new_epoch
                self._epochs.move_to_end(producer_id)
                while len(self._epochs) > _MAX_TRACKED_EPOCHS:
                    self._epochs.popitem(last=False)
                return producer_id, new_epoch
        return self.allocate(), 0
