"""Issue 27 (cg27): the KIP-848 records Kafka 4.x adds to ``__consumer_offsets`` that tidelog did not write.

* ConsumerGroupRegularExpression (key type 16): layouts checked against bytes built by hand from Kafka's
  ``ConsumerGroupRegularExpressionKey/Value.json``; written when a regex is resolved, tombstoned when no member
  uses it, replayed at load (``dump-log --offsets-decoder`` shows it).
* KIP-1251 AssignmentEpochs (tagged field 0 of ConsumerGroupCurrentMemberAssignmentValue's TopicPartitions, Kafka
  4.3): written and read, so a commit with an older member epoch right after a restart is judged as before it.
* The downgrade when a classic static member replaces the last member using the consumer protocol.

Raw frames against ``tidelog serve`` (restarted on its data dir); the real-client scenario (confluent-kafka with a
regex subscription across a restart) is in ``test_consumer_regex_clients.py``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient

from tidelog.broker.group import consumer_records as crec
from tidelog.broker.group.consumer_records import ConsumerKey, CurrentAssignment, ResolvedRegex
from tidelog.broker.group.consumer_store import ConsumerReplay, diff
from tidelog.broker.metrics import BrokerMetrics

from .conftest import create_topic, wait_until
from .test_consumer_persistence import describe, members
from .test_consumer_protocol_errors import NONE, STALE_MEMBER_EPOCH, _tid, hb, parts
from .test_consumer_records import TID_A, TID_B, carr, cs, i16, i32, s, tps
from .test_group_migration_raw import JOIN, SYNC, assigned, group_type, subscription
from .test_group_migration_raw import TOPIC as MIGR_TOPIC

COMMIT = 8
TOPIC = "cg27-epochs"


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


# ------------------------------------------------------------------------------------------ layouts


def test_regex_key_and_value_layout() -> None:
    """ConsumerGroupRegularExpressionKey v16: GroupId string, RegularExpression string (not flexible);
    ConsumerGroupRegularExpressionValue v0 (flexible): Topics []string, Version int64, Timestamp int64."""
    key = ConsumerKey(crec.REGULAR_EXPRESSION, "grp", regex="^cg27-.*")
    raw_key = i16(16) + s("grp") + s("^cg27-.*")
    assert crec.encode_key(key) == raw_key
    assert crec.decode_key(raw_key) == key and crec.is_consumer_key(raw_key)
    value = ResolvedRegex(("cg27-a", "cg27-b"), 42, 1_700_000_000_000)
    raw = i16(0) + carr(2) + cs("cg27-a") + cs("cg27-b") + i64(42) + i64(1_700_000_000_000) + b"\x00"
    assert crec.encode_regex_value(value) == raw
    assert crec.decode_regex_value(raw) == value
    assert crec.decode_regex_value(i16(0) + carr(0) + i64(1) + i64(2) + b"\x00") == ResolvedRegex((), 1, 2)


def test_regex_record_in_dump_log() -> None:
    from tidelog.tools.dump_log import parse_offsets_record

    key = crec.encode_key(ConsumerKey(16, "grp", regex="^a.*"))
    r = parse_offsets_record(3, key, crec.encode_regex_value(ResolvedRegex(("ab",), 7, 9)))
    assert r.key_text == '{"type":"16","data":{"groupId":"grp","regularExpression":"^a.*"}}'
    assert r.payload_json == {"version": "0", "data": {"topics": ["ab"], "version": 7, "timestamp": 9}}
    assert parse_offsets_record(4, key, None).payload_text == "<DELETE>"


def test_current_assignment_with_assignment_epochs_layout() -> None:
    """Each TopicPartitions struct carries tagged field 0 AssignmentEpochs ([]int32, one per partition)."""
    epochs = {(TID_A, 0): 3, (TID_A, 2): 5, (TID_B, 1): 4}
    a = CurrentAssignment(5, 4, 1, {TID_A: [0, 2]}, {TID_B: [1]}, epochs)

    def tagged(tid: bytes, ps: list[int], es: list[int]) -> bytes:
        body = carr(len(es)) + b"".join(i32(e) for e in es)
        return tid + carr(len(ps)) + b"".join(i32(p) for p in ps) + b"\x01\x00" + bytes([len(body)]) + body

    raw = (i16(0) + i32(5) + i32(4) + b"\x01" + carr(1) + tagged(TID_A, [0, 2], [3, 5])
           + carr(1) + tagged(TID_B, [1], [4]) + b"\x00")
    assert crec.encode_current_assignment(a) == raw
    back = crec.decode_current_assignment(raw)
    assert back == a and back.epoch_of(TID_A, 2) == 5
    # a record without the tag (Kafka < 4.3, tidelog before): every partition reads as the member epoch (>= 0)
    plain = i16(0) + i32(-2) + i32(4) + b"\x00" + tps((TID_A, [0, 2])) + tps() + b"\x00"
    old = crec.decode_current_assignment(plain)
    assert old.epochs is None and old.epoch_of(TID_A, 0) == 0
    # a list that does not hold one epoch per partition is ignored, as Kafka reads it; unknown tags are skipped
    bad = (i16(0) + i32(6) + i32(5) + b"\x00" + carr(1) + TID_A + carr(2) + i32(0) + i32(1)
           + b"\x02\x00\x05" + carr(1) + i32(2) + b"\x07\x01\x7f" + tps() + b"\x00")
    wrong = crec.decode_current_assignment(bad)
    assert wrong.assigned == {TID_A: [0, 1]} and wrong.epoch_of(TID_A, 1) == 6
    _, payload = crec.to_json(crec.encode_key(ConsumerKey(8, "g", "m")), raw)
    assert payload is not None
    assert payload["data"]["assignedPartitions"] == [
        {"topicId": crec.kafka_uuid(TID_A), "partitions": [0, 2], "assignmentEpochs": [3, 5]}]


def test_regex_tombstone_order_and_replay() -> None:
    """A regex's tombstone comes after the members' and before the group's (Kafka's createGroupTombstoneRecords);
    the replay keeps the latest value of each regex and the group's tombstone drops them."""
    k3 = crec.encode_key(ConsumerKey(3, "g"))
    k5 = crec.encode_key(ConsumerKey(5, "g", "m"))
    k16 = crec.encode_key(ConsumerKey(16, "g", regex="^x"))
    before = {k5: b"sub", k16: b"rx", k3: b"e1"}
    assert diff(before, {}) == [(k5, None), (k16, None), (k3, None)]
    replay = ConsumerReplay()
    v1, v2 = crec.encode_regex_value(ResolvedRegex(("x1",), 1, 1)), crec.encode_regex_value(ResolvedRegex((), 2, 2))
    for k, v in [(k3, b"e1"), (k16, v1), (k16, v2)]:
        replay.add(k, v)
    assert replay.groups["g"][k16] == v2
    replay.add(k16, None)
    assert k16 not in replay.groups["g"]


