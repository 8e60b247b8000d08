"""ElectLeaders (KIP-460) on the controller's thread: preferred and unclean elections asked for over the Kafka
protocol (kafka-leader-election.sh, ``tidelog leader-election``), as Kafka's ZooKeeper-mode
``KafkaController.onReplicaElection``.

* preferred: the first assigned replica leads when it is alive, not shutting down and in the ISR;
  ``ELECTION_NOT_NEEDED`` when it already leads, ``PREFERRED_LEADER_NOT_AVAILABLE`` otherwise;
* unclean: only for a partition without a live leader: the first live in-sync replica (assignment order), else the
  first live replica at all, which then leads with ISR = [it] (counted and logged as every unclean election is);
  ``ELECTION_NOT_NEEDED`` when a live leader exists, ``ELIGIBLE_LEADERS_NOT_AVAILABLE`` when no replica is alive.

Every state write is the controller's conditional one (decided again when it loses a race).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from tidelog.cluster import zkdata as zd
from tidelog.errors import ErrorCode


class Controller(Protocol):
    """What an election uses of the controller (``tidelog.cluster.controller.Controller``), on its thread."""

    zk: Any
    epoch: int

    def live_brokers(self) -> set[int]: ...

    def _read_shutting_down(self, live: set[int]) -> set[int]: ...

    def _assignment(self, topic: str) -> zd.TopicAssignment | None: ...

    def _decide_and_write(self, topic: str, p: int,
                          decide: Callable[[zd.LeaderIsr], zd.LeaderIsr | None]) -> zd.LeaderIsr | None: ...

    def decide_preferred(self, s: zd.LeaderIsr, replicas: list[int], live: set[int],
                         shutting: set[int]) -> zd.LeaderIsr | None: ...

PREFERRED, UNCLEAN = 0, 1
Result = tuple[ErrorCode, str] | None
"""(error name, message), or None when the partition got its new leader."""


def all_partitions(controller: Controller) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for topic in controller.zk.get_children(zd.BROKER_TOPICS):
        a = controller._assignment(topic)
        if a is not None:
            out |= {(topic, p) for p in a.partitions}
    return out


def elect(controller: Controller, wanted: set[tuple[str, int]] | None,
          election_type: int) -> dict[tuple[str, int], Result]:
    """Run the election for ``wanted`` (None: every partition); the result of each partition."""
    live = controller.live_brokers()
    shutting = controller._read_shutting_down(live)
    results: dict[tuple[str, int], Result] = {}
    for topic, p in sorted(all_partitions(controller) if wanted is None else wanted):
        a = controller._assignment(topic)
        if a is None or p not in a.partitions:
            results[(topic, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            continue
        replicas = a.partitions[p]
        outcome: list[Result] = [None]

        def decide(s: zd.LeaderIsr, replicas: list[int] = replicas, outcome: list[Result] = outcome,
                   name: str = f"{topic}-{p}") -> zd.LeaderIsr | None:
            if election_type == PREFERRED:
                new = controller.decide_preferred(s, replicas, live, shutting)
                if new is None:
                    outcome[0] = ((ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                                  if replicas and s.leader == replicas[0] else
                                  (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                   f"Failed to elect leader for partition {name} under strategy "
                                   "PreferredReplicaPartitionLeaderElectionStrategy"))
                return new
            return _decide_unclean(controller, s, replicas, live, shutting, name, outcome)

        if controller._decide_and_write(topic, p, decide) is None:
            outcome[0] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition has no state yet.")
        results[(topic, p)] = outcome[0]
    return results


def _decide_unclean(controller: Controller, s: zd.LeaderIsr, replicas: list[int], live: set[int],
                    shutting: set[int], name: str, outcome: list[Result]) -> zd.LeaderIsr | None:
    if s.leader != zd.NO_LEADER and s.leader in live:
        outcome[0] = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
        return None
    eligible = [r for r in replicas if r in live and r not in shutting]
    in_sync = [r for r in eligible if r in s.isr]
    if in_sync:
        outcome[0] = None
        return zd.LeaderIsr(in_sync[0], s.leader_epoch + 1, tuple(r for r in s.isr if r in live), controller.epoch)
    if eligible:
        outcome[0] = None
        return zd.LeaderIsr(eligible[0], s.leader_epoch + 1, (eligible[0],), controller.epoch)
    outcome[0] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                  f"Failed to elect leader for partition {name} under strategy OfflinePartitionLeaderElectionStrategy")
    return None
