"""Moving a replica between log directories with a future log (AlterReplicaLogDirs, ``storage/log_move.py``):
appends and reads go on during the copy, the future catches up and is swapped in, a truncation during the copy
starts it again, a deletion cancels it, and a move interrupted by a shutdown resumes at the next start.

Each test pauses the mover between two copy rounds (``LogManager.on_move_round``, called with no lock held) and
does its appends then: they must finish while the move is still under way (before, a move held the partition's
lock for the whole copy, so these appends would wait for it)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tidelog.records import build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_move import MoveCancelled
from tidelog.storage.manager import LogManager

TOPIC_ID = bytes.fromhex("11223344556677889900aabbccddeeff")
CONFIG = LogConfig(segment_bytes=1 << 20)
WAIT = 60.0


def _manager(*dirs: Path) -> LogManager:
    m = LogManager(list(dirs), CONFIG)
    m.startup()
    return m


def _fill(plog: Any, n: int, start_seq: int = 0, value: bytes = b"m" * 8000, epoch: int = 3) -> None:
    for i in range(n):
        plog.append_as_leader(build_batch([(None, value)], producer_id=7, producer_epoch=0,
                                          base_sequence=start_seq + i), leader_epoch=epoch)
    plog.high_watermark = plog.log_end_offset


class Pause:
    """The move hook: after round ``at``, say so and wait until released."""

    def __init__(self, at: int = 1) -> None:
        self.at, self.rounds = at, 0
        self.paused, self.go = threading.Event(), threading.Event()
        self.moves: list[Any] = []

    def __call__(self, move: Any, _copied: int) -> None:
        self.rounds += 1
        self.moves.append(move)
        if self.rounds == self.at:
            self.paused.set()
            assert self.go.wait(WAIT), "the test never released the move"


def _in_thread(fn: Any) -> None:
    """Run ``fn`` on another thread; it must finish (a lock held by the move would hang it)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(WAIT)
    assert not t.is_alive(), "blocked while the move was paused between rounds"
    assert not errors, errors


