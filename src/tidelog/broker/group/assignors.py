"""Server-side partition assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

The broker computes a group's *target assignment* with one of these whenever the group epoch moves (a member
joins, leaves or changes its subscription; a subscribed topic appears, disappears or grows). Names are Kafka's
(``group.consumer.assignors``, default ``uniform``; a member picks one with ``ServerAssignor`` /
``group.remote.assignor``).

* ``uniform`` (Kafka's UniformAssignor): balanced and sticky. Every member keeps the partitions it owns that it
  still subscribes to, up to its fair share; the rest go to the least loaded eligible member; then partitions move
  from the most to the least loaded eligible member until no two eligible members differ by more than one. With
  identical subscriptions the result is balanced to within one partition, and a member that joins or leaves moves
  only the partitions that balance needs.
* ``range`` (Kafka's RangeAssignor): per topic, the subscribed members sorted by member id each take a contiguous
  range; the first ``partitions % members`` take one more. Members subscribing to the same topics get the same
  partition numbers of each (co-partitioning). Unlike Kafka's server-side range assignor it is not sticky (a
  member's range follows its rank).

Pure functions over plain data: unit-tested in tests/broker/group/test_assignors.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class MemberSubscription:
    topics: frozenset[str]
    current: set[TopicPartition] = field(default_factory=set)


Assignor = Callable[[Mapping[str, MemberSubscription], Mapping[str, int]], dict[str, set[TopicPartition]]]


def uniform(members: Mapping[str, MemberSubscription], partitions: Mapping[str, int]) -> dict[str, set[TopicPartition]]:
    """``members``: member id -> subscription (and current assignment, for stickiness); ``partitions``: topic ->
    partition count of every topic that exists. Returns member id -> assigned partitions (every member present)."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if not members:
        return out
    eligible: dict[str, list[str]] = {}
    for mid in sorted(members):
        for t in members[mid].topics:
            if t in partitions:
                eligible.setdefault(t, []).append(mid)
    all_tps = [(t, p) for t in sorted(eligible) for p in range(partitions[t])]
    # a member's fair share: its part of each topic it subscribes to (ceil), the cap on what it keeps
    share: dict[str, int] = dict.fromkeys(members, 0)
    for t, mids in eligible.items():
        each = -(-partitions[t] // len(mids))
        for m in mids:
            share[m] += each
    if len({frozenset(members[m].topics & eligible.keys()) for m in members} - {frozenset()}) <= 1:
        # identical subscriptions: the exact quota (floor, and ceil for the first ``extra`` members)
        n = len([m for m in members if members[m].topics & eligible.keys()])
        if n:
            base = len(all_tps) // n
            share = {m: base + (1 if len(all_tps) % n else 0) for m in members}
    taken: set[TopicPartition] = set()
    # 1. sticky: keep current partitions still subscribed and existing, up to the fair share
    for mid in sorted(members, key=lambda m: (-len(members[m].current), m)):
        sub = members[mid]
        for tp in sorted(sub.current):
            if len(out[mid]) >= share[mid]:
                break
            if tp in taken or tp[0] not in sub.topics or tp[0] not in partitions or tp[1] >= partitions[tp[0]]:
                continue
            out[mid].add(tp)
            taken.add(tp)
    # 2. the rest to the least loaded eligible member (partitions with the fewest candidates first); one heap of
    # (load, member) per distinct candidate list, entries refreshed lazily when a member's load moved elsewhere
    rest = [tp for tp in all_tps if tp not in taken]
    rest.sort(key=lambda tp: (len(eligible[tp[0]]), tp))
    heaps: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    for tp in rest:
        key = tuple(eligible[tp[0]])
        heap = heaps.get(key)
        if heap is None:
            heap = heaps[key] = [(len(out[m]), m) for m in key]
            heapq.heapify(heap)
        while True:
            load, mid = heapq.heappop(heap)
            if load == len(out[mid]):
                break
            heapq.heappush(heap, (len(out[mid]), mid))
        out[mid].add(tp)
        heapq.heappush(heap, (load + 1, mid))
    # 3. balance: move from a loaded member to an eligible one with at least two fewer
    _balance(out, {t: set(mids) for t, mids in eligible.items()})
    return out


def _balance(out: dict[str, set[TopicPartition]], eligible: Mapping[str, set[str]]) -> None:
    """Move partitions from the most loaded members to eligible members with at least two fewer, until none can
    move. Each move lowers the sum of squared loads, so the loop ends; ``budget`` bounds it regardless."""
    budget = sum(len(v) for v in out.values()) + len(out)
    while budget > 0:
        loads = sorted(out, key=lambda m: (len(out[m]), m))
        if not loads or len(out[loads[-1]]) - len(out[loads[0]]) <= 1:
            return
        moved = False
        for src in reversed(loads):
            for dst in loads:
                if len(out[dst]) + 2 > len(out[src]):
                    break
                tp = next((tp for tp in sorted(out[src], reverse=True) if dst in eligible[tp[0]]), None)
                if tp is not None:
                    out[src].discard(tp)
                    out[dst].add(tp)
                    moved = True
                    budget -= 1
                    break
            if moved:
                break
        if not moved:
            return


def range_assignor(members: Mapping[str, MemberSubscription],
                   partitions: Mapping[str, int]) -> dict[str, set[TopicPartition]]:
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    topics = sorted({t for m in members.values() for t in m.topics if t in partitions})
    for t in topics:
        mids = sorted(m for m in members if t in members[m].topics)
        n, count = len(mids), partitions[t]
        base, extra = divmod(count, n)
        start = 0
        for i, mid in enumerate(mids):
            size = base + (1 if i < extra else 0)
            out[mid].update((t, p) for p in range(start, start + size))
            start += size
    return out


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_assignor}