# ------------------------------------------------------------------------------------------ against the broker


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({
        "group.consumer.min.session.timeout.ms": "3000",
        "group.consumer.session.timeout.ms": "3000",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "300",
        "group.min.session.timeout.ms": "1000",
        "offsets.topic.num.partitions": "3",
    })
    create_topic(br.bootstrap, TOPIC, 2)
    create_topic(br.bootstrap, "cg27r-a", 2)
    create_topic(br.bootstrap, "cg27r-b", 1)
    create_topic(br.bootstrap, MIGR_TOPIC, 2)
    return br


def regex_records(data_dir: Any, group: str) -> list[tuple[str, dict | None]]:
    """The group's type-16 records in log order: (regex, value data or None for a tombstone), read with
    ``tidelog dump-log --offsets-decoder``."""
    import json

    from click.testing import CliRunner

    from tidelog.broker.group.records import partition_for
    from tidelog.cli.dump_log import dump_log

    part = Path(data_dir) / f"__consumer_offsets-{partition_for(group, 3)}"
    files = sorted(str(f) for f in part.glob("*.log"))
    res = CliRunner().invoke(dump_log, ["--files", *files, "--offsets-decoder"])
    assert res.exit_code == 0, res.output
    out: list[tuple[str, dict | None]] = []
    for line in res.output.splitlines():
        if " key: {" not in line or " payload: " not in line:
            continue
        key_text, payload_text = line.split(" key: ", 1)[1].split(" payload: ", 1)
        key = json.loads(key_text)
        if key["type"] == "16" and key["data"]["groupId"] == group:
            out.append((key["data"]["regularExpression"],
                        None if payload_text == "<DELETE>" else json.loads(payload_text)["data"]))
    return out


