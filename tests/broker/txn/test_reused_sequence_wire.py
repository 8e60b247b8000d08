"""Bug 9 of docs/RELIABILITY.md (decision 0072) over the raw protocol, against a real ``tidelog serve``: a
transactional batch that repeats the (epoch, first, last sequence) of a batch whose transaction has ended at the
partition is refused with INVALID_TXN_STATE and nothing is appended; the same batch sent twice inside one open
transaction is still a duplicate answered with its first offsets. Transactions version 1 (EndTxn v3: no epoch bump
per transaction, as librdkafka 2.16 and the Java client 3.9 run them)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from helpers import RawClient, create_topic_raw, wait_for

from tidelog.records.batch import build_batch

PRODUCE, LIST_OFFSETS, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, DESCRIBE_TXNS = 0, 2, 22, 24, 26, 65
NONE, INVALID_TXN_STATE = 0, 48
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

pytestmark = [pytest.mark.integration]


class _Txn:
    """One raw transactional producer (one transactional id) on one partition."""

    def __init__(self, c: RawClient, tid: str, topic: str) -> None:
        self.c, self.tid, self.topic = c, tid, topic
        r = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": 30000,
                                            "producer_id": -1, "producer_epoch": -1})
        assert r["error_code"] == NONE, r
        self.pid, self.epoch = r["producer_id"], r["producer_epoch"]

    def begin(self) -> None:
        body = {"v3_and_below_transactional_id": self.tid, "v3_and_below_producer_id": self.pid,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": self.topic, "partitions": [0]}]}
        r = self.c.request(ADD_PARTITIONS, 3, body)
        assert [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"]
                for p in t["results_by_partition"]] == [NONE], r

    def produce(self, seq: int, *values: bytes, version: int = 9) -> tuple[int, int, str | None]:
        batch = build_batch([(None, v) for v in values], producer_id=self.pid, producer_epoch=self.epoch,
                            base_sequence=seq, is_transactional=True)
        body = {"transactional_id": self.tid, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": self.topic, "partition_data": [{"index": 0, "records": batch}]}]}
        pr = self.c.request(PRODUCE, version, body)["responses"][0]["partition_responses"][0]
        return pr["error_code"], pr["base_offset"], pr.get("error_message")

    def end(self, commit: bool) -> None:
        r = self.c.request(END_TXN, 3, {"transactional_id": self.tid, "producer_id": self.pid,
                                        "producer_epoch": self.epoch, "committed": commit})
        assert r["error_code"] == NONE, r
        done = "CompleteCommit" if commit else "CompleteAbort"
        wait_for(lambda: self.c.request(DESCRIBE_TXNS, 0, {"transactional_ids": [self.tid]})
                 ["transaction_states"][0]["transaction_state"] == done, 10, done)

    def end_offset(self, isolation: int) -> int:
        body = {"replica_id": -1, "isolation_level": isolation,
                "topics": [{"name": self.topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                                "timestamp": -1}]}]}
        p = self.c.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
        assert p["error_code"] == NONE, p
        return int(p["offset"])


def _open(broker: Any) -> tuple[RawClient, _Txn]:
    topic = f"reuse-wire-{uuid.uuid4().hex[:8]}"
    c = RawClient(broker.port)
    assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
    return c, _Txn(c, f"reuse-wire-{uuid.uuid4().hex[:8]}", topic)


@pytest.mark.parametrize("commit", [False, True])
def test_sequence_of_an_ended_transaction_is_refused(txn_broker: Any, commit: bool) -> None:
    c, t = _open(txn_broker)
    with c:
        t.begin()
        assert t.produce(0, b"a1", b"a2")[:2] == (NONE, 0)  # transaction 1: offsets 0-1
        t.end(commit)  # marker at offset 2
        t.begin()
        err, base, message = t.produce(0, b"b1", b"b2")  # transaction 2 reuses sequences 0-1
        assert (err, base) == (INVALID_TXN_STATE, -1)
        assert message is not None and "repeats the batch at offsets 0..1" in message
        assert err == t.produce(0, b"b1", b"b2", version=11)[0]  # the same answer at every Produce version
        assert t.end_offset(READ_UNCOMMITTED) == 3  # nothing appended
        # the producer's next sequence is taken: the transaction goes on and commits
        assert t.produce(2, b"c")[:2] == (NONE, 3)
        t.end(True)
        assert t.end_offset(READ_COMMITTED) == t.end_offset(READ_UNCOMMITTED) == 5


def test_sequence_before_the_open_transaction_is_refused(txn_broker: Any) -> None:
    c, t = _open(txn_broker)
    with c:
        t.begin()
        assert t.produce(0, b"a")[:2] == (NONE, 0)
        t.end(False)  # marker at 1
        t.begin()
        assert t.produce(1, b"b")[:2] == (NONE, 2)  # transaction 2 opens at offset 2
        assert t.produce(0, b"x")[0] == INVALID_TXN_STATE  # before it: transaction 1's sequence
        assert t.produce(1, b"b")[:2] == (NONE, 2)  # a retry of transaction 2's own batch: its first offsets
        assert t.end_offset(READ_UNCOMMITTED) == 3


def test_retry_inside_the_open_transaction_is_still_a_duplicate(txn_broker: Any) -> None:
    c, t = _open(txn_broker)
    with c:
        t.begin()
        assert t.produce(0, b"a1", b"a2")[:2] == (NONE, 0)
        assert t.produce(0, b"a1", b"a2")[:2] == (NONE, 0)  # the same batch again: answered with its offsets
        assert t.produce(2, b"a3")[:2] == (NONE, 2)
        assert t.produce(0, b"a1", b"a2")[:2] == (NONE, 0)  # an older retained batch of the same transaction
        assert t.produce(2, b"a3")[:2] == (NONE, 2)
        assert t.end_offset(READ_UNCOMMITTED) == 3  # each appended once
        t.end(True)
        assert t.end_offset(READ_COMMITTED) == 4
