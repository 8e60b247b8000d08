"""Transactions (issue 14) under faults, against a real ``tidelog serve``: kill -9 of a producer in the middle of a
transaction (aborted after its timeout, never visible to read_committed, the LSO moves on), kill -9 of the broker
in the middle of a transaction and right after a commit (recovered exactly once, the transactional id usable
again), and a transactional copier killed -9 and restarted several times (each input record exactly once in the
output, committed offsets never going back).

The clients that get killed run as subprocesses (``txn_worker.py``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from kafka.record import MemoryRecords
from txnhelp import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_BROKER,
    Worker,
    by_partition,
    committed_offsets,
    consumer,
    create_topics,
    name,
    partition_dir,
    plain_producer,
    produce_all,
    read_to_end,
    txn_producer,
    values,
    wait_for,
    wait_stable,
    watermarks,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# ------------------------------------------------------------------------------------ kill -9 of a producer


def test_producer_killed_mid_transaction_is_aborted_after_its_timeout(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic = name("txn-doomed")
    create_topics(bs, {topic: 1})
    produce_all(plain_producer(bs), [(topic, 0, None, f"plain-{i}".encode()) for i in range(3)])  # offsets 0..2

    watcher = consumer(bs, READ_COMMITTED)  # reads from before the kill until after the abort
    watcher.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen: list[bytes] = []

    def watch() -> None:
        m = watcher.poll(0.1)
        if m is not None and not m.error():
            seen.append(m.value())

    worker = Worker("hang", bs, topic, name("doomed-tid"), "5", "3000")
    try:
        worker.wait_event("produced")  # offsets 3..7, transaction open
        worker.kill()
        killed_at = time.monotonic()
        assert watermarks(bs, topic, 0, READ_UNCOMMITTED) == (0, 8)
        assert watermarks(bs, topic, 0, READ_COMMITTED) == (0, 3), "the LSO is the open transaction's first offset"

        # the coordinator aborts it once transaction.timeout.ms (3 s) has passed: an ABORT marker at offset 8
        def lso_moved() -> bool:
            watch()
            return watermarks(bs, topic, 0, READ_COMMITTED) == (0, 9)

        wait_for(lso_moved, 20, "the timed-out transaction to be aborted (LSO 3 -> 9)")
        assert time.monotonic() - killed_at < 20
        produce_all(plain_producer(bs), [(topic, 0, None, b"plain-after")])  # offset 9
        wait_for(lambda: watch() or seen[-1:] == [b"plain-after"], 20, "the record after the abort")
    finally:
        worker.kill()
        watcher.close()
    assert seen == [b"plain-0", b"plain-1", b"plain-2", b"plain-after"], "a read_committed consumer saw " + repr(seen)
    assert values(read_to_end(bs, [(topic, 0)], READ_UNCOMMITTED)) == [
        b"plain-0", b"plain-1", b"plain-2", *[f"doomed-{i}".encode() for i in range(5)], b"plain-after"]
    assert watermarks(bs, topic, 0, READ_COMMITTED) == (0, 10)


# -------------------------------------------------------------------------------------- kill -9 of the broker


def control_and_data(data_dir: Any, topic: str, partition: int) -> list[tuple[int, str]]:
    """(offset, "COMMIT" | "ABORT" | "data") of every record on disk, read with kafka-python's record classes."""
    out: list[tuple[int, str]] = []
    for seg in sorted(partition_dir(data_dir, topic, partition).glob("*.log")):
        mr = MemoryRecords(seg.read_bytes())
        while (batch := mr.next_batch()) is not None:
            for r in batch:
                kind = ("COMMIT" if r.commit else "ABORT") if batch.is_control_batch else "data"
                out.append((r.offset, kind))
    return out


@pytest.fixture
def own_broker(broker_factory: Any) -> Any:
    """A broker of the test's own, since the test kills it."""
    return broker_factory(TXN_BROKER)


def test_broker_killed_mid_transaction(own_broker: Any) -> None:
    b = own_broker
    topic, tid = name("txn-bkill"), name("tid")
    create_topics(b.bootstrap, {topic: 2})
    tps = [(topic, 0), (topic, 1)]
    p = txn_producer(b.bootstrap, tid)
    p.init_transactions(20)
    p.begin_transaction()
    produce_all(p, [(topic, part, None, f"c-{part}-{i}".encode()) for part in (0, 1) for i in range(3)])
    p.commit_transaction(20)
    p.begin_transaction()
    produce_all(p, [(topic, part, None, f"open-{part}-{i}".encode()) for part in (0, 1) for i in range(3)])

    b.kill()
    b.start()
    # a new instance with the same transactional id: its init aborts the transaction the broker recovered open
    fresh = txn_producer(b.bootstrap, tid)
    fresh.init_transactions(30)
    fresh.begin_transaction()
    produce_all(fresh, [(topic, part, None, f"new-{part}".encode()) for part in (0, 1)])
    fresh.commit_transaction(20)
    del p  # the first instance, a zombie now
    wait_stable(b.bootstrap, tps)

    got = by_partition(read_to_end(b.bootstrap, tps, READ_COMMITTED))
    assert got == {(topic, part): [f"c-{part}-{i}".encode() for i in range(3)] + [f"new-{part}".encode()]
                   for part in (0, 1)}
    # 3 + COMMIT + 3 open + ABORT + 1 + COMMIT = 10 offsets per partition; nothing left open
    for t, part in tps:
        assert watermarks(b.bootstrap, t, part, READ_COMMITTED) == (0, 10)
        assert watermarks(b.bootstrap, t, part, READ_UNCOMMITTED) == (0, 10)


