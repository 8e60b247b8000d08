"""Transactions version 2 (KIP-890 part 2) in a ZooKeeper-mode cluster (3 brokers, RF 3), the transaction
coordinator on another broker than the partition leaders: Produce v12 to a leader adds the partition at the
coordinator (AddPartitionsToTxn v5, ``verify_only`` false, between brokers), EndTxn v5 bumps the epoch and the
markers (WriteTxnMarkers v2, ``TransactionVersion`` 2) reach the leaders with it; a delayed EndTxn of the previous
transaction is fenced and the next transaction stays whole."""

from __future__ import annotations

import functools
import subprocess
import time
import uuid
from typing import Any

import pytest
from support import agreed_coordinator, create_topic, request
from test_transactions import _leaders, _read, _wait_state
from test_tv2_java import java_classpath  # noqa: F401  (the fixture: kafka-clients 4.3, the compiled check)

from tidelog.records.batch import build_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRODUCE, INIT_PRODUCER_ID, END_TXN, DESCRIBE_TRANSACTIONS = 0, 22, 26, 65
NONE, NOT_ENOUGH_REPLICAS, PRODUCER_FENCED = 0, 19, 90

_request = functools.partial(request, timeout=15)


def _produce_v12(broker: Any, txn_id: str, topic: str, partition: int, pid: int, epoch: int, seq: int,
                 value: bytes, timeout: float = 30.0) -> int:
    """Produce v12; retried while the coordinator still completes the previous transaction (the implicit add
    answers CONCURRENT_TRANSACTIONS, which Produce maps to the retriable NOT_ENOUGH_REPLICAS)."""
    batch = build_batch([(None, value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)
    body = {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    deadline = time.monotonic() + timeout
    while True:
        code = _request(broker, PRODUCE, 12, body)["responses"][0]["partition_responses"][0]["error_code"]
        if code != NOT_ENOUGH_REPLICAS or time.monotonic() > deadline:
            return int(code)
        time.sleep(0.1)  # polling interval: the previous transaction's markers are being written


def _end(broker: Any, txn_id: str, pid: int, epoch: int, commit: bool) -> dict:
    return _request(broker, END_TXN, 5, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                         "committed": commit})


def test_tv2_across_brokers_and_the_delayed_end_txn(cluster: Any) -> None:
    topic, txn_id = f"tv2-{uuid.uuid4().hex[:8]}", f"t2-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    leaders = _leaders(cluster, topic, 3)
    remote = [p for p, b in sorted(leaders.items()) if b != coord]
    assert remote, leaders
    cb = cluster.brokers[coord]
    r = _request(cb, INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60000,
                                           "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == NONE
    pid, e = r["producer_id"], r["producer_epoch"]
    # transaction N: every partition, through its leader; no AddPartitionsToTxn
    for p in range(3):
        assert _produce_v12(cluster.brokers[leaders[p]], txn_id, topic, p, pid, e, 0, f"N-{p}".encode()) == NONE
    s = _request(cb, DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
    assert (s["transaction_state"], s["topics"]) == ("Ongoing", [{"topic": topic, "partitions": [0, 1, 2]}])
    r = _end(cb, txn_id, pid, e, True)
    assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (NONE, pid, e + 1)
    _wait_state(cb, txn_id, "CompleteCommit")
    assert sorted(_read(cluster, topic, 3, "read_committed")) == [b"N-0", b"N-1", b"N-2"]
    # transaction N+1 writes to a partition led elsewhere; then N's EndTxn arrives late: fenced
    p = remote[0]
    assert _produce_v12(cluster.brokers[leaders[p]], txn_id, topic, p, pid, e + 1, 0, b"N+1-a") == NONE
    assert _end(cb, txn_id, pid, e, True)["error_code"] == PRODUCER_FENCED
    s = _request(cb, DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
    assert (s["transaction_state"], s["producer_epoch"]) == ("Ongoing", e + 1)
    q = next(x for x in range(3) if x != p)
    assert _produce_v12(cluster.brokers[leaders[q]], txn_id, topic, q, pid, e + 1, 0, b"N+1-b") == NONE
    r = _end(cb, txn_id, pid, e + 1, True)
    assert (r["error_code"], r["producer_epoch"]) == (NONE, e + 2)
    _wait_state(cb, txn_id, "CompleteCommit")
    assert sorted(_read(cluster, topic, 3, "read_committed")) == [b"N+1-a", b"N+1-b", b"N-0", b"N-1", b"N-2"]


def test_java_4_producer_runs_transactions_v2_across_brokers(cluster: Any, java_classpath: str) -> None:  # noqa: F811
    """The Kafka 4.3 Java producer of ``tests/broker/txn/test_tv2_java.py`` against the cluster: its partitions are led by
    brokers other than its coordinator (asserted), so the implicit adds and the markers cross brokers."""
    topic, txn_id, group = f"tv2j-{uuid.uuid4().hex[:8]}", f"tv2j-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 2, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    leaders = _leaders(cluster, topic, 2)
    assert any(b != coord for b in leaders.values()), (coord, leaders)
    proc = subprocess.run(["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", java_classpath,
                           "Tv2JavaCheck", cluster.bootstrap, topic, txn_id, group],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and '"done"' in proc.stdout, (proc.stdout[-2000:], proc.stderr[-4000:])
    _wait_state(cluster.brokers[coord], txn_id, "CompleteCommit")
    s = _request(cluster.brokers[coord], DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
    assert s["transaction_states"][0]["producer_epoch"] == 3  # one bump per EndTxn v5
    assert sorted(_read(cluster, topic, 2, "read_committed")) == [b"t0-p0", b"t0-p1", b"t2-p0", b"t2-p1"]
