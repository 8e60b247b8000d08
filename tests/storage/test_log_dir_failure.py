"""Log directory failure in the storage layer (Kafka's LogDirFailureChannel) with real faults, and moves between
log directories (AlterReplicaLogDirs).

Faults (root needed to mount; skipped with the reason otherwise, CI runs as root): a full tmpfs (a real ENOSPC on
``write``), and an ext4 file system on a loop device whose image cannot grow (``write`` succeeds into the page
cache, the **fsync** fails: the case of the background fsync after a segment roll).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import pytest

from tidelog.records import build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import KafkaStorageError
from tidelog.storage.manager import LogDirNotFoundError, LogManager

_spec = importlib.util.spec_from_file_location(
    "tidelog_test_faultfs_storage", Path(__file__).resolve().parents[1] / "integration" / "faultfs.py")
assert _spec is not None and _spec.loader is not None
faultfs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faultfs)

TOPIC_ID = bytes.fromhex("11223344556677889900aabbccddeeff")
CONFIG = LogConfig(segment_bytes=1 << 20)


def _manager(*dirs: Path) -> LogManager:
    m = LogManager(list(dirs), CONFIG)
    m.startup()
    return m


def _batch(value: bytes, n: int = 1, **kw: object) -> bytes:
    return build_batch([(None, value)] * n, **kw)


def _file_bytes(plog: object) -> int:
    return sum(os.path.getsize(s.log_path) for s in plog.segments)  # type: ignore[attr-defined]


def _values(plog: object) -> int:
    """The offset after the last batch a read from the start returns."""
    return plog.read(0, 1 << 30).next_offset  # type: ignore[attr-defined]


def test_enospc_takes_its_directory_offline_alone(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    with faultfs.tmpfs(b, 4096) as fs:
        m = _manager(a, b)
        heard: list[tuple[Path, list, bool]] = []
        m.add_dir_failure_listener(lambda root, tps, offline, _reason: heard.append((root, tps, offline)))
        la = m.create_log("t", 0, None, TOPIC_ID)
        lb = m.create_log("t", 1, None, TOPIC_ID)
        assert (m.log_dir_of("t", 0), m.log_dir_of("t", 1)) == (a, b)
        for _ in range(10):
            lb.append_as_leader(_batch(b"before"))
        filler = fs.fill()
        acked = lb.log_end_offset
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            for _ in range(200):  # past the disk blocks the segment reserved
                lb.append_as_leader(_batch(b"x" * 16384))
                acked = lb.log_end_offset
        # the failed write changed nothing: LEO, segment sizes and the files agree
        assert lb.log_end_offset == acked
        assert _file_bytes(lb) == lb.size_in_bytes
        assert heard == [(b, [("t", 1)], True)]
        assert m.failed_dirs().keys() == {b}
        assert lb.offline and lb.failed is not None and la.failed is None
        with pytest.raises(KafkaStorageError):
            lb.read(0, 100)
        with pytest.raises(KafkaStorageError):
            lb.append_as_leader(_batch(b"refused"))
        # the other directory keeps serving, and new partitions go there
        la.append_as_leader(_batch(b"a"))
        assert _values(la) == 1
        assert m.create_log("t", 2, None, TOPIC_ID) is not None and m.log_dir_of("t", 2) == a
        m.checkpoint_recovery_points()  # skips the failed directory
        m.shutdown()
        assert (a / ".kafka_cleanshutdown").exists() and not (b / ".kafka_cleanshutdown").exists()

        filler.unlink()
        m = _manager(a, b)  # the disk is fixed: the directory comes back (recovered)
        try:
            lb = m.get_log("t", 1)
            assert m.failed_dirs() == {} and lb.failed is None
            assert lb.log_end_offset == acked and _values(lb) == acked
            lb.append_as_leader(_batch(b"after"))
            assert lb.log_end_offset == acked + 1
        finally:
            m.shutdown()


def test_last_directory_becomes_read_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = (tmp_path / "d").absolute()
    with faultfs.tmpfs(d, 4096) as fs:
        m = _manager(d)
        plog = m.create_log("t", 0, None, TOPIC_ID)
        for _ in range(10):
            plog.append_as_leader(_batch(b"before"))
        fs.fill()
        acked = plog.log_end_offset
        with caplog.at_level(logging.ERROR, "tidelog.storage"), pytest.raises(KafkaStorageError):
            for _ in range(200):
                plog.append_as_leader(_batch(b"y" * 16384))
                acked = plog.log_end_offset
        assert "last online log directory" in caplog.text
        assert plog.failed is not None and not plog.offline
        fs.resize(16384)  # space again: still refused until a restart (Kafka: the directory stays offline)
        with pytest.raises(KafkaStorageError):
            plog.append_as_leader(_batch(b"z"))
        plog.high_watermark = plog.log_end_offset
        assert _values(plog) == acked > 0  # reads of what is on disk keep working
        m.shutdown()
        m = _manager(d)
        try:
            plog = m.get_log("t", 0)
            assert plog.log_end_offset == acked
            plog.append_as_leader(_batch(b"z"))
        finally:
            m.shutdown()


def test_failed_fsync_after_a_roll_fails_the_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Writes go into the page cache; the background fsync of a rolled segment fails (the loop device cannot store
    the blocks): logged, and the directory fails, never dropped silently."""
    a, c = (tmp_path / "a").absolute(), (tmp_path / "c").absolute()
    with faultfs.ext4_on_full_loop(c):
        m = _manager(a, c)
        try:
            m.create_log("t", 0, None, TOPIC_ID)
            plog = m.create_log("t", 1, None, TOPIC_ID)
            assert m.log_dir_of("t", 1) == c
            with caplog.at_level(logging.ERROR, "tidelog.storage"):
                try:
                    for _ in range(12 * 64):  # 12 MiB in 16 KiB batches: rolls every MiB
                        plog.append_as_leader(_batch(b"w" * 16384))
                        if plog.failed is not None:
                            break
                except KafkaStorageError:
                    pass  # an append may meet the failure first (a roll's fsync of a checkpoint)
                plog.wait_for_background_flushes()
            assert m.failed_dirs().keys() == {c}, caplog.text
            assert plog.failed is not None
            assert "fsync after the roll" in caplog.text or "flush of t-1 failed" in caplog.text, caplog.text
            assert "is offline" in caplog.text
        finally:
            m.shutdown()


