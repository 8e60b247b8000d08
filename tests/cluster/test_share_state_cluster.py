"""Share-group state in a ZooKeeper-mode cluster (3 brokers + ZooKeeper): the share partition's leader writes its state
to the share coordinator on *another* broker (the leader of the ``__share_group_state`` partition of its key, through
WriteShareGroupState over the inter-broker channel); when the share partition's leader is killed -9, the new leader
reads the state back (ReadShareGroupState): the acknowledged records are not delivered again, the others are, with
their delivery count + 1."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from support import create_topic, request, until

from tidelog.broker.group.share_state_records import STATE_TOPIC, ShareKey, state_partition
from tidelog.records.batch import build_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRODUCE, LIST_OFFSETS, METADATA, FETCH, ACK = 0, 2, 3, 78, 79
ACCEPT = 1
STATE_PARTITIONS = 3


@pytest.fixture(scope="module")
def state_cluster(cluster_with: Any) -> Any:
    return cluster_with({"share.auto.offset.reset": "earliest",
                         "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS)})


def _metadata(broker: Any, topics: list[str]) -> dict[str, Any]:
    md = request(broker, METADATA, 12, {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
    return {t["name"]: t for t in md["topics"]}


def _fetch(broker: Any, group: str, member: str, epoch: int, tid: Any) -> dict:
    return request(broker, FETCH, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
        "forgotten_topics_data": []})


def _parts(r: dict) -> list[dict]:
    return [p for t in r["responses"] for p in t["partitions"]]


def _acquired(r: dict) -> list[tuple[int, int, int]] | None:
    """The acquired ranges, None when the partition answered an error (retried by the caller)."""
    parts = _parts(r)
    if r["error_code"] or any(p["error_code"] for p in parts):
        return None
    return [(a["first_offset"], a["last_offset"], a["delivery_count"]) for p in parts for a in p["acquired_records"]]


def test_state_on_another_broker_survives_the_share_partition_leader(state_cluster: Any) -> None:
    cluster = state_cluster
    b1 = cluster.brokers[1]
    topic = f"sstate-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3]])  # broker 1 leads the share partition
    for i in range(12):  # one batch per record (acquisition takes whole batches)
        r = request(b1, PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, f"v{i}".encode(), [])])}]}]})
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
    tid = _metadata(b1, [topic])[topic]["topic_id"]
    # the first share fetch creates __share_group_state (through ZooKeeper; answered with a retriable error until
    # the controller elected its leaders)
    until("a first share fetch", lambda: _acquired(_fetch(b1, "warm-" + uuid.uuid4().hex[:6], "w", 0, tid)))

    def state_leaders() -> dict[int, int] | None:
        t = _metadata(b1, [STATE_TOPIC])[STATE_TOPIC]
        leaders = {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
        return leaders if t["error_code"] == 0 and len(leaders) == STATE_PARTITIONS and min(leaders.values()) > 0 \
            else None

    leaders = until("__share_group_state led", state_leaders)
    tid_bytes = tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid)
    group = next(g for g in (f"sg-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                 if leaders[state_partition(ShareKey(g, tid_bytes, 0), STATE_PARTITIONS)] != 1)
    coordinator = leaders[state_partition(ShareKey(group, tid_bytes, 0), STATE_PARTITIONS)]
    assert coordinator != 1  # the state lives on another broker than the share partition

    got = until("records acquired on broker 1", lambda: _acquired(_fetch(b1, group, "m1", 0, tid)))
    assert got == [(0, 11, 1)]
    r = request(b1, ACK, 1, {"group_id": group, "member_id": "m1", "share_session_epoch": 1, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 4, "acknowledge_types": [ACCEPT]},
            {"first_offset": 6, "last_offset": 6, "acknowledge_types": [ACCEPT]}]}]}]})
    assert r["error_code"] == 0 and r["responses"][0]["partitions"][0]["error_code"] == 0, r  # written remotely

    b1.kill()  # SIGKILL the share partition's leader: its in-memory share partition is gone
    new = cluster.brokers[2] if coordinator == 3 else cluster.brokers[3]  # not the coordinator: a remote read

    def led_elsewhere() -> bool:
        t = _metadata(new, [topic])[topic]
        return t["partitions"][0]["leader_id"] in (2, 3)

    until("a new leader of the share partition", led_elsewhere)
    leader = cluster.brokers[_metadata(new, [topic])[topic]["partitions"][0]["leader_id"]]

    def high_watermark() -> int:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
        p = request(leader, LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
        return int(p["offset"]) if p["error_code"] == 0 else -1

    # a new leader's high watermark reaches its log end only once the other ISR member fetched from it (Kafka's
    # rule): share fetches acquire below it, so wait for all 12 to be readable before the one fetch that is checked
    until("the new leader's high watermark over the 12 records", lambda: high_watermark() == 12)
    got = until("records acquired on the new leader", lambda: _acquired(_fetch(leader, group, "m2", 0, tid)))
    assert got == [(5, 5, 2), (7, 11, 2)], got  # 0-4 and 6 acknowledged: never again; the rest once more
