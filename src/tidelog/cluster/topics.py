"""The topic store's ZooKeeper backend (:class:`ZkTopicBackend`, a ``broker.topics.TopicBackend``): topics are created in ZooKeeper (``/config/topics/<t>`` and the
assignment ``/brokers/topics/<t>``, as Kafka's AdminZkClient does, from whichever broker got the request); the
controller then elects leaders, and every broker adopts the topic (and creates the logs of its replicas) when
its watch sees the assignment.

Deletion is Kafka's ``/admin/delete_topics/<t>``: any broker queues it, the controller deletes the topic's znodes
and every broker deletes its replicas when its assignment watch sees the topic gone (:meth:`forget_topic`); a
broker that was down meanwhile deletes them at its next start (:meth:`remove_strays`). A replica moved away by
a reassignment is deleted the same way (:meth:`drop_partition`). Manual assignments (CreateTopics /
CreatePartitions ``assignments``) are checked against the registered brokers.

Topic configs are Kafka's dynamic topic configs in ZooKeeper mode: ``/config/topics/<t>`` holds the overrides and
is the source of truth. AlterConfigs / IncrementalAlterConfigs write it on the receiving broker (AdminZkClient's
``changeTopicConfig``: the new overrides and a ``/config/changes/config_change_<seq>`` notification, here in one
transaction conditional on the config znode's version); every broker (its ZkReplicaManager's notification listener)
reads the topic's config znode again and applies it to its logs (:meth:`config_changed`, Kafka's
``TopicConfigHandler``). At start the registry's overrides are replaced by ZooKeeper's before any log is
opened.

The store (``broker.topics.TopicManager``) is the same as a single node's; this backend says where its metadata
comes from. Besides the store's change calls, the broker's ZkReplicaManager calls it from its watches:
:meth:`ZkTopicBackend.adopt`, :meth:`~ZkTopicBackend.config_changed`, :meth:`~ZkTopicBackend.drop_partition`,
:meth:`~ZkTopicBackend.forget_topic` and :meth:`~ZkTopicBackend.remove_strays`."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tidelog.broker.topic_backend import TopicStore
from tidelog.broker.topics import TopicError, TopicInfo, new_topic_id
from tidelog.cluster import zkdata as zd
from tidelog.cluster.zk_async import ZooKeeperGone, zk_await, zk_wait
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.cluster.topics")


DELETE_TIMEOUT_S = 30.0  # DeleteTopics' wait when no timeout_ms is given (the console); a request's timeout_ms wins


class TopicCluster(Protocol):
    """What the backend uses of the broker's ZooKeeper replica manager (which makes it, with the store)."""

    zk: Any  # the kazoo client (None before the session is up)
    live: dict[int, zd.BrokerInfo]  # the registered brokers
    session_timeout_s: float  # zookeeper.session.timeout.ms: how long a request handler thread waits for ZooKeeper

    def live_brokers(self) -> set[int]: ...

    def post(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the broker's event loop."""
        ...


class ZkTopicBackend:
    # create_topic / create_partitions / change_configs only read local state and ZooKeeper and write ZooKeeper
    # (brokers adopt the result through their watches): the handlers run them in a request handler thread
    # (handlers.topic_change), so a ZooKeeper round trip (or a stall up to kazoo's timeout) never blocks the event
    # loop that serves produce, fetch and replication.

    def __init__(self, cluster: TopicCluster, store: TopicStore) -> None:
        self.cluster = cluster  # the broker's ZkReplicaManager: the ZooKeeper client, live brokers, post()
        self.store = store  # made by the store's constructor (TopicBackendFactory), which passes itself
        self.broker = store.broker  # its LogManager, node id, cluster id, purgatory, metrics
        # the /config/topics/<t> znode version each topic's overrides were read at (set by loaded / adopt)
        self._config_versions: dict[str, int] = {}
        self._deleted: dict[str, asyncio.Event] = {}
        self.registered_brokers: Callable[[], set[int]] | None = cluster.live_brokers
        self.drops_interrupted_creations = False  # ZooKeeper is the source of truth, not the registry file

    def loaded(self) -> None:
        """ZooKeeper's ``/config/topics/<t>`` over the registry's overrides (at start, in the storage thread,
        before the logs are opened with them): a change made while this broker was down is in effect from its
        first request on. A topic ZooKeeper does not have keeps the registry's overrides (the watches and
        :meth:`remove_strays` decide about it)."""
        from kazoo.exceptions import NoNodeError

        zk = self.cluster.zk
        if zk is None:
            return
        changed = False
        for info in self.store.all_topics():
            try:
                data, stat = zk.get(zd.topic_config_path(info.name))
                overrides = zd.decode_topic_config(data)
            except (NoNodeError, ValueError, AttributeError):
                continue
            self._config_versions[info.name] = stat.version
            if overrides != info.overrides:
                log.info("topic configs read from ZooKeeper", extra={"kv": {"topic": info.name,
                                                                            "configs": overrides or ""}})
                info.overrides, info.log_config = overrides, self.store.stored_log_config(info.name, overrides)
                changed = True
        if changed:
            self.store.persist()

    def log_manager_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs["cluster_id"] = self.broker.cluster_id or kwargs.get("cluster_id")  # ZooKeeper's /cluster/id
        return kwargs

    def adopt(self, name: str, topic_id: bytes | None, num_partitions: int, overrides: dict[str, str],
              local_partitions: list[int], config_version: int = -1) -> TopicInfo:
        """Make ``name`` known here as ZooKeeper has it (``overrides`` read from ``/config/topics/<t>`` at
        ``config_version``, -1 if that read failed); create the logs of the replicas hosted here."""
        store = self.store
        info = store.get(name)
        changed = False
        if info is not None and topic_id and bytes(topic_id) != info.topic_id:
            # deleted and created again while we were not looking: the old replicas go first
            self.forget_topic(name)
            info = None
        if info is None:
            info = TopicInfo(name, bytes(topic_id) if topic_id else new_topic_id(), num_partitions, overrides,
                             store.stored_log_config(name, overrides))
            store.publish(info)
            self._config_versions[name] = config_version
            changed = True
        else:
            self.config_changed(name, overrides, config_version)
            if num_partitions > info.num_partitions:
                info.num_partitions = num_partitions
                changed = True
        if changed:
            store.persist()
        for p in local_partitions:
            if store.get_log(name, p) is None:
                lg = self.broker.logs.get_log(name, p)
                store.set_log((name, p), lg or self.broker.logs.create_log(name, p, info.log_config, info.topic_id))
        return info

    def hosted_partitions(self, info: TopicInfo) -> Iterable[int]:
        """At start (``load``, in a worker thread, ZooKeeper connected, no watch yet): the partitions ZooKeeper
        assigns here, so no log of a partition hosted elsewhere is ever created. A topic ZooKeeper does not
        have, or has with another topic id (deleted while this broker was away), gets none: the watches and
        :meth:`remove_strays` sort out what is on disk."""
        from kazoo.exceptions import NoNodeError

        zk = self.cluster.zk
        if zk is None:
            return []
        try:
            a = zd.decode_topic(zk.get(zd.topic_path(info.name))[0])
        except (NoNodeError, ValueError, KeyError, TypeError):
            return []  # not in ZooKeeper (or unreadable): nothing is created now; the watch decides later
        if a.topic_id and bytes(a.topic_id) != info.topic_id:
            return []
        node = self.broker.node_id
        return [p for p, reps in sorted(a.partitions.items()) if node in reps and p < info.num_partitions]

    # -- local replicas going away --------------------------------------------------------------------------

    def drop_partition(self, name: str, partition: int) -> None:
        """This broker no longer hosts ``name-partition``: close the log, rename its directory to
        ``<dir>.<uuid>-delete`` and remove it in the background (Kafka's StopReplica with delete)."""
        self.store.pop_log((name, partition))
        try:
            if self.broker.logs.delete_log(name, partition):
                log.info("replica deleted", extra={"kv": {"topic": name, "partition": partition}})
        except Exception:
            log.exception("deleting replica failed", extra={"kv": {"topic": name, "partition": partition}})
        purgatory = self.broker.purgatory
        if purgatory is not None:
            purgatory.check_and_complete((name, partition))

    def forget_topic(self, name: str) -> None:
        """The topic is gone from ZooKeeper: delete the local replicas and forget it."""
        store = self.store
        info = store.unpublish(name)
        self._config_versions.pop(name, None)
        # every replica of the topic in one LogManager call: each log dir's checkpoints written once, not once per
        # partition (quadratic)
        tps = sorted(set(store.logs_of(name)) | {tp for tp in self.broker.logs.all_logs() if tp[0] == name})
        for tp in tps:
            store.pop_log(tp)
        try:
            self.broker.logs.delete_logs(tps)
        except Exception:
            log.exception("deleting replicas failed", extra={"kv": {"topic": name}})
        purgatory = self.broker.purgatory
        for tp in tps:
            if purgatory is not None:
                purgatory.check_and_complete(tp)
        if info is not None:
            store.persist()
            metrics = self.broker.metrics
            if metrics is not None:
                metrics.forget_topic(name)
            store.topic_deleted(name)  # this broker's coordinator drops the topic's offsets from its groups
            log.info("topic deleted here", extra={"kv": {"topic": name, "topic_id": info.topic_id_str}})
        event = self._deleted.pop(name, None)
        if event is not None:
            event.set()

    def remove_strays(self, zk_topics: set[str], assignments: dict[str, zd.TopicAssignment], node_id: int) -> None:
        """At start, once ZooKeeper's topics are read: delete replicas of topics deleted while this broker was
        away, and replicas no longer assigned here (topics tidelog keeps only locally, ``__``-prefixed internal
        ones, are left alone)."""
        for name in self.store.names():
            if name not in zk_topics and not name.startswith("__"):
                log.info("deleting the replicas of a topic deleted while away", extra={"kv": {"topic": name}})
                self.forget_topic(name)
        for (t, p) in list(self.broker.logs.all_logs()):
            a = assignments.get(t)
            if a is not None and node_id not in a.partitions.get(p, ()):
                self.drop_partition(t, p)

    # -- requests ---------------------------------------------------------------------------------------------

    def _zk(self, result: Any) -> Any:
        """The answer to a ZooKeeper request made from a request handler thread (kazoo's ``IAsyncResult``),
        waited for at most ``zookeeper.session.timeout.ms``: with ZooKeeper unreachable the request ends with
        REQUEST_TIMED_OUT (Kafka's answer when its controller or ZooKeeper cannot be reached in time) instead of
        holding the thread until a reconnect. ZooKeeper's own answers (NoNodeError...) are raised as they are."""
        from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError

        try:
            return zk_wait(result, self.cluster.session_timeout_s)
        except (ZooKeeperGone, ConnectionLoss, SessionExpiredError, ConnectionClosedError) as exc:
            reason = str(exc) if isinstance(exc, ZooKeeperGone) else type(exc).__name__
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper: {reason}.") from None

    def _live(self, need: int) -> list[int]:
        """The live brokers to place replicas on: this broker's watched view, and when that holds fewer than
        ``need``, ``/brokers/ids`` read now (a broker that registered a moment ago may not have reached the watch
        yet: a cluster just started rejected RF 3 with "larger than available brokers: 2" under load)."""
        live = set(self.cluster.live)
        if len(live) < need:
            live |= {int(c) for c in self._zk(self.cluster.zk.get_children_async(zd.BROKER_IDS)) if c.isdigit()}
        return sorted(live)

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str | None] | None, validate_only: bool,
                     assignments: dict[int, list[int]] | None) -> TopicInfo:
        """``assignments`` (already validated by the handler) replaces Kafka's placement."""
        from kazoo.exceptions import NodeExistsError

        store = self.store
        store.validate_new_name(name)
        if self._zk(self.cluster.zk.exists_async(zd.delete_topic_path(name))) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' is marked for deletion.")
        if assignments:
            num_partitions = len(assignments)
            replication_factor = len(next(iter(assignments.values())))
        num_partitions, replication_factor = store.counts_or_defaults(num_partitions, replication_factor)
        live = self._live(replication_factor)
        if not assignments and (replication_factor <= 0 or replication_factor > len(live)):
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: {len(live)}.",
            )
        overrides, cfg = store.validate_configs(configs)
        info = TopicInfo(name, new_topic_id(), num_partitions, overrides, cfg)
        assignment = dict(assignments) if assignments else zd.assign_replicas(live, num_partitions, replication_factor)
        self._check_open_files(name, assignment)
        if validate_only:
            return info
        zk = self.cluster.zk
        t = zk.transaction()
        t.create(zd.topic_config_path(name), zd.encode_topic_config(overrides))
        t.create(zd.topic_path(name), zd.encode_topic(zd.TopicAssignment(assignment, info.topic_id)))
        results = self._zk(t.commit_async())
        for res in results:
            if isinstance(res, NodeExistsError):
                raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            if isinstance(res, Exception) and type(res).__name__ != "RolledBackError":
                raise res
        log.info("topic created in ZooKeeper", extra={"kv": {"topic": name, "partitions": num_partitions,
                                                             "assignment": str(assignment)}})
        return info

    def auto_create(self, name: str) -> TopicInfo:
        # TOPIC_ALREADY_EXISTS (created by another request or broker; or queued for deletion) is the store's to
        # answer: LEADER_NOT_AVAILABLE until this broker's watch has adopted the topic (TopicManager.maybe_auto_create)
        return self.store.create_topic(name)

    async def delete_topic(self, name: str, timeout_s: float = DELETE_TIMEOUT_S) -> TopicInfo:
        """Queue ``/admin/delete_topics/<name>`` and wait until this broker has forgotten the topic (the
        controller deleted its znodes) for at most ``timeout_s``, the request's ``timeout_ms``: REQUEST_TIMED_OUT
        when that runs out, at once when it is 0 or less (the deletion goes on in both cases), as Kafka's
        ``ZkAdminManager.deleteTopics`` and its ``DelayedDeleteTopics``. The ZooKeeper requests that queue the
        deletion are awaited on the loop (:func:`~tidelog.cluster.zk_async.zk_await`, no worker thread waits for
        them) within ``zookeeper.session.timeout.ms``, the bound Kafka's ZooKeeper client puts on them: with
        ZooKeeper unreachable the request ends REQUEST_TIMED_OUT."""
        from kazoo.exceptions import KazooException, NodeExistsError

        loop = asyncio.get_running_loop()
        start = loop.time()
        zk_deadline = start + self.cluster.session_timeout_s
        info = self.store.get(name)
        zk = self.cluster.zk
        try:
            if info is None or await zk_await(zk.exists_async(zd.topic_path(name)),
                                              self.cluster.session_timeout_s) is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 "This server does not host this topic-partition.")
            event = self._deleted.setdefault(name, asyncio.Event())
            try:
                await zk_await(zk.create_async(zd.delete_topic_path(name), b"", makepath=True),
                               zk_deadline - loop.time())
            except NodeExistsError:
                pass  # already queued: wait for the same deletion
        except (ZooKeeperGone, KazooException) as exc:  # no answer in time; ConnectionLoss, SessionExpiredError...
            reason = str(exc) if isinstance(exc, ZooKeeperGone) else type(exc).__name__
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Deletion of topic '{name}' could not be queued: "
                                                          f"ZooKeeper: {reason}.") from None
        log.info("topic deletion queued", extra={"kv": {"topic": name}})
        if timeout_s <= 0:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Deletion of topic '{name}' queued (timeout_ms 0: not "
                                                          "waited for); it goes on in the background.")
        try:
            await asyncio.wait_for(event.wait(), max(0.0, start + timeout_s - loop.time()))
        except TimeoutError:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"Deletion of topic '{name}' did not complete in time; it goes "
                                                  "on in the background.") from None
        return info

    def _check_open_files(self, name: str, assignment: dict[int, list[int]]) -> None:
        """The open-file budget in a cluster (``TopicManager.check_open_files``): the broker that takes the
        request cannot see the others' descriptors, so it holds every broker to its own headroom, as if the
        brokers were alike (the usual case: one config, one ``ulimit -n``): the most new replicas any one broker
        gets must fit. POLICY_VIOLATION before anything is written to ZooKeeper. Kafka has no such check."""
        per_broker = collections.Counter(b for replicas in assignment.values() for b in replicas)
        if per_broker:
            self.store.check_open_files(name, max(per_broker.values()))

    @staticmethod
    def _check_added_assignments(assignments: list[list[int]], increment: int, first_rf: int,
                                 registered: set[int], current: int) -> dict[int, list[int]]:
        """Kafka's ZK-mode checks of CreatePartitions ``assignments`` (``ZkAdminManager.createPartitions``,
        ``AdminZkClient.validateReplicaAssignment``), with its messages."""
        unknown = sorted({b for reps in assignments for b in reps} - registered)
        if unknown:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        if len(assignments) != increment:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Increasing the number of partitions by {increment} "
                                                           f"but {len(assignments)} assignments provided.")
        added = {current + i: list(reps) for i, reps in enumerate(assignments)}
        for p, reps in added.items():
            if not reps:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Cannot have replication factor of 0 for partition "
                                                               f"id {p}.")
            if len(set(reps)) != len(reps):
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate brokers not allowed in replica "
                                                               f"assignment: {', '.join(map(str, reps))} for "
                                                               f"partition id {p}.")
        bad = [(p, len(reps)) for p, reps in added.items() if len(reps) != first_rf]
        if bad:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Inconsistent replication factor between partitions, "
                             f"partition 0 has {first_rf} while partitions [{', '.join(str(p) for p, _ in bad)}] "
                             f"have replication factors [{', '.join(str(n) for _, n in bad)}], respectively.")
        return added

    def create_partitions(self, name: str, total_count: int, validate_only: bool,
                          assignments: list[list[int]] | None) -> TopicInfo:
        """Extend the assignment in ``/brokers/topics/<t>`` (a write conditional on the znode's version), placed
        as Kafka's ``AdminZkClient.addPartitions`` does: the rack-unaware assignment continued from the partition
        count, starting at (and shifting by) the index of partition 0's first replica among the live brokers.
        The controller then elects leaders of the new partitions and every broker adopts them via its watch."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        zk = self.cluster.zk
        for _attempt in range(10):
            try:
                data, stat = self._zk(zk.get_async(zd.topic_path(name)))
            except NoNodeError:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.") from None
            a = zd.decode_topic(data)
            current = len(a.partitions)
            if total_count == current:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            if total_count < current:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic currently has {current} partitions, which is higher "
                                                       f"than the requested {total_count}.")
            first = a.partitions.get(0) or next(iter(a.partitions.values()))
            live = self._live(len(first))
            if assignments is not None:
                added = self._check_added_assignments(assignments, total_count - current, len(first), set(live),
                                                      current)
            elif len(first) > len(live):
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor: {len(first)} larger than available brokers: {len(live)}.")
            else:
                start = max(0, next((i for i, b in enumerate(live) if b >= first[0]), 0))
                added = zd.assign_replicas(live, total_count - current, len(first), start_index=start,
                                           start_partition=current, next_shift=start)
            info = self.store.get(name) or TopicInfo(name, a.topic_id or new_topic_id(), current, {},
                                                     self.store.default_log_config())
            self._check_open_files(name, added)
            if validate_only:
                return info
            new = zd.TopicAssignment({**a.partitions, **added}, a.topic_id, a.adding, a.removing)
            try:
                self._zk(zk.set_async(zd.topic_path(name), zd.encode_topic(new), version=stat.version))
            except BadVersionError:
                continue  # changed meanwhile (another CreatePartitions): decide again on the new assignment
            log.info("partitions added in ZooKeeper", extra={"kv": {"topic": name, "from": current,
                                                                    "to": total_count, "assignment": str(added)}})
            return info
        raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                         f"the assignment of '{name}' kept changing")

    # -- topic configs ------------------------------------------------------------------------------------------

    def change_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str | None]],
                       validate_only: bool) -> TopicInfo:
        """Kafka's ``AdminZkClient.changeTopicConfig``, blocking (the handlers run it in a worker thread): read
        ``/config/topics/<t>``, validate ``change(its overrides)``, then write the result and a
        ``/config/changes/config_change_<seq>`` notification in one transaction conditional on the config
        znode's version (changed meanwhile: read and apply the change again). ``validate_only`` stops after the
        validation. Every broker applies it through its notification listener; this one also right away (posted
        to the loop before the handler resumes, so a DescribeConfigs here reads the change back)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        info = self.store.require(name)
        zk = self.cluster.zk
        path = zd.topic_config_path(name)
        for _attempt in range(10):
            try:
                data, stat = self._zk(zk.get_async(path))
                current, version = zd.decode_topic_config(data), stat.version
            except NoNodeError:
                if self._zk(zk.exists_async(zd.topic_path(name))) is None:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.") from None
                current, version = {}, -1  # a topic without a config znode: created by this write
            overrides, _cfg = self.store.validate_configs(change(current))
            if validate_only:
                return info
            t = zk.transaction()
            if version < 0:
                t.create(path, zd.encode_topic_config(overrides))
            else:
                t.set_data(path, zd.encode_topic_config(overrides), version=version)
            t.create(zd.config_change_path(), zd.encode_config_change(zd.topic_entity_path(name)), sequence=True)
            results = self._zk(t.commit_async())
            if any(isinstance(res, BadVersionError | NodeExistsError | NoNodeError) for res in results[:1]):
                continue  # the config znode changed (or went) meanwhile
            for res in results:
                if isinstance(res, Exception) and type(res).__name__ != "RolledBackError":
                    raise res
            log.info("topic configs changed in ZooKeeper", extra={"kv": {"topic": name, "configs": overrides or ""}})
            self.cluster.post(self.config_changed, name, overrides, version + 1)
            return info
        raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"the configs of '{name}' kept changing")

    def config_changed(self, name: str, overrides: dict[str, str], version: int) -> None:
        """On the loop: ``/config/topics/<name>`` holds ``overrides`` at znode ``version`` (read after a change
        notification, with the assignment, or written here); apply them to the topic and its local logs (Kafka's
        ``TopicConfigHandler.processConfigChanges``). A read older than one already applied is ignored, as is a
        failed read (-1)."""
        info = self.store.get(name)
        if info is None or version < 0 or version < self._config_versions.get(name, -1):
            return
        self._config_versions[name] = version
        if overrides != info.overrides:
            self.store.apply_overrides(info, overrides, self.store.stored_log_config(name, overrides))
