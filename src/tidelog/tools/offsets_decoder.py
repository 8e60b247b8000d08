"""``kafka-dump-log --offsets-decoder``: the records of ``__consumer_offsets`` (offset commits, group metadata)
decoded to the JSON Kafka's ``OffsetsMessageParser`` prints."""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any

from tidelog.broker.group import consumer_records, share_group_records
from tidelog.broker.group.records import (
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from tidelog.protocol import codec
from tidelog.protocol.exceptions import ProtocolError
from tidelog.protocol.schema import in_range, load_spec

# ---------------------------------------------------------------------------------- --offsets-decoder

OFFSETS_KEY_TYPES = (0, 1, 2)  # OffsetCommitKey (0, 1) and GroupMetadataKey (2): the types tidelog writes
CONSUMER_PROTOCOL_TYPE = "consumer"
DELETE_PAYLOAD = "<DELETE>"


@dataclass(slots=True, frozen=True)
class OffsetsRecord:
    """One ``__consumer_offsets`` record as Kafka's ``OffsetsMessageParser`` shows it.

    ``key_text`` follows ``key:`` on the record's line; ``payload_text`` follows ``payload:`` (``None``: no
    payload is printed, the record could not be decoded). ``key_json`` / ``payload_json`` are the decoded
    objects whose compact JSON those texts are (``None`` for an undecodable record and for a tombstone's
    payload, which prints ``<DELETE>``).
    """

    key_text: str
    payload_text: str | None
    key_json: dict[str, Any] | None
    payload_json: dict[str, Any] | None


def _compact_json(obj: Any) -> str:
    """Jackson's ``JsonNode.toString``: no spaces, non-ASCII characters written as they are."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _b64(data: bytes | bytearray | memoryview | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")


def parse_offsets_record(offset: int, key: bytes | None, value: bytes | None) -> OffsetsRecord:
    """Decode a ``__consumer_offsets`` record with the group coordinator's own decoders.

    Kafka's behaviour (``DumpLogSegments.OffsetsMessageParser``): the key becomes
    ``{"type":"<key version>","data":{...}}``, the value ``{"version":"<value version>","data":{...}}`` with
    the message specs' camelCase field names and only the fields of that version; a null value prints
    ``<DELETE>``. For a group of protocol type ``consumer`` each member's subscription and assignment bytes
    are replaced by their decoded ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` (kept as
    base64 when they do not decode). An unknown key type or an undecodable record gives a one-line
    explanation instead of key and payload. Kafka aborts the dump on a record without a key; here that
    message is printed as the record's key text and the dump goes on.
    """
    if key is None:
        return OffsetsRecord(
            f"Failed to decode message at offset {offset} using offset topic decoder (message had a missing key)",
            None,
            None,
            None,
        )
    key = bytes(key)
    key_version = _version(key) if len(key) >= 2 else None  # a shorter key fails in decode_key below
    if key_version in consumer_records.KEY_TYPES:  # KIP-848 ConsumerGroup* records (types 3-8, 16)
        try:
            ckey, cpayload = consumer_records.to_json(key, None if value is None else bytes(value))
        except (ValueError, struct.error) as exc:
            return OffsetsRecord(f"Error at offset {offset}, skipping. {exc}", None, None, None)
        ptext = DELETE_PAYLOAD if cpayload is None else _compact_json(cpayload)
        return OffsetsRecord(_compact_json(ckey), ptext, ckey, cpayload)
    if key_version in share_group_records.KEY_TYPES:  # KIP-932 ShareGroup* records (types 9-15)
        try:
            skey, spayload = share_group_records.to_json(key, None if value is None else bytes(value))
        except (ValueError, struct.error) as exc:
            return OffsetsRecord(f"Error at offset {offset}, skipping. {exc}", None, None, None)
        ptext = DELETE_PAYLOAD if spayload is None else _compact_json(spayload)
        return OffsetsRecord(_compact_json(skey), ptext, skey, spayload)
    if key_version is not None and key_version not in OFFSETS_KEY_TYPES:
        return OffsetsRecord(f"Unknown record type {key_version} at offset {offset}, skipping.", None, None, None)
    try:
        decoded_key = decode_key(key)
        if isinstance(decoded_key, OffsetKey):
            key_data: dict[str, Any] = {
                "group": decoded_key.group,
                "topic": decoded_key.topic,
                "partition": decoded_key.partition,
            }
        else:
            key_data = {"group": decoded_key.group}
        key_json = {"type": str(key_version), "data": key_data}
        if value is None:
            return OffsetsRecord(_compact_json(key_json), DELETE_PAYLOAD, key_json, None)
        value = bytes(value)
        if isinstance(decoded_key, OffsetKey):
            offset_value = decode_offset_value(value)
            value_data = _offset_value_json(offset_value, _version(value))
        else:
            group_value = decode_group_value(value)
            value_data = _group_value_json(group_value, _version(value))
        payload_json = {"version": str(_version(value)), "data": value_data}
    except (ValueError, struct.error) as exc:  # SchemaError is a ValueError
        return OffsetsRecord(f"Error at offset {offset}, skipping. {exc}", None, None, None)
    return OffsetsRecord(_compact_json(key_json), _compact_json(payload_json), key_json, payload_json)


def _version(data: bytes) -> int:
    """The int16 version that starts a key or value (at least 2 bytes: checked or already decoded)."""
    return int(struct.unpack_from(">h", data, 0)[0])


def _offset_value_json(v: OffsetValue, version: int) -> dict[str, Any]:
    """``OffsetCommitValue`` fields of ``version``: leaderEpoch from v3, expireTimestamp only in v1."""
    data: dict[str, Any] = {"offset": v.offset}
    if version >= 3:
        data["leaderEpoch"] = v.leader_epoch
    data["metadata"] = v.metadata
    data["commitTimestamp"] = v.commit_timestamp
    if version == 1:
        data["expireTimestamp"] = v.expire_timestamp
    return data


def _group_value_json(v: GroupValue, version: int) -> dict[str, Any]:
    """``GroupMetadataValue`` fields of ``version``; consumer-protocol member payloads decoded."""
    consumer = v.protocol_type == CONSUMER_PROTOCOL_TYPE
    data: dict[str, Any] = {
        "protocolType": v.protocol_type,
        "generation": v.generation,
        "protocol": v.protocol,
        "leader": v.leader,
    }
    if version >= 2:
        data["currentStateTimestamp"] = v.current_state_timestamp
    members: list[dict[str, Any]] = []
    for m in v.members:
        member: dict[str, Any] = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member["clientId"] = m.client_id
        member["clientHost"] = m.client_host
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout
        member["sessionTimeout"] = m.session_timeout
        subscription: Any = _b64(m.subscription)
        assignment: Any = _b64(m.assignment)
        if consumer:
            subscription = _consumer_protocol_json("ConsumerProtocolSubscription", m.subscription) or subscription
            assignment = _consumer_protocol_json("ConsumerProtocolAssignment", m.assignment) or assignment
        member["subscription"] = subscription
        member["assignment"] = assignment
        members.append(member)
    data["members"] = members
    return data


def _consumer_protocol_json(name: str, payload: bytes) -> dict[str, Any] | None:
    """A consumer-protocol payload (int16 version + body) as Kafka's JSON; ``None`` when it does not decode.

    Decoded with the protocol codec at the payload's own version; a version outside the spec's valid range
    does not decode (Kafka's generated reader refuses it), so the caller keeps the base64.
    """
    if len(payload) < 2:
        return None
    (version,) = struct.unpack_from(">h", payload, 0)
    try:
        spec = load_spec(name)
        if not in_range(version, spec.valid_versions):
            return None
        body = codec.decode_data(name, version, memoryview(payload)[2:])
    except (ProtocolError, KeyError, ValueError, OSError):
        return None
    return _spec_json(spec.fields, body, version)


def _spec_json(fields: list[Any], body: dict[str, Any], version: int) -> dict[str, Any]:
    """A decoded message body as Kafka's generated JSON converters write it: the fields present in
    ``version``, named in camelCase as in the spec, bytes as base64, structs and arrays recursively."""
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        value = body.get(f.key)
        if f.is_struct:
            if f.is_array:
                value = None if value is None else [_spec_json(f.fields, item, version) for item in value]
            elif value is not None:
                value = _spec_json(f.fields, value, version)
        elif f.type == "bytes":
            value = _b64(value)
        out[f.name[:1].lower() + f.name[1:]] = value
    return out
