"""ZooKeeper mode's replica manager, the leader side of replication (Kafka's ``Partition``): follower progress
from their fetches, the high watermark (min LEO over the ISR), ISR expansion and shrinking written to the
partition's state znode (conditional on its version). Part of ``ZkReplicaManager``
(:mod:`tidelog.cluster.replica_state`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from tidelog.broker.errors import PartitionError
from tidelog.cluster import zkdata as zd
from tidelog.cluster.replica_state import Replica, ZkReplicaState
from tidelog.cluster.zk_async import ZooKeeperGone, zk_await
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.cluster.broker")


class IsrTracking(ZkReplicaState):
    """Follower progress, high watermark and ISR of the partitions led here."""

    def maybe_increment_high_watermark(self, tp: tuple[str, int], log_: Any) -> bool:
        r = self.replicas.get(tp)
        if r is None or not r.is_leader:
            return False
        new_hw = log_.log_end_offset
        # Kafka's "maximal ISR": while an ISR change is on its way to ZooKeeper, count the members of both the
        # committed and the proposed ISR, so that no replica ZooKeeper may already list lacks a committed offset
        for b in {*r.isr, *r.pending_isr}:
            if b != self.node_id:
                new_hw = min(new_hw, r.follower_leo.get(b, -1))
        if new_hw > log_.high_watermark:
            log_.high_watermark = new_hw
            return True
        return False

    def high_watermark(self, tp: tuple[str, int]) -> int:
        """For DelayedProduce: fails the produce when leadership is lost or the ISR fell below
        ``min.insync.replicas`` after the append (NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        plog = self.leader_log(*tp)
        if len(self.isr(*tp)) < plog.config.min_insync_replicas:
            raise PartitionError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        return plog.high_watermark

    def _leader_progress(self, r: Replica, isr_changed: bool = True) -> None:
        """The HW moved: re-check every purgatory of the partition; else, after an ISR change, the waiting produces
        (the ISR may have fallen below min.insync.replicas)."""
        if self.maybe_increment_high_watermark(r.tp, r.log):
            self.broker.purgatory.check_and_complete(r.tp)
        elif isr_changed:
            self.broker.purgatory.produce.check_and_complete(r.tp)

    def record_follower_fetch(self, r: Replica, follower: int, fetch_offset: int) -> None:
        now = time.monotonic()
        leo = r.log.log_end_offset
        if fetch_offset >= leo:
            r.last_caught_up[follower] = now
        elif fetch_offset >= r.last_fetch_leo.get(follower, leo + 1):
            r.last_caught_up[follower] = r.last_fetch_time[follower]
        r.last_fetch_leo[follower] = leo
        r.last_fetch_time[follower] = now
        moved = r.follower_leo.get(follower) != fetch_offset
        r.follower_leo[follower] = fetch_offset
        if (follower not in r.isr and follower in r.replicas and fetch_offset >= r.log.high_watermark
                and fetch_offset >= r.epoch_start_offset):
            self._change_isr(r, tuple(sorted((*r.isr, follower))))
        # an idle partition in a fetcher's request (same offset as last time) cannot move the HW; a fetch that does
        # not move it cannot complete a waiting produce either (neither the HW nor the ISR changed: an ISR change
        # runs _leader_progress itself), so only an HW move re-checks the purgatories (issue 30: with two followers
        # every other follower fetch moves nothing, and re-checking each pipelined DelayedProduce was per round)
        if moved:
            self._leader_progress(r, isr_changed=False)

    def _change_isr(self, r: Replica, new_isr: tuple[int, ...]) -> None:
        if r.isr_update_pending or self._loop is None or self.zk is None:
            return
        r.isr_update_pending = True
        r.pending_isr = new_isr
        # the version (and epoch) the new ISR was computed from: a state that arrives before the write runs
        # makes it fail instead of overwriting a newer decision (e.g. the controller's removal of a dead broker)
        self._loop.create_task(self._write_isr(r, new_isr, r.leader_epoch, r.zk_version, r.controller_epoch))

    async def _write_isr(self, r: Replica, new_isr: tuple[int, ...], epoch: int, version: int,
                         controller_epoch: int) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError

        old_isr = r.isr
        new = zd.LeaderIsr(self.node_id, epoch, new_isr, controller_epoch)
        try:
            zk = self.zk
            if zk is None:
                return
            stat = await self._await_isr_write(r, zk.set_async(zd.state_path(*r.tp), zd.encode_state(new), version))
        except (BadVersionError, NoNodeError):
            log.info("ISR update refused (state changed); waiting for the new state",
                     extra={"kv": {"topic": r.tp[0], "partition": r.tp[1]}})
            return
        except Exception as exc:  # session expired / connection lost: the state watch tells us what happened
            log.warning("ISR update not written", extra={"kv": {"topic": r.tp[0], "partition": r.tp[1],
                                                                "error": repr(exc)}})
            return
        finally:
            r.isr_update_pending = False
            r.pending_isr = ()
        if set(new_isr) - set(old_isr):
            self.broker.metrics.isr_expands.inc()
        if set(old_isr) - set(new_isr):
            self.broker.metrics.isr_shrinks.inc()
        log.info("ISR changed", extra={"kv": {"topic": r.tp[0], "partition": r.tp[1],
                                              "isr": ",".join(map(str, new_isr))}})
        if r.is_leader and r.leader_epoch == epoch and r.zk_version == version:
            r.isr, r.zk_version = new_isr, stat.version
            self.states[r.tp] = new.with_zk_version(stat.version)
            self._leader_progress(r)

    async def _await_isr_write(self, r: Replica, result: Any) -> Any:
        """The answer to the ISR write ``result`` (kazoo's asynchronous ``set``), awaited on the loop: no worker
        thread waits for it. While ZooKeeper is unreachable kazoo keeps the request queued until the connection
        is back (then sends it) or fails it (``ConnectionLoss`` when a connection drops, ``SessionExpiredError``
        when the session is found expired): it is never lost unanswered. So after ``zookeeper.session.timeout.ms``
        without an answer the current ISR is kept (one WARN line) and the write stays the partition's one pending
        ISR change until it is answered: that queued write is the retry Kafka's AlterPartition makes (a second
        conditional write would queue behind it and could only fail), and the "maximal ISR" (the committed and
        the proposed members) keeps bounding the high watermark meanwhile, as the write may still land. Once it
        fails, the next ISR check proposes again."""
        try:
            return await zk_await(result, self.session_timeout_s)
        except ZooKeeperGone:
            log.warning("ISR update not answered by ZooKeeper within zookeeper.session.timeout.ms; the current ISR "
                        "is kept until ZooKeeper answers (the write stays queued in the ZooKeeper client)",
                        extra={"kv": {"topic": r.tp[0], "partition": r.tp[1],
                                      "isr": ",".join(map(str, r.isr)),
                                      "proposed": ",".join(map(str, r.pending_isr)),
                                      "timeout_ms": int(self.session_timeout_s * 1000)}})
        # no deadline: kazoo answers it (see above); a wake-up per session timeout, nothing polled meanwhile
        return await zk_await(result, math.inf, poll=max(1.0, self.session_timeout_s))

    async def _isr_shrink_loop(self) -> None:
        period = max(0.05, self.lag_max_s / 2)
        while not self.stopping:
            await asyncio.sleep(period)  # periodic check, as Kafka's isr-expiration task
            now = time.monotonic()
            for r in list(self.replicas.values()):
                if not r.is_leader:
                    continue
                lagging = [b for b in r.isr if b != self.node_id
                           and now - r.last_caught_up.get(b, r.leader_since) > self.lag_max_s]
                if lagging:
                    log.info("follower out of sync", extra={"kv": {"topic": r.tp[0], "partition": r.tp[1],
                                                                    "followers": ",".join(map(str, lagging))}})
                    self._change_isr(r, tuple(b for b in r.isr if b not in lagging))

    def check_follower(self, tp: tuple[str, int], replica_id: int) -> None:
        """Only a replica of ``tp`` (in the state or the assignment) may fetch it as a follower."""
        r = self.replicas.get(tp)
        a = self.assignments.get(tp[0])
        if (r is None or replica_id not in r.replicas) and (a is None or replica_id not in a.partitions.get(tp[1], ())):
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {replica_id} is no replica")

    def update_follower_fetch_state(self, tp: tuple[str, int], replica_id: int, fetch_offset: int) -> None:
        """After a follower's read (not a diverging or failed one): its LEO is ``fetch_offset``."""
        r = self.replicas.get(tp)
        if r is not None and r.is_leader:
            self.record_follower_fetch(r, replica_id, fetch_offset)
