"""ZkReplicaManager: the replica manager of a broker in ZooKeeper mode (``zookeeper.connect`` set).

The composition root (``tidelog.node``) builds it and hands it to the one :class:`~tidelog.broker.broker.Broker`
class; it is a part of the broker, not a kind of broker: it holds the broker (``self.broker``) and uses its
storage, topics, purgatory and metrics, and the broker binds its partition-state methods (see
``tidelog.broker.replica_manager`` for the interface both modes implement).

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

Why a znode and not Kafka's ControlledShutdown request to the controller: every other decision here already
travels as ZooKeeper state, and the broker has no request channel to the controller. A znode request survives
a controller failover (the next controller reads the pending requests when it takes over, where an RPC would
die with the old controller and need re-routing); being ephemeral, it disappears by itself if the broker dies
half-way, so no stale request can keep a returning broker from being elected; and the answer is the partition
state znodes themselves, which the broker watches anyway, so there is no second channel that could disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tidelog.broker.broker import Broker
from tidelog.broker.errors import PartitionError
from tidelog.broker.security.inter_broker import inter_broker_security
from tidelog.broker.topics import TopicManager, new_cluster_id
from tidelog.cluster import zkdata as zd
from tidelog.cluster.acls import ZkAclStore
from tidelog.cluster.broker_channel import BrokerChannel
from tidelog.cluster.broker_configs import ZkBrokerConfigStore
from tidelog.cluster.controller import Controller
from tidelog.cluster.fetcher import ReplicaFetcherManager
from tidelog.cluster.handlers import CLUSTER_HANDLERS
from tidelog.cluster.producer_ids import zk_producer_id_manager
from tidelog.cluster.quotas import ZkQuotaStore
from tidelog.cluster.scram import ZkScramCredentialStore
from tidelog.cluster.topics import ZkTopicBackend
from tidelog.errors import ErrorCode
from tidelog.storage.checkpoints import atomic_write

log = logging.getLogger("tidelog.cluster.broker")

#: in the broker's first log directory: the id and password of the ZooKeeper session holding its registration
SESSION_FILE = "zookeeper.session"
CONFIG_CHANGE_EXPIRATION_S = 15 * 60  # Kafka's ZkNodeChangeNotificationListener changeExpirationMs


@dataclass(slots=True)
class Replica:
    """This broker's view of one partition it hosts."""

    tp: tuple[str, int]
    log: Any
    replicas: list[int]
    leader: int = zd.NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    controller_epoch: int = -1
    is_leader: bool = False
    leader_since: float = 0.0
    epoch_start_offset: int = 0
    follower_leo: dict[int, int] = field(default_factory=dict)
    last_caught_up: dict[int, float] = field(default_factory=dict)
    last_fetch_leo: dict[int, int] = field(default_factory=dict)
    last_fetch_time: dict[int, float] = field(default_factory=dict)
    isr_update_pending: bool = False
    pending_isr: tuple[int, ...] = ()  # an ISR change sent to ZooKeeper and not yet answered


