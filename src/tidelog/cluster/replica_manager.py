"""ZkReplicaManager: the replica manager of a broker in ZooKeeper mode (``zookeeper.connect`` set).

The composition root (``tidelog.node``) builds it and hands it to the one :class:`~tidelog.broker.broker.Broker`
class; it is a part of the broker, not a kind of broker: it holds the broker (``self.broker``) and uses its
storage, topics, purgatory and metrics, and the broker binds its partition-state methods (see
``tidelog.broker.replica_manager`` for the interface both modes implement).

Rooms (issue 26 item 2; the shared state is :mod:`tidelog.cluster.replica_state`): :mod:`~tidelog.cluster.zk_session`
(the session, registration, log-dir failure notices), :mod:`~tidelog.cluster.zk_watches` (watch callbacks),
:mod:`~tidelog.cluster.metadata_cache` (live brokers, controller, Metadata), :mod:`~tidelog.cluster.isr` (the leader
side: follower progress, HW, ISR changes), :mod:`~tidelog.cluster.controlled_shutdown`. This module keeps the
construction, the parts the broker is built with, the lifecycle, the role changes (leader / follower, announced
through :class:`~tidelog.broker.leadership.LeadershipChanges`) and the follower side's truncation rule.

How a broker learns its roles: **ZooKeeper watches**, not LeaderAndIsr/UpdateMetadata requests. Every broker
watches ``/brokers/ids`` (endpoints for Metadata), ``/controller``, ``/brokers/topics``, each partition's
``state`` znode and ``/config/changes`` (topic config change notifications). The state znode is the one source of truth; its znode version is the fencing token of every
write (the controller's, in a ``multi`` that also checks ``/controller_epoch``, and the leader's own ISR
changes). Watches deliver the committed state itself, in ZooKeeper's order, so no second (controller -> broker)
channel can disagree with ZooKeeper, and a broker that was away simply reads the current state when it comes
back. Kafka pushed LeaderAndIsr to avoid watch storms with 100k+ partitions; at tidelog's scale the watches are
cheap. Watch callbacks run on kazoo's thread and only hand the decoded value to the event loop
(``call_soon_threadsafe``); every role change happens on the loop, one at a time.

Replication (``Partition``/``ReplicaManager`` in Kafka):

* leader: follower fetches (``replica_id`` >= 0) report the follower's LEO (its fetch offset); HW = min LEO over
  the ISR; a moved HW completes DelayedProduce (acks=-1) and consumer long polls. A follower not caught up for
  ``replica.lag.time.max.ms`` leaves the ISR; one that reaches the HW joins it. ISR changes are conditional
  writes of the state znode (never a leader-epoch bump), applied locally only once ZooKeeper accepted them.
* follower: on a new leader or epoch the partition joins the fetcher of that leader (``cluster/fetcher.py``: one
  per source broker, one Fetch for all its partitions) and fetches from the LEO with the epoch of the last batch
  (``last_fetched_epoch``, KIP-320); the leader answers ``diverging_epoch`` when the logs diverge and the follower
  truncates by the KIP-101/KIP-279 rule (ask again with its own epoch until both agree), never to its own HW.
  A log without epochs (or ``tidelog.replica.truncate.on.fetch=false``) truncates through OffsetForLeaderEpoch
  first. Batches go through ``append_as_follower`` (producer state included); HW = min(leader HW, LEO).
* a state znode written before this broker's current registration (a restart, a new session) does not make it
  leader: the controller decides such partitions again (see controller ``_on_brokers_changed``).
* losing the ZooKeeper session (e.g. SIGSTOP past the session timeout) drops every leadership at once.

Controlled shutdown (SIGTERM, ``controlled.shutdown.enable``): before closing anything the broker stops
starting replica fetchers and creates the **ephemeral** znode ``/admin/controlled_shutdown/<id>``; the
controller (watching its children) moves every leadership held here to another live ISR member and takes this
broker out of every ISR, bumping the leader epoch so that fetches still in flight from here are fenced. The
broker waits, on its own state watches, until no partition it hosts still names it leader (unless no other
in-sync replica exists) nor has it in the ISR, for ``request.timeout.ms``; if not done it recreates the znode
after ``controlled.shutdown.retry.backoff.ms``, up to ``controlled.shutdown.max.retries`` attempts, then shuts
down anyway (the session's end makes the controller elect, as after a crash). Only then is the session closed.
Bounded with ZooKeeper gone too (dead, frozen, cut off): see :mod:`~tidelog.cluster.controlled_shutdown`.

Why a znode and not Kafka's ControlledShutdown request to the controller: every other decision here already
travels as ZooKeeper state, and the broker has no request channel to the controller. A znode request survives
a controller failover (the next controller reads the pending requests when it takes over, where an RPC would
die with the old controller and need re-routing); being ephemeral, it disappears by itself if the broker dies
half-way, so no stale request can keep a returning broker from being elected; and the answer is the partition
state znodes themselves, which the broker watches anyway, so there is no second channel that could disagree.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tidelog.broker.broker import Broker
from tidelog.broker.errors import PartitionError
from tidelog.broker.leadership import LeadershipChanges
from tidelog.broker.quotas import QuotaListener
from tidelog.broker.security.authorizer import AclListener
from tidelog.broker.security.inter_broker import inter_broker_security
from tidelog.broker.topic_backend import TopicStore
from tidelog.broker.topics import TopicManager
from tidelog.cluster import zkdata as zd
from tidelog.cluster.acls import ZkAclStore
from tidelog.cluster.broker_channel import BrokerChannel
from tidelog.cluster.broker_configs import ZkBrokerConfigStore
from tidelog.cluster.controlled_shutdown import ControlledShutdown
from tidelog.cluster.fetcher import ReplicaFetcherManager
from tidelog.cluster.group_configs import ZkGroupConfigStore
from tidelog.cluster.handlers import CLUSTER_HANDLERS
from tidelog.cluster.isr import IsrTracking
from tidelog.cluster.metadata_cache import MetadataCache
from tidelog.cluster.producer_ids import zk_producer_id_manager
from tidelog.cluster.quotas import ZkQuotaStore
from tidelog.cluster.replica_state import Replica
from tidelog.cluster.scram import ZkScramCredentialStore
from tidelog.cluster.topics import ZkTopicBackend
from tidelog.cluster.zk_bounded import BoundedZooKeeper
from tidelog.cluster.zk_session import SESSION_FILE, ZkSession
from tidelog.cluster.zk_watches import CONFIG_CHANGE_EXPIRATION_S, ZkWatches
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.cluster.broker")

__all__ = ["CONFIG_CHANGE_EXPIRATION_S", "SESSION_FILE", "Replica", "ZkReplicaManager"]

class ZkReplicaManager(ZkSession, ZkWatches, MetadataCache, IsrTracking, ControlledShutdown):
    """The broker's replica manager in ZooKeeper mode (see the module docstring); the composition root
    (``tidelog.node``) builds it from the config and hands it to the :class:`~tidelog.broker.broker.Broker`."""

    handlers = CLUSTER_HANDLERS  # OffsetForLeaderEpoch, Alter/ListPartitionReassignments: served in this mode only
    internal_topics_led_on_creation = False  # the controller elects the leaders of a created topic later

    def __init__(self, config: Any, broker: Broker, leadership: LeadershipChanges | None = None) -> None:
        self.broker = broker  # the broker being constructed: this is one of its parts
        #: where elections seen here are announced (the broker's coordinators listen)
        self.leadership = leadership if leadership is not None else LeadershipChanges()
        self.config = config
        self.node_id = config.node_id
        # ``topic_backend`` (where the broker's topic store keeps its metadata; the watches feed it) is made with the
        # store, by make_topic_manager when storage opens, before any watch that uses it is set
        props = config.props
        self.zk_connect: str = config.get("zookeeper.connect")
        self.session_timeout_s = config.get("zookeeper.session.timeout.ms") / 1000.0
        self.lag_max_s = config.get("replica.lag.time.max.ms") / 1000.0
        self.fetch_max_bytes = config.get("replica.fetch.max.bytes")
        self.fetch_wait_ms = config.get("replica.fetch.wait.max.ms")
        self.fetch_backoff_s = config.get("replica.fetch.backoff.ms") / 1000.0
        # how replica fetchers reach other brokers: the inter-broker listener's TLS and SASL
        self.peer_security = inter_broker_security(config)
        self.fetch_min_bytes = config.get("replica.fetch.min.bytes")
        self.fetch_response_max_bytes = config.get("replica.fetch.response.max.bytes")
        self.fetchers = ReplicaFetcherManager(self, config.get("num.replica.fetchers"))
        self.unclean = str(props.get("unclean.leader.election.enable", "false")).lower() == "true"
        self.zk: Any = None
        self.controller: Any = None
        self.live: dict[int, zd.BrokerInfo] = {}
        self._departed: dict[int, tuple[zd.BrokerInfo, float]] = {}  # left /brokers/ids: (endpoint, listed until)
        self.departed_broker_s = config.get("tidelog.metadata.departed.broker.ms") / 1000.0
        self.close_previous_session = config.get("tidelog.zookeeper.close.previous.session")
        self.controller_node = -1
        self.assignments: dict[str, zd.TopicAssignment] = {}
        self.states: dict[tuple[str, int], zd.LeaderIsr] = {}
        self.replicas: dict[tuple[str, int], Replica] = {}
        self._session_lost = False
        self._offline_replicas: set[tuple[str, int]] = set()  # replicas in failed log directories
        self._offline_lock = threading.Lock()
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._live_changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.controlled_shutdown_enable = config.get("controlled.shutdown.enable")
        self.controlled_shutdown_retries = config.get("controlled.shutdown.max.retries")
        self.controlled_shutdown_backoff_s = config.get("controlled.shutdown.retry.backoff.ms") / 1000.0
        self.request_timeout_s = config.get("request.timeout.ms") / 1000.0
        self._shutting_down = False  # controlled shutdown requested: no new replica fetchers
        self._state_seen = asyncio.Event()
        # KIP-320: followers detect divergence from the Fetch response (``last_fetched_epoch`` ->
        # ``diverging_epoch``) and only ask OffsetForLeaderEpoch first when their log has no leader epoch, as
        # Kafka (IBP >= 2.7) does; "false" always truncates through OffsetForLeaderEpoch before fetching.
        self.truncate_on_fetch = str(props.get("tidelog.replica.truncate.on.fetch", "true")).lower() != "false"
        # czxid of our /brokers/ids/<id> (Kafka's broker epoch); infinite while not registered. A state znode
        # last written before it (mzxid below) is a decision about a previous process of this broker: its
        # leadership is not taken up, the controller decides again (it sees the new registration)
        self._registration_zxid: float = float("inf")
        self._state_zxid: dict[tuple[str, int], int] = {}
        self._last_config_change = -1  # sequence number of the last config change notification processed
        # inter-broker requests (transaction markers, KIP-890 verification): one pooled connection per broker
        self.channel = BrokerChannel(self.node_id, self._live_endpoint)

    @property
    def followers(self) -> ZkReplicaManager:
        """The leader side of follower fetches for the read service (check_follower, update_follower_fetch_state)."""
        return self

    @property
    def stopping(self) -> bool:
        return self.broker.stopping

    # -- parts the broker is built with ----------------------------------------------------------------------

    def make_topic_manager(self, broker: Broker) -> TopicManager:
        # the topic store with ZooKeeper as the source of truth: topic changes go through ZooKeeper, and this
        # replica manager's watches hand what they see to the backend (adopt, config_changed, forget_topic, ...)
        def backend(store: TopicStore) -> ZkTopicBackend:
            self.topic_backend = ZkTopicBackend(self, store)
            return self.topic_backend

        return TopicManager(broker, backend)

    def make_producer_id_manager(self, broker: Broker) -> Any:
        # producer id blocks from ZooKeeper's /latest_producer_id_block: unique across the cluster
        return zk_producer_id_manager(self.zk, self.node_id, self.config.log_dirs)

    @property
    def bounded_zk(self) -> BoundedZooKeeper:
        """The ZooKeeper client for the stores written from request handler threads: each call ends within
        ``zookeeper.session.timeout.ms`` (Kafka's ``zookeeper.connection.timeout.ms``, which defaults to it and
        which tidelog does not have apart), then REQUEST_TIMED_OUT (``cluster/zk_bounded.py``); at once while
        ZooKeeper has been unreachable for longer than that."""
        return BoundedZooKeeper(self.zk, self.session_timeout_s, give_up=self._zookeeper_gone)

    def make_acl_store(self, broker: Broker, changes: AclListener) -> ZkAclStore:
        # ACLs where Kafka's AclAuthorizer keeps them: /kafka-acl, /kafka-acl-extended, with change notifications
        return ZkAclStore(self.bounded_zk, changes)

    def make_scram_store(self, broker: Broker) -> Any:
        # SCRAM credentials where Kafka keeps them: /config/users/<name>, cached from watches
        return ZkScramCredentialStore(self.bounded_zk)

    def make_quota_store(self, broker: Broker, listener: QuotaListener) -> ZkQuotaStore:
        # client quotas where Kafka keeps them: /config/users, /config/clients, with /config/changes notifications
        return ZkQuotaStore(self.bounded_zk, listener)

    def make_group_config_store(self, broker: Broker) -> ZkGroupConfigStore:
        # group configs: /config/groups/<group>, with /config/changes notifications (Kafka keeps them in KRaft)
        return ZkGroupConfigStore(self.bounded_zk)

    def make_broker_config_store(self, broker: Broker, listener: Callable[[], None]) -> ZkBrokerConfigStore:
        # dynamic broker configs where Kafka keeps them: /config/brokers/<id>, /config/brokers/<default>
        return ZkBrokerConfigStore(self.bounded_zk, self.node_id, listener)

    def become_leader(self, tp: tuple[str, int], log_: Any) -> None:
        """At start nothing is led until ZooKeeper says so."""

    def start_leadership(self) -> None:
        """Nothing to announce at start: elections arrive through the state watches after registration."""

    def internal_topic_replication_factor(self, configured: int) -> int:
        """The configured factor (``offsets.topic.replication.factor``, ...): not created with fewer live brokers."""
        return configured

    def leader_log(self, topic: str, partition: int) -> Any:
        r = self.replicas.get((topic, partition))
        if r is None:
            if topic in self.assignments and partition in self.assignments[topic].partitions:
                raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is not hosted here")
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not hosted here")
        if not r.is_leader:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition}: the leader is {r.leader}")
        if r.log.offline:  # its log directory failed: KAFKA_STORAGE_ERROR until the controller moves the leader
            raise PartitionError(ErrorCode.KAFKA_STORAGE_ERROR, r.log.failed)
        return r.log

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        r = self.replicas.get((topic, partition))
        return r.isr if r is not None else ()

    def leader_epoch(self, topic: str, partition: int) -> int:
        s = self.states.get((topic, partition))
        return s.leader_epoch if s is not None else -1

    def check_leader_epoch(self, topic: str, partition: int, requested: int | None) -> None:
        if requested is None or requested < 0:
            return
        current = self.leader_epoch(topic, partition)
        if requested < current:
            raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH)
        if requested > current:
            raise PartitionError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # -- requests to other brokers -------------------------------------------------------------------------

    async def broker_request(self, node_id: int, api_key: int, version: int, body: dict,
                             timeout: float = 30.0) -> dict[str, Any]:
        """One request to broker ``node_id`` at the endpoint it registered in ``/brokers/ids``, over the pooled
        connection to it (:class:`~tidelog.cluster.broker_channel.BrokerChannel`); the decoded response body.
        Raises ``BrokerRequestError`` (BROKER_NOT_AVAILABLE: not live, unreachable, or this broker is shutting
        down; REQUEST_TIMED_OUT) when no answer came. Only the single node's replica manager lacks this method."""
        return await self.channel.request(node_id, api_key, version, body, timeout)

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def before_storage(self) -> None:
        # the cluster id lives in ZooKeeper (/cluster/id, created by the first broker, as Kafka's
        # getOrGenerateClusterId); storage then checks meta.properties against it (InconsistentClusterIdError)
        await asyncio.to_thread(self._connect_zk)
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._watch_cluster)

    async def after_listen(self) -> None:
        await asyncio.to_thread(self._start_zk)
        self.broker.spawn(self._isr_shrink_loop())
        self.broker.metrics.add_rows_source(self._replication_rows)

    async def before_shutdown(self) -> None:
        """Controlled shutdown, then stop the fetchers and the controller and leave ZooKeeper (called once, as the
        broker's shutdown begins)."""
        if not self._shutting_down and self.zk is not None and self.controlled_shutdown_enable:
            await self._controlled_shutdown()  # bounded; logs why when it fails (controlled_shutdown.py)
        self.fetchers.shutdown()
        self.channel.close()
        if self.controller is not None:
            self.controller.stop()
        if self.zk is not None:
            zk, self.zk = self.zk, None
            await self._close_session(zk)  # at most zookeeper.session.timeout.ms (zk_session.py)

    # -- ZooKeeper watches (kazoo thread) -> the loop ----------------------------------------------------------

    # -- role changes (on the loop) ------------------------------------------------------------------------

    def _on_assignment(self, topic: str, a: zd.TopicAssignment, config: dict[str, str], config_version: int) -> None:
        old = self.assignments.get(topic)
        if old is not None and a.topic_id and old.topic_id and a.topic_id != old.topic_id:
            self._on_topic_deleted(topic)  # deleted and created again between two watch deliveries
        self.assignments[topic] = a
        local = [p for p, reps in a.partitions.items() if self.node_id in reps]
        for tp in [tp for tp in self.replicas if tp[0] == topic and tp[1] not in local]:
            self._drop_replica(tp)  # reassigned away: delete the replica
        self.topic_backend.adopt(topic, a.topic_id, max(a.partitions) + 1, config, local, config_version)
        for p in local:
            tp = (topic, p)
            if tp not in self.replicas:
                self.replicas[tp] = Replica(tp, self.broker.topics.get_log(topic, p), list(a.partitions[p]))
            self.replicas[tp].replicas = a.target(p)  # ISR-eligible: never a replica being removed
            s = self.states.get(tp)
            if s is not None:
                self._apply_state(self.replicas[tp], s)

    def _drop_replica(self, tp: tuple[str, int]) -> None:
        r = self.replicas.pop(tp)
        self.fetchers.remove(tp)
        if r.is_leader:
            r.is_leader = False  # waiting produces and fetches are woken by drop_partition (then fail)
            self._leadership_changed(tp, False, -1)  # a led __consumer_offsets partition unloads its groups
        self.topic_backend.drop_partition(*tp)

    def _on_topic_deleted(self, topic: str) -> None:
        """The topic znode is gone (DeleteTopics): drop its replicas, states and the topic itself."""
        for tp in [tp for tp in self.replicas if tp[0] == topic]:
            self._drop_replica(tp)
        for tp in [tp for tp in self.states if tp[0] == topic]:
            del self.states[tp]
        self.assignments.pop(topic, None)
        self.topic_backend.forget_topic(topic)

    def _on_state(self, tp: tuple[str, int], s: zd.LeaderIsr, mzxid: int = 0) -> None:
        old = self.states.get(tp)
        if old is not None and old.zk_version > s.zk_version:
            return
        self.states[tp] = s
        self._state_zxid[tp] = mzxid
        r = self.replicas.get(tp)
        if r is not None:
            self._apply_state(r, s)
        self._state_seen.set()

    def _apply_state(self, r: Replica, s: zd.LeaderIsr) -> None:
        if s.zk_version < r.zk_version:
            return
        new_term = (s.leader, s.leader_epoch) != (r.leader, r.leader_epoch)
        r.isr, r.zk_version, r.controller_epoch = s.isr, s.zk_version, s.controller_epoch
        if s.leader == self.node_id:
            if not r.is_leader and self._state_zxid.get(r.tp, 0) < self._registration_zxid:
                # granted to a previous process of this broker (restarted, or a new session): its log may be
                # shorter than what it acknowledged; leading with it would truncate the followers. Wait for the
                # controller's new decision (a bounced broker gets a new leader epoch, as in Kafka)
                log.info("state names this broker leader from before its registration; waiting for the controller",
                         extra={"kv": {"topic": r.tp[0], "partition": r.tp[1], "leader_epoch": s.leader_epoch}})
                r.leader, r.leader_epoch = s.leader, s.leader_epoch
                return
            if not r.is_leader:
                self._make_leader(r, s)
            elif new_term:
                r.leader_epoch = s.leader_epoch  # the controller shrank the ISR (epoch bump): same leader
                if r.log.epoch_cache is not None:
                    r.log.epoch_cache.assign(s.leader_epoch, r.log.log_end_offset)
            self._leader_progress(r)
        elif new_term or r.is_leader:
            self._make_follower(r, s)
        r.leader, r.leader_epoch = s.leader, s.leader_epoch

    def _make_leader(self, r: Replica, s: zd.LeaderIsr) -> None:
        self.fetchers.remove(r.tp)
        plog = r.log
        r.is_leader = True
        r.leader, r.leader_epoch = s.leader, s.leader_epoch
        r.leader_since = time.monotonic()
        r.epoch_start_offset = plog.log_end_offset
        if plog.epoch_cache is not None:
            plog.epoch_cache.assign(s.leader_epoch, plog.log_end_offset)
        r.follower_leo = {}
        r.last_caught_up = {b: r.leader_since for b in r.replicas if b != self.node_id}
        r.last_fetch_leo, r.last_fetch_time = {}, {}
        log.info("became leader", extra={"kv": {"topic": r.tp[0], "partition": r.tp[1], "leader_epoch": s.leader_epoch,
                                                "isr": ",".join(map(str, s.isr)), "leo": plog.log_end_offset,
                                                "hw": plog.high_watermark}})
        self._leadership_changed(r.tp, True, s.leader_epoch)

    def _make_follower(self, r: Replica, s: zd.LeaderIsr) -> None:
        was_leader = r.is_leader
        r.is_leader = False
        self.fetchers.remove(r.tp)
        if was_leader:
            self.broker.purgatory.check_and_complete(r.tp)  # waiting acks=-1 produces fail NOT_LEADER_OR_FOLLOWER
            self._leadership_changed(r.tp, False, s.leader_epoch)
        if r.log.failed is not None:
            pass  # its log directory failed: nothing can be replicated into it until a restart
        elif s.leader != zd.NO_LEADER and self._loop is not None and not self.stopping and not self._shutting_down:
            r.leader, r.leader_epoch = s.leader, s.leader_epoch  # the fetcher checks answers against the term
            self.fetchers.add(r, s.leader, s.leader_epoch)
        log.info("became follower", extra={"kv": {"topic": r.tp[0], "partition": r.tp[1], "leader": s.leader,
                                                  "leader_epoch": s.leader_epoch}})

    def _resign_all(self) -> None:
        for r in self.replicas.values():
            if r.is_leader:
                r.is_leader = False
                r.leader = zd.NO_LEADER
                self.broker.purgatory.check_and_complete(r.tp)
                self._leadership_changed(r.tp, False, -1)

    def _leadership_changed(self, tp: tuple[str, int], is_leader: bool, leader_epoch: int) -> None:
        """Hook: every coordinator of the broker hears each leadership change and picks its own topic's: the group
        coordinator loads / unloads the groups of a ``__consumer_offsets`` partition, the transaction coordinator
        the transactional ids of a ``__transaction_state`` partition. One listener failing does not keep the
        change from the other (nor from the replica manager, which has already applied it)."""
        self.leadership.changed(tp[0], tp[1], is_leader, leader_epoch)

    def _replication_rows(self) -> list[tuple[str, str, dict[str, str], float]]:
        """Scrape-time gauges (Kafka's ReplicaManager UnderReplicatedPartitions, UnderMinIsrPartitionCount,
        LeaderCount, PartitionCount, and the leader's view of each follower's lag in messages)."""
        under = under_min = leaders = 0
        rows: list[tuple[str, str, dict[str, str], float]] = []
        for r in list(self.replicas.values()):
            if not r.is_leader:
                continue
            leaders += 1
            if len(r.isr) < len(r.replicas):
                under += 1
            if len(r.isr) < r.log.config.min_insync_replicas:
                under_min += 1
            leo = r.log.log_end_offset
            for b in r.replicas:
                if b != self.node_id:
                    rows.append(("tidelog_replica_follower_lag_messages",
                                 "Leader LEO minus the follower's last fetch offset (LEO if it never fetched)",
                                 {"topic": r.tp[0], "partition": str(r.tp[1]), "follower": str(b)},
                                 float(leo - r.follower_leo.get(b, 0))))
        for (source, fid), fetcher in list(self.fetchers.fetchers.items()):
            labels = {"source": str(source), "fetcher": str(fid)}
            rows.append(("tidelog_replica_fetcher_partitions", "Partitions the replica fetcher of a source broker "
                         "follows (one Fetch carries them all)", labels, float(len(fetcher.partitions))))
            rows.append(("tidelog_replica_fetcher_requests", "Fetch requests sent by the replica fetcher of a "
                         "source broker since it started", labels, float(fetcher.rounds)))
            rows.append(("tidelog_replica_fetcher_empty_responses", "Fetch answers to the replica fetcher of a "
                         "source broker that carried no records (a long poll that expired, an HW-only or error "
                         "answer)", labels, float(fetcher.empty_rounds)))
        return [
            ("tidelog_replicamanager_under_replicated_partitions", "Partitions led here with an ISR smaller than "
             "the replica set", {}, float(under)),
            ("tidelog_replicamanager_under_min_isr_partitions", "Partitions led here with an ISR below "
             "min.insync.replicas", {}, float(under_min)),
            ("tidelog_replicamanager_leader_count", "Partitions led by this broker", {}, float(leaders)),
            ("tidelog_replicamanager_partition_count", "Partitions hosted by this broker", {},
             float(len(self.replicas))),
            *rows,
        ]

    # -- leader side: follower fetches and the ISR ---------------------------------------------------------

    # the read service's follower hooks (broker/fetch.py reads a follower's Fetch like a consumer's, up to the LEO)

    # -- follower side (the fetch loop itself is cluster/fetcher.py) ----------------------------------------

    def truncation_point(self, plog: Any, leader_epoch: int, end_offset: int) -> tuple[int, int | None]:
        """KIP-101/KIP-279: where to truncate given the leader's ``(epoch, end offset)`` for the epoch asked
        about, and the epoch to ask about next (None when done). The same rule serves OffsetForLeaderEpoch
        answers and KIP-320 ``diverging_epoch`` fields."""
        leo = plog.log_end_offset
        cache = plog.epoch_cache
        if leader_epoch < 0 or end_offset < 0 or cache is None:
            return min(plog.high_watermark, leo), None  # the leader knows no such epoch: the pre-KIP-101 rule
        f_epoch, f_end = cache.end_offset_for(leader_epoch, leo)
        if f_epoch < 0:  # we hold nothing of that epoch or before it
            return min(end_offset, leo), None
        if f_epoch != leader_epoch:  # our epoch below it is another one: truncate there and ask about it
            return min(f_end, end_offset, leo), f_epoch
        return min(end_offset, f_end, leo), None

    def truncate_log(self, r: Replica, target: int, reason: str, leader_epoch: int) -> None:
        plog = r.log
        if target < plog.log_end_offset:
            log.info("truncating", extra={"kv": {"topic": r.tp[0], "partition": r.tp[1], "from": plog.log_end_offset,
                                                  "to": target, "leader_epoch": leader_epoch, "by": reason}})
            plog.truncate_to(target)
        elif plog.epoch_cache is not None:
            # Nothing to cut from the log, but the epoch cache may end with an epoch that holds no record: this
            # broker led it and lost the leadership before appending anything. Kafka's UnifiedLog.truncateTo drops
            # such entries here too; kept, the next fetch would name that epoch as last_fetched_epoch, the leader
            # (which never had it) would answer diverging_epoch at this very offset again, and the follower would
            # spin on that answer without ever fetching (seen under fast double failovers)
            plog.epoch_cache.truncate_from_end(plog.log_end_offset)
