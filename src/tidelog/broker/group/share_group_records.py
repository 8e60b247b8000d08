"""Share-group records of ``__consumer_offsets`` (KIP-932), keyed and valued as Kafka 4.x's group coordinator writes
them (layouts: Kafka's ``group-coordinator/src/main/resources/common/message/ShareGroup*.json``; facts only, no code).

Keys (not flexible): an int16 *key version* naming the record type, then int16-length strings.

* 9 ``ShareGroupPartitionMetadataKey``: ``GroupId`` (Kafka 4.0's subscribed-topic metadata, gone in 4.1 with
  KIP-1101's metadata hash: read and ignored here, never written; decoded by ``dump-log``).
* 10 ``ShareGroupMemberMetadataKey``: ``GroupId, MemberId``.
* 11 ``ShareGroupMetadataKey``: ``GroupId``.
* 12 ``ShareGroupTargetAssignmentMetadataKey``: ``GroupId``.
* 13 ``ShareGroupTargetAssignmentMemberKey``: ``GroupId, MemberId``.
* 14 ``ShareGroupCurrentMemberAssignmentKey``: ``GroupId, MemberId``.
* 15 ``ShareGroupStatePartitionMetadataKey``: ``GroupId``.

Values: int16 value version 0, flexible; a null value is a tombstone.

* ``ShareGroupMemberMetadataValue``: ``RackId nullable string, ClientId string, ClientHost string,
  SubscribedTopicNames []string``.
* ``ShareGroupMetadataValue``: ``Epoch int32`` (Kafka 4.1's ``MetadataHash`` is skipped on read as an unknown
  tagged field and not written).
* ``ShareGroupTargetAssignmentMetadataValue``: ``AssignmentEpoch int32``.
* ``ShareGroupTargetAssignmentMemberValue``: ``TopicPartitions [] {TopicId uuid, Partitions []int32}``.
* ``ShareGroupCurrentMemberAssignmentValue``: ``MemberEpoch int32, PreviousMemberEpoch int32, State int8,
  AssignedPartitions [] {TopicId uuid, Partitions []int32}``.
* ``ShareGroupStatePartitionMetadataValue``: ``InitializingTopics []TopicPartitionsInfo, InitializedTopics
  []TopicPartitionsInfo, DeletingTopics [] {TopicId uuid, TopicName string}``; ``TopicPartitionsInfo`` is
  ``{TopicId uuid, TopicName string, Partitions []int32, CreateTimestamp int64}`` (Kafka 4.2's layout; 4.1's has
  no ``CreateTimestamp``: a value is read with it when its bytes hold it, else without).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from tidelog.broker.group.consumer_records import (
    _NO_TAGS,
    TopicAssignment,
    _cstr,
    _read_int32s,
    _read_topic_partitions,
    _read_uuid,
    _topic_partitions,
    _uvarint,
    kafka_uuid,
    key_type,
)
from tidelog.broker.group.consumer_records import _value_reader as _consumer_value_reader
from tidelog.broker.group.consumer_records import decode_partition_metadata as _consumer_partition_metadata
from tidelog.broker.group.records import SchemaError, _Reader, _str

PARTITION_METADATA, MEMBER_METADATA, GROUP_METADATA = 9, 10, 11
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, STATE_PARTITION_METADATA = 12, 13, 14, 15
KEY_TYPES = (9, 10, 11, 12, 13, 14, 15)
KEY_NAMES = {
    9: "ShareGroupPartitionMetadata", 10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata", 13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment", 15: "ShareGroupStatePartitionMetadata",
}
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)
VALUE_VERSION = 0
STABLE = 0  # Kafka's MemberState.STABLE: a share member is always stable (no revocation)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(slots=True, frozen=True)
class ShareGroupKey:
    """A key of types 9-15; ``member_id`` is ``None`` for the group-level types."""

    type: int
    group: str
    member_id: str | None = None


@dataclass(slots=True)
class ShareMemberMetadata:
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ShareCurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int = STABLE
    assigned: TopicAssignment = field(default_factory=dict)


@dataclass(slots=True)
class TopicPartitionsInfo:
    name: str
    partitions: list[int]
    create_ts: int = 0


@dataclass(slots=True)
class StatePartitionMetadata:
    """Which share partitions of the group have share state (``initialized``), are being initialized, or whose
    state is being deleted (topic id -> name)."""

    initializing: dict[bytes, TopicPartitionsInfo] = field(default_factory=dict)
    initialized: dict[bytes, TopicPartitionsInfo] = field(default_factory=dict)
    deleting: dict[bytes, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.initializing or self.initialized or self.deleting)


# ----------------------------------------------------------------------------------------------- writing


def encode_key(key: ShareGroupKey) -> bytes:
    if key.type not in KEY_TYPES:
        raise SchemaError(f"not a share group key type: {key.type}")
    out = _I16.pack(key.type) + _str(key.group)
    if key.type in _MEMBER_KEYS:
        out += _str(key.member_id or "")
    return out


def encode_epoch(epoch: int) -> bytes:
    """ShareGroupMetadataValue (Epoch) or ShareGroupTargetAssignmentMetadataValue (AssignmentEpoch)."""
    return _I16.pack(VALUE_VERSION) + _I32.pack(epoch) + _NO_TAGS


def encode_member_metadata(m: ShareMemberMetadata) -> bytes:
    names = sorted(m.subscribed_topic_names)
    return b"".join([_I16.pack(VALUE_VERSION), _cstr(m.rack_id), _cstr(m.client_id), _cstr(m.client_host),
                     _uvarint(len(names) + 1), b"".join(_cstr(n) for n in names), _NO_TAGS])


def encode_target_member(tps: TopicAssignment) -> bytes:
    return _I16.pack(VALUE_VERSION) + _topic_partitions(tps) + _NO_TAGS


def encode_current_assignment(a: ShareCurrentAssignment) -> bytes:
    return b"".join([_I16.pack(VALUE_VERSION), _I32.pack(a.member_epoch), _I32.pack(a.previous_member_epoch),
                     struct.pack(">b", a.state), _topic_partitions(a.assigned), _NO_TAGS])


def _topic_infos(infos: dict[bytes, TopicPartitionsInfo]) -> bytes:
    parts = [_uvarint(len(infos) + 1)]
    for tid in sorted(infos):
        i = infos[tid]
        ps = sorted(i.partitions)
        parts += [tid, _cstr(i.name), _uvarint(len(ps) + 1), b"".join(_I32.pack(p) for p in ps),
                  _I64.pack(i.create_ts), _NO_TAGS]
    return b"".join(parts)


def encode_state_partition_metadata(s: StatePartitionMetadata) -> bytes:
    deleting = [_uvarint(len(s.deleting) + 1)]
    for tid in sorted(s.deleting):
        deleting += [tid, _cstr(s.deleting[tid]), _NO_TAGS]
    return b"".join([_I16.pack(VALUE_VERSION), _topic_infos(s.initializing), _topic_infos(s.initialized),
                     *deleting, _NO_TAGS])


# ----------------------------------------------------------------------------------------------- reading


def is_share_group_key(data: bytes) -> bool:
    return key_type(data) in KEY_TYPES


def decode_key(data: bytes) -> ShareGroupKey:
    r = _Reader(bytes(data))
    t = r.i16()
    if t not in KEY_TYPES:
        raise SchemaError(f"not a share group key type: {t}")
    group = r.str()
    member = r.str() if t in _MEMBER_KEYS else None
    return ShareGroupKey(t, group, member)


def _value_reader(data: bytes) -> _Reader:
    return _consumer_value_reader(data, "share group")


def decode_epoch(data: bytes) -> int:
    r = _value_reader(data)
    epoch = r.i32()
    r.tags()
    return epoch


def decode_member_metadata(data: bytes) -> ShareMemberMetadata:
    r = _value_reader(data)
    m = ShareMemberMetadata(r.nstr(), r.str(), r.str())
    m.subscribed_topic_names = [r.str() for _ in range(r.array_len())]
    r.tags()
    return m


def decode_target_member(data: bytes) -> TopicAssignment:
    r = _value_reader(data)
    out = _read_topic_partitions(r)
    r.tags()
    return out


def decode_current_assignment(data: bytes) -> ShareCurrentAssignment:
    r = _value_reader(data)
    epoch, previous = r.i32(), r.i32()
    state = struct.unpack(">b", r._take(1))[0]
    a = ShareCurrentAssignment(epoch, previous, int(state), _read_topic_partitions(r))
    r.tags()
    return a


def _read_infos(r: _Reader, with_ts: bool) -> dict[bytes, TopicPartitionsInfo]:
    out: dict[bytes, TopicPartitionsInfo] = {}
    for _ in range(r.array_len()):
        tid = _read_uuid(r)
        name = r.str()
        ps = _read_int32s(r)
        ts = r.i64() if with_ts else 0
        r.tags()
        out[tid] = TopicPartitionsInfo(name, ps, ts)
    return out


def decode_state_partition_metadata(data: bytes) -> StatePartitionMetadata:
    """Kafka 4.2's layout first (with ``CreateTimestamp``); a value that does not parse so is read as 4.1's."""
    last: SchemaError | None = None
    for with_ts in (True, False):
        try:
            r = _value_reader(data)
            s = StatePartitionMetadata(_read_infos(r, with_ts), _read_infos(r, with_ts))
            for _ in range(r.array_len()):
                tid = _read_uuid(r)
                s.deleting[tid] = r.str()
                r.tags()
            r.tags()
            if r.pos != len(r.buf):
                raise SchemaError("trailing bytes in ShareGroupStatePartitionMetadataValue")
            return s
        except (SchemaError, struct.error, IndexError, ValueError) as exc:
            last = exc if isinstance(exc, SchemaError) else SchemaError(str(exc))
    assert last is not None
    raise last


def decode_partition_metadata(data: bytes) -> list[dict[str, Any]]:
    """ShareGroupPartitionMetadataValue (type 9, Kafka 4.0): decoded for ``dump-log`` only."""
    return _consumer_partition_metadata(data)  # the same layout as ConsumerGroupPartitionMetadataValue


# ----------------------------------------------------------------------------------------------- JSON (dump-log)


def _tps_json(tps: TopicAssignment) -> list[dict[str, Any]]:
    return [{"topicId": kafka_uuid(t), "partitions": list(ps)} for t, ps in tps.items()]


def _infos_json(infos: dict[bytes, TopicPartitionsInfo]) -> list[dict[str, Any]]:
    return [{"topicId": kafka_uuid(t), "topicName": i.name, "partitions": list(i.partitions),
             "createTimestamp": i.create_ts} for t, i in infos.items()]


def to_json(key: bytes, value: bytes | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Kafka's ``OffsetsMessageParser`` view of a type 9-15 record (camelCase field names of the specs)."""
    k = decode_key(key)
    key_data: dict[str, Any] = {"groupId": k.group}
    if k.member_id is not None:
        key_data["memberId"] = k.member_id
    key_json = {"type": str(k.type), "data": key_data}
    if value is None:
        return key_json, None
    data: dict[str, Any]
    if k.type == GROUP_METADATA:
        data = {"epoch": decode_epoch(value)}
    elif k.type == TARGET_METADATA:
        data = {"assignmentEpoch": decode_epoch(value)}
    elif k.type == PARTITION_METADATA:
        data = {"topics": decode_partition_metadata(value)}
    elif k.type == MEMBER_METADATA:
        m = decode_member_metadata(value)
        data = {"rackId": m.rack_id, "clientId": m.client_id, "clientHost": m.client_host,
                "subscribedTopicNames": m.subscribed_topic_names}
    elif k.type == TARGET_MEMBER:
        data = {"topicPartitions": _tps_json(decode_target_member(value))}
    elif k.type == CURRENT_ASSIGNMENT:
        a = decode_current_assignment(value)
        data = {"memberEpoch": a.member_epoch, "previousMemberEpoch": a.previous_member_epoch, "state": a.state,
                "assignedPartitions": _tps_json(a.assigned)}
    else:
        s = decode_state_partition_metadata(value)
        data = {"initializingTopics": _infos_json(s.initializing), "initializedTopics": _infos_json(s.initialized),
                "deletingTopics": [{"topicId": kafka_uuid(t), "topicName": n} for t, n in s.deleting.items()]}
    return key_json, {"version": str(VALUE_VERSION), "data": data}
