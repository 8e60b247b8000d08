"""Consumer-group lag as scrape-time gauges (``tidelog_consumergroup_lag``), what kafka-consumer-groups prints as LAG.

Kafka's broker has no such metric (its consumers report ``records-lag-max``; operators add an exporter that asks
ListOffsets and OffsetFetch). The group coordinator already holds every committed offset of the groups it
coordinates, and the log manager the high watermark of every partition replica on this broker, so the lag is read
here at scrape time, on the loop that owns both. A partition with no replica on the coordinator's broker (cluster
mode) has no series here: its lag shows on no broker, as with Kafka's own metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Row = tuple[str, str, dict[str, str], float]

_NAME = "tidelog_consumergroup_lag"
_HELP = "Records between a group's committed offset and the partition's high watermark (LAG of kafka-consumer-groups)"
_OFFSET = "tidelog_consumergroup_committed_offset"
_OFFSET_HELP = "A group's committed offset of a partition"


def group_lag_rows(coordinator: Any, logs: Any) -> Iterable[Row]:
    """One lag and one committed-offset row per (group, topic, partition) whose partition has a replica here."""
    if coordinator is None:
        return []
    rows: list[Row] = []
    for gid, group in list(coordinator.groups.items()):
        for (topic, partition), committed in list(group.offsets.items()):
            plog = logs.get_log(topic, partition)
            if plog is None:
                continue
            labels = {"group": gid, "topic": topic, "partition": str(partition)}
            rows.append((_OFFSET, _OFFSET_HELP, labels, float(committed.offset)))
            rows.append((_NAME, _HELP, labels, float(max(0, plog.high_watermark - committed.offset))))
    return rows
