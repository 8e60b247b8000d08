"""The classic group membership protocol (Kafka's ``GroupCoordinator`` join/sync/heartbeat/leave): JoinGroup with
its pending members and static members, the rebalance (initial delay, rebalance timeout, completion), SyncGroup,
Heartbeat, LeaveGroup and the session timers. Runs on the broker's event loop; ``self`` is the group coordinator,
seen through :class:`MembershipHost`."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from typing import Any, Protocol

from tidelog.broker.group.results import JoinGroupResponseMember, JoinResult, MemberResponse, SyncResult
from tidelog.broker.group.state import Group, GroupState, Member
from tidelog.broker.group.state import now_ms as _now_ms
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.broker.group")

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
INVALID_GROUP_ID = ErrorCode.INVALID_GROUP_ID
INVALID_SESSION_TIMEOUT = ErrorCode.INVALID_SESSION_TIMEOUT
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID


class MembershipHost(Protocol):
    """What the membership protocol reads and calls of the group coordinator."""

    groups: dict[str, Group]
    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    group_max_size: int

    def check(self, group_id: str | None) -> int: ...

    def _group(self, group_id: str, create: bool = False) -> Group | None: ...

    def _loop_(self) -> asyncio.AbstractEventLoop: ...

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    async def _store_group(self, g: Group) -> int: ...


def _join_error(code: int, member_id: str = "") -> JoinResult:
    return {
        "error_code": code,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def _new_member_id(self: MembershipHost, prefix: str | None) -> str:
    return f"{prefix or ''}-{uuid.uuid4()}"


def _schedule_heartbeat(self: MembershipHost, g: Group, m: Member) -> None:
    m.cancel_timer()
    m.heartbeat_timer = self._loop_().call_later(
        m.session_timeout_ms / 1000.0, _heartbeat_expired, self, g.group_id, m.member_id
    )


def _heartbeat_expired(self: MembershipHost, group_id: str, member_id: str) -> None:
    g = self.groups.get(group_id)
    if g is None:
        return
    m = g.members.get(member_id)
    if m is None:
        return
    m.heartbeat_timer = None
    if m.awaiting_join or m.awaiting_sync:
        _schedule_heartbeat(self, g, m)  # a member waiting on us is alive
        return
    log.info("member session expired", extra={"kv": {"group": group_id, "member": member_id,
                                                     "generation": g.generation}})
    _remove_member_and_update(self, g, m)


def _remove_member(self: MembershipHost, g: Group, m: Member, code: int = UNKNOWN_MEMBER_ID) -> None:
    m.cancel_timer()
    g.members.pop(m.member_id, None)
    if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
        g.static_members.pop(m.group_instance_id, None)
    if m.awaiting_join:
        m.answer_join(_join_error(code, m.member_id))
    if m.awaiting_sync:
        m.answer_sync(_sync_result(self, code, g))
    if g.leader_id == m.member_id:
        g.leader_id = next(iter(g.members), None)


def _remove_member_and_update(self: MembershipHost, g: Group, m: Member) -> None:
    _remove_member(self, g, m)
    if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        _prepare_rebalance(self, g, f"member {m.member_id} left or expired")
    elif g.state == GroupState.PREPARING_REBALANCE:
        _maybe_complete_join(self, g)


def _add_pending(self: MembershipHost, g: Group, member_id: str, session_timeout_ms: int) -> None:
    def expire() -> None:
        if g.pending_members.pop(member_id, "gone") != "gone" and g.state == GroupState.PREPARING_REBALANCE:
            _maybe_complete_join(self, g)

    g.pending_members[member_id] = self._loop_().call_later(session_timeout_ms / 1000.0, expire)


def _prepare_rebalance(self: MembershipHost, g: Group, reason: str) -> None:
    now = _now_ms()
    if g.state == GroupState.COMPLETING_REBALANCE:
        # members waiting for their assignment must rejoin
        for m in g.members.values():
            m.assignment = b""
            if m.awaiting_sync:
                m.answer_sync(_sync_result(self, REBALANCE_IN_PROGRESS, g))
    if g.join_timer is not None:
        g.join_timer.cancel()
    rebalance_timeout = g.rebalance_timeout_ms()
    if g.state == GroupState.EMPTY and self.initial_rebalance_delay_ms > 0:
        delay = min(self.initial_rebalance_delay_ms, rebalance_timeout)
        g.initial_delay_active = True
        g.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
        g.new_member_added = False
        g.join_timer = self._loop_().call_later(delay / 1000.0, _initial_delay_expired, self, g)
    else:
        g.initial_delay_active = False
        g.join_timer = self._loop_().call_later(rebalance_timeout / 1000.0, _complete_join, self, g)
    g.transition(GroupState.PREPARING_REBALANCE, now)
    log.info("preparing to rebalance group", extra={"kv": {"group": g.group_id, "generation": g.generation,
                                                           "reason": reason}})
    # Kafka's tryCompleteElseWatch: when every member has already joined (a one-member group, a leader's
    # rejoin, no initial delay, the last member gone) the join completes now, not at the rebalance timeout
    _maybe_complete_join(self, g)


def _initial_delay_expired(self: MembershipHost, g: Group) -> None:
    g.join_timer = None
    if g.new_member_added and g.initial_delay_remaining_ms > 0:
        g.new_member_added = False
        delay = min(self.initial_rebalance_delay_ms, g.initial_delay_remaining_ms)
        g.initial_delay_remaining_ms -= delay
        g.join_timer = self._loop_().call_later(delay / 1000.0, _initial_delay_expired, self, g)
        return
    g.initial_delay_active = False
    _complete_join(self, g)


def _maybe_complete_join(self: MembershipHost, g: Group) -> None:
    if g.state == GroupState.PREPARING_REBALANCE and not g.initial_delay_active and g.all_members_joined():
        _complete_join(self, g)


def _complete_join(self: MembershipHost, g: Group) -> None:
    if g.state != GroupState.PREPARING_REBALANCE:
        return
    if g.join_timer is not None:
        g.join_timer.cancel()
        g.join_timer = None
    g.initial_delay_active = False
    for m in [m for m in g.members.values() if not m.awaiting_join]:
        log.info("removing member that did not rejoin", extra={"kv": {"group": g.group_id, "member": m.member_id}})
        _remove_member(self, g, m)
    now = _now_ms()
    g.generation += 1
    if g.is_empty():
        g.protocol_name = None
        g.leader_id = None
        g.transition(GroupState.EMPTY, now)
        self._spawn(self._store_group(g))  # nobody waits for it (Kafka neither)
        log.info("group is empty", extra={"kv": {"group": g.group_id, "generation": g.generation}})
        return
    g.protocol_name = g.select_protocol()
    if g.leader_id not in g.members:
        g.leader_id = next(iter(g.members))
    g.transition(GroupState.COMPLETING_REBALANCE, now)
    log.info("group rebalanced", extra={"kv": {"group": g.group_id, "generation": g.generation,
                                               "members": len(g.members), "protocol": g.protocol_name}})
    for m in g.members.values():
        members: list[JoinGroupResponseMember] = []
        if m.member_id == g.leader_id:
            members = [
                {"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                 "metadata": o.metadata_for(g.protocol_name)}
                for o in g.members.values()
            ]
        result: JoinResult = {
            "error_code": NONE,
            "generation_id": g.generation,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol_name,
            "leader": g.leader_id,
            "skip_assignment": False,
            "member_id": m.member_id,
            "members": members,
        }
        m.is_new = False
        assert m.join_future is not None
        m.join_future.set_result(result)
        _schedule_heartbeat(self, g, m)


async def join_group(
    self: MembershipHost,
    group_id: str,
    member_id: str,
    group_instance_id: str | None,
    client_id: str,
    client_host: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocol_type: str,
    protocols: list[tuple[str, bytes]],
    require_known_member_id: bool,
) -> JoinResult:
    err = self.check(group_id)
    if err:
        return _join_error(err, member_id)
    if not group_id:
        return _join_error(INVALID_GROUP_ID, member_id)
    if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
        return _join_error(INVALID_SESSION_TIMEOUT, member_id)
    g = self.groups.get(group_id)
    if g is None:
        if member_id:
            return _join_error(UNKNOWN_MEMBER_ID, member_id)
        g = self._group(group_id, create=True)
        assert g is not None
    if g.state == GroupState.DEAD:
        return _join_error(COORDINATOR_NOT_AVAILABLE if not member_id else UNKNOWN_MEMBER_ID, member_id)
    if not g.supports(protocol_type, protocols):
        return _join_error(INCONSISTENT_GROUP_PROTOCOL, member_id)
    loop = self._loop_()
    fut: asyncio.Future[JoinResult] = loop.create_future()

    if not member_id:
        if group_instance_id is not None and group_instance_id in g.static_members:
            return await _replace_static_member(self,
                g, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, protocols,
            )
        if len(g.members) + len(g.pending_members) >= self.group_max_size:
            return _join_error(GROUP_MAX_SIZE_REACHED)
        new_id = _new_member_id(self, group_instance_id if group_instance_id is not None else client_id)
        if require_known_member_id and group_instance_id is None:
            _add_pending(self, g, new_id, session_timeout_ms)
            return _join_error(MEMBER_ID_REQUIRED, new_id)
        m = Member(new_id, group_instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                   protocol_type, list(protocols))
        _add_member(self, g, m, fut)
        return await fut

    # a known (or pending) member id
    if member_id in g.pending_members:
        timer = g.pending_members.pop(member_id)
        if timer is not None:
            timer.cancel()
        if group_instance_id is not None and group_instance_id in g.static_members:
            return _join_error(FENCED_INSTANCE_ID, member_id)
        m = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                   session_timeout_ms, protocol_type, list(protocols))
        _add_member(self, g, m, fut)
        return await fut
    m_or_none = g.members.get(member_id)
    if group_instance_id is not None:
        known = g.static_members.get(group_instance_id)
        if known is not None and known != member_id:
            return _join_error(FENCED_INSTANCE_ID, member_id)
    if m_or_none is None:
        return _join_error(UNKNOWN_MEMBER_ID, member_id)
    m = m_or_none
    if g.state == GroupState.PREPARING_REBALANCE:
        _update_member(self, g, m, protocols, session_timeout_ms, rebalance_timeout_ms, fut)
        _maybe_complete_join(self, g)
        return await fut
    if g.state == GroupState.COMPLETING_REBALANCE:
        if m.matches(protocols):
            return _current_join_result(self, g, m)  # a retried join: same answer, no new rebalance
        _update_member(self, g, m, protocols, session_timeout_ms, rebalance_timeout_ms, fut)
        _prepare_rebalance(self, g, f"member {member_id} changed its protocols")
        return await fut
    if g.state == GroupState.STABLE:
        if m.member_id != g.leader_id and m.matches(protocols):
            return _current_join_result(self, g, m)
        _update_member(self, g, m, protocols, session_timeout_ms, rebalance_timeout_ms, fut)
        _prepare_rebalance(self, g, f"member {member_id} rejoined" + (" (leader)" if m.member_id == g.leader_id else ""))
        return await fut
    return _join_error(UNKNOWN_MEMBER_ID, member_id)


def _current_join_result(self: MembershipHost, g: Group, m: Member) -> JoinResult:
    members: list[JoinGroupResponseMember] = []
    if m.member_id == g.leader_id:
        members = [{"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                    "metadata": o.metadata_for(g.protocol_name)} for o in g.members.values()]
    _schedule_heartbeat(self, g, m)
    return {
        "error_code": NONE,
        "generation_id": g.generation,
        "protocol_type": g.protocol_type,
        "protocol_name": g.protocol_name,
        "leader": g.leader_id or "",
        "skip_assignment": False,
        "member_id": m.member_id,
        "members": members,
    }


def _add_member(self: MembershipHost, g: Group, m: Member, fut: asyncio.Future[JoinResult]) -> None:
    if g.is_empty():
        g.protocol_type = m.protocol_type
    m.join_future = fut
    m.is_new = True
    g.members[m.member_id] = m
    if m.group_instance_id is not None:
        g.static_members[m.group_instance_id] = m.member_id
    if g.leader_id is None:
        g.leader_id = m.member_id
    g.new_member_added = True
    if g.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        _prepare_rebalance(self, g, f"adding new member {m.member_id}")
    else:
        _maybe_complete_join(self, g)
    _schedule_heartbeat(self, g, m)


def _update_member(
    self: MembershipHost, g: Group, m: Member, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
    rebalance_timeout_ms: int, fut: asyncio.Future[JoinResult],
) -> None:
    m.protocols = list(protocols)
    m.session_timeout_ms = session_timeout_ms
    m.rebalance_timeout_ms = rebalance_timeout_ms
    if m.awaiting_join:
        # a duplicate join from the same member: the older request gets the rebalance error
        m.answer_join(_join_error(REBALANCE_IN_PROGRESS, m.member_id))
    m.join_future = fut


async def _replace_static_member(
    self: MembershipHost, g: Group, instance_id: str, client_id: str, client_host: str, session_timeout_ms: int,
    rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
) -> JoinResult:
    old_id = g.static_members[instance_id]
    old = g.members[old_id]
    new_id = _new_member_id(self, instance_id)
    old.cancel_timer()
    if old.awaiting_join:
        old.answer_join(_join_error(FENCED_INSTANCE_ID, old_id))
    if old.awaiting_sync:
        old.answer_sync(_sync_result(self, FENCED_INSTANCE_ID, g))
    del g.members[old_id]
    same_protocols = old.matches(protocols)
    m = Member(new_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
               protocol_type, list(protocols), old.assignment)
    g.members[new_id] = m
    g.static_members[instance_id] = new_id
    if g.leader_id == old_id:
        g.leader_id = new_id
    log.info("static member replaced", extra={"kv": {"group": g.group_id, "instance": instance_id,
                                                     "old": old_id, "new": new_id}})
    if g.state == GroupState.STABLE and same_protocols:
        err = await self._store_group(g)
        if err or self.groups.get(g.group_id) is not g:
            return _join_error(err or NOT_COORDINATOR, new_id)
        result = _current_join_result(self, g, m)
        result["members"] = []  # the static leader keeps the current assignment: nothing to compute
        return result
    fut: asyncio.Future[JoinResult] = self._loop_().create_future()
    m.join_future = fut
    if g.state == GroupState.PREPARING_REBALANCE:
        _maybe_complete_join(self, g)
    else:
        _prepare_rebalance(self, g, f"static member {instance_id} rejoined with new protocols")
    _schedule_heartbeat(self, g, m)
    return await fut


def _sync_result(self: MembershipHost, code: int, g: Group | None, assignment: bytes = b"") -> SyncResult:
    return {
        "error_code": code,
        "protocol_type": g.protocol_type if g is not None and code == NONE else None,
        "protocol_name": g.protocol_name if g is not None and code == NONE else None,
        "assignment": assignment,
    }


def _validate_member(self: MembershipHost, g: Group, member_id: str, instance_id: str | None) -> int:
    if instance_id is not None:
        known = g.static_members.get(instance_id)
        if known is not None and known != member_id:
            return FENCED_INSTANCE_ID
    if member_id not in g.members:
        return UNKNOWN_MEMBER_ID
    return NONE


async def sync_group(
    self: MembershipHost, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
    protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]],
) -> SyncResult:
    err = self.check(group_id)
    if err:
        return _sync_result(self, err, None)
    g = self.groups.get(group_id)
    if g is None:
        return _sync_result(self, UNKNOWN_MEMBER_ID, None)
    if g.state == GroupState.DEAD:
        return _sync_result(self, COORDINATOR_NOT_AVAILABLE, None)
    err = _validate_member(self, g, member_id, group_instance_id)
    if err:
        return _sync_result(self, err, None)
    if generation_id != g.generation:
        return _sync_result(self, ILLEGAL_GENERATION, None)
    if (protocol_type is not None and protocol_type != g.protocol_type) or (
        protocol_name is not None and protocol_name != g.protocol_name
    ):
        return _sync_result(self, INCONSISTENT_GROUP_PROTOCOL, None)
    m = g.members[member_id]
    if g.state == GroupState.PREPARING_REBALANCE:
        return _sync_result(self, REBALANCE_IN_PROGRESS, None)
    if g.state == GroupState.STABLE:
        _schedule_heartbeat(self, g, m)
        return _sync_result(self, NONE, g, m.assignment)
    if g.state != GroupState.COMPLETING_REBALANCE:
        return _sync_result(self, UNKNOWN_MEMBER_ID, None)
    fut: asyncio.Future[SyncResult] = self._loop_().create_future()
    if m.awaiting_sync:
        m.answer_sync(_sync_result(self, REBALANCE_IN_PROGRESS, None))
    m.sync_future = fut
    _schedule_heartbeat(self, g, m)
    if member_id == g.leader_id:
        given = {mid: bytes(a) for mid, a in assignments}
        for mem in g.members.values():
            mem.assignment = given.get(mem.member_id, b"")
        generation = g.generation
        err = await self._store_group(g)
        if self.groups.get(group_id) is not g:
            return await fut  # unloaded meanwhile (leadership moved): answered NOT_COORDINATOR
        if g.state == GroupState.COMPLETING_REBALANCE and g.generation == generation:
            if err:
                for mem in g.members.values():
                    mem.assignment = b""
                    if mem.awaiting_sync:
                        mem.answer_sync(_sync_result(self, err, None))
                _prepare_rebalance(self, g, "storing the assignment failed")
            else:
                g.transition(GroupState.STABLE, _now_ms())
                for mem in g.members.values():
                    if mem.awaiting_sync:
                        mem.answer_sync(_sync_result(self, NONE, g, mem.assignment))
                log.info("group stable", extra={"kv": {"group": g.group_id, "generation": g.generation,
                                                       "members": len(g.members)}})
    return await fut


def heartbeat(self: MembershipHost, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
    err = self.check(group_id)
    if err:
        return err
    g = self.groups.get(group_id)
    if g is None:
        return UNKNOWN_MEMBER_ID
    if g.state == GroupState.DEAD:
        return COORDINATOR_NOT_AVAILABLE
    if g.state == GroupState.EMPTY:
        return UNKNOWN_MEMBER_ID
    err = _validate_member(self, g, member_id, group_instance_id)
    if err:
        return err
    m = g.members[member_id]
    if g.state == GroupState.PREPARING_REBALANCE:
        _schedule_heartbeat(self, g, m)
        return REBALANCE_IN_PROGRESS
    if generation_id != g.generation:
        return ILLEGAL_GENERATION
    _schedule_heartbeat(self, g, m)
    return NONE


def leave_group(self: MembershipHost, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[MemberResponse]]:
    """``members`` = [(member_id, group_instance_id)]; returns (top-level error, per-member results)."""
    err = self.check(group_id)
    if err:
        return err, []
    g = self.groups.get(group_id)
    if g is None or g.state == GroupState.DEAD:
        return UNKNOWN_MEMBER_ID, [
            {"member_id": mid, "group_instance_id": iid, "error_code": UNKNOWN_MEMBER_ID} for mid, iid in members
        ]
    results: list[MemberResponse] = []
    left: list[Member] = []
    for mid, iid in members:
        code = NONE
        target: Member | None = None
        if iid is not None:
            known = g.static_members.get(iid)
            if known is None:
                code = UNKNOWN_MEMBER_ID
            elif mid and mid != known:
                code = FENCED_INSTANCE_ID
            else:
                target = g.members.get(known)
        elif mid in g.pending_members:
            timer = g.pending_members.pop(mid)
            if timer is not None:
                timer.cancel()
        else:
            target = g.members.get(mid)
            if target is None:
                code = UNKNOWN_MEMBER_ID
        if target is not None:
            left.append(target)
        results.append({"member_id": mid, "group_instance_id": iid, "error_code": code})
    for m in left:
        log.info("member left group", extra={"kv": {"group": group_id, "member": m.member_id}})
        _remove_member_and_update(self, g, m)
    if g.state == GroupState.PREPARING_REBALANCE:
        _maybe_complete_join(self, g)
    return NONE, results

