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
