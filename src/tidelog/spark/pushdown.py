"""Filter pushdown for the ``tidelog`` and ``tidelog-log`` batch sources (PySpark >= 4.1 ``pushFilters``).

What a ``WHERE`` clause on the Kafka schema's ``topic``, ``partition``, ``offset`` and ``timestamp`` columns
narrows before anything is read:

* ``topic`` (``=``, ``IN``, ``<>``, ``NOT IN``, ``LIKE 'prefix%'``) and ``partition`` (``=``, ``IN``, ``<>``,
  ``NOT IN``, ranges): which topic partitions are planned at all. Exact: Spark does not filter them again.
* ``offset`` (ranges, ``=``): each partition's start and end offset. Exact.
* ``timestamp`` lower bounds (``>=``, ``>``, ``=``): a start offset per partition, the earliest offset whose
  timestamp is at or after the bound (ListOffsets by timestamp through the broker, the ``.timeindex`` files for log
  directories): every record before it is older. Records after it may still be older (CreateTime need not grow
  with the offset), so the filter is also left to Spark. Upper bounds are left to Spark alone: the first offset at
  or after a time does not bound the records before that time.

Everything else (``key``, ``value``, ``timestampType``, ``OR`` across columns, ...) is returned to Spark, which
evaluates it after the scan. Results are the same with and without pushdown.

PySpark refuses a reader that implements ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is
true (DATA_SOURCE_PUSHDOWN_DISABLED), so the sources hand Spark a reader with ``pushFilters`` only when the
planning worker that asks for it will call it: :func:`pushdown_enabled`.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

NOT_NULL = ("topic", "partition", "offset", "timestamp", "timestampType")
"""Columns that are never null: ``IS NOT NULL`` on them is always true."""

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICRO = datetime.timedelta(microseconds=1)


def pushdown_enabled() -> bool:
    """Whether the PySpark planning worker calling ``DataSource.reader()`` accepts a reader with ``pushFilters``:
    the filter-pushdown worker calls it, the plain planning worker refuses such a reader unless its
    ``enable_pushdown`` flag (``spark.sql.python.filterPushdown.enabled``) is set. Anything else (a direct call,
    a test) gets a reader without pushdown. Relies on the worker modules of pyspark 4.1-4.3 by file name."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if name.endswith("pyspark/sql/worker/data_source_pushdown_filters.py"):
            return True
        if name.endswith("pyspark/sql/worker/plan_data_source_read.py"):
            return bool(frame.f_locals.get("enable_pushdown", False))
        frame = frame.f_back
    return False


