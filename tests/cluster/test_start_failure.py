"""A broker whose start fails half-way in ZooKeeper mode must exit and leave nothing registered. Seen in issue 31's
campaign (queue seed 1019): a broker lost ZooKeeper while it started (a ``zk`` partition 4 s after its restart),
its start raised ConnectionLoss from a store's first read, which was not retried, and the process lived on: its
kazoo session re-registered ``/brokers/ids/1`` after the heal, it never served, and the cluster never got its full
ISRs back. Since then the stores' first reads are retried across a connection loss (as zk_session's already were)
and a failed start shuts down what it started (``node.serve``), closing the ZooKeeper session.

The failure here is deterministic (a ZooKeeper cut mid-start is not): the data dir's ``meta.properties`` names
another cluster than ZooKeeper's ``/cluster/id`` (Kafka's InconsistentClusterIdException), found after the broker
connected to ZooKeeper. The process must exit with an error, promptly, and leave no registration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import kazoo, start_zookeeper

from tidelog.cluster import zkdata as zd

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


def test_a_start_that_fails_after_connecting_to_zookeeper_exits_and_leaves_no_registration(tmp_path: Path) -> None:
    zk: Any = start_zookeeper(tmp_path / "zk")
    try:
        with kazoo(zk.connect) as client:
            client.create(zd.CLUSTER_ID, zd.encode_cluster_id("ZkClusterIdAAAAAAAAAAA"), makepath=True)
        data = tmp_path / "data"
        data.mkdir()
        (data / "meta.properties").write_text("version=1\nnode.id=7\ncluster.id=OtherClusterIdBBBBBBBB\n")
        proc = subprocess.run([TIDELOG, "serve", "--data-dir", str(data), "--port", "0",
                               "-o", f"zookeeper.connect={zk.connect}", "-o", "node.id=7", "-o", "broker.id=7",
                               "-o", "tidelog.metrics.listener=off"],
                              capture_output=True, text=True, timeout=90)
        assert proc.returncode != 0, proc.stderr
        assert "cluster" in proc.stderr.lower(), proc.stderr
        with kazoo(zk.connect) as client:
            assert not client.exists(zd.broker_path(7))
    finally:
        zk.stop()