def test_appends_and_reads_go_on_during_a_move(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    m = _manager(a, b)
    try:
        plog = m.create_log("t", 0, None, TOPIC_ID)
        _fill(plog, 400)  # about 3 MB, several segments
        pause = Pause()
        m.on_move_round = pause
        assert m.alter_log_dir("t", 0, b) is True  # answered at once
        assert pause.paused.wait(WAIT)
        [move] = m.moves()
        futures = list(b.glob("t-0.*-future"))
        assert len(futures) == 1 and move.future_dir == futures[0]
        assert m.log_dir_of("t", 0) == a and move.offset_lag == 0 and move.size_in_bytes > 0

        def during() -> None:  # the move is paused between rounds: no lock of the partition may be held
            _fill(plog, 50, start_seq=400, value=b"d" * 100, epoch=4)
            assert plog.read(0, 1 << 20).size > 0

        _in_thread(during)
        assert not move.done.is_set() and m.moves() == [move] and move.offset_lag == 50
        expected = plog.read(0, 1 << 30).read_bytes()
        leo = plog.log_end_offset
        pause.go.set()
        assert move.done.wait(WAIT) and move.error is None and move.succeeded
        assert m.moves() == [] and m.log_dir_of("t", 0) == b and m.get_log("t", 0) is plog
        assert plog.dir == b / "t-0" and not list(b.glob("*-future")) and plog.log_end_offset == leo
        assert plog.read(0, 1 << 30).read_bytes() == expected
        assert plog.epoch_cache.latest_epoch() == 4
        # the producer state came along: a retried batch is a duplicate, the next sequence goes on
        dup = plog.append_as_leader(build_batch([(None, b"d" * 100)], producer_id=7, producer_epoch=0,
                                                base_sequence=449))
        assert dup.first_offset == leo - 1 and plog.log_end_offset == leo
        _fill(plog, 1, start_seq=450, value=b"after")
        # the future log's objects were moved, not reopened: no state may still point at the future directory
        assert not [k for k, v in vars(plog).items()
                    if isinstance(getattr(v, "__self__", None), PartitionLog) and v.__self__ is not plog]
        assert all(seg.log_path.parent == b / "t-0" and seg.offset_index.path.parent == b / "t-0"
                   for seg in plog.segments)
        # every path-based operation works in the new place: roll, retention, deferred deletion, idle unmapping
        plog.roll()
        _fill(plog, 1, start_seq=451, value=b"rolled")
        assert len(plog.delete_segments_before(200)) > 0 and plog.log_start_offset > 0
        assert plog.delete_expired_files(now_ms=1 << 62) > 0
        m.unmap_idle_indexes()
        m.unmap_idle_indexes()
        tail = plog.read(plog.log_start_offset, 1 << 30)
        assert tail.size > 0 and b"rolled" in plog.read(leo + 1, 1 << 20).read_bytes()
        leo = plog.log_end_offset
        m.wait_for_deletions()
        assert not [p for p in a.iterdir() if p.name.startswith("t-0")]
    finally:
        m.shutdown()
    m = _manager(a, b)
    try:
        assert m.log_dir_of("t", 0) == b and m.get_log("t", 0).log_end_offset == leo
    finally:
        m.shutdown()


def test_a_truncation_during_the_move_copies_again(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    m = _manager(a, b)
    try:
        plog = m.create_log("t", 0, None, TOPIC_ID)
        _fill(plog, 200)
        pause = Pause()
        m.on_move_round = pause
        m.alter_log_dir("t", 0, b)
        assert pause.paused.wait(WAIT)
        # a follower's truncation, then other records at the same offsets (a new leader's)
        _in_thread(lambda: (plog.truncate_to(150), _fill(plog, 30, start_seq=150, value=b"x" * 500, epoch=5)))
        expected = plog.read(0, 1 << 30).read_bytes()
        [move] = m.moves()
        pause.go.set()
        assert move.done.wait(WAIT) and move.succeeded, move.error
        assert m.log_dir_of("t", 0) == b and plog.read(0, 1 << 30).read_bytes() == expected
        assert plog.log_end_offset == 180 and plog.epoch_cache.latest_epoch() == 5
    finally:
        m.shutdown()


def test_deleting_the_partition_cancels_its_move(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    m = _manager(a, b)
    try:
        plog = m.create_log("t", 0, None, TOPIC_ID)
        _fill(plog, 100)
        pause = Pause()
        m.on_move_round = pause
        m.alter_log_dir("t", 0, b)
        assert pause.paused.wait(WAIT)
        [move] = m.moves()
        deleted: list[bool] = []
        _in_thread(lambda: deleted.append(m.delete_log("t", 0)))  # while the move is paused
        assert deleted == [True] and move.cancelled.is_set()
        pause.go.set()
        assert move.done.wait(WAIT) and isinstance(move.error, MoveCancelled)
        assert not list(b.glob("t-0*")) and m.moves() == [] and m.get_log("t", 0) is None
    finally:
        m.shutdown()


def test_moving_back_cancels_and_a_new_destination_replaces(tmp_path: Path) -> None:
    a, b, c = (tmp_path / "a").absolute(), (tmp_path / "b").absolute(), (tmp_path / "c").absolute()
    m = _manager(a, b, c)
    try:
        plog = m.create_log("t", 0, None, TOPIC_ID)
        src = m.log_dir_of("t", 0)
        dst, other = [d for d in (a, b, c) if d != src]
        _fill(plog, 100)
        pause = Pause()
        m.on_move_round = pause
        assert m.alter_log_dir("t", 0, dst) is True
        assert pause.paused.wait(WAIT)
        [first] = m.moves()
        assert m.alter_log_dir("t", 0, dst) is True and m.moves() == [first]  # the same move goes on
        assert m.alter_log_dir("t", 0, src) is False  # back where it is: the move is cancelled
        assert first.cancelled.is_set()
        pause.go.set()
        assert first.done.wait(WAIT) and isinstance(first.error, MoveCancelled)
        assert not list(dst.glob("*-future")) and m.log_dir_of("t", 0) == src
        m.on_move_round = None
        assert m.move_log("t", 0, other, timeout=WAIT) is True
        assert m.log_dir_of("t", 0) == other and plog.log_end_offset == 100
    finally:
        m.shutdown()


def test_a_move_interrupted_by_shutdown_resumes_at_start(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    m = _manager(a, b)
    plog = m.create_log("t", 0, None, TOPIC_ID)
    _fill(plog, 300)
    expected = plog.read(0, 1 << 30).read_bytes()
    pause = Pause()
    m.on_move_round = pause
    m.alter_log_dir("t", 0, b)
    assert pause.paused.wait(WAIT)
    [move] = m.moves()
    stopper = threading.Thread(target=m.shutdown)
    stopper.start()
    assert move.cancelled.wait(WAIT)
    pause.go.set()
    stopper.join(WAIT)
    assert not stopper.is_alive() and isinstance(move.error, MoveCancelled)
    [future] = b.glob("t-0.*-future")  # kept for the next start, which resumes it (as Kafka)
    assert (a / "t-0").is_dir()
    m = LogManager([a, b], CONFIG)
    resumed = Pause()
    m.on_move_round = resumed
    m.startup()
    try:
        assert resumed.paused.wait(WAIT)
        [mv] = m.moves()
        assert mv.resumed and mv.future_dir == future and m.log_dir_of("t", 0) == a  # current until the swap
        resumed.go.set()
        assert mv.done.wait(WAIT) and mv.succeeded, mv.error
        assert m.moves() == [] and m.log_dir_of("t", 0) == b
        assert m.get_log("t", 0).read(0, 1 << 30).read_bytes() == expected
        assert not list(b.glob("*-future"))
    finally:
        m.shutdown()


@pytest.mark.parametrize("where", ["live", "none"])
def test_leftover_future_at_start(tmp_path: Path, where: str) -> None:
    """A ``-future`` beside a live log elsewhere is resumed; one without a live log (a crash between the
    swap's renames) is the only copy and is renamed into place."""
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    m = _manager(a, b)
    plog = m.create_log("t", 0, None, TOPIC_ID)
    _fill(plog, 50)
    expected = plog.read(0, 1 << 30).read_bytes()
    home = m.log_dir_of("t", 0)
    m.shutdown()
    other = b if home == a else a
    shutil.copytree(home / "t-0", other / f"t-0.{'1' * 32}-future")
    if where == "none":
        (home / "t-0").rename(home / f"t-0.{'2' * 32}-delete")
    m = _manager(a, b)
    try:
        for mv in m.moves():
            assert mv.done.wait(WAIT) and mv.succeeded, mv.error
        assert m.log_dir_of("t", 0) == other and not list(other.glob("*-future"))
        assert m.get_log("t", 0).read(0, 1 << 30).read_bytes() == expected
    finally:
        m.shutdown()
