"""The second pass's per-batch work: which records of a batch survive, and the batch rebuilt around them
(Kafka's ``MemoryRecords.filterTo`` with the cleaner's ``RecordFilter``): one C call per batch
(:data:`c_filter_records`) or the pure-Python reference (:func:`_scan_records` + :meth:`OffsetMap.get_many` +
:func:`_retained_records`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidelog.records.batch import build_batch
from tidelog.records.compression import compress
from tidelog.records.header import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_BASE_TIMESTAMP,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_PARTITION_LEADER_EPOCH,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECORDS_COUNT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    HeaderTuple,
    seal_batch,
)
from tidelog.records.recwalk import walk_records
from tidelog.records.varint import decode_varint, decode_varlong, encode_unsigned, encode_zigzag_varlong
from tidelog.storage.cleaner.batches import _check_crc, _load_c, _records_of
from tidelog.storage.cleaner.txn_metadata import CleanedTransactionMetadata
from tidelog.storage.offset_map import OffsetMap

c_filter_records = _load_c("filter_records")
"""The C filter of one batch's records (:meth:`_Filter.apply`: walk, lookups, keep/drop, the kept records
re-encoded), or None for the pure-Python :func:`_scan_records` + :meth:`OffsetMap.get_many` + the loop in
:meth:`_Filter.apply` + :func:`_retained_records` (the reference: same bytes, same exceptions and messages)."""


def _scan_records(
    data: bytes, p: int, n: int, count: int
) -> tuple[list[int], list[bytes | None], list[int], list[bool]]:
    """Per record of ``data[p:n]``: start position (the length varint), key (None when null), offset delta and
    whether the value is null; the end of record ``i`` is the start of record ``i + 1`` (or ``n``). The records
    are walked and checked by the one record walk (:func:`tidelog.records.recwalk.walk_records`)."""
    starts: list[int] = []
    keys: list[bytes | None] = []
    deltas: list[int] = []
    nulls: list[bool] = []
    start = p
    for end, _tsd, od, kpos, klen, _vpos, vlen, _hpos, _hc in walk_records(data, p, n, count):
        starts.append(start)
        keys.append(None if klen < 0 else data[kpos : kpos + klen])
        deltas.append(od)
        nulls.append(vlen < 0)
        start = end
    return starts, keys, deltas, nulls


def _retained_records(
    data: bytes, starts: list[int], n: int, kept: list[int], old_base: int, new_base: int, lat_time: int | None
) -> tuple[list[bytes], int]:
    """The bytes of the kept records (indexes into ``starts``) relative to ``new_base``, and their max timestamp.

    A record whose timestamp delta does not change is copied verbatim; otherwise only its length and
    timestampDelta are re-encoded and the rest (offset delta, key, value, headers) is copied. ``lat_time``: a
    LogAppendTime batch, whose records all read as that time (Kafka rebuilds them so)."""
    parts: list[bytes] = []
    add = parts.append
    last = len(starts) - 1
    max_ts = NO_TIMESTAMP
    for i in kept:
        start = starts[i]
        end = starts[i + 1] if i < last else n
        p = decode_varint(data, start)[1] + 1  # the length varint, attributes
        tsd, after = decode_varlong(data, p)
        ts = lat_time if lat_time is not None else old_base + tsd
        if ts > max_ts:
            max_ts = ts
        new_tsd = ts - new_base
        if new_tsd == tsd:
            add(data[start:end])
        else:
            body = b"".join((data[p - 1 : p], encode_zigzag_varlong(new_tsd), data[after:end]))
            add(encode_unsigned(len(body) << 1))
            add(body)
    return parts, max_ts


@dataclass(slots=True)
class _Filter:
    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    producer_last_offsets: dict[int, int]
    min_horizon: int | None = None
    _buffers: tuple[bytearray, Any, int] | None = None  # offset_map.buffers(), fixed for the map's life
    #: producer id -> current epoch (a producer whose last record is a marker keeps that marker)
    producer_epochs: dict[int, int] = field(default_factory=dict)
    #: the transactions of the group being cleaned (set by clean_segments); None: no transaction rules
    txns: CleanedTransactionMetadata | None = None

    def _horizon_seen(self, h: int) -> None:
        self.min_horizon = h if self.min_horizon is None else min(self.min_horizon, h)

    def _empty(self, fields: HeaderTuple, horizon: int | None) -> bytes:
        """The batch with no records (Kafka's RETAIN_EMPTY): offsets, producer fields and flags kept."""
        attributes = fields[H_ATTRIBUTES]
        return build_batch(
            [],
            base_offset=fields[H_BASE_OFFSET],
            timestamp_type=LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME,
            producer_id=fields[H_PRODUCER_ID],
            producer_epoch=fields[H_PRODUCER_EPOCH],
            base_sequence=fields[H_BASE_SEQUENCE],
            is_transactional=bool(attributes & TRANSACTIONAL_MASK),
            is_control=bool(attributes & CONTROL_MASK),
            partition_leader_epoch=fields[H_PARTITION_LEADER_EPOCH],
            max_timestamp=fields[H_MAX_TIMESTAMP],
            delete_horizon_ms=horizon,
            last_offset_delta=fields[H_LAST_OFFSET_DELTA],
        )

    def _control(self, buf: bytes, pos: int, fields: HeaderTuple, bsize: int) -> tuple[bytes | memoryview | None, int, int, int]:
        """A control batch (Kafka's cleaner ``checkBatchRetention`` for markers): kept until its transaction's
        data is gone (the tracker says it may be discarded), then given a delete horizon, then removed after it
        (kept empty if it is its producer's last record)."""
        view = memoryview(buf)[pos : pos + bsize]
        count = fields[H_RECORDS_COUNT]
        txns = self.txns
        _check_crc(buf, pos, fields)
        if txns is None or not txns.on_control_batch_read(fields, view):
            return view, count, count, fields[H_MAX_TIMESTAMP]
        attributes = fields[H_ATTRIBUTES]
        horizon = fields[H_BASE_TIMESTAMP] if attributes & DELETE_HORIZON_MASK else None
        if (horizon is not None and self.now_ms >= horizon) or not count:
            pid = fields[H_PRODUCER_ID]
            if (
                pid in self.producer_epochs
                and self.producer_last_offsets.get(pid, -1) < 0
                and self.producer_epochs[pid] == fields[H_PRODUCER_EPOCH]
            ):
                return (view, count, count, fields[H_MAX_TIMESTAMP]) if not count else (
                    self._empty(fields, horizon), count, 0, fields[H_MAX_TIMESTAMP])
            return None, count, 0, NO_TIMESTAMP
        if horizon is not None:
            self._horizon_seen(horizon)
            return view, count, count, fields[H_MAX_TIMESTAMP]
        # the first cleaning that finds the marker discardable: the delete horizon is set (records unchanged)
        new_horizon = self.now_ms + self.delete_retention_ms
        self._horizon_seen(new_horizon)
        data, p, n = _records_of(buf, pos, fields)
        starts, _keys, _deltas, _nulls = _scan_records(data, p, n, count)
        rebuilt, max_ts = _rebuild(data, n, fields, starts, list(range(count)), new_horizon)
        return rebuilt, count, count, max_ts

    def apply(
        self, buf: bytes, pos: int, fields: HeaderTuple
    ) -> tuple[bytes | memoryview | None, int, int, int]:
        """(bytes to write or None, records read, records kept, max timestamp of what is written) for the batch
        at ``buf[pos:]``. An unchanged batch comes back as a view of ``buf``."""
        bsize = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        attributes = fields[H_ATTRIBUTES]
        count = fields[H_RECORDS_COUNT]
        if attributes & (CONTROL_MASK | TRANSACTIONAL_MASK):
            if self.txns is None:
                return memoryview(buf)[pos : pos + bsize], count, count, fields[H_MAX_TIMESTAMP]
            if attributes & CONTROL_MASK:
                return self._control(buf, pos, fields, bsize)
            if self.txns.on_batch_read(fields):  # an aborted transaction: its records go, whatever their keys
                _check_crc(buf, pos, fields)
                pid = fields[H_PRODUCER_ID]
                if self.producer_last_offsets.get(pid) != fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA]:
                    return None, count, 0, NO_TIMESTAMP
                return self._empty(fields, None), count, 0, fields[H_MAX_TIMESTAMP]
            # a committed transaction's batch: the records are cleaned by key like any other
        _check_crc(buf, pos, fields)
        data, p, n = _records_of(buf, pos, fields)
        base = fields[H_BASE_OFFSET]
        horizon = fields[H_BASE_TIMESTAMP] if attributes & DELETE_HORIZON_MASK else None
        expired = horizon is not None and self.now_ms >= horizon
        lat = attributes & TIMESTAMP_TYPE_MASK
        c_filter = c_filter_records
        res = None
        if c_filter is not None:
            offset_map = self.offset_map
            buffers = self._buffers
            if buffers is None:
                buffers = self._buffers = offset_map.buffers()
            digests, offsets, slots = buffers
            res = c_filter(
                digests, offsets, slots, data, p, n, count, base, expired, horizon,
                self.now_ms + self.delete_retention_ms, fields[H_MAX_TIMESTAMP] if lat else None,
                fields[H_BASE_TIMESTAMP],
            )
        if res is None:  # the pure-Python reference (no C, or the C walk declined the records)
            starts, keys, deltas, nulls = _scan_records(data, p, n, count)
            latest = self.offset_map.get_many([b"" if k is None else k for k in keys])
            kept: list[int] = []
            tombstones = False
            for i, found in enumerate(latest):
                if keys[i] is None:  # a compacted log has no use for a record without a key
                    continue
                if found >= 0 and base + deltas[i] < found:
                    continue
                if nulls[i]:
                    if expired:
                        continue
                    tombstones = True
                kept.append(i)
            nkept = len(kept)
        else:
            nkept, tombstones, probes, payload, new_base, c_max_ts = res
            offset_map.count_lookups(count, probes)
        need_horizon = horizon is None and tombstones
        if tombstones:
            h = horizon if horizon is not None else self.now_ms + self.delete_retention_ms
            self.min_horizon = h if self.min_horizon is None else min(self.min_horizon, h)
        if nkept == count and not need_horizon:
            return memoryview(buf)[pos : pos + bsize], count, count, fields[H_MAX_TIMESTAMP]
        new_horizon = self.now_ms + self.delete_retention_ms if need_horizon else horizon
        if not nkept:
            pid = fields[H_PRODUCER_ID]
            if pid == NO_PRODUCER_ID or self.producer_last_offsets.get(pid) != base + fields[H_LAST_OFFSET_DELTA]:
                return None, count, 0, NO_TIMESTAMP
            return self._empty(fields, new_horizon), count, 0, fields[H_MAX_TIMESTAMP]
        if res is None:
            rebuilt, max_ts = _rebuild(data, n, fields, starts, kept, new_horizon)
        else:
            rebuilt, max_ts = _seal(fields, payload, nkept, new_base, c_max_ts, new_horizon), c_max_ts
        return rebuilt, count, nkept, max_ts


