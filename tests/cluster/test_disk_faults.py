"""Reliability scenario 10: a full disk on a follower, then on the leader, under acks=all load, 3 brokers and a
real ZooKeeper: 0 acknowledged records lost after recovery.

Broker 3's data directory is a small tmpfs (``enospc``: a real ENOSPC on write), or an ext4 file system on a loop
device whose image lives on a tmpfs (``fsync``: writes go into the page cache, the writeback and so the fsync of a
checkpoint or of a rolled segment fail); root is needed to mount them, which CI has (skipped with the reason
otherwise). The fault: a file fills the tmpfs while an idempotent acks=all producer writes. Broker 3
then fails its only log directory (read-only: writes refused, reads served), writes Kafka's
``/log_dir_event_notification/log_dir_event_<seq>``, and the controller takes its replicas out of the ISR and
moves the leadership it held to another in-sync replica; the producer carries on with the two others
(``min.insync.replicas=2``). Recovery: broker 3 is restarted once the file is removed, recovers its log
directory, catches up and rejoins every ISR. The checker (``support.Ledger``) then reads everything back: 0
acknowledged records lost, 0 duplicates, every acked offset holds its value, send order kept.

EIO: neither a device-mapper ``error`` target (no ``dm_mod`` here) nor FUSE (no libfuse) is available on the
machines this runs on, and the loop device reports its failed writeback as ENOSPC; an error of any errno takes the
same path (every ``OSError`` of a log directory fails it).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    ZK_SERVER,
    Cluster,
    Load,
    ZooKeeper,
    _conftest,
    create_topic,
    kazoo,
    read_all,
    state,
    until,
)

from tidelog.cluster import zkdata as zd

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_spec = importlib.util.spec_from_file_location(
    "tidelog_test_faultfs", Path(__file__).resolve().parents[1] / "integration" / "faultfs.py")
assert _spec is not None and _spec.loader is not None
faultfs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faultfs)

FAULTY = 3  # the broker whose data directory is a tmpfs
TMPFS_KIB = 16384
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 180000,
            "retry.backoff.ms": 100, "request.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000}


class _DiskFault:
    """Broker 3's data directory and the way to break it: ``enospc`` a small tmpfs filled by a file (writes fail),
    ``fsync`` an ext4 on a loop device whose image's tmpfs is filled (writes succeed, fsync fails)."""

    def __init__(self, kind: str, data_dir: Path) -> None:
        self.kind, self.data_dir = kind, data_dir
        self._ctx: Any = None
        self._fs: Any = None
        self._filler: Path | None = None

    def __enter__(self) -> _DiskFault:
        if self.kind == "enospc":
            self._fs = faultfs.Tmpfs(self.data_dir, TMPFS_KIB).mount()
        else:
            self._ctx = faultfs.ext4_on_full_loop(self.data_dir, backing_kib=96 * 1024, image_mib=64)
            self._fs = self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        else:
            self._fs.unmount()

    def break_(self) -> None:
        self._filler = self._fs.fill()

    def repair(self) -> None:
        assert self._filler is not None
        self._filler.unlink()
        self._filler = None


@pytest.fixture(scope="module", params=["enospc", "fsync"])
def disk_cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo==2.11.0)")
    if not ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip(f"ZooKeeper is not installed ({ZK_SERVER} missing or no java); apt-get install zookeeper")
    faultfs.require_mount()
    root = Path(tempfile.mkdtemp(prefix="tidelog-disk-"))
    zk = ZooKeeper(root)
    zk.start()
    overrides = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "200",
                 "offsets.topic.num.partitions": "1", "log.segment.bytes": "1048576"}
    if request.param == "enospc":  # the appends, not a checkpoint, meet the full disk first
        overrides["replica.high.watermark.checkpoint.interval.ms"] = "60000"
    c = Cluster(root, zk, overrides=overrides)
    try:
        with _DiskFault(request.param, c.brokers[FAULTY].data_dir) as fault:
            try:
                for b in c.brokers.values():
                    b.start()
                c.wait_for("3 registered brokers and a controller",
                           lambda md: len(md.brokers) == 3 and md.controller_id > 0)
                with kazoo(zk.connect) as kz:
                    c.kz, c.fault = kz, fault
                    yield c
            finally:
                for b in c.brokers.values():
                    b.kill()
    finally:
        zk.stop()
        if os.environ.get("TIDELOG_KEEP_TEST_DIRS") is None:
            shutil.rmtree(root, ignore_errors=True)


