"""Share groups' own records in ``__consumer_offsets`` (Kafka's ShareGroup* types 10-15), against a real
``tidelog serve``: membership survives a kill -9 of the broker (members go on with their epochs), the records decode
with ``dump-log --offsets-decoder``; DeleteGroups of a share group deletes its share state in
``__share_group_state`` and tombstones its records; a deleted topic's share state is deleted and a topic created again
with the same name starts afresh; FindCoordinator key type 2 finds the share coordinator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import RawClient, new_topic, produce_body

from tidelog.broker.group import records as rec
from tidelog.broker.group import share_group_records as srec
from tidelog.broker.group.consumer_records import kafka_uuid
from tidelog.broker.group.share_state_records import STATE_TOPIC, ShareKey, state_partition
from tidelog.cli.main import cli
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

HB, DESCRIBE, FETCH, ACK, FIND, DELETE_GROUPS, SUMMARY = 76, 77, 78, 79, 10, 42, 87
CREATE_TOPICS, DELETE_TOPICS, PRODUCE, METADATA = 19, 20, 0, 3
ACCEPT = 1
INVALID_REQUEST, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, COORDINATOR_LOAD_IN_PROGRESS = 42, 68, 69, 14
OFFSETS_PARTITIONS, STATE_PARTITIONS = 3, 3
MEMBER = Path(__file__).resolve().parent / "share_member.py"
BROKER = {"share.auto.offset.reset": "earliest", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
          "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS), "delete.topic.enable": "true"}


# ----------------------------------------------------------------------------------------------- unit


def test_records_round_trip_and_kafka_41_layout() -> None:
    tid = os.urandom(16)
    key = srec.encode_key(srec.ShareGroupKey(srec.CURRENT_ASSIGNMENT, "g", "m"))
    assert key[:2] == b"\x00\x0e" and srec.decode_key(key) == srec.ShareGroupKey(14, "g", "m")
    a = srec.ShareCurrentAssignment(7, 6, srec.STABLE, {tid: [0, 2]})
    assert srec.decode_current_assignment(srec.encode_current_assignment(a)) == a
    meta = srec.StatePartitionMetadata({}, {tid: srec.TopicPartitionsInfo("t", [0, 1], 5)}, {})
    assert srec.decode_state_partition_metadata(srec.encode_state_partition_metadata(meta)) == meta
    # Kafka 4.1's ShareGroupStatePartitionMetadataValue: TopicPartitionsInfo without CreateTimestamp
    v41 = (b"\x00\x00" + b"\x01" + b"\x02" + tid + b"\x02t" + b"\x02\x00\x00\x00\x03" + b"\x00" + b"\x01" + b"\x00")
    got = srec.decode_state_partition_metadata(v41)
    assert got.initialized == {tid: srec.TopicPartitionsInfo("t", [3], 0)} and not got.initializing
    k, v = srec.to_json(srec.encode_key(srec.ShareGroupKey(srec.MEMBER_METADATA, "g", "m")),
                        srec.encode_member_metadata(srec.ShareMemberMetadata(None, "c", "/h", ["b", "a"])))
    assert k == {"type": "10", "data": {"groupId": "g", "memberId": "m"}}
    assert v == {"version": "0", "data": {"rackId": None, "clientId": "c", "clientHost": "/h",
                                          "subscribedTopicNames": ["a", "b"]}}
    # Kafka 4.1's ShareGroupMetadataValue carries a tagged MetadataHash: skipped on read
    tagged = b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x01\x00\x08" + b"\x00" * 8
    assert srec.decode_epoch(tagged) == 5


# ----------------------------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def records_broker(broker_factory: Any) -> Any:
    return broker_factory(BROKER)


def _setup(c: RawClient, records: int, topic: str | None = None) -> tuple[str, Any]:
    topic = topic or new_topic("sgrec")
    r = c.request(CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                     "timeout_ms": 10000})
    assert r["topics"][0]["error_code"] == 0, r
    for i in range(records):
        r = c.request(PRODUCE, 9, produce_body(topic, 0, build_batch([(None, f"v{i}".encode(), [])])))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
    md = c.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
    return topic, md["topics"][0]["topic_id"]


def _hb(c: RawClient, group: str, member: str, epoch: int, topics: list[str] | None) -> dict:
    return c.request(HB, 1, {"group_id": group, "rack_id": None, "member_id": member, "member_epoch": epoch,
                             "subscribed_topic_names": topics})


def _describe(c: RawClient, group: str) -> dict:
    """ShareGroupDescribe, asked again (bounded) while the coordinator still loads after a start."""
    deadline = time.monotonic() + 15
    while True:
        d = c.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
        if d["error_code"] != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return d
        time.sleep(0.05)  # the load ends in a worker thread the client cannot await


def _fetch_ack(c: RawClient, group: str, member: str, tid: Any, n: int) -> None:
    """Acquire the first ``n`` records and accept them (ShareFetch, then ShareAcknowledge)."""
    r = c.request(FETCH, 1, {"group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait_ms": 0,
                             "min_bytes": 1, "max_bytes": 1 << 20, "max_records": n, "batch_size": n,
                             "topics": [{"topic_id": tid, "partitions": [
                                 {"partition_index": 0, "acknowledgement_batches": []}]}],
                             "forgotten_topics_data": []})
    acq = r["responses"][0]["partitions"][0]["acquired_records"]
    assert acq and acq[0]["first_offset"] == 0, r
    r = c.request(ACK, 1, {"group_id": group, "member_id": member, "share_session_epoch": 1, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": n - 1, "acknowledge_types": [ACCEPT]}]}]}]})
    assert r["responses"][0]["partitions"][0]["error_code"] == 0, r


def _summary(c: RawClient, group: str, tid: Any) -> int:
    r = c.request(SUMMARY, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": 0, "leader_epoch": -1}]}]})
    p = r["results"][0]["partitions"][0]
    assert p["error_code"] == 0, r
    return int(p["start_offset"])


def _dump(data_dir: Path, topic: str, partition: int, flag: str) -> list[dict]:
    files = sorted(str(p) for p in (data_dir / f"{topic}-{partition}").glob("*.log"))
    out = CliRunner().invoke(cli, ["dump-log", flag, "--json", "--files", *files])
    assert out.exit_code == 0, out.output
    return [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]


def _group_records(data_dir: Path, group: str) -> list[tuple[str, str | None, dict | None]]:
    """(key type, member id, payload data or None for a tombstone) of the group's ShareGroup* records, in order."""
    p = rec.partition_for(group, OFFSETS_PARTITIONS)
    out = []
    for r in _dump(data_dir, "__consumer_offsets", p, "--offsets-decoder"):
        k = r.get("key_decoded")
        if not k or k["data"].get("groupId") != group or int(k["type"]) not in srec.KEY_TYPES:
            continue
        payload = r.get("payload_decoded")
        out.append((k["type"], k["data"].get("memberId"), payload["data"] if payload else None))
    return out


