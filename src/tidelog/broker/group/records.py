"""Records of the internal topic ``__consumer_offsets``, keyed and valued as Kafka keys them.

Layouts follow Kafka's ``group-coordinator/src/main/resources/common/message`` specs (facts only):

Keys start with an int16 *key version* that names the record type:

* 0 or 1 = ``OffsetCommitKey``: ``group string, topic string, partition int32`` (Kafka writes 1).
* 2 = ``GroupMetadataKey``: ``group string``.

Values start with an int16 *value version*; a null value is a tombstone (delete the key).

* ``OffsetCommitValue`` v0-4 (v4 flexible): ``offset int64``, ``leaderEpoch int32`` (v3+), ``metadata
  string``, ``commitTimestamp int64``, ``expireTimestamp int64`` (v1 only). Kafka writes v1 when an explicit
  expire timestamp exists (OffsetCommit v2-4 ``retention_time_ms``), else v3.
* ``GroupMetadataValue`` v0-4 (v4 flexible): ``protocolType string, generation int32, protocol
  nullable string, leader nullable string, currentStateTimestamp int64 (v2+), members[]``; each member:
  ``memberId string, groupInstanceId nullable string (v3+), clientId string, clientHost string,
  rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment bytes``. Written as v3.

Group to partition: ``Utils.abs(groupId.hashCode()) % partitions`` (Kafka's GroupCoordinatorService.partitionFor,
formerly GroupMetadataManager.partitionFor) with Java's ``String.hashCode`` (over UTF-16 code units) and Kafka's
``Utils.abs``: ``Math.abs(n)``, except ``Integer.MIN_VALUE`` -> 0. It is not ``Utils.toPositive``
(``n & 0x7fffffff``, the producer partitioner's), which differs for every negative hash: tidelog used that form
before, so older data directories can hold a group's records in another partition (see
``tidelog.broker.group.coordinator``, which moves them to the group's partition at the first single-node start
after the upgrade); :func:`legacy_partition_for`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tidelog.records.errors import CorruptRecordError
from tidelog.records.varint import decode_unsigned_varint

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class SchemaError(ValueError):
    """A ``__consumer_offsets`` key or value that cannot be decoded."""


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: ``Utils.abs(groupId.hashCode()) % numPartitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def legacy_partition_for(group_id: str, num_partitions: int) -> int:
    """The partition tidelog used before it followed Kafka (``hashCode & 0x7fffffff``); for reading old data only."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


# ----------------------------------------------------------------------------------------------- writing


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise SchemaError("string longer than 32767 bytes")
    return _I16.pack(len(raw)) + raw


def _nstr(s: str | None) -> bytes:
    return b"\xff\xff" if s is None else _str(s)


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return _I32.pack(-1)
    return _I32.pack(len(b)) + bytes(b)


# ----------------------------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "flex", "pos")

    def __init__(self, buf: bytes, pos: int = 0, flex: bool = False) -> None:
        self.buf = buf
        self.pos = pos
        self.flex = flex

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise SchemaError("truncated record")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.buf, self.pos)
        except CorruptRecordError as exc:
            raise SchemaError(str(exc)) from exc
        return value

    def nstr(self) -> str | None:
        n = self.uvarint() - 1 if self.flex else self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(str(exc)) from None

    def str(self) -> str:
        s = self.nstr()
        if s is None:
            raise SchemaError("null where a string is required")
        return s

    def nbytes(self) -> bytes | None:
        n = self.uvarint() - 1 if self.flex else self.i32()
        return None if n < 0 else bytes(self._take(n))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flex else self.i32()
        return max(n, 0)

    def tags(self) -> None:
        if self.flex:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


# ----------------------------------------------------------------------------------------------- types


@dataclass(slots=True, frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(slots=True, frozen=True)
class GroupKey:
    group: str


@dataclass(slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1
    # where the record lies in __consumer_offsets (Kafka's OffsetAndMetadata.recordOffset), -1 if unknown: when a
    # transaction commits, its offset replaces a committed one only if written later in the log
    record_offset: int = field(default=-1, compare=False)


@dataclass(slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberValue] = field(default_factory=list)


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + _I32.pack(partition)


def encode_group_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _str(group)


def encode_offset_value(v: OffsetValue) -> bytes:
    if v.expire_timestamp >= 0:
        return (
            _I16.pack(OFFSET_COMMIT_VALUE_VERSION_EXPIRE)
            + _I64.pack(v.offset)
            + _str(v.metadata)
            + _I64.pack(v.commit_timestamp)
            + _I64.pack(v.expire_timestamp)
        )
    return (
        _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _I64.pack(v.offset)
        + _I32.pack(v.leader_epoch)
        + _str(v.metadata)
        + _I64.pack(v.commit_timestamp)
    )


def encode_group_value(v: GroupValue) -> bytes:
    parts = [
        _I16.pack(GROUP_METADATA_VALUE_VERSION),
        _str(v.protocol_type),
        _I32.pack(v.generation),
        _nstr(v.protocol),
        _nstr(v.leader),
        _I64.pack(v.current_state_timestamp),
        _I32.pack(len(v.members)),
    ]
    for m in v.members:
        parts += [
            _str(m.member_id),
            _nstr(m.group_instance_id),
            _str(m.client_id),
            _str(m.client_host),
            _I32.pack(m.rebalance_timeout),
            _I32.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(bytes(data))
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.str(), r.str(), r.i32())
    if version == 2:
        return GroupKey(r.str())
    raise SchemaError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(bytes(data))
    version = r.i16()
    if not 0 <= version <= 4:
        raise SchemaError(f"unknown OffsetCommitValue version {version}")
    r.flex = version >= 4
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.str()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.tags()
    return OffsetValue(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(bytes(data))
    version = r.i16()
    if not 0 <= version <= 4:
        raise SchemaError(f"unknown GroupMetadataValue version {version}")
    r.flex = version >= 4
    protocol_type = r.str()
    generation = r.i32()
    protocol = r.nstr()
    leader = r.nstr()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.str()
        instance = r.nstr() if version >= 3 else None
        client_id = r.str()
        client_host = r.str()
        session = 0
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        if rebalance < 0:
            rebalance = session
        subscription = r.nbytes() or b""
        assignment = r.nbytes() or b""
        r.tags()
        members.append(
            MemberValue(member_id, instance, client_id, client_host, rebalance, session, subscription, assignment)
        )
    r.tags()
    return GroupValue(protocol_type, generation, protocol, leader, ts, members)
