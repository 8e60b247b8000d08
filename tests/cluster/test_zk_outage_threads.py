"""No ZooKeeper request pins a worker thread while ZooKeeper is unreachable.

Before the fix the leader's ISR writes ran kazoo's blocking ``set`` in the default executor
(``asyncio.to_thread``: min(32, cores + 4) threads, 6 on a 2-core machine). kazoo keeps a request made while the
connection is down queued until it reconnects, so with ZooKeeper frozen each partition wanting to shrink its ISR
pinned one of those threads for as long as the outage lasted; with more such partitions than threads, everything
else the broker runs there waited behind them: the log manager's tick (flushes, retention, the checkpoints) and
ListPartitionReassignments (its ZooKeeper reads went to the same executor).

Here: 20 partitions led by broker 1 (RF 3) and a single-replica ``clock`` partition on broker 1; ZooKeeper frozen
(SIGSTOP: connections stay open, nothing answers); broker 3 killed, so broker 1 wants to shrink all 20 ISRs. Seen
from outside: a record produced to ``clock`` must reach broker 1's high-watermark checkpoint file (written by the
tick every ``replica.high.watermark.checkpoint.interval.ms``), and ListPartitionReassignments must end with
REQUEST_TIMED_OUT within its ``timeout_ms``, CreateTopics (its ZooKeeper calls on a request handler thread) within
``zookeeper.session.timeout.ms``. Once ZooKeeper is back the ISR shrinks are written.

Real ZooKeeper, real ``tidelog serve`` processes, confluent-kafka clients."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from support import create_topic, kazoo, request, state, until, zk_cluster

from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration

SESSION_S = 6.0
PARTITIONS = 20  # more than the default executor's threads on any machine with fewer than 16 cores
TOPIC, CLOCK = "pinned", "clock"
REQUEST_TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT
OUT_OF_SYNC = re.compile(r"follower out of sync.*? partition=(\d+)")


@pytest.fixture(scope="module")
def cluster3() -> Iterator[Any]:
    """ZooKeeper and 3 brokers: session timeout 6 s, a follower leaves the ISR after 1.5 s, the log manager ticks
    every 200 ms and writes the high-watermark checkpoint every 500 ms."""
    yield from zk_cluster({"zookeeper.session.timeout.ms": str(int(SESSION_S * 1000)), "replica.lag.time.max.ms": "1500",
                           "tidelog.log.tick.interval.ms": "200", "replica.high.watermark.checkpoint.interval.ms": "500"},
                          prefix="tidelog-zk-outage-")


def _log_near(b: Any, seen: int, needle: str = "Traceback") -> str:
    """What a failure message shows of broker ``b``'s log since ``seen``: around the first ``needle`` when there is
    one (a traceback's own lines, not the tail after it), else the tail."""
    text = b.log_text()[seen:]
    i = text.find(needle)
    return text[max(0, i - 1500):i + 3500] if i >= 0 else text[-4000:]


def _checkpointed_hw(b: Any, topic: str, p: int = 0) -> int:
    """The high watermark of ``topic``-``p`` in broker ``b``'s ``replication-offset-checkpoint`` (-1: not listed)."""
    path = b.data_dir / "replication-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return -1
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and int(parts[1]) == p:
            return int(parts[2])
    return -1


def test_isr_writes_pending_on_a_frozen_zookeeper_pin_no_worker_thread(cluster3: Any) -> None:
    c = cluster3
    b1 = c.brokers[1]
    create_topic(c.bootstrap, TOPIC, assignment=[[1, 2, 3]] * PARTITIONS)  # all led by broker 1
    create_topic(c.bootstrap, CLOCK, assignment=[[1]])
    seen = len(b1.log_text())

    os.killpg(c.zk.proc.pid, signal.SIGSTOP)  # frozen: connections stay open, nothing answers
    try:
        until("broker 1 sees its ZooKeeper connection drop",
              lambda: "ZooKeeper connection suspended" in b1.log_text()[seen:], timeout=3 * SESSION_S)
        c.brokers[3].kill()  # every partition now wants broker 3 out of its ISR
        until(f"broker 1 wants to shrink the ISR of all {PARTITIONS} partitions",
              lambda: len(set(OUT_OF_SYNC.findall(b1.log_text()[seen:]))) >= PARTITIONS, timeout=15)

        # the log manager's tick still runs: a record produced now reaches the high-watermark checkpoint
        before = _checkpointed_hw(b1, CLOCK)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{b1.port}", "acks": "1", "linger.ms": 0})
        p.produce(CLOCK, b"tick")
        assert p.flush(10) == 0
        t0 = time.monotonic()
        until("the clock's record in broker 1's high-watermark checkpoint",
              lambda: _checkpointed_hw(b1, CLOCK) > before, timeout=10)
        print(f"high-watermark checkpoint written {time.monotonic() - t0:.2f} s after the produce, "
              f"{PARTITIONS} ISR writes waiting for ZooKeeper")

        # a ZooKeeper read of an admin request ends at the request's timeout with Kafka's REQUEST_TIMED_OUT
        t0 = time.monotonic()
        r = request(b1, 46, 0, {"timeout_ms": 2000, "topics": None}, timeout=15)  # ListPartitionReassignments
        took = time.monotonic() - t0
        assert r["error_code"] == REQUEST_TIMED_OUT, r
        print(f"ListPartitionReassignments (timeout_ms 2000): REQUEST_TIMED_OUT after {took:.2f} s")
        assert 1.5 <= took < 8, took

        # CreateTopics (its ZooKeeper calls on a request handler thread) ends at zookeeper.session.timeout.ms
        t0 = time.monotonic()
        r = request(b1, 19, 5, {"topics": [{"name": "late", "num_partitions": 1, "replication_factor": 3,
                                            "assignments": [], "configs": []}],
                                "timeout_ms": 30000, "validate_only": False}, timeout=3 * SESSION_S)
        took = time.monotonic() - t0
        assert r["topics"][0]["error_code"] == REQUEST_TIMED_OUT, r
        print(f"CreateTopics (session timeout {SESSION_S:.0f} s): REQUEST_TIMED_OUT after {took:.2f} s")
        assert SESSION_S - 0.5 <= took < SESSION_S + 8, took
        # the ISR writes queued since before the CreateTopics are still pending (the current ISR kept)
        assert "ISR update not answered by ZooKeeper" in b1.log_text()[seen:], b1.log_text()[seen:][-3000:]
    finally:
        os.killpg(c.zk.proc.pid, signal.SIGCONT)

    # ZooKeeper back: the pending (or retried) ISR shrinks are written, broker 3 leaves every ISR
    with kazoo(c.zk.connect) as zk:
        try:
            until("broker 3 out of every ISR in ZooKeeper",
                  lambda: all(3 not in state(zk, TOPIC, p).isr for p in range(PARTITIONS)), timeout=60)
        except AssertionError as exc:
            states = {p: state(zk, TOPIC, p) for p in range(PARTITIONS)}
            raise AssertionError(f"{exc}\nstates: {states}\nbroker 1:\n{_log_near(b1, seen, 'ISR')}\n"
                                 f"broker 2:\n{c.brokers[2].log_text()[-3000:]}") from None
    assert "Traceback" not in b1.log_text()[seen:], _log_near(b1, seen)


def test_config_stores_answer_request_timed_out_while_zookeeper_is_frozen(cluster3: Any) -> None:
    """The stores written from request handler threads (client quotas, SCRAM credentials, dynamic broker configs;
    the ACL and group-config stores go through the same client) wait for ZooKeeper at most
    ``zookeeper.session.timeout.ms``, as Kafka's ZooKeeper client bounds a request by its connection timeout: each
    request ends REQUEST_TIMED_OUT instead of holding a handler thread for the whole outage (before: no answer until
    ZooKeeper came back). Sent together, more of them than ``num.io.threads``, all are answered; once ZooKeeper is
    back the same changes succeed."""
    c = cluster3
    b1 = c.brokers[1]
    quota = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "frozen"}],
                          "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
             "validate_only": False}
    scram = {"deletions": [], "upsertions": [{"name": "frozen", "mechanism": 2, "iterations": 4096,
                                              "salt": b"s" * 16, "salted_password": b"p" * 64}]}
    broker_cfg = {"resources": [{"resource_type": 4, "resource_name": "1",
                                 "configs": [{"name": "log.cleaner.threads", "config_operation": 0, "value": "2"}]}],
                  "validate_only": False}
    calls = [("AlterClientQuotas", 49, 1, quota, lambda r: r["entries"][0]["error_code"]),
             ("AlterUserScramCredentials", 51, 0, scram, lambda r: r["results"][0]["error_code"]),
             ("IncrementalAlterConfigs", 44, 1, broker_cfg, lambda r: r["responses"][0]["error_code"])]
    calls = calls * 4  # 12 at once: more than the 8 request handler threads, and 4 behind each store's lock
    seen = len(b1.log_text())
    os.killpg(c.zk.proc.pid, signal.SIGSTOP)
    try:
        until("broker 1 sees its ZooKeeper connection drop",
              lambda: "ZooKeeper connection suspended" in b1.log_text()[seen:], timeout=3 * SESSION_S)
        from concurrent.futures import ThreadPoolExecutor

        def one(call: Any) -> tuple[str, int, float]:
            name, key, version, body, code_of = call
            t0 = time.monotonic()
            r = request(b1, key, version, body, timeout=4 * SESSION_S)
            return name, code_of(r), time.monotonic() - t0

        with ThreadPoolExecutor(len(calls)) as pool:
            answers = list(pool.map(one, calls))
        for name, code, took in answers:
            print(f"{name}: error {code} after {took:.2f} s")
        for name, code, took in answers:
            assert code == REQUEST_TIMED_OUT, (name, code, answers, _log_near(b1, seen, "request failed"))
            # within one bound of the outage's start: a request queued behind a store's lock or a busy handler
            # thread fails at once once ZooKeeper has been unreachable for the session timeout (measured: ~6 s each)
            assert took < 2 * SESSION_S, (name, took, answers)
    finally:
        os.killpg(c.zk.proc.pid, signal.SIGCONT)
    with kazoo(c.zk.connect) as zk:
        until("broker 1 connected to ZooKeeper again", lambda: request(b1, *calls[0][1:4])["entries"][0]["error_code"] == 0,
              timeout=6 * SESSION_S)
        assert zk.exists("/config/clients/frozen") is not None
    assert "Traceback" not in b1.log_text()[seen:], _log_near(b1, seen)
