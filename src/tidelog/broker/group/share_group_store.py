"""Persistence of share groups (KIP-932) in ``__consumer_offsets``: Kafka 4.x's ShareGroup* records (types 10-15,
:mod:`share_group_records`) written when a group changes, replayed when the coordinator loads a partition,
tombstoned when the group is deleted.

**What is written** (what Kafka's ``GroupMetadataManager`` writes for a share group): per member its
ShareGroupMemberMetadata (rack, client id and host, subscribed topic names), its ShareGroupTargetAssignmentMember and
its ShareGroupCurrentMemberAssignment (member epoch, previous epoch, state STABLE, assigned partitions); per group
ShareGroupMetadata (the group epoch), ShareGroupTargetAssignmentMetadata (the assignment epoch) and
ShareGroupStatePartitionMetadata (the share partitions whose state the group has in ``__share_group_state``, and the
topics whose state is being deleted). Members are persisted as Kafka persists them: after a coordinator restart or
failover a member goes on with its epoch (no rejoin), and one that does not heartbeat within the session timeout is
removed (its records tombstoned).

**Writing.** After each heartbeat (and after a timer removed a member) :meth:`ShareGroupStore.persist` compares the
records the group's state makes now with those last written and appends the difference as one batch through the
group coordinator's append path (acks=-1), in Kafka's order (subscriptions, group epoch, targets, assignment epoch,
current assignments, state-partition metadata), then tombstones for members gone (current assignment, target,
subscription). Writes of a group are serialized; the heartbeat is answered after its write, with the append's error
when it failed (the records stay due and the next persist writes them).

**The state partitions** (ShareGroupStatePartitionMetadata) move as Kafka's: subscribed partitions *initializing*,
then *initialized* once InitializeShareGroupState succeeded (``share_group_init``), *deleting* while a deleted
topic's state is deleted (``share_group_cleanup``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidelog.broker.group import share_group_records as srec
from tidelog.broker.group.consumer_records import TopicAssignment, topic_uuid
from tidelog.broker.group.share_group_records import (
    ShareCurrentAssignment,
    ShareGroupKey,
    ShareMemberMetadata,
    StatePartitionMetadata,
)
from tidelog.errors import ErrorCode


class ShareMember(Protocol):
    """What the records hold of a :class:`~tidelog.broker.group.share_group.ShareMember` (Protocols: that module
    builds this store, so this one does not import it back)."""

    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: list[str]
    epoch: int
    previous_epoch: int
    assigned: set[tuple[str, int]]
    timer: asyncio.TimerHandle | None


class ShareGroup(Protocol):
    group_id: str
    epoch: int
    assignment_epoch: int

    @property
    def members(self) -> Mapping[str, ShareMember]: ...


class ShareGroupManager(Protocol):
    broker: Any

    @property
    def groups(self) -> MutableMapping[str, Any]: ...

log = logging.getLogger("tidelog.broker.group.share")

NONE = 0
NON_EMPTY_GROUP = int(ErrorCode.NON_EMPTY_GROUP)
Entries = list[tuple[bytes, bytes | None]]
# a member's records, cached by what they are made of: (signature, subscription, target, current assignment)
_MemberRecords = tuple[tuple[Any, ...], tuple[bytes, bytes], tuple[bytes, bytes], tuple[bytes, bytes]]

_TOMBSTONE_ORDER = {srec.CURRENT_ASSIGNMENT: 0, srec.TARGET_MEMBER: 1, srec.MEMBER_METADATA: 2,
                    srec.STATE_PARTITION_METADATA: 3, srec.TARGET_METADATA: 4, srec.PARTITION_METADATA: 5,
                    srec.GROUP_METADATA: 6}


class ShareGroupStore:
    """What was last written for each share group, the writes that bring the log up to date, and each group's
    share-state partitions (ShareGroupStatePartitionMetadata)."""

    def __init__(self, manager: ShareGroupManager) -> None:
        self.manager = manager
        self.written: dict[str, dict[bytes, bytes]] = {}
        self.state_meta: dict[str, StatePartitionMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache: dict[str, dict[str, _MemberRecords]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.deleting_now: set[tuple[str, bytes]] = set()  # (group, topic id) whose state delete is running

    @property
    def _coordinator(self) -> Any:
        return self.manager.broker.group_coordinator

    # ------------------------------------------------------------------------------------ snapshot

    def _ids(self, tps: set[tuple[str, int]]) -> TopicAssignment:
        topics = self.manager.broker.topics
        out: TopicAssignment = {}
        for t, p in tps:
            info = topics.get(t)
            if info is not None:
                out.setdefault(topic_uuid(info.topic_id), []).append(p)
        for ps in out.values():
            ps.sort()
        return out

    def _member_records(self, gid: str, m: ShareMember) -> _MemberRecords:
        """A member's three records, encoded again only when what they are made of changed (a heartbeat of a
        stable group re-encodes nothing)."""
        cache = self._cache.setdefault(gid, {})
        sig = (m.rack_id, m.client_id, m.client_host, tuple(m.subscribed), m.epoch, m.previous_epoch,
               frozenset(m.assigned))
        hit = cache.get(m.member_id)
        if hit is not None and hit[0] == sig:
            return hit
        mid = m.member_id
        target = self._ids(m.assigned)
        sub = (srec.encode_key(ShareGroupKey(srec.MEMBER_METADATA, gid, mid)), srec.encode_member_metadata(
            ShareMemberMetadata(m.rack_id, m.client_id, m.client_host, list(m.subscribed))))
        tgt = (srec.encode_key(ShareGroupKey(srec.TARGET_MEMBER, gid, mid)), srec.encode_target_member(target))
        cur = (srec.encode_key(ShareGroupKey(srec.CURRENT_ASSIGNMENT, gid, mid)), srec.encode_current_assignment(
            ShareCurrentAssignment(m.epoch, m.previous_epoch, srec.STABLE, target)))
        out = cache[mid] = (sig, sub, tgt, cur)
        return out

    def snapshot(self, g: ShareGroup) -> dict[bytes, bytes]:
        """Every record (key -> value) the group's state makes now, in Kafka's write order."""
        gid = g.group_id
        cache = self._cache.setdefault(gid, {})
        for mid in [mid for mid in cache if mid not in g.members]:
            del cache[mid]
        members = [self._member_records(gid, g.members[mid]) for mid in sorted(g.members)]
        out: dict[bytes, bytes] = {}
        for _, (k, v), _, _ in members:
            out[k] = v
        out[srec.encode_key(ShareGroupKey(srec.GROUP_METADATA, gid))] = srec.encode_epoch(g.epoch)
        for _, _, (k, v), _ in members:
            out[k] = v
        out[srec.encode_key(ShareGroupKey(srec.TARGET_METADATA, gid))] = srec.encode_epoch(g.assignment_epoch)
        for _, _, _, (k, v) in members:
            out[k] = v
        meta = self.state_meta.get(gid)
        key = srec.encode_key(ShareGroupKey(srec.STATE_PARTITION_METADATA, gid))
        if meta is not None and (not meta.empty() or key in self.written.get(gid, {})):
            out[key] = srec.encode_state_partition_metadata(meta)  # kept, with empty lists, until the group goes
        return out

    @staticmethod
    def diff(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> Entries:
        out: Entries = [(k, v) for k, v in after.items() if before.get(k) != v]
        gone = sorted((k for k in before if k not in after),
                      key=lambda k: _TOMBSTONE_ORDER.get(srec.key_type(k) or 0, 9))
        return out + [(k, None) for k in gone]

    # ------------------------------------------------------------------------------------ writing

    def _lock(self, gid: str) -> asyncio.Lock:
        lock = self._locks.get(gid)
        if lock is None:
            lock = self._locks[gid] = asyncio.Lock()
        return lock

    async def persist(self, gid: str) -> int:
        """Write the group's changes since the last write; an error code (NONE when nothing was due)."""
        coord = self._coordinator
        if coord is None:
            return NONE
        async with self._lock(gid):
            g = self.manager.groups.get(gid)
            if g is None:
                return NONE
            after = self.snapshot(g)
            entries = self.diff(self.written.get(gid, {}), after)
            if not entries:
                return NONE
            err = int(await coord._append(gid, entries, offsets=False))
            if err:
                return err
            if self.manager.groups.get(gid) is g:
                self.written[gid] = after
            return NONE

    def schedule(self, gid: str) -> None:
        """Persist in the background (a timer changed the group: no request waits for the write)."""
        try:
            task = asyncio.get_running_loop().create_task(self._persist_logged(gid))
        except RuntimeError:  # no running loop (shutdown)
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _persist_logged(self, gid: str) -> None:
        err = await self.persist(gid)
        if err:
            log.warning("share group records not written", extra={"kv": {"group": gid, "error": err}})

    async def delete(self, g: ShareGroup) -> int:
        """DeleteGroups: tombstones for every record last written for the group, which then leaves memory; an error
        code (NON_EMPTY_GROUP if a member joined meanwhile). Under the group's write lock, so no write of the group
        slips between the check and the tombstones; a member joining during the append is answered, then finds the
        group gone at its next heartbeat (UNKNOWN_MEMBER_ID: it rejoins a new group)."""
        gid = g.group_id
        coord = self._coordinator
        async with self._lock(gid):
            if self.manager.groups.get(gid) is not g or g.members:
                return NON_EMPTY_GROUP
            entries = self.diff(self.written.get(gid, {}), {})
            if entries and coord is not None:
                err = int(await coord._append(gid, entries, offsets=False))
                if err:
                    return err
            if self.manager.groups.get(gid) is g:
                self.manager.groups.pop(gid, None)
                for m in g.members.values():
                    if m.timer is not None:
                        m.timer.cancel()
            self.forget(gid)
            return NONE

    def forget(self, gid: str) -> None:
        self.written.pop(gid, None)
        self._cache.pop(gid, None)
        self.state_meta.pop(gid, None)
        self._locks.pop(gid, None)


# ----------------------------------------------------------------------------------------------- replay


@dataclass(slots=True)
class ShareGroupReplay:
    """Latest type 9-15 records per share group, collected while ``__consumer_offsets`` partitions replay."""

    groups: dict[str, dict[bytes, bytes]] = field(default_factory=dict)

    def add(self, key: bytes, value: bytes | None) -> str:
        k = srec.decode_key(key)
        recs = self.groups.setdefault(k.group, {})
        if value is None:
            recs.pop(bytes(key), None)
            if k.type == srec.GROUP_METADATA:
                self.groups.pop(k.group, None)  # the group is deleted with this tombstone, as in Kafka
        else:
            recs[bytes(key)] = bytes(value)
        return k.group
