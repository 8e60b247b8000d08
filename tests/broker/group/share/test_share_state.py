"""Share-group state persisted in ``__share_group_state`` (KIP-932's share coordinator) against a real ``tidelog serve``:
acknowledged records survive a kill -9 of the broker, the unacknowledged ones are redelivered with their delivery
count + 1; the topic's records decode as ShareSnapshot / ShareUpdate; APIs 83-87 on the wire."""

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
from click.testing import CliRunner
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import RawClient, new_topic, produce_body

from tidelog.broker.group.share_state_records import STATE_TOPIC, ShareKey, state_partition
from tidelog.cli.main import cli
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

HB, FETCH, ACK, OFFSETS = 76, 78, 79, 90
INIT, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
CREATE_TOPICS, PRODUCE, METADATA = 19, 0, 3
ACCEPT, RELEASE, REJECT = 1, 2, 3
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST = 3, 74, 124, 42
STATE_PARTITIONS = 3
MEMBER = Path(__file__).resolve().parent / "share_member.py"
BROKER = {"share.auto.offset.reset": "earliest", "offsets.topic.num.partitions": "3",
          "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
          "share.coordinator.snapshot.update.records.per.snapshot": "2"}


@pytest.fixture(scope="module")
def state_broker(broker_factory: Any) -> Any:
    return broker_factory(BROKER)


def _produce(c: RawClient, topic: str, n: int, first: int = 0) -> None:
    for i in range(first, first + n):  # one batch per record: acquisition takes whole batches
        r = c.request(PRODUCE, 9, produce_body(topic, 0, build_batch([(None, f"v{i}".encode(), [])])))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r


def _setup(c: RawClient, records: int) -> tuple[str, uuid.UUID]:
    topic = new_topic("share-state")
    r = c.request(CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                     "timeout_ms": 10000})
    assert r["topics"][0]["error_code"] == 0, r
    _produce(c, topic, records)
    md = c.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
    return topic, md["topics"][0]["topic_id"]


def _fetch(c: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, max_records: int = 100) -> dict:
    return c.request(FETCH, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
                                "batch_size": max_records,
                                "topics": [{"topic_id": tid, "partitions": [
                                    {"partition_index": 0, "acknowledgement_batches": []}]}],
                                "forgotten_topics_data": []})


def _ack(c: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, batches: list[dict]) -> dict:
    r = c.request(ACK, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                           "topics": [{"topic_id": tid, "partitions": [
                               {"partition_index": 0, "acknowledgement_batches": batches}]}]})
    return r["responses"][0]["partitions"][0]


def _acquired(r: dict) -> list[tuple[int, int, int]]:
    parts = [p for t in r["responses"] for p in t["partitions"]]
    assert all(p["error_code"] == 0 for p in parts), parts
    return [(a["first_offset"], a["last_offset"], a["delivery_count"]) for p in parts for a in p["acquired_records"]]


def _state_records(data_dir: Path, partition: int) -> list[dict]:
    out = CliRunner().invoke(cli, ["dump-log", "--share-group-state-decoder", "--json", "--files",
                                   *sorted(str(p) for p in (data_dir / f"{STATE_TOPIC}-{partition}").glob("*.log"))])
    assert out.exit_code == 0, out.output
    return [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]


