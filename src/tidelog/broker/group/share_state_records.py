"""The records of ``__share_group_state``, keyed and valued as Kafka's share coordinator writes them (layouts:
Kafka's ``share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json``, 4.1/4.2;
facts only, no code), and the placement of a share partition's state on the topic's partitions.

Keys (not flexible): an int16 *key version* naming the record type (the ``apiKey`` of the coordinator-key spec),
then ``GroupId string, TopicId uuid, Partition int32``.

* 0 ``ShareSnapshotKey``: the whole state of one share partition.
* 1 ``ShareUpdateKey``: the batches one WriteShareGroupState changed, applied over the last snapshot.

Values: int16 value version 0, flexible (compact arrays, a tagged-field section after every struct).

* ``ShareSnapshotValue``: ``SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32, StartOffset int64,
  CreateTimestamp int64, WriteTimestamp int64, StateBatches []`` (tag 0: ``DeliveryCompleteCount``, Kafka 4.2;
  skipped on read, not written).
* ``ShareUpdateValue``: ``SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1: not updated),
  StateBatches []`` (tag 0 as above).
* ``StateBatch``: ``FirstOffset int64, LastOffset int64, DeliveryState int8 (0 available, 2 acknowledged,
  4 archived), DeliveryCount int16``.

A null value is a tombstone (DeleteShareGroupState writes one per key type).

Placement (Kafka's ``ShareCoordinatorService.partitionFor``): ``Utils.abs(key.hashCode()) % partitions`` of the
coordinator key ``"<groupId>:<topicId>:<partition>"``, the topic id as ``Uuid.toString`` (URL-safe base64).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from tidelog.broker.group.consumer_records import _uvarint, kafka_uuid
from tidelog.broker.group.records import SchemaError, _Reader, _str, partition_for

STATE_TOPIC = "__share_group_state"
SNAPSHOT, UPDATE = 0, 1
KEY_NAMES = {SNAPSHOT: "ShareSnapshot", UPDATE: "ShareUpdate"}
VALUE_VERSION = 0
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
_NO_TAGS = b"\x00"
_I16 = struct.Struct(">h")
_KEY_TAIL = struct.Struct(">16si")
_SNAP_HEAD = struct.Struct(">iiiqqq")
_UPDATE_HEAD = struct.Struct(">iiq")
_BATCH = struct.Struct(">qqbh")

#: (first offset, last offset, delivery state, delivery count)
StateBatch = tuple[int, int, int, int]

@dataclass(slots=True, frozen=True)
class ShareKey:
    group: str
    topic_id: bytes
    partition: int

    def coordinator_key(self) -> str:
        return f"{self.group}:{kafka_uuid(self.topic_id)}:{self.partition}"


@dataclass(slots=True)
class ShareState:
    """The persisted state of one share partition (snapshot + updates applied)."""

    snapshot_epoch: int = 0
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    create_ts: int = -1
    write_ts: int = -1


def state_partition(key: ShareKey, num_partitions: int) -> int:
    """The ``__share_group_state`` partition holding ``key``'s state."""
    return partition_for(key.coordinator_key(), num_partitions)


# ----------------------------------------------------------------------------------------------- writing


def encode_key(record_type: int, key: ShareKey) -> bytes:
    if record_type not in KEY_NAMES:
        raise SchemaError(f"not a share state key type: {record_type}")
    if len(key.topic_id) != 16:
        raise SchemaError("topic id must be 16 bytes")
    return _I16.pack(record_type) + _str(key.group) + _KEY_TAIL.pack(key.topic_id, key.partition)


def _batches(batches: list[StateBatch]) -> bytes:
    parts = [_uvarint(len(batches) + 1)]
    for first, last, state, count in batches:
        parts += [_BATCH.pack(first, last, state, count), _NO_TAGS]
    return b"".join(parts)


def encode_snapshot(s: ShareState) -> bytes:
    return (_I16.pack(VALUE_VERSION)
            + _SNAP_HEAD.pack(s.snapshot_epoch, s.state_epoch, s.leader_epoch, s.start_offset, s.create_ts,
                              s.write_ts)
            + _batches(s.batches) + _NO_TAGS)


def encode_update(snapshot_epoch: int, leader_epoch: int, start_offset: int, batches: list[StateBatch]) -> bytes:
    return (_I16.pack(VALUE_VERSION) + _UPDATE_HEAD.pack(snapshot_epoch, leader_epoch, start_offset)
            + _batches(batches) + _NO_TAGS)


