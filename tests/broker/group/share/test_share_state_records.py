"""``__share_group_state`` records (ShareSnapshot / ShareUpdate, Kafka's layouts), the merge of state batches, the
placement of a share partition's key, and the share partition rebuilt from its persisted state."""

from __future__ import annotations

import struct
import uuid

from tidelog.broker.group.records import java_string_hash
from tidelog.broker.group.share_partition import ACKNOWLEDGED, ARCHIVED, AVAILABLE, SharePartition
from tidelog.broker.group.share_state_records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareState,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
    merge_batches,
    state_partition,
    to_json,
)

TID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").bytes


def test_key_layout_and_placement() -> None:
    key = ShareKey("grp", TID, 7)
    raw = encode_key(SNAPSHOT, key)
    # int16 key version (the record type), int16-length group id, 16-byte topic id, int32 partition
    assert raw == struct.pack(">hh", 0, 3) + b"grp" + TID + struct.pack(">i", 7)
    assert decode_key(raw) == (SNAPSHOT, key) and decode_key(encode_key(UPDATE, key)) == (UPDATE, key)
    # Kafka's coordinator key: "group:topicId:partition", the id as Uuid.toString (URL-safe base64, no padding)
    assert key.coordinator_key() == "grp:Dx4tPEtaaXiHlqW0w9Lh8A:7"
    h = java_string_hash(key.coordinator_key())
    assert state_partition(key, 50) == abs(h) % 50


def test_values_round_trip_and_json() -> None:
    s = ShareState(snapshot_epoch=3, state_epoch=1, leader_epoch=5, start_offset=100,
                   batches=[(100, 104, 2, 1), (105, 105, 0, 3)], create_ts=1700, write_ts=1800)
    raw = encode_snapshot(s)
    assert raw[:2] == b"\x00\x00"  # value version 0, flexible
    assert decode_snapshot(raw) == s
    u = encode_update(3, 5, -1, [(106, 110, 4, 1)])
    assert decode_update(u) == (3, 5, -1, [(106, 110, 4, 1)])
    kj, pj = to_json(encode_key(UPDATE, ShareKey("g", TID, 0)), u)
    assert kj == {"type": "1", "data": {"groupId": "g", "topicId": "Dx4tPEtaaXiHlqW0w9Lh8A", "partition": 0}}
    assert pj == {"version": "0", "data": {"snapshotEpoch": 3, "leaderEpoch": 5, "startOffset": -1, "stateBatches": [
        {"firstOffset": 106, "lastOffset": 110, "deliveryState": 4, "deliveryCount": 1}]}}
    assert to_json(encode_key(SNAPSHOT, ShareKey("g", TID, 0)), None)[1] is None  # a tombstone


def test_merge_newer_wins_and_start_offset_trims() -> None:
    old = [(10, 19, 0, 1), (20, 29, 2, 1)]
    assert merge_batches(old, [(15, 22, 4, 2)], 10) == [(10, 14, 0, 1), (15, 22, 4, 2), (23, 29, 2, 1)]
    assert merge_batches(old, [(12, 12, 2, 1)], 11) == [(11, 11, 0, 1), (12, 12, 2, 1), (13, 19, 0, 1),
                                                         (20, 29, 2, 1)]
    assert merge_batches(old, [], 25) == [(25, 29, 2, 1)]
    assert merge_batches(old, [(0, 40, 2, 1)], -1) == [(0, 40, 2, 1)]


def test_share_partition_restored_from_its_state() -> None:
    sp = SharePartition.restore(10, [(10, 11, 2, 1), (12, 13, 0, 2), (16, 16, 4, 5)], 30000, 5, 2000)
    assert sp.spso == 12 and sp.speo == 17  # 10-11 acknowledged: the window starts after them
    assert sp.state_of(12) == (AVAILABLE, 2) and sp.state_of(14) == (AVAILABLE, 0)  # 14-15: a gap, never delivered
    assert sp.state_of(16) == (ARCHIVED, 5)
    got = sp.acquire("m", [(12, 16, False), (17, 19, False)], 100, 0.0, 20)
    assert got == [(12, 13, 3), (14, 15, 1), (17, 19, 1)]
    sp.acknowledge("m", 12, 13, [1])
    assert sp.persisted_batches() == [(14, 15, 0, 1), (16, 16, 4, 5), (17, 19, 0, 1)]
    assert sp.state_of(14) is not None and sp.state_of(12) is None
    sp.acknowledge("m", 17, 19, [1])
    assert sp.persisted_batches() == [(14, 15, 0, 1), (16, 16, 4, 5), (17, 19, ACKNOWLEDGED, 1)]
    sp.acknowledge("m", 14, 15, [1])
    assert sp.spso == 20 and sp.persisted_batches() == []