def test_acknowledged_records_survive_kill9(state_broker: Any) -> None:
    group = "sstate-" + uuid.uuid4().hex[:6]
    with RawClient(state_broker.port) as c:
        topic, tid = _setup(c, 12)
        assert _acquired(_fetch(c, group, "m1", 0, tid)) == [(0, 11, 1)]
        # accept 0-3, reject 4, release 9 (available again, delivered once); 5-8, 10-11 stay acquired
        assert _ack(c, group, "m1", 1, tid, [{"first_offset": 0, "last_offset": 4,
                                              "acknowledge_types": [ACCEPT] * 4 + [REJECT]}])["error_code"] == 0
        assert _ack(c, group, "m1", 2, tid, [{"first_offset": 6, "last_offset": 7, "acknowledge_types": [ACCEPT]},
                                             {"first_offset": 9, "last_offset": 9, "acknowledge_types": [RELEASE]}]
                    )["error_code"] == 0
        assert _ack(c, group, "m1", 3, tid, [{"first_offset": 11, "last_offset": 11,
                                              "acknowledge_types": [ACCEPT]}])["error_code"] == 0
    state_broker.kill()  # SIGKILL: no clean shutdown
    state_broker.start()
    with RawClient(state_broker.port) as c:
        r = c.request(HB, 1, {"group_id": group, "rack_id": None, "member_id": "m2", "member_epoch": 0,
                              "subscribed_topic_names": [topic]})
        assert r["error_code"] == 0
        # before any fetch: the SPSO as persisted, from the share coordinator (ReadShareGroupStateSummary)
        r = c.request(OFFSETS, 0, {"groups": [{"group_id": group, "topics": None}]})
        assert [(t["topic_name"], [(p["partition_index"], p["start_offset"], p["error_code"])
                                   for p in t["partitions"]]) for t in r["groups"][0]["topics"]] == [
            (topic, [(0, 5, 0)])]
        # a new member after the restart: 0-4, 6-7 and 11 are done; 5, 8-10 come again with their count + 1
        got = _acquired(_fetch(c, group, "m2", 0, tid))
        assert got == [(5, 5, 2), (8, 10, 2)], got
        _produce(c, topic, 1, first=12)
        assert _acquired(_fetch(c, group, "m2", 1, tid)) == [(12, 12, 1)]  # never delivered before: count 1
    # the state topic's records, decoded as Kafka's dump tool does: a snapshot at initialization, then updates,
    # a new snapshot after share.coordinator.snapshot.update.records.per.snapshot (2) updates
    key = ShareKey(group, tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid), 0)
    recs = [r for r in _state_records(state_broker.data_dir, state_partition(key, STATE_PARTITIONS))
            if r.get("key_decoded") and r["key_decoded"]["data"]["groupId"] == group]
    types = [r["key_decoded"]["type"] for r in recs]
    assert types[:4] == ["0", "1", "1", "0"], types
    first = recs[0]["payload_decoded"]["data"]
    assert first["startOffset"] == 0 and first["stateEpoch"] == 0 and first["stateBatches"] == []
    update = recs[1]["payload_decoded"]["data"]
    assert update["startOffset"] == 5
    assert update["stateBatches"][0] == {"firstOffset": 5, "lastOffset": 11, "deliveryState": 0, "deliveryCount": 1}
    snap = recs[3]["payload_decoded"]["data"]
    assert snap["snapshotEpoch"] == 1 and snap["startOffset"] == 5
    assert [(b["firstOffset"], b["lastOffset"], b["deliveryState"]) for b in snap["stateBatches"]] == [
        (5, 5, 0), (6, 7, 2), (8, 10, 0), (11, 11, 2)]


