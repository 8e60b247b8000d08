"""Online migration of a group between the classic protocol and the consumer protocol (KIP-848), as Kafka 4's
group coordinator does it (``validateOnlineUpgrade`` / ``convertToConsumerGroup``, ``validateOnlineDowngrade*`` /
``convertToClassicGroup``), under the broker config ``group.consumer.migration.policy`` (``disabled``,
``downgrade``, ``upgrade``, ``bidirectional``; Kafka 4's default ``bidirectional``).

* **Upgrade.** A ConsumerGroupHeartbeat joining (epoch 0) a classic group with members converts it when the policy
  allows upgrades, the group's protocol type is ``consumer``, its size is within ``group.consumer.max.size`` and
  every member's metadata and assignment parse as the consumer protocol; otherwise the heartbeat answers
  GROUP_ID_NOT_FOUND as before. Every classic member becomes a member using the classic protocol
  (:mod:`classic_in_consumer`): epoch = the generation, subscription from its metadata, assignment (and target)
  from its last SyncGroup assignment, its session timeout and protocols kept; group epoch and assignment epoch =
  the generation. Waiting JoinGroup/SyncGroup requests are answered REBALANCE_IN_PROGRESS. The classic
  GroupMetadata record is tombstoned and the ConsumerGroup* records written in the same batch; committed offsets
  stay (they are keyed by group, not by type).
* **Downgrade.** When a member is removed (consumer-protocol leave, session or rebalance timeout) and every other
  member uses the classic protocol, the policy allows downgrades and those members fit ``group.max.size``, the group
  becomes a classic group with them (generation = the group epoch, protocol type ``consumer``, the protocol all
  members support, each member's assignment its target in its ConsumerProtocol version), the ConsumerGroup*
  records are tombstoned and the GroupMetadata written, and a rebalance is prepared (the members learn it from
  their next Heartbeat). A classic LeaveGroup does not downgrade (Kafka neither). The same when a classic static
  member (JoinGroup with the instance id of the last member using the consumer protocol) replaces that member
  (``validateOnlineDowngradeWithReplacedMember``): the group becomes classic with every member, the newcomer holding
  the replaced member's assignment, Stable, without a rebalance.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group import membership
from tidelog.broker.group import records as rec
from tidelog.broker.group.consumer_model import (
    STABLE,
    ConsumerGroup,
    ConsumerGroupError,
    ConsumerMember,
    GroupOwner,
)
from tidelog.broker.group.consumer_protocol import (
    encode_assignment,
    parse_assignment,
    parse_subscription,
    protocol_version,
)
from tidelog.broker.group.consumer_records import ClassicMemberMetadata
from tidelog.broker.group.state import GroupState, Member, now_ms
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.group.consumer_store import ConsumerGroupStore
    from tidelog.broker.group.state import Group

log = logging.getLogger("tidelog.broker.group.consumer")

POLICY_KEY = "group.consumer.migration.policy"
POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS


class MigrationCoordinator(GroupOwner, membership.MembershipHost, Protocol):
    """The group coordinator as a migration uses it: the consumer groups' owner and the classic groups' host."""


class MigrationHost(Protocol):
    """What a migration needs of the consumer-group manager (``ConsumerGroupManager``, which imports this module)."""

    @property
    def coordinator(self) -> MigrationCoordinator: ...

    groups: dict[str, ConsumerGroup]
    assignors: list[str]
    max_size: int
    migration_policy: str
    store: ConsumerGroupStore

    def _touch(self, g: ConsumerGroup, m: ConsumerMember) -> None: ...


def policy(props: Mapping[str, Any]) -> str:
    """The broker's ``group.consumer.migration.policy`` (validated by ``broker/config.py``)."""
    value = str(props.get(POLICY_KEY, "bidirectional")).strip().lower()
    return value if value in POLICIES else "bidirectional"


def upgrade_enabled(p: str) -> bool:
    return p in ("upgrade", "bidirectional")


def downgrade_enabled(p: str) -> bool:
    return p in ("downgrade", "bidirectional")