def test_move_log_between_directories_keeps_everything(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").absolute(), (tmp_path / "b").absolute()
    m = _manager(a, b)
    try:
        plog = m.create_log("t", 0, None, TOPIC_ID)
        for i in range(300):  # several segments, an idempotent producer
            plog.append_as_leader(_batch(b"m" * 8000, producer_id=7, producer_epoch=0, base_sequence=i),
                                  leader_epoch=3)
        plog.high_watermark = plog.log_end_offset
        before = plog.read(0, 1 << 30)
        data = before.read_bytes()
        leo, segments = plog.log_end_offset, len(plog.segments)
        assert segments > 1
        with pytest.raises(LogDirNotFoundError):
            m.move_log("t", 0, tmp_path / "elsewhere")
        assert m.move_log("t", 0, b) is True
        assert m.move_log("t", 0, b) is False  # there already
        assert m.log_dir_of("t", 0) == b and (b / "t-0").is_dir() and not (a / "t-0").exists()
        assert m.get_log("t", 0) is plog  # the same object: the broker's references stay valid
        assert plog.log_end_offset == leo and len(plog.segments) == segments and plog.dir == b / "t-0"
        assert plog.epoch_cache.latest_epoch() == 3
        after = plog.read(0, 1 << 30)
        assert after.read_bytes() == data and len(data) > segments * 8000
        # the producer state came along: a retried batch is a duplicate, the next sequence goes on
        dup = plog.append_as_leader(_batch(b"m" * 8000, producer_id=7, producer_epoch=0, base_sequence=299))
        assert dup.first_offset == leo - 1 and plog.log_end_offset == leo
        plog.append_as_leader(_batch(b"n", producer_id=7, producer_epoch=0, base_sequence=300))
        assert plog.log_end_offset == leo + 1
        m.wait_for_deletions()
        assert not [p for p in a.iterdir() if p.name.startswith("t-0")]
    finally:
        m.shutdown()
    m = _manager(a, b)
    try:
        assert m.log_dir_of("t", 0) == b and m.get_log("t", 0).log_end_offset == leo + 1
    finally:
        m.shutdown()
