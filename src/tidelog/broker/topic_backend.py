"""Where topic metadata lives: the :class:`TopicBackend` interface of the topic store
(:class:`tidelog.broker.topics.TopicManager`) and :class:`LocalTopicBackend`, single-node mode's (the registry file
is the source of truth; changes are made here and now). ZooKeeper mode's is ``cluster.topics.ZkTopicBackend``."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.topic_model import TopicError, TopicInfo, new_topic_id
from tidelog.errors import ErrorCode
from tidelog.storage.open_files import describe_os_error

if TYPE_CHECKING:
    import asyncio
    import threading

    from tidelog.broker.config import BrokerConfig
    from tidelog.broker.metrics import BrokerMetrics
    from tidelog.broker.purgatory import Purgatory
    from tidelog.storage.config import LogConfig
    from tidelog.storage.log.partition_log import PartitionLog
    from tidelog.storage.manager import LogManager

log = logging.getLogger("tidelog.broker.topics")


class TopicDeletionListener(Protocol):
    """A part that forgets what it holds of a deleted topic (the group coordinator: the topic's offsets)."""

    def on_topic_deleted(self, name: str) -> None: ...


class TopicHost(Protocol):
    """What the topic store and its backends use of the broker that owns them (the broker, passed to the store at
    construction; unit tests pass a namespace with these attributes). ``logs`` is made after the store (it is
    built with the store's per-topic configs) and read only once storage is open; ``loop`` and
    ``group_coordinator`` are None until the broker starts (the store then runs ``on_loop`` work at once, and
    tells no coordinator of a deletion). The store reads them when it needs them, never through ``getattr``."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def purgatory(self) -> Purgatory | None: ...

    @property
    def metrics(self) -> BrokerMetrics | None: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def group_coordinator(self) -> TopicDeletionListener | None: ...

    def partitions_changed(self) -> None:
        """Called on the changing thread after partitions were added or removed here (the broker's derived
        max.connections follows the descriptors they hold, issue 24)."""
        ...


class TopicStore(Protocol):
    """What a backend uses of the topic store (:class:`tidelog.broker.topics.TopicManager`): its state changes,
    the validators, the registry write. Stated here so that no backend names the store's class (issue 26 item 2)."""

    @property
    def broker(self) -> TopicHost: ...

    change_lock: threading.RLock

    def all_topics(self) -> Iterable[TopicInfo]: ...

    def names(self) -> list[str]: ...

    def get(self, name: str) -> TopicInfo | None: ...

    def require(self, name: str) -> TopicInfo: ...

    def by_id(self, topic_id: bytes) -> TopicInfo | None: ...

    def get_log(self, topic: str, partition: int) -> PartitionLog | None: ...

    def logs_of(self, name: str) -> list[tuple[str, int]]: ...

    def set_log(self, tp: tuple[str, int], lg: PartitionLog) -> None: ...

    def pop_log(self, tp: tuple[str, int]) -> PartitionLog | None: ...

    def publish(self, info: TopicInfo, logs: dict[tuple[str, int], PartitionLog] | None = None) -> None: ...

    def unpublish(self, name: str) -> TopicInfo | None: ...

    def persist(self, adding: TopicInfo | None = None) -> None: ...

    def default_log_config(self) -> LogConfig: ...

    def stored_log_config(self, name: str, overrides: dict[str, str]) -> LogConfig: ...

    def validate_new_name(self, name: str) -> None: ...

    def validate_configs(self, configs: dict[str, str | None] | None) -> tuple[dict[str, str], LogConfig]: ...

    def counts_or_defaults(self, num_partitions: int, replication_factor: int) -> tuple[int, int]: ...

    def check_open_files(self, name: str, new_partitions: int, kafka_error: ErrorCode = ErrorCode.POLICY_VIOLATION) -> None: ...

    def storage_failure(self, name: str, exc: OSError) -> TopicError: ...

    def apply_overrides(self, info: TopicInfo, overrides: dict[str, str], cfg: LogConfig) -> None: ...

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str | None] | None = None, validate_only: bool = False,
                     assignments: dict[int, list[int]] | None = None) -> TopicInfo: ...

    def delete_logs(self, name: str, tps: list[tuple[str, int]]) -> None: ...

    def forget_deleted(self, name: str, tps: list[tuple[str, int]]) -> None: ...

    def topic_deleted(self, name: str) -> None: ...

    def partitions_changed(self) -> None: ...

    def on_loop(self, fn: Callable[..., object], *args: object) -> None: ...