def _state_keys(data_dir: Path, group: str, tid: Any) -> list[tuple[str, bool]]:
    """(ShareSnapshot "0" / ShareUpdate "1", tombstone?) of the share partition's state records, in order."""
    key = ShareKey(group, tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid), 0)
    out = []
    for r in _dump(data_dir, STATE_TOPIC, state_partition(key, STATE_PARTITIONS), "--share-group-state-decoder"):
        k = r.get("key_decoded")
        if k and k["data"]["groupId"] == group and k["data"]["topicId"] == kafka_uuid(key.topic_id):
            out.append((k["type"], r.get("payload_decoded") is None))
    return out


# ----------------------------------------------------------------------------------------------- membership


def test_membership_survives_broker_kill9(records_broker: Any) -> None:
    """Two members join; the records decode as Kafka's; after a kill -9 and restart both are still members with
    their epochs (a heartbeat with the old epoch is accepted, no rejoin); a member leaving tombstones its records."""
    group = "sgr-" + uuid.uuid4().hex[:6]
    with RawClient(records_broker.port) as c:
        topic, tid = _setup(c, 0)
        r1 = _hb(c, group, "m1", 0, [topic])  # epoch 1, then 2 with the initialized partition assigned
        assert r1["error_code"] == 0 and r1["member_epoch"] == 2
        r2 = _hb(c, group, "m2", 0, [topic])
        assert r2["error_code"] == 0 and r2["member_epoch"] == 3
        r1 = _hb(c, group, "m1", 2, [topic])
        assert r1["error_code"] == 0 and r1["member_epoch"] == 3
    recs = _group_records(records_broker.data_dir, group)
    latest = {(t, m): d for t, m, d in recs}
    tid_text = kafka_uuid(tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid))
    assert latest[("11", None)] == {"epoch": 3}
    assert latest[("12", None)] == {"assignmentEpoch": 3}
    assert latest[("10", "m1")]["subscribedTopicNames"] == [topic]
    assert latest[("13", "m2")] == {"topicPartitions": [{"topicId": tid_text, "partitions": [0]}]}
    assert latest[("14", "m1")] == {"memberEpoch": 3, "previousMemberEpoch": 2, "state": 0,
                                    "assignedPartitions": [{"topicId": tid_text, "partitions": [0]}]}
    assert latest[("15", None)]["initializedTopics"][0]["topicName"] == topic
    # Kafka's write order within the group's first write: subscription, group epoch, target, assignment epoch,
    # current assignment
    assert [t for t, _, _ in recs[:5]] == ["10", "11", "13", "12", "14"], recs

    records_broker.kill()
    records_broker.start()
    with RawClient(records_broker.port) as c:
        d = _describe(c, group)
        assert d["error_code"] == 0 and d["group_epoch"] == 3, d
        assert sorted((m["member_id"], m["member_epoch"]) for m in d["members"]) == [("m1", 3), ("m2", 3)]
        r1 = _hb(c, group, "m1", 3, None)  # goes on with its epoch: no UNKNOWN_MEMBER_ID, no rejoin
        assert r1["error_code"] == 0 and r1["member_epoch"] == 3, r1
        assert r1["assignment"]["topic_partitions"][0]["partitions"] == [0]  # told again after the load
        r2 = _hb(c, group, "m2", -1, None)
        assert r2["error_code"] == 0
        assert _describe(c, group)["group_epoch"] == 4
    tail = [(t, m, d) for t, m, d in _group_records(records_broker.data_dir, group)][-6:]
    assert [(t, m) for t, m, d in tail if d is None] == [("14", "m2"), ("13", "m2"), ("10", "m2")], tail


