"""ProducerIdManager: unique producer ids across restarts, blocks reserved on disk before use."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from tidelog.broker.producer_ids import (
    PRODUCER_ID_BLOCK_FILE,
    ProducerIdBlockFileError,
    ProducerIdManager,
)


def test_ids_are_sequential_within_a_block(tmp_path: Path) -> None:
    m = ProducerIdManager([tmp_path], block_size=10)
    assert [m.allocate() for _ in range(25)] == list(range(25))
    # three blocks reserved: the file names the start of the 4th
    assert "next_block_start: 30" in (tmp_path / PRODUCER_ID_BLOCK_FILE).read_text()


def test_block_is_persisted_before_the_first_id_is_returned(tmp_path: Path) -> None:
    m = ProducerIdManager([tmp_path], block_size=100)
    assert not (tmp_path / PRODUCER_ID_BLOCK_FILE).exists()
    pid = m.allocate()
    assert pid == 0
    assert "next_block_start: 100" in (tmp_path / PRODUCER_ID_BLOCK_FILE).read_text()
    assert not (tmp_path / (PRODUCER_ID_BLOCK_FILE + ".tmp")).exists()


def test_restart_never_reuses_ids(tmp_path: Path) -> None:
    seen: set[int] = set()
    for _ in range(5):
        m = ProducerIdManager([tmp_path], block_size=7)
        for _ in range(3):  # use part of a block, then "restart"
            pid = m.allocate()
            assert pid not in seen
            seen.add(pid)
    assert len(seen) == 15


def test_multiple_log_dirs_take_the_largest(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = ProducerIdManager([a, b], block_size=10)
    for _ in range(15):
        m.allocate()
    # one dir is restored from an old backup: the other still wins
    (a / PRODUCER_ID_BLOCK_FILE).write_text("version: 0\nnext_block_start: 10\n")
    m2 = ProducerIdManager([a, b], block_size=10)
    assert m2.allocate() == 20
    # and the next reservation rewrites both copies
    assert "next_block_start: 30" in (a / PRODUCER_ID_BLOCK_FILE).read_text()


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text("garbage\n")
    with pytest.raises(ProducerIdBlockFileError):
        ProducerIdManager([tmp_path])
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text("version: 9\nnext_block_start: 10\n")
    with pytest.raises(ProducerIdBlockFileError):
        ProducerIdManager([tmp_path])


def test_bump_epoch_on_a_known_id(tmp_path: Path) -> None:
    m = ProducerIdManager([tmp_path], block_size=10)
    pid = m.allocate()
    assert m.bump_epoch(pid, 0) == (pid, 1)
    assert m.bump_epoch(pid, 1) == (pid, 2)
    # a stale epoch (e.g. a second client claiming the same id) gets a fresh id instead
    fresh, epoch = m.bump_epoch(pid, 0)
    assert fresh != pid and epoch == 0
    # an id never handed out gets a fresh id
    other, epoch = m.bump_epoch(10_000, 3)
    assert other not in (pid, fresh, 10_000) and epoch == 0
    # an exhausted epoch rolls over to a fresh id (Kafka: epoch >= Short.MaxValue - 1)
    rolled, epoch = m.bump_epoch(other, 32766)
    assert rolled != other and epoch == 0


def test_ids_from_an_earlier_run_can_bump(tmp_path: Path) -> None:
    pid = ProducerIdManager([tmp_path]).allocate()
    m = ProducerIdManager([tmp_path])
    assert m.is_issued(pid)
    assert m.bump_epoch(pid, 4) == (pid, 5)


def _allocate_forever(log_dir: str, conn: multiprocessing.connection.Connection) -> None:  # pragma: no cover
    m = ProducerIdManager([Path(log_dir)], block_size=3)
    while True:
        conn.send(m.allocate())


def test_kill_9_never_reuses_an_id(tmp_path: Path) -> None:
    """Allocate in a child process, SIGKILL it mid-stream, then allocate again: no id repeats."""
    ctx = multiprocessing.get_context("fork")
    seen: set[int] = set()
    for _ in range(3):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_allocate_forever, args=(str(tmp_path), child))
        proc.start()
        child.close()
        got = [parent.recv() for _ in range(50)]
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        # drain what was sent before the kill: those ids were handed out too
        while parent.poll():
            try:
                got.append(parent.recv())
            except EOFError:
                break
        assert not seen & set(got)
        seen |= set(got)
    m = ProducerIdManager([tmp_path], block_size=3)
    assert m.allocate() > max(seen)
