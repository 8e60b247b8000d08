"""The share-state lifecycle as Kafka's group coordinator runs it, against a real ``tidelog serve``: a subscribed
partition is recorded *initializing*, its state initialized in ``__share_group_state`` (InitializeShareGroupState),
then recorded *initialized* and only then assigned; a failed initialization is retried at the next heartbeat; a
topic-state delete interrupted (the share coordinator unavailable) stays in ``DeletingTopics`` and is resumed at the
next load; a changed ``share.record.lock.duration.ms`` applies to the next acquisition.

Failures are real: ``min.insync.replicas`` 2 on the one-node ``__share_group_state`` makes every state write fail
with NOT_ENOUGH_REPLICAS (the share coordinator answers COORDINATOR_NOT_AVAILABLE past its write timeout)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from helpers import RawClient, produce_body, wait_for
from tests.broker.group.share.test_share_group_records import (
    DELETE_GROUPS,
    DELETE_TOPICS,
    FETCH,
    PRODUCE,
    _fetch_ack,
    _group_records,
    _hb,
    _setup,
    _state_keys,
)

from tidelog.broker.group.consumer_records import kafka_uuid
from tidelog.broker.group.share_state_records import STATE_TOPIC
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

BROKER = {"share.auto.offset.reset": "earliest", "offsets.topic.num.partitions": "3",
          "share.coordinator.state.topic.num.partitions": "3", "delete.topic.enable": "true",
          "share.coordinator.write.timeout.ms": "400", "group.share.min.record.lock.duration.ms": "500"}


@pytest.fixture(scope="module")
def init_broker(broker_factory: Any) -> Any:
    return broker_factory(BROKER)


def _tid_text(tid: Any) -> str:
    return kafka_uuid(tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid))


def _state_meta(b: Any, group: str) -> list[dict | None]:
    return [d for t, _, d in _group_records(b.data_dir, group) if t == "15"]


def _parts(infos: list[dict]) -> list[tuple[str, list[int]]]:
    return [(i["topicName"], sorted(i["partitions"])) for i in infos]


def _alter(admin: AdminClient, kind: ResourceType, name: str, key: str, value: str) -> None:
    res = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def _state_writes_fail(b: Any, fail: bool) -> None:
    _alter(AdminClient({"bootstrap.servers": b.bootstrap}), ResourceType.TOPIC, STATE_TOPIC, "min.insync.replicas",
           "2" if fail else "1")


def _fetch(c: RawClient, group: str, member: str, tid: Any, epoch: int = 0) -> dict:
    r = c.request(FETCH, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0,
                             "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
                             "topics": [{"topic_id": tid, "partitions": [
                                 {"partition_index": 0, "acknowledgement_batches": []}]}],
                             "forgotten_topics_data": []})
    assert r["error_code"] == 0, r
    if not r["responses"]:  # nothing acquired: the partition may be left out of the answer
        return {"acquired_records": []}
    return r["responses"][0]["partitions"][0]


def test_first_heartbeat_initializes_then_assigns(init_broker: Any) -> None:
    """The first heartbeat records the partition initializing, initializes its state, records it initialized and
    answers with it assigned (epoch 1 at the join, 2 with the initialized partition); the state's snapshot is in
    ``__share_group_state``; the member then reads from ``share.auto.offset.reset`` (earliest)."""
    group = "sinit-" + uuid.uuid4().hex[:6]
    with RawClient(init_broker.port) as c:
        topic, tid = _setup(c, 3)
        r = _hb(c, group, "m1", 0, [topic])
        assert r["error_code"] == 0 and r["member_epoch"] == 2, r
        assert r["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}], r
        state = _state_keys(init_broker.data_dir, group, tid)
        assert state == [("0", False)], state  # the snapshot InitializeShareGroupState wrote
        p = _fetch(c, group, "m1", tid)
        assert [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in p["acquired_records"]] == [
            (0, 2, 1)], p
    metas = _state_meta(init_broker, group)
    assert len(metas) == 2, metas
    first, second = metas
    assert first is not None and _parts(first["initializingTopics"]) == [(topic, [0])], first
    assert first["initializedTopics"] == [] and first["deletingTopics"] == []
    assert second is not None and second["initializingTopics"] == [], second
    assert _parts(second["initializedTopics"]) == [(topic, [0])]
    assert second["initializedTopics"][0]["topicId"] == _tid_text(tid)
    # the member's assignment was written after the partition became initialized: its first one was empty
    assigned = [d for t, m, d in _group_records(init_broker.data_dir, group) if t == "14" and m == "m1"]
    assert [a["memberEpoch"] for a in assigned if a] == [1, 2], assigned
    assert assigned[0] is not None and assigned[0]["assignedPartitions"] == []


def test_failed_initialization_is_retried(init_broker: Any) -> None:
    """While the share coordinator cannot write, the initialization fails: the partition leaves InitializingTopics
    and is not assigned; the next heartbeat, once it can write again, initializes and assigns it."""
    group = "sinit-fail-" + uuid.uuid4().hex[:6]
    with RawClient(init_broker.port) as c:
        topic, tid = _setup(c, 2)
        warm = _hb(c, "sinit-warm-" + uuid.uuid4().hex[:6], "w", 0, [topic])  # makes __share_group_state
        assert warm["error_code"] == 0
        _state_writes_fail(init_broker, True)
        try:
            r = _hb(c, group, "m1", 0, [topic])
            assert r["error_code"] == 0 and r["member_epoch"] == 1, r
            assert r["assignment"]["topic_partitions"] == [], r
            metas = _state_meta(init_broker, group)
            assert [(_parts(m["initializingTopics"]), _parts(m["initializedTopics"])) for m in metas if m] == [
                ([(topic, [0])], []), ([], [])], metas
            assert _state_keys(init_broker.data_dir, group, tid) == []
        finally:
            _state_writes_fail(init_broker, False)
        r = _hb(c, group, "m1", 1, None)
        assert r["error_code"] == 0 and r["member_epoch"] == 2, r
        assert r["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}], r
        assert _state_keys(init_broker.data_dir, group, tid) == [("0", False)]
    last = _state_meta(init_broker, group)[-1]
    assert last is not None and _parts(last["initializedTopics"]) == [(topic, [0])] and not last["initializingTopics"]


def test_interrupted_topic_state_delete_resumed_at_load(init_broker: Any) -> None:
    """A topic deleted while the share coordinator cannot write: the group records it in DeletingTopics and its
    state stays. After a kill -9 and restart (writes possible again) the load resumes the delete: the state's
    tombstones are written and the topic leaves DeletingTopics and InitializedTopics."""
    group = "sinit-del-" + uuid.uuid4().hex[:6]
    with RawClient(init_broker.port) as c:
        topic, tid = _setup(c, 3)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        _fetch_ack(c, group, "m1", tid, 3)
        _state_writes_fail(init_broker, True)
        try:
            r = c.request(DELETE_TOPICS, 6, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                             "timeout_ms": 10000})
            assert r["responses"][0]["error_code"] == 0, r

            def deleting() -> bool:
                metas = [m for m in _state_meta(init_broker, group) if m]
                return bool(metas) and metas[-1]["deletingTopics"] == [
                    {"topicId": _tid_text(tid), "topicName": topic}]

            wait_for(deleting, 15, "DeletingTopics written")
            # the delete fails (write timeout 0.4 s, retried within it): no tombstone, the record stays
            time.sleep(1.0)  # nothing to await: the point is that nothing happens
            assert all(not tomb for _, tomb in _state_keys(init_broker.data_dir, group, tid))
            assert deleting()
        finally:
            _state_writes_fail(init_broker, False)
    init_broker.kill()
    init_broker.start()

    def resumed() -> bool:
        state = _state_keys(init_broker.data_dir, group, tid)
        metas = [m for m in _state_meta(init_broker, group) if m]
        return state[-2:] == [("0", True), ("1", True)] and not metas[-1]["deletingTopics"] and \
            _tid_text(tid) not in str(metas[-1])

    wait_for(resumed, 20, "the delete resumed after the load")


def test_delete_groups_covers_an_interrupted_topic_state_delete(init_broker: Any) -> None:
    """An empty share group whose topic-state delete was interrupted (the topic in DeletingTopics, its state still
    there): DeleteGroups deletes that state too, then the group's records."""
    group = "sinit-delg-" + uuid.uuid4().hex[:6]
    with RawClient(init_broker.port) as c:
        topic, tid = _setup(c, 2)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        _fetch_ack(c, group, "m1", tid, 2)
        assert _hb(c, group, "m1", -1, None)["error_code"] == 0  # empty: no heartbeat resumes the delete
        _state_writes_fail(init_broker, True)
        try:
            r = c.request(DELETE_TOPICS, 6, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                             "timeout_ms": 10000})
            assert r["responses"][0]["error_code"] == 0, r
            wait_for(lambda: any(m and m["deletingTopics"] for m in _state_meta(init_broker, group)), 15,
                  "DeletingTopics written")
            time.sleep(1.0)  # the delete fails within its 0.4 s write timeout: nothing to await
            assert all(not tomb for _, tomb in _state_keys(init_broker.data_dir, group, tid))
        finally:
            _state_writes_fail(init_broker, False)
        r = c.request(DELETE_GROUPS, 2, {"groups_names": [group]})
        assert r["results"][0]["error_code"] == 0, r
    state = _state_keys(init_broker.data_dir, group, tid)
    assert state[-2:] == [("0", True), ("1", True)], state
    recs = _group_records(init_broker.data_dir, group)
    assert recs[-1] == ("11", None, None), recs