class ZkReplicaManager:
    """The broker's replica manager in ZooKeeper mode (see the module docstring); the composition root
    (``tidelog.node``) builds it from the config and hands it to the :class:`~tidelog.broker.broker.Broker`."""

    handlers = CLUSTER_HANDLERS  # OffsetForLeaderEpoch, Alter/ListPartitionReassignments: served in this mode only

    def __init__(self, config: Any) -> None:
        self.broker: Broker = None  # type: ignore[assignment]  # set by attach
        self.config = config
        self.node_id = config.node_id
        # where the broker's topic store keeps its metadata (make_topic_manager); the watches feed it
        self.topic_backend = ZkTopicBackend(self)
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

    def attach(self, broker: Broker) -> None:
        self.broker = broker

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
        return TopicManager(broker, self.topic_backend)

    def make_producer_id_manager(self, broker: Broker) -> Any:
        # producer id blocks from ZooKeeper's /latest_producer_id_block: unique across the cluster
        return zk_producer_id_manager(self.zk, self.node_id, self.config.log_dirs)

    def make_acl_store(self, broker: Broker) -> Any:
        # ACLs where Kafka's AclAuthorizer keeps them: /kafka-acl, /kafka-acl-extended, with change notifications
        return ZkAclStore(self.zk)

    def make_scram_store(self, broker: Broker) -> Any:
        # SCRAM credentials where Kafka keeps them: /config/users/<name>, cached from watches
        return ZkScramCredentialStore(self.zk)

    def make_quota_store(self, broker: Broker) -> Any:
        # client quotas where Kafka keeps them: /config/users, /config/clients, with /config/changes notifications
        return ZkQuotaStore(self.zk)

    def make_broker_config_store(self, broker: Broker) -> Any:
        # dynamic broker configs where Kafka keeps them: /config/brokers/<id>, /config/brokers/<default>
        return ZkBrokerConfigStore(self.zk, self.node_id)

    def become_leader(self, tp: tuple[str, int], log_: Any) -> None:
        """At start nothing is led until ZooKeeper says so."""

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

    def partition_metadata(self, topic: str, partition: int) -> dict:
        a = self.assignments.get(topic)
        replicas = list(a.partitions.get(partition, [])) if a is not None else []
        s = self.states.get((topic, partition))
        leader = s.leader if s is not None else zd.NO_LEADER
        return {
            "error_code": 0 if leader != zd.NO_LEADER and leader in self.live else 5,  # LEADER_NOT_AVAILABLE
            "partition_index": partition,
            "leader_id": leader if leader in self.live else zd.NO_LEADER,
            "leader_epoch": s.leader_epoch if s is not None else -1,
            "replica_nodes": replicas,
            "isr_nodes": list(s.isr) if s is not None else [],
            "offline_replicas": [r for r in replicas if r not in self.live],
        }

    def metadata_brokers(self, listener: str | None = None) -> list[dict]:
        """The live brokers, plus for ``tidelog.metadata.departed.broker.ms`` (default 0: off, as Kafka, which
        lists live brokers only) a broker that just left.

        Why one may keep a departed broker listed a moment: librdkafka (2.x), given one Metadata response that
        both drops a dead leader's broker and names the new leader, races its dying broker thread against the
        leader update; in about half the failovers the dying thread wins, puts the partition back on no broker,
        and the producer only asks again at its next 1-second leader scan (measured: new leader -> first
        acknowledged produce 1.1-1.8 s instead of 0.1-0.2 s). Listing the broker a little longer makes the
        first answer naming the new leader move the partition cleanly; the broker leaves the list at a later
        refresh, when nothing is delegated to it. Off by default because clients then see a dead broker for
        that long (tools counting registered brokers through Metadata are misled). Leaders and
        ``offline_replicas`` always come from the live set only."""
        now = time.monotonic()
        shown = dict(self.live)
        for bid, (info, until) in list(self._departed.items()):
            if until <= now:
                del self._departed[bid]
            elif bid not in shown:
                shown[bid] = info
        return [{"node_id": b.id, "host": b.endpoint(listener)[0], "port": b.endpoint(listener)[1], "rack": b.rack}
                for b in sorted(shown.values(), key=lambda b: b.id)]

    def live_brokers(self) -> set[int]:
        """The ids of the brokers registered in ZooKeeper now (``/brokers/ids``, as this broker's watch saw it)."""
        return set(self.live)

    def metadata_controller_id(self) -> int:
        return self.controller_node

    # -- requests to other brokers -------------------------------------------------------------------------

    async def broker_request(self, node_id: int, api_key: int, version: int, body: dict,
                             timeout: float = 30.0) -> dict[str, Any]:
        """One request to broker ``node_id`` at the endpoint it registered in ``/brokers/ids``, over the pooled
        connection to it (:class:`~tidelog.cluster.broker_channel.BrokerChannel`); the decoded response body.
        Raises ``BrokerRequestError`` (BROKER_NOT_AVAILABLE: not live, unreachable, or this broker is shutting
        down; REQUEST_TIMED_OUT) when no answer came. Only the single node's replica manager lacks this method."""
        return await self.channel.request(node_id, api_key, version, body, timeout)

    def _live_endpoint(self, node_id: int) -> tuple[str, int] | None:
        info = self.live.get(node_id)
        return (info.host, info.port) if info is not None else None

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

    def _connect_zk(self) -> None:
        from kazoo.client import KazooClient
        from kazoo.exceptions import NodeExistsError

        # reconnect attempts at most ~1 s apart, as ZooKeeper's own client: kazoo's default backoff doubles up to
        # an hour, so a broker cut off from ZooKeeper for minutes would only notice the heal (and its expired
        # session, i.e. that it no longer leads) minutes later
        self.zk = KazooClient(hosts=self.zk_connect, timeout=self.session_timeout_s,
                              connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0})
        self.zk.add_listener(self._zk_state)
        self.zk.start(timeout=max(10.0, self.session_timeout_s))
        # startup's reads and writes are retried across a connection loss (kazoo's KazooRetry, as Kafka's
        # ZooKeeperClient retries a request until its session expires): on a loaded machine the connection may drop
        # between them, and a broker that exits on the first ConnectionLoss does not come back
        retry = self.zk.retry
        for p in zd.PERSISTENT_PATHS:
            retry(self.zk.ensure_path, p)
        with contextlib.suppress(NodeExistsError):
            retry(self.zk.create, zd.CLUSTER_ID, zd.encode_cluster_id(self.broker.cluster_id or new_cluster_id()),
                  makepath=True)
        zk_id = zd.decode_cluster_id(retry(self.zk.get, zd.CLUSTER_ID)[0])
        if self.broker.cluster_id and self.broker.cluster_id != zk_id:
            raise RuntimeError(f"cluster.id {self.broker.cluster_id} differs from ZooKeeper's {zd.CLUSTER_ID} {zk_id}")
        self.broker.cluster_id = zk_id

    def _watch_cluster(self) -> None:
        """Watch the registered brokers and the controller before the listener opens (``before_storage``): the
        listener opens before this broker can register (it needs the bound port, and after a kill -9 it waits
        out the previous session's registration, see :meth:`_register`), and clients are served meanwhile.
        Their Metadata must name the brokers and the controller ZooKeeper has, not an empty cluster with
        controller -1: librdkafka's admin client, told so by its bootstrap broker, waits for the controller
        without asking again, and its CreateTopics got no answer until its request timeout (CI, right after a
        broker restart). The first values are posted to the loop from here, so they are set before the
        listener opens; this broker joins ``live`` when its registration fires the watch."""
        self.zk.ChildrenWatch(zd.BROKER_IDS, self._brokers_changed)
        self.zk.DataWatch(zd.CONTROLLER, self._controller_moved)

    def _start_zk(self) -> None:
        self._register()
        # config change notifications first: a change after the topics' config znodes are read below is notified
        self.zk.ChildrenWatch(zd.CONFIG_CHANGES, self._config_changes)
        self.zk.ChildrenWatch(zd.BROKER_TOPICS, self._topics_changed)
        # the assignments just read are queued on the loop ahead of this: then drop what ZooKeeper no longer has
        self.post(self.topic_backend.remove_strays, set(self.zk.retry(self.zk.get_children, zd.BROKER_TOPICS)),
                  self.assignments, self.node_id)
        self.controller = Controller(
            self.zk, self.node_id, unclean_election=self.unclean,
            auto_rebalance=self.config.get("auto.leader.rebalance.enable"),
            rebalance_interval_s=float(self.config.get("leader.imbalance.check.interval.seconds")),
            imbalance_pct=self.config.get("leader.imbalance.per.broker.percentage"),
            metrics=self.broker.metrics)
        self.controller.start()

    def _register(self) -> None:
        """Create ``/brokers/ids/<id>``; after a kill -9 the previous session's node lingers until its session
        times out, so wait for its deletion (a watch, not a poll), unless it is this broker's own previous session,
        which is closed instead (:meth:`_close_own_previous_session`)."""
        import threading

        from kazoo.exceptions import NodeExistsError

        path = zd.broker_path(self.node_id)
        data = zd.encode_broker(zd.BrokerInfo(self.node_id, self.broker.host, self.broker.port, self.config.props.get("broker.rack"),
                                              dict(self.broker.endpoints),
                                              {li.name: li.protocol for li in self.broker.listeners}))
        deadline = time.monotonic() + 3 * self.session_timeout_s + 30
        retry = self.zk.retry
        tried_close = False
        while True:
            try:
                retry(self.zk.create, path, data, ephemeral=True, makepath=True)
                stat = retry(self.zk.exists, path)
                self._registration_zxid = stat.czxid if stat is not None else float("inf")
                log.info("registered in ZooKeeper", extra={"kv": {"path": path, "endpoint": f"{self.broker.host}:{self.broker.port}"}})
                self._save_session()
                return
            except NodeExistsError:
                gone = threading.Event()
                stat = retry(self.zk.exists, path, watch=lambda _e, gone=gone: gone.set())
                if stat is None:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    # ours: a create whose answer the connection loss swallowed, retried (Kafka's
                    # checkedEphemeralCreate compares the owner session the same way)
                    self._registration_zxid = stat.czxid
                    log.info("registered in ZooKeeper", extra={"kv": {"path": path, "endpoint":
                                                                      f"{self.broker.host}:{self.broker.port}"}})
                    self._save_session()
                    return
                if not tried_close:
                    tried_close = True  # once: should the close not take, the expiry is waited for as before
                    if self._close_own_previous_session(stat.ephemeralOwner):
                        continue  # its registration went with it: the create succeeds now
                log.info("previous registration still present; waiting for its session to expire",
                         extra={"kv": {"path": path}})
                if not gone.wait(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(f"{path} is held by another live broker") from None

    def _session_file(self) -> Any:
        """Where this broker keeps its ZooKeeper session's id and password: its first log directory, which it holds
        locked (``.lock``) while it runs, so only a later process of the same broker reads it."""
        return self.config.log_dirs[0] / SESSION_FILE

    def _save_session(self) -> None:
        """Keep the session that holds the registration (see :meth:`_close_own_previous_session`)."""
        if not self.close_previous_session or self.zk is None:
            return
        try:
            session_id, password = self.zk.client_id
            # the password lets whoever reads it close the session: readable by the broker's user only
            atomic_write(self._session_file(), f"{session_id} {bytes(password).hex()}\n".encode(), mode=0o600)
        except Exception as exc:  # an optimisation of the next restart only: the broker runs on without it
            log.warning("could not keep the ZooKeeper session id", extra={"kv": {"error": repr(exc)}})

    def _close_own_previous_session(self, owner: int) -> bool:
        """After a crash (kill -9, OOM, power loss of the process) the previous process's session, and with it
        ``/brokers/ids/<id>`` and this broker's leaderships, lives on until ZooKeeper expires it
        (``zookeeper.session.timeout.ms``, 18 s by default). When the registration in the way belongs to the
        session this broker saved in its locked log directory, that process is gone (the lock is ours now):
        connect with that session's id and password and close it, as its owner may. ZooKeeper then deletes its
        ephemeral nodes at once and the controller moves the leaderships as it would on expiry. ZooKeeper stays
        the only judge of liveness: nothing is closed but a session whose owner this process provably replaces.
        Kafka waits for the expiry instead (``tidelog.zookeeper.close.previous.session=false``). Returns True
        when it closed that session."""
        if not self.close_previous_session:
            return False
        try:
            text = self._session_file().read_text().split()
            session_id, password = int(text[0]), bytes.fromhex(text[1])
        except (OSError, ValueError, IndexError):
            return False
        if session_id != owner or owner == self.zk.client_id[0]:
            return False
        from kazoo.client import KazooClient

        old = KazooClient(hosts=self.zk_connect, timeout=self.session_timeout_s, client_id=(session_id, password),
                          connection_retry={"max_tries": 3, "delay": 0.1, "backoff": 2, "max_delay": 1.0})
        try:
            old.start(timeout=max(10.0, self.session_timeout_s))
            resumed = old.client_id is not None and old.client_id[0] == session_id
        except Exception as exc:
            log.info("could not reach the previous ZooKeeper session", extra={"kv": {"error": repr(exc)}})
            return False
        finally:
            with contextlib.suppress(Exception):
                old.stop()  # closes the session it holds: the old one if it resumed it, else a new, empty one
            with contextlib.suppress(Exception):
                old.close()
        if resumed:
            log.info("closed the previous process's ZooKeeper session (not waiting for it to expire)",
                     extra={"kv": {"session": hex(session_id)}})
        return resumed

    async def before_shutdown(self) -> None:
        """Controlled shutdown, then stop the fetchers and the controller and leave ZooKeeper (called once, as the
        broker's shutdown begins)."""
        if not self._shutting_down and self.zk is not None and self.controlled_shutdown_enable:
            try:
                await self._controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown failed; shutting down without it")
        self.fetchers.shutdown()
        self.channel.close()
        if self.controller is not None:
            self.controller.stop()
        if self.zk is not None:
            zk, self.zk = self.zk, None
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._stop_zk, zk)

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

    @staticmethod
    def _stop_zk(zk: Any) -> None:
        zk.stop()
        zk.close()

    # -- ZooKeeper watches (kazoo thread) -> the loop ----------------------------------------------------------

    def post(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the event loop, from a watch callback or a worker thread (in the order posted)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    def _zk_state(self, state: Any) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: resigning every leadership")
            self._session_lost = True
            self._registration_zxid = float("inf")
            self.post(self._resign_all)
        elif state == KazooState.CONNECTED and self._session_lost and self.zk is not None:
            # a new session: our ephemeral registration died with the old one
            self._session_lost = False
            self.zk.handler.spawn(self._reregister)

    def on_log_dir_failure(self, root: Any, tps: list[tuple[str, int]], offline: bool, reason: str) -> None:
        """A log directory failed (``LogManager`` listener, on the thread that hit the error): tell the controller
        as Kafka's broker does (``/log_dir_event_notification/log_dir_event_<seq>``), with the failed replicas in
        the ephemeral ``/tidelog/offline_replicas/<id>`` (written first), so that it moves their leadership
        elsewhere and takes them out of the ISR. Leaders here answer KAFKA_STORAGE_ERROR meanwhile."""
        with self._offline_lock:
            self._offline_replicas.update(tps)
        for tp in tps:  # nothing more is replicated into a failed log (on the loop, where fetchers change)
            self.post(self.fetchers.remove, tp)
        if self.zk is None:
            return
        try:
            self._write_offline_replicas()
            self.zk.create(f"{zd.LOG_DIR_EVENT_NOTIFICATION}/{zd.LOG_DIR_EVENT_PREFIX}",
                           zd.encode_log_dir_event(self.node_id), sequence=True, makepath=True)
            log.warning("log directory failure notified to the controller", extra={"kv": {
                "log_dir": str(root), "partitions": len(tps)}})
        except Exception:
            log.exception("notifying the controller of the log directory failure failed", extra={"kv": {
                "log_dir": str(root)}})

    def _write_offline_replicas(self) -> None:
        from kazoo.exceptions import NodeExistsError

        with self._offline_lock:
            tps = sorted(self._offline_replicas)
        if not tps:
            return
        path, data = zd.offline_replicas_path(self.node_id), zd.encode_offline_replicas(tps)
        try:
            self.zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.zk.set(path, data)

    def _reregister(self) -> None:
        try:
            self._write_offline_replicas()  # a new session: the ephemeral list went with the old one
            self._register()
        except Exception:
            log.exception("re-registration in ZooKeeper failed")

    def _brokers_changed(self, children: list[str]) -> bool | None:
        if self.zk is None:
            return False
        live: dict[int, zd.BrokerInfo] = {}
        for c in children:
            with contextlib.suppress(Exception):
                data, _ = self.zk.get(zd.broker_path(int(c)))
                live[int(c)] = zd.decode_broker(int(c), data)
        self.post(self._set_live, live)
        return None

    def _controller_moved(self, data: Any, _stat: Any) -> bool | None:
        if self.zk is None:
            return False
        self.post(setattr, self, "controller_node", zd.decode_controller(data))
        return None

    def _topics_changed(self, children: list[str]) -> bool | None:
        if self.zk is None:
            return False
        for topic in children:
            if topic not in self._watched_topics:
                self._watched_topics.add(topic)
                self.zk.DataWatch(zd.topic_path(topic), self._assignment_watch(topic))
        return None

    def _assignment_watch(self, topic: str):
        def changed(data: Any, _stat: Any) -> bool | None:
            if self.zk is None:
                return False
            if data is None:
                self.post(self._on_topic_deleted, topic)
                return None
            a = zd.decode_topic(data)
            try:
                cfg_data, cfg_stat = self.zk.get(zd.topic_config_path(topic))
                cfg_version = cfg_stat.version
            except Exception:
                cfg_data, cfg_version = None, -1
            self.post(self._on_assignment, topic, a, zd.decode_topic_config(cfg_data), cfg_version)
            for p in a.partitions:
                if (topic, p) not in self._watched_states:
                    self._watched_states.add((topic, p))
                    self.zk.DataWatch(zd.state_path(topic, p), self._state_watch((topic, p)))
            return None

        return changed

    def _config_changes(self, children: list[str]) -> bool | None:
        """Kafka's config change listener (``ZkNodeChangeNotificationListener`` with ``DynamicConfigManager``'s
        handler): every notification newer than the last one processed names a topic whose
        ``/config/topics/<t>`` is read again and handed to the loop (:meth:`ZkTopicBackend.config_changed`);
        at start every notification present is processed (re-reading a config is harmless). Notifications
        older than ``CONFIG_CHANGE_EXPIRATION_S`` are deleted, by whichever broker sees them first."""
        from kazoo.exceptions import NoNodeError

        if self.zk is None:
            return False
        expired_before = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_S * 1000
        topics: dict[str, None] = {}
        for name in sorted(children):
            seq = zd.config_change_sequence(name)
            if seq is None:
                continue
            path = zd.config_change_path(name)
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue  # purged by another broker
            if seq > self._last_config_change:
                self._last_config_change = seq
                topic = zd.decode_config_change(data)
                if topic is not None:
                    topics[topic] = None
            if stat.ctime < expired_before:
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path)
        for topic in topics:
            try:
                data, stat = self.zk.get(zd.topic_config_path(topic))
                overrides = zd.decode_topic_config(data)
            except NoNodeError:
                continue  # the topic is gone (its assignment watch deals with that)
            except ValueError:
                log.error("unreadable topic config in ZooKeeper", extra={"kv": {"topic": topic}})
                continue
            self.post(self.topic_backend.config_changed, topic, overrides, stat.version)
            controller = self.controller
            if controller is not None and str(overrides.get("unclean.leader.election.enable", "")).lower() == "true":
                controller.topic_unclean_enabled(topic)  # Kafka's TopicConfigHandler: elect its offline partitions
        return None

    def _state_watch(self, tp: tuple[str, int]):
        def changed(data: Any, stat: Any) -> bool | None:
            if self.zk is None:
                return False
            if data:
                self.post(self._on_state, tp, zd.decode_state(data, stat.version), stat.mzxid)
            return None

        return changed

    # -- role changes (on the loop) ------------------------------------------------------------------------

    def _set_live(self, live: dict[int, zd.BrokerInfo]) -> None:
        until = time.monotonic() + self.departed_broker_s
        for bid, info in self.live.items():
            if bid not in live and self.departed_broker_s > 0:
                self._departed[bid] = (info, until)
        for bid in live:
            self._departed.pop(bid, None)
        for bid in self.live:
            if bid not in live:
                self.channel.forget(bid)  # gone from /brokers/ids: its connection with it
        self.live = live
        self._live_changed.set()
        self._live_changed = asyncio.Event()

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
        broker = self.broker
        for listener in (broker.group_coordinator, broker.txn_coordinator):
            if listener is None:
                continue
            try:
                listener.on_leadership_change(tp[0], tp[1], is_leader, leader_epoch)
            except Exception:
                log.exception("leadership change listener failed", extra={"kv": {
                    "listener": type(listener).__name__, "topic": tp[0], "partition": tp[1], "leader": is_leader}})

    def _leader_progress(self, r: Replica) -> None:
        if self.maybe_increment_high_watermark(r.tp, r.log):
            self.broker.purgatory.check_and_complete(r.tp)
        else:
            self.broker.purgatory.produce.check_and_complete(r.tp)  # the ISR may have fallen below min.insync.replicas

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
        if moved:  # an idle partition in a fetcher's request (same offset as last time) cannot move the HW
            self._leader_progress(r)

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
            stat = await asyncio.to_thread(zk.set, zd.state_path(*r.tp), zd.encode_state(new), version)
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

    # the read service's follower hooks (broker/fetch.py reads a follower's Fetch like a consumer's, up to the LEO)

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

    # -- follower side (the fetch loop itself is cluster/fetcher.py) ----------------------------------------

    async def leader_endpoint(self, leader: int) -> zd.BrokerInfo:
        while leader not in self.live:
            await self._live_changed.wait()
        return self.live[leader]

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
