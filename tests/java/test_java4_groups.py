"""Issue 27's group scenarios with the Java 4.3 client (kafka-clients 4.3.0), each against one node and against a
3-broker ZooKeeper cluster (tests/cluster's fixtures):

1. KIP-848: three consumers with ``group.protocol=consumer`` on 6 partitions while a producer writes; one (its own
   JVM) is killed -9, one leaves, one joins; the group is described as a consumer-protocol group.
2. Upgrading a classic group to the consumer protocol while the producer writes: through an empty group (the
   classic members stop, the consumer-protocol members start) and online, member by member
   (``group.consumer.migration.policy`` left at Kafka's default, bidirectional: the online upgrade of decision
   0062).
3. KIP-932: three ``KafkaShareConsumer``s share one partition; one holds its records without acknowledging and is
   killed -9 (its records come back after the lock), a poison record released until the delivery count limit
   archives it; every other record accepted exactly once.
4. ``Admin.describeTopics`` through DescribeTopicPartitions (API 75) in pages, counted by the broker's request
   metrics.

The ledger of a group scenario is the whole history the members printed (Java4GroupsCheck.java): a member reports
each poll's records, commits them (commitSync of the batch's offsets) and reports the commit. Every record produced
must be in exactly one committed batch, except the records of the killed member's last batch whose commit it may
or may not have made before dying (they are in at most one committed batch). The jars: tests/java/jars4.py (skips
without a JDK or the wheel)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jars4 import JVM_FLAGS, compile4
from support import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOURCE = Path(__file__).with_name("Java4GroupsCheck.java")
LOCK_MS = 3000
DELIVERY_LIMIT = 3
BROKER = {
    # KIP-848 timing lowered (with the minimums) so the killed member is removed within the test
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "4000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "250",
    # classic groups (the upgrade scenario)
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    # share groups: a short record lock, 3 deliveries at most, records produced before a member joins delivered
    "share.auto.offset.reset": "earliest",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}


# ------------------------------------------------------------------------------------------------- targets

class Target:
    """One node or a cluster: its bootstrap, its brokers (for the metrics and the logs) and the replication."""

    def __init__(self, kind: str, brokers: list[Any], rf: int) -> None:
        self.kind, self.brokers, self.rf = kind, brokers, rf

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    def logs(self) -> str:
        return "\n".join(f"--- {b.bootstrap}\n{b.log_text()[-2500:]}" for b in self.brokers)


def _cluster_fixtures() -> Any:
    """tests/cluster/conftest.py loaded by path (its ``_cluster`` starts ZooKeeper and three brokers)."""
    spec = importlib.util.spec_from_file_location("tidelog_test_java4_cluster",
                                                  Path(__file__).resolve().parents[1] / "cluster" / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module", params=["one_node", "cluster"])
def target(request: Any, broker_factory: Any) -> Iterator[Target]:
    if request.param == "one_node":
        yield Target("one_node", [broker_factory(BROKER)], 1)
        return
    gen = _cluster_fixtures()._cluster(dict(BROKER))
    c = next(gen)
    try:
        yield Target("cluster", list(c.brokers.values()), 3)
    finally:
        gen.close()


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: Any) -> str:
    return compile4(SOURCE, tmp_path_factory.mktemp("java4groups"))


# ------------------------------------------------------------------------------------------------- processes

class Jvm:
    """A Java4GroupsCheck process: commands on stdin, JSON events on stdout (each stamped on arrival)."""

    def __init__(self, classpath: str, *args: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(["java", *JVM_FLAGS, "-cp", classpath, "Java4GroupsCheck", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for r in self._readers:
            r.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                ev = json.loads(line)
                ev["seen"] = time.monotonic()
                with self.lock:
                    self.events.append(ev)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            del self.stderr[:-200]

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None and self.proc.poll() is None, self.tail()
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def of(self, event: str, member: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == event and (member is None or e.get("member") == member)]

    def kill(self) -> None:
        """SIGKILL: no leave, no close, no commit."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for r in self._readers:
            r.join(5)

    def finish(self, timeout: float = 40) -> None:
        """``exit``: every member closes; then the process ends."""
        if self.proc.poll() is None:
            self.send("exit")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"Java4GroupsCheck did not exit in {timeout}s: {self.tail()}") from None
        for r in self._readers:
            r.join(5)
        assert self.of("done"), self.tail()

    def tail(self) -> str:
        with self.lock:
            changes = [e for e in self.events if e["event"] not in ("batch", "committed", "delivered", "acked")]
            last = self.events[-6:]
        return f"changes: {changes[-20:]}\nlast events: {last}\nstderr: {''.join(self.stderr[-30:])}"


