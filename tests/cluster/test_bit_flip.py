"""Reliability anchor 9: a bit flipped in data a follower fetched (3 brokers, a real ZooKeeper, every link through
the fault proxy of ``tests/cluster/faultproxy.py``).

The leader's proxy flips one bit in the records of a share of the Fetch responses its followers get (within
what the batch CRC-32C covers). Each follower checks every batch of an answer before appending any: the CRC
mismatch is caught, nothing of that answer is stored, the partition is fetched again from the same offset after
``replica.fetch.backoff.ms`` (no truncation, as Kafka's fetcher does with ``CorruptRecordException``), and the
fetcher counts it (``tidelog_replica_fetcher_invalid_records_total``). Under an idempotent ``acks=all`` load:
every flip is caught, the followers' files hold only batches whose CRC holds, the replicas end byte-identical,
and once a follower that received corrupt answers leads, consumers read exactly what was acknowledged.

A leader receiving a corrupt Produce batch answers CORRUPT_MESSAGE and appends nothing.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import Load, converged, create_topic, kazoo, read_all, state, until

from tidelog.errors import ErrorCode
from tidelog.records import build_batch
from tidelog.records.header import validate_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLIP_FRACTION = 0.3
MIN_FLIPS = 20
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000,
            "request.timeout.ms": 5000, "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 2000}
INVALID_METRIC = "tidelog_replica_fetcher_invalid_records_total"
CORRUPT_MESSAGE = ErrorCode.CORRUPT_MESSAGE

_until = functools.partial(until, interval=0.05)


def _metric(broker: Any, name: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def _check_files(data_dir: Path, topic: str) -> int:
    """Every batch of every ``.log`` of the replica passes its size and CRC checks; returns the batch count."""
    n = 0
    for f in sorted((Path(data_dir) / f"{topic}-0").glob("*.log")):
        data = f.read_bytes()
        pos = 0
        while pos < len(data):
            header = validate_batch(data, pos)  # raises CorruptRecordError on a CRC mismatch
            pos += header.size
            n += 1
    return n


def test_bit_flips_in_follower_fetches_are_caught_and_refetched(proxied_cluster: Any) -> None:
    c = proxied_cluster
    c.heal()
    topic = f"flip-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, assignment=[[1, 2, 3]], timeout=90)
    leader_proxy = c.kafka[1]
    leader_proxy.corrupted.clear()
    before = {i: _metric(b, INVALID_METRIC) for i, b in c.brokers.items()}
    load = Load(c.bootstrap, topic, 1, PRODUCER, flush_timeout=120, progress_timeout=90)
    try:
        load.wait_progress(100)
        leader_proxy.corrupt_fetches(FLIP_FRACTION, "tidelog-replica-", seed=9)
        _until(f"{MIN_FLIPS} corrupted follower fetch answers", lambda: len(leader_proxy.corrupted) >= MIN_FLIPS,
               timeout=120)
        leader_proxy.corrupt_fetches(0.0)
        load.wait_progress(100)  # acknowledged again: the followers caught up past every corrupted answer
    finally:
        c.heal()
        load.stop()
    flips = list(leader_proxy.corrupted)
    followers = {cid for cid, _t, _p, _o in flips}
    print(f"{len(flips)} corrupted answers to {sorted(followers)}; {len(load.acked)} acked")
    assert {cid for cid in followers} <= {"tidelog-replica-2", "tidelog-replica-3"}
    # every flip was caught by the follower's CRC check and counted, and the follower said so
    caught = {i: _metric(b, INVALID_METRIC) - before[i] for i, b in c.brokers.items()}
    assert sum(caught.values()) == len(flips), (caught, len(flips))
    assert caught[1] == 0
    for i in (2, 3):
        lines = c.brokers[i].log_text().count(f"found invalid records during fetch; fetching them again topic={topic}")
        assert lines == caught[i], (i, lines, caught[i])
        assert f"truncating topic={topic}" not in c.brokers[i].log_text(), "a corrupt answer made a follower truncate"
    # nothing corrupt stored: byte-identical replicas, every batch's CRC holds
    converged(c, topic, 1, isr_timeout=90)
    counts = {i: _check_files(b.data_dir, topic) for i, b in c.brokers.items()}
    assert len(set(counts.values())) == 1 and counts[1] > 0, counts
    # nothing corrupt served: a follower that got corrupt answers leads, consumers read exactly what was acked
    with kazoo(c.zk.connect) as kz:
        s0 = state(kz, topic)
        c.brokers[1].kill()
        try:
            s1 = _until("a follower leading", lambda: (q if (q := state(kz, topic)).leader in (2, 3)
                                                      and q.leader_epoch > s0.leader_epoch else None), timeout=60)
            assert f"tidelog-replica-{s1.leader}" in followers or len(followers) == 1
            load.check(read_all(c.bootstrap, topic, 1, at_least=load.acked_ends()), exact=True)
        finally:
            c.brokers[1].start()
            _until("broker 1 back in the ISR", lambda: 1 in state(kz, topic).isr, timeout=90)


def test_corrupt_produce_batch_answered_corrupt_message(proxied_cluster: Any) -> None:
    """A Produce whose batch fails its CRC is refused CORRUPT_MESSAGE by the leader; nothing is appended, on the
    leader or its followers."""
    from helpers import PRODUCE, RawClient, log_end_offset, produce_body

    c = proxied_cluster
    c.heal()
    topic = f"flipp-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, assignment=[[1, 2, 3]], timeout=90)
    good = build_batch([(None, b"good")])
    bad = bytearray(build_batch([(None, b"will be flipped")]))
    bad[-3] ^= 0x10  # in the record's value: covered by the CRC
    with RawClient(c.direct(1), timeout=20) as raw:
        ok = raw.request(PRODUCE, 9, produce_body(topic, 0, good, acks=-1, timeout_ms=10000))
        assert ok["responses"][0]["partition_responses"][0]["error_code"] == 0
        resp = raw.request(PRODUCE, 9, produce_body(topic, 0, bytes(bad), acks=-1, timeout_ms=10000))
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == CORRUPT_MESSAGE, resp
    assert log_end_offset(c.direct(1), topic) == 1
    converged(c, topic, 1, isr_timeout=60)
    for b in c.brokers.values():
        assert _check_files(b.data_dir, topic) == 1
    assert [v for _o, v in read_all(c.bootstrap, topic, 1)[0]] == [b"good"]
