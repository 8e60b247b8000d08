"""KIP-932 share groups with confluent-kafka's ``ShareConsumer`` (librdkafka 2.16: ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge v1) against a real ``tidelog serve``.

The broker runs with a short record lock (2 s, its minimum lowered to 1 s), a delivery count limit of 3 and
``share.auto.offset.reset=earliest`` so the records produced before a consumer joins are delivered.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

LOCK_MS = 2000
DELIVERY_LIMIT = 3
SHARE_BROKER = {
    "share.auto.offset.reset": "earliest",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}
MEMBER = Path(__file__).resolve().parent / "share_member.py"


@pytest.fixture(scope="module")
def share_broker(broker_factory: Any) -> Any:
    return broker_factory(SHARE_BROKER)


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = "share-" + uuid.uuid4().hex[:8]
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    # batches of at most 10 records: a share fetch acquires whole batches, so small ones let members share
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10})
    for v in values:
        p.produce(topic, v.encode())
    assert p.flush(30) == 0


def _consumer(bootstrap: str, group: str, topic: str, explicit: bool = False, max_records: int = 10) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_records,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def _poll_until(c: ShareConsumer, done: Any, timeout: float, what: str) -> list[Any]:
    """Poll ``c`` (explicit mode: the caller acknowledges in ``done``) until ``done(messages)`` is true."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msgs = [m for m in c.poll(0.5) if m.error() is None]
        got += msgs
        if done(msgs, got):
            return got
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_two_members_share_one_partition(share_broker: Any) -> None:
    bs = share_broker.bootstrap
    topic = _topic(bs)
    values = [f"r{i}" for i in range(300)]
    _produce(bs, topic, values)
    group = "sg-" + uuid.uuid4().hex[:6]
    a, b = _consumer(bs, group, topic), _consumer(bs, group, topic)
    seen: dict[str, list[str]] = {"a": [], "b": []}
    try:
        deadline = time.monotonic() + 60
        while len(seen["a"]) + len(seen["b"]) < len(values) and time.monotonic() < deadline:
            for name, c in (("a", a), ("b", b)):
                seen[name] += [m.value().decode() for m in c.poll(0.2) if m.error() is None]
        for c in (a, b):  # implicit mode: the last poll's records are accepted by a commit (close releases them)
            c.commit_sync(30)
    finally:
        a.close()
        b.close()
    both = seen["a"] + seen["b"]
    assert sorted(both) == sorted(values), "every record delivered once (implicit acks accept them)"
    assert not set(seen["a"]) & set(seen["b"]), "a record delivered to both members"
    assert seen["a"] and seen["b"], f"one member got everything: {len(seen['a'])} / {len(seen['b'])}"
    # all accepted: a new member of the group gets nothing of them (only the new sentinel record)
    c = _consumer(bs, group, topic)
    try:
        _produce(bs, topic, ["sentinel"])
        got = _poll_until(c, lambda _m, g: any(m.value() == b"sentinel" for m in g), 30, "the sentinel")
        assert [m.value() for m in got] == [b"sentinel"]
        c.commit_sync(30)
    finally:
        c.close()


def test_release_redelivers_with_next_delivery_count(share_broker: Any) -> None:
    bs = share_broker.bootstrap
    topic = _topic(bs)
    _produce(bs, topic, ["x0", "x1", "x2"])
    c = _consumer(bs, "sg-" + uuid.uuid4().hex[:6], topic, explicit=True)
    try:
        first = _poll_until(c, lambda _m, g: len(g) >= 3, 30, "3 records")
        assert [m.delivery_count() for m in first] == [1, 1, 1]
        for m in first:
            c.acknowledge(m, AcknowledgeType.RELEASE if m.offset() == 1 else AcknowledgeType.ACCEPT)
        c.commit_sync(30)
        again = _poll_until(c, lambda _m, g: len(g) >= 1, 30, "the released record")
        assert [(m.offset(), m.value(), m.delivery_count()) for m in again] == [(1, b"x1", 2)]
        for m in again:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(30)
    finally:
        c.close()


