"""The broker's replica manager is typed by a Protocol (issue 26): both modes' managers are one, and only ZooKeeper
mode's serves the cluster-only APIs, which now check that instead of casting."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.broker.broker import Broker
from tidelog.broker.config import BrokerConfig
from tidelog.broker.handlers import RequestContext
from tidelog.broker.replica_manager import LocalReplicaManager, ReplicaManager
from tidelog.cluster.handlers import ClusterReplicaManager, _replica_manager
from tidelog.cluster.replica_manager import ZkReplicaManager

_MEMBERS = [name for name in vars(ReplicaManager) if not name.startswith("_")]


def _config(tmp_path: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0", **extra})


def _zk(tmp_path: Path) -> ZkReplicaManager:
    """ZooKeeper mode's replica manager, made by the broker's constructor (not connected)."""
    cfg = _config(tmp_path, **{"zookeeper.connect": "127.0.0.1:1"})
    rm = Broker(cfg, lambda b: ZkReplicaManager(cfg, b)).replica_manager
    assert isinstance(rm, ZkReplicaManager)
    return rm


@pytest.mark.parametrize("member", _MEMBERS)
def test_both_replica_managers_have_every_member_of_the_protocol(tmp_path: Path, member: str) -> None:
    for rm in (Broker(_config(tmp_path)).replica_manager, _zk(tmp_path)):
        assert hasattr(rm, member), f"{type(rm).__name__} lacks {member}"


def test_only_zookeeper_mode_serves_the_cluster_only_apis(tmp_path: Path) -> None:
    zk = _zk(tmp_path)
    assert isinstance(zk, ClusterReplicaManager)
    broker = Broker(_config(tmp_path))
    assert isinstance(broker.replica_manager, LocalReplicaManager)
    assert not isinstance(broker.replica_manager, ClusterReplicaManager)
    ctx = RequestContext(broker, 23, 4, 1, "c")
    with pytest.raises(TypeError, match="LocalReplicaManager"):
        _replica_manager(ctx)
