"""Cost of persisting a KIP-848 group (ConsumerGroup* records) per heartbeat, side by side: the records of the whole
group encoded anew on each heartbeat, with the store's per-member cache, and the store's path for a heartbeat that
left the group's shape (epochs, member ids) alone, where only the heartbeating member's records are compared (what
a heartbeat costs on the broker's loop; the append itself is left out). Run: ``.venv/bin/python bench/kip848_persist.py [members] [partitions]``.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from types import SimpleNamespace
from typing import Any

from tidelog.broker.group.consumer_group import ConsumerGroup, ConsumerMember
from tidelog.broker.group.consumer_store import ConsumerGroupStore, diff, snapshot


def _group(members: int, partitions: int, topics: int = 10) -> tuple[Any, ConsumerGroup]:
    infos = {f"t{i}": SimpleNamespace(topic_id=uuid.uuid4().bytes) for i in range(topics)}
    mgr: Any = SimpleNamespace(coordinator=SimpleNamespace(broker=SimpleNamespace(topics=SimpleNamespace(
        get=infos.get))))
    g = ConsumerGroup("bench", group_epoch=5, assignment_epoch=5)
    tps = [(f"t{i % topics}", i // topics) for i in range(partitions)]
    for n in range(members):
        mid = f"member-{n:05d}"
        own = set(tps[n::members])
        g.members[mid] = ConsumerMember(mid, client_id="c", client_host="/10.0.0.1", subscribed_names=sorted(infos),
                                        epoch=5, previous_epoch=4, assigned=set(own))
        g.target[mid] = set(own)
    return mgr, g


def _time(fn: Any, rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t0) / rounds


def main() -> None:
    members = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    partitions = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    mgr, g = _group(members, partitions)
    written = snapshot(mgr, g)
    cache: dict[str, Any] = {}
    snapshot(mgr, g, cache)
    first = next(iter(g.members.values()))

    def uncached() -> None:
        first.epoch += 1  # one member moved: its records change
        assert len(diff(written, snapshot(mgr, g))) >= 1

    def cached() -> None:
        first.epoch += 1
        assert len(diff(written, snapshot(mgr, g, cache))) >= 1

    rounds = 20
    a, b = _time(uncached, rounds), _time(cached, rounds)

    async def appended(group_id: str, entries: Any, **kw: Any) -> int:
        return 0

    mgr.groups = {"bench": g}
    mgr.coordinator._append = appended
    store = ConsumerGroupStore(mgr)

    async def store_rounds() -> float:
        await store.persist("bench")  # the first write: the whole group
        t0 = time.perf_counter()
        for _ in range(rounds * 10):
            first.epoch += 1
            await store.persist("bench", first.member_id)
        return (time.perf_counter() - t0) / (rounds * 10)

    c = asyncio.run(store_rounds())
    print(f"group of {members} members over {partitions} partitions, one member changed per heartbeat")
    print(f"{'whole group encoded':>34}: {a * 1000:8.3f} ms/heartbeat")
    print(f"{'per-member cache':>34}: {b * 1000:8.3f} ms/heartbeat   ratio {a / b:6.1f}x")
    print(f"{'store, shape unchanged (member)':>34}: {c * 1000:8.3f} ms/heartbeat   ratio {a / c:6.1f}x")


if __name__ == "__main__":
    main()