def test_broker_killed_right_after_commit(own_broker: Any) -> None:
    b = own_broker
    topic, tid = name("txn-bkill-commit"), name("tid")
    create_topics(b.bootstrap, {topic: 2})
    tps = [(topic, 0), (topic, 1)]
    p = txn_producer(b.bootstrap, tid)
    p.init_transactions(20)
    p.begin_transaction()
    produce_all(p, [(topic, part, None, f"c-{part}-{i}".encode()) for part in (0, 1) for i in range(5)])
    p.commit_transaction(20)
    b.kill()  # as soon as the commit was acknowledged
    b.start()
    del p
    # the coordinator answered after writing PrepareCommit; if the broker died before every marker was written,
    # the restarted coordinator completes the commit
    wait_stable(b.bootstrap, tps)

    got = by_partition(read_to_end(b.bootstrap, tps, READ_COMMITTED))
    assert got == {(topic, part): [f"c-{part}-{i}".encode() for i in range(5)] for part in (0, 1)}, "exactly once"
    # after the 5 records, only COMMIT markers: one, or two when the broker died after writing the markers but
    # before CompleteCommit, so the restarted coordinator wrote them again (Kafka does the same; a second marker
    # for a transaction already ended changes nothing a reader sees)
    for t, part in tps:
        low, high = watermarks(b.bootstrap, t, part, READ_COMMITTED)
        assert low == 0 and high in (6, 7), (t, part, low, high)
        tail = [x for x in control_and_data(b.data_dir, t, part) if x[0] >= 5]
        assert [x[1] for x in tail] == ["COMMIT"] * (high - 5), tail

    fresh = txn_producer(b.bootstrap, tid)
    fresh.init_transactions(30)
    fresh.begin_transaction()
    produce_all(fresh, [(topic, part, None, f"after-{part}".encode()) for part in (0, 1)])
    fresh.commit_transaction(20)
    wait_stable(b.bootstrap, tps)
    got = by_partition(read_to_end(b.bootstrap, tps, READ_COMMITTED))
    assert got == {(topic, part): [f"c-{part}-{i}".encode() for i in range(5)] + [f"after-{part}".encode()]
                   for part in (0, 1)}


# ------------------------------------------------------------------------------ a copier killed and restarted


def test_transactional_copier_killed_and_restarted_copies_exactly_once(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    src, dst, group, tid = name("copy-in"), name("copy-out"), name("copy-g"), name("copy-tid")
    per_partition = 120
    create_topics(bs, {src: 2, dst: 2})
    src_tps = [(src, 0), (src, 1)]
    produce_all(plain_producer(bs), [(src, part, f"k{i}".encode(), f"v-{part}-{i}".encode()) for part in (0, 1)
                                     for i in range(per_partition)])
    total = 2 * per_partition

    samples: list[dict[tuple[str, int], int]] = []  # the group's committed offsets as seen from outside, in order

    def progress() -> int:
        seen = committed_offsets(bs, group, src_tps)
        samples.append(seen)
        return sum(max(o, 0) for o in seen.values())

    workers: list[Worker] = []
    try:
        for kill_after in (40, 100, 170):  # kill -9 once the committed progress passed these, then restart
            w = Worker("copier", bs, src, dst, group, tid, "7", "20")
            workers.append(w)
            w.wait_event("resumed")
            wait_for(lambda n=kill_after: progress() >= n, 60, f"the copier to commit {kill_after} records")
            w.kill()
        w = Worker("copier", bs, src, dst, group, tid, "7", "20")
        workers.append(w)
        w.wait_event("resumed")
        wait_for(lambda: progress() >= total, 60, "the copier to commit everything")
        w.kill()
    finally:
        for w in workers:
            w.kill()

    # committed offsets never went back: neither as polled from outside nor as each copier committed them
    for tp in src_tps:
        polled = [s[tp] for s in samples]
        assert polled == sorted(polled), f"{tp}: committed offsets went back: {polled}"
    history = [ev["offsets"] for w in workers for ev in w.events if ev["event"] in ("resumed", "aborted", "committed")]
    for part in ("0", "1"):
        seq = [h[part] for h in history if h.get(part, -1001) >= 0]
        assert seq == sorted(seq), f"partition {part}: {seq}"
    assert committed_offsets(bs, group, src_tps) == dict.fromkeys(src_tps, per_partition)
    wait_stable(bs, [(dst, 0), (dst, 1)])

    got = by_partition(read_to_end(bs, [(dst, 0), (dst, 1)], READ_COMMITTED))
    for part in (0, 1):
        assert got[(dst, part)] == [f"v-{part}-{i}".encode() for i in range(per_partition)], (
            f"partition {part}: not each input record exactly once, in order")