def _fill_then_recover(c: Any, topic: str, partitions: int, *, led_by_faulty: bool) -> None:
    """Under load: fill broker 3's disk, see the cluster move on without it, restart it with space, check."""
    b3 = c.brokers[FAULTY]
    load = Load(c.bootstrap, topic, partitions, PRODUCER)
    try:
        load.wait_progress(300)
        c.fault.break_()
        until("broker 3 fails its log directory", lambda: "last online log directory" in b3.log_text(), timeout=60)
        # the controller heard of it (Kafka's notification, deleted once handled) and moved on without broker 3
        until("broker 3 out of every ISR and leading nothing", lambda: all(
            FAULTY not in (s := state(c.kz, topic, p)).isr and s.leader not in (FAULTY, zd.NO_LEADER)
            for p in range(partitions)), timeout=60)
        assert c.kz.get_children(zd.LOG_DIR_EVENT_NOTIFICATION) == []
        load.wait_progress(300)  # acks=all goes on with the two others (min.insync.replicas=2)
        b3.stop()
        c.fault.repair()
        b3.start()
        until("broker 3 back in every ISR", lambda: all(
            FAULTY in state(c.kz, topic, p).isr for p in range(partitions)), timeout=120)
        load.wait_progress(100)
    finally:
        load.stop()
    load.check(read_all(c.bootstrap, topic, partitions), exact=False)
    assert load.count() > 0


def test_full_disk_on_a_follower_then_on_the_leader_loses_nothing(disk_cluster: Any) -> None:
    c = disk_cluster
    # follower: broker 3 follows both partitions
    follower_topic = "disk-follower"
    create_topic(c.bootstrap, follower_topic, assignment=[[1, 2, FAULTY], [2, 1, FAULTY]])
    _fill_then_recover(c, follower_topic, 2, led_by_faulty=False)

    # leader: broker 3 leads both partitions
    leader_topic = "disk-leader"
    create_topic(c.bootstrap, leader_topic, assignment=[[FAULTY, 1, 2], [FAULTY, 2, 1]])
    assert all(state(c.kz, leader_topic, p).leader == FAULTY for p in range(2))
    _fill_then_recover(c, leader_topic, 2, led_by_faulty=True)

_JbodBroker: Any = _conftest().JbodBroker


def test_jbod_broker_gives_up_only_the_failed_directorys_partitions(tmp_path: Path) -> None:
    """Broker 3 with two log directories, one a tmpfs that fills up under load: the controller moves away the
    leadership (and takes broker 3 out of the ISR) of the partitions in that directory only; broker 3 keeps
    leading the others with a full ISR; 0 acknowledged records lost after its restart."""
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo==2.11.0)")
    if not ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip(f"ZooKeeper is not installed ({ZK_SERVER} missing or no java); apt-get install zookeeper")
    faultfs.require_mount()
    zk = ZooKeeper(tmp_path)
    zk.start()
    c = Cluster(tmp_path, zk, overrides={"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "200",
                                         "offsets.topic.num.partitions": "1", "log.segment.bytes": "1048576",
                                         "replica.high.watermark.checkpoint.interval.ms": "60000"})
    disk, small = tmp_path / "broker-3-disk", tmp_path / "broker-3-small"
    c.brokers[FAULTY] = _JbodBroker([disk, small], c.brokers[FAULTY].overrides)
    try:
        with faultfs.tmpfs(small, TMPFS_KIB) as fs:
            try:
                for b in c.brokers.values():
                    b.start()
                c.wait_for("3 brokers and a controller", lambda md: len(md.brokers) == 3 and md.controller_id > 0)
                topic = "disk-jbod"
                create_topic(c.bootstrap, topic, assignment=[[FAULTY, 1, 2], [FAULTY, 2, 1]] * 2)
                on_small = {p for p in range(4) if (small / f"{topic}-{p}").is_dir()}
                assert on_small and len(on_small) < 4
                with kazoo(zk.connect) as kz:
                    assert all(state(kz, topic, p).leader == FAULTY for p in range(4))
                    load = Load(c.bootstrap, topic, 4, PRODUCER)
                    try:
                        load.wait_progress(300)
                        filler = fs.fill()
                        until("the small directory offline", lambda: "is offline" in c.brokers[FAULTY].log_text(),
                              timeout=60)

                        def moved() -> bool:
                            for p in range(4):
                                s = state(kz, topic, p)
                                gone = s.leader not in (FAULTY, zd.NO_LEADER) and FAULTY not in s.isr
                                kept = s.leader == FAULTY and len(s.isr) == 3
                                if not (gone if p in on_small else kept):
                                    return False
                            return True

                        until("leadership moved for the failed directory's partitions only", moved, timeout=60)
                        load.wait_progress(300)
                        for p in set(range(4)) - on_small:  # the healthy directory's partitions keep taking acks
                            load.wait_progress(20, partition=p)
                        c.brokers[FAULTY].stop()
                        filler.unlink()
                        c.brokers[FAULTY].start()
                        until("broker 3 back in every ISR", lambda: all(
                            FAULTY in state(kz, topic, p).isr for p in range(4)), timeout=120)
                        load.wait_progress(100)
                    finally:
                        load.stop()
                    load.check(read_all(c.bootstrap, topic, 4), exact=False)
            finally:
                for b in c.brokers.values():
                    b.kill()
    finally:
        zk.stop()
