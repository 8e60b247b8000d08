"""The console's share-group (KIP-932) page, read-only: state, epochs, members with their assigned partitions and,
per partition, the share-partition start offset (SPSO) and lag, as ``kafka-share-groups.sh --describe`` shows them.

ShareGroupDescribe (API 77) and DescribeShareGroupOffsets (API 90) at the group's coordinator through
:mod:`tidelog.client.admin_ops` (shared with ``tidelog share-groups``), with the console's credentials; the log end
offsets through the console's admin client. Lag is the log end offset minus the SPSO (the records not yet
acknowledged, those in flight included), as Kafka 4.1's tool computes it. No reset or delete: tidelog has no
AlterShareGroupOffsets / DeleteShareGroupOffsets (docs/decisions/0067-share-groups.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tidelog.client import admin_ops

if TYPE_CHECKING:
    from tidelog.console.kafka import Cluster

READ_ONLY = ("Share groups are read-only here: Kafka's AlterShareGroupOffsets / DeleteShareGroupOffsets (APIs 91-92) "
             "are not implemented by tidelog, so offsets cannot be reset and the group cannot be deleted.")


async def _describe(t: admin_ops.Transport, group: str) -> tuple[dict, dict, list[tuple[str, int, int, int]]]:
    found, g = await admin_ops.describe_share_group(t, group)
    offsets = await admin_ops.share_group_offsets(t, found["host"], found["port"], group)
    return found, g, offsets


def share_group(cluster: Cluster, group: str) -> dict[str, Any]:
    """The page's data; a refusal (GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND...) is a ConsoleError."""
    found, g, offsets = cluster.run(_describe(cluster.transport, group))
    members = []
    assigned: set[tuple[str, int]] = set()
    for m in sorted(g["members"], key=lambda m: m["member_id"]):
        tps = admin_ops.share_assignment(m)
        assigned.update(tps)
        members.append({"member": m["member_id"], "client": m["client_id"], "host": m["client_host"],
                        "epoch": m["member_epoch"], "assignment": sorted(f"{t}-{p}" for t, p in tps)})
    spso = {(t, p): (start, code) for t, p, start, code in offsets}
    for tp in assigned - spso.keys():  # assigned but no state yet at the coordinator
        spso[tp] = (-1, 0)
    ok = sorted(tp for tp, (_s, code) in spso.items() if not code)
    marks = cluster.watermarks(ok) if ok else {}
    rows: list[dict[str, Any]] = []
    per_topic: dict[str, int] = {}
    for (t, p), (start, code) in sorted(spso.items()):
        end = marks.get((t, p), (-1, -1))[1]
        lag = max(0, end - start) if start >= 0 and end >= 0 and not code else None
        rows.append({"topic": t, "partition": p, "start_offset": start, "end": end, "lag": lag,
                     "error": admin_ops.error_name(code) if code else None})
        per_topic[t] = per_topic.get(t, 0) + (lag or 0)
    return {"group": group, "type": "Share", "state": g["group_state"], "group_epoch": g["group_epoch"],
            "assignment_epoch": g["assignment_epoch"], "assignor": g.get("assignor_name") or "",
            "coordinator": found["node_id"], "members": members, "offsets": rows, "lag_by_topic": per_topic,
            "lag": sum(per_topic.values()), "at_ms": int(time.time() * 1000), "read_only": READ_ONLY}


__all__ = ["READ_ONLY", "share_group"]
