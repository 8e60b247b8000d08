"""ZooKeeper mode's replica manager, controlled shutdown (see ``replica_manager``'s module docstring for the
protocol: the ephemeral ``/admin/controlled_shutdown/<id>``, answered through the state znodes). Part of
``ZkReplicaManager`` (:mod:`tidelog.cluster.replica_state`).

Bounded as Kafka's ``KafkaServer.controlledShutdown`` (ZooKeeper mode): at most ``controlled.shutdown.max.retries``
attempts, each waiting at most ``request.timeout.ms`` (the request znode's write included), with
``controlled.shutdown.retry.backoff.ms`` between two; every ZooKeeper request on the way is awaited with that
deadline (:func:`~tidelog.cluster.zk_async.zk_await`), never in a thread that waits for a reconnect. It also stops
as soon as this broker's ZooKeeper session is lost or expiring (:meth:`ZkSession._zookeeper_gone`): lost, or
the connection down for ``zookeeper.session.timeout.ms``. Then the broker shuts down without it ("unclean" in
Kafka's words: leaderships move when the session ends, as after a crash; the logs are still flushed and closed),
after one WARN line saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from tidelog.cluster import zkdata as zd
from tidelog.cluster.replica_state import ZkReplicaState
from tidelog.cluster.zk_async import ZooKeeperGone, zk_await

log = logging.getLogger("tidelog.cluster.broker")


class ControlledShutdown(ZkReplicaState):
    """Moving leadership and ISR membership away before the broker stops."""

    def controlled_shutdown_bound_s(self) -> float:
        """The longest a controlled shutdown waits: ``controlled.shutdown.max.retries`` x ``request.timeout.ms``
        + (``controlled.shutdown.max.retries`` - 1) x ``controlled.shutdown.retry.backoff.ms`` (Kafka's, without
        its separate connect timeout: there is no connection to the controller here)."""
        n = int(self.controlled_shutdown_retries)
        return n * self.request_timeout_s + max(0, n - 1) * self.controlled_shutdown_backoff_s

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

    async def _shutting_peers(self, zk: Any, timeout: float) -> frozenset[int]:
        """The other brokers with a controlled shutdown pending (a ZooKeeper read, at most ``timeout`` s)."""
        from kazoo.exceptions import NoNodeError

        try:
            children = await zk_await(zk.get_children_async(zd.CONTROLLED_SHUTDOWN), timeout, self._zookeeper_gone)
        except NoNodeError:
            return frozenset()
        return frozenset(int(c) for c in children if c.isdigit()) - {self.node_id}

    async def _request_controlled_shutdown(self, zk: Any, attempt: int, timeout: float) -> None:
        """(Re)create the ephemeral ``/admin/controlled_shutdown/<id>``: a new child, so the controller's children
        watch fires again."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        path = zd.controlled_shutdown_path(self.node_id)
        with contextlib.suppress(NoNodeError):
            await zk_await(zk.delete_async(path), timeout, self._zookeeper_gone)
        with contextlib.suppress(NodeExistsError):
            await zk_await(zk.create_async(path, zd.encode_controlled_shutdown(self.node_id, attempt),
                                           ephemeral=True, makepath=True),
                           deadline - loop.time(), self._zookeeper_gone)

    async def _controlled_shutdown(self) -> bool:
        """Ask the controller to move everything away and wait for it (see the module docstring for the bound).
        True when nothing is left to move; otherwise one WARN line (why), and the broker stops anyway."""
        from kazoo.exceptions import KazooException

        self._shutting_down = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        shutting: frozenset[int] = frozenset()
        reason = ""
        attempts = 0
        try:
            for attempt in range(1, self.controlled_shutdown_retries + 1):
                if not self._controlled_shutdown_pending(shutting):
                    break
                gone = self._zookeeper_gone()
                if gone:
                    reason = gone
                    break
                zk = self.zk
                if zk is None:
                    reason = "no ZooKeeper client"
                    break
                attempts = attempt
                log.info("controlled shutdown: asking the controller", extra={"kv": {
                    "attempt": attempt, "partitions": len(self._controlled_shutdown_pending(shutting))}})
                deadline = loop.time() + self.request_timeout_s
                try:
                    await self._request_controlled_shutdown(zk, attempt, self.request_timeout_s)
                    shutting = await self._shutting_peers(zk, deadline - loop.time())
                    while self._controlled_shutdown_pending(shutting) and loop.time() < deadline:
                        self._state_seen = asyncio.Event()  # set by the next state watch delivery
                        with contextlib.suppress(TimeoutError):  # at most 1 s: peers may start shutting down
                            await asyncio.wait_for(self._state_seen.wait(), min(1.0, deadline - loop.time()))
                        gone = self._zookeeper_gone()
                        if gone:
                            raise ZooKeeperGone(gone)
                        if loop.time() < deadline:
                            shutting = await self._shutting_peers(zk, deadline - loop.time())
                    if self._controlled_shutdown_pending(shutting):
                        reason = f"partitions not moved within request.timeout.ms ({self.request_timeout_s * 1000:.0f} ms)"
                except ZooKeeperGone as exc:
                    reason = str(exc)
                    if self._zookeeper_gone():
                        break  # the session is lost or expiring: nothing to retry
                except KazooException as exc:  # ConnectionLoss, SessionExpiredError, ConnectionClosedError...
                    reason = f"ZooKeeper: {type(exc).__name__}"
                if not self._controlled_shutdown_pending(shutting):
                    break
                if attempt < self.controlled_shutdown_retries:  # controlled.shutdown.retry.backoff.ms, cut short
                    end = loop.time() + self.controlled_shutdown_backoff_s  # when the session is gone meanwhile
                    while loop.time() < end and not self._zookeeper_gone():
                        await asyncio.sleep(min(0.25, end - loop.time()))
        except Exception as exc:  # never keeps the broker from stopping
            log.exception("controlled shutdown: unexpected error")
            reason = f"unexpected error: {exc!r}"
        pending = self._controlled_shutdown_pending(shutting)
        still_led = sorted(f"{t}-{p}" for (t, p), r in self.replicas.items() if r.is_leader)
        ms = int((loop.time() - started) * 1000)
        if not pending and not reason.startswith("unexpected"):
            log.info("controlled shutdown complete", extra={"kv": {
                "pending": 0, "still_leader": ",".join(still_led) or "-", "ms": ms}})
            return True
        # Kafka: "Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed"
        log.warning("controlled shutdown failed, proceeding with an unclean shutdown (leaderships move when the "
                    "ZooKeeper session ends; the logs are still flushed and closed)", extra={"kv": {
                        "reason": reason or "unknown", "attempts": attempts, "pending": len(pending),
                        "still_leader": ",".join(still_led) or "-", "ms": ms}})
        return False
