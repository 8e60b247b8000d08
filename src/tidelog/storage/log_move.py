"""Moving a partition's replica into another log directory (AlterReplicaLogDirs): Kafka's future replica.

Kafka (``ReplicaManager.alterReplicaLogDirs``, ``ReplicaAlterLogDirsThread``, ``LogManager.replaceCurrentWithFutureLog``)
creates ``<dest>/<topic>-<partition>.<uniqueId>-future``, a log of its own that a background thread fills by
fetching from the current log while the partition keeps taking appends and serving reads, and swaps it in for the
current log once it has caught up. :class:`ReplicaMove` does the same on one of the log manager's mover threads
(``num.replica.alter.log.dirs.threads``, default one per log directory):

1. **Copy, no lock held.** The future log starts empty at the current log start offset (or, resumed after a
   restart, from what its directory holds, recovered) and is fed the current log's batches from its own log end
   offset on (:meth:`PartitionLog.read` takes the partition's lock only to pick the segments;
   :meth:`PartitionLog.append_as_follower` builds the future's indexes, leader epochs, producer state and
   transaction index as a follower's append does), 1 MiB at a time, fsynced after every round, at most
   ``replica.alter.log.dirs.io.max.bytes.per.second``. Appends to the current log go on meanwhile; each round
   copies what they added during the previous one.
2. **Swap, under the partition's lock, briefly.** Once a round had less than ``SWAP_LAG_BYTES`` to copy, the
   partition's lock is taken: the last batches are copied, the future gets the current high watermark, log start
   offset and leader-epoch checkpoint and its tail is fsynced; the current directory is renamed
   ``<tp>.<id>-delete`` and the future one ``<tp>``, each rename fsynced (in this order: a crash in between leaves
   the future as the only live copy, which the next start renames into place; Kafka renames the future first and
   refuses to start on the two live copies a crash there leaves). The future log's files keep their descriptors
   and mappings, only their paths change (:meth:`PartitionLog.moved_to`, Kafka's ``renameDir``: nothing is
   reopened, no cost that grows with the data), and the partition's :class:`PartitionLog` object takes the future
   log's state, so every reference the broker holds stays valid. The old directory is removed in the background.

A truncation of the current log during the copy (a follower's) starts the copy again; the cleaner leaves a moving
partition alone (Kafka's ``abortAndPauseCleaning``); a deleted partition, a cancelled move (another destination,
or back to the current directory) or a failed directory ends the move and removes its future directory.

**At start** (Kafka resumes too): a ``-future`` directory whose live log is in another directory is a move in
progress; its log is recovered and the move continues on a mover thread. One without a live log is the only copy
of a finished move (a crash between the two renames) and is renamed into place before logs load.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.records.header import RECORD_BATCH_OVERHEAD, BatchHeader
from tidelog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    fsync_dir,
    write_leader_epoch_checkpoint,
)
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import (
    InvalidTopicError,
    KafkaStorageError,
    LogDirNotFoundError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
    StorageError,
)
from tidelog.storage.format import FUTURE_DIR_SUFFIX, parse_partition_dir, partition_dir_name
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager

if TYPE_CHECKING:
    from tidelog.storage.cleaner import LogCleaner

log = logging.getLogger("tidelog.storage.log_move")

#: bytes read from the current log per step of the copy
COPY_CHUNK_BYTES = 1 << 20
#: the swap (under the partition's lock) starts once a round had at most this much to copy
SWAP_LAG_BYTES = 1 << 20


class MoveCancelled(Exception):
    """The move was cancelled (another destination, the partition deleted, shutdown)."""


class ReplicaMove:
    """One partition's move into ``dest``: its future log and the thread work that fills and swaps it."""

    def __init__(self, manager: LogMoves, tp: tuple[str, int], plog: PartitionLog, dest: Path,
                 future_dir: Path, *, resumed: bool = False,
                 max_bytes_per_second: int | None = None) -> None:
        self.manager = manager
        self.tp = tp
        self.plog = plog
        self.dest = dest
        self.future_dir = future_dir
        self.resumed = resumed
        self.max_bytes_per_second = max_bytes_per_second
        self.future: PartitionLog | None = None
        self.cancelled = threading.Event()
        self.done = threading.Event()
        #: None while running or when it succeeded; the exception that ended it otherwise
        self.error: BaseException | None = None
        self.succeeded = False
        #: set by a cancel at shutdown: the future directory stays for the next start to resume
        self.keep_future = False
        #: test and bench hook: called after every copy round with the bytes it copied (on the mover thread)
        self.on_round: Callable[[int], None] | None = None
        self._copied_total = 0
        #: how long the swap held the partition's lock (seconds; None before the swap)
        self.swap_seconds: float | None = None
        #: the log directory the partition was in when the move began (its checkpoints are written at the end)
        self.plog_root_before: Path | None = None
        self._started = time.monotonic()

    # ------------------------------------------------------------------------------------------ state

    @property
    def offset_lag(self) -> int:
        """DescribeLogDirs' ``offset_lag`` of the future replica (Kafka's ``getLogEndOffsetLag``)."""
        future = self.future
        if future is None:
            return max(self.plog.log_end_offset - self.plog.log_start_offset, 0)
        return max(self.plog.log_end_offset - future.log_end_offset, 0)

    @property
    def size_in_bytes(self) -> int:
        future = self.future
        try:
            return int(future.size_in_bytes) if future is not None else 0
        except Exception:  # closed under our feet: the swap is happening
            return 0

    def cancel(self, keep_future: bool = False) -> None:
        """Stop the move at its next step; its future directory is removed unless ``keep_future`` (shutdown)."""
        self.keep_future = self.keep_future or keep_future
        self.cancelled.set()

    def _check(self) -> None:
        if self.cancelled.is_set():
            raise MoveCancelled(f"the move of {self.tp[0]}-{self.tp[1]} to {self.dest} was cancelled")

    # ------------------------------------------------------------------------------------------ thread

    def run(self) -> None:
        """The whole move, on a mover thread. Never raises: the outcome is in ``succeeded`` / ``error``."""
        name = f"{self.tp[0]}-{self.tp[1]}"
        try:
            gen = self.plog.truncations
            self._open_future()
            while True:
                if self.plog.truncations != gen:  # the current log was truncated: what we copied may be gone
                    gen = self.plog.truncations
                    assert self.future is not None
                    log.info("%s was truncated during its move: copying it again", name)
                    self.future.truncate_fully_and_start_at(self.plog.log_start_offset)
                copied = self._round(gen)
                if self.on_round is not None:
                    self.on_round(copied)
                if copied <= SWAP_LAG_BYTES and self._swap(gen):
                    break
            self.succeeded = True
            log.info("moved %s from %s to %s (%d bytes copied in %.1f s; the swap held the partition's lock %.1f ms)",
                     name, self.plog_root_before, self.dest, self._copied_total, time.monotonic() - self._started,
                     (self.swap_seconds or 0.0) * 1000)
        except MoveCancelled as exc:
            self.error = exc
            log.info("%s", exc)
            self._discard()
        except BaseException as exc:  # reported; the future removed, the current log untouched
            self.error = exc
            log.error("moving %s to %s failed: %s", name, self.dest, exc)
            self._discard()
        finally:
            self.manager._move_finished(self)
            self.done.set()

    def _open_future(self) -> None:
        self._check()
        plog = self.plog
        self.plog_root_before = plog.dir.parent
        fresh = not self.future_dir.is_dir()
        if fresh:
            self.future_dir.mkdir()
            meta = plog.dir / PARTITION_METADATA
            if meta.exists():
                shutil.copyfile(meta, self.future_dir / PARTITION_METADATA)
            fsync_dir(self.dest)
        future = PartitionLog.open(
            self.future_dir, plog.config, recovery_point=0, log_start_offset=0, high_watermark=None,
            clean_shutdown=fresh, epoch_cache=LeaderEpochCache(self.future_dir / LEADER_EPOCH_CHECKPOINT),
            producer_state=ProducerStateManager(self.future_dir), progress=None)
        future.on_io_error = self._future_io_error
        self.future = future
        if fresh:
            if plog.log_start_offset > 0:
                future.truncate_fully_and_start_at(plog.log_start_offset)
        elif not self._consistent():
            log.info("the future log %s does not match %s-%s any more: copying again", self.future_dir, *self.tp)
            future.truncate_fully_and_start_at(plog.log_start_offset)

    def _consistent(self) -> bool:
        """Whether the (resumed) future log is a prefix of the current one: its last batch is the current log's
        batch at that offset (same offsets, leader epoch and CRC)."""
        future, plog = self.future, self.plog
        assert future is not None
        if future.log_end_offset > plog.log_end_offset or future.log_end_offset < plog.log_start_offset:
            return False
        if future.log_end_offset == future.log_start_offset:
            return True
        last = None
        for seg in reversed(future.segments):
            if seg.size:
                last = _last_header(future, seg.base_offset)
                break
        if last is None:
            return True
        mine = _header_at(plog, last.base_offset)
        return mine is not None and (mine.base_offset, mine.last_offset, mine.partition_leader_epoch, mine.crc) == (
            last.base_offset, last.last_offset, last.partition_leader_epoch, last.crc)

    def _future_io_error(self, _future: PartitionLog, exc: OSError, what: str) -> None:
        self.manager.fail_dir(self.dest, f"{what} of the future log {self.future_dir} failed: {exc}")

    def _round(self, gen: int) -> int:
        """Copy from the future's end to the current log end as it was when the round began; fsync; the bytes
        copied. No lock of the partition is held (reads take it only to pick segments)."""
        future, plog = self.future, self.plog
        assert future is not None
        target = plog.log_end_offset
        copied = 0
        while future.log_end_offset < target:
            self._check()
            if plog.truncations != gen:
                break
            n = self._copy_step(future, plog)
            if n == 0:
                break
            copied += n
            self._throttle(n)
        future.flush()
        return copied

    def _copy_step(self, future: PartitionLog, plog: PartitionLog, max_bytes: int = COPY_CHUNK_BYTES) -> int:
        """Append to the future the current log's whole batches from the future's end (at most about
        ``max_bytes``, at least one batch); the bytes appended."""
        start = future.log_end_offset
        try:
            info = plog.read(start, max_bytes, min_one_batch=True)
        except OffsetOutOfRangeError:  # retention or DeleteRecords moved the current log start past us
            future.truncate_fully_and_start_at(plog.log_start_offset)
            return 1
        if not info.regions:
            return 0
        data = info.read_bytes()
        first = BatchHeader.parse(data, 0)
        if first.base_offset < start:  # the batch holding ``start`` began below it: cannot happen unless diverged
            raise StorageError(f"the future log of {self.tp[0]}-{self.tp[1]} ends inside a batch ({start})")
        future.append_as_follower(data)
        self._copied_total += len(data)
        return len(data)

    def _throttle(self, nbytes: int) -> None:
        rate = self.max_bytes_per_second
        if not rate:
            return
        ahead = self._copied_total / rate - (time.monotonic() - self._started)
        if ahead > 0 and self.cancelled.wait(ahead):
            self._check()

    # ------------------------------------------------------------------------------------------ swap

    def _swap(self, gen: int) -> bool:
        """Replace the current log with the future one (see the module docstring). False: a truncation of the
        current log came in between; copy again."""
        manager, plog, future = self.manager, self.plog, self.future
        assert future is not None
        topic, partition = self.tp
        name = f"{topic}-{partition}"
        # before the lock: the current log's leader epochs (the truth: an epoch may have no batch yet) into the
        # future directory, whose entries are made durable now; under the lock only a change is written again
        epochs_file = self.future_dir / LEADER_EPOCH_CHECKPOINT
        written = plog.epoch_cache.entries() if plog.epoch_cache is not None else None
        if written is not None:
            write_leader_epoch_checkpoint(epochs_file, written)
        fsync_dir(self.future_dir)
        with manager._swap_lock, plog._lock:
            locked_at = time.monotonic()
            self._check()
            with manager._lock:
                if manager._logs.get(self.tp) is not plog:
                    raise MoveCancelled(f"{name} is no longer hosted here")
                root = manager._log_root[self.tp]
                if self.dest in manager._failed_dirs:
                    raise KafkaStorageError(f"log directory {self.dest} is offline: {manager._failed_dirs[self.dest]}")
            if plog.failed is not None:
                raise KafkaStorageError(plog.failed)
            if plog.truncations != gen:
                return False
            while future.log_end_offset < plog.log_end_offset:
                if self._copy_step(future, plog, 1 << 30) == 0:
                    break
            future.high_watermark = plog.high_watermark
            if plog.log_start_offset > future.log_start_offset:
                future.maybe_increment_log_start_offset(plog.log_start_offset)
            if future.log_end_offset != plog.log_end_offset:
                raise StorageError(f"the future log of {name} ends at {future.log_end_offset}, "
                                   f"the current one at {plog.log_end_offset}")
            if plog.epoch_cache is not None:
                entries = plog.epoch_cache.entries()
                if entries != written:
                    write_leader_epoch_checkpoint(epochs_file, entries)
                future.epoch_cache = LeaderEpochCache(epochs_file)
            # what was copied under the lock is not fsynced here: like any append, the recovery point covers it
            # later (a crash recovers it, or finds the future directory whole and renames it into place)
            trash = root / f"{name}.{os.urandom(16).hex()}-delete"
            final = self.dest / name
            os.rename(plog.dir, trash)
            try:
                fsync_dir(root)
                os.rename(self.future_dir, final)
            except BaseException:
                os.rename(trash, plog.dir)  # the current log stays where it was
                raise
            # Kafka's renameDir: the future log's files keep their descriptors and mappings, only their paths
            # change (no reopening: that cost grows with the segments, 350 ms for 200 of them); then the
            # partition's object takes the future's state, so every reference the broker holds stays valid
            future.moved_to(final)
            for seg in plog._segments:
                seg.close_handlers()  # open reads keep their file handles (reference-counted)
            for _, seg in plog._deleted:
                seg.close_handlers()
            keep = {"_lock", "on_io_error", "_pending", "failed", "offline"}
            for key, value in vars(future).items():
                if key not in keep:
                    setattr(plog, key, value)
            plog._pending.extend(future._pending)  # background fsyncs after the future's rolls
            self.future = None
            with manager._lock:
                manager._log_root[self.tp] = self.dest
            manager._after_swap(self.tp, root, trash)
            self.swap_seconds = time.monotonic() - locked_at
        try:  # the second rename's durability: not needed before appends go on (see above)
            fsync_dir(self.dest)
        except OSError as exc:  # the partition is in ``dest`` now: its directory fails
            manager.fail_dir(self.dest, f"moving {name} into {self.dest} failed: {exc}")
        return True

    def _discard(self) -> None:
        """Close and remove the future log (a cancelled or failed move)."""
        future = self.future
        if future is not None:
            try:
                if self.keep_future and future.failed is None:
                    future.close()
                else:
                    future.close_handlers()
            except Exception:
                log.exception("closing the future log %s failed", self.future_dir)
        if self.keep_future:
            return
        if self.future_dir.is_dir():  # after the swap's rename it is the live log, under another name
            shutil.rmtree(self.future_dir, ignore_errors=True)
            try:
                fsync_dir(self.dest)
            except OSError:
                pass