def test_regex_resolution_written_replayed_and_tombstoned(b: Any) -> None:
    """A member subscribing to a regex gets the matching topics' partitions; the resolution is written
    (type 16, the topics matched); after a restart the member keeps epoch and assignment and the group its epoch
    (the resolution replayed); a new matching topic writes a new resolution and bumps the group epoch; a member
    changing its regex tombstones the old one's record."""
    g, rx = "g-cg27-regex", "cg27r-.*"
    with RawClient(b.port) as c:
        r = hb(c, g, "m1", 0, regex=rx)
        assert r["error_code"] == NONE
        epoch = r["member_epoch"]

        def assigned() -> bool:  # the regex is resolved off the loop (regexloop): it matches nothing until then
            nonlocal epoch
            resp = hb(c, g, "m1", epoch, owned=[])
            assert resp["error_code"] == NONE, resp
            epoch = resp["member_epoch"]
            return resp["assignment"] is not None and parts(resp) == [0, 0, 1]  # cg27r-a 0, 1 and cg27r-b 0

        wait_until(assigned, 10, "the regex's topics assigned")
        before = describe(c, g)
    recs = regex_records(b.data_dir, g)
    assert recs and recs[-1][0] == rx and recs[-1][1] is not None
    assert recs[-1][1]["topics"] == ["cg27r-a", "cg27r-b"]
    b.restart()
    with RawClient(b.port) as c:
        d = describe(c, g)
        assert (d["group_epoch"], d["assignment_epoch"]) == (before["group_epoch"], before["assignment_epoch"])
        assert members(d) == members(before)
        owned = [(_tid(c, "cg27r-a"), [0, 1]), (_tid(c, "cg27r-b"), [0])]
        r = hb(c, g, "m1", epoch, owned=owned)
        assert r["error_code"] == NONE and r["member_epoch"] == epoch  # no new epoch after the load
        assert describe(c, g)["group_epoch"] == before["group_epoch"]
        create_topic(b.bootstrap, "cg27r-c", 1)

        def grown() -> bool:
            nonlocal epoch
            resp = hb(c, g, "m1", epoch, owned=owned)
            assert resp["error_code"] == NONE, resp
            epoch = resp["member_epoch"]
            return len(members(describe(c, g))["m1"][1]) == 4

        wait_until(grown, 10, "the new matching topic assigned")
        assert describe(c, g)["group_epoch"] > before["group_epoch"]
        regex, value = regex_records(b.data_dir, g)[-1]
        assert regex == rx and value is not None and value["topics"] == ["cg27r-a", "cg27r-b", "cg27r-c"]
        assert value["version"] > recs[-1][1]["version"]  # resolved against a later topic set
        # the member moves to another regex: the old one's record is tombstoned, the new one's written
        r = hb(c, g, "m1", epoch, regex="cg27r-b")
        assert r["error_code"] == NONE
    assert dict(regex_records(b.data_dir, g))[rx] is None  # tombstoned with the heartbeat's write

    def new_written() -> bool:  # the new regex's resolution lands after the heartbeat (regexloop)
        last = dict(regex_records(b.data_dir, g)).get("cg27r-b")
        return last is not None and last["topics"] == ["cg27r-b"]

    wait_until(new_written, 10, "the new regex's resolution written")


