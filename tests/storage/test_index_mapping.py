"""Indexes keep no file descriptor and are mapped lazily (Kafka's AbstractIndex / LazyIndex; issue 17)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelog.records import build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.index import OffsetIndex, TimeIndex
from tidelog.storage.log import PartitionLog
from tidelog.storage.mapping import FileMapping, map_file


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def test_an_index_holds_no_descriptor(tmp_path: Path) -> None:
    before = fds()
    indexes = [OffsetIndex(tmp_path / f"{i:020d}.index", i, 4096) for i in range(50)]
    indexes += [TimeIndex(tmp_path / f"{i:020d}.timeindex", i, 4096) for i in range(50)]
    for i, idx in enumerate(indexes[:50]):
        idx.append(i + 10, 100)
        assert idx.lookup(i + 10) == (i + 10, 100)  # mapped now
    assert fds() == before
    for idx in indexes:
        idx.close()
    assert fds() == before


def test_index_is_mapped_on_first_use_and_unmapped_when_idle(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 4096)
    for off in range(1, 200):
        idx.append(off, off * 10)
    idx.close()  # trimmed to its 199 entries
    reopened = OffsetIndex(tmp_path / "0.index", 0, 4096)
    assert not reopened.mapped  # entries and the last entry come from the file's length and last 8 bytes
    assert reopened.entries == 199 and reopened.last_offset == 199 and reopened.opened_last_position == 1990
    assert reopened.lookup(57) == (57, 570)
    assert reopened.mapped
    assert not reopened.unmap_if_idle()  # used since the last sweep
    assert reopened.unmap_if_idle()  # unused for a whole sweep
    assert not reopened.mapped
    assert reopened.lookup(150) == (150, 1500)  # mapped again
    reopened.close()


def test_untrimmed_index_left_by_a_crash_is_counted(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 100)
    for ts in range(1, 31):
        idx.maybe_append(1000 + ts, ts)
    idx.flush()
    idx.close_handler()  # no trim: the preallocated zero tail stays, as after a crash
    assert (tmp_path / "0.timeindex").stat().st_size == 1200
    again = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 100)
    assert again.entries == 30 and again.last_entry == (1030, 30)
    again.close()


def test_file_mapping(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdefgh" * 512)
    fd = os.open(path, os.O_RDWR)
    try:
        before = fds()
        m = map_file(fd, 4096)
    finally:
        os.close(fd)
    assert isinstance(m, FileMapping)
    assert fds() == before - 1  # the mapping kept nothing of fd
    assert m[0:4] == b"abcd" and len(m) == 4096
    assert m.find(b"h", 5) == 7 and m.find(b"zz") == -1
    m[8:12] = b"WXYZ"
    m.flush()
    m.close()
    assert path.read_bytes()[8:12] == b"WXYZ"


def test_inactive_segments_indexes_unmapped_by_the_sweep(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2048, index_interval_bytes=64)  # type: ignore[call-arg]
    log = PartitionLog.open(tmp_path / "t-0", cfg, clean_shutdown=True)
    for i in range(60):
        log.append_as_leader(build_batch([(str(i).encode(), b"x" * 100, (), 1_700_000_000_000 + i)]))
    segments = log.segments
    assert len(segments) > 3
    first = log.read(0, 1 << 20).read_bytes()  # reads through the first segment's index
    log.unmap_idle_indexes()  # marks what was used
    assert log.unmap_idle_indexes() > 0  # unmaps what was not used since
    assert not any(s.offset_index.mapped or s.time_index.mapped for s in segments[:-1])
    assert log.read(0, 1 << 20).read_bytes() == first  # mapped again on use
    assert log.read(30, 1 << 20).read_bytes()
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", cfg, clean_shutdown=True)
    assert reopened.log_end_offset == 60
    assert not any(s.offset_index.mapped or s.time_index.mapped for s in reopened.segments[:-1])
    assert reopened.read(0, 1 << 20).read_bytes() == first
    reopened.close()