def test_share_consumer_goes_on_through_broker_restart(records_broker: Any) -> None:
    """confluent-kafka's ShareConsumer (implicit acknowledgement, in a subprocess) consumes while the broker is
    killed -9 and restarted: right after the restart, before the client is back, the group is loaded from its
    records with the member; the member goes on and every record is delivered."""
    bs = records_broker.bootstrap
    topic = new_topic("sgr-cons")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(20):
        p.produce(topic, f"a{i}".encode())
    assert p.flush(30) == 0
    group = "sgr-c-" + uuid.uuid4().hex[:6]
    events: list[dict[str, Any]] = []
    first = threading.Event()
    proc = subprocess.Popen([sys.executable, str(MEMBER), bs, group, topic, json.dumps({"max_records": 5})],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            events.append(json.loads(line))
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first.wait(60), "the share consumer got nothing"
        with RawClient(records_broker.port) as c:
            before = _describe(c, group)
        assert len(before["members"]) == 1
        member_id = before["members"][0]["member_id"]
        records_broker.kill()
        records_broker.start()
        with RawClient(records_broker.port) as c:
            after = _describe(c, group)
        assert after["error_code"] == 0 and [m["member_id"] for m in after["members"]] == [member_id], after
        assert after["group_epoch"] == before["group_epoch"]
        p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
        for i in range(20):
            p.produce(topic, f"b{i}".encode())
        assert p.flush(30) == 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not {f"b{i}" for i in range(20)} <= {e.get("v") for e in events}:
            time.sleep(0.1)  # polling the subprocess's output (bounded)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        reader.join(5)
    got = {e["v"] for e in events if e["event"] == "msg"}
    assert {f"b{i}" for i in range(20)} <= got, sorted(got)
    with RawClient(records_broker.port) as c:
        d = _describe(c, group)
    # the member left at close: one member, one leave; had it rejoined after the restart, the epoch would have
    # moved further (a new group from epoch 1, or a rejoin bump)
    assert d["members"] == [] and d["group_epoch"] == before["group_epoch"] + 1, (before, d)


# ----------------------------------------------------------------------------------------------- deletion


def test_delete_group_deletes_its_share_state(records_broker: Any) -> None:
    group = "sgr-del-" + uuid.uuid4().hex[:6]
    with RawClient(records_broker.port) as c:
        topic, tid = _setup(c, 6)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        _fetch_ack(c, group, "m1", tid, 4)
        assert _summary(c, group, tid) == 4
        r = c.request(DELETE_GROUPS, 2, {"groups_names": [group]})
        assert r["results"][0]["error_code"] == NON_EMPTY_GROUP
        assert _hb(c, group, "m1", -1, None)["error_code"] == 0
        r = c.request(DELETE_GROUPS, 2, {"groups_names": [group]})
        assert r["results"][0]["error_code"] == 0, r
        assert _summary(c, group, tid) == -1  # the share partition's state is gone
        assert _describe(c, group)["error_code"] == GROUP_ID_NOT_FOUND
    state = _state_keys(records_broker.data_dir, group, tid)
    assert state[-2:] == [("0", True), ("1", True)], state  # tombstones for ShareSnapshot and ShareUpdate
    recs = _group_records(records_broker.data_dir, group)
    assert recs[-1] == ("11", None, None), recs  # the group's ShareGroupMetadata tombstoned last
    latest = {(t, m): d for t, m, d in recs}
    assert latest and all(d is None for d in latest.values()), latest  # every key's last record a tombstone
    records_broker.kill()
    records_broker.start()
    with RawClient(records_broker.port) as c:
        assert _describe(c, group)["error_code"] == GROUP_ID_NOT_FOUND  # not loaded back


def test_deleted_topic_state_deleted_and_not_inherited(records_broker: Any) -> None:
    group = "sgr-topic-" + uuid.uuid4().hex[:6]
    with RawClient(records_broker.port) as c:
        topic, tid = _setup(c, 5)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        _fetch_ack(c, group, "m1", tid, 5)
        assert _summary(c, group, tid) == 5
        r = c.request(DELETE_TOPICS, 6, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}], "timeout_ms": 10000})
        assert r["responses"][0]["error_code"] == 0, r
        deadline = time.monotonic() + 15
        while _summary(c, group, tid) != -1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the state delete runs in the background after the topic is gone (bounded)
        assert _summary(c, group, tid) == -1
        _topic2, tid2 = _setup(c, 3, topic)  # the same name, a new topic id
        assert tid2 != tid
        r = c.request(FETCH, 1, {"group_id": group, "member_id": "m1", "share_session_epoch": 0, "max_wait_ms": 0,
                                 "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                                 "topics": [{"topic_id": tid2, "partitions": [
                                     {"partition_index": 0, "acknowledgement_batches": []}]}],
                                 "forgotten_topics_data": []})
        acq = r["responses"][0]["partitions"][0]["acquired_records"]
        assert [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in acq] == [(0, 2, 1)], r
    state = _state_keys(records_broker.data_dir, group, tid)
    assert state[-2:] == [("0", True), ("1", True)], state
    meta = [d for t, _, d in _group_records(records_broker.data_dir, group) if t == "15"]
    tid_text = kafka_uuid(tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid))
    assert any(d and d["deletingTopics"] == [{"topicId": tid_text, "topicName": topic}] for d in meta), meta
    assert meta[-1] is not None and tid_text not in json.dumps(meta[-1]), meta[-1]


