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
  come back). ``unclean.leader.election.enable=true`` (the topic's config in ``/config/topics/<t>``, else the
  broker's, as Kafka's ``LogConfig.fromProps(brokerConfig, topicOverrides)``; default false) allows a live replica
  outside the ISR when no ISR member is alive: the partition is then led by it with ISR = [it], counted in
  ``tidelog_controller_unclean_leader_elections_total`` (Kafka's ``UncleanLeaderElectionsPerSec``) and logged as a
  warning. Setting it to true on a topic later (a config change notification, Kafka's
  ``TopicUncleanLeaderElectionEnable`` event) elects the topic's offline partitions at once;
* broker back: leaderless partitions whose ISR holds it elect it;
* controlled shutdown (a broker's ephemeral ``/admin/controlled_shutdown/<id>``, see
  :mod:`tidelog.cluster.replica_manager`): every partition it leads elects the first other live ISR member in assignment
  order (Kafka's ``ControlledShutdownLeaderElectionStrategy``), and it leaves every ISR it is in (leader epoch
  bumped, so its in-flight follower fetches are fenced and cannot put it back). A partition whose ISR holds no
  other live broker keeps it as leader (the broker then gives up after its retries, as Kafka's does). A broker
  shutting down is never elected;
* log directory failure (Kafka's ``/log_dir_event_notification/log_dir_event_<seq>``, written by a broker whose
  log directory failed, with its failed replicas in the ephemeral ``/tidelog/offline_replicas/<id>``): each
  notification is deleted and every partition with a replica there is decided again as if that broker were dead
  for it (Kafka's ``onReplicasBecomeOffline``): a leader there is replaced by the first other live ISR member, a
  follower there leaves the ISR, a sole ISR member stays (leaderless) so that it is the one that can come back.
  The offline replicas are also dead in every later broker-change decision, until the broker restarts (a new
  session drops the ephemeral znode);
* preferred leader election (Kafka's ``/admin/preferred_replica_election``, written by
  ``tidelog cluster elect-leaders``): each listed partition elects its first assigned replica when it is alive,
  not shutting down and in the ISR; the znode is deleted when done. ElectLeaders requests (preferred or
  unclean, kafka-leader-election.sh) are decided on this thread too (:mod:`tidelog.cluster.elections`);
* automatic leader rebalance (``auto.leader.rebalance.enable``): every ``leader.imbalance.check.interval.seconds``
  a broker whose share of preferred partitions it does not lead exceeds ``leader.imbalance.per.broker.percentage``
  gets them back, with the same conditions as the preferred election above (Kafka's
  ``checkAndTriggerAutoLeaderRebalance``);
* partitions added to a topic (a data change of ``/brokers/topics/<t>``): the new partitions get states as for
  a new topic;
* partition reassignment (KIP-455, Kafka's ZK-mode ``onPartitionReassignment``), started by
  AlterPartitionReassignments (handed to this thread by the broker's handler) or by Kafka's
  ``/admin/reassign_partitions`` znode: the topic znode gets RS = target + origin, ``adding_replicas`` and
  ``removing_replicas`` (conditional on its version); the adding brokers create the replica and follow, the
  leader adds them to the ISR when caught up. A watch on the state znode of each reassigning partition re-checks:
  once every target replica is in the ISR, leadership moves into the target if needed (first live in-sync
  target replica), the ISR shrinks to the target (one state write, epoch bumped), then RS = target and AR = RR
  = [] are written, and the removed brokers delete their replica when their assignment watch sees it gone.
  A null target cancels: RS goes back to the origin; replicas outside RS leave the ISR (and the leadership, if
  they held it). The same pass runs after a failover, so a new controller resumes what its predecessor left;
* topic deletion (Kafka's ``/admin/delete_topics/<t>``): when none of its partitions is being reassigned, the
  topic's state, partition, assignment and config znodes and the request are deleted in one transaction; each
  broker deletes its replicas when its assignment watch sees the topic znode gone.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType

from tidelog.cluster import zkdata as zd
from tidelog.cluster.elections import elect
from tidelog.cluster.reassignment import ControllerMovedError, Reassignments
from tidelog.errors import ErrorCode

__all__ = ["Controller", "ControllerMovedError"]

log = logging.getLogger("tidelog.cluster.controller")


_REPLIED = ("alter_reassign", "elect_leaders")  # events from a request handler waiting for the controller's answer
_ZK_RETRY_PAUSE_S = 0.2  # between retries of an event that met a ZooKeeper connection loss


class Controller(Reassignments):
    def __init__(self, zk: KazooClient, broker_id: int, *, unclean_election: bool = False,
                 auto_rebalance: bool = False, rebalance_interval_s: float = 300.0, imbalance_pct: int = 10,
                 metrics: Any = None) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.unclean_election = unclean_election  # the broker's default; a topic's config overrides it
        self.metrics = metrics  # the broker's (unclean_leader_elections), None in unit tests
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
        self._reassign_watches: set[tuple[str, int]] = set()

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
                    if kind in _REPLIED:
                        arg[-1](None)  # NOT_CONTROLLER
                    continue
                elif kind == "brokers":
                    self._on_brokers_changed()
                elif kind == "unclean":
                    self._on_brokers_changed(only=arg)
                elif kind == "topics":
                    self._on_topics_changed()
                elif kind == "shutdown":
                    self._on_controlled_shutdown()
                elif kind == "preferred":
                    self._on_preferred_election()
                elif kind == "rebalance":
                    self._on_auto_rebalance()
                elif kind == "reassign":
                    self._on_reassignments(arg)
                elif kind == "alter_reassign":
                    self._on_alter_reassignments(*arg)
                elif kind == "elect_leaders":
                    self._on_elect_leaders(*arg)
                elif kind == "zk_reassign":
                    self._on_zk_reassignment()
                elif kind == "delete":
                    self._on_delete_topics()
                elif kind == "log_dir_event":
                    self._on_log_dir_event()
            except ControllerMovedError:
                log.info("controller moved; resigning", extra={"kv": {"broker": self.broker_id}})
                self.active = False
                if kind in _REPLIED:
                    arg[-1](None)
            except (ConnectionLoss, SessionExpiredError) as e:
                # ZooKeeper unreachable (an expected fault, not a bug: no traceback): the event is decided again once
                # it answers; a pause so that an outage is not a busy loop (kazoo fails queued calls at once while
                # it reconnects)
                log.warning("controller event interrupted by a ZooKeeper connection loss; retrying",
                            extra={"kv": {"event": kind, "error": type(e).__name__}})
                if self.active and not self._stopped and not self._stop_event.wait(_ZK_RETRY_PAUSE_S):
                    self._events.put((kind, arg))
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
        self._reassign_watches = set()
        self._on_reassignments(None)  # resume what a previous controller left half-way
        self.zk.DataWatch(zd.REASSIGN_PARTITIONS, self._watch(("zk_reassign", None)))
        self.zk.ChildrenWatch(zd.DELETE_TOPICS, self._watch(("delete", None)), send_event=False)
        self.zk.ChildrenWatch(zd.LOG_DIR_EVENT_NOTIFICATION, self._watch(("log_dir_event", None)),
                              send_event=False)
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

    def topic_unclean_enabled(self, topic: str) -> None:
        """From the config change listener (any thread): ``topic``'s ``unclean.leader.election.enable`` is now
        true. As Kafka's ``TopicUncleanLeaderElectionEnable`` event: its offline partitions are decided again
        (ignored when this broker is not the controller)."""
        self._events.put(("unclean", topic))

    # -- reading ---------------------------------------------------------------------------------------------

    def unclean_allowed(self, topic: str | None) -> bool:
        """``unclean.leader.election.enable`` of ``topic``: its override in ``/config/topics/<t>``, else the
        broker's default. Read from ZooKeeper at decision time (only when an unclean election is the only way
        left), so a change is seen by the next decision without any cache to keep fresh."""
        if topic is None or self.zk is None:
            return self.unclean_election
        try:
            data, _ = self.zk.get(zd.topic_config_path(topic))
            value = zd.decode_topic_config(data).get("unclean.leader.election.enable")
        except NoNodeError:
            value = None
        except ValueError:
            log.error("unreadable topic config in ZooKeeper", extra={"kv": {"topic": topic}})
            value = None
        if value is None:
            return self.unclean_election
        return str(value).strip().lower() == "true"

    def live_brokers(self) -> set[int]:
        return {int(c) for c in self.zk.get_children(zd.BROKER_IDS)}

    def _read_shutting_down(self, live: set[int]) -> set[int]:
        try:
            self.shutting_down = {int(c) for c in self.zk.get_children(zd.CONTROLLED_SHUTDOWN)} & live
        except NoNodeError:
            self.shutting_down = set()
        return self.shutting_down

    def _read_offline_replicas(self, live: set[int]) -> dict[tuple[str, int], set[int]]:
        """partition -> live brokers whose replica of it is in a failed log directory."""
        out: dict[tuple[str, int], set[int]] = {}
        try:
            children = self.zk.get_children(zd.OFFLINE_REPLICAS)
        except NoNodeError:
            return out
        for c in children:
            try:
                b = int(c)
                data, _ = self.zk.get(zd.offline_replicas_path(b))
            except (ValueError, NoNodeError):
                continue
            if b in live:
                for tp in zd.decode_offline_replicas(data):
                    out.setdefault(tp, set()).add(b)
        return out

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
        if new.leader != zd.NO_LEADER and new.leader != old.leader and new.leader not in old.isr:
            # only an unclean election picks a leader outside the ISR: what the ISR had beyond its log is lost
            if self.metrics is not None:
                self.metrics.unclean_leader_elections.inc()
            log.warning(
                "unclean leader election: an out-of-sync replica leads; records it lacks are lost",
                extra={"kv": {"topic": topic, "partition": p, "leader": new.leader, "leader_epoch": new.leader_epoch,
                              "previous_leader": old.leader, "previous_isr": ",".join(map(str, old.isr))}},
            )
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
            if a.adding or a.removing:
                self._events.put(("reassign", topic))  # a reassignment written elsewhere: drive it
        self._known_topics = topics

    def _on_brokers_changed(self, only: str | None = None) -> None:
        """Decide every partition (or those of the topic ``only``) again with the live brokers."""
        live = self.live_brokers()
        self._read_shutting_down(live)
        if only is None:
            log.info("live brokers", extra={"kv": {"brokers": ",".join(map(str, sorted(live)))}})
        else:
            log.info("unclean leader election enabled: deciding the topic's partitions again",
                     extra={"kv": {"topic": only}})
        # A broker registered again since a partition state was written (kill -9 and a restart right after its old
        # session expired: this watch may even see an unchanged list) holds that leadership or ISR place from its
        # previous process, whose log it may not have kept. As Kafka's controller does with bounced brokers
        # (broker epoch = the registration's czxid), decide first as if it were dead, then with it alive.
        offline = self._read_offline_replicas(live)
        registered: dict[int, int] = {}
        for b in live:
            stat = self.zk.exists(zd.broker_path(b))
            if stat is not None:
                registered[b] = stat.czxid
        for topic in sorted(self.zk.get_children(zd.BROKER_TOPICS)) if only is None else [only]:
            a = self._assignment(topic)
            if a is None:
                continue
            for p, replicas in sorted(a.partitions.items()):
                live_here = live - offline.get((topic, p), set())  # a replica in a failed log dir is dead here
                for _attempt in range(10):
                    try:
                        data, stat = self.zk.get(zd.state_path(topic, p))
                    except NoNodeError:
                        break
                    s = zd.decode_state(data, stat.version)
                    bounced = {b for b in (s.leader, *s.isr) if registered.get(b, -1) > stat.mzxid}
                    new = self._decide(s, replicas, live_here - bounced, topic) if bounced else None
                    if new is None:
                        bounced, new = set(), self._decide(s, replicas, live_here, topic)
                    if new is None or (self._update_state(topic, p, s, new) and not bounced):
                        break

    def _on_log_dir_event(self) -> None:
        """Kafka's ``LogDirEventNotification``: delete the notifications, then decide every partition with a
        replica in a failed log directory again, that replica counted as dead."""
        try:
            children = sorted(self.zk.get_children(zd.LOG_DIR_EVENT_NOTIFICATION))
        except NoNodeError:
            return
        brokers: set[int] = set()
        for c in children:
            if not c.startswith(zd.LOG_DIR_EVENT_PREFIX):
                continue
            path = f"{zd.LOG_DIR_EVENT_NOTIFICATION}/{c}"
            try:
                data, _ = self.zk.get(path)
                brokers.add(zd.decode_log_dir_event(data))
                self.zk.delete(path)
            except NoNodeError:
                continue
        if not brokers:
            return
        live = self.live_brokers()
        offline = self._read_offline_replicas(live)
        log.warning("log directory failure", extra={"kv": {
            "brokers": ",".join(map(str, sorted(brokers))), "offline_replicas": sum(map(len, offline.values()))}})
        for (topic, p), dead in sorted(offline.items()):
            a = self._assignment(topic)
            if a is None or p not in a.partitions:
                continue
            replicas = a.partitions[p]
            self._decide_and_write(topic, p, lambda s, replicas=replicas, dead=dead, topic=topic:
                                   self._decide(s, replicas, live - dead, topic))

    def _decide(self, s: zd.LeaderIsr, replicas: list[int], live: set[int],
                topic: str | None = None) -> zd.LeaderIsr | None:
        """The new state of one partition (of ``topic``, whose config may allow an unclean election; None: the
        broker's default decides) given the live brokers, or None when nothing changes."""
        leader, isr = s.leader, s.isr
        live_isr = tuple(r for r in isr if r in live)
        if leader != zd.NO_LEADER and leader in live:
            if live_isr == isr:
                return None
            # a follower died: it leaves the ISR (the leader stays)
            return zd.LeaderIsr(leader, s.leader_epoch + 1, live_isr, self.epoch)
        # leaderless or the leader died: elect from the ISR in assignment order
        candidates = [r for r in replicas if r in live and r in isr and r not in self.shutting_down]
        if not candidates:
            unclean = [r for r in replicas if r in live and r not in self.shutting_down]
            if unclean and self.unclean_allowed(topic):  # Kafka's offlinePartitionLeaderElection
                return zd.LeaderIsr(unclean[0], s.leader_epoch + 1, (unclean[0],), self.epoch)
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

    # -- partition reassignment (KIP-455) --------------------------------------------------------------------

    def _decide_and_write(self, topic: str, p: int, decide) -> zd.LeaderIsr | None:
        """``decide(state)`` -> new state or None, written conditionally; decided again if it lost a race.
        Returns the state as it stands afterwards."""
        for _attempt in range(10):
            s = self._state(topic, p)
            if s is None:
                return None
            new = decide(s)
            if new is None:
                return s
            if self._update_state(topic, p, s, new):
                return new
        return self._state(topic, p)

    def submit_elect_leaders(self, wanted: set[tuple[str, int]] | None, election_type: int, reply) -> None:
        """From the ElectLeaders handler (any thread): ``reply`` gets {(t, p): (error name, message) or None} on
        this controller's thread (see :mod:`tidelog.cluster.elections`), or None when not the controller."""
        self._events.put(("elect_leaders", (wanted, election_type, reply)))

    def _on_elect_leaders(self, wanted: set[tuple[str, int]] | None, election_type: int, reply) -> None:
        try:
            results = elect(self, wanted, election_type)
        except ControllerMovedError:
            raise
        except Exception as exc:
            log.exception("ElectLeaders failed")
            reply({tp: (ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc)) for tp in wanted or ()})
            return
        reply(results)

    # -- topic deletion ---------------------------------------------------------------------------------------

    def _on_delete_topics(self) -> None:
        try:
            queued = sorted(self.zk.get_children(zd.DELETE_TOPICS))
        except NoNodeError:
            return
        for topic in queued:
            a = self._assignment(topic)
            if a is None:
                with contextlib.suppress(NoNodeError):
                    self._commit(lambda t, topic=topic: t.delete(zd.delete_topic_path(topic)))
                continue
            if any(a.reassigning(p) for p in a.partitions):
                log.info("topic deletion waits for its reassignments", extra={"kv": {"topic": topic}})
                continue

            def ops(t, topic=topic) -> None:
                try:
                    parts = self.zk.get_children(zd.partitions_path(topic))
                except NoNodeError:
                    parts = None
                for c in parts or ():
                    p = int(c)
                    if self.zk.exists(zd.state_path(topic, p)) is not None:
                        t.delete(zd.state_path(topic, p))
                    t.delete(zd.partition_path(topic, p))
                if parts is not None:
                    t.delete(zd.partitions_path(topic))
                t.delete(zd.topic_path(topic))
                if self.zk.exists(zd.topic_config_path(topic)) is not None:
                    t.delete(zd.topic_config_path(topic))
                t.delete(zd.delete_topic_path(topic))

            self._commit(ops)
            self._reassign_watches = {tp for tp in self._reassign_watches if tp[0] != topic}
            log.info("topic deleted", extra={"kv": {"topic": topic,
                                                    "topic_id": zd.uuid_to_kafka(a.topic_id) if a.topic_id else ""}})
