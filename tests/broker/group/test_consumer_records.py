"""KIP-848 ConsumerGroup* records of ``__consumer_offsets`` (types 3-8): each type round-trips against bytes built
by hand from Kafka's message specs (``group-coordinator/src/main/resources/common/message/ConsumerGroup*.json``),
the store writes only what changed (tombstones for members gone), and the replay rebuilds what was written."""

from __future__ import annotations

import struct
import uuid

import pytest

from tidelog.broker.group import consumer_records as crec
from tidelog.broker.group.consumer_records import ConsumerKey, CurrentAssignment, MemberMetadata
from tidelog.broker.group.consumer_store import ConsumerReplay, diff
from tidelog.broker.group.records import SchemaError
from tidelog.broker.metrics import BrokerMetrics

TID_A = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").bytes
TID_B = uuid.UUID("11111111-2222-3333-4444-555555555555").bytes


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def s(x: str) -> bytes:  # non-flexible string (keys)
    return i16(len(x.encode())) + x.encode()


def cs(x: str | None) -> bytes:  # compact (nullable) string, lengths < 127 here
    return b"\x00" if x is None else bytes([len(x.encode()) + 1]) + x.encode()


def carr(n: int) -> bytes:  # compact array length, n < 127 here
    return bytes([n + 1])


def tps(*entries: tuple[bytes, list[int]]) -> bytes:  # []TopicPartitions, each struct with an empty tag section
    return carr(len(entries)) + b"".join(t + carr(len(ps)) + b"".join(i32(p) for p in ps) + b"\x00"
                                         for t, ps in entries)


@pytest.mark.parametrize(("key", "raw"), [
    (ConsumerKey(3, "grp"), i16(3) + s("grp")),
    (ConsumerKey(4, "grp"), i16(4) + s("grp")),
    (ConsumerKey(5, "grp", "m-1"), i16(5) + s("grp") + s("m-1")),
    (ConsumerKey(6, "grp"), i16(6) + s("grp")),
    (ConsumerKey(7, "grp", "m-1"), i16(7) + s("grp") + s("m-1")),
    (ConsumerKey(8, "grp", "m-1"), i16(8) + s("grp") + s("m-1")),
])
def test_keys_round_trip(key: ConsumerKey, raw: bytes) -> None:
    assert crec.encode_key(key) == raw
    assert crec.decode_key(raw) == key
    assert crec.is_consumer_key(raw)


def test_group_metadata_value() -> None:  # ConsumerGroupMetadataValue v0: Epoch int32, tags
    raw = i16(0) + i32(42) + b"\x00"
    assert crec.encode_group_metadata(42) == raw
    assert crec.decode_epoch(raw) == 42
    # a tagged field it does not know (Kafka 4.1's MetadataHash, tag 0, int64) is skipped
    assert crec.decode_epoch(i16(0) + i32(42) + b"\x01\x00\x08" + struct.pack(">q", 99)) == 42


def test_target_metadata_value() -> None:  # ConsumerGroupTargetAssignmentMetadataValue v0: AssignmentEpoch int32
    raw = i16(0) + i32(7) + b"\x00"
    assert crec.encode_target_metadata(7) == raw
    assert crec.decode_epoch(raw) == 7


def test_member_metadata_value() -> None:
    m = MemberMetadata("inst-1", None, "client", "/127.0.0.1", ["a", "b"], "t.*", 30000, "uniform")
    raw = (i16(0) + cs("inst-1") + cs(None) + cs("client") + cs("/127.0.0.1") + carr(2) + cs("a") + cs("b")
           + cs("t.*") + i32(30000) + cs("uniform") + b"\x00")
    assert crec.encode_member_metadata(m) == raw
    assert crec.decode_member_metadata(raw) == m
    # ClassicMemberMetadata (tag 0) of a member using the classic protocol: read, and written the same way
    classic = i32(45000) + carr(1) + cs("range") + bytes([3]) + b"xy" + b"\x00" + b"\x00"
    tagged = raw[:-1] + b"\x01\x00" + bytes([len(classic)]) + classic
    mc = crec.decode_member_metadata(tagged)
    assert mc.classic == crec.ClassicMemberMetadata(45000, (("range", b"xy"),))
    mc.classic = None
    assert mc == m
    assert crec.encode_member_metadata(crec.decode_member_metadata(tagged)) == tagged


def test_target_member_value() -> None:
    assignment = {TID_A: [0, 2], TID_B: [1]}
    raw = i16(0) + tps((TID_A, [0, 2]), (TID_B, [1])) + b"\x00"
    assert crec.encode_target_member(assignment) == raw
    assert crec.decode_target_member(raw) == assignment


def test_current_assignment_value() -> None:
    a = CurrentAssignment(5, 4, 1, {TID_A: [0]}, {TID_B: [3, 4]})
    raw = i16(0) + i32(5) + i32(4) + b"\x01" + tps((TID_A, [0])) + tps((TID_B, [3, 4])) + b"\x00"
    assert crec.encode_current_assignment(a) == raw
    assert crec.decode_current_assignment(raw) == a


def test_partition_metadata_value_decodes() -> None:  # type 4: read (dump-log), never written
    raw = (i16(0) + carr(1) + TID_A + cs("orders") + i32(3) + carr(1) + i32(0) + carr(1) + cs("r1") + b"\x00"
           + b"\x00" + b"\x00")
    key_json, payload = crec.to_json(i16(4) + s("grp"), raw)
    assert key_json == {"type": "4", "data": {"groupId": "grp"}}
    assert payload is not None
    assert payload["data"]["topics"][0]["topicName"] == "orders"
    assert payload["data"]["topics"][0]["partitionMetadata"] == [{"partition": 0, "racks": ["r1"]}]


