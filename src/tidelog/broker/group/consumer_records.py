"""KIP-848 consumer-group records of ``__consumer_offsets``, keyed and valued as Kafka's new group coordinator
writes them (layouts: Kafka's ``group-coordinator/src/main/resources/common/message/ConsumerGroup*.json``; facts
only, no code).

Keys (not flexible): an int16 *key version* naming the record type, then int16-length strings.

* 3 ``ConsumerGroupMetadataKey``: ``GroupId``.
* 4 ``ConsumerGroupPartitionMetadataKey``: ``GroupId`` (the subscribed topics' metadata; Kafka 4.x no longer
  uses it — read and ignored here, never written).
* 5 ``ConsumerGroupMemberMetadataKey``: ``GroupId, MemberId``.
* 6 ``ConsumerGroupTargetAssignmentMetadataKey``: ``GroupId``.
* 7 ``ConsumerGroupTargetAssignmentMemberKey``: ``GroupId, MemberId``.
* 8 ``ConsumerGroupCurrentMemberAssignmentKey``: ``GroupId, MemberId``.
* 16 ``ConsumerGroupRegularExpressionKey``: ``GroupId, RegularExpression`` (Kafka 4.x: a regex subscription's
  resolution, per group and regex).

Values: int16 value version 0, flexible (compact strings and arrays, a tagged-field section after every struct);
a null value is a tombstone.

* ``ConsumerGroupMetadataValue``: ``Epoch int32`` (the group epoch).
* ``ConsumerGroupMemberMetadataValue``: ``InstanceId nullable string, RackId nullable string, ClientId string,
  ClientHost string, SubscribedTopicNames []string, SubscribedTopicRegex nullable string, RebalanceTimeoutMs
  int32, ServerAssignor nullable string``; tagged field 0 ``ClassicMemberMetadata {SessionTimeoutMs int32,
  SupportedProtocols [] {Name string, Metadata bytes}}`` (a member using the classic protocol inside a consumer
  group, written and read as Kafka does).
* ``ConsumerGroupTargetAssignmentMetadataValue``: ``AssignmentEpoch int32``.
* ``ConsumerGroupTargetAssignmentMemberValue``: ``TopicPartitions [] {TopicId uuid, Partitions []int32}``.
* ``ConsumerGroupCurrentMemberAssignmentValue``: ``MemberEpoch int32, PreviousMemberEpoch int32, State int8
  (MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions, 127 unknown), AssignedPartitions
  [TopicPartitions], PartitionsPendingRevocation [TopicPartitions]``; each ``TopicPartitions {TopicId uuid,
  Partitions []int32}`` has the tagged field 0 ``AssignmentEpochs`` (nullable ``[]int32``, one per partition: the
  member epoch at which it was assigned; KIP-1251, Kafka 4.3), read as Kafka's ``Utils.assignmentFromTopicPartitions``
  does: absent or not one per partition, every partition takes the member epoch (not below 0).
* ``ConsumerGroupRegularExpressionValue``: ``Topics []string, Version int64, Timestamp int64`` (the topics the
  regex matched, the metadata version and the time (ms) of that resolution).

Unknown tagged fields are skipped on read (Kafka 4.1's ``MetadataHash`` tag of ConsumerGroupMetadataValue among
them); the tagged fields written are the member metadata's ClassicMemberMetadata and the current assignment's
AssignmentEpochs.
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from tidelog.broker.group.records import SchemaError, _Reader, _str
from tidelog.records.varint import encode_unsigned

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 6, 7, 8
REGULAR_EXPRESSION = 16
KEY_TYPES = (3, 4, 5, 6, 7, 8, 16)
KEY_NAMES = {
    3: "ConsumerGroupMetadata", 4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment", 16: "ConsumerGroupRegularExpression",
}
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)
VALUE_VERSION = 0

# Kafka's MemberState ids
STATE_IDS = {"stable": 0, "unrevoked_partitions": 1, "unreleased_partitions": 2}
STATE_NAMES = {v: k for k, v in STATE_IDS.items()}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# topic id (16 bytes) -> sorted partitions
TopicAssignment = dict[bytes, list[int]]


@dataclass(slots=True, frozen=True)
class ConsumerKey:
    """A key of types 3-8 and 16; ``member_id`` is ``None`` for the group-level types (3, 4, 6, 16), ``regex`` is
    type 16's regular expression."""

    type: int
    group: str
    member_id: str | None = None
    regex: str | None = None


