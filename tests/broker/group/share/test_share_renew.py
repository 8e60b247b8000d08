"""ShareFetch / ShareAcknowledge v2 on the wire (a raw client): the RENEW acknowledge type of KIP-1222 (a member
extends the lock of a record it still processes), ``IsRenewAck``, the group config
``share.renew.acknowledge.enable`` and the record-limit acquire mode of KIP-1206."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from helpers import RawClient, new_topic, produce_body

from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

FETCH, ACK, API_VERSIONS, CREATE_TOPICS, PRODUCE, METADATA = 78, 79, 18, 19, 0, 3
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
INVALID_REQUEST, INVALID_CONFIG, INVALID_RECORD_STATE = 42, 40, 121
ACCEPT, RELEASE, RENEW = 1, 2, 4
GROUP_RESOURCE, TYPE_BOOLEAN = 32, 1
LOCK_MS = 4000


@pytest.fixture(scope="module")
def renew_broker(broker_factory: Any) -> Any:
    return broker_factory({"share.auto.offset.reset": "earliest", "offsets.topic.num.partitions": "1",
                           "group.share.min.record.lock.duration.ms": "1000",
                           "group.share.record.lock.duration.ms": str(LOCK_MS)})


def _setup(c: RawClient, batches: list[int]) -> uuid.UUID:
    """A one-partition topic holding one batch of ``n`` records for each ``n`` of ``batches``."""
    topic = new_topic("share-renew")
    r = c.request(CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                     "timeout_ms": 10000})
    assert r["topics"][0]["error_code"] == 0, r
    for n in batches:
        batch = build_batch([(None, f"v{i}".encode(), []) for i in range(n)])
        r = c.request(PRODUCE, 9, produce_body(topic, 0, batch))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
    md = c.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
    tid: uuid.UUID = md["topics"][0]["topic_id"]
    return tid


def _fetch(c: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, acks: list[dict] | None = None, *,
           version: int = 2, max_records: int = 100, max_wait_ms: int = 0, renew: bool = False, mode: int = 0) -> dict:
    body: dict[str, Any] = {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                            "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                            "max_records": max_records, "batch_size": max_records,
                            "share_acquire_mode": mode, "is_renew_ack": renew,
                            "topics": [{"topic_id": tid, "partitions": [
                                {"partition_index": 0, "acknowledgement_batches": acks or []}]}],
                            "forgotten_topics_data": []}
    if renew:  # Kafka: a renew-ack fetch fetches nothing
        body.update(max_wait_ms=0, min_bytes=0, max_bytes=0, max_records=0, batch_size=0)
    return c.request(FETCH, version, body)


def _ack(c: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, acks: list[dict], *,
         version: int = 2) -> dict:
    renew = version >= 2 and any(RENEW in a["acknowledge_types"] for a in acks)  # v1 cannot carry the flag
    return c.request(ACK, version, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                    "is_renew_ack": renew, "topics": [{"topic_id": tid, "partitions": [
                                        {"partition_index": 0, "acknowledgement_batches": acks}]}]})


def _acquired(r: dict) -> list[tuple[int, int, int]]:
    assert r["error_code"] == 0, r
    return [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for t in r["responses"] for p in t["partitions"] for a in p["acquired_records"]]


def _partition(r: dict) -> dict:
    parts: list[dict] = [p for t in r["responses"] for p in t["partitions"]]
    assert len(parts) == 1, r
    return parts[0]


def test_api_versions_advertise_v2(renew_broker: Any) -> None:
    with RawClient(renew_broker.port) as c:
        r = c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
        assert keys[FETCH] == (1, 2) and keys[ACK] == (1, 2)  # Kafka 4.3's ranges


def test_renew_keeps_the_lock_past_its_first_deadline(renew_broker: Any) -> None:
    """A acquires offset 0 and renews it halfway through its lock: B, fetching after the first deadline has passed,
    gets nothing; once the renewed lock lapses B gets the record, delivered a second time (a renewal is not a
    delivery). B renewing a record A holds is INVALID_RECORD_STATE."""
    group = "renew-" + uuid.uuid4().hex[:6]
    with RawClient(renew_broker.port) as a, RawClient(renew_broker.port) as b:
        tid = _setup(a, [1])
        r = _fetch(a, group, "A", 0, tid, max_wait_ms=5000)
        got_at = time.monotonic()  # (the first fetch may be slow: it initializes the share state)
        assert _acquired(r) == [(0, 0, 1)]
        assert r["acquisition_lock_timeout_ms"] == LOCK_MS
        first_deadline = got_at + LOCK_MS / 1000  # at the latest
        assert _acquired(_fetch(b, group, "B", 0, tid)) == []  # B's session: nothing to acquire
        p = _partition(_ack(b, group, "B", 1, tid, [{"first_offset": 0, "last_offset": 0,
                                                     "acknowledge_types": [RENEW]}]))
        assert p["error_code"] == INVALID_RECORD_STATE  # B does not hold it

        time.sleep(max(got_at + LOCK_MS / 2000 - time.monotonic(), 0))  # halfway: 2 s either side
        renew_sent = time.monotonic()
        r = _ack(a, group, "A", 1, tid, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [RENEW]}])
        assert r["error_code"] == 0 and _partition(r)["error_code"] == 0, r
        assert r["acquisition_lock_timeout_ms"] == LOCK_MS  # v2's answer carries it
        renewed_deadline = renew_sent + LOCK_MS / 1000  # at the earliest

        # after the first deadline (a fetch expires lapsed locks first), before the renewed one: still A's
        time.sleep(max(first_deadline + 0.4 - time.monotonic(), 0))
        r = _fetch(b, group, "B", 2, tid)
        assert time.monotonic() < renewed_deadline, "the check ran too late to tell (an overloaded machine)"
        assert _acquired(r) == []

        # the renewed lock lapses: B gets it, delivered for the second time
        r = _fetch(b, group, "B", 3, tid, max_wait_ms=LOCK_MS + 2000)
        assert _acquired(r) == [(0, 0, 2)]
        assert time.monotonic() >= renewed_deadline - 0.05
        p = _partition(_ack(a, group, "A", 2, tid, [{"first_offset": 0, "last_offset": 0,
                                                     "acknowledge_types": [ACCEPT]}]))
        assert p["error_code"] == INVALID_RECORD_STATE  # A's lock is gone
        r = _ack(b, group, "B", 4, tid, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [ACCEPT]}])
        assert _partition(r)["error_code"] == 0


def test_renew_ack_fetch_and_mixed_types(renew_broker: Any) -> None:
    """A ShareFetch with IsRenewAck only acknowledges (its fetch limits must be 0, else INVALID_REQUEST) and acquires
    nothing; RENEW mixes with the other types per offset; version 1 knows no RENEW."""
    group = "renew-" + uuid.uuid4().hex[:6]
    with RawClient(renew_broker.port) as c:
        tid = _setup(c, [3, 2])
        assert _acquired(_fetch(c, group, "A", 0, tid, max_records=3, max_wait_ms=5000)) == [(0, 2, 1)]
        body = {"group_id": group, "member_id": "A", "share_session_epoch": 1, "max_wait_ms": 0, "min_bytes": 0,
                "max_bytes": 0, "max_records": 10, "batch_size": 10, "share_acquire_mode": 0, "is_renew_ack": True,
                "topics": [], "forgotten_topics_data": []}
        r = c.request(FETCH, 2, body)
        assert r["error_code"] == INVALID_REQUEST and r["responses"] == []
        acks = [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [RENEW, ACCEPT, RELEASE]}]
        r = _fetch(c, group, "A", 1, tid, acks, renew=True)
        p = _partition(r)
        assert r["error_code"] == 0 and p["acknowledge_error_code"] == 0 and p["acquired_records"] == [], r
        # offset 0 still A's (renewed), 1 accepted, 2 released: a fetch gets 2 again (second delivery) and 3-4
        assert _acquired(_fetch(c, group, "A", 2, tid, max_wait_ms=5000)) == [(2, 2, 2), (3, 4, 1)]
        r = _ack(c, group, "A", 3, tid, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [RENEW]}],
                 version=1)
        assert _partition(r)["error_code"] == INVALID_REQUEST
        r = _ack(c, group, "A", 4, tid, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [ACCEPT]},
                                         {"first_offset": 2, "last_offset": 4, "acknowledge_types": [ACCEPT]}])
        assert _partition(r)["error_code"] == 0


def test_renew_disabled_by_the_group_config(renew_broker: Any) -> None:
    """``share.renew.acknowledge.enable``: BOOLEAN, default true, validated as Kafka's; false refuses a renewal with
    INVALID_RECORD_STATE and leaves the record acquired."""
    group = "renew-" + uuid.uuid4().hex[:6]

    def alter(value: str) -> int:
        r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
                {"name": "share.renew.acknowledge.enable", "config_operation": 0, "value": value}]}],
            "validate_only": False})
        code: int = r["responses"][0]["error_code"]
        return code

    def described() -> tuple[str, int]:
        r = c.request(DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group,
                                                           "configuration_keys": ["share.renew.acknowledge.enable"]}],
                                            "include_synonyms": False, "include_documentation": False})
        (entry,) = r["results"][0]["configs"]
        return entry["value"], entry["config_type"]

    with RawClient(renew_broker.port) as c:
        tid = _setup(c, [1])
        assert described() == ("true", TYPE_BOOLEAN)
        assert alter("1") == INVALID_CONFIG  # Kafka: "Expected value to be either true or false"
        assert alter("FALSE") == 0
        assert described() == ("FALSE", TYPE_BOOLEAN)
        assert _acquired(_fetch(c, group, "A", 0, tid, max_wait_ms=5000)) == [(0, 0, 1)]
        r = _ack(c, group, "A", 1, tid, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [RENEW]}])
        assert _partition(r)["error_code"] == INVALID_RECORD_STATE
        r = _ack(c, group, "A", 2, tid, [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [ACCEPT]}])
        assert _partition(r)["error_code"] == 0  # still A's


def test_record_limit_acquire_mode(renew_broker: Any) -> None:
    """ShareAcquireMode 1 (record-limit, KIP-1206) acquires at most MaxRecords records, splitting a batch; 0
    (batch-optimized) acquires whole batches; anything else is INVALID_REQUEST."""
    group = "renew-" + uuid.uuid4().hex[:6]
    with RawClient(renew_broker.port) as c:
        tid = _setup(c, [5])
        assert _fetch(c, group, "A", 0, tid, mode=7)["error_code"] == INVALID_REQUEST
        assert _acquired(_fetch(c, group, "A", 0, tid, max_records=2, max_wait_ms=5000, mode=1)) == [(0, 1, 1)]
        assert _acquired(_fetch(c, group, "A", 1, tid, max_records=2, mode=1)) == [(2, 3, 1)]
        assert _acquired(_fetch(c, group, "A", 2, tid, max_records=2, mode=0)) == [(4, 4, 1)]
        other = "renew-" + uuid.uuid4().hex[:6]
        assert _acquired(_fetch(c, other, "A", 0, tid, max_records=2, max_wait_ms=5000, mode=0)) == [(0, 4, 1)]
