from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.storage.checkpoints import read_leader_epoch_checkpoint
from tidelog.storage.epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from tidelog.storage.errors import CorruptCheckpointError

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "leader-epoch-checkpoint"


def test_empty_cache(path: Path) -> None:
    cache = LeaderEpochCache(path)
    assert cache.entries() == []
    assert cache.latest_epoch() == UNDEFINED_EPOCH
    assert cache.epoch_for_offset(0) == UNDEFINED_EPOCH
    assert cache.end_offset_for(0, 10) == UNDEFINED
    assert not path.exists()  # nothing written until something is assigned


def test_assign_persists_and_reloads(path: Path) -> None:
    cache = LeaderEpochCache(path)
    assert cache.assign(0, 0)
    assert cache.assign(2, 10)
    assert cache.assign(5, 25)
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (2, 10), (5, 25)]
    assert LeaderEpochCache(path).entries() == [(0, 0), (2, 10), (5, 25)]
    assert cache.latest_epoch() == 5
    assert cache.latest_entry() == (5, 25) and cache.earliest_entry() == (0, 0)


def test_assign_same_epoch_higher_offset_is_ignored(path: Path) -> None:
    cache = LeaderEpochCache(path)
    cache.assign(3, 10)
    mtime = path.stat().st_mtime_ns
    assert not cache.assign(3, 10)
    assert not cache.assign(3, 50)
    assert cache.entries() == [(3, 10)]
    assert path.stat().st_mtime_ns == mtime


def test_assign_same_epoch_lower_offset_moves_start(path: Path) -> None:
    cache = LeaderEpochCache(path)
    cache.assign(1, 0)
    cache.assign(3, 10)
    assert cache.assign(3, 8)
    assert cache.entries() == [(1, 0), (3, 8)]


def test_assign_truncates_non_monotonic_entries(path: Path) -> None:
    cache = LeaderEpochCache(path)
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache.assign(5, 20)
    # a lower epoch at a higher offset: everything with epoch >= 4 goes (Kafka's maybeTruncateNonMonotonicEntries)
    assert cache.assign(4, 30)
    assert cache.entries() == [(1, 0), (3, 10), (4, 30)]
    # a higher epoch at a lower offset: entries with start >= 5 go
    assert cache.assign(6, 5)
    assert cache.entries() == [(1, 0), (6, 5)]
    assert read_leader_epoch_checkpoint(path) == [(1, 0), (6, 5)]


def test_assign_rejects_negative(path: Path) -> None:
    cache = LeaderEpochCache(path)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_epoch_for_offset(path: Path) -> None:
    cache = LeaderEpochCache(path)
    cache.assign(1, 5)
    cache.assign(2, 10)
    cache.assign(4, 20)
    assert cache.epoch_for_offset(0) == UNDEFINED_EPOCH
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 2
    assert cache.epoch_for_offset(19) == 2
    assert cache.epoch_for_offset(20) == 4
    assert cache.epoch_for_offset(10_000) == 4


def test_end_offset_for_kip101_kip279(path: Path) -> None:
    cache = LeaderEpochCache(path)
    cache.assign(2, 10)
    cache.assign(4, 20)
    cache.assign(7, 35)
    leo = 50
    # the latest epoch -> LEO
    assert cache.end_offset_for(7, leo) == (7, 50)
    # an epoch present in the cache -> start of the next epoch
    assert cache.end_offset_for(2, leo) == (2, 20)
    assert cache.end_offset_for(4, leo) == (4, 35)
    # KIP-279: an epoch the leader never had -> the largest epoch <= requested, end = next epoch's start
    assert cache.end_offset_for(3, leo) == (2, 20)
    assert cache.end_offset_for(5, leo) == (4, 35)
    assert cache.end_offset_for(6, leo) == (4, 35)
    # above every known epoch -> undefined
    assert cache.end_offset_for(8, leo) == UNDEFINED
    # undefined requested -> undefined
    assert cache.end_offset_for(UNDEFINED_EPOCH, leo) == UNDEFINED
    # below the earliest epoch: Kafka answers (requested, start of the earliest epoch)
    assert cache.end_offset_for(1, leo) == (1, 10)
    assert cache.end_offset_for(0, leo) == (0, 10)


def test_truncate_from_end(path: Path) -> None:
    cache = LeaderEpochCache(path)
    for epoch, start in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(25)  # nothing starts at or after 25
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (2, 10)]
    cache.truncate_from_end(5)
    assert cache.entries() == [(1, 0)]
    assert read_leader_epoch_checkpoint(path) == [(1, 0)]
    cache.truncate_from_end(0)
    assert cache.entries() == []
    assert read_leader_epoch_checkpoint(path) == []


def test_truncate_from_start(path: Path) -> None:
    cache = LeaderEpochCache(path)
    for epoch, start in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(0)  # the first entry already starts at 0: rewritten to itself
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15), (3, 20)]
    cache.truncate_from_start(20)  # exclusive: an entry at exactly 20 is kept
    assert cache.entries() == [(3, 20)]
    cache.truncate_from_start(100)
    assert cache.entries() == [(3, 100)]
    assert read_leader_epoch_checkpoint(path) == [(3, 100)]


def test_truncate_skips_write_when_dir_is_gone(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    cache = LeaderEpochCache(d / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    cache.assign(2, 10)
    (d / "leader-epoch-checkpoint").unlink()
    d.rmdir()
    cache.truncate_from_end(5)  # must not raise: the partition directory was deleted
    assert cache.entries() == [(1, 0)]


def test_load_rejects_corrupt_and_invalid(path: Path) -> None:
    path.write_text("0\n2\n1 0\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache(path)
    path.write_text("0\n1\n-1 0\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache(path)


def test_load_fixes_non_monotonic_file(path: Path) -> None:
    path.write_text("0\n3\n1 0\n3 20\n2 30\n")
    assert LeaderEpochCache(path).entries() == [(1, 0), (2, 30)]
