"""Share-group metrics (KIP-932 and KIP-1103's names where Kafka has them) as scrape-time rows of the broker's
Prometheus endpoint (``BrokerMetrics.add_rows_source``), registered when the broker's share-group manager is made.

| Kafka | tidelog |
|---|---|
| ``BrokerTopicMetrics,name=TotalShareFetchRequestsPerSec`` | ``tidelog_share_fetch_requests_total`` |
| ``BrokerTopicMetrics,name=TotalShareAcknowledgementRequestsPerSec`` | ``tidelog_share_acknowledgement_requests_total`` |
| ``share-group-metrics,name=record-acknowledgement-count`` (``ack-type``) | ``tidelog_share_record_acknowledgements_total{ack_type}`` |
| (none: records handed out by ShareFetch) | ``tidelog_share_records_acquired_total`` |
| ``SharePartitionMetrics,name=InFlightMessageCount`` | ``tidelog_share_partition_in_flight_records{group,topic,partition}`` |
| ``SharePartitionMetrics,name=InFlightBatchCount`` | ``tidelog_share_partition_in_flight_batches{...}`` (runs of one state) |
| ``group-coordinator-metrics,name=group-count,protocol=share`` / ``share-group-count,state`` | ``tidelog_share_groups{state}`` |
| ``group-coordinator-metrics,name=share-group-rebalance-count`` | ``tidelog_share_group_rebalances_total`` |
| (none) | ``tidelog_share_group_members``, ``tidelog_share_state_initializations_total{result}``, ``tidelog_share_state_partitions{state}`` |

Counters are plain integers bumped on the loop; the per-partition gauges are computed at scrape time from the share
partitions this broker leads (bounded by ``group.share.max.share.sessions`` and the partitions it leads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidelog.broker.group.share_partition import SharePartition

Row = tuple[str, str, dict[str, str], float]
ACK_TYPES = {0: "Gap", 1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}


@dataclass(slots=True)
class ShareCounters:
    fetch_requests: int = 0
    acknowledge_requests: int = 0
    records_acquired: int = 0
    rebalances: int = 0
    acknowledgements: dict[str, int] = field(default_factory=dict)
    initializations: dict[str, int] = field(default_factory=dict)

    def acked(self, batches: list[dict]) -> None:
        """Count one partition's acknowledgement batches by type (one type: the whole range; else per offset)."""
        for b in batches:
            types = [int(t) for t in b.get("acknowledge_types") or ()]
            n = int(b["last_offset"]) - int(b["first_offset"]) + 1
            if len(types) == 1:
                name = ACK_TYPES.get(types[0], str(types[0]))
                self.acknowledgements[name] = self.acknowledgements.get(name, 0) + n
            else:
                for t in types:
                    name = ACK_TYPES.get(t, str(t))
                    self.acknowledgements[name] = self.acknowledgements.get(name, 0) + 1

    def initialized(self, ok: bool, partitions: int) -> None:
        key = "success" if ok else "failure"
        self.initializations[key] = self.initializations.get(key, 0) + partitions


class ShareGroupManager(Protocol):
    """What the rows read of :class:`~tidelog.broker.group.share_group.ShareGroupManager` (which imports this
    module: Protocols, not an import back)."""

    counters: ShareCounters
    broker: Any
    records: Any  # share_group_store.ShareGroupStore: its state_meta

    @property
    def groups(self) -> Mapping[str, Any]: ...

    @property
    def partitions(self) -> Mapping[tuple[str, bytes, int], SharePartition]: ...


def rows(mgr: ShareGroupManager) -> list[Row]:
    c = mgr.counters
    out: list[Row] = [
        ("tidelog_share_fetch_requests_total", "ShareFetch requests (Kafka's TotalShareFetchRequestsPerSec)", {},
         float(c.fetch_requests)),
        ("tidelog_share_acknowledgement_requests_total",
         "ShareAcknowledge requests (Kafka's TotalShareAcknowledgementRequestsPerSec)", {},
         float(c.acknowledge_requests)),
        ("tidelog_share_records_acquired_total", "Records acquired by share consumers", {},
         float(c.records_acquired)),
        ("tidelog_share_group_rebalances_total", "Share group assignments recomputed (share-group-rebalance-count)",
         {}, float(c.rebalances)),
    ]
    for name, n in sorted(c.acknowledgements.items()):
        out.append(("tidelog_share_record_acknowledgements_total",
                    "Records acknowledged, by type (record-acknowledgement-count)", {"ack_type": name}, float(n)))
    for result, n in sorted(c.initializations.items()):
        out.append(("tidelog_share_state_initializations_total",
                    "Share partitions initialized by the group coordinator (InitializeShareGroupState)",
                    {"result": result}, float(n)))
    states: dict[str, int] = {"Empty": 0, "Stable": 0}
    members = 0
    for g in mgr.groups.values():
        states[g.state()] = states.get(g.state(), 0) + 1
        members += len(g.members)
    for state, n in sorted(states.items()):
        out.append(("tidelog_share_groups", "Share groups coordinated here, by state (share-group-count)",
                    {"state": state}, float(n)))
    out.append(("tidelog_share_group_members", "Members of the share groups coordinated here", {}, float(members)))
    meta_counts = {"initializing": 0, "initialized": 0, "deleting": 0}
    for meta in mgr.records.state_meta.values():
        meta_counts["initializing"] += sum(len(e.partitions) for e in meta.initializing.values())
        meta_counts["initialized"] += sum(len(e.partitions) for e in meta.initialized.values())
        meta_counts["deleting"] += len(meta.deleting)
    for state, n in meta_counts.items():
        out.append(("tidelog_share_state_partitions",
                    "Share partitions in the groups' ShareGroupStatePartitionMetadata (deleting: topics)",
                    {"state": state}, float(n)))
    names = {}
    topics = mgr.broker.topics
    for (gid, tid, p), sp in list(mgr.partitions.items()):
        if tid not in names:
            info = topics.by_id(tid) if topics is not None else None
            names[tid] = info.name if info is not None else tid.hex()
        labels = {"group": gid, "topic": names[tid], "partition": str(p)}
        out.append(("tidelog_share_partition_in_flight_records",
                    "Records in a share partition's window (KIP-1103 InFlightMessageCount)", labels,
                    float(sp.speo - sp.spso)))
        out.append(("tidelog_share_partition_in_flight_batches",
                    "Runs of one state in a share partition's window (KIP-1103 InFlightBatchCount)", labels,
                    float(len(sp.runs))))
    return out
