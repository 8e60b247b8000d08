"""Issue 17, item 1: topic creation is atomic and bounded, under the common limit of 1,024 open files.

Each test runs a real ``tidelog serve`` under ``prlimit --nofile=1024:1024`` and drives it with real requests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    METADATA,
    NONE,
    RawClient,
    confluent_consume,
    confluent_produce,
    create_topic_raw,
    list_offset_raw,
)

from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.storage.checkpoints import (
    new_uuid,
    read_partition_metadata,
    uuid_to_str,
    write_partition_metadata,
)

_spec = importlib.util.spec_from_file_location("tidelog_fd_fixtures", Path(__file__).parent / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")

NOFILE = 1024
KAFKA_STORAGE_ERROR = ErrorCode.KAFKA_STORAGE_ERROR
POLICY_VIOLATION = ErrorCode.POLICY_VIOLATION
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE
CREATE_PARTITIONS = ApiKey.CREATE_PARTITIONS
# small files: an index of 64 KiB instead of 10 MiB keeps thousands of partitions cheap on disk
SMALL = {"log.index.size.max.bytes": "65536", "log.segment.bytes": "1048576"}


class LimitedBroker(_fixtures.BrokerProcess):  # type: ignore[misc,name-defined]
    """A broker process whose open-file limit is ``NOFILE`` (soft and hard)."""

    def _command(self) -> list[str]:
        return ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", *super()._command()]


@pytest.fixture
def limited() -> Iterator[Any]:
    root = Path(tempfile.mkdtemp(prefix="tidelog-fd-"))
    made: list[Any] = []

    def make(start: bool = True, **overrides: str) -> Any:
        b = LimitedBroker(root / f"b{len(made)}" / "data", {**SMALL, **overrides})
        made.append(b)
        return b.start() if start else b

    try:
        yield make
    finally:
        for b in made:
            try:
                b.stop()
            except Exception:
                b.kill()
        shutil.rmtree(root, ignore_errors=True)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def registry(b: Any) -> dict[str, Any]:
    return json.loads((b.data_dir / "tidelog-topics.json").read_text())["topics"]


def partition_dirs(b: Any, topic: str) -> list[str]:
    return sorted(p.name for p in b.data_dir.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic)


def metadata(port: int, topics: list[str] | None, allow_auto: bool = True) -> dict[str, Any]:
    body = {"topics": None if topics is None else [{"name": t, "topic_id": bytes(16)} for t in topics],
            "allow_auto_topic_creation": allow_auto, "include_topic_authorized_operations": False}
    with RawClient(port, timeout=60) as c:
        return c.request(METADATA, 12, body)


def test_300_partitions_under_1024_fds_and_restart(limited: Any) -> None:
    """The reproduction of issue 17: one CreateTopics of 300 partitions with ``ulimit -n 1024`` answered
    UNKNOWN_SERVER_ERROR and the broker never started again. Now it succeeds, and the broker restarts."""
    b = limited()
    with RawClient(b.port, timeout=60) as c:
        res = create_topic_raw(c, "many", partitions=300)
    assert res["error_code"] == NONE, res
    assert registry(b)["many"]["partitions"] == 300
    assert len(partition_dirs(b, "many")) == 300
    b.stop()
    b.start()
    md = metadata(b.port, ["many"], allow_auto=False)
    (t,) = md["topics"]
    assert t["error_code"] == NONE and len(t["partitions"]) == 300


def create_topics(port: int, topics: dict[str, int], validate_only: bool = False) -> dict[str, dict[str, Any]]:
    body = {"topics": [{"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
                       for n, p in topics.items()],
            "timeout_ms": 60000, "validate_only": validate_only}
    with RawClient(port, timeout=120) as c:
        return {t["name"]: t for t in c.request(19, 5, body)["topics"]}


def test_one_descriptor_per_partition(limited: Any) -> None:
    """A partition holds one descriptor, its active segment's .log (Kafka's cost): the index files are mapped
    without one. It was five (the .log, two index files kept open, and the duplicate each mmap keeps)."""
    b = limited()
    before = open_fds(b.proc.pid)
    assert create_topics(b.port, {"fds": 200})["fds"]["error_code"] == NONE
    after = open_fds(b.proc.pid)
    assert (after - before) / 200 <= 1.05, (before, after)
    b.stop()
    b.start()
    assert open_fds(b.proc.pid) - before <= 210


def test_10000_partitions_refused_clearly_and_budget_filled(limited: Any) -> None:
    """10,000 partitions cannot be held under 1,024 descriptors (one open .log each): the request is refused with
    POLICY_VIOLATION naming the limit, nothing is made, and the broker keeps serving; filling the budget with
    smaller topics ends with the same refusal, and the broker restarts with everything it accepted."""
    b = limited()
    res = create_topics(b.port, {"huge": 10_000})["huge"]
    assert res["error_code"] == POLICY_VIOLATION, res
    assert "ulimit -n" in res["error_message"] and str(NOFILE) in res["error_message"], res
    assert partition_dirs(b, "huge") == []
    assert "huge" not in registry(b) if (b.data_dir / "tidelog-topics.json").exists() else True
    accepted: dict[str, int] = {}
    for i in range(20):
        name = f"fill{i}"
        res = create_topics(b.port, {name: 200})[name]
        if res["error_code"] != NONE:
            assert res["error_code"] == POLICY_VIOLATION, res
            assert partition_dirs(b, name) == []
            break
        accepted[name] = 200
    else:
        raise AssertionError("20 x 200 partitions accepted under 1,024 descriptors")
    assert sum(accepted.values()) >= 600, accepted  # a quarter of the limit is kept in reserve
    # CreatePartitions is held to the same budget
    body = {"topics": [{"name": "fill0", "count": 5000, "assignments": None}], "timeout_ms": 60000,
            "validate_only": False}
    with RawClient(b.port, timeout=60) as c:
        (r,) = c.request(CREATE_PARTITIONS, 3, body)["results"]
    assert r["error_code"] == POLICY_VIOLATION and "ulimit -n" in r["error_message"], r
    assert len(partition_dirs(b, "fill0")) == 200
    assert set(registry(b)) == set(accepted)
    b.stop()
    b.start()
    md = metadata(b.port, None)
    assert {t["name"]: len(t["partitions"]) for t in md["topics"]} == accepted


def test_emfile_midway_rolls_back(limited: Any) -> None:
    """A real EMFILE in the middle of a creation (no reserve, and exactly as many partitions as the descriptors
    left, so the transient files of the last ones fail): KAFKA_STORAGE_ERROR with a message, nothing of the topic
    left on disk or in the registry, the broker keeps serving and restarts."""
    b = limited(**{"tidelog.open.files.reserve": "0"})
    lo, hi = 1, 2000  # the headroom, found with validate_only requests (they make nothing)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if create_topics(b.port, {"probe": mid}, validate_only=True)["probe"]["error_code"] == NONE:
            lo = mid
        else:
            hi = mid - 1
    # the budget lets exactly ``lo`` more files open: the last partition's .log takes the last descriptor and its
    # index (opened for the moment of its mapping) fails with EMFILE
    res = create_topics(b.port, {"edge": lo})["edge"]
    assert res["error_code"] == KAFKA_STORAGE_ERROR, res
    assert "open-file limit (ulimit -n 1024)" in res["error_message"], res
    assert partition_dirs(b, "edge") == []
    assert "edge" not in (registry(b) if (b.data_dir / "tidelog-topics.json").exists() else {})
    assert create_topics(b.port, {"after": 1})["after"]["error_code"] == NONE
    b.stop()
    b.start()
    assert metadata(b.port, ["after"], allow_auto=False)["topics"][0]["error_code"] == NONE


def test_metadata_with_500_unknown_topics_is_bounded(limited: Any) -> None:
    """auto.create.topics.enable=true and one Metadata naming 500 unknown topics of 2 partitions each: the topics
    the open-file budget holds are created, the rest are answered UNKNOWN_TOPIC_OR_PARTITION; the broker stays
    under its limit, keeps serving and restarts with exactly the topics it created."""
    b = limited(**{"num.partitions": "2"})
    names = [f"auto{i:03d}" for i in range(500)]
    md = metadata(b.port, names)
    codes = {t["name"]: t["error_code"] for t in md["topics"]}
    created = {n for n, c in codes.items() if c in (NONE, LEADER_NOT_AVAILABLE)}
    refused = {n for n, c in codes.items() if c == UNKNOWN_TOPIC_OR_PARTITION}
    assert created | refused == set(names), {c for c in codes.values()}
    assert refused and len(created) >= 250, (len(created), len(refused))
    assert open_fds(b.proc.pid) < NOFILE
    assert set(registry(b)) == created
    assert create_topics(b.port, {"more": 1000})["more"]["error_code"] == POLICY_VIOLATION
    b.stop()
    b.start()
    md = metadata(b.port, None)
    assert {t["name"] for t in md["topics"]} == created


def test_start_after_every_interrupted_creation_state(limited: Any) -> None:
    """The directory states an interrupted creation (or its rollback) can leave, made directly, then a start:
    it always succeeds; empty partitions the registry does not list are removed (never adopted), partitions
    holding records are adopted (Kafka recovers every log directory it finds), partitions the registry lists
    but the disk lacks are created, and leftover temporary files are ignored."""
    b = limited()
    assert create_topics(b.port, {"keep": 2})["keep"]["error_code"] == NONE
    confluent_produce(b.bootstrap, "keep", [{"value": b"v"}])
    b.stop()
    d = b.data_dir
    (d / "ghost-0").mkdir()  # mkdir, then the crash
    (d / "ghost-1").mkdir()  # mkdir and partition.metadata
    write_partition_metadata(d / "ghost-1" / "partition.metadata", new_uuid())
    g3 = d / "ghost3-0"  # partition.metadata, an empty .log and a preallocated .index, no .timeindex
    g3.mkdir()
    write_partition_metadata(g3 / "partition.metadata", new_uuid())
    (g3 / "00000000000000000000.log").touch()
    (g3 / "00000000000000000000.index").write_bytes(bytes(65536))
    (d / "keep-2").mkdir()  # CreatePartitions interrupted before its registry write
    write_partition_metadata(d / "keep-2" / "partition.metadata", read_partition_metadata(d / "keep-0" / "partition.metadata"))
    (d / "tidelog-topics.json.tmp").write_bytes(b'{"version": 1, "gener')  # the registry write interrupted
    (d / "keep-0" / "partition.metadata.tmp").write_bytes(b"vers")
    (d / "keep-1" / "00000000000000000000.timeindex").unlink()  # index files of a registered partition lost
    (d / "keep-1" / "00000000000000000000.index").write_bytes(b"")
    (d / f"keep-5.{'ab' * 16}-delete").mkdir()  # a rollback's removal interrupted
    shutil.copytree(d / "keep-0", d / "orphan-0")  # a partition with records the registry does not know
    (d / "orphan-0" / "partition.metadata").unlink()
    reg = json.loads((d / "tidelog-topics.json").read_text())  # listed with 3 partitions, on disk only one
    reg["generation"] += 1
    reg["topics"]["listed"] = {"topic_id": uuid_to_str(new_uuid()), "partitions": 3, "configs": {}}
    (d / "tidelog-topics.json").write_text(json.dumps(reg))
    (d / "listed-0").mkdir()
    b.start()
    md = metadata(b.port, None)
    assert {t["name"]: len(t["partitions"]) for t in md["topics"]} == {"keep": 2, "orphan": 1, "listed": 3}
    names = {p.name for p in d.iterdir()}
    assert not names & {"ghost-0", "ghost-1", "ghost3-0", "keep-2", f"keep-5.{'ab' * 16}-delete"}, names
    assert {"listed-1", "listed-2"} <= names
    assert set(registry(b)) == {"keep", "orphan", "listed"}
    with RawClient(b.port) as c:
        assert list_offset_raw(c, "keep", 0, -1)["offset"] == 1
        assert list_offset_raw(c, "orphan", 0, -1)["offset"] == 1
    assert confluent_consume(b.bootstrap, "keep", 1)[0].value() == b"v"
    b.stop()
    b.start()  # and again (the consumer made __consumer_offsets meanwhile)
    assert {t["name"] for t in metadata(b.port, None)["topics"]} - {"__consumer_offsets"} == {"keep", "orphan", "listed"}


@pytest.mark.parametrize("kill_at", [1, 150, 300])
def test_killed_during_creation_restarts_whole_or_nothing(limited: Any, kill_at: int) -> None:
    """SIGKILL while a 300-partition CreateTopics runs, once ``kill_at`` partition directories exist: the broker
    starts again, and the topic is either whole (300 partitions, registry written) or gone (no directory)."""
    b = limited()
    c = RawClient(b.port, timeout=60)
    body = {"topics": [{"name": "crash", "num_partitions": 300, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 60000, "validate_only": False}
    c.send_request(19, 5, body)
    deadline = time.monotonic() + 30
    while len(partition_dirs(b, "crash")) < kill_at:
        assert time.monotonic() < deadline, "creation did not progress"
        time.sleep(0.002)  # polling the directory for the kill point
    b.kill()
    c.close()
    b.start()
    (t,) = metadata(b.port, ["crash"], allow_auto=False)["topics"]
    dirs = partition_dirs(b, "crash")
    if kill_at < 300:  # the registry is written after the last partition: this creation never happened
        assert t["error_code"] == UNKNOWN_TOPIC_OR_PARTITION, t
    if t["error_code"] == NONE:
        assert len(t["partitions"]) == 300 and len(dirs) == 300 and registry(b)["crash"]["partitions"] == 300
    else:
        assert t["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and dirs == [], (t, dirs[:5])
    # and the name can be used (again) either way
    res = create_topics(b.port, {"crash": 3})["crash"]
    assert res["error_code"] in ((NONE,) if dirs == [] else (36,)), res  # 36: TOPIC_ALREADY_EXISTS