def upgrade(mgr: MigrationHost, classic: Group) -> ConsumerGroup:
    """Convert the classic group ``classic`` (with members) to a consumer group, or raise ConsumerGroupError
    GROUP_ID_NOT_FOUND when it may not be (Kafka's answer for a heartbeat into a classic group)."""
    gid = classic.group_id
    not_consumer = ConsumerGroupError(GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
    if not upgrade_enabled(mgr.migration_policy):
        log.info("classic group not upgraded: the online upgrade is disabled", extra={"kv": {"group": gid}})
        raise not_consumer
    if classic.protocol_type != "consumer":
        log.info("classic group not upgraded: it does not use the consumer protocol", extra={"kv": {"group": gid}})
        raise not_consumer
    if len(classic.members) > mgr.max_size:
        log.info("classic group not upgraded: larger than group.consumer.max.size", extra={"kv": {"group": gid}})
        raise not_consumer
    if len(classic.members) == mgr.max_size:
        # the joining member would not fit: Kafka converts, refuses the member and rolls the conversion back
        raise ConsumerGroupError(GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of "
                                 f"{mgr.max_size} members.")
    parsed = {}
    for m in classic.members.values():
        name = classic.protocol_name or (m.protocols[0][0] if m.protocols else None)
        sub = parse_subscription(m.metadata_for(name))
        assigned = parse_assignment(m.assignment)
        if sub is None or assigned is None:
            raise ConsumerGroupError(GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {gid} to consumer group "
                                     "because the embedded consumer protocol is malformed.")
        parsed[m.member_id] = (sub, assigned)
    # the classic group as it is, restored if the conversion's write fails (Kafka reverts to its snapshot)
    before = _ClassicSnapshot(classic.state, classic.current_state_timestamp, classic.generation,
                              classic.protocol_type, classic.protocol_name, classic.leader_id, dict(classic.members),
                              dict(classic.static_members), classic.persisted)
    # the classic group's waiting requests: they rejoin (Kafka's completeAllJoinFutures / SyncFutures)
    if classic.join_timer is not None:
        classic.join_timer.cancel()
        classic.join_timer = None
    for timer in classic.pending_members.values():
        if timer is not None:
            timer.cancel()
    for m in classic.members.values():
        m.cancel_timer()
        if m.awaiting_join:
            m.answer_join(membership._join_error(REBALANCE_IN_PROGRESS, m.member_id))
        if m.awaiting_sync:
            m.answer_sync(membership._sync_result(mgr.coordinator, REBALANCE_IN_PROGRESS, None))
    gen = classic.generation
    g = ConsumerGroup(gid, group_epoch=gen, assignment_epoch=gen, assignor=mgr.assignors[0])
    for m in classic.members.values():
        sub, assigned = parsed[m.member_id]
        cm = ConsumerMember(m.member_id, m.group_instance_id, sub.rack_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, list(sub.topics), None, None, gen, gen, STABLE, set(assigned))
        cm.classic = ClassicMemberMetadata(m.session_timeout_ms, tuple((n, bytes(md)) for n, md in m.protocols))
        g.members[cm.member_id] = cm
        g.target[cm.member_id] = set(assigned)
        if cm.instance_id is not None:
            g.static_members[cm.instance_id] = cm.member_id
    members = len(classic.members)
    classic.members.clear()
    classic.static_members.clear()
    classic.pending_members.clear()
    classic.leader_id = None
    classic.protocol_name = None
    classic.protocol_type = "consumer"
    classic.transition(GroupState.EMPTY, now_ms())
    classic.persisted = False
    mgr.groups[gid] = g
    # the classic group's GroupMetadata tombstone goes first in the group's next write (Kafka's record order)
    mgr.store.prefix[gid] = [(rec.encode_group_key(gid), None)]
    mgr.store.upgrades[gid] = lambda: _restore_classic(mgr, classic, before)
    for cm in g.members.values():
        mgr._touch(g, cm)
    log.info("classic group upgraded to consumer group", extra={"kv": {"group": gid, "members": members,
                                                                      "epoch": gen}})
    return g


@dataclass(slots=True)
class _ClassicSnapshot:
    """What an upgrade changes of the classic group (its members' own fields it leaves as they are)."""

    state: GroupState
    state_timestamp: int
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: dict[str, Member]
    static_members: dict[str, str]
    persisted: bool


def _restore_classic(mgr: MigrationHost, classic: Group, before: _ClassicSnapshot) -> None:
    """The upgrade's write failed: the classic group is back as it was (members, generation, leader, protocol,
    state; Kafka's coordinator reverting to its last committed snapshot) and the consumer group is gone. As in
    Kafka, what the upgrade answered stays answered: the members that were waiting in a JoinGroup or SyncGroup were
    told REBALANCE_IN_PROGRESS and rejoin. The members' session timers start anew (tidelog stopped them; Kafka's
    kept running), a group that was preparing a rebalance prepares it again (its join timer was stopped)."""
    gid = classic.group_id
    g = mgr.groups.get(gid)
    if g is not None:
        for cm in g.members.values():
            cm.cancel_timers()
        del mgr.groups[gid]
    coord = mgr.coordinator
    if coord.groups.get(gid) is not classic:  # the classic group was replaced meanwhile (deleted, loaded again)
        return
    classic.generation = before.generation
    classic.protocol_type = before.protocol_type
    classic.protocol_name = before.protocol_name
    classic.leader_id = before.leader_id
    classic.members.clear()
    classic.members.update(before.members)
    classic.static_members.clear()
    classic.static_members.update(before.static_members)
    classic.persisted = before.persisted
    classic.transition(before.state, before.state_timestamp)
    for m in classic.members.values():
        membership._schedule_heartbeat(coord, classic, m)
    log.warning("classic group upgrade not written, the classic group is restored",
                extra={"kv": {"group": gid, "members": len(classic.members), "generation": classic.generation,
                              "state": before.state.name}})
    if before.state == GroupState.PREPARING_REBALANCE:
        membership._prepare_rebalance(coord, classic, f"Upgrade of group {gid} to consumer group not written.")


def maybe_downgrade(mgr: MigrationHost, g: ConsumerGroup, leaving: ConsumerMember) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember + convertToClassicGroup; True when the group became classic
    (``leaving`` is not in it)."""
    others = [m for m in g.members.values() if m is not leaving]
    if not others or any(m.classic is None for m in others):
        return False
    if not _may_downgrade(mgr, g, len(others)):
        return False
    _to_classic(mgr, g, others, leaving.member_id, None)
    return True


def maybe_downgrade_replaced(mgr: MigrationHost, g: ConsumerGroup, joining: ConsumerMember,
                             replaced_used_consumer_protocol: bool) -> bool:
    """Kafka's validateOnlineDowngradeWithReplacedMember: a static member joining with the classic protocol
    (``joining``, already in ``g`` in the place of the member it replaced) downgrades the group when the member it
    replaced was the last one using the consumer protocol; the group becomes classic with every member, Stable, the
    joining member holding the replaced one's target assignment, and no rebalance (Kafka's convertToClassicGroup
    with a joining member). True when it did."""
    if not replaced_used_consumer_protocol or any(m.classic is None for m in g.members.values()):
        return False
    if not _may_downgrade(mgr, g, len(g.members)):
        return False
    _to_classic(mgr, g, list(g.members.values()), None, joining)
    return True


def _may_downgrade(mgr: MigrationHost, g: ConsumerGroup, size: int) -> bool:
    gid = g.group_id
    if not downgrade_enabled(mgr.migration_policy):
        log.info("consumer group not downgraded: the online downgrade is disabled", extra={"kv": {"group": gid}})
        return False
    if size > mgr.coordinator.group_max_size:
        log.info("consumer group not downgraded: larger than group.max.size", extra={"kv": {"group": gid}})
        return False
    return True


def _to_classic(mgr: MigrationHost, g: ConsumerGroup, members: list[ConsumerMember], leaving_id: str | None,
                joining: ConsumerMember | None) -> None:
    """Kafka's convertToClassicGroup: ``members`` (all using the classic protocol) become the classic group's;
    the ConsumerGroup* records are tombstoned and the GroupMetadata written in one batch (the group's next
    ``store.persist`` waits for it). A member leaving prepares a rebalance; a static member replacing the last
    consumer-protocol one does not (the group stays Stable, as in Kafka)."""
    gid = g.group_id
    coord = mgr.coordinator
    for m in g.members.values():
        m.cancel_timers()
    tombstones = mgr.store.tombstones(gid)
    mgr.groups.pop(gid, None)
    mgr.store.forget(gid)
    classic = coord._group(gid, create=True)
    assert classic is not None
    classic.generation = g.group_epoch
    classic.protocol_type = "consumer"
    classic.members.clear()
    classic.static_members.clear()
    for m in members:
        assert m.classic is not None
        protocols = list(m.classic.protocols)
        version = protocol_version(protocols[0][1]) if protocols else 0
        cm = Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                    m.classic.session_timeout_ms, "consumer", protocols,
                    encode_assignment(g.target.get(m.member_id, set()), version))
        classic.members[cm.member_id] = cm
        if cm.group_instance_id is not None:
            classic.static_members[cm.group_instance_id] = cm.member_id
    classic.protocol_name = classic.select_protocol()
    classic.leader_id = next(iter(classic.members))
    classic.transition(GroupState.STABLE, now_ms())
    for cm in classic.members.values():
        membership._schedule_heartbeat(coord, classic, cm)

    # one batch: the ConsumerGroup* tombstones, then the classic group's GroupMetadata (Kafka's record order)
    value = rec.GroupValue(classic.protocol_type or "", classic.generation, classic.protocol_name, classic.leader_id,
                           classic.current_state_timestamp, classic.member_values())
    entries = [*tombstones, (rec.encode_group_key(gid), rec.encode_group_value(value))]
    written = mgr.store.converting(gid)

    async def write() -> None:
        err = int(ErrorCode.UNKNOWN_SERVER_ERROR)  # unless the append answers (a request waits on ``written``)
        try:
            err = await coord._append(gid, entries, offsets=False)
            if not err:
                classic.persisted = True
        finally:
            if not written.done():
                written.set_result(err)

    coord._spawn(write())
    log.info("consumer group downgraded to classic group", extra={"kv": {
        "group": gid, "members": len(classic.members), "generation": classic.generation, "left": leaving_id,
        "joined": None if joining is None else joining.member_id}})
    if joining is None:
        membership._prepare_rebalance(coord, classic, f"Downgrade group {gid} from consumer to classic.")