def test_assignment_epochs_survive_restart(b: Any) -> None:
    """KIP-1251: m1 keeps a partition from epoch 1 while its epoch moves to 2; a commit at epoch 1 for it is
    accepted before and after a restart (the AssignmentEpochs were written and replayed; before they were, the
    loaded member took its member epoch for every partition and refused it STALE_MEMBER_EPOCH)."""
    g = "g-cg27-epochs"
    with RawClient(b.port) as c:
        tid = _tid(c, TOPIC)
        assert hb(c, g, "m1", 0, topics=[TOPIC])["member_epoch"] == 1
        hb(c, g, "m2", 0, topics=[TOPIC])
        kept = parts(hb(c, g, "m1", 1, owned=[(tid, [0, 1])]))
        assert kept is not None and len(kept) == 1
        given = 1 - kept[0]
        assert hb(c, g, "m1", 1, owned=[(tid, kept)])["member_epoch"] == 2
        assert hb(c, g, "m2", 2, owned=[])["member_epoch"] == 2

        def commit(cl: RawClient, member: str, ep: int, partitions: list[int]) -> dict[int, int]:
            res = cl.request(COMMIT, 9, {
                "group_id": g, "generation_id_or_member_epoch": ep, "member_id": member, "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": 3,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}
                                                         for p in partitions]}]})
            return {int(p["partition_index"]): int(p["error_code"]) for p in res["topics"][0]["partitions"]}

        assert commit(c, "m1", 1, [kept[0], given]) == {kept[0]: NONE, given: STALE_MEMBER_EPOCH}
    b.restart()
    with RawClient(b.port) as c:
        describe(c, g)  # loaded
        assert commit(c, "m1", 1, [kept[0], given]) == {kept[0]: NONE, given: STALE_MEMBER_EPOCH}
        assert commit(c, "m2", 1, [given]) == {given: STALE_MEMBER_EPOCH}  # m2 got it at epoch 2
        assert commit(c, "m2", 2, [given]) == {given: NONE}


