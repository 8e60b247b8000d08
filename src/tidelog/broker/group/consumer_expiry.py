"""Empty KIP-848 consumer groups without committed offsets expire, as in Kafka's new group coordinator.

Kafka's ``GroupCoordinatorShard.cleanupGroupMetadata`` runs every ``offsets.retention.check.interval.ms``: for each
group, ``OffsetMetadataManager.cleanupExpiredOffsets`` expires its offsets and answers whether none is left (a group
that never committed has none), and then ``GroupMetadataManager.maybeDeleteGroup`` deletes the group when it
``isEmpty()`` (a consumer group: state Empty, no members), writing its tombstones
(``ConsumerGroup.createGroupTombstoneRecords``). A consumer group with committed offsets is deleted once they expire
(``offsets.retention.minutes`` from each commit; ``offsets.expire_offsets`` drops the group with its last offsets,
records tombstoned there); one without any goes at the first cleanup run after its last member left.

Here, the same run of the coordinator's expiry loop (after the offsets): every consumer group without members
whose offsets holder (the coordinator's classic ``Group`` of the same id, where a consumer group's offsets live) is
absent or empty (no offsets, no members, no transactional offsets pending) is dropped from memory and its records
tombstoned (the ConsumerGroup* records last written, and the holder's GroupMetadata key when it exists).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group import records as rec
from tidelog.broker.group.state import Group, GroupState
from tidelog.broker.group.state import now_ms as _now_ms

if TYPE_CHECKING:
    from tidelog.broker.group.consumer_group import ConsumerGroupManager


class ExpiryHost(Protocol):
    """What the expiry reads and calls of the group coordinator (``offsets.OffsetsHost`` has it)."""

    groups: dict[str, Group]
    consumer: ConsumerGroupManager

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...

log = logging.getLogger("tidelog.broker.group.consumer")


async def expire_empty_groups(host: ExpiryHost) -> int:
    """Delete the empty consumer groups left without committed offsets; how many were deleted."""
    mgr = host.consumer
    deleted = 0
    for gid in [gid for gid, g in mgr.groups.items() if not g.members]:
        g = mgr.groups.get(gid)
        if g is None or g.members:
            continue  # changed while an earlier group's tombstones were written
        holder = host.groups.get(gid)
        if holder is not None and (holder.offsets or holder.members or holder.pending_members
                                   or holder.pending_txn_offsets or holder.state != GroupState.EMPTY):
            continue  # its offsets expire first (offsets.expire_offsets deletes the group with the last ones)
        entries = mgr.store.tombstones(gid)
        if holder is not None:
            entries.append((rec.encode_group_key(gid), None))
            holder.transition(GroupState.DEAD, _now_ms())
            host.groups.pop(gid, None)
        mgr.drop(gid)
        deleted += 1
        log.info("empty consumer group without offsets deleted", extra={"kv": {"group": gid}})
        if entries:
            # as for expired offsets: out of memory first, then the tombstones (a failed write only means the group
            # comes back at the next load and is deleted again)
            await host._append(gid, entries, offsets=False)
    return deleted
