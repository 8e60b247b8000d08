"""The controller's partition reassignment (KIP-455, Kafka's ZooKeeper-mode ``onPartitionReassignment``): started by
AlterPartitionReassignments (handed to the controller's thread by the broker's handler) or by Kafka's
``/admin/reassign_partitions`` znode, driven by the ISR changes of each reassigning partition (see the
``controller`` module docstring for the protocol). Runs on the controller's thread; a class the
:class:`~tidelog.cluster.controller.Controller` is made of, over the state it declares here (issue 26 item 2:
``controller.py`` under 800 lines)."""

from __future__ import annotations

import contextlib
import logging
import queue
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from tidelog.cluster import zkdata as zd
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.cluster.controller")


class ControllerMovedError(Exception):
    """A conditional write found another controller epoch: this broker is no longer the controller."""


class Reassignments:
    """Partition reassignment, as a part of the controller (its attributes and the methods declared below are the
    controller's)."""

    zk: KazooClient
    epoch: int
    active: bool
    _stopped: bool
    _events: queue.Queue[tuple[str, Any]]
    _reassign_watches: set[tuple[str, int]]

    if TYPE_CHECKING:  # defined by Controller
        def live_brokers(self) -> set[int]: ...

        def _read_shutting_down(self, live: set[int]) -> set[int]: ...

        def _assignment(self, topic: str) -> zd.TopicAssignment | None: ...

        def _commit(self, ops: Any) -> None: ...

        def _decide_and_write(self, topic: str, p: int, decide: Any) -> zd.LeaderIsr | None: ...

    @staticmethod
    def validate_replicas(a: zd.TopicAssignment, p: int, target: list[int], live: set[int]) -> tuple[ErrorCode, str] | None:
        """Kafka's ``KafkaController.validateReplicas``: (error name, message) or None."""
        if not target:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Duplicate replica ids in partition reassignment replica list: {target}")
        if any(b < 0 for b in target):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {target}"
        origin = a.origin(p)
        adding = [b for b in target if b not in origin]
        if not set(adding) <= live:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Replica assignment has brokers that are not alive. Replica list: {adding}, "
                    f"live broker list: {sorted(live)}")
        return None

    def _apply_reassignments(self, wanted: dict[tuple[str, int], list[int] | None],
                             allow_rf_change: bool = True) -> dict[tuple[str, int], tuple[ErrorCode, str] | None]:
        """Start (or cancel, target None) reassignments: per topic one conditional write of its znode.
        Returns (error name, message) or None per partition."""
        live = self.live_brokers()
        try:
            deleting = set(self.zk.get_children(zd.DELETE_TOPICS))
        except NoNodeError:
            deleting = set()
        results: dict[tuple[str, int], tuple[ErrorCode, str] | None] = {}
        by_topic: dict[str, list[tuple[int, list[int] | None]]] = {}
        for (t, p), target in wanted.items():
            by_topic.setdefault(t, []).append((p, target))
        for topic, items in sorted(by_topic.items()):
            for _attempt in range(10):
                res: dict[tuple[str, int], tuple[ErrorCode, str] | None] = {}
                try:
                    data, stat = self.zk.get(zd.topic_path(topic))
                except NoNodeError:
                    data, stat = None, None
                if data is None or topic in deleting:
                    res = {(topic, p): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                           for p, _ in items}
                    break
                a, new = zd.decode_topic(data), zd.decode_topic(data)
                for p, target in items:
                    if p not in a.partitions:
                        res[(topic, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                    elif target is None:
                        if not a.reassigning(p):
                            res[(topic, p)] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                               f"No reassignment in progress for {topic}-{p}.")
                        else:
                            new.reassign_to(p, a.origin(p))
                            res[(topic, p)] = None
                    else:
                        err = self.validate_replicas(a, p, target, live)
                        if err is None and not allow_rf_change and len(target) != len(a.origin(p)):
                            err = (ErrorCode.INVALID_REPLICATION_FACTOR, f"The replication factor is changed from "
                                   f"{len(a.origin(p))} to {len(target)}")
                        if err is None:
                            new.reassign_to(p, list(target))
                        res[(topic, p)] = err
                if new == a:
                    break
                try:
                    path, value = zd.topic_path(topic), zd.encode_topic(new)
                    self._commit(lambda t, path=path, value=value, v=stat.version: t.set_data(path, value, version=v))
                except BadVersionError:
                    continue  # changed meanwhile: decide again on the new assignment
                log.info("reassignment started", extra={"kv": {"topic": topic, "replicas": str(new.partitions),
                                                               "adding": str(new.adding),
                                                               "removing": str(new.removing)}})
                break
            else:
                res = {(topic, p): (ErrorCode.REQUEST_TIMED_OUT, f"the assignment of '{topic}' kept changing")
                       for p, _ in items}
            results.update(res)
        return results

    def submit_alter_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], allow_rf_change: bool,
                                   reply) -> None:
        """From the AlterPartitionReassignments handler (any thread): ``reply`` gets {(t, p): (error name,
        message) or None} on this controller's thread, or None when this broker is not (or no longer) the
        controller."""
        self._events.put(("alter_reassign", (wanted, allow_rf_change, reply)))

    def _on_alter_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], allow_rf_change: bool,
                                reply) -> None:
        """AlterPartitionReassignments (from this broker's handler): the latest request wins over the znode's."""
        try:
            results = self._apply_reassignments(wanted, allow_rf_change)
        except ControllerMovedError:
            raise
        except Exception as exc:
            log.exception("AlterPartitionReassignments failed")
            reply({tp: (ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc)) for tp in wanted})
            return
        self._remove_from_zk_reassignment({tp for tp, r in results.items() if r is None})
        reply(results)
        for topic in sorted({t for (t, _p), r in results.items() if r is None}):
            self._events.put(("reassign", topic))

    def _on_zk_reassignment(self) -> None:
        """Kafka's ``/admin/reassign_partitions`` (kafka-reassign-partitions.sh --zookeeper)."""
        try:
            data, stat = self.zk.get(zd.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            wanted = zd.decode_reassignment(data)
        except ValueError as exc:
            log.warning("ignoring malformed reassignment request", extra={"kv": {"error": str(exc)}})
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._commit(lambda t: t.delete(zd.REASSIGN_PARTITIONS, version=stat.version))
            return
        results = self._apply_reassignments(dict(wanted.items()))
        failed = {tp: r for tp, r in results.items() if r is not None}
        if failed:
            log.warning("failed reassignment through ZooKeeper", extra={"kv": {"errors": str(failed)}})
            self._remove_from_zk_reassignment(set(failed))
        for topic in sorted({t for t, _p in wanted}):
            self._on_reassignments(topic)

    def _rewrite_zk_reassignment(self, keep) -> None:
        """Keep the entries of ``/admin/reassign_partitions`` for which ``keep((t, p), replicas)`` holds; delete
        the znode when none is left (conditional writes; a concurrent change brings its own watch event)."""
        for _attempt in range(10):
            try:
                data, stat = self.zk.get(zd.REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                entries = zd.decode_reassignment(data)
            except ValueError:
                return
            kept = {tp: r for tp, r in entries.items() if keep(tp, r)}
            if kept == entries:
                return
            try:
                if kept:
                    self._commit(lambda t, v=stat.version, kept=kept: t.set_data(
                        zd.REASSIGN_PARTITIONS, zd.encode_reassignment(kept), version=v))
                else:
                    self._commit(lambda t, v=stat.version: t.delete(zd.REASSIGN_PARTITIONS, version=v))
                return
            except (BadVersionError, NoNodeError):
                continue

    def _remove_from_zk_reassignment(self, tps: set[tuple[str, int]]) -> None:
        if tps:
            self._rewrite_zk_reassignment(lambda tp, _r: tp not in tps)

    def _prune_zk_reassignment(self) -> None:
        """Drop the znode's entries that are done: the partition (or topic) is gone, or it is not being
        reassigned and its replicas are the requested ones."""
        cache: dict[str, zd.TopicAssignment | None] = {}

        def keep(tp: tuple[str, int], replicas: list[int]) -> bool:
            t, p = tp
            if t not in cache:
                cache[t] = self._assignment(t)
            a = cache[t]
            if a is None or p not in a.partitions:
                return False
            return a.reassigning(p) or a.partitions[p] != replicas

        self._rewrite_zk_reassignment(keep)

    def _watch_reassigning(self, topic: str, p: int) -> None:
        """Kafka's ``PartitionReassignmentIsrChangeHandler``: an ISR change of a reassigning partition re-checks
        it. The watch ends itself once the partition is no longer being reassigned."""
        tp = (topic, p)
        if tp in self._reassign_watches:
            return
        self._reassign_watches.add(tp)
        epoch = self.epoch

        def fire(*_args: Any) -> bool | None:
            if self._stopped or not self.active or self.epoch != epoch or tp not in self._reassign_watches:
                return False
            self._events.put(("reassign", topic))
            return None

        self.zk.DataWatch(zd.state_path(topic, p), fire)

    def decide_unneeded(self, s: zd.LeaderIsr, replicas: list[int], target: list[int], live: set[int],
                        shutting: set[int]) -> zd.LeaderIsr | None:
        """Replicas no longer assigned (a cancelled or replaced reassignment) leave the ISR and the leadership."""
        rs = set(replicas)
        if (s.leader == zd.NO_LEADER or s.leader in rs) and all(b in rs for b in s.isr):
            return None
        isr = tuple(b for b in s.isr if b in rs)
        leader = s.leader
        if leader not in rs:
            candidates = [b for b in [*target, *replicas] if b in live and b in isr and b not in shutting]
            leader = candidates[0] if candidates else zd.NO_LEADER
        return zd.LeaderIsr(leader, s.leader_epoch + 1, isr, self.epoch)

    def decide_reassignment_done(self, s: zd.LeaderIsr, target: list[int], live: set[int],
                                 shutting: set[int]) -> zd.LeaderIsr | None:
        """Every target replica is in the ISR: the leader must be a live target replica (Kafka's
        ``ReassignPartitionLeaderElectionStrategy``: the first live in-sync one), the ISR shrinks to the target."""
        if not set(target) <= set(s.isr):
            return None
        isr = tuple(b for b in s.isr if b in target)
        leader = s.leader
        if leader not in target or leader not in live:
            candidates = [b for b in target if b in live and b in isr and b not in shutting]
            if not candidates:
                return None
            leader = candidates[0]
        if leader == s.leader and isr == s.isr:
            return None
        return zd.LeaderIsr(leader, s.leader_epoch + 1, isr, self.epoch)

    def _on_reassignments(self, only: str | None) -> None:
        """Drive every reassignment of ``only`` (or of all topics) as far as the ISRs allow."""
        live = self.live_brokers()
        shutting = self._read_shutting_down(live)
        topics = [only] if only is not None else sorted(self.zk.get_children(zd.BROKER_TOPICS))
        completed: list[tuple[str, int]] = []
        for topic in topics:
            for _attempt in range(10):
                try:
                    data, stat = self.zk.get(zd.topic_path(topic))
                except NoNodeError:
                    break
                a = zd.decode_topic(data)
                done: list[int] = []
                for p, replicas in sorted(a.partitions.items()):
                    target = a.target(p)
                    self._decide_and_write(topic, p, lambda s, r=replicas, t=target:
                                           self.decide_unneeded(s, r, t, live, shutting))
                    if not a.reassigning(p):
                        self._reassign_watches.discard((topic, p))
                        continue
                    self._watch_reassigning(topic, p)
                    s = self._decide_and_write(topic, p, lambda s, t=target:
                                               self.decide_reassignment_done(s, t, live, shutting))
                    if s is not None and set(target) <= set(s.isr) and s.leader in target:
                        done.append(p)
                if not done:
                    break
                for p in done:
                    a.complete(p)
                try:
                    path, value = zd.topic_path(topic), zd.encode_topic(a)
                    self._commit(lambda t, path=path, value=value, v=stat.version: t.set_data(path, value, version=v))
                except BadVersionError:
                    continue  # changed meanwhile (a new request): decide again
                for p in done:
                    self._reassign_watches.discard((topic, p))
                    completed.append((topic, p))
                    log.info("reassignment completed", extra={"kv": {"topic": topic, "partition": p,
                                                                     "replicas": ",".join(map(str, a.partitions[p]))}})
                break
        self._prune_zk_reassignment()
        if completed:
            self._events.put(("delete", None))  # a topic waiting for deletion may be eligible now
