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

import itertools
import struct
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
DROP_FRACTION = 0.10
MESSAGES = 3000
ISOLATION_S = 30.0
PRODUCE = 0
NOT_ENOUGH_REPLICAS = 19


def _until(what: str, pred: Callable[[], Any], timeout: float = 90.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = pred()
        except Exception as exc:  # brokers / ZooKeeper coming and going
            result, last = None, exc
        if result:
            return result
        time.sleep(interval)  # polling interval of the condition
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last!r})")


def _create(bootstrap: str, topic: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, rf)])[topic].result(30)

    def led() -> bool:
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        return t is not None and t.error is None and len(t.partitions) == PARTITIONS and all(
            q.leader >= 0 and len(q.isrs) == rf for q in t.partitions.values())

    _until(f"{topic} led with a full ISR", led)


def _producer(bootstrap: str, **extra: Any) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5, "linger.ms": 2, "batch.num.messages": 20,
            "message.timeout.ms": 120000, "request.timeout.ms": 10000, "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "log_level": 3}
    conf.update(extra)
    return Producer(conf)


def _read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition up to the high watermark, with its offset, in consumption order."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"faults-{uuid.uuid4().hex[:6]}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        for p in range(PARTITIONS):
            _low, end = cons.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 120
            while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
                m = cons.poll(0.2)
                if m is None or m.error():
                    continue
                got.append((m.offset(), m.value()))
            assert not got or got[-1][0] == end - 1, f"partition {p}: read up to {got[-1][0]}, HW {end}"
            assert end == 0 or got, f"partition {p}: nothing read below HW {end}"
            out[p] = got
            cons.unassign()
    finally:
        cons.close()
    return out


class Ledger:
    """What an idempotent producer was told: value -> (partition, offset) of every acknowledged record, the send
    order per partition, and every delivery error."""

    def __init__(self) -> None:
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[Any] = []
        self.lock = threading.Lock()

    def callback(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err:
                self.errors.append(err)
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())

    def produce(self, p: Producer, topic: str, i: int) -> None:
        part = i % PARTITIONS
        value = f"v{i:07d}".encode()
        self.sent[part].append(value)
        p.produce(topic, value, partition=part, on_delivery=self.callback)

    def check(self, records: dict[int, list[tuple[int, bytes]]], *, exact: bool) -> None:
        """0 duplicates, 0 out of order, 0 acked records lost, each acked offset holds its value; with ``exact``,
        each partition holds exactly the values sent to it, in send order."""
        position: dict[bytes, tuple[int, int]] = {}
        dups: list[bytes] = []
        for p, recs in records.items():
            offsets = [o for o, _v in recs]
            assert all(a < b for a, b in itertools.pairwise(offsets)), f"partition {p}: offsets not increasing"
            for o, v in recs:
                if v in position:
                    dups.append(v)
                position[v] = (p, o)
            rank = {v: k for k, v in enumerate(self.sent[p])}
            ours = [rank[v] for _o, v in recs if v in rank]
            disorder = [(a, b) for a, b in itertools.pairwise(ours) if a >= b]
            assert disorder == [], f"partition {p}: {len(disorder)} records out of send order, e.g. {disorder[:5]}"
            if exact:
                assert [v for _o, v in recs] == self.sent[p], f"partition {p}: not exactly the values sent"
        lost = [v for v in self.acked if v not in position]
        moved = [(v, at, position[v]) for v, at in self.acked.items() if v in position and position[v] != at]
        assert dups == [], f"{len(dups)} duplicates, e.g. {dups[:5]}"
        assert lost == [], f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
        assert moved == [], f"{len(moved)} acked offsets hold other data, e.g. {moved[:5]}"


# -- scenario 11: dropped Produce responses ----------------------------------------------------------------------


def _produce_through_drops(bootstrap: str, topic: str, proxies: list[Any]) -> Ledger:
    for px in proxies:
        px.drop_responses(DROP_FRACTION, api_keys=(PRODUCE,), seed=11)
    ledger = Ledger()
    p = _producer(bootstrap)
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
    _create(bootstrap, topic, 1)
    ledger = _produce_through_drops(bootstrap, topic, [proxy])
    ledger.check(_read_all(bootstrap, topic), exact=True)


