"""The classic-protocol group model: members, group states and the protocol vote.

State machine (Kafka's classic ``GroupCoordinator``)::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance --leader sync--> Stable
      ^                     ^    |                                       |                              |
      |                     |    +--all members gone--> Empty            +--join/leave/expiry-----------+
      +--------------------------- (join completes with no members) ----> PreparingRebalance <-----------+
    any --delete / all offsets expired while Empty--> Dead
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import StrEnum

from tidelog.broker.group.assignment import subscription_topics
from tidelog.broker.group.records import MemberValue, OffsetValue
from tidelog.broker.group.results import JoinResult, SyncResult


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of the group and offset timestamps Kafka stores."""
    return time.time_ns() // 1_000_000


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def answer_join(self, result: JoinResult) -> None:
        """Answer the member's waiting JoinGroup (there is one: :attr:`awaiting_join`)."""
        assert self.join_future is not None
        self.join_future.set_result(result)

    def answer_sync(self, result: SyncResult) -> None:
        """Answer the member's waiting SyncGroup (there is one: :attr:`awaiting_sync`)."""
        assert self.sync_future is not None
        self.sync_future.set_result(result)

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def cancel_timer(self) -> None:
        if self.heartbeat_timer is not None:
            self.heartbeat_timer.cancel()
            self.heartbeat_timer = None


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    # transactional offsets not yet committed, per producer id (Kafka's pendingTransactionalOffsetCommits):
    # invisible to OffsetFetch until the producer's COMMIT marker, dropped by its ABORT marker
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)
    current_state_timestamp: int = -1  # when the state last changed (ms); offsets expire from when it emptied
    join_timer: asyncio.TimerHandle | None = None
    initial_delay_remaining_ms: int = 0
    initial_delay_active: bool = False
    new_member_added: bool = False
    persisted: bool = False  # a GroupMetadata record exists for it in __consumer_offsets

    def is_empty(self) -> bool:
        return not self.members

    def has_pending_txn_offset(self, tp: tuple[str, int]) -> bool:
        return any(tp in offsets for offsets in self.pending_txn_offsets.values())

    def drop_pending_txn_offset(self, tp: tuple[str, int]) -> None:
        """A tombstone for ``tp`` removes its pending transactional offsets too (Kafka's replay of a tombstone)."""
        for offsets in self.pending_txn_offsets.values():
            offsets.pop(tp, None)

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.current_state_timestamp = now_ms

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        out: set[str] | None = None
        for m in self.members.values():
            names = set(m.protocol_names())
            out = names if out is None else out & names
        return out or set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if self.is_empty():
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {n for n, _ in protocols})

    def select_protocol(self) -> str | None:
        """Each member votes for its most preferred protocol among those all members support."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            choice = next(n for n in m.protocol_names() if n in candidates)
            if choice not in votes:
                order.append(choice)
            votes[choice] = votes.get(choice, 0) + 1
        return max(order, key=lambda n: votes[n])

    def member_values(self) -> list[MemberValue]:
        return [
            MemberValue(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(self.protocol_name),
                m.assignment,
            )
            for m in self.members.values()
        ]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown (then: all)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None

        out: set[str] = set()
        for m in self.members.values():
            topics = subscription_topics(m.metadata_for(self.protocol_name))
            if topics is None:
                return None
            out |= topics
        return out
