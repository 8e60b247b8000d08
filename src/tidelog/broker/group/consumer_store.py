"""Persistence of KIP-848 consumer groups in ``__consumer_offsets`` (Kafka's StoredGroup* records, types 3-8 and 16,
:mod:`consumer_records`): writing a group's changes, replaying them when a partition loads.

**Writing.** The group's state is kept in memory by :class:`GroupManager`; after each heartbeat (and after a
member is removed by a timer) :meth:`ConsumerGroupStore.persist` compares the records the group's state makes now
with the ones last written for it and appends the difference as one batch through the coordinator's append path
(the one classic GroupMetadata records take: acks=-1, ``offsets.commit.timeout.ms``) — values in Kafka's order
(member subscriptions, resolved regular expressions, group epoch, target assignment members, target assignment
epoch, current assignments with their KIP-1251 assignment epochs) and tombstones for the members gone (current
assignment, target assignment, member subscription) and the regexes no member uses any more. Writes of one group
are serialized (a lock per group), so the log's last record of every key is the latest state. The heartbeat is
answered after its records are written. A failed write is rolled back as Kafka's coordinator runtime reverts its
timeline snapshots: the group is rebuilt from the records last written for it (as a load builds it; a group never
written is dropped), so every in-memory change since the last successful write is undone and the member's next
heartbeat recomputes; the request answers the error Kafka's ``CoordinatorOperationExceptionHelper`` maps the
append's to (NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION: COORDINATOR_NOT_AVAILABLE;
NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR: NOT_COORDINATOR; too large: UNKNOWN_SERVER_ERROR), and so does every
request whose changes were rolled back with it (they were waiting for the group's lock). A group being converted
from a classic one whose first write (the classic GroupMetadata tombstone and the ConsumerGroup* records) fails is
undone: the consumer group is dropped and the classic group restored as it was (:mod:`migration`, ``upgrades``).

**Deleting.** DeleteGroups of a consumer group writes the tombstones of every record last written for it
(:meth:`tombstones`: target assignment epoch and group epoch).

**Replaying.** :class:`ConsumerReplay` collects the latest value of each type 3-8 and 16 key while a partition replays (in
the loader's worker thread, :mod:`replay`); :func:`install` builds the groups on the loop: a group exists if its
ConsumerGroupMetadata record does; members come from their member metadata, target and current assignment records
(topic ids resolved to names; a partition of a topic that no longer exists is dropped), session timers start anew
(a member that does not heartbeat within the session timeout after the load is removed, as in Kafka) and so do the
revocation timers of members revoking. ConsumerGroupPartitionMetadata (type 4) is ignored, as Kafka 4.x does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group import consumer_records as crec
from tidelog.broker.group.consumer_records import ConsumerKey, CurrentAssignment, MemberMetadata
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.group.assignors import TopicPartition

log = logging.getLogger("tidelog.broker.group.consumer")


class StoredMember(Protocol):
    """What the records hold of a :class:`~tidelog.broker.group.consumer_group.StoredMember` (a Protocol: that
    module builds this store, so this one does not import it back)."""

    @property
    def member_id(self) -> str: ...
    @property
    def instance_id(self) -> str | None: ...
    @property
    def rack_id(self) -> str | None: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...
    @property
    def rebalance_timeout_ms(self) -> int: ...
    @property
    def subscribed_names(self) -> list[str]: ...
    @property
    def subscribed_regex(self) -> str | None: ...
    @property
    def server_assignor(self) -> str | None: ...
    @property
    def epoch(self) -> int: ...
    @property
    def previous_epoch(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def assigned(self) -> set[TopicPartition]: ...
    @property
    def pending_revocation(self) -> set[TopicPartition]: ...
    @property
    def classic(self) -> crec.ClassicMemberMetadata | None: ...
    @property
    def assignment_epochs(self) -> dict[TopicPartition, int]: ...


class StoredGroup(Protocol):
    """What the records hold of a :class:`~tidelog.broker.group.consumer_group.StoredGroup`."""

    @property
    def group_id(self) -> str: ...
    @property
    def group_epoch(self) -> int: ...
    @property
    def assignment_epoch(self) -> int: ...
    @property
    def members(self) -> Mapping[str, StoredMember]: ...
    @property
    def target(self) -> Mapping[str, set[TopicPartition]]: ...
    @property
    def resolved(self) -> Mapping[str, crec.ResolvedRegex]: ...
    @property
    def regex_changes(self) -> int: ...


class GroupManager(Protocol):
    """What the store uses of :class:`~tidelog.broker.group.consumer_group.GroupManager`."""

    coordinator: Any

    @property
    def groups(self) -> Mapping[str, StoredGroup]: ...

    def restore(self, group_id: str, written: dict[bytes, bytes] | None) -> None: ...

NONE = 0
# the offsets mapping of GroupCoordinator._append_error, turned into Kafka's new coordinator's
# (CoordinatorOperationExceptionHelper.handleOperationException)
_KIP848_ERRORS = {int(ErrorCode.REQUEST_TIMED_OUT): int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                  int(ErrorCode.INVALID_COMMIT_OFFSET_SIZE): int(ErrorCode.UNKNOWN_SERVER_ERROR)}
Entries = list[tuple[bytes, bytes | None]]


class AppendHost(Protocol):
    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


# ----------------------------------------------------------------------------------------------- snapshot


def _ids(mgr: GroupManager, tps: set[TopicPartition]) -> crec.TopicAssignment:
    topics = mgr.coordinator.broker.topics
    out: crec.TopicAssignment = {}
    for t, p in tps:
        info = topics.get(t)
        if info is None:
            continue
        out.setdefault(crec.topic_uuid(info.topic_id), []).append(p)
    for ps in out.values():
        ps.sort()
    return out


def _epochs(mgr: GroupManager, m: StoredMember) -> dict[tuple[bytes, int], int]:
    """KIP-1251 AssignmentEpochs of the member's owned partitions, by topic id (absent: its epoch, not below 0)."""
    topics = mgr.coordinator.broker.topics
    default = max(m.epoch, 0)
    out: dict[tuple[bytes, int], int] = {}
    for tp in m.assigned | m.pending_revocation:
        info = topics.get(tp[0])
        if info is not None:
            out[(crec.topic_uuid(info.topic_id), tp[1])] = m.assignment_epochs.get(tp, default)
    return out


