"""The nemesis: a seeded random schedule of faults against a ``nodes.Db``, every start and stop recorded.

Fault kinds (``--nemesis`` names; a run enables a subset):

* ``partition`` (network namespaces, packet drops): ``isolate`` one broker from everyone (ZooKeeper, brokers,
  clients); ``leader-zk``: a partition leader cut from ZooKeeper only (clients and followers still reach it:
  Kafka's classic split brain); ``leader-followers``: a leader cut from the other brokers only; ``split``: a
  minority broker vs the majority, ZooKeeper on a random side, clients reach both; ``zk``: ZooKeeper cut from
  every broker and the clients;
* ``slow``: a broker's link rate-limited (tbf: queueing delay then drops; this kernel has no netem);
* ``pause``: SIGSTOP of a partition leader, the controller, a group/transaction coordinator or ZooKeeper, held
  longer than ``replica.lag.time.max.ms`` and the ZooKeeper session timeout, then SIGCONT;
* ``kill``: SIGKILL of a leader or a random broker, restarted a few seconds later;
* ``clock``: one broker's wall clock stepped by minutes (libfaketime), then back.

One fault at a time, sometimes two of different kinds overlapping; ``heal`` ends everything (before the quiet
phase). The schedule is drawn from ``random.Random(seed)``; the targets depend on the cluster's state.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from netspace import ROOT
from nodes import REPLICA_LAG_MS, SESSION_TIMEOUT_MS, Db
from recorder import History

KINDS = ("partition", "slow", "pause", "kill", "clock")


@dataclass
class Fault:
    kind: str
    sub: str
    targets: list[Any]
    detail: dict[str, Any] = field(default_factory=dict)
    undo: Callable[[], None] = lambda: None


class Nemesis:
    def __init__(self, db: Db, h: History, kinds: list[str], seed: int, topic: str, partitions: int,
                 groups: list[str] | None = None, txn_ids: list[str] | None = None,
                 variants: list[str] | None = None) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown nemesis kinds {sorted(unknown)}; known: {KINDS}")
        self.db, self.h, self.kinds, self.topic, self.partitions = db, h, list(kinds), topic, partitions
        self.groups, self.txn_ids = groups or [], txn_ids or []
        self.variants = set(variants or [])  # restricts each kind's variants (``sub``) to these when any match
        self.rng = random.Random(seed)
        self.active: list[Fault] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.hold = (max(REPLICA_LAG_MS, SESSION_TIMEOUT_MS) / 1000 + 2, max(REPLICA_LAG_MS, SESSION_TIMEOUT_MS) / 1000
                     + 8)

    # -- targets ----------------------------------------------------------------------------------------------
    def brokers(self) -> list[str]:
        return [f"b{i}" for i in self.db.brokers]

    def leader(self) -> str:
        p = self.rng.randrange(self.partitions)
        try:
            lead, _isr = self.db.leader_isr(self.topic, p)
            if lead > 0:
                return f"b{lead}"
        except Exception:
            pass
        return self.rng.choice(self.brokers())

    def controller(self) -> str:
        try:
            c = self.db.controller()
            if c:
                return f"b{c}"
        except Exception:
            pass
        return self.rng.choice(self.brokers())

    def coordinator(self) -> str:
        from tidelog.cluster.peer import Peer

        keys = [(g, 0) for g in self.groups] + [(t, 1) for t in self.txn_ids]
        if not keys:
            return self.leader()
        k, kt = self.rng.choice(keys)
        b = self.db.brokers[self.rng.choice(list(self.db.brokers))]

        async def ask() -> dict[str, Any]:
            peer = Peer(b.addr, 9092, "tidelog-nemesis")
            try:
                return await peer.request(10, 3, {"key": k, "key_type": kt}, timeout=5)
            finally:
                peer.close()

        try:
            r = asyncio.run(ask())
            if r["error_code"] == 0 and r["node_id"] in self.db.brokers:
                return f"b{r['node_id']}"
        except Exception:
            pass
        return self.leader()

    def pick(self, subs: list[str]) -> str:
        """A random variant, among ``variants`` when some of ``subs`` are listed there."""
        allowed = [x for x in subs if x in self.variants]
        return self.rng.choice(allowed or subs)

    # -- faults -----------------------------------------------------------------------------------------------
    def _partition(self) -> Fault:
        net, brokers = self.db.net, self.brokers()
        sub = self.pick(["isolate", "leader-zk", "leader-followers", "split", "zk"])
        if sub == "isolate":
            b = self.rng.choice(brokers)
            groups = [[b], [x for x in [*brokers, "zk", ROOT] if x != b]]
        elif sub == "leader-zk":
            b = self.leader()
            groups = [[b], ["zk"]]
        elif sub == "leader-followers":
            b = self.leader()
            groups = [[b], [x for x in brokers if x != b]]
        elif sub == "split":
            b = self.rng.choice(brokers)
            rest = [x for x in brokers if x != b]
            groups = [[b, "zk"], rest] if self.rng.random() < 0.5 else [[b], [*rest, "zk"]]
        else:
            groups = [["zk"], [*brokers, ROOT]]
        cut = net.partition(groups)

        def undo() -> None:
            for a, b in cut:
                net.heal_link(a, b)

        return Fault("partition", sub, [list(g) for g in groups], {"links": len(cut)}, undo=undo)

    def _slow(self) -> Fault:
        b = self.rng.choice(self.brokers())
        self.db.net.set_slow(b)
        return Fault("slow", "tbf", [b], {"rate": "200kbit"}, undo=lambda: self.db.net.clear_slow(b))

    def _pause(self) -> Fault:
        sub = self.pick(["leader", "controller", "coordinator", "zk"])
        name = {"leader": self.leader, "controller": self.controller, "coordinator": self.coordinator,
                "zk": lambda: "zk"}[sub]()
        node = self.db.node(name)
        node.pause()
        return Fault("pause", sub, [name], undo=node.resume)

    def _kill(self) -> Fault:
        sub = self.pick(["leader", "random"])
        name = self.leader() if sub == "leader" else self.rng.choice(self.brokers())
        node = self.db.node(name)
        node.kill()
        return Fault("kill", sub, [name], undo=node.start)  # type: ignore[attr-defined]

    def _clock(self) -> Fault:
        name = self.rng.choice(self.brokers())
        b = self.db.brokers[int(name[1:])]
        offset = self.rng.choice([-1, 1]) * self.rng.randint(60, 600)
        b.step_clock(offset)
        return Fault("clock", "step", [name], {"offset_s": offset}, undo=lambda: b.step_clock(0))

    def start_fault(self, kind: str) -> Fault | None:
        make = {"partition": self._partition, "slow": self._slow, "pause": self._pause, "kill": self._kill,
                "clock": self._clock}[kind]
        try:
            f = make()
        except Exception as exc:
            self.errors.append(f"start {kind}: {exc!r}")
            return None
        with self.lock:
            self.active.append(f)
        self.h.nemesis(True, f.kind, f.targets, {"sub": f.sub, **f.detail})
        return f

    def stop_fault(self, f: Fault) -> None:
        try:
            f.undo()
        except Exception as exc:
            self.errors.append(f"stop {f.kind}: {exc!r}")
        with self.lock:
            if f in self.active:
                self.active.remove(f)
        self.h.nemesis(False, "restart" if f.kind == "kill" else f.kind, f.targets, {"sub": f.sub, **f.detail})

    # -- schedule ---------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Until ``stop``: a gap, one fault (a quarter of the time two of different kinds), held, then healed."""
        while not self.stop.wait(self.rng.uniform(3, 8)):
            kinds = [self.rng.choice(self.kinds)]
            if len(self.kinds) > 1 and self.rng.random() < 0.25:
                kinds.append(self.rng.choice([k for k in self.kinds if k != kinds[0]]))
            faults = [f for k in kinds if (f := self.start_fault(k)) is not None]
            hold = self.rng.uniform(*self.hold)
            self.stop.wait(hold)
            for f in reversed(faults):
                self.stop_fault(f)

    def heal(self) -> None:
        """End every fault (also whatever a failed undo left behind): links, rate limits, pauses, kills, clocks."""
        with self.lock:
            left = list(self.active)
        for f in reversed(left):
            self.stop_fault(f)
        self.db.net.heal_all()
        for node in [self.db.zk, *self.db.brokers.values()]:
            if node.paused:
                node.resume()
        for b in self.db.brokers.values():
            if b.clock:
                b.step_clock(0)
            if not b.running:
                b.start()
