"""Byte-level cross-check of what transactions leave on disk (issue 14), read with an independent implementation.

After committed and aborted transactions, each partition's ``.log`` is read with kafka-python's own record
classes (``kafka.record.MemoryRecords`` / ``DefaultRecordBatch`` / ``ControlRecord``): transactional data
batches, one control batch per marker with Kafka's key (version 0, type ABORT=0 / COMMIT=1) and value (version 0,
coordinator epoch). The ``.txnindex`` files are unpacked with ``struct`` in Kafka's 34-byte layout and must list
exactly the aborted transactions the log shows, with Kafka's last-stable-offset rule
(``ProducerStateManager.lastStableOffset``: the first offset of the next transaction still open, else the
marker's offset + 1).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords
from txnhelp import (
    READ_COMMITTED,
    create_topics,
    name,
    partition_dir,
    produce_all,
    read_to_end,
    txn_index_entries,
    txn_producer,
    values,
    wait_for,
    wait_stable,
    watermarks,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ABORT, COMMIT = 0, 1


def batches(data_dir: Path, topic: str, partition: int = 0) -> list[dict[str, Any]]:
    """Every batch of every segment, as kafka-python reads it (its CRC checked, the segment tiled exactly)."""
    out = []
    for seg in sorted(partition_dir(data_dir, topic, partition).glob("*.log")):
        data = seg.read_bytes()
        mr = MemoryRecords(data)
        used = 0
        while (batch := mr.next_batch()) is not None:
            assert batch.magic == 2
            assert batch.validate_crc(), f"{seg.name}: CRC of the batch at {batch.base_offset}"
            used += batch.size_in_bytes
            recs = list(batch)
            out.append({
                "base_offset": batch.base_offset, "last_offset": batch.last_offset,
                "transactional": batch.is_transactional, "control": batch.is_control_batch,
                "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
                "base_sequence": batch.base_sequence, "compression": batch.compression_type,
                "records": recs,
            })
        assert used == len(data), f"{seg.name}: {len(data) - used} bytes are not whole batches"
    return out


def expected_index(log: list[dict[str, Any]]) -> list[tuple[int, int, int, int, int]]:
    """The ``.txnindex`` entries Kafka would write for this log: one per ABORT marker, (version 0, producer id,
    first offset of that producer's transaction, marker offset, last stable offset after it)."""
    open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
    entries = []
    for b in log:
        pid = b["producer_id"]
        if b["control"]:
            (marker,) = b["records"]
            first = open_txns.pop(pid, b["base_offset"])
            if marker.type == ABORT:
                lso = min(open_txns.values(), default=b["base_offset"] + 1)
                entries.append((0, pid, first, b["base_offset"], lso))
        elif b["transactional"]:
            open_txns.setdefault(pid, b["base_offset"])
    return entries


def check_control_batch(b: dict[str, Any], kind: int) -> int:
    """A control batch exactly as Kafka writes one; returns its coordinator epoch."""
    assert b["control"] and b["transactional"], b
    assert b["base_offset"] == b["last_offset"] and b["base_sequence"] == -1 and b["compression"] == 0, b
    (rec,) = b["records"]
    assert (rec.version, rec.type) == (0, kind)
    assert rec.key == struct.pack(">hh", 0, kind)
    assert rec.value is not None and len(rec.value) == 6, rec.value
    version, coordinator_epoch = struct.unpack(">hi", rec.value)
    assert version == 0 and coordinator_epoch >= 0
    assert rec.headers == []
    return coordinator_epoch


def test_markers_and_txnindex_as_kafka_reads_them(txn_broker: Any) -> None:
    bs, data_dir = txn_broker.bootstrap, txn_broker.data_dir
    topic, committed_only = name("txn-bytes"), name("txn-bytes-commit")
    create_topics(bs, {topic: 1, committed_only: 1})
    a, b = txn_producer(bs, name("tid-a")), txn_producer(bs, name("tid-b"))
    a.init_transactions(20)
    b.init_transactions(20)

    def send(p: Any, *vals: str, t: str = topic) -> None:
        produce_all(p, [(t, 0, None, v.encode()) for v in vals])

    # markers are written after EndTxn is answered: each step waits for its marker, so the offsets are fixed
    def lso(t: str = topic) -> int:
        return watermarks(bs, t, 0, READ_COMMITTED)[1]

    a.begin_transaction()
    send(a, "a-c-0", "a-c-1")          # 0, 1
    a.commit_transaction(20)            # COMMIT 2
    wait_stable(bs, [(topic, 0)])
    a.begin_transaction()
    send(a, "a-ab-0", "a-ab-1")        # 3, 4
    b.begin_transaction()
    send(b, "b-ab-0")                   # 5
    a.abort_transaction(20)             # ABORT 6: B's transaction (first offset 5) still open -> LSO 5
    wait_for(lambda: lso() == 5, 15, "A's ABORT marker")
    b.abort_transaction(20)             # ABORT 7 -> LSO 8
    wait_stable(bs, [(topic, 0)])
    a.begin_transaction()
    send(a, "a-c2-0")                   # 8
    a.commit_transaction(20)            # COMMIT 9
    a.begin_transaction()
    send(a, "only-0", "only-1", t=committed_only)
    a.commit_transaction(20)
    wait_stable(bs, [(topic, 0), (committed_only, 0)])
    assert values(read_to_end(bs, [(topic, 0)], READ_COMMITTED)) == [b"a-c-0", b"a-c-1", b"a-c2-0"]

    log = batches(data_dir, topic)
    data = [x for x in log if not x["control"]]
    controls = [x for x in log if x["control"]]
    assert [(x["base_offset"], x["last_offset"]) for x in data] == [(0, 1), (3, 4), (5, 5), (8, 8)]
    assert all(x["transactional"] for x in data)
    pid_a, pid_b = data[0]["producer_id"], data[2]["producer_id"]
    assert pid_a >= 0 and pid_b >= 0 and pid_a != pid_b
    assert [x["producer_id"] for x in data] == [pid_a, pid_a, pid_b, pid_a]
    assert [[r.value for r in x["records"]] for x in data] == [
        [b"a-c-0", b"a-c-1"], [b"a-ab-0", b"a-ab-1"], [b"b-ab-0"], [b"a-c2-0"]]

    assert [(x["base_offset"], x["producer_id"]) for x in controls] == [(2, pid_a), (6, pid_a), (7, pid_b), (9, pid_a)]
    kinds = [COMMIT, ABORT, ABORT, COMMIT]
    epochs = [check_control_batch(x, k) for x, k in zip(controls, kinds, strict=True)]
    assert len(set(epochs)) == 1, f"one coordinator, one coordinator epoch: {epochs}"
    # a marker carries the epoch of the producer whose transaction it ends
    for x in controls:
        same = [d for d in data if d["producer_id"] == x["producer_id"]]
        assert x["producer_epoch"] == same[0]["producer_epoch"], x

    index = txn_index_entries(data_dir, topic, 0)
    assert index == [(0, pid_a, 3, 6, 5), (0, pid_b, 5, 7, 8)]
    assert index == expected_index(log)

    # a partition that only saw commits has no .txnindex (Kafka creates the file with its first entry)
    only = batches(data_dir, committed_only)
    assert [x["control"] for x in only] == [False, True]
    check_control_batch(only[1], COMMIT)
    assert list(partition_dir(data_dir, committed_only, 0).glob("*.txnindex")) == []