# a member's three records, cached by what they are made of: (signature, subscription, target, current)
_MemberRecords = tuple[tuple[Any, ...], tuple[bytes, bytes], tuple[bytes, bytes] | None, tuple[bytes, bytes]]


def _member_records(mgr: GroupManager, g: StoredGroup, m: StoredMember,
                    cache: dict[str, _MemberRecords]) -> _MemberRecords:
    target = g.target.get(m.member_id)
    sig = (m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_names), m.subscribed_regex,
           m.rebalance_timeout_ms, m.server_assignor, m.epoch, m.previous_epoch, m.state, frozenset(m.assigned),
           frozenset(m.pending_revocation), None if target is None else frozenset(target), m.classic,
           frozenset(m.assignment_epochs.items()))
    hit = cache.get(m.member_id)
    if hit is not None and hit[0] == sig:
        return hit
    gid, mid = g.group_id, m.member_id
    sub = (crec.encode_key(ConsumerKey(crec.MEMBER_METADATA, gid, mid)), crec.encode_member_metadata(
        MemberMetadata(m.instance_id, m.rack_id, m.client_id, m.client_host, sorted(m.subscribed_names),
                       m.subscribed_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic)))
    tgt = None if target is None else (crec.encode_key(ConsumerKey(crec.TARGET_MEMBER, gid, mid)),
                                       crec.encode_target_member(_ids(mgr, target)))
    cur = (crec.encode_key(ConsumerKey(crec.CURRENT_ASSIGNMENT, gid, mid)), crec.encode_current_assignment(
        CurrentAssignment(m.epoch, m.previous_epoch, crec.STATE_IDS.get(m.state, 127), _ids(mgr, m.assigned),
                          _ids(mgr, m.pending_revocation), _epochs(mgr, m))))
    out = cache[mid] = (sig, sub, tgt, cur)
    return out


def snapshot(mgr: GroupManager, g: StoredGroup,
             cache: dict[str, _MemberRecords] | None = None) -> dict[bytes, bytes]:
    """Every record (key bytes -> value bytes) the group's current state makes, in Kafka's write order. ``cache``:
    the members' records of the previous call (a member whose state did not change is not encoded again)."""
    gid = g.group_id
    cache = {} if cache is None else cache
    for mid in [mid for mid in cache if mid not in g.members]:
        del cache[mid]
    members = [_member_records(mgr, g, g.members[mid], cache) for mid in sorted(g.members)]
    out: dict[bytes, bytes] = {}
    for _, (k, v), _, _ in members:
        out[k] = v
    for regex in sorted(g.resolved):  # ConsumerGroupRegularExpression (consumer_regex.py)
        out[crec.encode_key(ConsumerKey(crec.REGULAR_EXPRESSION, gid, regex=regex))] = crec.encode_regex_value(
            g.resolved[regex])
    out[crec.encode_key(ConsumerKey(crec.GROUP_METADATA, gid))] = crec.encode_group_metadata(g.group_epoch)
    for _, _, tgt, _ in members:
        if tgt is not None:
            out[tgt[0]] = tgt[1]
    out[crec.encode_key(ConsumerKey(crec.TARGET_METADATA, gid))] = crec.encode_target_metadata(g.assignment_epoch)
    for _, _, _, (k, v) in members:
        out[k] = v
    return out


