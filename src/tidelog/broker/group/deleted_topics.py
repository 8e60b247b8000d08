"""A deleted topic's committed offsets leave every group (Kafka's ``GroupCoordinator.onPartitionsDeleted`` ->
``GroupMetadataManager.cleanupGroupMetadata`` with ``removeOffsets``).

Called on the event loop by the group coordinator when a topic is deleted: on one node by DeleteTopics, in
ZooKeeper mode on every broker when it sees the topic gone, each coordinator for the groups it coordinates. The
offsets (committed and pending transactional ones) leave the cache at once, so OffsetFetch and describe never
answer them and a topic created again under the same name starts without them; then one batch per group
writes a tombstone for every partition removed, as Kafka does, so the removal survives a restart, a new
coordinator's load and compaction. A group left Empty with no offsets is removed (Dead, and a group tombstone),
as Kafka's ``cleanupGroupMetadata`` does.

Ordering: the tombstones are written in a task started right after the cache changed; a partition committed again
in between (the topic created again and consumed) keeps its new offset, whose record follows in the log: only the
partitions still without an offset get a tombstone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Coroutine, Iterable
from typing import Any, Protocol

from tidelog.broker.group import records as rec
from tidelog.broker.group.state import Group, GroupState

log = logging.getLogger("tidelog.broker.group")

TopicPartition = tuple[str, int]


class TopicOffsetsOwner(Protocol):
    """What removing a deleted topic's offsets needs of the group coordinator: its groups, a task runner and the
    ``__consumer_offsets`` writer."""

    groups: dict[str, Group]

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...


def drop_topics(coordinator: TopicOffsetsOwner, topics: Collection[str], groups: Iterable[Group]) -> int:
    """Remove every offset of ``topics`` from ``groups`` (now) and write their tombstones (in a task); returns
    how many partitions' offsets were removed."""
    removed = 0
    for g in list(groups):
        tps = {tp for tp in g.offsets if tp[0] in topics}
        tps |= {tp for offsets in g.pending_txn_offsets.values() for tp in offsets if tp[0] in topics}
        if not tps:
            continue
        for tp in tps:
            g.offsets.pop(tp, None)
            g.drop_pending_txn_offset(tp)
        removed += len(tps)
        drop_group = (g.state == GroupState.EMPTY and not g.offsets and not g.members and not g.pending_members
                      and not any(g.pending_txn_offsets.values()))
        if drop_group:
            g.transition(GroupState.DEAD, time.time_ns() // 1_000_000)
            if coordinator.groups.get(g.group_id) is g:
                coordinator.groups.pop(g.group_id)
        log.info("offsets of deleted topics removed", extra={"kv": {
            "group": g.group_id, "topics": ",".join(sorted({t for t, _ in tps})), "partitions": len(tps),
            "group_removed": drop_group}})
        coordinator._spawn(_write_tombstones(coordinator, g.group_id, sorted(tps), drop_group))
    return removed


async def _write_tombstones(coordinator: TopicOffsetsOwner, group_id: str, tps: list[TopicPartition],
                            group_removed: bool) -> None:
    current = coordinator.groups.get(group_id)  # the group as it is now (None: removed, not created again)
    entries: list[tuple[bytes, bytes | None]] = [
        (rec.encode_offset_key(group_id, t, p), None) for (t, p) in tps
        if current is None or ((t, p) not in current.offsets and not current.has_pending_txn_offset((t, p)))
    ]
    if group_removed and current is None:
        entries.append((rec.encode_group_key(group_id), None))
    if not entries:
        return
    err = await coordinator._append(group_id, entries)
    if err:
        # the cache no longer has them; a load from the log (restart, another coordinator) would bring them back
        log.warning("tombstones for the offsets of a deleted topic not written", extra={"kv": {
            "group": group_id, "partitions": len(tps), "error": err}})