def test_lock_duration_follows_the_group_config(init_broker: Any) -> None:
    """A share partition made under the 30 s default lock: after the group's ``share.record.lock.duration.ms`` is set
    to 1 s, the next acquisition is locked for 1 s (the answer says so, and the record comes back after it), while the
    record acquired before keeps its 30 s lock."""
    group = "sinit-lock-" + uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": init_broker.bootstrap})
    with RawClient(init_broker.port) as c:
        topic, tid = _setup(c, 1)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        p = _fetch(c, group, "m1", tid)
        assert [(a["first_offset"], a["last_offset"]) for a in p["acquired_records"]] == [(0, 0)], p
        _alter(admin, ResourceType.GROUP, group, "share.record.lock.duration.ms", "1000")
        r = c.request(PRODUCE, 9, produce_body(topic, 0, build_batch([(None, b"later", [])])))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
        r = c.request(FETCH, 1, {"group_id": group, "member_id": "m1", "share_session_epoch": 1, "max_wait_ms": 0,
                                 "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
                                 "topics": [{"topic_id": tid, "partitions": [
                                     {"partition_index": 0, "acknowledgement_batches": []}]}],
                                 "forgotten_topics_data": []})
        assert r["acquisition_lock_timeout_ms"] == 1000, r
        got = r["responses"][0]["partitions"][0]["acquired_records"]
        assert [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in got] == [(1, 1, 1)], r
        acquired_at = time.monotonic()
        with RawClient(init_broker.port) as c2:
            def redelivered() -> list:
                got = _fetch(c2, group, "m2", tid)["acquired_records"]
                return [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in got]

            again = wait_for(redelivered, 10, "offset 1 back after its 1 s lock")
            assert again == [(1, 1, 2)], again  # offset 0 keeps its 30 s lock
            assert time.monotonic() - acquired_at >= 0.9