_TOMBSTONE_ORDER = {crec.CURRENT_ASSIGNMENT: 0, crec.TARGET_MEMBER: 1, crec.MEMBER_METADATA: 2,
                    crec.TARGET_METADATA: 3, crec.REGULAR_EXPRESSION: 4, crec.PARTITION_METADATA: 5,
                    crec.GROUP_METADATA: 6}


def diff(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> Entries:
    """The records that take the log from ``before`` to ``after``: changed values (``after``'s order), then
    tombstones for keys gone (Kafka's order: current assignment, target, subscription; group-level last)."""
    out: Entries = [(k, v) for k, v in after.items() if before.get(k) != v]
    gone = [k for k in before if k not in after]
    gone.sort(key=lambda k: _TOMBSTONE_ORDER.get(crec.key_type(k) or 0, 9))
    out += [(k, None) for k in gone]
    return out


class ConsumerGroupStore:
    """What was last written for each consumer group, and the writes that bring the log up to date."""

    def __init__(self, manager: GroupManager) -> None:
        self.manager = manager
        self.written: dict[str, dict[bytes, bytes]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache: dict[str, dict[str, _MemberRecords]] = {}
        # (group epoch, assignment epoch, member ids, regex changes) of the state last written in full
        self._shape: dict[str, tuple[int, int, frozenset[str], int]] = {}
        # records written before the group's next full write (an upgraded classic group's GroupMetadata tombstone)
        self.prefix: dict[str, Entries] = {}
        # an upgrade not written yet: how to restore the classic group if its write fails (migration.py)
        self.upgrades: dict[str, Callable[[], None]] = {}
        # a downgrade's write (migration.py): its error code, awaited by the persist that follows the request
        self._converting: dict[str, asyncio.Future[int]] = {}
        # failed writes rolled back per group: (count, error code); a persist that started before one answers it
        self._rollbacks: dict[str, tuple[int, int]] = {}

    def converting(self, group_id: str) -> asyncio.Future[int]:
        """A future for the write of a downgrade of ``group_id`` (set to the append's error code): the
        request's :meth:`persist` (the group being gone) answers once it is written. Forgotten a few seconds after
        it is set if no persist asked for it."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        self._converting[group_id] = fut

        def forget(_: object) -> None:
            loop.call_later(5.0, lambda: self._converting.pop(group_id, None)
                            if self._converting.get(group_id) is fut else None)

        fut.add_done_callback(forget)
        return fut

    @property
    def _host(self) -> AppendHost:
        return self.manager.coordinator  # type: ignore[return-value]

    async def persist(self, group_id: str, member_id: str | None = None) -> int:
        """Write the group's changes since the last write; an error code (NONE when nothing was due).

        ``member_id``: the member whose heartbeat this follows. While the group's shape (group epoch, assignment
        epoch, member ids) is the one last written, a heartbeat can only have changed that member's own records
        (the target moves only with the epochs, members come and go only with the group epoch): only those are
        compared, not the whole group's (bench/kip848_persist.py)."""
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        rolled = self._rollbacks.get(group_id, (0, NONE))[0]
        async with lock:
            rb = self._rollbacks.get(group_id)
            if rb is not None and rb[0] != rolled:
                return rb[1]  # this request's changes were undone with a failed write's
            g = self.manager.groups.get(group_id)
            if g is None:
                conversion = self._converting.pop(group_id, None)  # downgraded: answer once that is written
                return NONE if conversion is None else await asyncio.shield(conversion)
            cache = self._cache.setdefault(group_id, {})
            shape = (g.group_epoch, g.assignment_epoch, frozenset(g.members), g.regex_changes)
            written = self.written.get(group_id)
            if (member_id is not None and written is not None and self._shape.get(group_id) == shape
                    and member_id in g.members):
                _, sub, tgt, cur = _member_records(self.manager, g, g.members[member_id], cache)
                entries: Entries = [kv for kv in (sub, tgt, cur) if kv is not None and written.get(kv[0]) != kv[1]]
                if not entries:
                    return NONE
                err = await self._append(group_id, entries)
                if err:
                    self._rollback(group_id, g, err)
                    return err
                if self.manager.groups.get(group_id) is g and self.written.get(group_id) is written:
                    written.update((k, v) for k, v in entries if v is not None)
                return NONE
            after = snapshot(self.manager, g, cache)
            prefix = self.prefix.pop(group_id, [])
            entries = prefix + diff(written or {}, after)
            if not entries:
                self._shape[group_id] = shape
                return NONE
            err = await self._append(group_id, entries)
            if err:
                self._rollback(group_id, g, err)
                if prefix:  # a conversion from a classic group: the classic group is back
                    self.undo_upgrade(group_id)
                return err
            if prefix:
                self.upgrades.pop(group_id, None)
            if self.manager.groups.get(group_id) is g:
                self.written[group_id] = after
                self._shape[group_id] = shape
            return NONE

    async def _append(self, group_id: str, entries: Entries) -> int:
        err = await self._host._append(group_id, entries, offsets=True)
        return _KIP848_ERRORS.get(err, err)

    def _rollback(self, group_id: str, g: StoredGroup, err: int) -> None:
        """Undo every in-memory change of the group since its last successful write (Kafka's coordinator runtime
        reverting to the last committed snapshot): it is rebuilt from the records last written."""
        count = self._rollbacks.get(group_id, (0, NONE))[0] + 1
        self._rollbacks[group_id] = (count, err)
        self._shape.pop(group_id, None)
        self._cache.pop(group_id, None)
        if self.manager.groups.get(group_id) is g:
            log.warning("consumer group write failed, state rolled back",
                        extra={"kv": {"group": group_id, "error": err}})
            self.manager.restore(group_id, self.written.get(group_id))

    def undo_upgrade(self, group_id: str) -> bool:
        """Undo an upgrade from a classic group not written yet (its write failed, or the request that made it
        failed after it: Kafka reverts both): the consumer group is dropped, the classic group restored. True if
        there was one."""
        undo = self.upgrades.pop(group_id, None)
        if undo is None:
            return False
        self.prefix.pop(group_id, None)
        self._shape.pop(group_id, None)
        self._cache.pop(group_id, None)
        undo()
        return True

    def schedule(self, group_id: str) -> None:
        """Persist later (a timer removed a member: no request waits for the write)."""
        try:
            self._host._spawn(self.persist(group_id))
        except RuntimeError:  # no running loop (shutdown)
            pass

    def tombstones(self, group_id: str) -> Entries:
        """Tombstones for every record last written for the group (DeleteGroups), and forget them."""
        before = self.written.pop(group_id, {})
        self._cache.pop(group_id, None)
        self._shape.pop(group_id, None)
        return diff(before, {})

    async def delete(self, group_id: str) -> int:
        """Write the tombstones of an empty group's records (it becomes a classic group); an error code, the
        records kept as written when the write failed."""
        before = self.written.get(group_id)
        entries = self.tombstones(group_id)
        if not entries:
            return NONE
        err = await self._host._append(group_id, entries, offsets=False)
        if err and before is not None:
            self.written[group_id] = before
        return err

    def forget(self, group_id: str) -> None:
        self._rollbacks.pop(group_id, None)
        self.written.pop(group_id, None)
        self.prefix.pop(group_id, None)
        self.upgrades.pop(group_id, None)
        self._locks.pop(group_id, None)
        self._cache.pop(group_id, None)
        self._shape.pop(group_id, None)


# ----------------------------------------------------------------------------------------------- replay


@dataclass(slots=True)
class ConsumerReplay:
    """Latest type 3-8 and 16 records per group, collected while ``__consumer_offsets`` partitions replay (blocking)."""

    groups: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    skipped: int = 0

    def add(self, key: bytes, value: bytes | None) -> str:
        """Apply one record (tombstone: ``value`` None); returns its group id. Raises ``SchemaError``."""
        k = crec.decode_key(key)
        recs = self.groups.setdefault(k.group, {})
        if value is None:
            recs.pop(bytes(key), None)
            if k.type == crec.GROUP_METADATA:
                # Kafka deletes the group with this tombstone (its members are gone by then)
                self.groups.pop(k.group, None)
        else:
            recs[bytes(key)] = bytes(value)
        return k.group
