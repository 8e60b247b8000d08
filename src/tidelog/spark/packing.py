"""Packing the small input partitions of a narrowed batch read into fewer Spark tasks (issue 29).

A Python data source task has a fixed cost of its own (scheduling, the Python worker's round trips, the read
function shipped with it): about 0.3-0.4 s each on the shared 2-core test machine, against a few tens of
milliseconds to read a range of some ten thousand records. A query whose pushed filters leave a small tail of each
topic partition (``WHERE timestamp >= <the last hour>``) would otherwise pay one task per topic partition (or per
segment slice): with more partitions than cores, whole waves of tasks that read almost nothing.

So, when pushed filters narrowed the plan, consecutive input partitions are packed into one
:class:`PackedPartition` while their total stays within a budget (offsets for the ``tidelog`` source,
:data:`tidelog.spark.options.PACK_RECORDS`; bytes for ``tidelog-log``, its ``maxBytesPerPartition``), as Spark's
file sources pack small files into one partition of up to ``spark.sql.files.maxPartitionBytes``. A partition larger than the budget stays alone; the reader of a packed
partition reads its members one after the other, so the rows are the same, in the same order per topic
partition. Option ``packPartitions`` (default true) on either source; false plans one task per range or slice,
as Spark's Kafka source does; ``minPartitions`` or ``maxRecordsPerPartition`` also turn it off (they ask for
more tasks, not fewer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class PackedPartition(InputPartition):
    """Several small input partitions read by one Spark task, in order."""

    parts: tuple[Any, ...]


def pack(parts: Sequence[Any], size: Callable[[Any], int], budget: int) -> list[Any]:
    """``parts`` with consecutive small ones grouped into :class:`PackedPartition` while their total ``size``
    stays within ``budget`` (a budget <= 0: unchanged). A group of one stays a plain partition."""
    if budget <= 0 or len(parts) < 2:
        return list(parts)
    out: list[Any] = []
    group: list[Any] = []
    total = 0
    for p in parts:
        s = size(p)
        if group and total + s > budget:
            out.append(group[0] if len(group) == 1 else PackedPartition(tuple(group)))
            group, total = [], 0
        group.append(p)
        total += s
    if group:
        out.append(group[0] if len(group) == 1 else PackedPartition(tuple(group)))
    return out


def members(partition: Any) -> tuple[Any, ...]:
    """The input partitions a task reads: a packed partition's members, else the partition itself."""
    return partition.parts if isinstance(partition, PackedPartition) else (partition,)