def test_share_state_apis(state_broker: Any) -> None:
    """APIs 83-87 as a share-partition leader calls them: initialize, read, write with fencing, summary, delete."""
    group, tid = "sapi-" + uuid.uuid4().hex[:6], uuid.uuid4()

    def call(api: int, part: dict, g: str = group) -> dict:
        with RawClient(state_broker.port) as c:
            r = c.request(api, 0, {"group_id": g, "topics": [{"topic_id": tid, "partitions": [part]}]})
        return r["results"][0]["partitions"][0]

    assert call(READ, {"partition": 0, "leader_epoch": 0})["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert call(WRITE, {"partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0,
                        "state_batches": []})["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    s = call(SUMMARY, {"partition": 0, "leader_epoch": 0})
    assert (s["error_code"], s["start_offset"]) == (0, -1)
    assert call(INIT, {"partition": 0, "state_epoch": 1, "start_offset": 10})["error_code"] == 0
    r = call(READ, {"partition": 0, "leader_epoch": 3})
    assert (r["error_code"], r["state_epoch"], r["start_offset"], r["state_batches"]) == (0, 1, 10, [])
    batch = {"first_offset": 10, "last_offset": 14, "delivery_state": 2, "delivery_count": 1}
    w = {"partition": 0, "state_epoch": 1, "leader_epoch": 3, "start_offset": 10, "state_batches": [batch]}
    assert call(WRITE, w)["error_code"] == 0
    assert call(WRITE, {**w, "leader_epoch": 2})["error_code"] == FENCED_LEADER_EPOCH  # the read set epoch 3
    assert call(WRITE, {**w, "state_epoch": 0})["error_code"] == FENCED_STATE_EPOCH
    bad = {**w, "state_batches": [{**batch, "delivery_state": 1}]}  # acquired is never persisted
    assert call(WRITE, bad)["error_code"] == INVALID_REQUEST
    w2 = {**w, "start_offset": 12, "state_batches": [{**batch, "first_offset": 15, "last_offset": 15,
                                                       "delivery_state": 0, "delivery_count": 2}]}
    assert call(WRITE, w2)["error_code"] == 0
    r = call(READ, {"partition": 0, "leader_epoch": 3})
    assert r["start_offset"] == 12 and [(b["first_offset"], b["last_offset"], b["delivery_state"],
                                         b["delivery_count"]) for b in r["state_batches"]] == [
        (12, 14, 2, 1), (15, 15, 0, 2)]
    s = call(SUMMARY, {"partition": 0, "leader_epoch": 3})
    assert (s["error_code"], s["state_epoch"], s["start_offset"]) == (0, 1, 12)
    assert call(INIT, {"partition": 0, "state_epoch": 0, "start_offset": 0})["error_code"] == FENCED_STATE_EPOCH
    assert call(DELETE, {"partition": 0})["error_code"] == 0
    assert call(READ, {"partition": 0, "leader_epoch": 3})["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    with RawClient(state_broker.port) as c:
        r = c.request(WRITE, 0, {"group_id": "", "topics": [{"topic_id": tid, "partitions": [w]}]})
    assert r["results"][0]["partitions"][0]["error_code"] == INVALID_REQUEST


def test_share_consumer_after_broker_kill9(state_broker: Any) -> None:
    """confluent-kafka's ShareConsumer (explicit mode, in a subprocess) accepts 5 of the 10 records it polled and
    holds the rest; the member and the broker are killed -9; after the restart a new member of the group gets every
    record but the 5 accepted, the held ones with delivery count 2."""
    bs = state_broker.bootstrap
    topic = "share-st-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until its future completes
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    values = [f"s{i}" for i in range(30)]
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.num.messages": 10})
    for v in values:
        p.produce(topic, v.encode())
    assert p.flush(30) == 0
    group = "sg-st-" + uuid.uuid4().hex[:6]
    events: list[dict[str, Any]] = []
    acked = threading.Event()
    proc = subprocess.Popen([sys.executable, str(MEMBER), bs, group, topic,
                             json.dumps({"ack": "accept", "accept_first": 5, "max_records": 10})],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["event"] == "acked":
                acked.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert acked.wait(60), f"the member acknowledged nothing: {events}"
    finally:
        proc.kill()
        proc.wait(10)
        reader.join(5)
    k = next(i for i, e in enumerate(events) if e["event"] == "acked")
    accepted = {e["v"] for e in events[:5]}
    held = {e["v"] for e in events[5:k]}  # the rest of that poll: acquired, never acknowledged
    assert len(accepted) == 5 and held and all(e["n"] == 1 for e in events if e["event"] == "msg")
    state_broker.kill()
    state_broker.start()
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "max.poll.records": 30,
                       "share.acknowledgement.mode": "implicit"})
    c.subscribe([topic])
    got: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(got) < len(values) - len(accepted) and time.monotonic() < deadline:
            for m in c.poll(0.5):
                if m.error() is None:
                    assert m.value().decode() not in got, "a record delivered twice to the new member"
                    got[m.value().decode()] = m.delivery_count()
        c.commit_sync(30)
    finally:
        c.close()
    assert set(got) == set(values) - accepted, "the accepted records are never delivered again, the rest are"
    assert {v: got[v] for v in held} == dict.fromkeys(held, 2), "held records come back with delivery count 2"


def test_released_by_a_closing_session_is_persisted(state_broker: Any) -> None:
    """A share session closed (epoch -1) releases what its member holds; that state is written in the background
    (no acknowledgement waits for it): after a kill -9 the records come again with delivery count 2."""
    group = "srel-" + uuid.uuid4().hex[:6]
    with RawClient(state_broker.port) as c:
        _topic, tid = _setup(c, 4)
        assert _acquired(_fetch(c, group, "m1", 0, tid)) == [(0, 3, 1)]
        r = c.request(FETCH, 1, {"group_id": group, "member_id": "m1", "share_session_epoch": -1, "max_wait_ms": 0,
                                 "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 0, "batch_size": 0,
                                 "topics": [], "forgotten_topics_data": []})
        assert r["error_code"] == 0, r
        deadline = time.monotonic() + 30

        def persisted() -> list[tuple[int, int, int, int]]:
            p = c.request(READ, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": 0, "leader_epoch": -1}]}]})["results"][0]["partitions"][0]
            return [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                    for b in p["state_batches"]]

        while not persisted() and time.monotonic() < deadline:  # the background write, read back (bounded)
            time.sleep(0.05)  # polling interval of the bounded read-back (no event to await from outside)
        assert persisted() == [(0, 3, 0, 1)]
    state_broker.kill()
    state_broker.start()
    with RawClient(state_broker.port) as c:
        assert _acquired(_fetch(c, group, "m2", 0, tid)) == [(0, 3, 2)]


ALTER_OFFSETS, DELETE_OFFSETS, NON_EMPTY_GROUP = 91, 92, 68


def test_alter_and_delete_share_group_offsets(state_broker: Any) -> None:
    """AlterShareGroupOffsets moves a share partition's start (the next fetch starts there, every record before it
    done); refused while the group has members; DeleteShareGroupOffsets drops the state (the next fetch starts at
    share.auto.offset.reset, earliest here, with delivery counts from 1)."""
    group = "soffs-" + uuid.uuid4().hex[:6]
    with RawClient(state_broker.port) as c:
        topic, tid = _setup(c, 10)
        assert _acquired(_fetch(c, group, "m1", 0, tid, max_records=3)) == [(0, 2, 1)]
        r = c.request(HB, 1, {"group_id": group, "rack_id": None, "member_id": "m1", "member_epoch": 0,
                              "subscribed_topic_names": [topic]})
        assert r["error_code"] == 0
        alter = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 7}, {"partition_index": 3, "start_offset": 0}]}]}
        assert c.request(ALTER_OFFSETS, 0, alter)["error_code"] == NON_EMPTY_GROUP
        r = c.request(HB, 1, {"group_id": group, "rack_id": None, "member_id": "m1", "member_epoch": -1,
                              "subscribed_topic_names": None})
        assert r["error_code"] == 0
        r = c.request(ALTER_OFFSETS, 0, alter)
        assert r["error_code"] == 0
        assert [(p["partition_index"], p["error_code"]) for p in r["responses"][0]["partitions"]] == [
            (0, 0), (3, UNKNOWN_TOPIC_OR_PARTITION)]
        assert _acquired(_fetch(c, group, "m2", 0, tid)) == [(7, 9, 1)]  # 0-6 done: never delivered (again)
        r = c.request(DELETE_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": topic},
                                                                        {"topic_name": "no-such-topic"}]})
        assert r["error_code"] == 0
        assert [(t["topic_name"], t["error_code"]) for t in r["responses"]] == [
            (topic, 0), ("no-such-topic", UNKNOWN_TOPIC_OR_PARTITION)]
        assert _acquired(_fetch(c, group, "m3", 0, tid)) == [(0, 9, 1)]  # from the earliest offset again