# ----------------------------------------------------------------------------------------------- FindCoordinator


def test_find_coordinator_share_key(records_broker: Any) -> None:
    tid = uuid.uuid4()
    key = f"grp:x:{kafka_uuid(tid.bytes)}:4"
    with RawClient(records_broker.port) as c:
        node = c.request(FIND, 6, {"key_type": 0, "coordinator_keys": ["g"]})["coordinators"][0]["node_id"]
        r = c.request(FIND, 6, {"key_type": 2, "coordinator_keys": [key, "not-a-share-key", "g:AAAA:1"]})
        got = [(x["key"], x["error_code"], x["node_id"]) for x in r["coordinators"]]
        assert got[0] == (key, 0, node) and node >= 0, r
        assert got[1][1:] == (INVALID_REQUEST, -1) and got[2][1:] == (INVALID_REQUEST, -1)
        r = c.request(FIND, 5, {"key_type": 2, "coordinator_keys": [key]})
        assert r["coordinators"][0]["error_code"] == INVALID_REQUEST  # share keys need v6 (KafkaApis)


def test_share_offsets_admin_updates_state_partition_metadata(records_broker: Any) -> None:
    """DeleteShareGroupOffsets takes the topic out of the group's ShareGroupStatePartitionMetadata (its state is
    gone); AlterShareGroupOffsets puts the partition it initialized back."""
    group = "sgr-offs-" + uuid.uuid4().hex[:6]
    with RawClient(records_broker.port) as c:
        topic, _tid = _setup(c, 3)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        assert _hb(c, group, "m1", -1, None)["error_code"] == 0

        def initialized() -> list[tuple[str, list[int]]]:
            meta = [d for t, _, d in _group_records(records_broker.data_dir, group) if t == "15"]
            assert meta and meta[-1] is not None, meta
            return [(x["topicName"], x["partitions"]) for x in meta[-1]["initializedTopics"]]

        assert initialized() == [(topic, [0])]
        r = c.request(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
        assert r["error_code"] == 0 and r["responses"][0]["error_code"] == 0, r
        assert initialized() == []
        r = c.request(91, 0, {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 2}]}]})
        assert r["error_code"] == 0 and r["responses"][0]["partitions"][0]["error_code"] == 0, r
        assert initialized() == [(topic, [0])]