def test_idempotent_producer_dropped_responses_cluster(proxied_cluster: Any) -> None:
    c = proxied_cluster
    c.heal()
    topic = f"drop3-{uuid.uuid4().hex[:8]}"
    _create(c.bootstrap, topic, 3)
    ledger = _produce_through_drops(c.bootstrap, topic, list(c.kafka.values()))
    ledger.check(_read_all(c.bootstrap, topic), exact=True)
    _converged(c, topic)


# -- scenario 4: an isolated leader ------------------------------------------------------------------------------


def _state(kz: Any, topic: str, p: int) -> Any:
    from tidelog.cluster import zkdata as zd

    data, stat = kz.get(zd.state_path(topic, p))
    return zd.decode_state(data, stat.version)


def _log_upto(data_dir: Path, topic: str, p: int, hw: int) -> bytes:
    """One replica's ``.log`` bytes (segments concatenated), cut before the first batch at or past ``hw``."""
    d = Path(data_dir) / f"{topic}-{p}"
    data = b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
    pos = 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base >= hw:
            break
        pos += 12 + length
    return data[:pos]


def _converged(c: Any, topic: str) -> None:
    """Every replica in every ISR, then identical ``.log`` bytes up to the HW on all three brokers."""
    admin = c.admin()

    def full_isr() -> bool:
        t = admin.list_topics(topic, timeout=10).topics[topic]
        return all(len(q.isrs) == 3 for q in t.partitions.values())

    _until("all replicas in every ISR", full_isr, timeout=120)
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "faults-hw"})
    try:
        hws = {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        cons.close()
    for p, hw in hws.items():
        assert hw > 0

        def same(p: int = p, hw: int = hw) -> bool:
            copies = {_log_upto(b.data_dir, topic, p, hw) for b in c.brokers.values()}
            return len(copies) == 1 and len(next(iter(copies))) > 0

        _until(f"identical replicas of {topic}-{p} up to HW {hw}", same, timeout=60)


class Load:
    """An idempotent acks=all producer writing unique values round robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.ledger = Ledger()
        self.bootstrap, self.topic = bootstrap, topic
        self.left = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        p = _producer(self.bootstrap, **{"request.timeout.ms": 5000, "socket.timeout.ms": 6000,
                                         "topic.metadata.refresh.interval.ms": 2000, "message.timeout.ms": 180000})
        i = 0
        while not self._stop.is_set():
            for _ in range(10):
                self.ledger.produce(p, self.topic, i)
                i += 1
            p.poll(0.01)  # ~1000 records/s at most: load without starving the brokers of the 2 cores
        self.left = p.flush(180)

    def acked(self) -> int:
        with self.ledger.lock:
            return len(self.ledger.acked)

    def wait_progress(self, more: int = 200, timeout: float = 90.0) -> None:
        start = self.acked()
        _until(f"{more} more acknowledged records", lambda: self.acked() >= start + more, timeout=timeout)

    def finish(self) -> Ledger:
        self._stop.set()
        self._thread.join(200)
        assert not self._thread.is_alive(), "producer did not finish"
        assert self.left == 0, f"{self.left} records never delivered"
        return self.ledger


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


def test_isolated_leader_then_heal(proxied_cluster: Any) -> None:
    from kazoo.client import KazooClient

    c = proxied_cluster
    c.heal()
    topic = f"iso-{uuid.uuid4().hex[:8]}"
    _create(c.bootstrap, topic, 3)
    kz = KazooClient(hosts=c.zk.connect)  # the test's own view of ZooKeeper: never through a proxy
    kz.start(timeout=30)
    load = Load(c.bootstrap, topic)
    isolated_writes: list[tuple[float, int]] = []
    try:
        load.wait_progress()
        before = _state(kz, topic, 0)
        old = before.leader
        ours = [p for p in range(PARTITIONS) if _state(kz, topic, p).leader == old]
        t0 = time.monotonic()
        c.isolate(old)
        _until("a new leader elected without the isolated one", lambda: all(
            _state(kz, topic, p).leader not in (old, -1) for p in ours), timeout=60)
        elected_s = time.monotonic() - t0
        assert _state(kz, topic, 0).leader_epoch > before.leader_epoch
        load.wait_progress(timeout=60)  # the others go on acknowledging with the new leader
        # the old leader is cut off from ZooKeeper and from its followers: acks=-1 must never be answered OK
        n = 0
        while time.monotonic() - t0 < ISOLATION_S:
            code = _isolated_produce(c.direct(old), topic, ours[0], f"isolated-{n}")
            isolated_writes.append((time.monotonic() - t0, code))
            n += 1
        assert all(code != 0 for _t, code in isolated_writes), f"the isolated leader acknowledged: {isolated_writes}"
        acked_during = load.acked()
        t_heal = time.monotonic()
        c.heal()
        _until(f"broker {old} back in every ISR of {topic}", lambda: all(
            old in _state(kz, topic, p).isr for p in range(PARTITIONS)), timeout=120)
        rejoined_s = time.monotonic() - t_heal
        load.wait_progress()
    finally:
        c.heal()
        ledger = load.finish()
        kz.stop()
        kz.close()
    print(f"isolated broker {old} (led {ours}); new leader after {elected_s:.1f}s; isolated produces "
          f"{isolated_writes}; acked {acked_during} by the heal, {len(ledger.acked)} in all, "
          f"{len(ledger.errors)} delivery errors; rejoined the ISR {rejoined_s:.1f}s after the heal")
    records = _read_all(c.bootstrap, topic)
    ledger.check(records, exact=False)
    values = {v for recs in records.values() for _o, v in recs}
    assert not any(v.startswith(b"isolated-") for v in values), "a write the isolated leader took survived"
    _converged(c, topic)


def test_leader_cut_from_followers_keeps_zookeeper(proxied_cluster: Any) -> None:
    """Only the leader's data links are cut (clients and followers; ZooKeeper still reaches it): its session
    lives, so nobody else is elected. Its followers leave the ISR after ``replica.lag.time.max.ms`` and
    ``acks=-1`` produces on its side of the cut are refused NOT_ENOUGH_REPLICAS (``min.insync.replicas=2``), never
    acknowledged. After the heal the followers catch up and rejoin; 0 acknowledged records lost."""
    from kazoo.client import KazooClient

    c = proxied_cluster
    c.heal()
    topic = f"cut-{uuid.uuid4().hex[:8]}"
    _create(c.bootstrap, topic, 3)
    kz = KazooClient(hosts=c.zk.connect)
    kz.start(timeout=30)
    load = Load(c.bootstrap, topic)
    codes: list[int] = []
    try:
        load.wait_progress()
        before = _state(kz, topic, 0)
        old = before.leader
        t0 = time.monotonic()
        c.isolate(old, zookeeper=False)
        _until(f"the ISR of {topic}-0 shrunk to its leader {old}", lambda: _state(kz, topic, 0).isr == (old,),
               timeout=90)
        shrunk_s = time.monotonic() - t0
        after = _state(kz, topic, 0)
        assert (after.leader, after.leader_epoch) == (old, before.leader_epoch), "no election while the session lives"
        for n in range(3):
            codes.append(_isolated_produce(c.direct(old), topic, 0, f"cut-{n}"))
        assert codes == [NOT_ENOUGH_REPLICAS] * 3, codes
        t_heal = time.monotonic()
        c.heal()
        _until(f"every replica back in the ISR of {topic}", lambda: all(
            len(_state(kz, topic, p).isr) == 3 for p in range(PARTITIONS)), timeout=120)
        rejoined_s = time.monotonic() - t_heal
        load.wait_progress()
    finally:
        c.heal()
        ledger = load.finish()
        kz.stop()
        kz.close()
    print(f"cut leader {old}: ISR shrunk after {shrunk_s:.1f}s, isolated-side produces {codes}, followers back "
          f"{rejoined_s:.1f}s after the heal; {len(ledger.acked)} acked, {len(ledger.errors)} delivery errors")
    ledger.check(_read_all(c.bootstrap, topic), exact=False)
    _converged(c, topic)
