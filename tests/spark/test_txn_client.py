"""The driver side of atomic micro-batches without Spark: a transaction opened by one client (a task's raw
producer) and ended by another connection that knows only its transactional id, producer id and epoch (EndTxn, as
Kafka and Flink allow), against the real ``tidelog serve`` of tests/spark; the replay's fallback
(DescribeTransactions) sees it open; the decision record round-trips."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow as pa
import pytest
from helpers import read_to_end

from tidelog.spark.atomic import AtomicCommit, TxnClient, decided_txns, decision_group, decision_metadata
from tidelog.spark.producer import DeliveryError, RawProducer

pytestmark = [pytest.mark.integration]


def _open_txn(bootstrap: str, topic: str, tid: str, n: int) -> RawProducer:
    p = RawProducer({"bootstrap.servers": bootstrap}, transactional_id=tid)
    p.init_producer_id()
    p.begin()
    p.produce_arrow(iter([pa.record_batch([pa.array([f"v{i}" for i in range(n)])], names=["value"])]), topic)
    p.flush()
    return p


def test_another_connection_ends_the_transaction(kt: Any) -> None:
    topic = kt.new_topic(1)
    tid = f"atomic-{uuid.uuid4().hex[:8]}-0"
    task = _open_txn(kt.bootstrap, topic, tid, 50)
    pid, epoch = task.producer_id, task.epoch
    task.close()  # the task is gone; its transaction stays open
    client = TxnClient({"bootstrap.servers": kt.bootstrap})
    try:
        state = client.describe(tid)
        assert (state["transaction_state"], state["producer_id"], state["producer_epoch"]) == ("Ongoing", pid, epoch)
        assert read_to_end(kt.bootstrap, topic) == []  # held back by the open transaction
        with pytest.raises(DeliveryError, match="PRODUCER_FENCED"):
            client.end_txn(tid, pid, epoch - 1 if epoch > 0 else epoch + 1, commit=True)
        client.end_txn(tid, pid, epoch, commit=True)
        client.end_txn(tid, pid, epoch, commit=True)  # a retry after a lost answer: NONE, not an error
        with pytest.raises(DeliveryError, match="INVALID_TXN_STATE"):
            client.end_txn(tid, pid, epoch, commit=False)
        assert sorted(m.value() for m in read_to_end(kt.bootstrap, topic)) == sorted(
            f"v{i}".encode() for i in range(50))
    finally:
        client.close()


def test_decision_round_trip(kt: Any) -> None:
    topic = kt.new_topic(1)
    prefix = f"atomic-{uuid.uuid4().hex[:8]}"
    client = TxnClient({"bootstrap.servers": kt.bootstrap})
    try:
        assert decided_txns(client, prefix, topic, 0) is None
        msgs = [AtomicCommit(f"{prefix}-{p}", 7, 10, False, 4000 + p, 3) for p in range(2)]
        client.commit_offset(decision_group(prefix), topic, 0, 7, decision_metadata(7, msgs))
        assert decided_txns(client, prefix, topic, 7) == {"0": [4000, 3], "1": [4001, 3]}
        assert decided_txns(client, prefix, topic, 8) is None  # a decision of another batch
        big = [AtomicCommit(f"{prefix}-{p}", 8, 1, False, 10**12 + p, 0) for p in range(400)]
        client.commit_offset(decision_group(prefix), topic, 0, 8, decision_metadata(8, big))
        assert decided_txns(client, prefix, topic, 8) == {}  # too big to name them: all count as decided
        assert json.loads(decision_metadata(8, big)) == {"b": 8, "n": 400}
    finally:
        client.close()
