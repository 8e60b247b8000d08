"""ZooKeeper mode's replica manager, its session and registration: connecting (and learning the cluster id),
registering ``/brokers/ids/<id>`` (waiting out, or closing, a previous process's session), starting the watches
and the controller, re-registering after a new session, telling the controller of a failed log directory.
Kafka's ``KafkaZkClient`` registration and ``BrokerLifecycle`` pieces. Part of ``ZkReplicaManager``
(:mod:`tidelog.cluster.replica_state`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from tidelog.broker.topics import new_cluster_id
from tidelog.cluster import zkdata as zd
from tidelog.cluster.controller import Controller
from tidelog.cluster.replica_state import ZkReplicaState
from tidelog.cluster.zk_bounded import log_zk_failure
from tidelog.storage.checkpoints import atomic_write

log = logging.getLogger("tidelog.cluster.broker")

#: in the broker's first log directory: the id and password of the ZooKeeper session holding its registration
SESSION_FILE = "zookeeper.session"


class ZkSession(ZkReplicaState):
    """The ZooKeeper session and this broker's registration."""

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

    @staticmethod
    def _stop_zk(zk: Any) -> None:
        zk.stop()
        zk.close()

    async def _close_session(self, zk: Any) -> None:
        """Close the ZooKeeper session (its ephemeral registration goes at once) waiting at most
        ``zookeeper.session.timeout.ms``: past that the session expires on the server by itself, so waiting longer
        for the close gains nothing. kazoo's ``stop()`` waits for its connection thread, which with ZooKeeper frozen
        sits in a connect attempt for up to the session timeout; it runs in a daemon thread of its own (not the
        default executor, whose threads the interpreter joins at exit), so a close that does not finish in time is
        left behind and the broker stops anyway."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished(exc: BaseException | None) -> None:
            if not done.done():
                done.set_result(None)
            if exc is not None:
                log.info("closing the ZooKeeper session failed", extra={"kv": {"error": repr(exc)}})

        def close() -> None:
            exc: BaseException | None = None
            try:
                self._stop_zk(zk)
            except BaseException as e:  # WriterNotClosedException, ...: the broker stops anyway
                exc = e
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(finished, exc)

        threading.Thread(target=close, name=f"zk-close-{self.node_id}", daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(done), self.session_timeout_s)
        except TimeoutError:
            log.warning("ZooKeeper session not closed within zookeeper.session.timeout.ms; stopping without it (it "
                        "expires on the server)", extra={"kv": {"timeout_ms": int(self.session_timeout_s * 1000)}})

    _zk_down_since: float | None = None  # monotonic time of the SUSPENDED that began the current outage

    def _zookeeper_gone(self) -> str | None:
        """Why this broker's ZooKeeper session is lost or expiring, or None: kazoo reported it lost (expired,
        closed), or the connection has been down for ``zookeeper.session.timeout.ms`` (a running ZooKeeper expires a
        session it has not heard from for that long, and the controller then moves its leaderships as after a
        crash; one that is frozen or gone answers nobody). Read on the loop, set on kazoo's thread."""
        if self._session_lost:
            return "ZooKeeper session lost"
        since = self._zk_down_since
        if since is not None:
            down = time.monotonic() - since
            if down >= self.session_timeout_s:
                return (f"ZooKeeper unreachable for {down:.1f} s, longer than zookeeper.session.timeout.ms "
                        f"({self.session_timeout_s * 1000:.0f} ms): its session is expired or expiring")
        return None

    def post(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the event loop, from a watch callback or a worker thread (in the order posted)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    _zk_connected = True  # False from a SUSPENDED until the next CONNECTED (read on the loop, set by kazoo)

    @property
    def coordinating(self) -> bool:
        """The coordinators may answer: this broker's ZooKeeper connection is up (see ``ReplicaManager``)."""
        return self._zk_connected

    def _zk_state(self, state: Any) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.SUSPENDED:
            # connection to ZooKeeper down: the session may expire on the server and the controller elect others
            # for what this broker leads, and unlike Kafka's controller (LeaderAndIsr) nothing here tells it so;
            # the coordinators stop answering until the connection is back (a stale OffsetFetch was seen otherwise)
            self._zk_connected = False
            if self._zk_down_since is None:
                self._zk_down_since = time.monotonic()
            log.warning("ZooKeeper connection suspended: coordinators answer NOT_COORDINATOR until it is back")
        elif state == KazooState.CONNECTED:
            if not self._zk_connected:
                log.info("ZooKeeper connection back: coordinators answer again")
            self._zk_connected = True
            self._zk_down_since = None
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: resigning every leadership")
            self._session_lost = True
            self._registration_zxid = float("inf")
            self.post(self._resign_all)
        elif state == KazooState.CONNECTED and self._session_lost and self.zk is not None:
            if self._shutting_down or self.stopping:
                return  # a broker on its way out does not register again (the old session's end moved its leaderships)
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
        # the ZooKeeper writes on a thread of their own (Kafka's LogDirFailureHandler thread): the failing thread may
        # be the event loop, and with ZooKeeper unreachable kazoo's blocking calls wait until it is back (then the
        # notification is delivered); a daemon thread, so a broker stopping meanwhile does not wait for it
        threading.Thread(target=self._notify_log_dir_failure, args=(str(root), len(tps)), daemon=True,
                         name="log-dir-failure-handler").start()

    def _notify_log_dir_failure(self, root: str, partitions: int) -> None:
        try:
            self._write_offline_replicas()
            self.zk.create(f"{zd.LOG_DIR_EVENT_NOTIFICATION}/{zd.LOG_DIR_EVENT_PREFIX}",
                           zd.encode_log_dir_event(self.node_id), sequence=True, makepath=True)
            log.warning("log directory failure notified to the controller", extra={"kv": {
                "log_dir": root, "partitions": partitions}})
        except Exception as exc:
            log_zk_failure(log, "notifying the controller of the log directory failure failed", exc, {"log_dir": root})

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
        except Exception as exc:
            log_zk_failure(log, "re-registration in ZooKeeper failed", exc)