@dataclass(slots=True, frozen=True)
class ClassicMemberMetadata:
    """A classic-protocol member inside a consumer group: its session timeout and JoinGroup protocols."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...] = ()


@dataclass(slots=True)
class MemberMetadata:
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None


@dataclass(slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicAssignment = field(default_factory=dict)
    pending_revocation: TopicAssignment = field(default_factory=dict)
    # KIP-1251 AssignmentEpochs: (topic id, partition) -> the epoch it was assigned at, for assigned and pending
    # partitions (disjoint); ``None``: the record has none (every partition reads as the member epoch, not below 0)
    epochs: dict[tuple[bytes, int], int] | None = None

    def epoch_of(self, tid: bytes, partition: int) -> int:
        """Kafka's reading: the stored epoch, else the member epoch (not below 0)."""
        if self.epochs is not None:
            e = self.epochs.get((tid, partition))
            if e is not None:
                return e
        return max(self.member_epoch, 0)


@dataclass(slots=True, frozen=True)
class ResolvedRegex:
    """ConsumerGroupRegularExpressionValue: the topics a regex matched, the metadata version and time (ms) of that
    resolution."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


# ----------------------------------------------------------------------------------------------- writing


_uvarint = encode_unsigned


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise SchemaError("string longer than 32767 bytes")
    return _uvarint(len(raw) + 1) + raw


_NO_TAGS = b"\x00"


def _topic_partitions(tps: TopicAssignment, epochs: CurrentAssignment | None = None) -> bytes:
    """[]TopicPartitions; with ``epochs`` each struct carries its tagged AssignmentEpochs (tag 0)."""
    parts = [_uvarint(len(tps) + 1)]
    for tid in sorted(tps):
        if len(tid) != 16:
            raise SchemaError("topic id must be 16 bytes")
        ps = sorted(tps[tid])
        parts += [tid, _uvarint(len(ps) + 1), b"".join(_I32.pack(p) for p in ps)]
        if epochs is None:
            parts.append(_NO_TAGS)
        else:
            body = _uvarint(len(ps) + 1) + b"".join(_I32.pack(epochs.epoch_of(tid, p)) for p in ps)
            parts += [_uvarint(1), _uvarint(0), _uvarint(len(body)), body]
    return b"".join(parts)


def encode_key(key: ConsumerKey) -> bytes:
    if key.type not in KEY_TYPES:
        raise SchemaError(f"not a consumer group key type: {key.type}")
    out = _I16.pack(key.type) + _str(key.group)
    if key.type in _MEMBER_KEYS:
        out += _str(key.member_id or "")
    elif key.type == REGULAR_EXPRESSION:
        out += _str(key.regex or "")
    return out


def encode_group_metadata(epoch: int) -> bytes:
    return _I16.pack(VALUE_VERSION) + _I32.pack(epoch) + _NO_TAGS


def encode_target_metadata(assignment_epoch: int) -> bytes:
    return _I16.pack(VALUE_VERSION) + _I32.pack(assignment_epoch) + _NO_TAGS


def _classic_member(c: ClassicMemberMetadata) -> bytes:
    parts = [_I32.pack(c.session_timeout_ms), _uvarint(len(c.protocols) + 1)]
    for name, meta in c.protocols:
        parts += [_cstr(name), _uvarint(len(meta) + 1), bytes(meta), _NO_TAGS]
    parts.append(_NO_TAGS)
    return b"".join(parts)


def encode_member_metadata(m: MemberMetadata) -> bytes:
    names = b"".join(_cstr(n) for n in m.subscribed_topic_names)
    tags = _NO_TAGS
    if m.classic is not None:  # tagged field 0
        body = _classic_member(m.classic)
        tags = _uvarint(1) + _uvarint(0) + _uvarint(len(body)) + body
    return b"".join([
        _I16.pack(VALUE_VERSION), _cstr(m.instance_id), _cstr(m.rack_id), _cstr(m.client_id), _cstr(m.client_host),
        _uvarint(len(m.subscribed_topic_names) + 1), names, _cstr(m.subscribed_topic_regex),
        _I32.pack(m.rebalance_timeout_ms), _cstr(m.server_assignor), tags,
    ])


def encode_target_member(tps: TopicAssignment) -> bytes:
    return _I16.pack(VALUE_VERSION) + _topic_partitions(tps) + _NO_TAGS


def encode_current_assignment(a: CurrentAssignment) -> bytes:
    """Written with AssignmentEpochs (as Kafka 4.3 does) when ``a.epochs`` is set."""
    ep = a if a.epochs is not None else None
    return b"".join([
        _I16.pack(VALUE_VERSION), _I32.pack(a.member_epoch), _I32.pack(a.previous_member_epoch),
        struct.pack(">b", a.state), _topic_partitions(a.assigned, ep), _topic_partitions(a.pending_revocation, ep),
        _NO_TAGS,
    ])


def encode_regex_value(r: ResolvedRegex) -> bytes:
    return b"".join([_I16.pack(VALUE_VERSION), _uvarint(len(r.topics) + 1), *(_cstr(t) for t in r.topics),
                     _I64.pack(r.version), _I64.pack(r.timestamp), _NO_TAGS])


# ----------------------------------------------------------------------------------------------- reading


def key_type(data: bytes) -> int | None:
    """The key version of a ``__consumer_offsets`` key, or ``None`` for a key shorter than 2 bytes."""
    return int(_I16.unpack_from(data, 0)[0]) if len(data) >= 2 else None


def is_consumer_key(data: bytes) -> bool:
    return key_type(data) in KEY_TYPES


def decode_key(data: bytes) -> ConsumerKey:
    r = _Reader(bytes(data))
    t = r.i16()
    if t not in KEY_TYPES:
        raise SchemaError(f"not a consumer group key type: {t}")
    group = r.str()
    member = r.str() if t in _MEMBER_KEYS else None
    regex = r.str() if t == REGULAR_EXPRESSION else None
    return ConsumerKey(t, group, member, regex)


def _value_reader(data: bytes, family: str = "consumer group") -> _Reader:
    """A reader past a record value's version (0, flexible, for the KIP-848 and the share group records alike)."""
    r = _Reader(bytes(data), flex=True)
    version = r.i16()
    if version != VALUE_VERSION:
        raise SchemaError(f"unknown {family} record value version {version}")
    return r


