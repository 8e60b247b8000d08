"""Members using the classic protocol inside a KIP-848 consumer group (Kafka 4's ``classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup``, ``classicGroupLeaveToConsumerGroup``).

A classic consumer (JoinGroup / SyncGroup / Heartbeat / LeaveGroup with protocol type ``consumer``) whose group is a
consumer group with members (after an online upgrade, :mod:`migration`, or joining one) becomes a member "using the
classic protocol": its subscription is read from its JoinGroup metadata (``ConsumerProtocolSubscription``), its
session timeout and protocols are kept (``ClassicMemberMetadata``), and the broker assigns it partitions as any
member (server-side assignor, reconciliation with revocation first):

* JoinGroup (a member id required as usual, MEMBER_ID_REQUIRED for v4+ dynamic members) answers at once: the
  generation is the member's epoch after reconciling with the partitions its subscription says it owns, the
  protocol name its first protocol, no leader duty (``leader`` empty, no members list). The member must then
  SyncGroup within its rebalance timeout, else it is removed.
* SyncGroup answers its current assignment as ``ConsumerProtocolAssignment`` bytes in the version of its first
  protocol's metadata (REBALANCE_IN_PROGRESS when the group moved past its epoch and it is not revoking).
* Heartbeat (generation = its epoch, else ILLEGAL_GENERATION) answers REBALANCE_IN_PROGRESS when its epoch is behind
  the group's, when it must revoke partitions, or when partitions pending for it are free; then it must rejoin
  within its rebalance timeout, else it is removed.
* LeaveGroup removes it (a member using the consumer protocol named there: UNKNOWN_MEMBER_ID).

Runs on the event loop; ``mgr`` is the coordinator's :class:`ConsumerGroupManager`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from tidelog.broker.group import migration
from tidelog.broker.group.assignors import TopicPartition
from tidelog.broker.group.consumer_group import ConsumerGroupManager
from tidelog.broker.group.consumer_model import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    ConsumerGroupError,
    ConsumerMember,
)
from tidelog.broker.group.consumer_protocol import encode_assignment, parse_subscription, protocol_version
from tidelog.broker.group.consumer_records import ClassicMemberMetadata
from tidelog.broker.group.results import JoinResult, MemberResponse, SyncResult
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.broker.group.consumer")

NONE = 0
PROTOCOL_TYPE = "consumer"
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID


# ------------------------------------------------------------------------------------------ answers


def _join_error(code: int, member_id: str = "", message: str | None = None) -> JoinResult:
    if message:
        log.info("classic join into consumer group refused", extra={"kv": {"member": member_id, "error": message}})
    return {"error_code": code, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "skip_assignment": False, "member_id": member_id, "members": []}


def _sync_error(code: int) -> SyncResult:
    return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}


# ------------------------------------------------------------------------------------------ timers


def _cancel(m: ConsumerMember, which: str) -> None:
    t = getattr(m, which)
    if t is not None:
        t.cancel()
        setattr(m, which, None)


def _fence_later(mgr: ConsumerGroupManager, g: ConsumerGroup, m: ConsumerMember, which: str, timeout_ms: int,
                 why: str, if_absent: bool = False) -> None:
    """Kafka's scheduleConsumerGroupJoinTimeout / SyncTimeout: the member is removed unless it rejoins / syncs."""
    if if_absent and getattr(m, which) is not None:
        return
    _cancel(m, which)

    def fire() -> None:
        setattr(m, which, None)
        cur = mgr.groups.get(g.group_id)
        if cur is not None and cur.members.get(m.member_id) is m:
            mgr.remove_member(cur, m, why)

    setattr(m, which, asyncio.get_running_loop().call_later(max(timeout_ms, 1) / 1000.0, fire))


# ------------------------------------------------------------------------------------------ membership


