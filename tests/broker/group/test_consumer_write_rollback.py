"""Issue 27 item 1 (regexacl): a KIP-848 heartbeat whose ConsumerGroup* records cannot be written is rolled back, as
Kafka's coordinator runtime reverts to its last committed snapshot: the group keeps the state of its last successful
write, the heartbeat answers COORDINATOR_NOT_AVAILABLE (Kafka's mapping of NOT_ENOUGH_REPLICAS), and once writes work
again the member's next heartbeat recomputes.

One node: ``min.insync.replicas=2`` set live on ``__consumer_offsets`` (replication factor 1) makes every append to it
fail with NOT_ENOUGH_REPLICAS; setting it back to 1 heals it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from helpers import RawClient

from tidelog.errors import ErrorCode

from .conftest import create_topic, produce_values, wait_until
from .test_consumer_protocol import FAST_CONSUMER_GROUPS

HEARTBEAT, DESCRIBE, METADATA, INCREMENTAL_ALTER_CONFIGS = 68, 69, 3, 44
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
TOPIC = "rollback-t"


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    b = broker_factory({**FAST_CONSUMER_GROUPS, "offsets.topic.num.partitions": "1",
                        "offsets.topic.replication.factor": "1"})
    create_topic(b.bootstrap, TOPIC, 2)
    with RawClient(b.port) as c:  # __consumer_offsets is made by the first FindCoordinator
        wait_until(lambda: c.request(10, 1, {"key": "rollback", "key_type": 0})["error_code"] == 0, 20,
                   "the group coordinator")
    return b


def _min_isr(c: RawClient, value: str) -> None:
    r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": "__consumer_offsets",
        "configs": [{"name": "min.insync.replicas", "config_operation": 0, "value": value}]}],
        "validate_only": False})
    assert r["responses"][0]["error_code"] == 0, r


def _hb(c: RawClient, group: str, member: str, epoch: int, owned: list[int] | None = None,
        tid: uuid.UUID | None = None) -> dict:
    return c.request(HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 5000 if epoch == 0 else -1,
        "subscribed_topic_names": [TOPIC] if epoch == 0 else None, "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [] if owned is None else [{"topic_id": tid, "partitions": owned}]})


def _describe(c: RawClient, group: str) -> dict:
    d = c.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    return d


def _parts(r: dict) -> list[int]:
    return sorted(p for t in r["assignment"]["topic_partitions"] for p in t["partitions"])


def test_failed_write_rolls_the_group_back(b: Any) -> None:
    group = "rollback-g"
    m1, m2 = "m1-" + uuid.uuid4().hex[:8], "m2-" + uuid.uuid4().hex[:8]
    with RawClient(b.port) as c:
        r = _hb(c, group, m1, 0)
        assert r["error_code"] == 0 and r["member_epoch"] == 1 and _parts(r) == [0, 1], r
        tid = r["assignment"]["topic_partitions"][0]["topic_id"]
        assert _hb(c, group, m1, 1, [0, 1], tid)["error_code"] == 0
        try:
            _min_isr(c, "2")
            # a join: group epoch 2, a new target, a new member... none of it can be written
            r = _hb(c, group, m2, 0)
            assert r["error_code"] == COORDINATOR_NOT_AVAILABLE, r
            d = _describe(c, group)
            assert d["error_code"] == 0 and d["group_epoch"] == 1 and d["assignment_epoch"] == 1, d
            assert [m["member_id"] for m in d["members"]] == [m1], d
            # the member that stayed: a steady heartbeat writes nothing, so it is answered, and keeps both partitions
            r = _hb(c, group, m1, 1, [0, 1], tid)
            assert r["error_code"] == 0 and r["member_epoch"] == 1, r
            # a leave cannot be written either: the member stays
            r = _hb(c, group, m1, -1)
            assert r["error_code"] == COORDINATOR_NOT_AVAILABLE, r
            assert [m["member_id"] for m in _describe(c, group)["members"]] == [m1]
            # a new group that cannot be written does not exist afterwards
            r = _hb(c, "rollback-new", "m3-" + uuid.uuid4().hex[:8], 0)
            assert r["error_code"] == COORDINATOR_NOT_AVAILABLE, r
            assert _describe(c, "rollback-new")["error_code"] == 69  # GROUP_ID_NOT_FOUND
        finally:
            _min_isr(c, "1")
        # writes work again: the join is recomputed from the state last written
        r = _hb(c, group, m2, 0)
        assert r["error_code"] == 0, r
        d = _describe(c, group)
        assert d["group_epoch"] == 2 and sorted(m["member_id"] for m in d["members"]) == sorted([m1, m2]), d
        r = _hb(c, group, m1, 1, [0, 1], tid)  # m1 is told to give one partition up
        assert r["error_code"] == 0 and len(_parts(r)) == 1, r


def test_confluent_member_joins_once_writes_work(b: Any) -> None:
    """A real client (confluent-kafka, ``group.protocol=consumer``) whose join cannot be written: answered
    COORDINATOR_NOT_AVAILABLE, it gets no assignment and the group is not created; once the write works its next
    heartbeat joins and it consumes every record."""
    from confluent_kafka import Consumer

    topic, group = "rollback-ck", "rollback-ck-g"
    create_topic(b.bootstrap, topic, 2)
    values = [f"v{i}" for i in range(20)]
    produce_values(b.bootstrap, topic, values, 2)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: list[str] = []
    with RawClient(b.port) as raw:
        try:
            try:
                _min_isr(raw, "2")
                c.subscribe([topic])
                # a few heartbeats' worth of polling (interval 250 ms): none of them can be written
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline:
                    m = c.poll(0.1)
                    assert m is None or m.error() is not None, "consumed although the join was never written"
                    assert not c.assignment()
                assert _describe(raw, group)["error_code"] == 69  # GROUP_ID_NOT_FOUND: its creation was undone
            finally:
                _min_isr(raw, "1")
            deadline = time.monotonic() + 30
            while len(seen) < len(values):
                assert time.monotonic() < deadline, f"only {len(seen)} records after the write healed"
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    seen.append((m.value() or b"").decode())
        finally:
            c.close()
        assert sorted(seen) == sorted(values)
        d = _describe(raw, group)
        assert d["error_code"] == 0 and d["group_epoch"] >= 1, d