def _header_at(plog: PartitionLog, offset: int) -> BatchHeader | None:
    """The header of the batch of ``plog`` holding ``offset`` (None if none)."""
    try:
        info = plog.read(offset, RECORD_BATCH_OVERHEAD, min_one_batch=True)
    except (OffsetOutOfRangeError, StorageError):
        return None
    if not info.regions:
        return None
    return BatchHeader.parse(info.read_bytes(), 0)


def _last_header(plog: PartitionLog, segment_base: int) -> BatchHeader | None:
    """The header of the last batch of ``plog``, scanning from ``segment_base`` (the last non-empty segment)."""
    last = None
    offset = segment_base
    while offset < plog.log_end_offset:
        header = _header_at(plog, offset)
        if header is None:
            break
        last = header
        offset = header.next_offset
    return last


TopicPartition = tuple[str, int]


class LogMoves:
    """The log manager's part for AlterReplicaLogDirs (mixed into :class:`~tidelog.storage.manager.LogManager`,
    whose state it uses: the attributes below are the manager's)."""

    log_dirs: list[Path]
    cleaner: LogCleaner | None
    move_max_bytes_per_second: int | None
    on_move_round: Callable[[ReplicaMove, int], None] | None
    _lock: threading.RLock
    _swap_lock: threading.Lock
    _dirs: dict[Path, Any]
    _failed_dirs: dict[Path, str]
    _logs: dict[TopicPartition, PartitionLog]
    _log_root: dict[TopicPartition, Path]
    _moves: dict[TopicPartition, ReplicaMove]
    _mover: ThreadPoolExecutor | None
    _deleter: ThreadPoolExecutor | None
    _pending_deletes: list[Future[None]]
    _resumable: list[tuple[TopicPartition, Path]]

    def _check_started(self) -> None:
        raise NotImplementedError

    def _checkpoint_dir_offsets(self, root: Path) -> None:
        raise NotImplementedError

    def fail_dir(self, root: Path, reason: str) -> bool:
        raise NotImplementedError

    def alter_log_dir(self, topic: str, partition: int, dest: Path) -> bool:
        """AlterReplicaLogDirs of one partition (Kafka's ``ReplicaManager.alterReplicaLogDirs``): start moving its
        log into the log directory ``dest`` in the background (:mod:`tidelog.storage.log_move`) and return at once;
        True when a move is (now) under way, False when the log is in ``dest`` already (a move elsewhere is
        cancelled then, as Kafka does). A move to another directory replaces one under way."""
        self._check_started()
        tp = (topic, partition)
        dest = Path(dest).absolute()
        name = partition_dir_name(topic, partition)
        if len(f"{name}.{'0' * 32}{FUTURE_DIR_SUFFIX}") > 255:
            raise InvalidTopicError("The topic name is too long.")
        with self._lock:
            if dest not in self._dirs:
                raise LogDirNotFoundError(f"{dest} is not one of this broker's log directories")
            if dest in self._failed_dirs:
                raise KafkaStorageError(f"Log directory {dest} is offline")
            plog = self._logs.get(tp)
            root = self._log_root.get(tp)
            if plog is None or root is None:
                raise ReplicaNotAvailableError(f"{topic}-{partition} has no replica on this broker")
            if root in self._failed_dirs:
                raise KafkaStorageError(f"Partition {topic}-{partition} is offline")
            current = self._moves.get(tp)
            if current is not None and current.dest == dest:
                return True
            if current is not None:
                current.cancel()  # it removes its future directory; the new one gets another name
            if root == dest:
                return False
            move = ReplicaMove(self, tp, plog, dest, dest / f"{name}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}",
                               max_bytes_per_second=self.move_max_bytes_per_second)
            self._start_move(move)
        return True

    def move_log(self, topic: str, partition: int, dest: Path, timeout: float | None = None) -> bool:
        """:meth:`alter_log_dir` and wait for the move to finish (tools, tests); its error is raised."""
        if not self.alter_log_dir(topic, partition, dest):
            return False
        with self._lock:
            move = self._moves.get((topic, partition))
        if move is not None:
            if not move.done.wait(timeout):
                raise TimeoutError(f"the move of {topic}-{partition} to {dest} did not finish in {timeout} s")
            if move.error is not None:
                raise move.error
        return True

    def moves(self) -> list[ReplicaMove]:
        """The moves under way (DescribeLogDirs answers their future logs)."""
        with self._lock:
            return list(self._moves.values())

    def _start_move(self, move: ReplicaMove) -> None:
        """Register and submit a move (``self._lock`` held)."""
        self._moves[move.tp] = move
        hook = self.on_move_round
        if hook is not None:
            move.on_round = lambda copied: hook(move, copied)
        if self.cleaner is not None:
            self.cleaner.abort(move.tp)  # and ``_healthy_logs`` leaves it out until the move ends
        assert self._mover is not None
        self._mover.submit(move.run)

    def _move_finished(self, move: ReplicaMove) -> None:
        """Called by a move's thread at its end, whatever the outcome."""
        with self._lock:
            if self._moves.get(move.tp) is move:
                del self._moves[move.tp]
        if move.succeeded and move.plog_root_before is not None:
            for r in (move.plog_root_before, move.dest):
                self._checkpoint_dir_offsets(r)

    def _after_swap(self, tp: TopicPartition, old_root: Path, trash: Path) -> None:
        """The swap of a move renamed the old directory ``trash``: remove it in the background."""
        if self.cleaner is not None:
            self.cleaner.abort(tp)
        assert self._deleter is not None
        fut = self._deleter.submit(shutil.rmtree, trash, True)
        with self._lock:  # wait_for_deletions waits for it too
            self._pending_deletes = [f for f in self._pending_deletes if not f.done()] + [fut]

    def _cancel_moves(self, pred: Callable[[ReplicaMove], bool]) -> list[ReplicaMove]:
        with self._lock:
            found = [m for m in self._moves.values() if pred(m)]
        for m in found:
            m.cancel()
        return found

    def _finish_moves(self, root: Path) -> None:
        """At start, before pending deletions finish: a ``<tp>.<id>-future`` whose live log exists in another log
        directory is a move under way, resumed after the logs are loaded (as Kafka); one without is the only
        copy of a finished move (a crash between the swap's two renames): renamed into place."""
        for child in sorted(root.iterdir()):
            if not (child.is_dir() and child.name.endswith(FUTURE_DIR_SUFFIX)):
                continue
            name = child.name[: -len(FUTURE_DIR_SUFFIX)].rsplit(".", 1)[0]
            tp = parse_partition_dir(name)
            if tp is None:
                continue
            live = [p for p in self.log_dirs if (p / name).is_dir()]
            if live and live != [root] and not any(t == tp for t, _ in self._resumable):
                log.info("resuming the move of %s into %s (%s)", name, root, child)
                self._resumable.append((tp, child))
            elif live:
                log.info("removing %s (the live log is in the same directory, or another move of it resumes)", child)
                shutil.rmtree(child, ignore_errors=True)
            else:
                log.info("finishing the move of %s into %s", name, root)
                os.rename(child, root / name)
                fsync_dir(root)

    def _resume_moves(self) -> None:
        for tp, future_dir in self._resumable:
            with self._lock:
                plog = self._logs.get(tp)
                if plog is None:
                    shutil.rmtree(future_dir, ignore_errors=True)
                    continue
                self._start_move(ReplicaMove(self, tp, plog, future_dir.parent, future_dir, resumed=True,
                                             max_bytes_per_second=self.move_max_bytes_per_second))
        self._resumable.clear()
