"""Follower truncation on a ``diverging_epoch`` answer when the follower's epoch cache ends with an epoch that
holds no record (it led that epoch and lost the leadership before appending): found by the fast double failovers
of ``test_chaos.py`` (reliability anchor 7), where such a follower fetched in a tight loop and never caught up."""

from __future__ import annotations

from pathlib import Path

from tidelog.cluster.replica_manager import Replica, ZkReplicaManager
from tidelog.records import build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.log import PartitionLog

NOW = 1_700_000_000_000


def test_empty_last_epoch_dropped_when_the_leader_diverges_at_our_end(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    cache = LeaderEpochCache(d / "leader-epoch-checkpoint")
    plog = PartitionLog.open(d, LogConfig(), epoch_cache=cache, now_ms=NOW)
    try:
        plog.append_as_follower(build_batch([(None, b"a"), (None, b"b")], partition_leader_epoch=8))
        cache.assign(9, plog.log_end_offset)  # became leader at epoch 9, lost it before any append
        assert cache.latest_epoch() == 9
        rm = ZkReplicaManager.__new__(ZkReplicaManager)
        r = Replica(("t", 0), plog, [1, 2, 3])
        # the new leader never had epoch 9: its epoch 8 ends at our log end offset
        target, ask_next = rm.truncation_point(plog, 8, 2)
        assert (target, ask_next) == (2, None)
        rm.truncate_log(r, target, "diverging_epoch", 8)
        assert plog.log_end_offset == 2  # no record removed
        assert cache.entries() == [(8, 0)]  # the next fetch names epoch 8: no divergence any more
        assert (d / "leader-epoch-checkpoint").read_text().split("\n")[2:] == ["8 0", ""]
    finally:
        plog.close()