def test_bad_input_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        crec.decode_epoch(i16(1) + i32(1) + b"\x00")  # unknown value version
    with pytest.raises(SchemaError):
        crec.decode_current_assignment(i16(0) + i32(5))  # truncated
    with pytest.raises(SchemaError):
        crec.decode_key(i16(2) + s("grp"))  # a classic GroupMetadataKey


def test_dump_log_decodes_the_records() -> None:
    from tidelog.tools.dump_log import parse_offsets_record

    key = crec.encode_key(ConsumerKey(8, "grp", "m-1"))
    value = crec.encode_current_assignment(CurrentAssignment(3, 2, 0, {TID_A: [1]}, {}))
    r = parse_offsets_record(10, key, value)
    assert r.key_text == '{"type":"8","data":{"groupId":"grp","memberId":"m-1"}}'
    assert r.payload_json == {"version": "0", "data": {
        "memberEpoch": 3, "previousMemberEpoch": 2, "state": 0,
        "assignedPartitions": [{"topicId": crec.kafka_uuid(TID_A), "partitions": [1]}],
        "partitionsPendingRevocation": []}}
    assert parse_offsets_record(11, key, None).payload_text == "<DELETE>"


def test_diff_and_replay() -> None:
    k3, k5, k6 = (crec.encode_key(ConsumerKey(3, "g")), crec.encode_key(ConsumerKey(5, "g", "m")),
                  crec.encode_key(ConsumerKey(6, "g")))
    k8 = crec.encode_key(ConsumerKey(8, "g", "m"))
    before = {k5: b"sub", k3: b"e1", k6: b"t1", k8: b"c1"}
    after = {k3: b"e2", k6: b"t1"}
    # changed values first; then tombstones, current assignment before the member's subscription
    assert diff(before, after) == [(k3, b"e2"), (k8, None), (k5, None)]
    assert diff(after, after) == []
    replay = ConsumerReplay()
    for k, v in [(k5, b"sub"), (k3, b"e1"), (k8, b"c1"), *diff(before, after)]:
        replay.add(k, v)
    assert replay.groups == {"g": {k3: b"e2"}}
    replay.add(k3, None)  # the group's tombstone deletes it
    assert replay.groups == {}


def test_install_records_as_kafka_writes_them() -> None:
    """A replay of records as a Kafka 4 broker writes them (ConsumerGroupMetadataValue with its MetadataHash tag,
    a ConsumerGroupPartitionMetadata record, a member that asked for an assignor tidelog does not have) builds the
    group: members with their epochs, states, assignments and targets; a topic that no longer exists is dropped."""
    import asyncio
    from types import SimpleNamespace

    from tidelog.broker.group.consumer_group import ConsumerGroupManager
    from tidelog.broker.group.consumer_install import install

    topics = {TID_A: SimpleNamespace(name="orders", num_partitions=4, topic_id=TID_A)}  # TID_B: deleted
    broker = SimpleNamespace(config=SimpleNamespace(props={}), group_configs=None, authorizer=None, metrics=BrokerMetrics(),
                             topics=SimpleNamespace(
        by_id=topics.get, all_topics=lambda: list(topics.values()),
        get=lambda name: next((t for t in topics.values() if t.name == name), None)))
    mgr = ConsumerGroupManager(SimpleNamespace(broker=broker, groups={}))  # type: ignore[arg-type]
    key = crec.encode_key
    meta_with_hash = i16(0) + i32(9) + b"\x01\x00\x08" + struct.pack(">q", 1234)
    member = crec.encode_member_metadata(MemberMetadata(None, "rack-1", "c", "/10.0.0.1", ["orders"], None, 45000,
                                                        "kafka-only-assignor"))
    records = [
        (key(ConsumerKey(5, "g", "m1")), member),
        (key(ConsumerKey(3, "g")), meta_with_hash),
        (key(ConsumerKey(4, "g")), i16(0) + carr(0) + b"\x00"),
        (key(ConsumerKey(7, "g", "m1")), crec.encode_target_member({TID_A: [0, 1], TID_B: [0]})),
        (key(ConsumerKey(6, "g")), crec.encode_target_metadata(9)),
        (key(ConsumerKey(8, "g", "m1")), crec.encode_current_assignment(
            CurrentAssignment(8, 7, 1, {TID_A: [0]}, {TID_A: [2], TID_B: [0]}))),
    ]
    replay = ConsumerReplay()
    for k, v in records:
        replay.add(k, v)

    async def run() -> None:
        assert install(mgr, replay) == 1
        g = mgr.groups["g"]
        assert (g.group_epoch, g.assignment_epoch, g.assignor) == (9, 9, "uniform")
        m = g.members["m1"]
        assert (m.epoch, m.previous_epoch, m.state, m.rack_id, m.server_assignor) == (
            8, 7, "unrevoked_partitions", "rack-1", None)
        assert m.assigned == {("orders", 0)} and m.pending_revocation == {("orders", 2)}
        assert g.target["m1"] == {("orders", 0), ("orders", 1)}
        assert m.session_timer is not None and m.revocation_timer is not None
        assert g.metadata == (("orders", 4),)
        mgr.shutdown()

    asyncio.run(run())
