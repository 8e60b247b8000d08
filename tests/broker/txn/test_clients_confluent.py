"""Transactions (issue 14) with confluent-kafka / librdkafka against a real ``tidelog serve``.

What the clients see: committed transactions across topics and partitions, aborted ones hidden from
read_committed consumers (and shown to read_uncommitted ones), consume-transform-produce with the consumer's
offsets committed by the transaction, zombie fencing, and ListOffsets answering the last stable offset while a
transaction is open.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from txnhelp import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    by_partition,
    committed_offsets,
    create_topics,
    name,
    offset_for_time,
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

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: no committed offset


def test_commit_across_two_topics_and_partitions(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    a, b = name("txn-a"), name("txn-b")
    create_topics(bs, {a: 3, b: 2})
    tps = [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1)]
    p = txn_producer(bs, name("tid"))
    p.init_transactions(20)
    p.begin_transaction()
    items = [(t, part, f"k{i}".encode(), f"{t}/{part}/{i}".encode()) for t, part in tps for i in range(4)]
    produce_all(p, items)

    # open: the records are in the logs, read_uncommitted sees them, read_committed nothing (the LSO is 0)
    assert read_to_end(bs, tps, READ_COMMITTED) == []
    assert sorted(values(read_to_end(bs, tps, READ_UNCOMMITTED))) == sorted(v for *_, v in items)

    p.commit_transaction(20)
    wait_stable(bs, tps)  # the COMMIT markers follow the answer to EndTxn
    got = read_to_end(bs, tps, READ_COMMITTED)
    assert by_partition(got) == {(t, part): [f"{t}/{part}/{i}".encode() for i in range(4)] for t, part in tps}
    assert {(t, part): [o for t2, p2, o, _, _ in got if (t2, p2) == (t, part)] for t, part in tps} == {
        tp: [0, 1, 2, 3] for tp in tps}
    # each partition: 4 records and the COMMIT marker at offset 4; LSO = high watermark = 5
    for t, part in tps:
        assert watermarks(bs, t, part, READ_COMMITTED) == (0, 5), (t, part)
        assert watermarks(bs, t, part, READ_UNCOMMITTED) == (0, 5), (t, part)


def test_abort_is_hidden_from_read_committed_only(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic = name("txn-abort")
    create_topics(bs, {topic: 2})
    tps = [(topic, 0), (topic, 1)]
    p = txn_producer(bs, name("tid"))
    p.init_transactions(20)
    plain = plain_producer(bs)

    def txn(prefix: str, commit: bool, plain_inside: bool = False) -> None:
        p.begin_transaction()
        produce_all(p, [(topic, part, None, f"{prefix}-{part}-{i}".encode()) for part in (0, 1) for i in range(2)])
        if plain_inside:  # a non-transactional record inside the aborted range: read_committed keeps it
            produce_all(plain, [(topic, 0, None, b"plain")])
        produce_all(p, [(topic, part, None, f"{prefix}-{part}-2".encode()) for part in (0, 1)])
        if commit:
            p.commit_transaction(20)
        else:
            p.abort_transaction(20)
        wait_stable(bs, tps)

    txn("c1", commit=True)
    txn("ab", commit=False, plain_inside=True)
    txn("c2", commit=True)

    def recs(prefix: str, part: int) -> list[bytes]:
        return [f"{prefix}-{part}-{i}".encode() for i in range(3)]

    ab0 = recs("ab", 0)
    committed = by_partition(read_to_end(bs, tps, READ_COMMITTED))
    assert committed == {(topic, 0): recs("c1", 0) + [b"plain"] + recs("c2", 0),
                         (topic, 1): recs("c1", 1) + recs("c2", 1)}
    uncommitted = by_partition(read_to_end(bs, tps, READ_UNCOMMITTED))
    assert uncommitted == {(topic, 0): recs("c1", 0) + ab0[:2] + [b"plain"] + ab0[2:] + recs("c2", 0),
                           (topic, 1): recs("c1", 1) + recs("ab", 1) + recs("c2", 1)}
    # partition 0: 3 + COMMIT, 2 + plain + 1 + ABORT, 3 + COMMIT = 13 offsets; partition 1: 12
    assert watermarks(bs, topic, 0, READ_COMMITTED) == (0, 13)
    assert watermarks(bs, topic, 1, READ_COMMITTED) == (0, 12)


def test_consume_transform_produce_offsets_move_only_with_the_commit(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    src, dst, group = name("txn-src"), name("txn-dst"), name("txn-group")
    create_topics(bs, {src: 2, dst: 1})
    produce_all(plain_producer(bs), [(src, part, None, f"in-{part}-{i}".encode()) for part in (0, 1)
                                     for i in range(10)])
    src_tps = [(src, 0), (src, 1)]

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": READ_COMMITTED,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "fetch.wait.max.ms": 100})
    p = txn_producer(bs, name("tid"))
    try:
        c.subscribe([src])
        p.init_transactions(20)
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 20:
            assert time.monotonic() < deadline, f"consumed {len(got)} of 20"
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
        assignment = c.assignment()
        assert sorted((tp.topic, tp.partition) for tp in assignment) == src_tps

        def transform_and_send_offsets() -> None:
            p.begin_transaction()
            produce_all(p, [(dst, 0, None, m.value().upper()) for m in got])
            p.send_offsets_to_transaction(c.position(assignment), c.consumer_group_metadata(), 20)

        # 1: aborted: neither the output nor the offsets count
        transform_and_send_offsets()
        assert committed_offsets(bs, group, src_tps) == dict.fromkeys(src_tps, NO_OFFSET), "visible before commit"
        p.abort_transaction(20)
        wait_stable(bs, [(dst, 0)])  # the ABORT markers are written (to dst and to __consumer_offsets together)
        assert committed_offsets(bs, group, src_tps) == dict.fromkeys(src_tps, NO_OFFSET), "aborted offsets visible"
        assert read_to_end(bs, [(dst, 0)], READ_COMMITTED) == []

        # 2: committed: output and offsets together
        transform_and_send_offsets()
        assert committed_offsets(bs, group, src_tps) == dict.fromkeys(src_tps, NO_OFFSET), "visible before commit"
        p.commit_transaction(20)
        wait_for(lambda: committed_offsets(bs, group, src_tps) == dict.fromkeys(src_tps, 10), 15,
                 "the offsets to be committed with the transaction")
        wait_stable(bs, [(dst, 0)])
        # the read_committed consumer's own view (OffsetFetch with require_stable) agrees
        assert {(tp.topic, tp.partition): tp.offset for tp in c.committed(assignment, timeout=10)} == dict.fromkeys(
            src_tps, 10)
    finally:
        c.close()

    want = sorted(m.value().upper() for m in got)
    assert sorted(values(read_to_end(bs, [(dst, 0)], READ_COMMITTED))) == want, "each output exactly once"
    assert sorted(values(read_to_end(bs, [(dst, 0)], READ_UNCOMMITTED))) == sorted(want * 2)

    # a new member of the group resumes after the committed offsets
    produce_all(plain_producer(bs), [(src, part, None, f"late-{part}".encode()) for part in (0, 1)])
    c2 = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": READ_COMMITTED,
                   "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    try:
        c2.subscribe([src])
        resumed: list[Any] = []
        deadline = time.monotonic() + 30
        while len(resumed) < 2 and time.monotonic() < deadline:
            m = c2.poll(0.2)
            if m is not None and not m.error():
                resumed.append((m.partition(), m.offset(), m.value()))
        assert sorted(resumed) == [(0, 10, b"late-0"), (1, 10, b"late-1")]
    finally:
        c2.close()


FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def test_zombie_is_fenced_by_a_second_producer_with_the_same_id(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic, tid = name("txn-zombie"), name("tid")
    create_topics(bs, {topic: 1})
    zombie = txn_producer(bs, tid)
    zombie.init_transactions(20)
    zombie.begin_transaction()
    produce_all(zombie, [(topic, 0, None, b"zombie-0")])

    # the new instance's init_transactions bumps the epoch and aborts the zombie's open transaction
    fresh = txn_producer(bs, tid)
    fresh.init_transactions(20)
    fresh.begin_transaction()
    produce_all(fresh, [(topic, 0, None, b"fresh-0")])
    fresh.commit_transaction(20)
    wait_stable(bs, [(topic, 0)])

    with pytest.raises(KafkaException) as exc:
        zombie.produce(topic, value=b"zombie-1", partition=0)
        zombie.commit_transaction(20)
    err = exc.value.args[0]
    assert err.code() in FENCED and err.fatal(), err

    assert values(read_to_end(bs, [(topic, 0)], READ_COMMITTED)) == [b"fresh-0"]
    uncommitted = values(read_to_end(bs, [(topic, 0)], READ_UNCOMMITTED))
    assert uncommitted[0] == b"zombie-0" and b"fresh-0" in uncommitted, uncommitted
    # the fresh producer goes on working
    fresh.begin_transaction()
    produce_all(fresh, [(topic, 0, None, b"fresh-1")])
    fresh.commit_transaction(20)
    wait_stable(bs, [(topic, 0)])
    assert values(read_to_end(bs, [(topic, 0)], READ_COMMITTED)) == [b"fresh-0", b"fresh-1"]


def test_list_offsets_stop_at_the_last_stable_offset(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic = name("txn-lso")
    create_topics(bs, {topic: 1})
    ts0 = int(time.time() * 1000) - 60_000
    plain = plain_producer(bs)

    def plain_send(value: bytes, ts: int) -> None:
        plain.produce(topic, value=value, partition=0, timestamp=ts)
        assert plain.flush(20) == 0

    for i in range(3):  # offsets 0..2
        plain_send(f"before-{i}".encode(), ts0 + i)
    p = txn_producer(bs, name("tid"))
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(2):  # offsets 3, 4: the open transaction
        p.produce(topic, value=f"txn-{i}".encode(), partition=0, timestamp=ts0 + 10 + i)
    assert p.flush(20) == 0
    plain_send(b"after", ts0 + 20)  # offset 5, after the open transaction's first offset

    assert watermarks(bs, topic, 0, READ_COMMITTED) == (0, 3)
    assert watermarks(bs, topic, 0, READ_UNCOMMITTED) == (0, 6)
    assert offset_for_time(bs, topic, 0, ts0 + 1, READ_COMMITTED) == 1
    assert offset_for_time(bs, topic, 0, ts0 + 10, READ_COMMITTED) == -1, "an offset at or past the LSO"
    assert offset_for_time(bs, topic, 0, ts0 + 20, READ_COMMITTED) == -1
    assert offset_for_time(bs, topic, 0, ts0 + 10, READ_UNCOMMITTED) == 3
    assert values(read_to_end(bs, [(topic, 0)], READ_COMMITTED)) == [b"before-0", b"before-1", b"before-2"]
    # the LSO gauge (the LSO lag is the high watermark minus it)
    assert _gauge(txn_broker, "tidelog_last_stable_offset", topic) == 3.0
    assert _gauge(txn_broker, "tidelog_high_watermark", topic) == 6.0

    p.commit_transaction(20)
    # the COMMIT marker is offset 6: the LSO catches up with the high watermark
    wait_for(lambda: watermarks(bs, topic, 0, READ_COMMITTED) == (0, 7), 10, "the LSO to reach 7")
    assert offset_for_time(bs, topic, 0, ts0 + 10, READ_COMMITTED) == 3
    assert offset_for_time(bs, topic, 0, ts0 + 20, READ_COMMITTED) == 5
    assert values(read_to_end(bs, [(topic, 0)], READ_COMMITTED)) == [
        b"before-0", b"before-1", b"before-2", b"txn-0", b"txn-1", b"after"]
    assert _gauge(txn_broker, "tidelog_last_stable_offset", topic) == 7.0


def _gauge(broker: Any, metric: str, topic: str) -> float:
    """A partition-0 gauge of ``topic`` from the broker's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    prefix = f'{metric}{{partition="0",topic="{topic}"}} '
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert lines, f"{prefix!r} not in /metrics"
    return float(lines[0][len(prefix):])
