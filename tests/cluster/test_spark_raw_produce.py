"""The Spark sink's raw producer (tidelog.spark.producer) against a 3-broker cluster: the partition leader moves
while it writes (a preferred-leader election, the old leader staying up), so the old leader answers
NOT_LEADER_OR_FOLLOWER; the producer refreshes its metadata and resends to the new leader with the same sequence
numbers. Every record once, in send order."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pytest
from support import create_topic, read_all

pa = pytest.importorskip("pyarrow")

from tidelog.spark.producer import RawProducer  # noqa: E402  (needs pyarrow)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _batches(first: int, count: int, per: int) -> Any:
    for start in range(first, first + count, per):
        n = min(per, first + count - start)
        yield pa.RecordBatch.from_arrays(
            [pa.array([f"{i:08d}".encode() for i in range(start, start + n)], pa.binary()),
             pa.array([0] * n, pa.int32())], names=["value", "partition"])


def _leader(cluster: Any, topic: str, not_in: tuple[int, ...] = ()) -> int:
    def pred(md: Any) -> int | None:
        p = cluster.partition(md, topic)
        return p.leader if p is not None and p.leader > 0 and p.leader not in not_in and len(p.isrs) == 3 else None

    return cluster.wait_for(f"a leader of {topic}-0 outside {not_in} with a full ISR", pred)


def test_leader_moves_while_writing(cluster: Any) -> None:
    for b in cluster.brokers.values():
        if not b.running:
            b.start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3]])
    # move the leadership off the preferred replica 1 (kill it, let it come back as a follower)
    cluster.brokers[1].kill()
    cluster.wait_for("a new leader", lambda md: (p := cluster.partition(md, topic)) is not None and p.leader in (2, 3))
    cluster.brokers[1].start()
    old = _leader(cluster, topic)
    assert old != 1
    prod = RawProducer({"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": "50"})
    try:
        assert prod.produce_arrow(_batches(0, 3000, 500), topic) == 3000
        prod.flush()
        assert prod.retriable_errors == {}
        # the preferred leader takes over; ``old`` stays up and answers NOT_LEADER_OR_FOLLOWER
        subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "elect-leaders", "-z",
                        cluster.zk.connect, "--topic", topic], capture_output=True, text=True, timeout=60,
                       check=True)
        assert _leader(cluster, topic) == 1
        assert prod.produce_arrow(_batches(3000, 3000, 500), topic) == 3000
        prod.flush()
    finally:
        prod.close()
    assert prod.retriable_errors.get(6, 0) >= 1, prod.retriable_errors  # NOT_LEADER_OR_FOLLOWER
    assert prod.resent >= 1 and prod.delivered == 6000
    records = read_all(cluster.bootstrap, topic, 1)
    assert [int(v) for _, v in records[0]] == list(range(6000))
