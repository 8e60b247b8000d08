"""Issue 17, item 1: topic creation is atomic and bounded, under the common limit of 1,024 open files.

Each test runs a real ``tidelog serve`` under ``prlimit --nofile=1024:1024`` and drives it with real requests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import METADATA, NONE, RawClient, create_topic_raw

_spec = importlib.util.spec_from_file_location("tidelog_fd_fixtures", Path(__file__).parent / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")

NOFILE = 1024
KAFKA_STORAGE_ERROR = 56
POLICY_VIOLATION = 44
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
CREATE_PARTITIONS = 37
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
