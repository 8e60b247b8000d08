"""Cost of persisting a share group (ShareGroup* records) per heartbeat on the broker's loop, side by side: the
group's records encoded anew on every heartbeat, and the store's per-member cache (a heartbeat of a stable group
re-encodes nothing); the append itself is left out. Run: ``.venv/bin/python bench/share_group_persist.py [members]``
(Kafka's ``group.share.max.size`` default is 200).
"""

from __future__ import annotations

import sys
import time
import uuid
from types import SimpleNamespace
from typing import Any

from tidelog.broker.group.share_group import ShareGroup, ShareMember
from tidelog.broker.group.share_group_store import ShareGroupStore


def _setup(members: int, partitions: int = 100) -> tuple[ShareGroupStore, ShareGroup]:
    infos = {f"t{i}": SimpleNamespace(topic_id=uuid.uuid4().bytes) for i in range(10)}
    mgr: Any = SimpleNamespace(broker=SimpleNamespace(topics=SimpleNamespace(get=infos.get)), groups={})
    g = ShareGroup("bench", epoch=5, assignment_epoch=5)
    tps = [(f"t{i % 10}", i // 10) for i in range(partitions)]
    for n in range(members):
        mid = f"member-{n:05d}"
        g.members[mid] = ShareMember(mid, "c", "/10.0.0.1", None, sorted(infos), epoch=5,
                                     assigned=set(tps[n % partitions::members]) or {tps[n % partitions]},
                                     previous_epoch=4)
    mgr.groups[g.group_id] = g
    return ShareGroupStore(mgr), g


def _time(fn: Any, rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t0) / rounds


def main() -> None:
    members = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    rounds = max(20, 20000 // members)
    store, g = _setup(members)

    def uncached() -> None:
        store._cache.clear()
        store.diff(store.written.get(g.group_id, {}), store.snapshot(g))

    def cached() -> None:
        store.diff(store.written.get(g.group_id, {}), store.snapshot(g))

    store.written[g.group_id] = store.snapshot(g)
    a = _time(uncached, rounds)
    store.snapshot(g)
    b = _time(cached, rounds)
    print(f"share group of {members} members, 100 partitions: per heartbeat (nothing changed)")
    print(f"  {'records encoded anew':<28} {a * 1e3:8.3f} ms")
    print(f"  {'per-member cache':<28} {b * 1e3:8.3f} ms")
    print(f"  ratio anew / cached          {a / b:8.1f}x")


if __name__ == "__main__":
    main()
