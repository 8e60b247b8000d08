"""Columnar decoding of v2 batches: the records of many batches as Arrow-layout column buffers.

:func:`new_builder` returns ``tidelog.client._columnar.ColumnBuilder`` (C, built by setup.py when a compiler
is there) or :class:`PyColumnBuilder` (the same interface and output, in Python, on top of
:func:`tidelog.records.batch.parse_records`). ``TIDELOG_PURE_PYTHON`` forces the Python builder.

``builder.add(data, count, base_offset, base_timestamp, log_append_time, ts_type, filtering, lo, hi, start_ts,
end_ts)`` appends the records of one batch's uncompressed records area and returns how many rows it added, or
-1 when the records are malformed (then nothing is added: decode the batch with ``decode_batch`` for the exact
error). With ``filtering`` only records with ``lo <= offset < hi`` and the timestamp in ``[start_ts, end_ts)``
(either None for unbounded) are kept. ``builder.finish()`` returns ``(n, offsets, timestamps_us,
timestamp_types, key_validity, key_nulls, key_offsets, key_data, value_validity, value_nulls, value_offsets,
value_data)`` (bytes: int64, int64 microseconds, int32, Arrow validity bitmap or None when there is no null,
int32 offsets, data) and resets the builder. ``rows`` and ``nbytes`` (key + value bytes) tell when to finish;
keep ``nbytes`` below 2 GiB (int32 offsets).
"""

from __future__ import annotations

import os
from array import array
from typing import Any

from tidelog.records.batch import parse_records
from tidelog.records.errors import RecordError
from tidelog.records.header import RECORD_BATCH_OVERHEAD
from tidelog.records.varint import encode_varlong