def test_share_groups_cli_delete(records_broker: Any) -> None:
    """``tidelog share-groups delete`` (kafka-share-groups.sh --delete): refused while the group has a member and for a
    group that is not a share group; then the group and its share state are deleted."""
    group = "sgr-cli-" + uuid.uuid4().hex[:6]
    bs = ["--bootstrap-server", records_broker.bootstrap]
    runner = CliRunner()
    with RawClient(records_broker.port) as c:
        topic, tid = _setup(c, 2)
        assert _hb(c, group, "m1", 0, [topic])["error_code"] == 0
        _fetch_ack(c, group, "m1", tid, 2)
        out = runner.invoke(cli, ["share-groups", "delete", "--group", group, "--group", "no-such-group", *bs])
        assert out.exit_code == 1, out.output
        assert f"* Share group '{group}' could not be deleted due to: NON_EMPTY_GROUP" in out.output, out.output
        assert "* Share group 'no-such-group' could not be deleted due to: GROUP_ID_NOT_FOUND" in out.output
        assert _hb(c, group, "m1", -1, None)["error_code"] == 0
        out = runner.invoke(cli, ["share-groups", "delete", "--group", group, *bs])
        assert out.exit_code == 0, out.output
        assert out.output.strip() == f"Deletion of requested share groups ('{group}') was successful."
        assert _summary(c, group, tid) == -1
        assert _describe(c, group)["error_code"] == GROUP_ID_NOT_FOUND
