"""The state of a consumer (KIP-848) group and its members: plain data shared by the manager
(:mod:`consumer_group`), the online migration (:mod:`migration`) and the classic members inside a consumer group
(:mod:`classic_in_consumer`), so that none of them imports another back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group.assignors import TopicPartition
from tidelog.broker.group.consumer_records import ClassicMemberMetadata, ResolvedRegex

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from tidelog.broker.broker import Broker
    from tidelog.broker.group.state import Group


class GroupOwner(Protocol):
    """What the manager needs of the group coordinator that owns it (the broker, and its classic groups, to tell
    a consumer group from a classic one of the same id)."""

    broker: Broker
    groups: dict[str, Group]
    group_max_size: int

    def _group(self, group_id: str, create: bool = False) -> Group | None: ...

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...

STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_partitions", "unreleased_partitions"


class ConsumerGroupError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or str(code))
        self.code = code
        self.message = message


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = 0
    state: str = STABLE
    assigned: set[TopicPartition] = field(default_factory=set)
    pending_revocation: set[TopicPartition] = field(default_factory=set)
    # KIP-1251: the member epoch at which each owned partition was assigned to it (absent: the member's epoch, as
    # Kafka reads a record without them); written in the current-assignment record's AssignmentEpochs
    assignment_epochs: dict[TopicPartition, int] = field(default_factory=dict)
    session_timer: asyncio.TimerHandle | None = None
    revocation_timer: asyncio.TimerHandle | None = None
    # a member using the classic protocol (JoinGroup/SyncGroup/Heartbeat, classic_in_consumer.py): its session
    # timeout and protocols, and its join / sync deadlines
    classic: ClassicMemberMetadata | None = None
    join_timer: asyncio.TimerHandle | None = None
    sync_timer: asyncio.TimerHandle | None = None

    def cancel_timers(self) -> None:
        for t in (self.session_timer, self.revocation_timer, self.join_timer, self.sync_timer):
            if t is not None:
                t.cancel()
        self.session_timer = self.revocation_timer = self.join_timer = self.sync_timer = None


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    metadata: tuple[tuple[str, int], ...] = ()
    metadata_checked: float = 0.0
    assignor: str = "uniform"
    # the members' regular expressions resolved (ConsumerGroupRegularExpression records, regex_records.py), and a
    # count of their changes (a change makes the store compare the whole group)
    resolved: dict[str, ResolvedRegex] = field(default_factory=dict)
    regex_changes: int = 0
    # the last refresh of the regexes (consumer_regex.refresh): the topic-set version and wall time (ms) it used
    regex_version: int = -1
    regex_refreshed_ms: int = 0

    def state(self) -> str:
        """Kafka's ConsumerGroup states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.group_epoch != self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():
            if m.epoch != self.assignment_epoch or m.state != STABLE:
                return "Reconciling"
        return "Stable"

    def subscribed_topic_names(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_names)
        return out
