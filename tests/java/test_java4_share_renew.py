"""KIP-1222 with the Java 4.3 client (kafka-clients 4.3.0, tests/java/jars4.py): a ``KafkaShareConsumer`` in
explicit acknowledgement mode calls ``acknowledge(record, AcknowledgeType.RENEW)`` and keeps a record past its lock
(Java4ShareRenewCheck.java), against one node.

* renew: member ``a`` renews its record twice (piggy-backed on a poll: ShareFetch v2 with IsRenewAck; and with
  commitSync: ShareAcknowledge v2) and accepts it about 1.8 lock durations after it got it: every renewal and the
  final accept succeed (an accept after a lapsed lock would be INVALID_RECORD_STATE), the renewed record comes back
  to the application with its delivery count unchanged, and member ``b``, polling all along, never gets it (but does
  get the record produced afterwards).
* record_limit (KIP-1206, the other half of v2): ``share.acquire.mode=record_limit`` with ``max.poll.records`` 3 on
  one batch of 10 records: no poll gets more than 3, every record exactly once.
* disabled: ``share.renew.acknowledge.enable=false`` set through ``Admin.incrementalAlterConfigs`` (GROUP resource,
  a BOOLEAN in ``describeConfigs``): the renewal's commitSync reports ``InvalidRecordStateException``.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from jars4 import JVM_FLAGS, compile4
from support import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOURCE = Path(__file__).with_name("Java4ShareRenewCheck.java")
LOCK_MS = 4000
BROKER = {
    "share.auto.offset.reset": "earliest",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "1",
}


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: Any) -> str:
    return compile4(SOURCE, tmp_path_factory.mktemp("java4renew"))


@pytest.fixture(scope="module")
def broker(broker_factory: Any) -> Any:
    return broker_factory(BROKER)


def _run(classpath: str, *args: str, timeout: float = 90) -> list[dict[str, Any]]:
    proc = subprocess.run(["java", *JVM_FLAGS, "-cp", classpath, "Java4ShareRenewCheck", *args],
                          capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and events and events[-1]["event"] == "done", \
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    errors = [e for e in events if e["event"] == "error"]
    assert not errors, f"{errors}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    return events


def _one(events: list[dict[str, Any]], event: str, **match: Any) -> dict[str, Any]:
    found = [e for e in events if e["event"] == event and all(e.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (event, match, events)
    return found[0]


def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value, partition=0)
    assert p.flush(30) == 0


def test_java_share_consumer_renews_a_record_past_its_lock(classpath: str, broker: Any) -> None:
    topic, group = f"j4-renew-{uuid.uuid4().hex[:6]}", f"g-j4-renew-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1, 1)
    _produce(broker.bootstrap, topic, b"slow-job")
    events = _run(classpath, "renew", broker.bootstrap, topic, group, str(LOCK_MS))
    acquired = _one(events, "acquired")
    assert (acquired["offset"], acquired["count"], acquired["lock_ms"]) == (0, 1, LOCK_MS)
    by_poll = _one(events, "renewed", how="poll")
    assert (by_poll["back_offset"], by_poll["count"]) == (0, 1)  # a renewal is not a delivery
    by_commit = _one(events, "renewed", how="commit")
    assert by_commit["errors"] == [] and by_commit["partitions"] == 1, by_commit
    assert (_one(events, "back")["offset"], _one(events, "back")["count"]) == (0, 1)
    accepted = _one(events, "accepted")
    assert accepted["errors"] == [] and accepted["partitions"] == 1, accepted
    assert accepted["held_ms"] > LOCK_MS * 1.5, accepted  # held well past the lock it was first given
    b = [e for e in events if e["event"] == "b_delivered"]
    polling = _one(events, "b_polling")
    assert polling["ms"] < acquired["ms"] + LOCK_MS, "b was not polling before the first lock would have lapsed"
    assert [e["value"] for e in b] == ["after"], f"b got the renewed record (or missed the later one): {b}"


def test_java_share_consumer_renew_disabled_by_group_config(classpath: str, broker: Any) -> None:
    topic, group = f"j4-norenew-{uuid.uuid4().hex[:6]}", f"g-j4-norenew-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1, 1)
    _produce(broker.bootstrap, topic, b"job")
    events = _run(classpath, "disabled", broker.bootstrap, topic, group, str(LOCK_MS))
    assert _one(events, "config") == {**_one(events, "config"), "value": "false", "type": "BOOLEAN"}
    renewed = _one(events, "renewed", how="commit")
    assert renewed["errors"] == ["InvalidRecordStateException"], renewed


def test_java_share_consumer_record_limit_acquire_mode(classpath: str, broker: Any) -> None:
    topic, group = f"j4-limit-{uuid.uuid4().hex[:6]}", f"g-j4-limit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1, 1)
    events = _run(classpath, "record_limit", broker.bootstrap, topic, group, str(LOCK_MS))
    polls = [e for e in events if e["event"] == "polled"]
    assert all(e["errors"] == [] for e in polls), polls
    assert max(len(e["offsets"]) for e in polls) <= 3, polls  # batch-optimized would hand the whole batch of 10
    assert sorted(o for e in polls for o in e["offsets"]) == list(range(10)), polls
