"""Issue 24, items 3 and 4, against a real ``tidelog serve`` under ``prlimit --nofile=256:256``:

* an idle-connection flood larger than the open-file limit leaves the broker serving: ``max.connections`` is
  derived from the limit (the start line says how), the acceptor stops there, the checkpoints go on, and once the
  flood is gone a produce succeeds and the log directory is online;
* with an explicit ``max.connections`` above what the descriptors allow (a warning at start), the flood does
  exhaust the descriptors: the checkpoint's EMFILE is deferred and retried, not a disk failure;
* internal topics are held to the open-file budget: CreatePartitions of ``__consumer_offsets`` to 1,000 is refused,
  a small increase is allowed as in Kafka (no authorizer: anyone; ALTER on the topic otherwise), shrinks the derived
  ``max.connections``, and the group keeps its committed offset across it and a restart.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import NONE, RawClient, create_topic_raw, metric_value, produce_raw, wait_for

from tidelog.broker.group.records import partition_for
from tidelog.errors import ErrorCode
from tidelog.records.batch import build_batch

_spec = importlib.util.spec_from_file_location("tidelog_fd24_fixtures",
                                               Path(__file__).parents[2] / "integration" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")

NOFILE = 256
API_VERSIONS, CREATE_PARTITIONS, DESCRIBE_LOG_DIRS, METADATA = 18, 37, 35, 3
FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
POLICY_VIOLATION = ErrorCode.POLICY_VIOLATION
HW_CHECKPOINT = "replication-offset-checkpoint"
_DERIVED = re.compile(r"max\.connections=(\d+) derived from the open-file limit: ulimit -n (\d+) - (\d+) descriptors "
                      r"open \((\d+) segment files of (\d+) partitions, \d+ others\) - (\d+) reserved")
# fast checkpoints and ticks, so that a checkpoint falls inside every flood; an accept backlog that holds the whole
# flood (with Kafka's 50, the connects beyond it wait for the kernel's SYN retransmissions, seconds apart)
FAST = {"replica.high.watermark.checkpoint.interval.ms": "100", "tidelog.log.tick.interval.ms": "50",
        "socket.listen.backlog.size": "1024"}


class LimitedBroker(_fixtures.BrokerProcess):  # type: ignore[misc,name-defined]
    def _command(self) -> list[str]:
        return ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", *super()._command()]


@pytest.fixture
def limited() -> Iterator[Any]:
    root = Path(tempfile.mkdtemp(prefix="tidelog-fd24-"))
    made: list[Any] = []

    def make(**overrides: str) -> Any:
        b = LimitedBroker(root / f"b{len(made)}" / "data", {**FAST, **overrides})
        made.append(b)
        return b.start()

    try:
        yield make
    finally:
        for b in made:
            try:
                b.stop()
            except Exception:
                b.kill()
        shutil.rmtree(root, ignore_errors=True)


def metric_sum(b: Any, name: str) -> float:
    """``name`` summed over its labels (``metric_value`` reads unlabelled samples only)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith((name + " ", name + "{")))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def flood(port: int, n: int) -> list[socket.socket]:
    """``n`` idle TCP connections (non-blocking connects: those beyond the accept backlog stay half open)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


def checkpoint_mtime(b: Any) -> int:
    return (b.data_dir / HW_CHECKPOINT).stat().st_mtime_ns


def checkpoints_go_on(b: Any, what: str) -> None:
    """Two high-watermark checkpoints are written from now on (100 ms apart)."""
    for _ in range(2):
        t0 = checkpoint_mtime(b)
        wait_for(lambda t0=t0: checkpoint_mtime(b) > t0, timeout=10, what=what)


def produce_one(port: int, topic: str) -> dict[str, Any]:
    with RawClient(port, timeout=10) as c:
        return produce_raw(c, topic, 0, build_batch([(b"k", b"v")]))


def log_dirs(port: int) -> list[tuple[str, int]]:
    with RawClient(port) as c:
        resp = c.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return [(r["log_dir"], r["error_code"]) for r in resp["results"]]


def served(port: int, timeout: float) -> bool:
    """A new connection gets its ApiVersions answer within ``timeout`` s."""
    try:
        with RawClient(port, timeout=timeout) as c:
            return c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
                "error_code"] == NONE
    except OSError:
        return False


def derived(b: Any) -> tuple[int, ...]:
    m = _DERIVED.search(b.log_text())
    assert m, "no start line deriving max.connections:\n" + b.log_text()[-3000:]
    return tuple(int(g) for g in m.groups())


# ------------------------------------------------------------------------------------------ connection floods


def test_idle_connection_flood_leaves_the_log_dir_online(limited: Any) -> None:
    """The issue's reproduction at 256 descriptors: more idle connections than descriptors. The broker stops
    accepting at its derived max.connections, keeps writing its checkpoints, refuses nothing to storage, and serves
    produce once the flood is gone."""
    b = limited()
    max_conn, limit, _open, _segments, _partitions, reserve = derived(b)
    assert limit == NOFILE and reserve == 64 and 0 < max_conn <= NOFILE - reserve, derived(b)
    with RawClient(b.port) as c:
        assert create_topic_raw(c, "flood")["error_code"] == NONE
    assert produce_one(b.port, "flood")["error_code"] == NONE
    socks = flood(b.port, NOFILE + 100)
    try:
        # the listener stops at max.connections (the rest wait in the backlog or half open) ...
        wait_for(lambda: metric_value(b, "tidelog_acceptor_blocked_total") >= 1, timeout=15,
                 what="the acceptor to stop at max.connections")
        assert metric_value(b, "tidelog_connections") <= max_conn
        assert open_fds(b.proc.pid) <= NOFILE - reserve + 8, open_fds(b.proc.pid)
        # ... a connection beyond it is not served while the flood holds every slot ...
        assert not served(b.port, 1.0)
        # ... and the storage keeps its descriptors: checkpoints are written during the flood
        checkpoints_go_on(b, "high-watermark checkpoints during the flood")
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: served(b.port, 5.0), timeout=20, what="the broker to serve again after the flood")
    r = produce_one(b.port, "flood")
    assert r["error_code"] == NONE and r["base_offset"] == 1, r
    assert [code for _d, code in log_dirs(b.port)] == [NONE]
    assert metric_value(b, "tidelog_offline_log_directories") == 0
    assert "KAFKA_STORAGE_ERROR" not in b.log_text() and "is offline" not in b.log_text()


def test_emfile_in_a_checkpoint_is_retried_not_a_disk_failure(limited: Any) -> None:
    """An explicit max.connections wins even when it exceeds what the descriptors allow (warned at start): the
    flood then takes every descriptor and the high-watermark checkpoint meets EMFILE. That is deferred (a warning
    and a metric), the directory stays online, and the checkpoint is written again once the flood is gone."""
    b = limited(**{"max.connections": "100000"})
    assert "max.connections=100000 exceeds what the open-file limit allows" in b.log_text()
    with RawClient(b.port) as c:
        assert create_topic_raw(c, "emfile")["error_code"] == NONE
    assert produce_one(b.port, "emfile")["error_code"] == NONE
    socks = flood(b.port, NOFILE + 100)
    try:
        wait_for(lambda: "out of file descriptors: checkpoint replication-offset-checkpoint deferred" in b.log_text(),
                 timeout=25, what="a checkpoint to meet EMFILE")
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: served(b.port, 5.0), timeout=20, what="the broker to serve again after the flood")
    checkpoints_go_on(b, "high-watermark checkpoints after the flood")
    r = produce_one(b.port, "emfile")
    assert r["error_code"] == NONE and r["base_offset"] == 1, r
    assert [code for _d, code in log_dirs(b.port)] == [NONE]
    assert metric_value(b, "tidelog_offline_log_directories") == 0
    assert metric_sum(b, "tidelog_fd_exhausted_total") >= 1
    assert "is offline" not in b.log_text() and "failed: [Errno 24]" not in b.log_text()


# ------------------------------------------------------------------------------------------ internal topics


def _create_partitions(port: int, topic: str, count: int) -> dict[str, Any]:
    with RawClient(port, timeout=60) as c:
        (r,) = c.request(CREATE_PARTITIONS, 3, {"topics": [{"name": topic, "count": count, "assignments": None}],
                                                  "timeout_ms": 30000, "validate_only": False})["results"]
    return r


def _partitions(port: int, topic: str) -> int:
    with RawClient(port) as c:
        md = c.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}],
                                      "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
    (t,) = md["topics"]
    assert t["error_code"] == NONE, t
    return len(t["partitions"])


def _commit(c: RawClient, group: str, topic: str, offset: int) -> int:
    r = c.request(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def _fetched(port: int, group: str, topic: str) -> tuple[int, int]:
    with RawClient(port) as c:
        r = c.request(OFFSET_FETCH, 3, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    return r["error_code"], r["topics"][0]["partitions"][0]["committed_offset"]


def test_create_partitions_of_consumer_offsets_is_held_to_the_budget(limited: Any) -> None:
    """Issue 24 item 4: ``__consumer_offsets`` 2 -> 1,000 under 256 descriptors is refused (POLICY_VIOLATION,
    nothing made) instead of leaving the broker without descriptors; 2 -> 8 is allowed as in Kafka and shrinks the
    derived max.connections by the descriptors the new partitions hold. The group whose partition moved keeps its
    committed offset, also after a restart (tidelog adopts the records it finds outside a group's partition)."""
    b = limited(**{"offsets.topic.num.partitions": "2", "offsets.topic.replication.factor": "1"})
    group = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, 2) != partition_for(g, 8))
    with RawClient(b.port) as c:
        assert create_topic_raw(c, "data")["error_code"] == NONE
        wait_for(lambda: c.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})["error_code"] == NONE,
                 timeout=30, what="the group coordinator")
        assert _commit(c, group, "data", 42) == NONE
    assert _partitions(b.port, "__consumer_offsets") == 2
    before = metric_value(b, "tidelog_max_connections")

    r = _create_partitions(b.port, "__consumer_offsets", 1000)
    assert r["error_code"] == POLICY_VIOLATION and "ulimit -n" in r["error_message"], r
    assert _partitions(b.port, "__consumer_offsets") == 2
    assert not (b.data_dir / "__consumer_offsets-2").exists()
    # a CreateTopics of an internal topic is held to the budget too (it was exempt: 1,000 partitions were tried and
    # rolled back at EMFILE)
    with RawClient(b.port) as c:
        big = create_topic_raw(c, "__transaction_state", partitions=1000)
    assert big["error_code"] == POLICY_VIOLATION and "ulimit -n" in big["error_message"], big
    assert not (b.data_dir / "__transaction_state-0").exists()

    r = _create_partitions(b.port, "__consumer_offsets", 8)
    assert r["error_code"] == NONE, r
    assert _partitions(b.port, "__consumer_offsets") == 8
    # the six new .log files come out of the connections' share (recomputed after the change)
    wait_for(lambda: metric_value(b, "tidelog_max_connections") <= before - 6, timeout=10,
             what="max.connections to shrink by the new partitions")
    assert _fetched(b.port, group, "data") == (NONE, 42)
    b.stop()
    b.start()
    assert _partitions(b.port, "__consumer_offsets") == 8
    wait_for(lambda: _fetched(b.port, group, "data") == (NONE, 42), timeout=20,
             what="the committed offset after the restart")
