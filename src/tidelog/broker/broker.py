"""The broker: one object assembled from parts, the same class in single-node and ZooKeeper mode.

Parts (docs/ARCHITECTURE.md, "The broker, composed"; docs/decisions/0004-one-broker-composed-from-parts.md):

* ``socket_server`` (:class:`~tidelog.broker.server.SocketServer`): the listener and the connections; the network
  loop frames, dispatches and sends (Kafka's SocketServer);
* ``replica_manager``: partition state and the cluster view (leadership, leader epochs, ISR, high watermark,
  what Metadata says), chosen by the composition root (``tidelog.node``):
  :class:`~tidelog.broker.replica_manager.LocalReplicaManager` for one node, ZooKeeper mode's ``ZkReplicaManager``;
  it also makes the topic manager and the producer-id manager and brings the APIs only its mode serves;
* ``topics`` (the topic store), ``logs`` (storage's LogManager), ``read_service`` (the one Fetch read path),
  ``purgatory`` (DelayedProduce / DelayedFetch), ``group_coordinator``, ``producer_ids``, ``fetch_sessions``,
  ``txn_coordinator``, ``request_pool`` and ``append_sequencer`` (the request handler threads and the per-partition append order),
  ``metrics``.

Handlers reach everything through ``ctx.broker``. The replica manager's partition-state methods are bound as the
broker's own attributes (``broker.leader_log``, ``broker.isr``, ...), so the hot path makes one call, not two.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tidelog.broker.config import BrokerConfig
from tidelog.broker.connection_limits import ConnectionBudget, limits_from
from tidelog.broker.dynamic_config import DynamicBrokerConfig
from tidelog.broker.features import FinalizedFeatures
from tidelog.broker.fetch import ReadService
from tidelog.broker.fetch_session import FetchSessionCache
from tidelog.broker.group.coordinator import GroupCoordinator
from tidelog.broker.group.lag import group_lag_rows
from tidelog.broker.group.share_coordinator import ShareCoordinator
from tidelog.broker.group_configs import GroupConfigs, open_group_configs

# the APIs every broker serves: importing the handler modules registers them in REGISTRY
from tidelog.broker.handlers import (  # noqa: F401
    REGISTRY,
    acls,
    admin,
    configs,
    consumer_group,
    core,
    describe_topics,
    features,
    group,
    producer_id,
    quotas,
    replication_admin,
    security,
    share_group,
    share_offsets,
    share_state,
    storage_admin,
    telemetry,
    txn,
)
from tidelog.broker.metrics import BrokerMetrics
from tidelog.broker.purgatory import Purgatory
from tidelog.broker.quotas import ClientQuotaManager, QuotaStore
from tidelog.broker.replica_manager import LocalReplicaManager, ReplicaManager, ReplicaManagerFactory
from tidelog.broker.request_pool import (
    AppendSequencer,
    DecompressionBudget,
    RequestHandlerPool,
    default_heavy_slots,
)
from tidelog.broker.security.authorizer import AclChanges, Authorizer, authorizer_enabled, parse_super_users
from tidelog.broker.security.listeners import build_listeners
from tidelog.broker.server import SocketServer
from tidelog.broker.topics import TopicManager, new_cluster_id
from tidelog.broker.txn.coordinator import TransactionCoordinator
from tidelog.protocol import codec
from tidelog.storage.checkpoints import read_meta_properties
from tidelog.storage.manager import LogManager
from tidelog.storage.progress import RecoveryProgress

log = logging.getLogger("tidelog.broker.server")


class Broker:
    """A tidelog broker. ``replica_manager`` decides the mode (default: one node alone)."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManagerFactory | None = None,
                 txn_coordinator: Callable[[Broker], Any] = TransactionCoordinator,
                 recovery_progress: RecoveryProgress | None = None) -> None:
        self.config = config
        self.recovery_progress = recovery_progress  # shows a long log recovery (``tidelog serve``: a bar)
        # dynamic broker configs (issue 27): the stored layers are merged into ``config`` before any part reads it
        # given this broker (as dynamic_config.LiveBroker) to reconfigure it once it runs: see DynamicBrokerConfig
        self.dynamic_config = DynamicBrokerConfig(config, self)
        self.dynamic_config.load()
        self.node_id = config.node_id
        self.cluster_id: str = config.cluster_id or ""
        # one socket server per listener; each advertises its own endpoint (Metadata answers with the endpoints
        # of the listener a request arrived on, as Kafka does); host/port: the inter-broker listener's
        self.listeners = build_listeners(config)
        self.endpoints: dict[str, tuple[str, int]] = {}
        for li in self.listeners:
            adv = li.advertised
            self.endpoints[li.name] = (
                (adv.host, adv.port) if adv is not None
                else (li.host if li.host not in ("", "0.0.0.0") else "127.0.0.1", li.port))
        self.host, self.port = self.endpoints[config.listener.name]
        # SCRAM credentials: the replica manager's store (one node: a file in the first log dir; ZooKeeper mode:
        # /config/users), made with the storage
        self.scram_credentials: Any = None
        self.group_configs: GroupConfigs | None = None  # dynamic GROUP configs, opened with the storage
        # the ACL authorizer (authorizer.class.name); None: no authorization, one attribute test per request
        self.authorizer: Authorizer | None = None
        self.logs: Any = None
        self.topics: TopicManager = None  # type: ignore[assignment]
        self.purgatory = Purgatory()
        self.metrics: BrokerMetrics = BrokerMetrics()
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"),
                                                config.get("min.incremental.fetch.session.eviction.ms"))
        self.metrics.add_rows_source(self.fetch_sessions.rows)
        self.producer_ids: Any = None
        # Kafka's request handler threads (num.io.threads) and the per-partition append order they must keep
        self.request_pool = RequestHandlerPool(config.get("num.io.threads"))
        # at most this many produce validations that inflate past the light pass's bytes run at once (issue 24)
        slots = config.get("tidelog.decompression.heavy.slots")
        self.decompression_budget = DecompressionBudget(slots if slots else default_heavy_slots(),
                                                        config.get("tidelog.decompression.unbudgeted.bytes"))
        self.metrics.add_rows_source(self.decompression_budget.rows)
        self.loop: asyncio.AbstractEventLoop | None = None  # the network loop (set by start)
        self.append_sequencer = AppendSequencer()
        self.stopping: bool = False
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._shutdown_started = False
        self.started = False
        #: transaction.version as finalized here (UpdateFeatures may lower it; broker/txn/tv2.py reads it)
        self.finalized_features = FinalizedFeatures()
        self.group_coordinator: Any = None
        self.share_coordinator: ShareCoordinator | None = None  # __share_group_state (KIP-932), made at start
        self.txn_coordinator: Any = None

        # the replica manager is made here, given this broker (the composition root chose which one)
        rm: ReplicaManager = (replica_manager or LocalReplicaManager)(self)
        self.replica_manager = rm
        # partition state, bound once: the handlers' one leadership check, epochs, ISR, high watermark, Metadata
        self.leader_log = rm.leader_log
        self.isr = rm.isr
        self.leader_epoch = rm.leader_epoch
        self.maybe_increment_high_watermark = rm.maybe_increment_high_watermark
        self.become_leader = rm.become_leader
        self.high_watermark = rm.high_watermark
        self.partition_metadata = rm.partition_metadata
        self.metadata_brokers = rm.metadata_brokers
        self.metadata_controller_id = rm.metadata_controller_id
        # the APIs this broker serves: every broker's, plus its mode's
        self.handlers: dict[int, Any] = {**REGISTRY, **rm.handlers}
        groups = {k: r for k, r in codec.GROUP_API_VERSIONS.items() if k in self.handlers}
        self.accepted_versions: dict[int, tuple[int, int]] = {**codec.ACCEPTED_VERSIONS,
                                                              **codec.accepted_versions(groups)}
        # the one Fetch read path (consumers and followers); the replica manager is the leader side of followers
        self.read_service = ReadService(self.leader_log, self.leader_epoch, self.purgatory, self.metrics,
                                        followers=rm.followers)
        self.connections: set = set()
        # max.connections, max.connections.per.ip(.overrides), queued.max.request.bytes (issue 16)
        self.connection_quotas, self.request_memory = limits_from(config)
        self.metrics.add_rows_source(self.connection_quotas.rows)
        self.connection_budget: ConnectionBudget | None = None  # max.connections from the descriptors (start)
        # client quotas (user / client-id; broker/quotas.py): values from the replica manager's quota store
        self.client_quotas = ClientQuotaManager(config.get("quota.window.num"), config.get("quota.window.size.seconds"),
                                                config.get("tidelog.quota.sensors.max"),
                                                config.get("tidelog.quota.sensor.expiration.ms"))
        self.metrics.add_rows_source(self.client_quotas.rows)
        self.quota_store: QuotaStore | None = None  # the replica manager's, made when storage opens
        self.socket_servers = [SocketServer(self, li, self.connections) for li in self.listeners]
        self.socket_server = next(s for s in self.socket_servers if s.listener.name == config.listener.name)
        # the transaction coordinator (KIP-98): state in __transaction_state, markers to partition leaders
        self.txn_coordinator = txn_coordinator(self)

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The advertised (host, port) of ``listener`` (this broker's inter-broker endpoint if unknown)."""
        return self.endpoints.get(listener) or (self.host, self.port)

    def node_endpoint(self, node: tuple[int, str, int], listener: str) -> tuple[int, str, int]:
        """(id, host, port) of a broker as seen from ``listener`` (a coordinator found elsewhere in a cluster is
        given with the endpoint of the listener the client uses)."""
        if node[0] == self.node_id:
            return (self.node_id, *self.endpoint(listener))
        for b in self.metadata_brokers(listener) or ():
            if b["node_id"] == node[0]:
                return node[0], b["host"], b["port"]
        return node

    def partitions_changed(self) -> None:
        """The topic store added or removed partitions (on the changing thread): the derived max.connections
        follows the descriptors they hold (issue 24); nothing to do before the listeners are bound."""
        budget = self.connection_budget
        if budget is not None:
            budget.refresh_soon()

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as one of the broker's background tasks (cancelled at shutdown)."""
        assert self.loop is not None
        self._tasks.append(self.loop.create_task(coro))

    def on_append(self, tp: tuple[str, int], log_: Any) -> None:
        """Called by Produce after a successful append. An append alone completes no acks=all produce unless it
        moved the HW (a single replica in the ISR): with followers only the fetches waiting for bytes are checked
        (pipelined produces would otherwise be re-checked on every append of their connection)."""
        if self.maybe_increment_high_watermark(tp, log_):
            self.purgatory.check_and_complete(tp)
        else:
            self.purgatory.fetch.check_and_complete(tp)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def _open_storage(self) -> None:
        """Blocking: recovery, loading the topic registry. Runs in a thread before serving."""
        cfg = self.config
        for d in cfg.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        store = self.replica_manager.make_broker_config_store(self, self.dynamic_config.store_changed)
        if store is not None:  # ZooKeeper mode: /config/brokers, read before the topic defaults are used
            self.dynamic_config.use_store(store)
        self.topics = self.replica_manager.make_topic_manager(self)
        self.logs = LogManager(list(cfg.log_dirs), cfg.log_config(), recovery_progress=self.recovery_progress,
                               **self.topics.log_manager_kwargs())
        self.logs.startup(self.topics.topic_config)
        # ZooKeeper mode tells the controller (/log_dir_event_notification); one node has no one to tell
        self.logs.add_dir_failure_listener(self.replica_manager.on_log_dir_failure)
        self.topics.load()
        for info in self.topics.all_topics():
            for p in range(info.num_partitions):
                lg = self.topics.get_log(info.name, p)
                if lg is not None:
                    self.become_leader((info.name, p), lg)
        self.cluster_id = self.cluster_id or self._cluster_id_from_storage()
        self.producer_ids = self.replica_manager.make_producer_id_manager(self)
        self.scram_credentials = self.replica_manager.make_scram_store(self)
        self.group_configs = open_group_configs(self.config.props, self.replica_manager.make_group_config_store(self),
                                                self.loop)
        # the store is made with the manager's listener (changes are applied on the loop); AlterClientQuotas writes it
        self.quota_store = self.replica_manager.make_quota_store(self, self.client_quotas.listener_on(self.loop))
        self.client_quotas.set_entities(self.quota_store.entities())
        if authorizer_enabled(cfg.get("authorizer.class.name")):
            # made first: the store announces its ACLs into it, the authorizer (which writes through the store) listens
            acl_changes = AclChanges()
            self.authorizer = Authorizer(self.replica_manager.make_acl_store(self, acl_changes), acl_changes,
                                         parse_super_users(cfg.get("super.users")),
                                         cfg.get("allow.everyone.if.no.acl.found"))
            log.info("authorizer on", extra={"kv": {"class": cfg.get("authorizer.class.name"),
                                                    "acls": len(self.authorizer.bindings()),
                                                    "super.users": ";".join(sorted(self.authorizer.super_users)),
                                                    "allow.everyone.if.no.acl.found":
                                                        cfg.get("allow.everyone.if.no.acl.found")}})

    def _cluster_id_from_storage(self) -> str:
        cid = self.logs.cluster_id
        if cid:
            return str(cid)
        for d in self.config.log_dirs:
            meta = read_meta_properties(Path(d) / "meta.properties")
            if meta is not None and meta.cluster_id:
                return str(meta.cluster_id)
        return new_cluster_id()

    async def start(self) -> None:
        """Open storage (recovery runs in a thread), bind the listener, start background tasks."""
        self.loop = asyncio.get_running_loop()
        for server in self.socket_servers:  # a port in use stops the start before anything is written
            server.check_free()
        ml = self.config.metrics_listener
        if ml is not None:  # so does a taken metrics port
            self.metrics.ready = lambda: self.started and not self.stopping
            await self.metrics.start_http(*ml)
        await self.replica_manager.before_storage()
        t0 = time.monotonic()
        await asyncio.to_thread(self._open_storage)
        log.info(
            "storage ready",
            extra={"kv": {"log_dirs": ",".join(str(d) for d in self.config.log_dirs),
                          "topics": len(self.topics.names()), "seconds": round(time.monotonic() - t0, 3)}},
        )
        self.metrics.set_partition_source(self._partition_metrics)
        if self.logs.cleaner is not None:
            self.metrics.add_rows_source(self.logs.cleaner.metrics)
        self.metrics.add_rows_source(self.logs.metrics_rows)
        self.group_coordinator = GroupCoordinator(self)
        self.share_coordinator = ShareCoordinator(self)  # __share_group_state (KIP-932)
        # the coordinators follow partition leadership (broker/leadership.py): each loads the partitions of its
        # internal topic this broker leads, in the background, and unloads those it no longer leads
        self.replica_manager.leadership.listen((self.group_coordinator, self.txn_coordinator,
                                                self.share_coordinator))
        await self.group_coordinator.start()
        await self.txn_coordinator.start()
        self.replica_manager.start_leadership()  # one node: leader of everything it hosts, announced now
        for server in self.socket_servers:
            bound = server.bind()
            if server.listener.advertised is None and server.listener.port == 0:
                self.endpoints[server.listener.name] = (self.endpoints[server.listener.name][0], bound)
        self.host, self.port = self.endpoints[self.config.listener.name]
        loop = self.loop
        # max.connections: derived from the open-file limit unless set (issue 24), once the listeners hold theirs
        self.connection_budget = ConnectionBudget(self.connection_quotas, self.topics.open_files.reserve,
                                                  "max.connections" in self.config.props, self._hosted_files)
        self.connection_budget.start()
        for server in self.socket_servers:
            server.start()
        self._tasks.append(loop.create_task(self._tick_loop()))
        self._tasks.append(loop.create_task(self._loop_lag_monitor()))
        self.metrics.add_rows_source(lambda: group_lag_rows(self.group_coordinator, self.logs))
        self.started = True
        log.info(
            "broker started",
            extra={"kv": {"node.id": self.node_id, "cluster.id": self.cluster_id,
                          "listener": f"{self.socket_servers[0].listener.name}://{self.socket_servers[0].bind_host}:"
                                      f"{self.socket_servers[0].bind_port}",
                          "inter.broker.listener": self.socket_server.listener.name,
                          "listeners": ",".join(f"{s.listener.name}({s.listener.protocol})://{s.bind_host}:"
                                                f"{s.bind_port}" for s in self.socket_servers),
                          "advertised": ",".join(f"{n}://{h}:{p}" for n, (h, p) in self.endpoints.items()),
                          "loop": type(loop).__module__.split(".")[0]}},
        )
        await self.replica_manager.after_listen()

    async def _tick_loop(self) -> None:
        """Drive the log manager's periodic work (retention, checkpoints, flushes) from the loop."""
        interval = self.config.get("tidelog.log.tick.interval.ms") / 1000.0
        while not self.stopping:
            await asyncio.sleep(interval)
            try:
                # LogManager is thread-safe and its tick flushes and writes checkpoints (fsync): off the loop
                await asyncio.to_thread(self.logs.tick, time.time_ns() // 1_000_000)
            except Exception:
                log.exception("log manager tick failed")
            budget = self.connection_budget
            if budget is not None and budget.current is not None:  # segments rolled or deleted, topics changed
                try:
                    budget.apply(await asyncio.to_thread(budget.derive))
                except Exception:
                    log.exception("deriving max.connections failed")

    def _hosted_files(self) -> tuple[int, int]:
        """(partitions, segment .log files) this broker holds open: one descriptor per segment file."""
        logs = self.logs.all_logs()
        return len(logs), sum(lg.segment_count for lg in logs.values())

    async def _loop_lag_monitor(self, period: float = 0.1, window: int = 50) -> None:
        """Event-loop lag: how late a ``period`` timer fires. Every sample goes to a histogram; the gauge holds
        the worst of the last ``window`` samples (5 s), so a scrape sees a stall that ended before it."""
        recent: collections.deque[float] = collections.deque(maxlen=window)
        while not self.stopping:
            t0 = time.monotonic()
            await asyncio.sleep(period)
            lag = max(0.0, time.monotonic() - t0 - period)
            recent.append(lag)
            self.metrics.loop_lag.observe(lag)
            self.metrics.loop_lag_max.set(max(recent))

    def _partition_metrics(self) -> Iterable[tuple[str, int, int, int, int, int, int]]:
        if self.topics is None:
            return
        for name in self.topics.names():
            info = self.topics.get(name)
            if info is None:
                continue
            for p in range(info.num_partitions):
                lg = self.topics.get_log(name, p)
                if lg is None:
                    continue
                yield (name, p, lg.size_in_bytes, lg.log_start_offset, lg.log_end_offset, lg.high_watermark,
                       lg.last_stable_offset)

    async def shutdown(self) -> None:
        """Graceful stop: the replica manager's part first (cluster mode: controlled shutdown), then stop
        accepting, let in-flight requests finish, close connections, shut storage down (which writes the
        clean-shutdown marker)."""
        if self._shutdown_started:  # a second SIGTERM, or a test and serve() both: wait for the first
            await self._stopped.wait()
            return
        self._shutdown_started = True
        await self.replica_manager.before_shutdown()
        self.stopping = True
        log.info("broker shutting down", extra={"kv": {"connections": len(self.connections)}})
        loop = asyncio.get_running_loop()
        for server in self.socket_servers:
            await server.stop_accepting()
        # complete long polls now so their responses go out
        self.purgatory.shutdown()
        if self.group_coordinator is not None:  # answers waiting joins/syncs NOT_COORDINATOR
            self.group_coordinator.shutdown()
        if self.txn_coordinator is not None:  # stops timers and marker sending (resumed from the log at restart)
            self.txn_coordinator.shutdown()
        await self.socket_server.close_connections()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.metrics.stop_http()
        await loop.run_in_executor(None, self.request_pool.shutdown)
        await loop.run_in_executor(None, self.decompression_budget.shutdown)
        if self.logs is not None:
            await loop.run_in_executor(None, self.logs.shutdown)
        log.info("broker stopped")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