def _rebuild(
    data: bytes, n: int, fields: HeaderTuple, starts: list[int], kept: list[int], new_horizon: int | None
) -> tuple[bytes, int]:
    """The batch with only the ``kept`` records, as Kafka's ``MemoryRecords.filterTo`` builds it for v2: same
    base offset, lastOffsetDelta, producer fields, leader epoch and codec; baseTimestamp is the delete
    horizon when set, else the first kept record's timestamp; maxTimestamp is recomputed (CreateTime) or kept
    (LogAppendTime). Record bytes are reused (see :func:`_retained_records`)."""
    attributes = fields[H_ATTRIBUTES]
    old_base = fields[H_BASE_TIMESTAMP]
    lat_time = fields[H_MAX_TIMESTAMP] if attributes & TIMESTAMP_TYPE_MASK else None
    if new_horizon is not None:
        new_base = new_horizon
    elif lat_time is not None:
        new_base = lat_time
    else:
        new_base = old_base + decode_varlong(data, decode_varint(data, starts[kept[0]])[1] + 1)[0]
    parts, max_ts = _retained_records(data, starts, n, kept, old_base, new_base, lat_time)
    if lat_time is not None:
        max_ts = lat_time
    return _seal(fields, b"".join(parts), len(kept), new_base, max_ts, new_horizon), max_ts


def _seal(
    fields: HeaderTuple, payload: bytes, count: int, new_base: int, max_ts: int, new_horizon: int | None
) -> bytes:
    """The rebuilt batch around the kept records' bytes ``payload`` (compressed here with the batch's codec):
    the header of :func:`_rebuild` with ``count`` records, baseTimestamp ``new_base``, maxTimestamp ``max_ts``."""
    attributes = fields[H_ATTRIBUTES]
    codec = attributes & COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload)
    new_attributes = attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    if new_horizon is not None:
        new_attributes |= DELETE_HORIZON_MASK
    return seal_batch(
        fields[H_BASE_OFFSET],
        fields[H_PARTITION_LEADER_EPOCH],
        new_attributes,
        fields[H_LAST_OFFSET_DELTA],
        new_base,
        max_ts,
        fields[H_PRODUCER_ID],
        fields[H_PRODUCER_EPOCH],
        fields[H_BASE_SEQUENCE],
        count,
        payload,
    )
