"""The first pass of a cleaning: the key -> last offset map of the dirty section (Kafka's
``Cleaner.buildOffsetMap``), one C call per batch (:data:`c_put_records`) or the pure-Python reference
(:func:`_keys_and_deltas` + :meth:`OffsetMap.put_many`)."""

from __future__ import annotations

from tidelog.records.header import (
    CONTROL_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_RECORDS_COUNT,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
)
from tidelog.records.recwalk import walk_records
from tidelog.storage.cleaner.batches import _check_crc, _iter_batches, _load_c, _records_of
from tidelog.storage.cleaner.context import (
    IO_CHECK_BYTES,
    CleanerAbortedError,
    DedupeBufferTooSmallError,
    _Context,
)
from tidelog.storage.cleaner.txn_metadata import CleanedTransactionMetadata
from tidelog.storage.log import PartitionLog
from tidelog.storage.offset_map import OffsetMap

_INT32_MIN = -(1 << 31)

c_put_records = _load_c("put_records")
"""The C offset-map build of one batch's records (:meth:`OffsetMap.put_records`), or None for the pure-Python
:func:`_keys_and_deltas` + :meth:`OffsetMap.put_many` (the reference: same map, same exceptions and messages)."""


def _keys_and_deltas(data: bytes, p: int, n: int, count: int) -> tuple[list[bytes], list[int]]:
    """The keys (null keys skipped) and their offset deltas of ``count`` records in ``data[p:n]``, from the
    one record walk (:func:`tidelog.records.recwalk.walk_records`, which checks the framing)."""
    keys: list[bytes] = []
    deltas: list[int] = []
    add_key = keys.append
    add_delta = deltas.append
    for _end, _tsd, od, kpos, klen, _vpos, _vlen, _hpos, _hc in walk_records(data, p, n, count):
        if klen >= 0:
            add_key(data[kpos : kpos + klen])
            add_delta(od)
    return keys, deltas


def build_offset_map(
    plog: PartitionLog, start: int, end: int, offset_map: OffsetMap, ctx: _Context
) -> int:
    """Put every keyed record with offset in [start, end) into the map, except those of aborted transactions and
    control records (Kafka's ``buildOffsetMap``); returns the offset up to which the map is complete (``end``, or
    less when the map filled up)."""
    segments = plog.segments[:-1]
    txns: CleanedTransactionMetadata | None = None
    aborted = plog.collect_aborted_transactions(start, end)
    if aborted:
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions(aborted)
    put_many = offset_map.put_many
    max_entries = offset_map.max_entries
    result = ctx.result
    for i, seg in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else plog.segments[-1].base_offset
        if upper <= start:
            continue
        if seg.base_offset >= end:
            break
        try:
            handle = seg.handle
        except ValueError:  # closed by retention or truncation meanwhile
            raise CleanerAbortedError(f"segment {seg.log_path} was closed") from None
        pending = 0  # bytes read since the last ctx.io
        for buf, pos, _fpos, fields in _iter_batches(handle.fd, seg.size, ctx.chunk):
            base = fields[H_BASE_OFFSET]
            if base + fields[H_LAST_OFFSET_DELTA] < start:
                continue
            if base >= end:
                ctx.io(pending)
                return end
            attributes = fields[H_ATTRIBUTES]
            if attributes & CONTROL_MASK:
                if txns is not None:
                    txns.on_control_batch_read(fields, buf[pos : pos + fields[H_BATCH_LENGTH] + LOG_OVERHEAD])
                continue
            if attributes & TRANSACTIONAL_MASK and txns is not None and txns.on_batch_read(fields):
                continue  # an aborted transaction's records never supersede anything
            count = fields[H_RECORDS_COUNT]
            if len(offset_map) + count > max_entries:
                if len(offset_map) == 0:
                    raise DedupeBufferTooSmallError(
                        f"a batch of {count} records does not fit the offset map "
                        f"({max_entries} entries); raise log.cleaner.dedupe.buffer.size"
                    )
                ctx.io(pending)
                return max(base, start)
            bsize = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
            if pending >= IO_CHECK_BYTES:
                ctx.io(pending)
                pending = 0
            pending += bsize
            result.bytes_read += bsize
            _check_crc(buf, pos, fields)
            data, p, n = _records_of(buf, pos, fields)
            if c_put_records is not None and offset_map.put_records(
                c_put_records, data, p, n, count, base, start - base if base < start else _INT32_MIN
            ):
                continue
            keys, deltas = _keys_and_deltas(data, p, n, count)
            if base >= start:
                put_many(keys, [base + d for d in deltas])
            else:
                first = start - base
                kept = [(k, base + d) for k, d in zip(keys, deltas, strict=True) if d >= first]
                put_many([k for k, _ in kept], [o for _, o in kept])
        ctx.io(pending)
    return end