class _BinCol:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[bytes | None] = []

    def finish(self) -> tuple[bytes | None, int, bytes, bytes]:
        items = self.items
        nulls = sum(1 for v in items if v is None)
        validity = None
        if nulls:
            bits = bytearray((len(items) + 7) // 8)
            for i, v in enumerate(items):
                if v is not None:
                    bits[i >> 3] |= 1 << (i & 7)
            validity = bytes(bits)
        offs = array("i", [0])
        total = 0
        for v in items:
            if v is not None:
                total += len(v)
            offs.append(total)
        return validity, nulls, offs.tobytes(), b"".join(v for v in items if v is not None)


class PyColumnBuilder:
    """The pure-Python :class:`tidelog.client._columnar.ColumnBuilder`."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._offsets = array("q")
        self._stamps = array("q")
        self._types = array("i")
        self._keys = _BinCol()
        self._values = _BinCol()
        self._nbytes = 0

    @property
    def rows(self) -> int:
        return len(self._offsets)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def add(
        self,
        data: Any,
        count: int,
        base_offset: int,
        base_timestamp: int,
        log_append_time: int | None,
        ts_type: int,
        filtering: bool,
        lo: int,
        hi: int,
        start_ts: int | None,
        end_ts: int | None,
    ) -> int:
        try:
            recs = parse_records(bytes(data), count, base_offset, base_timestamp, log_append_time)
        except RecordError:
            return -1
        if filtering:
            recs = [r for r in recs if lo <= r.offset < hi and (start_ts is None or r.timestamp >= start_ts)
                    and (end_ts is None or r.timestamp < end_ts)]
        mask = (1 << 64) - 1
        for r in recs:
            self._offsets.append(r.offset)
            us = (r.timestamp * 1000) & mask
            self._stamps.append(us - (1 << 64) if us >= 1 << 63 else us)
            self._types.append(ts_type)
            self._keys.items.append(r.key)
            self._values.items.append(r.value)
            self._nbytes += len(r.key or b"") + len(r.value or b"")
        return len(recs)

    def finish(self) -> tuple[Any, ...]:
        n = self.rows
        out = (n, self._offsets.tobytes(), self._stamps.tobytes(), self._types.tobytes(),
               *self._keys.finish(), *self._values.finish())
        self._reset()
        return out


def _load_c_builder() -> Any:
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None
    try:
        from tidelog.client._columnar import ColumnBuilder
    except ImportError:
        return None
    return ColumnBuilder


CColumnBuilder = _load_c_builder()
"""The C builder class, or None (not built, or ``TIDELOG_PURE_PYTHON`` set)."""


def new_builder() -> Any:
    """A C :class:`ColumnBuilder` when available, else a :class:`PyColumnBuilder`."""
    return CColumnBuilder() if CColumnBuilder is not None else PyColumnBuilder()


# -- the other direction (the Spark sink): Arrow columns -> records of v2 batches --------------------------------
#
# ``murmur2(data)``: Kafka's ``Utils.murmur2`` (signed int32), the default partitioner's hash.
# ``assign_partitions(n, key, counts, topics, explicit, sticky, base) -> (slots, bad_row)`` and
# ``new_accumulator(limit)`` (``add(n, slots, key, value, headers, now_ms)`` / ``finish()`` / ``pending``): see
# ``_columnar_sink.c`` for the arguments; the C and Python versions give the same bytes.

RECORD_BATCH_HEADER_SIZE = RECORD_BATCH_OVERHEAD  # the name tests and callers use here


def py_murmur2(data: Any) -> int:
    """Kafka's ``Utils.murmur2``, as a signed int32."""
    data = bytes(data)
    m = 0x5BD1E995
    mask = 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[length & ~3:]
    rem = length % 4
    if rem == 3:
        h ^= tail[2] << 16
    if rem >= 2:
        h ^= tail[1] << 8
    if rem >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def _i32s(buf: Any) -> array:
    a = array("i")
    a.frombytes(bytes(buf))
    return a


def _bit(validity: Any, i: int) -> bool:
    return validity is None or bool((memoryview(validity).cast("B")[i >> 3] >> (i & 7)) & 1)


class _BinIn:
    """A binary column given as (validity or None, int32 offsets, data, array offset)."""

    __slots__ = ("data", "off", "offs", "validity")

    def __init__(self, col: Any) -> None:
        validity, offsets, data, off = col
        self.validity = None if validity is None else bytes(validity)
        self.offs = _i32s(offsets)
        self.data = bytes(data)
        self.off = off

    def at(self, i: int) -> bytes | None:
        j = self.off + i
        if not _bit(self.validity, j):
            return None
        s, e = self.offs[j], self.offs[j + 1]
        if s < 0 or e < s or e > len(self.data):
            raise ValueError("offsets out of bounds")
        return self.data[s:e]


def py_assign_partitions(n: int, key: Any, counts: Any, topics: Any, explicit: Any, sticky: Any,
                         base: Any) -> tuple[bytes, int]:
    keys = _BinIn(key) if key is not None else None
    cnt, stk, bas = _i32s(counts), _i32s(sticky), _i32s(base)
    tix = _i32s(topics) if topics is not None else None
    if explicit is not None:
        ev, eb, eoff = explicit
        exp = _i32s(eb)
        ev = None if ev is None else bytes(ev)
    out = array("i")
    for i in range(n):
        t = tix[i] if tix is not None else 0
        if not 0 <= t < len(cnt):
            raise ValueError("topic index out of range")
        c = cnt[t]
        if explicit is not None and _bit(ev, eoff + i):
            p = exp[eoff + i]
            if not 0 <= p < c:
                return out.tobytes(), i
        else:
            k = keys.at(i) if keys is not None else None
            if c <= 0:
                return out.tobytes(), i
            p = ((py_murmur2(k) & 0x7FFFFFFF) % c) if k is not None else stk[t]
        out.append(bas[t] + p)
    return out.tobytes(), -1


_zz = encode_varlong


class PyRecordAccumulator:
    """The pure-Python ``tidelog.client._columnar.RecordAccumulator``."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self.limit = limit
        self._slots: dict[int, list[Any]] = {}  # slot -> [bytearray, count, base_ts, max_ts]
        self.pending = 0

    def _seal(self, slot: int, out: list[Any]) -> None:
        buf, count, base_ts, max_ts = self._slots.pop(slot)
        out.append((slot, buf, count, base_ts, max_ts))
        self.pending -= count

    def add(self, n: int, slots: Any, key: Any, value: Any, headers: Any, now: int) -> list[Any]:
        sl = _i32s(slots)
        keys = _BinIn(key) if key is not None else None
        values = _BinIn(value)
        if headers is not None:
            lv, lo, loff, hk, hv = headers
            lv = None if lv is None else bytes(lv)
            lof = _i32s(lo)
            hkeys, hvals = _BinIn(hk), _BinIn(hv)
        out: list[Any] = []
        for i in range(n):
            s = sl[i]
            if s < 0:
                raise ValueError("negative slot")
            k = keys.at(i) if keys is not None else None
            v = values.at(i)
            hdrs: list[tuple[bytes, bytes | None]] = []
            if headers is not None and _bit(lv, loff + i):
                for h in range(lof[loff + i], lof[loff + i + 1]):
                    hdrs.append((hkeys.at(h) or b"", hvals.at(h)))
            payload = b"".join([
                _zz(-1 if k is None else len(k)), k or b"", _zz(-1 if v is None else len(v)), v or b"",
                _zz(len(hdrs)),
                *(part for hkb, hvb in hdrs for part in (_zz(len(hkb)), hkb, _zz(-1 if hvb is None else len(hvb)),
                                                         hvb or b"")),
            ])
            st = self._slots.get(s)
            if st is not None and max(now, st[3]) - st[2] > 0x7FFFFFFF:
                self._seal(s, out)
                st = None
            if st is not None:
                body = b"\x00" + _zz(now - st[2]) + _zz(st[1]) + payload
                rec = _zz(len(body)) + body
                if len(st[0]) - RECORD_BATCH_HEADER_SIZE + len(rec) > self.limit:
                    self._seal(s, out)
                    st = None
            if st is None:
                st = self._slots[s] = [bytearray(RECORD_BATCH_HEADER_SIZE), 0, now, now]
                body = b"\x00\x00\x00" + payload
                rec = _zz(len(body)) + body
            st[0] += rec
            st[1] += 1
            st[3] = max(st[3], now)
            self.pending += 1
        return out

    def finish(self) -> list[Any]:
        out: list[Any] = []
        for s in sorted(self._slots):
            self._seal(s, out)
        return out


def _load_c_sink() -> tuple[Any, Any, Any]:
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None, None, None
    try:
        from tidelog.client._columnar import RecordAccumulator, assign_partitions, murmur2
    except ImportError:
        return None, None, None
    return RecordAccumulator, assign_partitions, murmur2


CRecordAccumulator, c_assign_partitions, c_murmur2 = _load_c_sink()

murmur2 = c_murmur2 if c_murmur2 is not None else py_murmur2
assign_partitions = c_assign_partitions if c_assign_partitions is not None else py_assign_partitions


def new_accumulator(limit: int) -> Any:
    """A C ``RecordAccumulator`` when available, else a :class:`PyRecordAccumulator`."""
    return CRecordAccumulator(limit) if CRecordAccumulator is not None else PyRecordAccumulator(limit)
