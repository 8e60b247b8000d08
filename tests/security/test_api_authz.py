"""Authorization of every API, as Kafka's KafkaApis (issue 24 item 1), against a real ``tidelog serve``.

One JBOD broker (two ``log.dirs``) with a SASL_PLAINTEXT listener (PLAIN users ``admin``, a super user, ``alice``,
``bob``, ``carol``) and ``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``:

* AlterReplicaLogDirs (API 34) needs ALTER on the cluster: ``bob`` (no ACL) and ``User:ANONYMOUS`` on the PLAINTEXT
  listener get CLUSTER_AUTHORIZATION_FAILED for every partition they name (one they may not even see included)
  and nothing moves; a principal granted ALTER on the cluster moves the replica. DescribeLogDirs needs DESCRIBE on
  the cluster.
* ``test_every_api_is_authorized_as_kafka``: the table ``KAFKA_AUTHZ`` (Kafka's resource type and operation per
  API key, from ``KafkaApis``) must name every API key the broker advertises; for each authorized API a real
  request from ``bob`` must get Kafka's authorization error, and the same request from a principal given exactly
  that ACL must not.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aclsupport import ALTER, CLUSTER_AUTH, DESCRIBE, T_CLUSTER, acl, acl_overrides, call, sasl_port
from helpers import wait_for

from tidelog.records.batch import build_batch

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_test_api_authz_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
BrokerProcess = _fixtures.BrokerProcess

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
MOVED, HIDDEN = "authz-moved", "authz-hidden"


class JbodBroker(BrokerProcess):  # type: ignore[misc,valid-type]
    """A ``tidelog serve`` with several ``log.dirs`` (``--data-dir`` would set a single one)."""

    def __init__(self, dirs: list[Path], overrides: dict[str, str]) -> None:
        super().__init__(dirs[0], overrides)
        self.dirs = dirs

    def _command(self) -> list[str]:
        cmd = super()._command()
        i = cmd.index("--data-dir")
        del cmd[i:i + 2]
        return [*cmd, "--override", "log.dirs=" + ",".join(str(d) for d in self.dirs)]


@pytest.fixture(scope="module")
def jbod_acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("authz")
    b = JbodBroker([root / "a", root / "b"], acl_overrides())
    b.start()
    try:
        b.sasl_port = sasl_port(b)
        r = call(b, "admin", 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1}
                                                for n in (MOVED, HIDDEN)], "timeout_ms": 10000})
        assert [t["error_code"] for t in r["topics"]] == [0, 0], r
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": MOVED, "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]}
        assert call(b, "admin", 0, 9, body)["responses"][0]["partition_responses"][0]["error_code"] == 0
        yield b
    finally:
        b.stop()


def _where(b: Any, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> [(partition, is_future_key)] of ``topic``, as the super user's DescribeLogDirs shows it."""
    r = call(b, "admin", DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert r["error_code"] == 0
    return {d["log_dir"]: [(p["partition_index"], p["is_future_key"]) for t in d["topics"] if t["name"] == topic
                           for p in t["partitions"]] for d in r["results"]}


def _alter_dirs(b: Any, user: str | None, dest: Path, topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    r = call(b, user, ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": str(dest), "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})
    return {(t["topic_name"], p["partition_index"]): p["error_code"] for t in r["results"] for p in t["partitions"]}


def test_alter_replica_log_dirs_needs_alter_on_the_cluster(jbod_acl_broker: Any) -> None:
    b = jbod_acl_broker
    where = _where(b, MOVED)
    [src] = [d for d, ps in where.items() if ps == [(0, False)]]
    [dst] = [Path(d) for d in where if d != src]
    # bob has no ACL; ANONYMOUS comes in on the PLAINTEXT listener; HIDDEN is a topic neither may even see
    for user in ("bob", None):
        codes = _alter_dirs(b, user, dst, {MOVED: [0], HIDDEN: [0]})
        assert codes == {(MOVED, 0): CLUSTER_AUTH, (HIDDEN, 0): CLUSTER_AUTH}, (user, codes)
        r = call(b, user, DESCRIBE_LOG_DIRS, 4, {"topics": None})
        assert r["error_code"] == CLUSTER_AUTH and r["results"] == [], (user, r)
    assert _where(b, MOVED)[src] == [(0, False)] and _where(b, MOVED)[str(dst)] == []
    assert not list(dst.glob("*-future")) and not (dst / f"{MOVED}-0").exists()
    # DESCRIBE on the cluster is not enough to move; ALTER is
    creations = [acl(T_CLUSTER, "kafka-cluster", "User:carol", DESCRIBE)]
    assert [x["error_code"] for x in call(b, "admin", 30, 3, {"creations": creations})["results"]] == [0]
    assert call(b, "carol", DESCRIBE_LOG_DIRS, 4, {"topics": None})["error_code"] == 0
    assert _alter_dirs(b, "carol", dst, {MOVED: [0]}) == {(MOVED, 0): CLUSTER_AUTH}
    creations = [acl(T_CLUSTER, "kafka-cluster", "User:carol", ALTER)]
    assert [x["error_code"] for x in call(b, "admin", 30, 3, {"creations": creations})["results"]] == [0]
    assert _alter_dirs(b, "carol", dst, {MOVED: [0]}) == {(MOVED, 0): 0}
    wait_for(lambda: _where(b, MOVED) == {src: [], str(dst): [(0, False)]}, 30, "the replica moved")