# ----------------------------------------------------------------------------------------------- reading


def key_type(data: bytes) -> int | None:
    return int(_I16.unpack_from(data, 0)[0]) if len(data) >= 2 else None


def decode_key(data: bytes) -> tuple[int, ShareKey]:
    r = _Reader(bytes(data))
    t = r.i16()
    if t not in KEY_NAMES:
        raise SchemaError(f"not a share state key type: {t}")
    group = r.str()
    tid, partition = _KEY_TAIL.unpack(r._take(_KEY_TAIL.size))
    return t, ShareKey(group, bytes(tid), int(partition))


def _value_reader(data: bytes) -> _Reader:
    r = _Reader(bytes(data), flex=True)
    version = r.i16()
    if version != VALUE_VERSION:
        raise SchemaError(f"unknown share state record value version {version}")
    return r


def _read_batches(r: _Reader) -> list[StateBatch]:
    out: list[StateBatch] = []
    for _ in range(r.array_len()):
        first, last, state, count = _BATCH.unpack(r._take(_BATCH.size))
        r.tags()
        out.append((int(first), int(last), int(state), int(count)))
    return out


def decode_snapshot(data: bytes) -> ShareState:
    r = _value_reader(data)
    se, st, le, start, cts, wts = _SNAP_HEAD.unpack(r._take(_SNAP_HEAD.size))
    batches = _read_batches(r)
    r.tags()
    return ShareState(se, st, le, start, batches, cts, wts)


def decode_update(data: bytes) -> tuple[int, int, int, list[StateBatch]]:
    """(snapshot epoch, leader epoch, start offset, batches)."""
    r = _value_reader(data)
    se, le, start = _UPDATE_HEAD.unpack(r._take(_UPDATE_HEAD.size))
    batches = _read_batches(r)
    r.tags()
    return int(se), int(le), int(start), batches


# ----------------------------------------------------------------------------------------------- merging


def merge_batches(old: list[StateBatch], new: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """Kafka's combination of state batches: the new ones win where they overlap the old ones (an old batch is cut
    around them), everything below ``start_offset`` is dropped (a batch across it is cut), sorted by offset."""
    new = sorted(b for b in new if b[1] >= b[0])
    out: list[StateBatch] = []
    for first, last, state, count in old:
        pieces = [(first, last)]
        for nf, nl, _s, _c in new:
            if nl < first or nf > last:
                continue
            cut: list[tuple[int, int]] = []
            for a, b in pieces:
                if nf > a:
                    cut.append((a, min(b, nf - 1)))
                if nl < b:
                    cut.append((max(a, nl + 1), b))
            pieces = [(a, b) for a, b in cut if a <= b]
        out += [(a, b, state, count) for a, b in pieces]
    out += new
    if start_offset >= 0:
        out = [(max(a, start_offset), b, s, c) for a, b, s, c in out if b >= start_offset]
    out.sort()
    return out


# ----------------------------------------------------------------------------------------------- JSON (dump-log)


def _batches_json(batches: list[StateBatch]) -> list[dict[str, Any]]:
    return [{"firstOffset": a, "lastOffset": b, "deliveryState": s, "deliveryCount": c} for a, b, s, c in batches]


def to_json(key: bytes, value: bytes | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Kafka's ``ShareGroupStateMessageParser`` view: ``{"type": "<key type>", "data": {...}}`` and
    ``{"version": "0", "data": {...}}`` (``None`` for a tombstone), the specs' camelCase names."""
    t, k = decode_key(key)
    key_json = {"type": str(t), "data": {"groupId": k.group, "topicId": kafka_uuid(k.topic_id),
                                         "partition": k.partition}}
    if value is None:
        return key_json, None
    data: dict[str, Any]
    if t == SNAPSHOT:
        s = decode_snapshot(value)
        data = {"snapshotEpoch": s.snapshot_epoch, "stateEpoch": s.state_epoch, "leaderEpoch": s.leader_epoch,
                "startOffset": s.start_offset, "createTimestamp": s.create_ts, "writeTimestamp": s.write_ts,
                "stateBatches": _batches_json(s.batches)}
    else:
        se, le, start, batches = decode_update(value)
        data = {"snapshotEpoch": se, "leaderEpoch": le, "startOffset": start, "stateBatches": _batches_json(batches)}
    return key_json, {"version": str(VALUE_VERSION), "data": data}