def run_java(classpath: str, *args: str, timeout: float = 60) -> dict[str, Any]:
    proc = subprocess.run(["java", *JVM_FLAGS, "-cp", classpath, "Java4GroupsCheck", *args], capture_output=True,
                          text=True, timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and events and events[-1]["event"] == "done", (events, proc.stderr[-3000:])
    return {e["event"]: e for e in events}


class ProducerThread:
    """Writes ``v0, v1, ...`` round-robin over the partitions (idempotent, acks=all) until stopped; keeps the log end
    offset of every partition from the delivery reports."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_tick: int = 10) -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 5})
        self.topic, self.partitions, self.per_tick = topic, partitions, per_tick
        self.sent = 0
        self.ends: dict[int, int] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.ends[msg.partition()] = max(self.ends.get(msg.partition(), 0), msg.offset() + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(self.per_tick):
                self.p.produce(self.topic, f"v{self.sent}".encode(), partition=self.sent % self.partitions,
                               on_delivery=self._delivered)
                self.sent += 1
            self.p.poll(0)
            self._stop.wait(0.05)  # the producer's pace: per_tick records every 50 ms

    def close(self) -> None:
        """After a failure: stop writing and drop the client (no reconnect noise once the brokers are gone)."""
        self._stop.set()
        self._thread.join(10)
        self.p.flush(2)
        self.p = None  # type: ignore[assignment]

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(10)
        assert self.p.flush(30) == 0
        assert not self.failed, self.failed[:3]
        self.p = None  # type: ignore[assignment]
        return [f"v{i}" for i in range(self.sent)]


def wait_for(pred: Callable[[], Any], timeout: float, what: str, target: Target, *jvms: Jvm) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        errors = [e for j in jvms for e in j.of("member_error")]
        if errors:  # a member's client gave up: no use waiting
            raise AssertionError(f"waiting for {what}: {json.dumps(errors)}\n" + "\n".join(j.tail() for j in jvms))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n"
                                 + "\n".join(j.tail() for j in jvms) + "\n" + target.logs())
        time.sleep(0.1)  # polling interval of a bounded wait on the members' reports


# ------------------------------------------------------------------------------------------------- group ledger

def assigned(jvm: Jvm, member: str) -> set[int]:
    ev = jvm.of("assigned", member)
    return set(ev[-1]["partitions"]) if ev else set()


def covered(jvm: Jvm, members: list[str], partitions: int) -> bool:
    """The members' latest assignments are disjoint, non-empty and cover every partition."""
    sets = [assigned(jvm, m) for m in members]
    return all(sets) and sum(len(s) for s in sets) == partitions and set().union(*sets) == set(range(partitions))


def committed_values(jvms: list[Jvm]) -> tuple[dict[str, int], set[str]]:
    """Times each value was in a committed batch; values of batches that were not committed."""
    counts: dict[str, int] = {}
    uncommitted: set[str] = set()
    for j in jvms:
        done = {(e["member"], e["seq"]) for e in j.of("committed")}
        for b in j.of("batch"):
            values = [r[2] for r in b["records"]]
            if (b["member"], b["seq"]) in done:
                for v in values:
                    counts[v] = counts.get(v, 0) + 1
            else:
                uncommitted.update(values)
    return counts, uncommitted


def check_ledger(produced: list[str], jvms: list[Jvm], victim: Jvm | None) -> dict[str, int]:
    counts, _ = committed_values(jvms)
    twice = sorted(v for v, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} records in two committed batches, e.g. {twice[:5]}"
    missing = set(produced) - set(counts)
    if victim is not None:  # the killed member's last batch: committed or not, it died before saying
        last = victim.of("batch")[-1:] if victim.of("batch") else []
        unsure = {r[2] for b in last if not any(c["seq"] == b["seq"] for c in victim.of("committed"))
                  for r in b["records"]}
        missing -= unsure
    assert not missing, f"{len(missing)} records in no committed batch, e.g. {sorted(missing)[:5]}"
    extra = set(counts) - set(produced)
    assert not extra, sorted(extra)[:5]
    return counts


def broker_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = a.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------------------------- 1. KIP-848

PARTITIONS = 6


def test_kip848_kill_leave_join(classpath: str, target: Target) -> None:
    topic, group = _name("j4-848"), _name("g-j4-848")
    create_topic(target.bootstrap, topic, PARTITIONS, target.rf)
    producer = ProducerThread(target.bootstrap, topic, PARTITIONS)
    victim = Jvm(classpath, "members", target.bootstrap, topic, group)  # a JVM of its own: killed -9
    main = Jvm(classpath, "members", target.bootstrap, topic, group)
    jvms = [victim, main]
    try:
        victim.send("join a consumer")
        main.send("join b consumer")
        main.send("join c consumer")
        three = [(victim, "a"), (main, "b"), (main, "c")]
        wait_for(lambda: all(assigned(j, m) for j, m in three) and len(set().union(
            *(assigned(j, m) for j, m in three))) == PARTITIONS and victim.of("committed"), 45,
            "3 members over 6 partitions, a has committed", target, *jvms)
        victim.kill()
        wait_for(lambda: covered(main, ["b", "c"], PARTITIONS), 30, "b and c own the 6 partitions after a's session "
                 "timed out", target, *jvms)
        main.send("close b")
        wait_for(lambda: main.of("closed", "b") and covered(main, ["c"], PARTITIONS), 30, "b left, c owns all",
                 target, *jvms)
        main.send("join d consumer")
        wait_for(lambda: covered(main, ["c", "d"], PARTITIONS), 30, "d joined: c and d share the partitions",
                 target, *jvms)
        before = _requests_of(target, "CONSUMER_GROUP_DESCRIBE")
        group_desc = run_java(classpath, "describe_group", target.bootstrap, group)["group"]
        described = _requests_of(target, "CONSUMER_GROUP_DESCRIBE") - before
        produced = producer.stop()
        wait_for(lambda: set(produced) <= set(committed_values(jvms)[0]) | committed_values([victim])[1], 30,
                 "every record committed", target, *jvms)
        main.finish()
    finally:
        if producer.p is not None:
            producer.close()
        for j in jvms:
            j.kill()
    counts = check_ledger(produced, jvms, victim)
    # a commitSync racing the heartbeat that moved the member's epoch carries the previous epoch: accepted for the
    # partitions the member owned then (KIP-1251); before that check the Java client threw CommitFailedException
    # (STALE_MEMBER_EPOCH) here in most runs. No commit of a live member may fail.
    failed = main.of("commit_failed") + main.of("member_error")
    assert not failed, json.dumps(failed)
    assert len(counts) > 200 and main.of("committed", "d"), "the joiner consumed"
    # a consumer-protocol group: ConsumerGroupDescribe's epochs, the uniform assignor, the two live members
    assert described >= 1, "Admin.describeConsumerGroups did not ask ConsumerGroupDescribe (API 69)"
    assert group_desc["type"] == "Consumer" and group_desc["assignor"] == "uniform", group_desc
    assert group_desc["group_epoch"] > 0 and group_desc["target_epoch"] == group_desc["group_epoch"], group_desc
    assert sorted(m["client_id"] for m in group_desc["members"]) == ["java4-c", "java4-d"], group_desc
    assert sorted(p for m in group_desc["members"] for p in m["partitions"]) == list(range(PARTITIONS))
    committed = broker_committed(target.bootstrap, group, topic, PARTITIONS)
    assert committed == producer.ends, (committed, producer.ends)


# ------------------------------------------------------------------------------------------------- 3. KIP-932

def test_share_consumers_kill_lock_expiry_and_poison(classpath: str, target: Target) -> None:
    """Three share consumers on one partition: ``h`` acquires records and is killed -9 without acknowledging; ``a``
    and ``b`` accept everything but the poison record, which they release until the delivery count limit archives
    it. The held records come back (delivery count 2) one lock duration after they were acquired; every other
    record is accepted exactly once; the poison record is delivered ``DELIVERY_LIMIT`` times and never again."""
    topic, group = _name("j4-share"), _name("g-j4-share")
    create_topic(target.bootstrap, topic, 1, target.rf)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": target.bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10})

    def produce(values: list[str]) -> None:
        for v in values:
            p.produce(topic, v.encode(), partition=0)
        assert p.flush(30) == 0

    first = [f"s{i}" for i in range(60)]
    rest = [f"s{i}" for i in range(60, 300)]
    produce(first)
    holder = Jvm(classpath, "share", target.bootstrap, topic, group)  # its own JVM: killed -9
    main = Jvm(classpath, "share", target.bootstrap, topic, group)
    jvms = [holder, main]
    try:
        holder.send("join h hold")
        held_ev = wait_for(lambda: holder.of("holding", "h"), 45, "h acquired records", target, *jvms)[0]
        held = {r[2]: r[3] for r in holder.of("delivered", "h")[0]["records"]}
        assert held and set(held.values()) == {1}, held
        main.send("join a accept")
        main.send("join b accept")
        holder.kill()
        produce(rest[:120] + ["poison"] + rest[120:])
        accepted = lambda: {ack[1] for e in main.of("acked") for ack in e["acks"] if ack[2] == "accept"}  # noqa: E731
        wait_for(lambda: set(first + rest) <= accepted(), 50, "every record accepted", target, *jvms)
        # h's member lives on until its session times out (45 s): three members, all on partition 0
        share_desc = run_java(classpath, "describe_share_group", target.bootstrap, group)["share_group"]
        poison = lambda: [(r[3], e["seen"]) for e in main.of("delivered") for r in e["records"]  # noqa: E731
                          if r[2] == "poison"]
        wait_for(lambda: len(poison()) >= DELIVERY_LIMIT, 30, "the poison record's last delivery", target, *jvms)
        produce(["end"])
        wait_for(lambda: "end" in accepted(), 30, "the end record", target, *jvms)
        main.finish()
    finally:
        p.flush(5)
        for j in jvms:
            j.kill()
    deliveries = [(r[2], r[3], e["member"], e["seen"]) for e in main.of("delivered") for r in e["records"]]
    acks = [(ack[1], ack[2]) for e in main.of("acked") for ack in e["acks"]]
    errors = [e for e in main.of("acked") if e["errors"]] + main.of("member_error")
    assert not errors, json.dumps(errors)
    assert share_desc["state"] == "Stable" and share_desc["group_epoch"] > 0, share_desc
    assert sorted(m["client_id"] for m in share_desc["members"]) == ["java4-a", "java4-b", "java4-h"], share_desc
    assert all(m["partitions"] == [0] for m in share_desc["members"]), share_desc
    # every record but the poison accepted exactly once, by a or b
    accepted_values = [v for v, t in acks if t == "accept"]
    assert sorted(accepted_values) == sorted([*first, *rest, "end"]), "a record accepted twice or never"
    assert {m for _, _, m, _ in deliveries} == {"a", "b"}, "both survivors got records"
    # h's records: delivered again (count 2) to a survivor, one lock duration after h acquired them
    again = {v: (n, seen) for v, n, _, seen in deliveries if v in held}
    assert set(again) == set(held) and {n for n, _ in again.values()} == {2}, again
    # not before the lock expired (h's connection closing releases nothing), and well before h's share session
    # (45 s) would have timed out: the lock is what brought them back (slack for a loaded machine's JVM pauses)
    waited = min(seen for _, seen in again.values()) - held_ev["seen"]
    assert LOCK_MS / 1000 - 1.5 <= waited < 20, f"redelivered {waited:.2f}s after h got them (lock {LOCK_MS} ms)"
    # the poison record: released DELIVERY_LIMIT times with delivery counts 1..limit, then archived
    assert [n for n, _ in poison()] == list(range(1, DELIVERY_LIMIT + 1)), poison()
    assert [t for v, t in acks if v == "poison"] == ["release"] * DELIVERY_LIMIT
    # no other record was delivered twice
    counts: dict[str, int] = {}
    for v, _, _, _ in deliveries:
        counts[v] = counts.get(v, 0) + 1
    assert {v for v, n in counts.items() if n > 1} == {"poison"}, "a survivor got an accepted record again"


def test_share_members_survive_coordinator_restart(classpath: str, target: Target) -> None:
    """KafkaShareConsumers ``a``, ``b``, ``c`` join, ``c`` closes (group epoch 4 or 5: the partition's share-state
    initialization bumps it once, as Kafka's, unless a join's recomputation takes it along); the group's coordinator
    is killed -9 (one node: restarted; cluster: its broker stays down until the end). The new coordinator replays the
    ShareGroup* records: ``a`` and ``b`` go on with their epochs (the group epoch stays what it was; had they rejoined
    a group rebuilt from nothing it would be 2), and every record produced after the kill is accepted exactly once."""
    from confluent_kafka import Producer
    from support import find_coordinator

    topic, group = _name("j4-share-fo"), _name("g-j4-share-fo")
    create_topic(target.bootstrap, topic, 1, target.rf)
    p = Producer({"bootstrap.servers": target.bootstrap, "acks": "all", "linger.ms": 5})

    def produce(values: list[str]) -> None:
        for v in values:
            p.produce(topic, v.encode(), partition=0)
        assert p.flush(60) == 0

    def described() -> dict[str, Any]:
        return run_java(classpath, "describe_share_group", target.bootstrap, group)["share_group"]

    main = Jvm(classpath, "share", target.bootstrap, topic, group)
    killed: Any = None
    try:
        for name in ("a", "b", "c"):
            main.send(f"join {name} accept")
        produce([f"f{i}" for i in range(30)])
        accepted = lambda: {ack[1] for e in main.of("acked") for ack in e["acks"] if ack[2] == "accept"}  # noqa: E731
        wait_for(lambda: {f"f{i}" for i in range(30)} <= accepted(), 60, "the first records accepted", target, main)
        wait_for(lambda: len(described()["members"]) == 3, 30, "three members", target, main)
        main.send("close c")
        def two_members() -> dict[str, Any] | None:
            # both at the group's epoch: a member catches up at its next heartbeat after c's leave
            d = described()
            return d if len(d["members"]) == 2 and all(
                m["member_epoch"] == d["group_epoch"] for m in d["members"]) else None

        before = wait_for(two_members, 30, "c gone, a and b at the group's epoch", target, main)
        # 3 joins and c's leave, and the partition's initialization (its own bump, or folded into a later join's
        # when that join came while it ran): 4 or 5; a group rebuilt from nothing after the kill would be at 2
        assert before["group_epoch"] in (4, 5), before
        live = next(b for b in target.brokers if b.running)
        err, node = find_coordinator(live, group)
        assert err == 0, err
        killed = next(b for b in target.brokers  # the coordinator, by its broker.id (one node: the only broker)
                      if target.kind == "one_node" or str(b.overrides.get("broker.id")) == str(node))
        killed.kill()
        if target.kind == "one_node":
            killed.start()
            killed = None
        produce([f"g{i}" for i in range(30)])
        wait_for(lambda: {f"g{i}" for i in range(30)} <= accepted(), 90, "records after the kill accepted", target,
                 main)
        after = described()
        main.finish()
    finally:
        p.flush(5)
        main.kill()
        if killed is not None and not killed.running:
            killed.start(timeout=120)
    assert after["group_epoch"] == before["group_epoch"], (before, after)
    assert sorted((m["client_id"], m["member_epoch"]) for m in after["members"]) == sorted(
        (m["client_id"], m["member_epoch"]) for m in before["members"]), (before, after)
    acks = [ack[1] for e in main.of("acked") for ack in e["acks"] if ack[2] == "accept"]
    assert sorted(v for v in acks if v.startswith("g")) == sorted(f"g{i}" for i in range(30)), "accepted twice"
    assert not main.of("member_error"), main.of("member_error")


# ------------------------------------------------------------------------------------------------- 4. API 75

def _requests_of(target: Target, api: str) -> float:
    total = 0.0
    for b in target.brokers:
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
        total += sum(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith("tidelog_requests_total{") and f'api="{api}"' in line)
    return total


def test_describe_topics_pages_through_describe_topic_partitions(classpath: str, target: Target) -> None:
    topic = _name("j4-dtp")
    create_topic(target.bootstrap, topic, 7, target.rf)
    before = _requests_of(target, "DESCRIBE_TOPIC_PARTITIONS")
    d = run_java(classpath, "describe_topics", target.bootstrap, topic, "3")["described"]
    after = _requests_of(target, "DESCRIBE_TOPIC_PARTITIONS")
    assert [p["partition"] for p in d["partitions"]] == list(range(7))
    leaders = {b: 1 for b in range(1, 4)} if target.kind == "cluster" else None
    assert all(p["leader"] is not None and p["replicas"] == target.rf and p["isr"] == target.rf
               for p in d["partitions"]), d
    if leaders is not None:
        assert {p["leader"] for p in d["partitions"]} <= set(leaders)
    # 7 partitions in pages of 3: the Admin followed the cursor through three DescribeTopicPartitions requests
    # (none was answered by the Metadata fallback: that would be one request and no API 75 at all)
    assert after - before >= 3, (before, after)


# ------------------------------------------------------------------------------------------------- 2. upgrade

def _upgrade(target: Target, classpath: str, online: bool) -> None:
    """Three classic members (``group.protocol=classic``) consume while the producer writes, then are replaced by
    three ``group.protocol=consumer`` members: ``online``, one at a time while the others run (the group has members
    of both protocols for a while); else all classic members close first (the group is empty, its offsets stay) and
    the consumer-protocol members join it. At the end the group is a consumer-protocol group and every record is in
    exactly one committed batch. The delivery is at-least-once: a batch whose commit failed (a rebalance, a stale
    epoch) is consumed again and committed then; the ledger counts committed batches only."""
    topic, group = _name("j4-upg"), _name("g-j4-upg")
    create_topic(target.bootstrap, topic, PARTITIONS, target.rf)
    producer = ProducerThread(target.bootstrap, topic, PARTITIONS)
    jvm = Jvm(classpath, "members", target.bootstrap, topic, group)
    try:
        for m in ("a", "b", "c"):
            jvm.send(f"join {m} classic")
        wait_for(lambda: covered(jvm, ["a", "b", "c"], PARTITIONS) and all(jvm.of("committed", m) for m in "abc"),
                 45, "3 classic members over 6 partitions, each committing", target, jvm)
        live = ["a", "b", "c"]
        for old in ("a", "b", "c"):
            jvm.send(f"close {old}")
            live.remove(old)
            wait_for(lambda old=old: jvm.of("closed", old), 30, f"{old} closed", target, jvm)
            if online:
                jvm.send(f"join {old}2 consumer")
                live.append(old + "2")
                wait_for(lambda: covered(jvm, live, PARTITIONS) and jvm.of("committed", live[-1]), 45,
                         f"{live[-1]} (consumer protocol) got partitions and committed", target, jvm)
        if not online:
            for new in ("a2", "b2", "c2"):
                jvm.send(f"join {new} consumer")
                live.append(new)
            wait_for(lambda: covered(jvm, live, PARTITIONS) and all(jvm.of("committed", m) for m in live), 45,
                     "3 consumer-protocol members over 6 partitions, each committing", target, jvm)
        group_desc = run_java(classpath, "describe_group", target.bootstrap, group)["group"]
        produced = producer.stop()
        wait_for(lambda: set(produced) <= set(committed_values([jvm])[0]), 30, "every record committed", target, jvm)
        jvm.finish()
    finally:
        if producer.p is not None:
            producer.close()
        jvm.kill()
    check_ledger(produced, [jvm], None)
    assert group_desc["type"] == "Consumer", group_desc
    assert sorted(m["client_id"] for m in group_desc["members"]) == ["java4-a2", "java4-b2", "java4-c2"], group_desc
    committed = broker_committed(target.bootstrap, group, topic, PARTITIONS)
    assert committed == producer.ends, (committed, producer.ends)


def test_classic_group_upgraded_through_empty_group(classpath: str, target: Target) -> None:
    """The offline upgrade: the classic members stop, the consumer-protocol members start from the group's
    committed offsets (an empty classic group becomes a consumer group with its first heartbeat)."""
    _upgrade(target, classpath, online=False)


def test_classic_group_upgraded_online_member_by_member(classpath: str, target: Target) -> None:
    _upgrade(target, classpath, online=True)