def test_classic_static_member_replacing_last_consumer_member_downgrades(b: Any) -> None:
    """Kafka's validateOnlineDowngradeWithReplacedMember: a consumer group whose other member uses the classic
    protocol; a classic JoinGroup with the instance id of the consumer-protocol member replaces it and the group
    becomes classic at once (Stable, the newcomer with the replaced member's partitions, no rebalance); the records
    written say so after a restart."""
    g = "g-cg27-downgrade"
    body = {"group_id": g, "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription()}]}
    with RawClient(b.port) as c:
        tid = _tid(c, MIGR_TOPIC)
        r = hb(c, g, "cm", 0, topics=[MIGR_TOPIC], instance="inst-cm")
        assert r["error_code"] == NONE and parts(r) == [0, 1]
        epoch, owned = r["member_epoch"], [0, 1]
        # a classic (dynamic) member joins the consumer group
        j = c.request(JOIN, 5, {**body, "group_instance_id": "inst-classic"})
        assert j["error_code"] == NONE, j
        classic_id = j["member_id"]
        # the consumer-protocol member revokes what the classic member is to get, and settles
        for _ in range(4):
            r = hb(c, g, "cm", epoch, owned=[(tid, owned)], instance="inst-cm")
            assert r["error_code"] == NONE, r
            epoch = r["member_epoch"]
            owned = owned if r["assignment"] is None else parts(r)
        cm_parts = sorted(members(describe(c, g))["cm"][1])
        assert len(cm_parts) == 1 and cm_parts == owned  # the other partition is the classic member's
        assert group_type(c, g)[0] == "consumer"
        # the consumer-protocol member's instance restarted as a classic static member
        j = c.request(JOIN, 5, {**body, "group_instance_id": "inst-cm"})
        assert j["error_code"] == NONE, j
        new_id, gen = j["member_id"], j["generation_id"]
        assert group_type(c, g) == ("classic", "Stable")
        sy = c.request(SYNC, 5, {"group_id": g, "generation_id": gen, "member_id": new_id,
                                 "group_instance_id": "inst-cm", "protocol_type": "consumer",
                                 "protocol_name": "range", "assignments": []})
        assert sy["error_code"] == NONE, sy
        assert sorted(assigned(sy["assignment"])) == cm_parts
        assert classic_id != new_id
    b.restart()
    with RawClient(b.port) as c:
        # the ConsumerGroup* records were tombstoned and the GroupMetadata written: a classic group after the load
        assert describe(c, g)["error_code"] != NONE
        assert group_type(c, g)[0] == "classic"


def test_install_uses_the_replayed_resolution() -> None:
    """At load a member's regex topics are the replayed resolution's (and its Version raises the coordinator's),
    not a fresh match: the group's metadata is the one it was assigned from; the next metadata check resolves the
    regex again and sees the topic created meanwhile."""
    import asyncio
    from types import SimpleNamespace

    from tidelog.broker.group.consumer_group import ConsumerGroupManager
    from tidelog.broker.group.consumer_install import install
    from tidelog.broker.group.consumer_records import MemberMetadata

    topics = {TID_A: SimpleNamespace(name="rx-a", num_partitions=2, topic_id=TID_A),
              TID_B: SimpleNamespace(name="rx-b", num_partitions=1, topic_id=TID_B)}
    broker = SimpleNamespace(config=SimpleNamespace(props={}), group_configs=None, authorizer=None, metrics=BrokerMetrics(),
                             topics=SimpleNamespace(
        by_id=topics.get, all_topics=lambda: list(topics.values()),
        get=lambda name: next((t for t in topics.values() if t.name == name), None)))
    written: list[tuple[str, Any]] = []

    async def append(group_id: str, entries: Any, offsets: bool) -> int:  # the coordinator's append, recorded
        written.append((group_id, entries))
        return 0

    mgr = ConsumerGroupManager(SimpleNamespace(broker=broker, groups={}, _append=append))  # type: ignore[arg-type]
    key = crec.encode_key
    records = [
        (key(ConsumerKey(5, "g", "m1")), crec.encode_member_metadata(
            MemberMetadata(None, None, "c", "/h", [], "rx-.*", 45000, None))),
        (key(ConsumerKey(16, "g", regex="rx-.*")), crec.encode_regex_value(ResolvedRegex(("rx-a",), 57, 1))),
        (key(ConsumerKey(3, "g")), crec.encode_group_metadata(4)),
        (key(ConsumerKey(7, "g", "m1")), crec.encode_target_member({TID_A: [0, 1]})),
        (key(ConsumerKey(6, "g")), crec.encode_target_metadata(4)),
        (key(ConsumerKey(8, "g", "m1")), crec.encode_current_assignment(
            CurrentAssignment(4, 3, 0, {TID_A: [0, 1]}, {}, {(TID_A, 0): 2, (TID_A, 1): 4}))),
    ]
    replay = ConsumerReplay()
    for k, v in records:
        replay.add(k, v)

    async def run() -> None:
        assert install(mgr, replay) == 1
        g = mgr.groups["g"]
        assert g.resolved == {"rx-.*": ResolvedRegex(("rx-a",), 57, 1)} and mgr.topics_version >= 57
        assert g.metadata == (("rx-a", 2),)  # from the replayed resolution, although rx-b exists
        assert g.members["m1"].assignment_epochs == {("rx-a", 0): 2, ("rx-a", 1): 4}
        epoch = g.group_epoch
        # a refresh is due (the topic set's version moved): resolved again off the loop, the replayed resolution
        # kept until it lands (regexloop)
        assert not mgr._metadata_changed(g, force=True)
        assert mgr.regex_resolver.in_flight("g") and g.resolved["rx-.*"].topics == ("rx-a",)
        await mgr.regex_resolver._running["g"]
        assert g.resolved["rx-.*"].topics == ("rx-a", "rx-b") and g.resolved["rx-.*"].version >= 57
        assert g.group_epoch == epoch + 1 and g.metadata == (("rx-a", 2), ("rx-b", 1))  # rx-b matches now
        assert written and written[-1][0] == "g"  # applied through the group's write path
        mgr.shutdown()

    asyncio.run(run())


def test_metadata_by_topic_id_with_an_empty_name(b: Any) -> None:
    """The Java 4.x client asks Metadata for the topic ids of a regex assignment with its generated default name
    "" (not null): Kafka looks them up by id, and so does tidelog (before, the Java 4.3 consumer of a
    SubscriptionPattern never resolved its assignment and heartbeated in a tight loop)."""
    import uuid

    with RawClient(b.port) as c:
        tid = _tid(c, "cg27r-a")
        md = c.request(3, 12, {"topics": [{"name": "", "topic_id": tid}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})["topics"]
        assert [(t["error_code"], t["name"], len(t["partitions"])) for t in md] == [(NONE, "cg27r-a", 2)]
        md = c.request(3, 12, {"topics": [{"name": "", "topic_id": uuid.UUID(int=7)}],
                               "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert md["topics"][0]["error_code"] == 100  # UNKNOWN_TOPIC_ID