def _micros(value: Any) -> int | None:
    """Epoch microseconds of a timestamp literal (a zone-aware ``datetime``); None for anything else."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // _MICRO
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class PushedFilters:
    """The filters a source took: what to plan. ``None``: no constraint."""

    topics: set[str] | None = None
    topics_excluded: set[str] = field(default_factory=set)
    topic_prefixes: list[str] = field(default_factory=list)
    partitions: set[int] | None = None
    partitions_excluded: set[int] = field(default_factory=set)
    partition_lo: int | None = None  # inclusive
    partition_hi: int | None = None  # exclusive
    offset_lo: int | None = None  # inclusive
    offset_hi: int | None = None  # exclusive
    timestamp_lo_ms: int | None = None  # inclusive: records at or after this time (ms)
    pushed: list[str] = field(default_factory=list)
    """A readable line per filter taken (logged and shown by :meth:`describe`)."""

    @property
    def empty(self) -> bool:
        return not self.pushed

    def wants_topic(self, topic: str) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return topic not in self.topics_excluded and all(topic.startswith(p) for p in self.topic_prefixes)

    def wants(self, topic: str, partition: int) -> bool:
        """Whether the pushed filters keep ``topic``-``partition`` at all."""
        if not self.wants_topic(topic):
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        if partition in self.partitions_excluded:
            return False
        if self.partition_lo is not None and partition < self.partition_lo:
            return False
        return self.partition_hi is None or partition < self.partition_hi

    def clamp(self, start: int, end: int) -> tuple[int, int]:
        """The offset range [start, end) narrowed by the pushed offset bounds (start >= end: nothing)."""
        if self.offset_lo is not None:
            start = max(start, self.offset_lo)
        if self.offset_hi is not None:
            end = min(end, self.offset_hi)
        return start, end

    def describe(self) -> str:
        return ", ".join(self.pushed) if self.pushed else "none"

    # ------------------------------------------------------------------------------------------------ taking

    def _lower(self, attr: str, value: int) -> None:
        cur = getattr(self, attr)
        setattr(self, attr, value if cur is None else max(cur, value))

    def _upper(self, attr: str, value: int) -> None:
        cur = getattr(self, attr)
        setattr(self, attr, value if cur is None else min(cur, value))

    def _take_int_set(self, col: str, f: Filter) -> bool:
        """``=``, ``IN`` and ranges on ``partition`` / ``offset`` (integer columns): exact."""
        lo, hi = (("partition_lo", "partition_hi") if col == "partition" else ("offset_lo", "offset_hi"))
        if isinstance(f, (EqualTo, EqualNullSafe)):
            v = _int(f.value)
            if v is None:
                return False
            if col == "partition":
                self.partitions = {v} if self.partitions is None else self.partitions & {v}
            else:
                self._lower(lo, v)
                self._upper(hi, v + 1)
            return True
        if isinstance(f, In) and col == "partition":
            values = {_int(v) for v in f.value} - {None}
            if any(_int(v) is None and v is not None for v in f.value):
                return False
            self.partitions = values if self.partitions is None else self.partitions & values  # type: ignore[assignment,operator]
            return True
        if isinstance(f, Not) and col == "partition":
            child = f.child
            if isinstance(child, EqualTo) and _int(child.value) is not None:
                self.partitions_excluded.add(child.value)
                return True
            if isinstance(child, In) and all(_int(v) is not None for v in child.value):
                self.partitions_excluded.update(child.value)
                return True
            return False
        if isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            v = _int(f.value)
            if v is None:
                return False
            if isinstance(f, GreaterThan):
                self._lower(lo, v + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self._lower(lo, v)
            elif isinstance(f, LessThan):
                self._upper(hi, v)
            else:
                self._upper(hi, v + 1)
            return True
        return False

    def _take_topic(self, f: Filter) -> bool:
        if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(f.value, str):
            self.topics = {f.value} if self.topics is None else self.topics & {f.value}
            return True
        if isinstance(f, In) and all(isinstance(v, str) or v is None for v in f.value):
            values = {v for v in f.value if v is not None}
            self.topics = values if self.topics is None else self.topics & values
            return True
        if isinstance(f, StringStartsWith) and isinstance(f.value, str):
            self.topic_prefixes.append(f.value)
            return True
        if isinstance(f, Not):
            child = f.child
            if isinstance(child, EqualTo) and isinstance(child.value, str):
                self.topics_excluded.add(child.value)
                return True
            if isinstance(child, In) and all(isinstance(v, str) for v in child.value):
                self.topics_excluded.update(child.value)
                return True
        return False

    def _take_timestamp(self, f: Filter) -> bool:
        """A lower bound on ``timestamp``, in ms (records have ms timestamps; the literal has µs)."""
        if not isinstance(f, (GreaterThan, GreaterThanOrEqual, EqualTo, EqualNullSafe)):
            return False
        us = _micros(f.value)
        if us is None:
            return False
        ms = us // 1000 + 1 if isinstance(f, GreaterThan) else -(-us // 1000)  # ts*1000 > us / >= us
        self._lower("timestamp_lo_ms", ms)
        return True


def push_filters(pushed: PushedFilters, filters: Sequence[Filter]) -> Iterable[Filter]:
    """Take what ``pushed`` can of ``filters`` (an AND); yield the filters Spark must still evaluate."""
    for f in filters:
        inner = f.child if isinstance(f, Not) else f
        attribute: tuple[str, ...] = getattr(inner, "attribute", ())
        col = attribute[0] if len(attribute) == 1 else None
        if isinstance(f, IsNotNull) and col in NOT_NULL:
            pushed.pushed.append(f"{col} IS NOT NULL")
            continue
        if col == "offset" and isinstance(f, In) and f.value and all(_int(v) is not None for v in f.value):
            pushed._lower("offset_lo", min(f.value))  # the span of the values; Spark picks the offsets in it
            pushed._upper("offset_hi", max(f.value) + 1)
            pushed.pushed.append(_show(f) + " (as a range; also evaluated by Spark)")
            yield f
            continue
        if col in ("partition", "offset") and pushed._take_int_set(col, f):
            pushed.pushed.append(_show(f))
            continue
        if col == "topic" and pushed._take_topic(f):
            pushed.pushed.append(_show(f))
            continue
        if col == "timestamp" and pushed._take_timestamp(f):
            pushed.pushed.append(_show(f) + " (to start offsets; also evaluated by Spark)")
        yield f  # not taken, or taken only in part (timestamp): Spark evaluates it


def _show(f: Filter) -> str:
    if isinstance(f, Not):
        return f"NOT ({_show(f.child)})"
    op = {EqualTo: "=", EqualNullSafe: "<=>", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<",
          LessThanOrEqual: "<=", In: "IN", StringStartsWith: "STARTS WITH"}.get(type(f), type(f).__name__)
    value = getattr(f, "value", None)
    if isinstance(value, datetime.datetime):
        value = value.isoformat()
    return f"{'.'.join(getattr(f, 'attribute', ()))} {op} {value!r}"