def _read_int32s(r: _Reader) -> list[int]:
    return [r.i32() for _ in range(r.array_len())]


def _read_uuid(r: _Reader) -> bytes:
    return bytes(r._take(16))


def _read_topic_partitions(r: _Reader, epochs: dict[tuple[bytes, int], int] | None = None) -> TopicAssignment:
    """[]TopicPartitions; with ``epochs`` the tagged AssignmentEpochs (tag 0) found go there (a list that does not
    hold one epoch per partition is ignored, as Kafka reads it); other tags are skipped."""
    out: TopicAssignment = {}
    for _ in range(r.array_len()):
        tid = _read_uuid(r)
        ps = out[tid] = _read_int32s(r)
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            raw = r._take(size)
            if tag == 0 and epochs is not None:
                t = _Reader(bytes(raw), flex=True)
                n = t.uvarint() - 1
                values = [t.i32() for _ in range(max(n, 0))]
                if n == len(ps):
                    epochs.update(((tid, p), e) for p, e in zip(ps, values, strict=True))
    return out


def decode_epoch(data: bytes) -> int:
    """ConsumerGroupMetadataValue.Epoch or ConsumerGroupTargetAssignmentMetadataValue.AssignmentEpoch."""
    r = _value_reader(data)
    epoch = r.i32()
    r.tags()
    return epoch


def decode_member_metadata(data: bytes) -> MemberMetadata:
    r = _value_reader(data)
    m = MemberMetadata(r.nstr(), r.nstr(), r.str(), r.str())
    m.subscribed_topic_names = [r.str() for _ in range(r.array_len())]
    m.subscribed_topic_regex = r.nstr()
    m.rebalance_timeout_ms = r.i32()
    m.server_assignor = r.nstr()
    for _ in range(r.uvarint()):  # tagged fields: 0 = ClassicMemberMetadata, others skipped
        tag, size = r.uvarint(), r.uvarint()
        raw = r._take(size)
        if tag == 0:
            m.classic = _read_classic_member(_Reader(bytes(raw), flex=True))
    return m


def _read_classic_member(r: _Reader) -> ClassicMemberMetadata:
    session = r.i32()
    protocols = []
    for _ in range(r.array_len()):
        name = r.str()
        n = r.uvarint() - 1
        protocols.append((name, bytes(r._take(max(n, 0)))))
        r.tags()
    r.tags()
    return ClassicMemberMetadata(session, tuple(protocols))