class TopicBackend(Protocol):
    """Where topic metadata lives: the part of the topic store that differs between single-node and ZooKeeper
    mode. :class:`TopicManager` holds everything else and calls these; a backend changes the store only through
    the store's methods (``publish``, ``unpublish``, ``set_log``, ``pop_log``, ``persist``, ``apply_overrides``,
    the validators)."""

    #: None when this node is the only broker (the handlers check manual assignments against it), else the
    #: registered brokers' ids (``create_topic`` / ``create_partitions`` then take ``assignments``)
    registered_brokers: Callable[[], set[int]] | None
    #: True when the registry file is the source of truth: empty partitions it does not list are a creation
    #: interrupted before its registry write, removed at start
    drops_interrupted_creations: bool

    def loaded(self) -> None:
        """After the registry file is read (at start, in a worker thread, before any log is opened): replace
        what the source of truth says otherwise."""

    def log_manager_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The store's ``LogManager(...)`` keyword arguments, adjusted."""

    def hosted_partitions(self, info: TopicInfo) -> Iterable[int]:
        """The partitions of ``info`` this node hosts (``load`` creates their logs when missing)."""

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str | None] | None, validate_only: bool,
                     assignments: dict[int, list[int]] | None) -> TopicInfo:
        """CreateTopics (blocking: the handlers run it on a request handler thread)."""

    def create_partitions(self, name: str, total_count: int, validate_only: bool,
                          assignments: list[list[int]] | None) -> TopicInfo:
        """CreatePartitions (blocking)."""

    def delete_topic(self, name: str, timeout_s: float = 30.0) -> Any:  # TopicInfo, or (ZooKeeper mode, a
        # coroutine function) its awaitable
        """DeleteTopics: a plain method (blocking) or a coroutine function (awaited on the loop); the store
        binds it as its own ``delete_topic`` and ``handlers.topic_change`` runs either kind. ``timeout_s`` is the
        request's ``timeout_ms``: how long ZooKeeper mode waits for the controller's deletion."""

    def change_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str | None]],
                       validate_only: bool) -> TopicInfo:
        """AlterConfigs / IncrementalAlterConfigs: the overrides become ``change(current overrides)`` (blocking)."""

    def auto_create(self, name: str) -> TopicInfo:
        """Metadata's / Produce's auto-creation of ``name`` with the broker defaults (blocking)."""


TopicBackendFactory = Callable[[TopicStore], TopicBackend]
"""Makes the store's backend, given the store being constructed (the replica manager chooses it). The cycle is
real (the store delegates its changes to the backend, the backend changes the store), so the store calls the factory
with itself: the backend holds the store from birth, no ``attach`` afterwards."""


