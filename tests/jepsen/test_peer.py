"""The harness against the peer noida-db (tests/jepsen/peer.py), one short run (~30 s): noida acknowledges acks=all
writes before they survive a SIGKILL (it loses about the last second; docs/RELIABILITY.md, "The peer"), so one
kill while the producers write must show up as ``lost-write`` -- the check that the checker sees a real broker's
anomalies, not only hand-made ones. Skipped unless ``bench/setup.sh`` installed noida-db (bench/.work/peers).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("kazoo")
import nodes
import peer
from runner import Options, run

pytestmark = pytest.mark.skipif(bool(peer.available()), reason=f"{peer.available()}")


def test_kill_of_noida_loses_acknowledged_writes(tmp_path: Path) -> None:
    try:
        # seed 1: the kill starts 3.7 s into the fault phase and lasts 3 s (PeerNemesis' schedule)
        s = run(Options(workload="queue", db="noida", nemesis=["kill"], time_limit=10, seed=1, quiet=3, rf=1,
                        min_insync=1, out=tmp_path / "run"))
    finally:
        nodes.kill_all()
    assert [f["fault"] for f in s["faults"]][:1] == ["kill"], s["faults"]
    assert s["ops"].get("send:ok", 0) > 100, s["ops"]
    assert s["final_read"] == {"read_uncommitted": True}
    assert s["anomalies"].get("lost-write", 0) > 0, s["anomalies"]
    assert s["valid"] is False
