"""Records of the internal topic ``__transaction_state``, keyed and valued as Kafka writes them.

Layouts are Kafka's ``TransactionLogKey`` / ``TransactionLogValue`` message specs
(``transaction-coordinator/src/main/resources/common/message``; facts only):

* key: int16 version **0** (``CoordinatorRecordType.TRANSACTION_LOG``) then ``TransactionalId string`` (int16
  length, UTF-8).
* value: int16 version, then ``TransactionLogValue`` at that version. v0 (not flexible): ``ProducerId int64,
  ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions nullable
  []{Topic string, PartitionIds []int32}, TransactionLastUpdateTimestampMs int64,
  TransactionStartTimestampMs int64``. v1 (flexible: compact strings and arrays, tagged-field sections in the
  value and in each partitions entry) adds the tagged fields ``PreviousProducerId int64`` (tag 0, default -1),
  ``NextProducerId int64`` (tag 1, default -1) and ``ClientTransactionVersion int16`` (tag 2, default 0); newer
  Kafka versions add more tags, which a reader skips. Kafka writes v0 unless the client uses transactions
  version 2 (KIP-890 part 2). As Kafka 4, tidelog writes v1 once ``transaction.version`` >= 1 is finalized (the
  default, :func:`tidelog.broker.txn.tv2.log_value_version`), v0 below; it reads both.
* ``TransactionPartitions`` is null when the state is Empty (Kafka's ``valueToBytes``) and ignored on read then.
* a tombstone (null value) removes the transactional id (``transactional.id.expiration.ms``).

Status bytes (Kafka's ``TransactionState.id``): Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7.

Transactional id to partition: ``Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions``,
the same function the group coordinator uses for groups (:func:`tidelog.broker.group.records.partition_for`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tidelog.broker.group.records import partition_for
from tidelog.records.varint import decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "TRANSACTION_STATE_TOPIC", "TxnLogValue", "TxnSchemaError", "decode_key", "decode_value", "encode_key",
    "encode_value", "partition_for",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0  # what tidelog writes for a transaction of a client before transactions v2
HIGHEST_VALUE_VERSION = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_V0_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start


class TxnSchemaError(ValueError):
    """A ``__transaction_state`` key or value that cannot be decoded."""


@dataclass(slots=True)
class TxnLogValue:
    """One ``TransactionLogValue``. ``partitions``: topic -> partition ids, in the order written."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_timestamp_ms: int = -1
    start_timestamp_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


# ----------------------------------------------------------------------------------------------- key


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise TxnSchemaError("transactional id longer than 32767 bytes")
    return _I16.pack(KEY_VERSION) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes | memoryview) -> str:
    """The transactional id of a key; :class:`TxnSchemaError` for another key version or bad bytes."""
    data = bytes(data)
    if len(data) < 4:
        raise TxnSchemaError("transaction log key too short")
    (version,) = _I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        raise TxnSchemaError(f"unknown transaction log key version {version}")
    (n,) = _I16.unpack_from(data, 2)
    if n < 0 or 4 + n > len(data):
        raise TxnSchemaError("transaction log key: bad string length")
    try:
        return data[4:4 + n].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TxnSchemaError("transaction log key: invalid UTF-8") from exc


# ----------------------------------------------------------------------------------------------- value