def decode_target_member(data: bytes) -> TopicAssignment:
    r = _value_reader(data)
    out = _read_topic_partitions(r)
    r.tags()
    return out


def decode_current_assignment(data: bytes) -> CurrentAssignment:
    r = _value_reader(data)
    epoch, previous = r.i32(), r.i32()
    state = struct.unpack(">b", r._take(1))[0]
    epochs: dict[tuple[bytes, int], int] = {}
    a = CurrentAssignment(epoch, previous, int(state), _read_topic_partitions(r, epochs),
                          _read_topic_partitions(r, epochs), epochs or None)
    r.tags()
    return a


def decode_regex_value(data: bytes) -> ResolvedRegex:
    r = _value_reader(data)
    topics = tuple(r.str() for _ in range(r.array_len()))
    version, timestamp = r.i64(), r.i64()
    r.tags()
    return ResolvedRegex(topics, version, timestamp)


def decode_partition_metadata(data: bytes) -> list[dict[str, Any]]:
    """ConsumerGroupPartitionMetadataValue (type 4): topics with id, name, partition count (deprecated in 4.x;
    decoded for ``dump-log`` only)."""
    r = _value_reader(data)
    topics = []
    for _ in range(r.array_len()):
        tid = _read_uuid(r)
        name = r.str()
        n = r.i32()
        parts = []
        for _ in range(r.array_len()):
            p = r.i32()
            racks = [r.str() for _ in range(r.array_len())]
            r.tags()
            parts.append({"partition": p, "racks": racks})
        r.tags()
        topics.append({"topicId": kafka_uuid(tid), "topicName": name, "numPartitions": n,
                       "partitionMetadata": parts})
    r.tags()
    return topics


# ----------------------------------------------------------------------------------------------- JSON (dump-log)


def kafka_uuid(tid: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(tid).decode("ascii").rstrip("=")


def _tps_json(tps: TopicAssignment, a: CurrentAssignment | None = None) -> list[dict[str, Any]]:
    out = []
    for t, ps in tps.items():
        entry: dict[str, Any] = {"topicId": kafka_uuid(t), "partitions": list(ps)}
        if a is not None and a.epochs is not None and all((t, p) in a.epochs for p in ps):
            entry["assignmentEpochs"] = [a.epochs[(t, p)] for p in ps]
        out.append(entry)
    return out


def to_json(key: bytes, value: bytes | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Kafka's ``OffsetsMessageParser`` view of a type 3-8 or 16 record: ``{"type": "<key type>", "data": {...}}`` and
    ``{"version": "0", "data": {...}}`` (``None`` for a tombstone), the specs' camelCase field names."""
    k = decode_key(key)
    key_data: dict[str, Any] = {"groupId": k.group}
    if k.member_id is not None:
        key_data["memberId"] = k.member_id
    if k.regex is not None:
        key_data["regularExpression"] = k.regex
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
        data = {"instanceId": m.instance_id, "rackId": m.rack_id, "clientId": m.client_id,
                "clientHost": m.client_host, "subscribedTopicNames": m.subscribed_topic_names,
                "subscribedTopicRegex": m.subscribed_topic_regex, "rebalanceTimeoutMs": m.rebalance_timeout_ms,
                "serverAssignor": m.server_assignor}
        if m.classic is not None:
            data["classicMemberMetadata"] = {
                "sessionTimeoutMs": m.classic.session_timeout_ms,
                "supportedProtocols": [{"name": n, "metadata": base64.b64encode(md).decode("ascii")}
                                       for n, md in m.classic.protocols]}
    elif k.type == TARGET_MEMBER:
        data = {"topicPartitions": _tps_json(decode_target_member(value))}
    elif k.type == REGULAR_EXPRESSION:
        rx = decode_regex_value(value)
        data = {"topics": list(rx.topics), "version": rx.version, "timestamp": rx.timestamp}
    else:
        a = decode_current_assignment(value)
        data = {"memberEpoch": a.member_epoch, "previousMemberEpoch": a.previous_member_epoch, "state": a.state,
                "assignedPartitions": _tps_json(a.assigned, a),
                "partitionsPendingRevocation": _tps_json(a.pending_revocation, a)}
    return key_json, {"version": str(VALUE_VERSION), "data": data}


def topic_uuid(tid: Any) -> bytes:
    """A topic id as 16 bytes (the broker's topic registry may hold ``uuid.UUID`` or bytes)."""
    return tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid)
