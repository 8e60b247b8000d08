"""Columnar decoding of v2 batches: the records of many batches as Arrow-layout column buffers.

:func:`new_builder` returns ``tidelog.records._columnar.ColumnBuilder`` (C, built by setup.py when a compiler
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
    """The pure-Python :class:`tidelog.records._columnar.ColumnBuilder`."""

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
        from tidelog.records._columnar import ColumnBuilder
    except ImportError:
        return None
    return ColumnBuilder


CColumnBuilder = _load_c_builder()
"""The C builder class, or None (not built, or ``TIDELOG_PURE_PYTHON`` set)."""


def new_builder() -> Any:
    """A C :class:`ColumnBuilder` when available, else a :class:`PyColumnBuilder`."""
    return CColumnBuilder() if CColumnBuilder is not None else PyColumnBuilder()