class LocalTopicBackend:
    """Single node: the registry file is the source of truth and every change is made here, under the store's
    change lock: the registry written, the logs created or deleted, the store updated."""

    registered_brokers: Callable[[], set[int]] | None = None  # this node alone: the handlers check manual assignments against it
    #: the registry is the source of truth: empty partitions it does not list are a creation interrupted before
    #: its registry write, removed at start (``TopicManager._drop_interrupted_creations``)
    drops_interrupted_creations = True

    def __init__(self, store: TopicStore,
                 on_partitions: Callable[[Iterable[tuple[str, int]], bool], None] | None = None) -> None:
        self.store = store
        self.broker = store.broker  # its LogManager (once storage is open)
        #: called on the loop with partitions created (True) or deleted (False): the replica manager leads them
        self.on_partitions = on_partitions

    def _announce(self, tps: Iterable[tuple[str, int]], created: bool) -> None:
        if self.on_partitions is not None:
            self.store.on_loop(self.on_partitions, list(tps), created)

    def loaded(self) -> None:
        pass

    def log_manager_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs

    def hosted_partitions(self, info: TopicInfo) -> Iterable[int]:
        return range(info.num_partitions)  # one node hosts every partition

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str | None] | None, validate_only: bool,
                     assignments: dict[int, list[int]] | None = None) -> TopicInfo:
        """``assignments`` are ignored: the handler has checked that they name this node only."""
        store = self.store
        with store.change_lock:
            store.validate_new_name(name)
            num_partitions, replication_factor = store.counts_or_defaults(num_partitions, replication_factor)
            if replication_factor <= 0:
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if replication_factor > 1:
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                    f"of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
                )
            overrides, cfg = store.validate_configs(configs)
            topic_id = new_topic_id()
            while store.by_id(topic_id) is not None:
                topic_id = new_topic_id()
            info = TopicInfo(name, topic_id, num_partitions, overrides, cfg)
            store.check_open_files(name, num_partitions)
            if validate_only:
                return info
            # Created completely or not at all: the logs first, the registry last, then readers see the topic. A
            # failure removes the logs made; a crash before the registry is written leaves empty partition
            # directories of a topic the registry does not list, which the next start removes (``load``).
            created: dict[tuple[str, int], PartitionLog] = {}
            try:
                for p in range(num_partitions):
                    created[(name, p)] = self.broker.logs.create_log(name, p, cfg, topic_id)
                store.persist(adding=info)
            except Exception as exc:
                log.exception("topic creation failed", extra={"kv": {"topic": name}})
                store.delete_logs(name, list(created))
                if isinstance(exc, OSError):
                    raise store.storage_failure(name, exc) from exc
                raise
            store.publish(info, created)
        self._announce(created, True)
        store.partitions_changed()
        log.info(
            "topic created",
            extra={"kv": {"topic": name, "partitions": num_partitions, "topic_id": info.topic_id_str,
                          "configs": overrides or ""}},
        )
        return info

    def delete_topic(self, name: str, timeout_s: float = 30.0) -> TopicInfo:
        # one node deletes at once (files off the loop): nothing to wait for, timeout_s unused
        store = self.store
        with store.change_lock:
            info = store.get(name)
            if info is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic {name}.")
            # gone for readers first, then from the registry, then from disk (each log dir's checkpoints once)
            store.unpublish(name)
            tps = [(name, p) for p in range(info.num_partitions)]
            for tp in tps:
                store.pop_log(tp)
            store.persist()
            store.delete_logs(name, tps)
        self._announce(tps, False)
        store.on_loop(store.forget_deleted, name, tps)
        store.partitions_changed()
        log.info("topic deleted", extra={"kv": {"topic": name, "topic_id": info.topic_id_str}})
        return info

    def create_partitions(self, name: str, total_count: int, validate_only: bool,
                          assignments: list[list[int]] | None = None) -> TopicInfo:
        """``assignments`` are ignored: the handler has checked that they name this node only."""
        store = self.store
        with store.change_lock:
            info = store.get(name)
            if info is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host topic {name}.")
            current = info.num_partitions
            if total_count == current:
                raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            if total_count < current:
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic currently has {current} partitions, which is higher than the requested {total_count}.",
                )
            store.check_open_files(name, total_count - current)
            if validate_only:
                return info
            # all or nothing, as create_topic: the logs, then the registry, then the count readers see (a crash
            # before the registry is written leaves empty partitions it does not list, removed at start)
            created: dict[tuple[str, int], PartitionLog] = {}
            try:
                for p in range(current, total_count):
                    created[(name, p)] = self.broker.logs.create_log(name, p, info.log_config, info.topic_id)
                store.persist(adding=dataclasses.replace(info, num_partitions=total_count))  # replaces ``info``
            except Exception as exc:
                log.exception("adding partitions failed", extra={"kv": {"topic": name}})
                store.delete_logs(name, list(created))
                if isinstance(exc, OSError):
                    raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR,
                                     f"Partitions of '{name}' could not be created: {describe_os_error(exc)}") from exc
                raise
            for tp, lg in created.items():
                store.set_log(tp, lg)
            info.num_partitions = total_count
        self._announce(created, True)
        store.partitions_changed()
        log.info("partitions added", extra={"kv": {"topic": name, "from": current, "to": total_count}})
        return info

    def change_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str | None]],
                       validate_only: bool) -> TopicInfo:
        info = self.store.require(name)
        overrides, cfg = self.store.validate_configs(change(info.overrides))
        if not validate_only:
            self.store.apply_overrides(info, overrides, cfg)
        return info

    def auto_create(self, name: str) -> TopicInfo:
        return self.store.create_topic(name)
