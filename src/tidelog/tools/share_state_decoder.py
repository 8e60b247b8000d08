"""``kafka-dump-log --share-group-state-decoder``: the records of ``__share_group_state`` (ShareSnapshot,
ShareUpdate) decoded to the JSON Kafka's ``ShareGroupStateMessageParser`` prints (key ``{"type": "<key type>",
"data": {...}}``, payload ``{"version": "0", "data": {...}}``, a tombstone's payload ``<DELETE>``)."""

from __future__ import annotations

import struct

from tidelog.broker.group import share_state_records
from tidelog.tools.offsets_decoder import DELETE_PAYLOAD, OffsetsRecord, _compact_json


def parse_share_state_record(offset: int, key: bytes | None, value: bytes | None) -> OffsetsRecord:
    """Decode one ``__share_group_state`` record (the same shape as ``parse_offsets_record``'s answer)."""
    if key is None:
        return OffsetsRecord(f"Failed to decode message at offset {offset} using share group state decoder "
                             "(message had a missing key)", None, None, None)
    t = share_state_records.key_type(bytes(key))
    if t not in share_state_records.KEY_NAMES:
        return OffsetsRecord(f"Unknown record type {t} at offset {offset}, skipping.", None, None, None)
    try:
        kj, pj = share_state_records.to_json(bytes(key), None if value is None else bytes(value))
    except (ValueError, struct.error) as exc:
        return OffsetsRecord(f"Error at offset {offset}, skipping. {exc}", None, None, None)
    return OffsetsRecord(_compact_json(kj), DELETE_PAYLOAD if pj is None else _compact_json(pj), kj, pj)
