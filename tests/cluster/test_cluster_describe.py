"""``tidelog cluster describe`` against a real ZooKeeper holding a hand-written cluster state: replicas, ISR and
leader of each partition, under-replicated and offline partitions flagged."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from support import kazoo, start_zookeeper

from tidelog.cluster import zkdata as zd


def test_describe_flags_under_replicated_and_offline(tmp_path: Path) -> None:
    zk_server = start_zookeeper(tmp_path)
    root = f"/describe-{uuid.uuid4().hex[:8]}"
    try:
        with kazoo(zk_server.connect) as zk:
            zk.ensure_path(root)
        with kazoo(zk_server.connect + root) as zk:
            for b in (1, 2):  # broker 3 is not registered: down
                zk.create(zd.broker_path(b), zd.encode_broker(zd.BrokerInfo(b, "127.0.0.1", 9090 + b)), makepath=True)
            zk.create(zd.CONTROLLER, zd.encode_controller(1))
            zk.create(zd.CONTROLLER_EPOCH, b"4")
            zk.create(zd.topic_path("t"), zd.encode_topic(zd.TopicAssignment({0: [1, 2], 1: [1, 3], 2: [3, 2]},
                                                                              bytes(range(16)))), makepath=True)
            for p, leader, isr in ((0, 1, (1, 2)), (1, 1, (1,)), (2, 3, (3,))):
                zk.create(zd.state_path("t", p), zd.encode_state(zd.LeaderIsr(leader, 5, isr, 4)), makepath=True)
        cmd = [sys.executable, "-m", "tidelog.cli.main", "cluster", "describe", "-z", zk_server.connect + root]
        out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=120, check=True)
        parts = json.loads(out.stdout)["topics"][0]["partitions"]
        assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in parts] == [
            (0, 1, [1, 2], [1, 2]), (1, 1, [1, 3], [1]), (2, 3, [3, 2], [3])]
        assert [(p["under_replicated"], p["offline"]) for p in parts] == [(False, False), (True, False),
                                                                           (True, True)]
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
        lines = {int(line.split("Partition: ")[1].split("\t")[0]): line for line in text.splitlines()
                 if "Partition: " in line}
        assert "UNDER-REPLICATED" not in lines[0] and "OFFLINE" not in lines[0]
        assert lines[1].endswith("\tOffline: 3\tUNDER-REPLICATED") and "Isr: 1\t" in lines[1]
        assert lines[2].endswith("\tOffline: 3\tOFFLINE") and "Leader: 3\t" in lines[2]
        assert "Controller: 1 (epoch 4)" in text
    finally:
        zk_server.stop()