def test_reject_is_never_redelivered_and_delivery_limit_archives(share_broker: Any) -> None:
    bs = share_broker.bootstrap
    topic = _topic(bs)
    _produce(bs, topic, ["rejected", "poison", "ok"])
    c = _consumer(bs, "sg-" + uuid.uuid4().hex[:6], topic, explicit=True)
    deliveries: list[tuple[str, int]] = []
    try:
        def step(msgs: list[Any], _got: list[Any]) -> bool:
            for m in msgs:
                v = m.value().decode()
                deliveries.append((v, m.delivery_count()))
                c.acknowledge(m, {"rejected": AcknowledgeType.REJECT, "poison": AcknowledgeType.RELEASE}.get(
                    v, AcknowledgeType.ACCEPT))
            if msgs:
                c.commit_sync(30)
            return any(v == "end" for v, _ in deliveries)

        _poll_until(c, lambda m, g: (step(m, g), len([d for d in deliveries if d[0] == "poison"]) >= DELIVERY_LIMIT)[1],
                    60, "the poison record's last delivery")
        _produce(bs, topic, ["end"])
        _poll_until(c, step, 30, "the end record")
    finally:
        c.close()
    assert [d for d in deliveries if d[0] == "rejected"] == [("rejected", 1)]
    assert [d for d in deliveries if d[0] == "poison"] == [("poison", n) for n in range(1, DELIVERY_LIMIT + 1)]
    assert [d for d in deliveries if d[0] == "ok"] == [("ok", 1)]


class _Member:
    def __init__(self, bootstrap: str, group: str, topic: str, **opts: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen([sys.executable, str(MEMBER), bootstrap, group, topic, json.dumps(opts)],
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)


def test_killed_member_records_redelivered_after_lock_and_ledger(share_broker: Any) -> None:
    """Three members of one group on one partition; one holds its records without acknowledging and is
    SIGKILLed: its records come back (delivery count 2) once their lock expires. Ledger of the whole history:
    every record is delivered to the survivors, and a survivor sees a record twice never; a record seen by two
    members was held by the killed one."""
    bs = share_broker.bootstrap
    topic = _topic(bs)
    values = [f"k{i}" for i in range(400)]
    group = "sg-" + uuid.uuid4().hex[:6]
    holder = _Member(bs, group, topic, ack="hold", max_records=20)
    survivors: list[_Member] = []
    try:
        _produce(bs, topic, values[:100])
        deadline = time.monotonic() + 30
        while not holder.events and time.monotonic() < deadline:
            time.sleep(0.05)  # polling interval of a bounded wait for the holder's first records
        assert holder.events, "the holding member got no records"
        survivors = [_Member(bs, group, topic, max_records=10) for _ in range(2)]
        holder.kill()
        held = {e["v"] for e in holder.events}
        acquired_at = min(e["t"] for e in holder.events)
        _produce(bs, topic, values[100:])
        deadline = time.monotonic() + 60

        def survivor_values() -> list[dict[str, Any]]:
            return [e for s in survivors for e in list(s.events)]

        while time.monotonic() < deadline and not set(values) <= {e["v"] for e in survivor_values()}:
            time.sleep(0.1)  # polling interval of a bounded wait for the survivors' output
        events = survivor_values()
    finally:
        for s in survivors:
            s.stop()
        if holder.proc.poll() is None:
            holder.kill()
    got = [e["v"] for e in events]
    assert set(got) == set(values), f"{len(set(values) - set(got))} records never delivered to a survivor"
    assert len(got) == len(set(got)), "a survivor got a record twice although every survivor accepts"
    redelivered = {e["v"]: e for e in events if e["n"] > 1}
    # the holder's records (and any it had fetched ahead without handing them out) came back once, count 2
    assert held <= set(redelivered), sorted(held - set(redelivered))[:5]
    assert all(e["n"] == 2 for e in redelivered.values())
    assert len(redelivered) <= 2 * 20, "more redelivered than the holder can have acquired (2 fetches of 20)"
    # not before their lock (2 s from the acquisition) expired
    assert min(e["t"] for e in redelivered.values()) >= acquired_at + LOCK_MS / 1000.0 - 0.05