def _member(mgr: ConsumerGroupManager, g: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
    """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        m = g.members.get(member_id)
        if m is None:
            raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {g.group_id}.")
    else:
        holder = g.static_members.get(instance_id)
        m = g.members.get(holder) if holder is not None else None
        if m is None:
            raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a member of "
                                     f"group {g.group_id}.")
        if m.member_id != member_id:
            raise ConsumerGroupError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                     f"{instance_id} was fenced by member {m.member_id}.")
    if m.classic is None:
        raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Member {m.member_id} does not use the classic protocol.")
    return m


def _supports(g: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: type ``consumer`` and a protocol every classic member has."""
    if protocol_type != PROTOCOL_TYPE or not names:
        return False
    common: set[str] | None = None
    for m in g.members.values():
        if m.classic is not None:
            mine = {n for n, _ in m.classic.protocols}
            common = mine if common is None else common & mine
    return common is None or bool(common & names)


def join(mgr: ConsumerGroupManager, group_id: str, member_id: str, instance_id: str | None, client_id: str,
         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
         protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult:
    """A JoinGroup into the consumer group ``group_id`` (it has members); the answer, given at once (the caller
    writes the group's records before sending it)."""
    g = mgr.groups[group_id]
    unknown = not member_id
    if unknown:
        member_id = str(uuid.uuid4())
    if member_id not in g.members and len(g.members) >= mgr.max_size:
        return _join_error(GROUP_MAX_SIZE_REACHED, member_id,
                           f"The consumer group has reached its maximum capacity of {mgr.max_size} members.")
    if not _supports(g, protocol_type, {n for n, _ in protocols}):
        return _join_error(INCONSISTENT_GROUP_PROTOCOL, member_id, f"Member {member_id}'s protocols are not supported.")
    if unknown and require_known_member_id and instance_id is None:
        return _join_error(MEMBER_ID_REQUIRED, member_id)
    sub = parse_subscription(protocols[0][1])
    if sub is None:
        return _join_error(INCONSISTENT_GROUP_PROTOCOL, member_id, "Malformed embedded consumer protocol.")
    changed = replaced = replaced_consumer = False
    if instance_id is not None:
        holder = g.static_members.get(instance_id)
        old = g.members.get(holder) if holder is not None else None
        if old is not None and old.member_id != member_id:
            if not unknown:
                return _join_error(FENCED_INSTANCE_ID, member_id)
            # a static member rejoining with a new id takes the old one's place and partitions (Kafka's replace)
            old.cancel_timers()
            del g.members[old.member_id]
            m = ConsumerMember(member_id, instance_id, old.rack_id, rebalance_timeout_ms=old.rebalance_timeout_ms,
                               subscribed_names=list(old.subscribed_names), assigned=set(old.assigned),
                               pending_revocation=set(old.pending_revocation), epoch=0, previous_epoch=0,
                               state=old.state)
            m.assignment_epochs = dict.fromkeys(m.assigned | m.pending_revocation, 0)  # KIP-1251, as Kafka
            replaced_consumer = old.classic is None
            if old.member_id in g.target:
                g.target[member_id] = g.target.pop(old.member_id)
            g.members[member_id] = m
            g.static_members[instance_id] = member_id
            replaced = True
            log.info("static classic member replaced in consumer group", extra={"kv": {
                "group": group_id, "instance": instance_id, "old": old.member_id, "new": member_id}})
    m0 = g.members.get(member_id)
    if m0 is None:
        m0 = ConsumerMember(member_id, instance_id, epoch=0, previous_epoch=0)
        g.members[member_id] = m0
        if instance_id is not None:
            g.static_members[instance_id] = member_id
        changed = True
        log.info("classic member joined consumer group", extra={"kv": {"group": group_id, "member": member_id}})
    elif m0.classic is None and not replaced:
        return _join_error(UNKNOWN_MEMBER_ID, member_id, f"Member {member_id} does not use the classic protocol.")
    m = m0
    m.client_id, m.client_host = client_id, client_host
    if sub.rack_id is not None:
        m.rack_id = sub.rack_id
    if rebalance_timeout_ms > 0:
        m.rebalance_timeout_ms = rebalance_timeout_ms
    m.server_assignor = None
    if sub.topics != sorted(set(m.subscribed_names)):
        m.subscribed_names = list(sub.topics)
        changed = True
    m.classic = ClassicMemberMetadata(session_timeout_ms, tuple((n, bytes(md)) for n, md in protocols))
    if mgr._metadata_changed(g, force=changed):
        changed = True
    if changed:
        g.group_epoch += 1
    if g.group_epoch != g.assignment_epoch:
        mgr._compute_target(g)
    _reconcile(mgr, g, m, sub.owned)
    answer: JoinResult = {"error_code": NONE, "generation_id": m.epoch, "protocol_type": PROTOCOL_TYPE,
                          "protocol_name": protocols[0][0], "leader": "", "skip_assignment": False,
                          "member_id": member_id, "members": []}
    if replaced and migration.maybe_downgrade_replaced(mgr, g, m, replaced_consumer):
        return answer  # the group is classic now: its SyncGroup is the classic group's (migration.py)
    _cancel(m, "join_timer")
    mgr._touch(g, m)
    _fence_later(mgr, g, m, "sync_timer", m.rebalance_timeout_ms, "the classic member did not sync within its "
                 "rebalance timeout")
    return answer


def _reconcile(mgr: ConsumerGroupManager, g: ConsumerGroup, m: ConsumerMember, owned: set[TopicPartition]) -> None:
    """The manager's reconciliation, with Kafka's rule for partitions the member no longer owns: partitions to
    revoke that its JoinGroup does not list as owned (an eager client revoked everything before rejoining) need no
    revocation round."""
    target = g.target.get(m.member_id, set())
    if m.state == STABLE and m.epoch != g.assignment_epoch:
        revoke = m.assigned - target
        if revoke and not owned & revoke:
            m.assigned -= revoke
    mgr._reconcile(g, m, owned)
    # a member using the classic protocol has join and sync deadlines, not the consumer protocol's revocation one
    _cancel(m, "revocation_timer")


def sync(mgr: ConsumerGroupManager, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
         protocol_type: str | None, protocol_name: str | None) -> SyncResult:
    g = mgr.groups[group_id]
    try:
        m = _member(mgr, g, member_id, instance_id)
    except ConsumerGroupError as exc:
        return _sync_error(exc.code)
    if generation_id != m.epoch:
        return _sync_error(ILLEGAL_GENERATION)
    assert m.classic is not None
    first_name, first_meta = m.classic.protocols[0] if m.classic.protocols else ("", b"")
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != first_name):
        return _sync_error(INCONSISTENT_GROUP_PROTOCOL)
    if g.group_epoch > m.epoch and m.state != UNREVOKED:
        _fence_later(mgr, g, m, "join_timer", m.rebalance_timeout_ms, "the classic member did not rejoin within "
                     "its rebalance timeout", if_absent=True)
        return _sync_error(REBALANCE_IN_PROGRESS)
    _cancel(m, "sync_timer")
    mgr._touch(g, m)
    return {"error_code": NONE, "protocol_type": PROTOCOL_TYPE, "protocol_name": first_name,
            "assignment": encode_assignment(m.assigned, protocol_version(first_meta))}


def _waiting_on_unreleased(g: ConsumerGroup, m: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target still held by another member."""
    pending = g.target.get(m.member_id, set()) - m.assigned
    for other in g.members.values():
        if other is not m and pending & (other.assigned | other.pending_revocation):
            return True
    return False


def heartbeat(mgr: ConsumerGroupManager, group_id: str, generation_id: int, member_id: str,
              instance_id: str | None) -> int:
    g = mgr.groups[group_id]
    try:
        m = _member(mgr, g, member_id, instance_id)
    except ConsumerGroupError as exc:
        return exc.code
    if generation_id != m.epoch:
        return ILLEGAL_GENERATION
    mgr._touch(g, m)
    if m.epoch < g.group_epoch or m.state == UNREVOKED or (
            m.state == UNRELEASED and not _waiting_on_unreleased(g, m)):
        _fence_later(mgr, g, m, "join_timer", m.rebalance_timeout_ms, "the classic member did not rejoin within "
                     "its rebalance timeout", if_absent=True)
        return REBALANCE_IN_PROGRESS
    return NONE


def leave(mgr: ConsumerGroupManager, group_id: str,
          members: list[tuple[str, str | None]]) -> tuple[int, list[MemberResponse]]:
    g = mgr.groups[group_id]
    out: list[MemberResponse] = []
    for mid, iid in members:
        try:
            if iid is None:
                m = g.members.get(mid)
                if m is None:
                    raise ConsumerGroupError(UNKNOWN_MEMBER_ID)
            else:
                holder = g.static_members.get(iid)
                m = g.members.get(holder) if holder is not None else None
                if m is None:
                    raise ConsumerGroupError(UNKNOWN_MEMBER_ID)
                if mid and mid != m.member_id:
                    raise ConsumerGroupError(FENCED_INSTANCE_ID)
            if m.classic is None:
                raise ConsumerGroupError(UNKNOWN_MEMBER_ID)
            mgr.remove_member(g, m, "left (LeaveGroup)", downgrade=False)
            out.append({"member_id": m.member_id, "group_instance_id": iid, "error_code": NONE})
        except ConsumerGroupError as exc:
            out.append({"member_id": mid, "group_instance_id": iid, "error_code": exc.code})
    return NONE, out