def _str16(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise TxnSchemaError("topic name longer than 32767 bytes")
    return _I16.pack(len(raw)) + raw


def _compact_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return encode_unsigned_varint(len(raw) + 1) + raw


def encode_value(v: TxnLogValue, version: int | None = None) -> bytes:
    """``TransactionLogValue`` at ``version`` (0 or 1; None: 1 for a transactions-v2 record, else 0), prefixed by
    the version. Partitions are written null when the status is Empty (0), as Kafka does."""
    if version is None:
        version = 1 if v.client_transaction_version >= 1 else VALUE_VERSION
    if version not in (0, 1):
        raise TxnSchemaError(f"unsupported transaction log value version {version}")
    out = [_I16.pack(version), _V0_HEAD.pack(v.producer_id, v.producer_epoch, v.transaction_timeout_ms, v.status)]
    parts = None if v.status == 0 else v.partitions
    if version == 0:
        if parts is None:
            out.append(_I32.pack(-1))
        else:
            out.append(_I32.pack(len(parts)))
            for topic, ids in parts.items():
                out.append(_str16(topic))
                out.append(_I32.pack(len(ids)))
                out.append(struct.pack(f">{len(ids)}i", *ids))
        out.append(_TAIL.pack(v.last_update_timestamp_ms, v.start_timestamp_ms))
        return b"".join(out)
    if parts is None:
        out.append(b"\x00")  # compact null array
    else:
        out.append(encode_unsigned_varint(len(parts) + 1))
        for topic, ids in parts.items():
            out.append(_compact_str(topic))
            out.append(encode_unsigned_varint(len(ids) + 1))
            out.append(struct.pack(f">{len(ids)}i", *ids))
            out.append(b"\x00")  # no tagged fields in the entry
    out.append(_TAIL.pack(v.last_update_timestamp_ms, v.start_timestamp_ms))
    tags: list[tuple[int, bytes]] = []
    if v.previous_producer_id != -1:
        tags.append((0, _I64.pack(v.previous_producer_id)))
    if v.next_producer_id != -1:
        tags.append((1, _I64.pack(v.next_producer_id)))
    if v.client_transaction_version != 0:
        tags.append((2, _I16.pack(v.client_transaction_version)))
    out.append(encode_unsigned_varint(len(tags)))
    for tag, raw in tags:
        out.append(encode_unsigned_varint(tag) + encode_unsigned_varint(len(raw)) + raw)
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TxnSchemaError("transaction log value truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct) -> tuple:
        return st.unpack(self.take(st.size))

    def uvarint(self) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.data, self.pos)
        except Exception as exc:
            raise TxnSchemaError("transaction log value: bad varint") from exc
        return value

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TxnSchemaError("transaction log value: invalid UTF-8") from exc

    def skip_tags(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags


def decode_value(data: bytes | memoryview) -> TxnLogValue:
    r = _Reader(bytes(data))
    (version,) = r.unpack(_I16)
    if version < 0 or version > HIGHEST_VALUE_VERSION:
        raise TxnSchemaError(f"unknown transaction log value version {version}")
    pid, epoch, timeout, status = r.unpack(_V0_HEAD)
    if not 0 <= status <= 7:
        raise TxnSchemaError(f"unknown transaction status {status}")
    parts: dict[str, list[int]] = {}
    if version == 0:
        (n,) = r.unpack(_I32)
        for _ in range(max(n, 0)):
            (tl,) = r.unpack(_I16)
            topic = r.text(tl)
            (k,) = r.unpack(_I32)
            ids = list(struct.unpack(f">{max(k, 0)}i", r.take(4 * max(k, 0))))
            parts.setdefault(topic, []).extend(ids)
    else:
        n = r.uvarint() - 1
        for _ in range(max(n, 0)):
            topic = r.text(r.uvarint() - 1)
            k = r.uvarint() - 1
            ids = list(struct.unpack(f">{max(k, 0)}i", r.take(4 * max(k, 0))))
            parts.setdefault(topic, []).extend(ids)
            r.skip_tags()
    last_update, start = r.unpack(_TAIL)
    value = TxnLogValue(pid, epoch, timeout, status, {} if status == 0 else parts, last_update, start)
    if version >= 1:
        tags = r.skip_tags()
        try:
            if 0 in tags:
                (value.previous_producer_id,) = _I64.unpack(tags[0])
            if 1 in tags:
                (value.next_producer_id,) = _I64.unpack(tags[1])
            if 2 in tags:
                (value.client_transaction_version,) = _I16.unpack(tags[2])
        except struct.error as exc:
            raise TxnSchemaError("transaction log value: bad tagged field") from exc
    return value