def _scrape(b: Any) -> dict[tuple[str, str], float]:
    """(metric name, labels text) -> value of the broker's /metrics page."""
    import urllib.request

    assert b.metrics_port, "metrics endpoint"
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("tidelog_share_"):
            head, value = line.rsplit(" ", 1)
            name, _, labels = head.partition("{")
            out[(name, labels.rstrip("}"))] = float(value)
    return out


def test_share_metrics_on_the_prometheus_page(init_broker: Any) -> None:
    """ShareFetch / ShareAcknowledge requests, records acquired and acknowledged by type, the share partition's
    in-flight records and runs, the groups by state and the initializations, on the broker's /metrics page."""
    group = "sinit-metrics-" + uuid.uuid4().hex[:6]
    before = _scrape(init_broker)
    with RawClient(init_broker.port) as c:
        topic, tid = _setup(c, 4)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        p = _fetch(c, group, "m1", tid)
        assert [(a["first_offset"], a["last_offset"]) for a in p["acquired_records"]] == [(0, 3)], p
        r = c.request(79, 1, {"group_id": group, "member_id": "m1", "share_session_epoch": 1, "topics": [
            {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 2, "acknowledge_types": [1, 1, 3]}]}]}]})
        assert r["responses"][0]["partitions"][0]["error_code"] == 0, r
    after = _scrape(init_broker)

    def delta(name: str, labels: str = "") -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert delta("tidelog_share_fetch_requests_total") == 1
    assert delta("tidelog_share_acknowledgement_requests_total") == 1
    assert delta("tidelog_share_records_acquired_total") == 4
    assert delta("tidelog_share_record_acknowledgements_total", 'ack_type="Accept"') == 2
    assert delta("tidelog_share_record_acknowledgements_total", 'ack_type="Reject"') == 1
    assert delta("tidelog_share_state_initializations_total", 'result="success"') == 1
    assert delta("tidelog_share_group_rebalances_total") == 2  # the join, then the initialized partition
    labels = f'group="{group}",partition="0",topic="{topic}"'
    assert after[("tidelog_share_partition_in_flight_records", labels)] == 1  # offset 3 still acquired
    assert after[("tidelog_share_partition_in_flight_batches", labels)] == 1
    assert after[("tidelog_share_groups", 'state="Stable"')] >= 1
