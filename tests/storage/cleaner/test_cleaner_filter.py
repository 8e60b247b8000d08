"""The cleaner's batch filter against a reference that decodes every record and rebuilds the batch with
``build_batch`` (what Kafka's ``MemoryRecords.filterTo`` produces for v2): same bytes for every codec, timestamp
type, tombstone/horizon case and producer-state case."""

from __future__ import annotations

import random

import pytest

from tidelog.records.batch import build_batch, decode_batch
from tidelog.records.header import LOG_APPEND_TIME, NO_PRODUCER_ID, parse_header_tuple
from tidelog.storage.cleaner.batch_filter import _Filter
from tidelog.storage.offset_map import OffsetMap

NOW = 1_700_000_000_000
RETENTION = 1000


def reference(data: bytes, offset_map: OffsetMap, now: int, last_offsets: dict[int, int]) -> bytes | None:
    header, records = decode_batch(data)
    horizon = header.base_timestamp if header.has_delete_horizon else None
    kept = []
    tombstones = False
    for rec in records:
        if rec.key is None:
            continue
        found = offset_map.get(rec.key)
        if found >= 0 and rec.offset < found:
            continue
        if rec.value is None:
            if horizon is not None and now >= horizon:
                continue
            tombstones = True
        kept.append(rec)
    need_horizon = horizon is None and tombstones
    if len(kept) == len(records) and not need_horizon:
        return data
    new_horizon = now + RETENTION if need_horizon else horizon
    if not kept:
        pid = header.producer_id
        if pid == NO_PRODUCER_ID or last_offsets.get(pid) != header.last_offset:
            return None
    lat = header.timestamp_type == LOG_APPEND_TIME
    return build_batch(
        kept,
        base_offset=header.base_offset,
        compression=header.compression if kept else 0,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        max_timestamp=header.max_timestamp if lat or not kept else None,
        delete_horizon_ms=new_horizon,
        last_offset_delta=header.last_offset_delta,
    )


def random_batch(rng: random.Random, base_offset: int, codec: int) -> bytes:
    n = rng.randint(1, 12)
    recs = []
    delta = -1
    for _ in range(n):
        delta += rng.choice([1, 1, 1, 2, 200])
        key = None if rng.random() < 0.05 else b"k%d" % rng.randrange(20)
        value = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 5, 70, 300]))
        headers = [("h", b"x" * rng.randrange(3)), ("\udcff", None)] if rng.random() < 0.2 else []
        ts = NOW + rng.choice([0, 5, 100_000, -3, 10**9])
        recs.append((key, value, headers, ts, delta))
    lat = rng.random() < 0.2
    horizon = rng.choice([None, None, NOW - 10, NOW + 10**6]) if rng.random() < 0.3 else None
    pid = rng.choice([NO_PRODUCER_ID, 7, 8])
    return build_batch(
        recs,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=LOG_APPEND_TIME if lat else 0,
        max_timestamp=NOW + 42 if lat else None,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=base_offset if pid >= 0 else -1,
        partition_leader_epoch=3,
        delete_horizon_ms=horizon,
        last_offset_delta=delta + rng.choice([0, 0, 4]),
    )


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_filter_matches_decode_and_rebuild(codec: int) -> None:
    rng = random.Random(codec)
    for _round in range(30):
        batches = []
        offset = 0
        for _ in range(rng.randint(1, 8)):
            data = random_batch(rng, offset, codec)
            batches.append(data)
            offset = parse_header_tuple(data)[0] + parse_header_tuple(data)[6] + 1
        m = OffsetMap(24 * 200)
        for data in batches:  # the map of a dirty section starting at a random batch
            _, records = decode_batch(data)
            for r in records:
                if r.key is not None and rng.random() < 0.7:
                    m.put(r.key, r.offset)
        last_offsets = {7: offset - 1, 8: parse_header_tuple(batches[0])[0] + parse_header_tuple(batches[0])[6]}
        now = NOW + rng.choice([0, 2 * 10**6])
        flt = _Filter(m, now, RETENTION, last_offsets)
        for data in batches:
            expected = reference(data, m, now, last_offsets)
            buf = b"pad" + data
            out, nread, nkept, max_ts = flt.apply(buf, 3, parse_header_tuple(buf, 3))
            assert (None if out is None else bytes(out)) == expected
            assert nread == parse_header_tuple(data)[12]
            if expected is not None:
                h = decode_batch(expected)[0]
                assert nkept == h.records_count and max_ts == h.max_timestamp
