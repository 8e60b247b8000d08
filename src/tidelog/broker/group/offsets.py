"""Committed offsets of a group (Kafka's ``OffsetMetadataManager`` for classic and KIP-848 groups): OffsetCommit
and its member checks, OffsetFetch, OffsetDelete and the retention of offsets (``offsets.retention.minutes``).
``self`` is the group coordinator, seen through :class:`OffsetsHost`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group import records as rec
from tidelog.broker.group.consumer_expiry import expire_empty_groups
from tidelog.broker.group.records import OffsetValue
from tidelog.broker.group.replay import _materialize
from tidelog.broker.group.state import Group, GroupState, Member
from tidelog.broker.group.state import now_ms as _now_ms
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.group.consumer_group import ConsumerGroupManager

log = logging.getLogger("tidelog.broker.group")

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INVALID_GROUP_ID = ErrorCode.INVALID_GROUP_ID
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
NON_EMPTY_GROUP = ErrorCode.NON_EMPTY_GROUP
OFFSET_METADATA_TOO_LARGE = ErrorCode.OFFSET_METADATA_TOO_LARGE
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
STALE_MEMBER_EPOCH = ErrorCode.STALE_MEMBER_EPOCH
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
UNSTABLE_OFFSET_COMMIT = ErrorCode.UNSTABLE_OFFSET_COMMIT


class OffsetsHost(Protocol):
    """What offset commit, fetch, delete and expiry read and call of the group coordinator."""

    broker: Broker
    groups: dict[str, Group]
    consumer: ConsumerGroupManager
    metadata_max_bytes: int
    retention_ms: int

    def check(self, group_id: str | None) -> int: ...

    def _group(self, group_id: str, create: bool = False) -> Group | None: ...

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...

    def _schedule_heartbeat(self, g: Group, m: Member) -> None: ...

    def _validate_member(self, g: Group, member_id: str, instance_id: str | None) -> int: ...


async def commit_offsets(
    self: OffsetsHost, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
    retention_time_ms: int, offsets: list[tuple[str, int, int, int, str | None]], api_version: int = 8,
) -> tuple[int, dict[tuple[str, int], int]]:
    """``offsets`` = [(topic, partition, offset, leader_epoch, metadata)]. Returns (group error, per-tp)."""
    err = self.check(group_id)
    if not err and not group_id:
        err = INVALID_GROUP_ID
    if not err and self.consumer.is_consumer_group(group_id):  # KIP-848: member id and member epoch
        err = self.consumer.validate_commit(group_id, member_id, generation_id, api_version)
    elif not err:
        err = _validate_commit(self, group_id, generation_id, member_id, group_instance_id)
    if err:
        return err, {(t, p): err for t, p, *_ in offsets}
    results: dict[tuple[str, int], int] = {}
    if self.consumer.is_consumer_group(group_id):  # KIP-1251: an older member epoch, partition by partition
        stale = self.consumer.stale_commit_partitions(group_id, member_id, generation_id,
                                                      [(t, p) for t, p, *_ in offsets])
        if stale:
            results = dict.fromkeys(stale, STALE_MEMBER_EPOCH)
            offsets = [o for o in offsets if (o[0], o[1]) not in stale]
    g = self._group(group_id, create=True)
    assert g is not None
    now = _now_ms()
    expire = now + retention_time_ms if retention_time_ms is not None and retention_time_ms >= 0 else -1
    entries: list[tuple[bytes, bytes | None]] = []
    accepted: list[tuple[tuple[str, int], OffsetValue]] = []
    topics = self.broker.topics
    for topic, part, offset, epoch, metadata in offsets:
        info = topics.get(topic)
        if info is None or not 0 <= part < info.num_partitions:
            results[(topic, part)] = UNKNOWN_TOPIC_OR_PARTITION
            continue
        meta = metadata or ""
        if len(meta.encode("utf-8")) > self.metadata_max_bytes:
            results[(topic, part)] = OFFSET_METADATA_TOO_LARGE
            continue
        ov = OffsetValue(offset, epoch if epoch is not None else -1, meta, now, expire)
        entries.append((rec.encode_offset_key(group_id, topic, part), rec.encode_offset_value(ov)))
        accepted.append(((topic, part), ov))
    def positions(first: int) -> None:
        for i, (_, ov) in enumerate(accepted):
            ov.record_offset = first + i

    code = await self._append(group_id, entries, on_appended=positions)
    current = self.groups.get(group_id)
    for tp, ov in accepted:
        results[tp] = code
        if code == NONE and current is not None:
            # a transaction committed while this write waited for the ISR keeps its offset if written later
            _materialize(current.offsets, {tp: ov})
    return NONE, results


def _validate_commit(self: OffsetsHost, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
    g = self.groups.get(group_id)
    if g is None:
        return NONE if generation_id < 0 else ILLEGAL_GENERATION
    if g.state == GroupState.DEAD:
        return COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and g.state == GroupState.EMPTY:
        return NONE  # an admin / simple-consumer commit
    if g.state == GroupState.EMPTY and generation_id >= 0 and not g.members:
        return ILLEGAL_GENERATION if member_id == "" else UNKNOWN_MEMBER_ID
    err = self._validate_member(g, member_id, instance_id)
    if err:
        return err
    if generation_id != g.generation:
        return ILLEGAL_GENERATION
    if g.state == GroupState.COMPLETING_REBALANCE:
        return REBALANCE_IN_PROGRESS
    m = g.members[member_id]
    self._schedule_heartbeat(g, m)  # a commit proves the member is alive (Kafka does the same)
    return NONE


def fetch_offsets(
    self: OffsetsHost, group_id: str, partitions: list[tuple[str, int]] | None, *, require_stable: bool = False,
) -> tuple[int, list[tuple[str, int, OffsetValue | None, int]]]:
    """(group error, [(topic, partition, committed value or None, partition error)]); ``partitions`` None =
    all committed. ``require_stable`` (OffsetFetch v7+, KIP-447): a partition with a pending transactional
    offset of the group answers UNSTABLE_OFFSET_COMMIT and no offset (Kafka's OffsetMetadataManager.
    fetchOffsets / fetchAllOffsets); without it, the last committed offset is answered."""
    err = self.check(group_id)
    if err:
        return err, [(t, p, None, NONE) for t, p in partitions or ()]
    g = self.groups.get(group_id)
    stored = g.offsets if g is not None else {}
    wanted = sorted(stored) if partitions is None else partitions
    rows: list[tuple[str, int, OffsetValue | None, int]] = []
    for t, p in wanted:
        if require_stable and g is not None and g.has_pending_txn_offset((t, p)):
            rows.append((t, p, None, UNSTABLE_OFFSET_COMMIT))
        else:
            rows.append((t, p, stored.get((t, p)), NONE))
    return NONE, rows


async def delete_offsets(self: OffsetsHost, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
    err = self.check(group_id)
    if err:
        return err, {}
    g = self.groups.get(group_id)
    if g is None or g.state == GroupState.DEAD:
        return GROUP_ID_NOT_FOUND, {}
    results: dict[tuple[str, int], int] = {}
    subscribed: set[str] | None = set()
    if self.consumer.active(group_id):
        subscribed = self.consumer.subscribed_topics(group_id)
    elif g.state != GroupState.EMPTY:
        if g.protocol_type != "consumer":
            return NON_EMPTY_GROUP, {}
        subscribed = g.subscribed_topics()
    entries: list[tuple[bytes, bytes | None]] = []
    to_delete: list[tuple[str, int]] = []
    for tp in partitions:
        if subscribed is None or tp[0] in subscribed:
            results[tp] = GROUP_SUBSCRIBED_TO_TOPIC
            continue
        results[tp] = NONE
        # Kafka: a tombstone if the partition has a committed or a pending transactional offset; replayed, a
        # tombstone removes both
        if tp in g.offsets or g.has_pending_txn_offset(tp):
            entries.append((rec.encode_offset_key(group_id, tp[0], tp[1]), None))
            to_delete.append(tp)
    code = await self._append(group_id, entries)
    if code:
        return code, {}
    for tp in to_delete:
        g.offsets.pop(tp, None)
        g.drop_pending_txn_offset(tp)
    return NONE, results


async def expire_offsets(self: OffsetsHost, now_ms: int) -> int:
    """Remove expired offsets (and Empty groups left with none); returns how many offsets expired."""
    removed = 0
    for g in list(self.groups.values()):
        if g.state != GroupState.EMPTY or self.consumer.active(g.group_id):
            continue
        expired = []
        for tp, ov in g.offsets.items():
            if g.has_pending_txn_offset(tp):
                continue  # Kafka: not while a transactional offset of the partition is pending
            if ov.expire_timestamp >= 0:
                due = now_ms >= ov.expire_timestamp
            else:
                base = max(ov.commit_timestamp, g.current_state_timestamp)
                due = now_ms - base >= self.retention_ms
            if due:
                expired.append(tp)
        entries: list[tuple[bytes, bytes | None]] = [
            (rec.encode_offset_key(g.group_id, t, p), None) for t, p in expired
        ]
        # a member id handed out with MEMBER_ID_REQUIRED keeps the group: its join must find it
        # ... and not while a transaction of the group is open (Kafka's cleanupExpiredOffsets)
        drop_group = (len(expired) == len(g.offsets) and not g.members and not g.pending_members
                      and not g.pending_txn_offsets)
        if drop_group:
            entries.append((rec.encode_group_key(g.group_id), None))
            entries += self.consumer.store.tombstones(g.group_id)  # an empty KIP-848 group's records
        if not entries:
            continue
        # as Kafka's cleanupGroupMetadata: out of the cache first, then the tombstones (a failed write only
        # means the offsets come back on the next load and expire again)
        for tp in expired:
            g.offsets.pop(tp, None)
        removed += len(expired)
        if drop_group:
            g.transition(GroupState.DEAD, now_ms)
            self.groups.pop(g.group_id, None)
            self.consumer.drop(g.group_id)
        await self._append(g.group_id, entries)
        if expired:
            log.info("offsets expired", extra={"kv": {"group": g.group_id, "count": len(expired),
                                                      "group_removed": drop_group}})
    # empty KIP-848 groups that have no offsets (left) are deleted too, as Kafka's cleanupGroupMetadata does
    await expire_empty_groups(self)
    return removed

