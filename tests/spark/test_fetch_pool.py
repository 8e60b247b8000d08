"""The raw fetcher's per-task connection pool (issue 29): the ranges of a packed partition share one Metadata lookup
and one leader connection, with the same rows as reads without a pool; a read that stops with a Fetch in flight
never hands its connection on."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tidelog.spark.fetcher import ConnectionPool, read_range_raw

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _rows(batches: Any) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(batches)).to_pylist() if batches else []


def test_ranges_share_one_connection_and_read_the_same_rows(kt: Any) -> None:
    topic = kt.new_topic(2)
    kt.produce(topic, [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(600)],
               {"batch.num.messages": 50, "linger.ms": 20})
    client = {"bootstrap.servers": kt.bootstrap}
    ranges = [(0, 17, 290), (1, 0, 300), (0, 290, 300)]
    alone = [_rows(list(read_range_raw(client, topic, p, s, e, fail_on_data_loss=True, poll_timeout_ms=10_000)))
             for p, s, e in ranges]
    pool = ConnectionPool()
    try:
        pooled = []
        conns = []
        for p, s, e in ranges:
            pooled.append(_rows(list(read_range_raw(client, topic, p, s, e, fail_on_data_loss=True,
                                                    poll_timeout_ms=10_000, pool=pool))))
            # one Metadata answer named both partitions' leader; the clean read handed its connection back
            assert set(pool.leaders) == {(topic, 0), (topic, 1)}
            assert len(pool.idle) == 1
            conns.append(next(iter(pool.idle.values())))
        assert conns[0] is conns[1] is conns[2]  # one connection for the three ranges
    finally:
        pool.close()
    assert not pool.idle
    assert pooled == alone
    assert [[r["offset"] for r in rows] for rows in pooled] == [list(range(s, e)) for _, s, e in ranges]


def test_a_read_stopped_with_a_fetch_in_flight_closes_its_connection(kt: Any) -> None:
    """A consumer that stops early (``limit()``) closes the generator while the pipelined Fetch is unanswered: that
    connection must not serve the next range (its next response would be the stale one)."""
    topic = kt.new_topic(1)
    n = 70_000  # more than one Arrow batch (65,536 rows), in many small Fetch responses
    kt.produce(topic, [(None, f"{i}".encode()) for i in range(n)], {"batch.num.messages": 500, "linger.ms": 20})
    client = {"bootstrap.servers": kt.bootstrap, "max.partition.fetch.bytes": "65536"}
    pool = ConnectionPool()
    try:
        gen = read_range_raw(client, topic, 0, 0, n, fail_on_data_loss=True, poll_timeout_ms=10_000, pool=pool)
        first = next(gen)
        assert 65_536 <= first.num_rows < n
        gen.close()
        assert not pool.idle and not pool.leaders
        # the next range on the same pool connects afresh and reads exactly its records
        rows = _rows(list(read_range_raw(client, topic, 0, 69_990, n, fail_on_data_loss=True,
                                         poll_timeout_ms=10_000, pool=pool)))
        assert [r["value"] for r in rows] == [f"{i}".encode() for i in range(69_990, n)]
        assert len(pool.idle) == 1
    finally:
        pool.close()


def test_trace_log_is_opt_in(tmp_path: Any) -> None:
    """``TIDELOG_SPARK_TRACE`` writes ``<time> <pid> <event>`` lines; unset, nothing is written anywhere."""
    import os
    import subprocess
    import sys

    path = tmp_path / "trace.log"
    code = "from tidelog.spark.trace import TRACING, trace; trace('an event'); print(TRACING)"
    env = {k: v for k, v in os.environ.items() if k != "TIDELOG_SPARK_TRACE"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert off.stdout.strip() == "False" and not path.exists()
    on = subprocess.run([sys.executable, "-c", code], env={**env, "TIDELOG_SPARK_TRACE": str(path)},
                        capture_output=True, text=True, timeout=60, check=True)
    assert on.stdout.strip() == "True"
    lines = path.read_text().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == ["tidelog.spark imported", "an event"]
    assert all(float(line.split()[0]) > 1.7e9 and line.split()[1].isdigit() for line in lines)
