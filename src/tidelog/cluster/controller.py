"""The controller: one broker at a time, elected by creating the ephemeral ``/controller`` znode.

It runs on its own thread with a queue of events (as Kafka's ``ControllerEventManager``): ZooKeeper watches only
enqueue, so decisions are taken one at a time from a consistent view read from ZooKeeper.

Every write of a partition state is conditional twice, in one ZooKeeper transaction (``multi``): on the state
znode's version (a newer decision by anyone, e.g. a leader's ISR change, wins) and on the version of
``/controller_epoch`` read when this controller was elected (a deposed controller cannot write at all).

Decisions implemented:

* new topic (a ``/brokers/topics/<t>`` without partition states): leader = first live replica of the
  assignment, ISR = the live replicas, leader epoch 0;
* broker gone: partitions it led elect the first live replica (assignment order) that is in the ISR; it leaves
  every ISR it was in (a sole ISR member stays, with leader -1, as Kafka does, so that it is the one that can
  come back). ``unclean.leader.election.enable=true`` allows a live replica outside the ISR;
* broker back: leaderless partitions whose ISR holds it elect it;
* controlled shutdown (a broker's ephemeral ``/admin/controlled_shutdown/<id>``, see
  :mod:`tidelog.cluster.broker`): every partition it leads elects the first other live ISR member in assignment
  order (Kafka's ``ControlledShutdownLeaderElectionStrategy``), and it leaves every ISR it is in (leader epoch
  bumped, so its in-flight follower fetches are fenced and cannot put it back). A partition whose ISR holds no
  other live broker keeps it as leader (the broker then gives up after its retries, as Kafka's does). A broker
  shutting down is never elected;
* preferred leader election (Kafka's ``/admin/preferred_replica_election``, written by
  ``tidelog cluster elect-leaders``): each listed partition elects its first assigned replica when it is alive,
  not shutting down and in the ISR; the znode is deleted when done;
* automatic leader rebalance (``auto.leader.rebalance.enable``): every ``leader.imbalance.check.interval.seconds``
  a broker whose share of preferred partitions it does not lead exceeds ``leader.imbalance.per.broker.percentage``
  gets them back, with the same conditions as the preferred election above (Kafka's
  ``checkAndTriggerAutoLeaderRebalance``);
* partitions added to a topic (a data change of ``/brokers/topics/<t>``): the new partitions get states as for
  a new topic.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import EventType

from tidelog.cluster import zkdata as zd

log = logging.getLogger("tidelog.cluster.controller")


class ControllerMovedError(Exception):
    pass


class Controller:
    def __init__(self, zk: KazooClient, broker_id: int, *, unclean_election: bool = False,
                 auto_rebalance: bool = False, rebalance_interval_s: float = 300.0, imbalance_pct: int = 10) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.unclean_election = unclean_election
        self.auto_rebalance = auto_rebalance
        self.rebalance_interval_s = rebalance_interval_s
        self.imbalance_pct = imbalance_pct
        self._stop_event = threading.Event()
        self.epoch = -1
        self.epoch_zk_version = -1
        self.active = False
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"controller-{broker_id}", daemon=True)
        self._stopped = False
        self._known_topics: set[str] = set()
        self._topic_watches: set[str] = set()
        self.shutting_down: set[int] = set()

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self.zk.DataWatch(zd.CONTROLLER, self._controller_changed)

    def stop(self) -> None:
        self._stopped = True
        self._stop_event.set()
        self._events.put(("stop", None))

    def _controller_changed(self, data: Any, stat: Any, event: Any = None) -> bool | None:
        if self._stopped:
            return False
        if data is None or (event is not None and event.type == EventType.DELETED):
            self._events.put(("elect", None))
        elif zd.decode_controller(data) != self.broker_id and self.active:
            self._events.put(("resign", None))
        return None

    def _run(self) -> None:
        while True:
            kind, arg = self._events.get()
            if kind == "stop":
                return
            try:
                if kind == "elect":
                    self._elect()
                elif kind == "resign":
                    self.active = False
                elif not self.active:
                    continue
                elif kind == "brokers":
                    self._on_brokers_changed()
                elif kind == "topics":
                    self._on_topics_changed()
                elif kind == "shutdown":
                    self._on_controlled_shutdown()
                elif kind == "preferred":
                    self._on_preferred_election()
                elif kind == "rebalance":
                    self._on_auto_rebalance()
            except ControllerMovedError:
                log.info("controller moved; resigning", extra={"kv": {"broker": self.broker_id}})
                self.active = False
            except Exception:
                log.exception("controller event failed", extra={"kv": {"event": kind}})
                if self.active and not self._stopped:
                    self._events.put((kind, arg))  # ZooKeeper hiccup: try again (the queue is the back-off)

    # -- election --------------------------------------------------------------------------------------------

    def _elect(self) -> None:
        if self._stopped:
            return
        try:
            self.zk.create(zd.CONTROLLER, zd.encode_controller(self.broker_id), ephemeral=True, makepath=True)
        except NodeExistsError:
            data, _ = self.zk.get(zd.CONTROLLER)
            if zd.decode_controller(data) != self.broker_id:
                return
        # bump /controller_epoch conditionally: two controllers can never share an epoch
        while True:
            try:
                data, stat = self.zk.get(zd.CONTROLLER_EPOCH)
                epoch = int(data or b"0") + 1
                stat = self.zk.set(zd.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            except NoNodeError:
                epoch = 1
                try:
                    self.zk.create(zd.CONTROLLER_EPOCH, b"1", makepath=True)
                except NodeExistsError:
                    continue
                stat = self.zk.exists(zd.CONTROLLER_EPOCH)
            except BadVersionError:
                continue
            break
        self.epoch, self.epoch_zk_version = epoch, stat.version
        self.active = True
        log.info("became controller", extra={"kv": {"broker": self.broker_id, "controller_epoch": epoch}})
        for p in zd.PERSISTENT_PATHS:
            self.zk.ensure_path(p)
        self.zk.ChildrenWatch(zd.BROKER_IDS, self._watch(("brokers", None)), send_event=False)
        self.zk.ChildrenWatch(zd.BROKER_TOPICS, self._watch(("topics", None)), send_event=False)
        self._topic_watches = set()
        self._on_topics_changed()
        self._on_brokers_changed()
        self.zk.ChildrenWatch(zd.CONTROLLED_SHUTDOWN, self._watch(("shutdown", None)), send_event=False)
        self.zk.DataWatch(zd.PREFERRED_REPLICA_ELECTION, self._watch(("preferred", None)))
        if self.auto_rebalance:
            threading.Thread(target=self._rebalance_timer, args=(epoch,), name=f"leader-rebalance-{self.broker_id}",
                             daemon=True).start()

    def _rebalance_timer(self, epoch: int) -> None:
        """Kafka's scheduled ``auto-leader-rebalance-task``: a periodic check for this controller term."""
        while not self._stop_event.wait(self.rebalance_interval_s):
            if not self.active or self.epoch != epoch:
                return
            self._events.put(("rebalance", None))

    def _watch(self, event: tuple[str, Any]):
        epoch = self.epoch

        def fire(*_args: Any) -> bool | None:
            if self._stopped or not self.active or self.epoch != epoch:
                return False  # a later term set its own watch
            self._events.put(event)
            return None

        return fire

    # -- reading ---------------------------------------------------------------------------------------------

    def live_brokers(self) -> set[int]:
        return {int(c) for c in self.zk.get_children(zd.BROKER_IDS)}

    def _read_shutting_down(self, live: set[int]) -> set[int]:
        try:
            self.shutting_down = {int(c) for c in self.zk.get_children(zd.CONTROLLED_SHUTDOWN)} & live
        except NoNodeError:
            self.shutting_down = set()
        return self.shutting_down

    def _assignment(self, topic: str) -> zd.TopicAssignment | None:
        try:
            data, _ = self.zk.get(zd.topic_path(topic))
        except NoNodeError:
            return None
        return zd.decode_topic(data)

    def _state(self, topic: str, p: int) -> zd.LeaderIsr | None:
        try:
            data, stat = self.zk.get(zd.state_path(topic, p))
        except NoNodeError:
            return None
        return zd.decode_state(data, stat.version)

    # -- writing (conditional) -------------------------------------------------------------------------------

    def _commit(self, ops) -> None:
        t = self.zk.transaction()
        t.check(zd.CONTROLLER_EPOCH, self.epoch_zk_version)
        ops(t)
        results = t.commit()
        if results and isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError()  # the epoch check failed: another controller was elected since
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r

    def _create_state(self, topic: str, p: int, state: zd.LeaderIsr) -> None:
        def ops(t):
            if self.zk.exists(zd.partition_path(topic, p)) is None:
                if self.zk.exists(zd.partitions_path(topic)) is None:
                    t.create(zd.partitions_path(topic), b"")
                t.create(zd.partition_path(topic, p), b"")
            t.create(zd.state_path(topic, p), zd.encode_state(state))

        try:
            self._commit(ops)
        except NodeExistsError:
            pass  # someone (a previous controller) created it first: handled by the next pass

    def _update_state(self, topic: str, p: int, old: zd.LeaderIsr, new: zd.LeaderIsr) -> bool:
        try:
            self._commit(lambda t: t.set_data(zd.state_path(topic, p), zd.encode_state(new), version=old.zk_version))
        except BadVersionError:
            return False  # changed under us (a leader's ISR update): re-read and decide again
        log.info(
            "partition state changed",
            extra={"kv": {"topic": topic, "partition": p, "leader": new.leader, "leader_epoch": new.leader_epoch,
                          "isr": ",".join(map(str, new.isr))}},
        )
        return True

    # -- decisions -------------------------------------------------------------------------------------------

    def _on_topics_changed(self) -> None:
        topics = set(self.zk.get_children(zd.BROKER_TOPICS))
        live = self.live_brokers()
        shutting = self._read_shutting_down(live)
        for topic in sorted(topics):
            if topic not in self._topic_watches:  # added partitions arrive as a data change of the topic znode
                self._topic_watches.add(topic)
                self.zk.DataWatch(zd.topic_path(topic), self._watch(("topics", None)))
            a = self._assignment(topic)
            if a is None:
                continue
            for p, replicas in sorted(a.partitions.items()):
                if self._state(topic, p) is not None:
                    continue
                alive = [r for r in replicas if r in live]
                electable = [r for r in alive if r not in shutting]
                leader = electable[0] if electable else alive[0] if alive else zd.NO_LEADER
                isr = tuple(alive) if alive else tuple(replicas[:1])
                self._create_state(topic, p, zd.LeaderIsr(leader, 0, isr, self.epoch))
                log.info("new partition", extra={"kv": {"topic": topic, "partition": p, "leader": leader}})
        self._known_topics = topics

    def _on_brokers_changed(self) -> None:
        live = self.live_brokers()
        self._read_shutting_down(live)
        log.info("live brokers", extra={"kv": {"brokers": ",".join(map(str, sorted(live)))}})
        for topic in sorted(self.zk.get_children(zd.BROKER_TOPICS)):
            a = self._assignment(topic)
            if a is None:
                continue
            for p, replicas in sorted(a.partitions.items()):
                for _attempt in range(10):
                    s = self._state(topic, p)
                    if s is None:
                        break
                    new = self._decide(s, replicas, live)
                    if new is None or self._update_state(topic, p, s, new):
                        break

    def _decide(self, s: zd.LeaderIsr, replicas: list[int], live: set[int]) -> zd.LeaderIsr | None:
        """The new state of one partition given the live brokers, or None when nothing changes."""
        leader, isr = s.leader, s.isr
        live_isr = tuple(r for r in isr if r in live)
        if leader != zd.NO_LEADER and leader in live:
            if live_isr == isr:
                return None
            # a follower died: it leaves the ISR (the leader stays)
            return zd.LeaderIsr(leader, s.leader_epoch + 1, live_isr, self.epoch)
        # leaderless or the leader died: elect from the ISR in assignment order
        candidates = [r for r in replicas if r in live and r in isr and r not in self.shutting_down]
        if not candidates and self.unclean_election:
            candidates = [r for r in replicas if r in live and r not in self.shutting_down]
            if candidates:
                log.warning("unclean leader election", extra={"kv": {"leader": candidates[0]}})
                return zd.LeaderIsr(candidates[0], s.leader_epoch + 1, (candidates[0],), self.epoch)
        if candidates:
            return zd.LeaderIsr(candidates[0], s.leader_epoch + 1, live_isr, self.epoch)
        if leader == zd.NO_LEADER:
            return None
        # nobody eligible: leaderless; a sole ISR member is kept (it is the replica that may come back)
        kept = live_isr or ((leader,) if leader in isr else isr[:1])
        return zd.LeaderIsr(zd.NO_LEADER, s.leader_epoch + 1, kept, self.epoch)

    def _for_each_partition(self, decide, only: set[tuple[str, int]] | None = None) -> None:
        """Apply ``decide(state, replicas)`` to every partition (or those in ``only``), re-reading and deciding
        again when a conditional write loses to a concurrent change."""
        for topic in sorted(self.zk.get_children(zd.BROKER_TOPICS)):
            a = self._assignment(topic)
            if a is None:
                continue
            for p, replicas in sorted(a.partitions.items()):
                if only is not None and (topic, p) not in only:
                    continue
                for _attempt in range(10):
                    s = self._state(topic, p)
                    if s is None:
                        break
                    new = decide(s, replicas)
                    if new is None or self._update_state(topic, p, s, new):
                        break

    def _on_controlled_shutdown(self) -> None:
        live = self.live_brokers()
        shutting = self._read_shutting_down(live)
        if not shutting:
            return
        log.info("controlled shutdown requested", extra={"kv": {"brokers": ",".join(map(str, sorted(shutting)))}})
        self._for_each_partition(lambda s, replicas: self.decide_controlled_shutdown(s, replicas, live, shutting))

    def decide_controlled_shutdown(self, s: zd.LeaderIsr, replicas: list[int], live: set[int],
                                   shutting: set[int]) -> zd.LeaderIsr | None:
        """Move the leadership away from a broker shutting down and take it out of the ISR."""
        rest = tuple(r for r in s.isr if r not in shutting)
        if s.leader in shutting:
            candidates = [r for r in replicas if r in live and r not in shutting and r in s.isr]
            if not candidates:
                return None  # no other in-sync replica: it stays leader until it goes
            return zd.LeaderIsr(candidates[0], s.leader_epoch + 1, rest, self.epoch)
        if s.leader != zd.NO_LEADER and rest != s.isr and rest:
            return zd.LeaderIsr(s.leader, s.leader_epoch + 1, rest, self.epoch)
        return None

    def _on_preferred_election(self) -> None:
        try:
            data, stat = self.zk.get(zd.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return
        wanted = set(zd.decode_preferred_election(data))
        live = self.live_brokers()
        shutting = self._read_shutting_down(live)
        log.info("preferred replica election", extra={"kv": {"partitions": len(wanted)}})
        self._for_each_partition(lambda s, replicas: self.decide_preferred(s, replicas, live, shutting), wanted)
        try:
            self._commit(lambda t: t.delete(zd.PREFERRED_REPLICA_ELECTION, version=stat.version))
        except (NoNodeError, BadVersionError):
            pass  # replaced by a new request meanwhile: its watch event runs next

    def decide_preferred(self, s: zd.LeaderIsr, replicas: list[int], live: set[int],
                         shutting: set[int]) -> zd.LeaderIsr | None:
        """The preferred replica (the first assigned) becomes leader when it is alive and in sync."""
        if not replicas:
            return None
        preferred = replicas[0]
        if s.leader == preferred or preferred not in live or preferred in shutting or preferred not in s.isr:
            return None
        return zd.LeaderIsr(preferred, s.leader_epoch + 1, s.isr, self.epoch)

    def _on_auto_rebalance(self) -> None:
        live = self.live_brokers()
        shutting = self._read_shutting_down(live)
        preferred_of: dict[int, list[tuple[str, int]]] = {}
        not_led: dict[int, set[tuple[str, int]]] = {}
        for topic in sorted(self.zk.get_children(zd.BROKER_TOPICS)):
            a = self._assignment(topic)
            if a is None:
                continue
            for p, replicas in a.partitions.items():
                s = self._state(topic, p)
                if not replicas or s is None:
                    continue
                preferred_of.setdefault(replicas[0], []).append((topic, p))
                if s.leader != replicas[0]:
                    not_led.setdefault(replicas[0], set()).add((topic, p))
        wanted: set[tuple[str, int]] = set()
        for b, tps in preferred_of.items():
            imbalance = len(not_led.get(b, ())) / len(tps)
            if b in live and b not in shutting and imbalance * 100 > self.imbalance_pct:
                wanted |= not_led[b]
        if wanted:
            log.info("leader imbalance: electing preferred leaders", extra={"kv": {"partitions": len(wanted)}})
            self._for_each_partition(lambda s, replicas: self.decide_preferred(s, replicas, live, shutting), wanted)
