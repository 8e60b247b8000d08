"""Chaos: repeated kill -9 of partition leaders under acks=all idempotent load (issue 7).

3 brokers + 1 ZooKeeper on loopback, topic RF=3, ``min.insync.replicas=2``, an idempotent ``acks=all``
confluent-kafka producer writing unique values without pause, a consumer group consuming (and committing) all
along. A checker in the style of Jepsen's Kafka checker records every acknowledged record (value -> partition,
offset) and at the end reads everything back:

* 0 acknowledged records lost, 0 duplicates;
* offsets are never reused for different data: each acked offset holds the acked value;
* offsets per partition strictly increase in consumption;
* the replicas' ``.log`` bytes are identical up to the high watermark on all three brokers, and so are their
  leader-epoch checkpoints (batches travel unchanged from leader to follower).

The kills are driven from the partition state znodes in ZooKeeper (leader, epoch, ISR), read with kazoo: the
test waits for conditions (a new leader epoch, the killed broker back in every ISR), never for fixed times.
The session timeout is 2 s (ZooKeeper's minimum here is 2 ticks = 1 s) so that 20+ failovers fit in ~3 min.
Reliability anchor 7 (100 fast double failovers, ``test_fast_double_failovers_converge``) could not afford 200
kills: most of its rounds move the leadership the way an operator does (a replica reorder and a preferred
election through ZooKeeper's admin paths, both decided by the controller), and every 25th round is a double kill
with cut tails; it takes about 90 s.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from support import (
    Load,
    all_up,
    converged,
    create_topic,
    kazoo,
    log_bytes,
    read_all,
    state,
    topic_assignment,
    until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
KILLS = 20
DOUBLE_FAILOVERS = 100
CRASH_EVERY = 25  # every 25th double failover kills both leaders and cuts their unflushed tails; the others move
BOUNCES = 10
SESSION_TIMEOUT_MS = 2000
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 180000,
            "retry.backoff.ms": 100, "request.timeout.ms": 5000, "socket.timeout.ms": 6000,
            "topic.metadata.refresh.interval.ms": 2000}

_until = functools.partial(until, interval=0.05)  # failovers take a second or two: poll often


@pytest.fixture(scope="module")
def chaos(cluster_with: Any) -> Any:
    c = cluster_with({"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "replica.fetch.backoff.ms": "100",
                      "replica.fetch.wait.max.ms": "200", "offsets.topic.num.partitions": "3"})
    with kazoo(c.zk.connect) as zk:
        c.kz = zk
        yield c


def _create(c: Any, topic: str) -> None:
    create_topic(c.bootstrap, topic, PARTITIONS, 3)
    _until(f"{topic} led with a full ISR in ZooKeeper", lambda: all(
        (s := state(c.kz, topic, p)).leader > 0 and len(s.isr) == 3 for p in range(PARTITIONS)))


def _load(c: Any, topic: str) -> Load:
    """An idempotent acks=all producer writing unique values round robin over the partitions (~1000/s at most)."""
    return Load(c.bootstrap, topic, PARTITIONS, PRODUCER, flush_timeout=180, progress_timeout=120)


class Group:
    """A consumer group member (confluent-kafka) consuming and committing while the brokers are killed."""

    def __init__(self, c: Any, topic: str) -> None:
        self.c, self.topic = c, topic
        self.seen: dict[bytes, int] = {}
        self.records = 0
        self.errors: list[Any] = []
        self.assignments: list[tuple[float, list[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-group", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cons = Consumer({"bootstrap.servers": self.c.bootstrap, "group.id": f"chaos-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 10000,
                         "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100,
                         "topic.metadata.refresh.interval.ms": 2000, "error_cb": self.errors.append})
        cons.subscribe([self.topic], on_assign=self._assigned)
        n = 0
        try:
            while not self._stop.is_set():
                m = cons.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(m.error())
                    continue
                self.seen[m.value()] = self.seen.get(m.value(), 0) + 1
                self.records += 1
                n += 1
                if n % 200 == 0:
                    try:
                        cons.commit(asynchronous=True)
                    except Exception as exc:  # no coordinator for a moment: the next commit covers it
                        self.errors.append(exc)
        finally:
            cons.close()

    def _assigned(self, _consumer: Any, partitions: list[Any]) -> None:
        self.assignments.append((round(time.monotonic(), 1), sorted(p.partition for p in partitions)))

    def wait_progress(self, consumed: int, what: str) -> None:
        """Until the member consumed more than ``consumed`` records; a timeout names its last errors and
        assignments (the member's own view, to tell a stuck coordinator from a stuck fetch)."""
        try:
            _until(what, lambda: self.records > consumed)
        except AssertionError as exc:
            logs = {i: [ln[:300] for ln in Path(b.log_path).read_text(errors="replace").splitlines()
                        if " WARNING " in ln or " ERROR " in ln or "group" in ln][-15:]
                    for i, b in self.c.brokers.items() if Path(b.log_path).exists()}
            raise AssertionError(f"{exc}; now {round(time.monotonic(), 1)}, records {self.records}, "
                                 f"assignments {self.assignments[-4:]}, errors {self.errors[-8:]}, "
                                 f"broker logs (warnings and group lines) {logs}") from None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _cut_tail(data_dir: Path, topic: str, p: int, nbytes: int) -> None:
    """Cut ``nbytes`` off the end of a stopped replica's newest non-empty ``.log``."""
    import os

    logs = [f for f in sorted((Path(data_dir) / f"{topic}-{p}").glob("*.log")) if f.stat().st_size > 0]
    if logs:
        f = logs[-1]
        os.truncate(f, max(0, f.stat().st_size - nbytes))


def _back_in_isr(c: Any, topic: str, broker: int) -> None:
    _until(f"broker {broker} back in every ISR of {topic}",
           lambda: all(broker in state(c.kz, topic, p).isr for p in range(PARTITIONS)), timeout=120)


def test_kill_leader_20_times_under_load(chaos: Any) -> None:
    topic = f"chaos-{uuid.uuid4().hex[:8]}"
    _create(chaos, topic)
    load = _load(chaos, topic)
    group = Group(chaos, topic)
    started = time.monotonic()
    try:
        load.wait_progress(200)
        _until("the group consuming", lambda: group.records > 0)
        for k in range(KILLS):
            p = k % PARTITIONS
            load.wait_progress(30, partition=p)
            before = state(chaos.kz, topic, p)
            victim = before.leader
            consumed = group.records
            chaos.brokers[victim].kill()
            after = _until(f"kill {k + 1}: a new leader of {topic}-{p}", lambda p=p, victim=victim, e=before.leader_epoch: (
                s if (s := state(chaos.kz, topic, p)).leader not in (victim, -1) and s.leader_epoch > e else None))
            assert victim not in after.isr
            chaos.brokers[victim].start()
            _back_in_isr(chaos, topic, victim)
            # the group keeps going through every failover
            group.wait_progress(consumed, f"kill {k + 1}: consumer group progress")
        load.wait_progress(100)
    finally:
        load.stop()
    elapsed = time.monotonic() - started
    truncations = sum(b.log_text().count(f"truncating topic={topic}") for b in chaos.brokers.values())
    print(f"\n{KILLS} leader kills in {elapsed:.0f}s; {len(load.acked)} acked records; {truncations} truncations")
    load.check(read_all(chaos.bootstrap, topic, PARTITIONS), exact=False)
    try:
        _until("the consumer group has seen every acked record", lambda: all(v in group.seen for v in load.acked),
               timeout=120)
    finally:
        group.stop()
    converged(chaos, topic, PARTITIONS, isr_timeout=90)


class Monitor:
    """A consumer (no group) reading every partition from the beginning all along, as Jepsen's pollers: every
    (partition, offset) it is served must keep its value for ever (no offset below a high watermark is ever
    reused), and per partition the offsets it is served strictly increase (a consumer never has to go back)."""

    def __init__(self, c: Any, topic: str) -> None:
        self.c, self.topic = c, topic
        self.seen: dict[tuple[int, int], bytes] = {}
        self.last: dict[int, int] = {}
        self.regressions: list[tuple[int, int, int]] = []
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        cons = Consumer({"bootstrap.servers": self.c.bootstrap, "group.id": f"monitor-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 100,
                         "topic.metadata.refresh.interval.ms": 2000, "enable.partition.eof": False})
        cons.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        try:
            while not self._stop.is_set():
                m = cons.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(m.error())
                    continue
                p, o = m.partition(), m.offset()
                if o <= self.last.get(p, -1):
                    self.regressions.append((p, self.last[p], o))
                self.last[p] = o
                if self.seen.setdefault((p, o), m.value()) != m.value():
                    self.regressions.append((p, o, -1))
        finally:
            cons.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class _Not(tuple):
    """A condition not met yet, carrying what was seen (shown if the wait times out)."""

    def __new__(cls, *seen: Any) -> _Not:
        return super().__new__(cls, seen)

    def __bool__(self) -> bool:
        return False


def _leader_first(c: Any, topic: str, p: int, leader: int) -> None:
    """A controlled leader move, as an operator makes it (Kafka's ZooKeeper admin paths, what
    ``tidelog cluster reassign`` and ``elect-leaders`` write): reorder the replicas so that ``leader`` comes first
    (same replica set: nothing is copied), then a preferred replica election. The controller takes both
    decisions; returns when ZooKeeper names ``leader`` (a new leader epoch)."""
    from kazoo.exceptions import NodeExistsError

    from tidelog.cluster import zkdata as zd

    kz = c.kz
    replicas = topic_assignment(kz, topic).partitions[p]
    target = [leader, *[b for b in replicas if b != leader]]
    if replicas != target:
        kz.create(zd.REASSIGN_PARTITIONS, zd.encode_reassignment({(topic, p): target}), makepath=True)
        _until("the replicas reordered", lambda: kz.exists(zd.REASSIGN_PARTITIONS) is None and (
            a := topic_assignment(kz, topic)).partitions[p] == target and not a.reassigning(p), timeout=30,
            interval=0.01)
    while True:
        try:
            kz.create(zd.PREFERRED_REPLICA_ELECTION, zd.encode_preferred_election([(topic, p)]), makepath=True)
            break
        except NodeExistsError:  # the previous request is still being processed
            _until("the previous election done", lambda: kz.exists(zd.PREFERRED_REPLICA_ELECTION) is None,
                   timeout=30, interval=0.01)
    _until(f"broker {leader} leading {topic}-{p}", lambda: (
        True if (q := state(kz, topic, p)).leader == leader else _Not(q, topic_assignment(kz, topic).partitions[p])),
        timeout=30, interval=0.01)


def _crash_double_failover(c: Any, topic: str, p: int, k: int) -> None:
    """kill -9 the leader, kill -9 the next as soon as ZooKeeper names it, cut a different unflushed tail off
    each (as if both had lost the end of their page cache), restart both and wait until both are back in the
    ISR."""
    s0 = state(c.kz, topic, p)
    first = s0.leader
    c.brokers[first].kill()
    s1 = _until(f"round {k + 1}: a second leader", lambda: (
        s if (s := state(c.kz, topic, p)).leader not in (first, -1) and s.leader_epoch > s0.leader_epoch else None))
    second = s1.leader
    c.brokers[second].kill()
    _until(f"round {k + 1}: a third leader", lambda: (
        (s := state(c.kz, topic, p)).leader not in (first, second, -1) and s.leader_epoch > s1.leader_epoch))
    # recovery then drops the torn batch and what follows
    for victim, cut in ((first, 1 + 997 * (k + 1) % 4000), (second, 1 + 1409 * (k + 3) % 6000)):
        _cut_tail(c.brokers[victim].data_dir, topic, p, cut)
    c.brokers[first].start()
    c.brokers[second].start()
    _back_in_isr(c, topic, first)
    _back_in_isr(c, topic, second)


def test_fast_double_failovers_converge(chaos: Any) -> None:
    """Reliability anchor 7: 100 fast double failovers under idempotent acks=all load. Each round moves the
    leadership of one partition twice in a row: the second move starts as soon as ZooKeeper names the first new
    leader, sometimes before it has taken a write, sometimes after (so the replicas hold different uncommitted
    tails across up to three leader epochs: the KIP-101/KIP-279 cases). Every ``CRASH_EVERY``-th round is a
    crash instead: both leaders are killed, each loses a different part of its unflushed tail, and both restart.
    Throughout, a consumer checks that no offset it was served ever changes value or goes back; at the end every
    acknowledged record is at its offset and the replicas' logs are byte-identical (all of them, not only up to
    the high watermark) with identical leader-epoch checkpoints."""
    all_up(chaos)
    topic = f"double-{uuid.uuid4().hex[:8]}"
    _create(chaos, topic)
    load = _load(chaos, topic)
    monitor = Monitor(chaos, topic)
    top_acked: dict[int, int] = {}
    started = time.monotonic()
    crashes = 0
    try:
        load.wait_progress(200)
        for k in range(DOUBLE_FAILOVERS):
            p = k % PARTITIONS
            if k % CRASH_EVERY == CRASH_EVERY - 1:
                _crash_double_failover(chaos, topic, p, k)
                crashes += 1
            else:
                s0 = state(chaos.kz, topic, p)
                others = [b for b in (1, 2, 3) if b != s0.leader]
                second, third = (others if k % 2 else others[::-1])
                _leader_first(chaos, topic, p, second)
                if k % 3:  # let the first new leader take writes (a tail of its own epoch) before it loses the lead
                    load.wait_progress(5, partition=p)
                _leader_first(chaos, topic, p, third)
            load.wait_progress(10, partition=p)
            # acknowledged offsets never regress: each partition's highest acknowledged offset only grows
            for part in range(PARTITIONS):
                top = max((o for q, o in list(load.acked.values()) if q == part and o is not None), default=-1)
                assert top >= top_acked.get(part, -1)
                top_acked[part] = top
        load.wait_progress(100)
    finally:
        load.stop()
    elapsed = time.monotonic() - started
    truncations = sum(b.log_text().count(f"truncating topic={topic}") for b in chaos.brokers.values())
    print(f"\n{DOUBLE_FAILOVERS} double failovers ({crashes} crashes) in {elapsed:.0f}s; {len(load.acked)} acked; "
          f"{truncations} truncations; monitor served {len(monitor.seen)} records")
    records = read_all(chaos.bootstrap, topic, PARTITIONS)
    load.check(records, exact=False)
    try:
        _until("the monitor served everything", lambda: sum(monitor.last.get(p, -1) + 1 for p in range(PARTITIONS))
               >= sum(len(r) for r in records.values()), timeout=60)
    finally:
        monitor.stop()
    assert monitor.regressions == [], monitor.regressions[:5]
    assert monitor.errors == [], monitor.errors[:5]
    final = {(p, o): v for p, recs in records.items() for o, v in recs}
    assert all(final.get(po) == v for po, v in monitor.seen.items()), "an offset served earlier changed its value"
    assert truncations > 0, "no replica ever had a tail to truncate: the scenario did not happen"
    converged(chaos, topic, PARTITIONS, isr_timeout=90)
    for p in range(PARTITIONS):  # the whole logs, beyond the high watermark too: nothing is produced any more
        _until(f"whole logs of {topic}-{p} identical", lambda p=p: len(
            {log_bytes(b.data_dir, topic, p) for b in chaos.brokers.values()}) == 1, timeout=60)


def test_hard_bounce_leader_gets_a_new_epoch(chaos: Any) -> None:
    """kill -9 the leader and start it again at once (ducktape's hard_bounce): the restarted broker registers
    the moment its old session expires, so the controller may see the broker list unchanged. It must still treat
    the broker as having failed (Kafka compares the registration's czxid, its broker epoch): a new leader epoch,
    and the bounced broker never resumes a leadership its previous process held. Its log is cut as by a lost
    page cache, so a broker that resumed leading with it would lose acknowledged records."""
    all_up(chaos)
    topic = f"bounce-{uuid.uuid4().hex[:8]}"
    _create(chaos, topic)
    load = _load(chaos, topic)
    try:
        load.wait_progress(200)
        for k in range(BOUNCES):
            p = k % PARTITIONS
            load.wait_progress(30, partition=p)
            s0 = state(chaos.kz, topic, p)
            victim = s0.leader
            chaos.brokers[victim].kill()
            _cut_tail(chaos.brokers[victim].data_dir, topic, p, 1 + 1777 * (k + 1) % 5000)
            chaos.brokers[victim].start()
            s1 = _until(f"bounce {k + 1}: a new leader epoch of {topic}-{p}", lambda p=p, e=s0.leader_epoch: (
                s if (s := state(chaos.kz, topic, p)).leader_epoch > e and s.leader != -1 else None), timeout=60)
            assert s1.leader != victim or s1.leader_epoch > s0.leader_epoch + 1, (s0, s1)
            _back_in_isr(chaos, topic, victim)
        load.wait_progress(100)
    finally:
        load.stop()
    load.check(read_all(chaos.bootstrap, topic, PARTITIONS), exact=False)
    converged(chaos, topic, PARTITIONS, isr_timeout=90)