def test_share_groups_cli_reset_and_delete_offsets(state_broker: Any) -> None:
    """``tidelog share-groups reset-offsets`` (dry run, then --execute) and ``delete-offsets``, as
    kafka-share-groups.sh --reset-offsets / --delete-offsets."""
    group = "scli-" + uuid.uuid4().hex[:6]
    runner = CliRunner()
    bs = ["--bootstrap-server", state_broker.bootstrap]
    with RawClient(state_broker.port) as c:
        topic, tid = _setup(c, 6)
        args = ["share-groups", "reset-offsets", "--group", group, "--topic", topic, "--to-latest", *bs]
        out = runner.invoke(cli, args, catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert [line.split() for line in out.output.splitlines() if line.strip()] == [
            ["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"], [group, topic, "0", "6"]]
        assert _acquired(_fetch(c, group, "m0", 0, tid, max_records=1)) == [(0, 0, 1)]  # a dry run changed nothing
        args = ["share-groups", "reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "4",
                "--execute", *bs]
        out = runner.invoke(cli, args, catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert _acquired(_fetch(c, group, "m1", 0, tid)) == [(4, 5, 1)]
        out = runner.invoke(cli, ["share-groups", "delete-offsets", "--group", group, "--topic", topic, *bs],
                            catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert [line.split() for line in out.output.splitlines() if line.strip()][1] == [topic, "Successful"]
        assert _acquired(_fetch(c, group, "m2", 0, tid)) == [(0, 5, 1)]
