"""Network faults through a fault-injecting TCP proxy (issue 7; reliability anchors section 5, scenarios 11 and 4).

No root and no iptables: every link goes through ``tests/cluster/faultproxy.py`` (see ``ProxiedCluster`` and
``proxied_broker`` in conftest.py). Brokers advertise their proxy's port, so clients and followers connect
through it; each broker reaches ZooKeeper through its own proxy.

* Scenario 11: the proxy closes the connection instead of forwarding ~10% of the Produce responses (the broker
  has the batch; the client only sees a dead connection and retries it). An idempotent ``acks=all``
  confluent-kafka producer must end with every value exactly once, in send order, per partition -- against a
  single node and against the 3-broker cluster.
* Scenario 4: the leader is isolated (ZooKeeper, every inbound link, and its outgoing follower fetches on the
  other brokers' proxies) for ``ISOLATION_S`` under ``acks=all`` idempotent load, then healed. The others
  elect a new leader when its ZooKeeper session expires; a client on the isolated side (straight to the old
  leader's own port) gets no acknowledgement for ``acks=-1`` produces; after the heal the old leader rejoins
  the ISR, 0 acknowledged records are lost, nothing is duplicated, and the replicas are byte-identical up to
  the high watermark.
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from support import Ledger, Load, converged, create_topic, kazoo, read_all, state, until

from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
DROP_FRACTION = 0.10
MESSAGES = 3000
ISOLATION_S = 30.0
PRODUCE = ApiKey.PRODUCE
NOT_ENOUGH_REPLICAS = ErrorCode.NOT_ENOUGH_REPLICAS
PRODUCER = {"acks": "all", "enable.idempotence": True, "max.in.flight.requests.per.connection": 5, "linger.ms": 2,
            "batch.num.messages": 20, "message.timeout.ms": 120000, "request.timeout.ms": 10000,
            "retry.backoff.ms": 50, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "log_level": 3}
# the producer under load while brokers are cut off: shorter requests, fresher metadata, longer delivery timeout
LOAD_PRODUCER = {**PRODUCER, "request.timeout.ms": 5000, "socket.timeout.ms": 6000,
                 "topic.metadata.refresh.interval.ms": 2000, "message.timeout.ms": 180000}

_until = functools.partial(until, interval=0.1)


def _load(bootstrap: str, topic: str) -> Load:
    """An idempotent acks=all producer writing unique values round robin over the partitions (~1000/s at most);
    delivery errors are reported, not failed on: the checks are on what was acknowledged."""
    return Load(bootstrap, topic, PARTITIONS, LOAD_PRODUCER, flush_timeout=180, progress_timeout=90, errors_ok=True)


# -- scenario 11: dropped Produce responses ----------------------------------------------------------------------


def _produce_through_drops(bootstrap: str, topic: str, proxies: list[Any]) -> Ledger:
    for px in proxies:
        px.drop_responses(DROP_FRACTION, api_keys=(PRODUCE,), seed=11)
    ledger = Ledger(PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    try:
        for i in range(MESSAGES):
            ledger.produce(p, topic, i)
            if i % 20 == 19:
                p.poll(0.002)  # a little pacing: many small requests, several in flight
        left = p.flush(180)
    finally:
        for px in proxies:
            px.drop_responses(0.0)
    dropped = sum(px.dropped[PRODUCE] for px in proxies)
    answered = sum(px.responses[PRODUCE] for px in proxies)
    print(f"produce responses forwarded {answered}, dropped {dropped}, errors {len(ledger.errors)}")
    assert left == 0, f"{left} records never delivered"
    assert ledger.errors == [], f"delivery errors: {ledger.errors[:5]}"
    assert len(ledger.acked) == MESSAGES
    # the fault really happened, at about the asked rate (a duplicate answered from the retry is forwarded too)
    assert dropped >= 10, f"only {dropped} produce responses dropped of {answered + dropped}"
    assert 0.03 <= dropped / (answered + dropped) <= 0.25
    return ledger


def test_idempotent_producer_dropped_responses_single_node(proxied_broker: Any) -> None:
    _broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = f"drop1-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS, 1, timeout=90)
    ledger = _produce_through_drops(bootstrap, topic, [proxy])
    ledger.check(read_all(bootstrap, topic, PARTITIONS), exact=True)


def test_idempotent_producer_dropped_responses_cluster(proxied_cluster: Any) -> None:
    c = proxied_cluster
    c.heal()
    topic = f"drop3-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, PARTITIONS, 3, timeout=90)
    ledger = _produce_through_drops(c.bootstrap, topic, list(c.kafka.values()))
    ledger.check(read_all(c.bootstrap, topic, PARTITIONS), exact=True)
    converged(c, topic, PARTITIONS, isr_timeout=120)


# -- scenario 4: an isolated leader ------------------------------------------------------------------------------


def _isolated_produce(port: int, topic: str, p: int, tag: str) -> int:
    """An ``acks=-1`` Produce straight to the isolated broker's own port (a client on its side of the
    partition); returns the partition error code."""
    from helpers import PRODUCE as API_PRODUCE
    from helpers import RawClient, produce_body

    from tidelog.records import build_batch

    with RawClient(port, timeout=20) as raw:
        body = produce_body(topic, p, build_batch([(None, tag.encode())]), acks=-1, timeout_ms=3000)
        resp = raw.request(API_PRODUCE, 9, body)
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def _leader_isr(port: int, topic: str, p: int) -> list[int]:
    """The ISR of ``topic-p`` as the broker at ``port`` itself answers it in Metadata (its own view: it applies
    an ISR change after ZooKeeper accepted it, so for a moment ZooKeeper's state is ahead of it)."""
    from helpers import METADATA, RawClient

    with RawClient(port, timeout=20) as raw:
        md = raw.request(METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
    parts = {x["partition_index"]: x for x in md["topics"][0]["partitions"]}
    return list(parts[p]["isr_nodes"]) if p in parts else []


def test_isolated_leader_then_heal(proxied_cluster: Any) -> None:
    c = proxied_cluster
    c.heal()
    topic = f"iso-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, PARTITIONS, 3, timeout=90)
    with kazoo(c.zk.connect) as kz:  # the test's own view of ZooKeeper: never through a proxy
        load = _load(c.bootstrap, topic)
        isolated_writes: list[tuple[float, int]] = []
        try:
            load.wait_progress()
            before = state(kz, topic, 0)
            old = before.leader
            ours = [p for p in range(PARTITIONS) if state(kz, topic, p).leader == old]
            t0 = time.monotonic()
            c.isolate(old)
            _until("a new leader elected without the isolated one", lambda: all(
                state(kz, topic, p).leader not in (old, -1) for p in ours), timeout=60)
            elected_s = time.monotonic() - t0
            assert state(kz, topic, 0).leader_epoch > before.leader_epoch
            load.wait_progress(timeout=60)  # the others go on acknowledging with the new leader
            # the old leader is cut off from ZooKeeper and from its followers: acks=-1 must never be answered OK
            n = 0
            while time.monotonic() - t0 < ISOLATION_S:
                code = _isolated_produce(c.direct(old), topic, ours[0], f"isolated-{n}")
                isolated_writes.append((time.monotonic() - t0, code))
                n += 1
            assert all(code != 0 for _t, code in isolated_writes), f"the isolated leader acknowledged: {isolated_writes}"
            acked_during = load.count()
            t_heal = time.monotonic()
            c.heal()
            _until(f"broker {old} back in every ISR of {topic}", lambda: all(
                old in state(kz, topic, p).isr for p in range(PARTITIONS)), timeout=120)
            rejoined_s = time.monotonic() - t_heal
            load.wait_progress()
        finally:
            c.heal()
            ledger = load.stop()
    print(f"isolated broker {old} (led {ours}); new leader after {elected_s:.1f}s; isolated produces "
          f"{isolated_writes}; acked {acked_during} by the heal, {len(ledger.acked)} in all, "
          f"{len(ledger.errors)} delivery errors; rejoined the ISR {rejoined_s:.1f}s after the heal")
    records = read_all(c.bootstrap, topic, PARTITIONS)
    ledger.check(records, exact=False)
    values = {v for recs in records.values() for _o, v in recs}
    assert not any(v.startswith(b"isolated-") for v in values), "a write the isolated leader took survived"
    converged(c, topic, PARTITIONS, isr_timeout=120)


def test_leader_cut_from_followers_keeps_zookeeper(proxied_cluster: Any) -> None:
    """Only the leader's data links are cut (clients and followers; ZooKeeper still reaches it): its session
    lives, so nobody else is elected. Its followers leave the ISR after ``replica.lag.time.max.ms`` and
    ``acks=-1`` produces on its side of the cut are refused NOT_ENOUGH_REPLICAS (``min.insync.replicas=2``), never
    acknowledged. After the heal the followers catch up and rejoin; 0 acknowledged records lost."""
    c = proxied_cluster
    c.heal()
    topic = f"cut-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, PARTITIONS, 3, timeout=90)
    with kazoo(c.zk.connect) as kz:
        load = _load(c.bootstrap, topic)
        codes: list[int] = []
        try:
            load.wait_progress()
            before = state(kz, topic, 0)
            old = before.leader
            t0 = time.monotonic()
            c.isolate(old, zookeeper=False)
            _until(f"the ISR of {topic}-0 shrunk to its leader {old}", lambda: state(kz, topic, 0).isr == (old,),
                   timeout=90)
            shrunk_s = time.monotonic() - t0
            # a produce checked before the leader applied the shrink is appended, then answered
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's answer too): wait for the leader's own view first
            _until(f"leader {old} applying the shrunk ISR", lambda: _leader_isr(c.direct(old), topic, 0) == [old],
                   timeout=30)
            after = state(kz, topic, 0)
            assert (after.leader, after.leader_epoch) == (old, before.leader_epoch), "no election while the session lives"
            for n in range(3):
                codes.append(_isolated_produce(c.direct(old), topic, 0, f"cut-{n}"))
            assert codes == [NOT_ENOUGH_REPLICAS] * 3, codes
            t_heal = time.monotonic()
            c.heal()
            _until(f"every replica back in the ISR of {topic}", lambda: all(
                len(state(kz, topic, p).isr) == 3 for p in range(PARTITIONS)), timeout=120)
            rejoined_s = time.monotonic() - t_heal
            load.wait_progress()
        finally:
            c.heal()
            ledger = load.stop()
    print(f"cut leader {old}: ISR shrunk after {shrunk_s:.1f}s, isolated-side produces {codes}, followers back "
          f"{rejoined_s:.1f}s after the heal; {len(ledger.acked)} acked, {len(ledger.errors)} delivery errors")
    ledger.check(read_all(c.bootstrap, topic, PARTITIONS), exact=False)
    converged(c, topic, PARTITIONS, isr_timeout=120)
