"""Out of file descriptors is not a disk failure (issue 24), with a real EMFILE: the test process lowers its own
soft ``RLIMIT_NOFILE`` and fills what is left with descriptors of ``/dev/null`` for the moment of the faults.

The offset checkpoint and the leader-epoch checkpoint that meet EMFILE are deferred and written at the next tick,
a roll fails alone, and the log directory stays online; ENOSPC and EIO keep failing it
(``test_log_dir_failure.py``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.records import build_batch
from tidelog.storage.checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.manager import LogManager
from tidelog.storage.open_files import SHORTAGE, DescriptorsExhaustedError, open_file_count

TOPIC_ID = bytes.fromhex("11223344556677889900aabbccddeeff")


@contextlib.contextmanager
def no_descriptor_left() -> Iterator[None]:
    """Every descriptor the process may open is taken until the block ends (a real EMFILE inside it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = open_file_count()
    assert used is not None
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, hard))
    try:
        while True:
            try:
                held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_emfile_defers_checkpoints_and_fails_a_roll_alone(tmp_path: Path) -> None:
    root = (tmp_path / "d").absolute()
    m = LogManager([root], LogConfig(segment_bytes=1 << 20))
    m.startup()
    try:
        plog = m.create_log("t", 0, None, TOPIC_ID)
        plog.append_as_leader(build_batch([(None, b"a")]), leader_epoch=0)
        plog.high_watermark = plog.log_end_offset
        m.checkpoint_high_watermarks()
        hw_file, epoch_file = root / REPLICATION_OFFSET_CHECKPOINT, plog.dir / "leader-epoch-checkpoint"
        assert read_offset_checkpoint(hw_file) == {("t", 0): 1}
        counted = sum(SHORTAGE.counts.values())
        with no_descriptor_left():
            # a new leader epoch: the records reach the log, the epoch's checkpoint waits for a descriptor
            info = plog.append_as_leader(build_batch([(None, b"b")]), leader_epoch=1)
            assert info.first_offset == 1
            plog.high_watermark = plog.log_end_offset
            m.checkpoint_high_watermarks()  # EMFILE: deferred, not a failure
            with pytest.raises(DescriptorsExhaustedError, match="open-file limit"):
                plog.roll()
            assert m.failed_dirs() == {} and plog.failed is None and not plog.offline
            assert plog.epoch_cache is not None and plog.epoch_cache.unwritten
        assert sum(SHORTAGE.counts.values()) >= counted + 3
        assert read_offset_checkpoint(hw_file) == {("t", 0): 1}  # the old file is intact
        assert read_leader_epoch_checkpoint(epoch_file) == [(0, 0)]
        # descriptors are free again: the next tick writes both, and the log rolls and takes appends
        m.tick(time.time_ns() // 1_000_000)
        assert read_offset_checkpoint(hw_file) == {("t", 0): 2}
        assert read_leader_epoch_checkpoint(epoch_file) == [(0, 0), (1, 1)]
        assert not plog.epoch_cache.unwritten
        plog.roll()
        assert plog.append_as_leader(build_batch([(None, b"c")]), leader_epoch=1).first_offset == 2
        assert len(plog.segments) == 2 and m.failed_dirs() == {}
    finally:
        m.shutdown()
