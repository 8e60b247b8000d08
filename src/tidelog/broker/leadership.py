"""Partition leadership as an event: what the coordinators hear from the replica manager (Kafka's
``ReplicaManager.becomeLeaderOrFollower(..., onLeadershipChange)`` → ``GroupCoordinator.onElection`` /
``onResignation``, the same for the transaction coordinator).

Both replica managers announce through one :class:`LeadershipChanges`, made by the composition root
(``tidelog.node``) and given to the replica manager and to the broker at construction: the single-node one
(:class:`~tidelog.broker.replica_manager.LocalReplicaManager`) announces leadership of every partition it hosts at
start and of every partition created later, ZooKeeper mode's on each election it sees. The coordinators load and
unload their internal topic's partitions on these calls in both modes, so neither reads the broker's mode
(docs/decisions/0065-coordinators-driven-by-partition-leadership.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

log = logging.getLogger("tidelog.broker.leadership")


class LeadershipListener(Protocol):
    """A part that follows the leadership of some partitions (the group and transaction coordinators)."""

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """Called on the event loop: this broker became (``is_leader``) or stopped being leader of the partition.
        A listener ignores the topics it does not own."""
        ...


class LeadershipChanges:
    """The fan-out of leadership changes to the listeners the broker names once it has built them. One listener
    failing does not keep the change from the others (nor from the replica manager, which applied it already)."""

    def __init__(self) -> None:
        self._listeners: tuple[LeadershipListener, ...] = ()

    def listen(self, listeners: Iterable[LeadershipListener]) -> None:
        """The listeners, named once by the broker after it built its coordinators (before any announcement)."""
        self._listeners = tuple(listeners)

    def changed(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """On the loop: tell every listener."""
        for listener in self._listeners:
            try:
                listener.on_leadership_change(topic, partition, is_leader, leader_epoch)
            except Exception:
                log.exception("leadership change listener failed", extra={"kv": {
                    "listener": type(listener).__name__, "topic": topic, "partition": partition,
                    "leader": is_leader}})
