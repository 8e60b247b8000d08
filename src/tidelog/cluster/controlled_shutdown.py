"""ZooKeeper mode's replica manager, controlled shutdown (see ``replica_manager``'s module docstring for the
protocol: the ephemeral ``/admin/controlled_shutdown/<id>``, answered through the state znodes). Part of
``ZkReplicaManager`` (:mod:`tidelog.cluster.replica_state`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from tidelog.cluster import zkdata as zd
from tidelog.cluster.replica_state import ZkReplicaState

log = logging.getLogger("tidelog.cluster.broker")


class ControlledShutdown(ZkReplicaState):
    """Moving leadership and ISR membership away before the broker stops."""

    def _controlled_shutdown_pending(self, shutting: frozenset[int] = frozenset()) -> list[tuple[str, int]]:
        """Partitions still led here (with another live ISR member, not shutting down itself, to take over) or
        still listing us in the ISR beside such a member. ``shutting``: the brokers shutting down too (their
        ``/admin/controlled_shutdown`` znodes): the controller moves nothing to them, so waiting for them is
        waiting for nothing (every broker of a cluster stopped at once)."""
        out = []
        for tp in self.replicas:
            s = self.states.get(tp)
            if s is None:
                continue
            others = [b for b in s.isr if b != self.node_id and b in self.live and b not in shutting]
            if (s.leader == self.node_id and others) or (s.leader != self.node_id and self.node_id in s.isr
                                                          and s.leader in self.live and others):
                out.append(tp)
        return out

    def _shutting_peers(self, zk: Any) -> frozenset[int]:
        """The other brokers with a controlled shutdown pending (blocking: a ZooKeeper read)."""
        from kazoo.exceptions import NoNodeError

        try:
            return frozenset(int(c) for c in zk.get_children(zd.CONTROLLED_SHUTDOWN) if c.isdigit()) - {self.node_id}
        except NoNodeError:
            return frozenset()

    async def _controlled_shutdown(self) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        self._shutting_down = True
        path = zd.controlled_shutdown_path(self.node_id)
        loop = asyncio.get_running_loop()
        started = loop.time()
        shutting: frozenset[int] = frozenset()
        for attempt in range(1, self.controlled_shutdown_retries + 1):
            pending = self._controlled_shutdown_pending(shutting)
            if not pending:
                break
            log.info("controlled shutdown: asking the controller", extra={"kv": {
                "attempt": attempt, "partitions": len(pending)}})
            zk = self.zk
            if zk is None:
                return

            def request(zk: Any = zk, attempt: int = attempt) -> None:
                with contextlib.suppress(NoNodeError):
                    zk.delete(path)  # a new child: the controller's children watch fires again
                with contextlib.suppress(NodeExistsError):
                    zk.create(path, zd.encode_controlled_shutdown(self.node_id, attempt), ephemeral=True,
                              makepath=True)

            await asyncio.to_thread(request)
            deadline = loop.time() + self.request_timeout_s
            shutting = await asyncio.to_thread(self._shutting_peers, zk)
            while self._controlled_shutdown_pending(shutting) and loop.time() < deadline:
                self._state_seen = asyncio.Event()  # set by the next state watch delivery
                with contextlib.suppress(TimeoutError):  # at most 1 s: peers may start shutting down meanwhile
                    await asyncio.wait_for(self._state_seen.wait(), min(1.0, deadline - loop.time()))
                shutting = await asyncio.to_thread(self._shutting_peers, zk)
            if not self._controlled_shutdown_pending(shutting):
                break
            if attempt < self.controlled_shutdown_retries:
                await asyncio.sleep(self.controlled_shutdown_backoff_s)  # controlled.shutdown.retry.backoff.ms
        pending = self._controlled_shutdown_pending(shutting)
        still_led = sorted(f"{t}-{p}" for (t, p), r in self.replicas.items() if r.is_leader)
        log.info("controlled shutdown " + ("complete" if not pending else "incomplete"), extra={"kv": {
            "pending": len(pending), "still_leader": ",".join(still_led) or "-",
            "ms": int((loop.time() - started) * 1000)}})
