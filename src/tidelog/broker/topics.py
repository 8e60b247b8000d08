"""Topic metadata: names, ids, partition counts and per-topic config overrides.

Kafka keeps this in ZooKeeper or the KRaft metadata log. tidelog keeps it in one JSON file at the root of each
log dir, ``tidelog-topics.json``. Kafka's own log loader only looks at directories named ``<topic>-<partition>``
and at its known checkpoint files, so the extra file does not disturb a Kafka broker opening the same dir.
The file is written atomically (``.tmp`` + fsync + rename + directory fsync) to every log dir; each write carries
an increasing ``generation`` and the highest generation found wins on load::

    {"version": 1, "generation": 7,
     "topics": {"orders": {"topic_id": "<22-char Kafka Uuid>", "partitions": 3,
                           "configs": {"retention.ms": "3600000"}}}}

``configs`` holds only the overrides (as a Kafka ``AlterConfigs`` would store them); effective values are the
overrides on top of the broker's ``log.*`` defaults.

Partition directories found on disk for topics the file does not know (a registry lost, a dir copied from
Kafka) are adopted at start when they hold records: the topic gets ``max(partition) + 1`` partitions and the id
from ``partition.metadata`` (or a new id). Empty ones are what a creation interrupted before its registry write
left (the registry is written last, and at the first start), and are removed (single node).

Reads (``get``, ``get_log``, ``names``, ...) run on the event loop and take no lock. Changes (create, delete,
partitions, configs) are synchronous and may take long (a topic of 1000 partitions: 1000 directories, their
files and fsyncs), so the handlers run them on the broker's request handler threads (``handlers.topic_change``);
one lock serialises them, and a change becomes visible to readers only when it is complete: a new topic's logs
all exist before its name does, a deleted topic's name is gone before its logs are closed. Validation errors
raise :class:`TopicError` with Kafka's error name.

Where topic metadata lives is the store's *backend* (:class:`TopicBackend`), chosen by the composition root (the
replica manager's ``make_topic_manager``): :class:`LocalTopicBackend` here (the registry file is the source of
truth; changes are made here and now), ``cluster.topics.ZkTopicBackend`` in ZooKeeper mode (ZooKeeper is the
source of truth; changes are written there and every broker adopts them through its watches; the registry file is
then this broker's cache of what it adopted). The store itself (this module's :class:`TopicManager`: names, ids,
:class:`TopicInfo`, configs, the logs of hosted partitions, the registry file, DescribeConfigs) is the same in
both modes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.broker.topic_backend import LocalTopicBackend, TopicBackend, TopicBackendFactory, TopicHost
from tidelog.broker.topic_model import (
    _BROKER_SYNONYMS,
    ADMIN_CLIENT_ID,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    INTERNAL_TOPICS,
    MAX_NAME_LENGTH,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    REGISTRY_FILE,
    REGISTRY_VERSION,
    STATIC_BROKER_CONFIG,
    ConfigEntry,
    ConfigSynonym,
    TopicError,
    TopicInfo,
    _collision_key,
    _holds_no_records,
    _uuid_bytes,
    new_cluster_id,
    new_topic_id,
    validate_topic_name,
)
from tidelog.errors import ErrorCode
from tidelog.storage.checkpoints import atomic_write
from tidelog.storage.cleaner import CleanerConfig
from tidelog.storage.config import BROKER_TO_TOPIC_CONFIG, LogConfig
from tidelog.storage.errors import KafkaStorageError
from tidelog.storage.open_files import (
    SHORTAGE,
    OpenFileBudget,
    OpenFileLimitError,
    describe_os_error,
    is_fd_exhaustion,
)

if TYPE_CHECKING:
    from tidelog.storage.config import LogConfig
    from tidelog.storage.log.partition_log import PartitionLog
    from tidelog.storage.manager import LogManager

log = logging.getLogger("tidelog.broker.topics")

# the store's model and backends, importable from here as before the split
__all__ = [
    "ADMIN_CLIENT_ID",
    "DEFAULT_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "DYNAMIC_TOPIC_CONFIG",
    "INTERNAL_TOPICS",
    "MAX_NAME_LENGTH",
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "REGISTRY_FILE",
    "REGISTRY_VERSION",
    "STATIC_BROKER_CONFIG",
    "ConfigEntry",
    "ConfigSynonym",
    "LocalTopicBackend",
    "TopicBackend",
    "TopicBackendFactory",
    "TopicError",
    "TopicInfo",
    "TopicManager",
    "new_cluster_id",
    "new_topic_id",
    "validate_topic_name",
]


class TopicManager:
    """The broker's topic store. ``broker`` is what it uses of its owner (:class:`TopicHost`: ``config``, ``logs``,
    ``node_id``, ``purgatory`` / ``metrics`` / ``group_coordinator`` when present, woken / cleaned on delete);
    ``backend`` makes the part that says where topic metadata lives (called with this store; default
    :class:`LocalTopicBackend`)."""

    def __init__(self, broker: TopicHost, backend: TopicBackendFactory | None = None) -> None:
        self.broker = broker
        self.config = broker.config
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[bytes, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._generation = 0
        self.change_lock = threading.RLock()  # one change at a time (they run on worker threads)
        reserve = self.config.props.get("tidelog.open.files.reserve")
        self.open_files = OpenFileBudget(int(reserve) if reserve is not None else None)
        self._open_files_logged = float("-inf")
        # the backend is made with this store (it changes the store, the store delegates changes to it)
        self.backend: TopicBackend = (backend or LocalTopicBackend)(self)
        self.registered_brokers = self.backend.registered_brokers
        # synchronous (local: files) or a coroutine function (ZooKeeper: waits for the controller)
        self.delete_topic = self.backend.delete_topic
        self._load_registry()
        self.backend.loaded()

    # -- persistence --------------------------------------------------------------------------------------------

    @property
    def _min_segment_bytes(self) -> int | None:
        v = self.config.props.get("tidelog.min.segment.bytes")
        return int(v) if v is not None else None

    def default_log_config(self) -> LogConfig:
        return self.config.log_config()

    def _log_config(self, overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_properties(overrides, self.default_log_config(), min_segment_bytes=self._min_segment_bytes)

    def stored_log_config(self, name: str, overrides: dict[str, str]) -> LogConfig:
        """The LogConfig of overrides read back from storage (the registry; ZooKeeper in cluster mode): the broker
        defaults, logged, when they are no longer valid."""
        try:
            return self._log_config(overrides)
        except ValueError as exc:
            log.error("stored config of topic invalid now; using broker defaults",
                      extra={"kv": {"topic": name, "error": exc}})
            return self.default_log_config()

    def _registry_paths(self) -> list[Path]:
        return [Path(d) / REGISTRY_FILE for d in self.config.log_dirs]

    def _load_registry(self) -> None:
        best: dict[str, Any] | None = None
        for path in self._registry_paths():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.error("topic registry unreadable, ignoring this copy", extra={"kv": {"path": path, "error": exc}})
                continue
            if not isinstance(data, dict) or data.get("version") != REGISTRY_VERSION:
                log.error("topic registry has an unknown version, ignoring this copy", extra={"kv": {"path": path}})
                continue
            if best is None or int(data.get("generation", 0)) > int(best.get("generation", 0)):
                best = data
        if best is None:
            return
        self._generation = int(best.get("generation", 0))
        for name, t in (best.get("topics") or {}).items():
            try:
                overrides = {str(k): str(v) for k, v in (t.get("configs") or {}).items()}
                cfg = self.stored_log_config(name, overrides)
                info = TopicInfo(name, _uuid_bytes(t["topic_id"]), int(t["partitions"]), overrides, cfg)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("skipping malformed topic registry entry", extra={"kv": {"topic": name, "error": exc}})
                continue
            self._topics[name] = info
            self._by_id[info.topic_id] = info

    def persist(self, adding: TopicInfo | None = None) -> None:
        """Write the registry (``adding``: a topic about to be published, written with the others; or one about to
        change, written in place of the published one of its name)."""
        self._generation += 1
        topics = [t for t in self._topics.values() if adding is None or t.name != adding.name]
        if adding is not None:
            topics.append(adding)
        data = {
            "version": REGISTRY_VERSION,
            "generation": self._generation,
            "topics": {
                t.name: {"topic_id": t.topic_id_str, "partitions": t.num_partitions, "configs": dict(sorted(t.overrides.items()))}
                for t in sorted(topics, key=lambda t: t.name)
            },
        }
        blob = (json.dumps(data, indent=1, sort_keys=False) + "\n").encode()
        # a copy per log directory; the highest generation wins at load, so a failed directory is skipped (its
        # stale copy loses) and one whose write fails goes offline; at least one copy must be written
        logs: LogManager | None = self.broker.logs  # None: storage not open yet (the first registry write)
        written, failure = 0, None
        for path in self._registry_paths():
            root = path.parent.absolute()
            if logs is not None and logs.is_offline(root):
                continue
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, blob)
                written += 1
            except OSError as exc:
                if logs is None:
                    raise
                if is_fd_exhaustion(exc):  # out of descriptors: not the directory's failure (issue 24)
                    SHORTAGE.note("topic registry", exc, path)
                else:
                    logs.fail_dir(root, f"writing {path} failed: {exc}")
                failure = exc
        if not written:
            raise failure or KafkaStorageError("every log directory failed: the topic registry cannot be written")

    # -- what backends change (each a step of a change the backend makes) ----------------------------------------

    def publish(self, info: TopicInfo, logs: dict[tuple[str, int], PartitionLog] | None = None) -> None:
        """Make ``info`` (and its new ``logs``) visible to readers: the logs first, then the id, then the name."""
        if logs:
            self._logs.update(logs)
        self._by_id[info.topic_id] = info
        self._topics[info.name] = info

    def unpublish(self, name: str) -> TopicInfo | None:
        """Forget ``name`` for readers (its logs stay until :meth:`pop_log`); the TopicInfo it had, or None."""
        info = self._topics.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
        return info

    def set_log(self, tp: tuple[str, int], lg: PartitionLog) -> None:
        self._logs[tp] = lg

    def pop_log(self, tp: tuple[str, int]) -> PartitionLog | None:
        return self._logs.pop(tp, None)

    def logs_of(self, name: str) -> list[tuple[str, int]]:
        """The (topic, partition) of every log of ``name`` this store holds."""
        return [tp for tp in self._logs if tp[0] == name]

    # -- startup -----------------------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        """The LogConfig for ``topic`` (its overrides on the broker defaults); the LogManager's per-topic hook."""
        info = self._topics.get(topic)
        return info.log_config if info is not None else self.default_log_config()

    def log_manager_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``LogManager(...)`` beyond log dirs and the default config."""
        cfg = self.config
        move_rate = cfg.get("replica.alter.log.dirs.io.max.bytes.per.second")
        return self.backend.log_manager_kwargs({
            "broker_id": self.broker.node_id,
            "cluster_id": cfg.cluster_id,
            "recovery_threads": cfg.get("num.recovery.threads.per.data.dir"),
            "recovery_point_checkpoint_interval_ms": cfg.get("log.flush.offset.checkpoint.interval.ms"),
            "log_start_offset_checkpoint_interval_ms": cfg.get("log.flush.start.offset.checkpoint.interval.ms"),
            "high_watermark_checkpoint_interval_ms": cfg.get("replica.high.watermark.checkpoint.interval.ms"),
            "retention_check_interval_ms": cfg.get("log.retention.check.interval.ms"),
            "cleaner_config": CleanerConfig.from_properties(cfg.props),
            "move_threads": cfg.get("num.replica.alter.log.dirs.threads"),
            "move_max_bytes_per_second": (None if move_rate >= 2**63 - 1 else move_rate),
        })

    def load(self) -> None:
        """After ``LogManager.startup()``: match logs on disk with the registry, create missing partitions
        (those the backend's ``hosted_partitions`` names), adopt unregistered ones, apply per-topic configs."""
        logs = self.broker.logs
        on_disk: dict[str, dict[int, PartitionLog]] = {}
        for (topic, partition), found in logs.all_logs().items():
            on_disk.setdefault(topic, {})[partition] = found
        if self.backend.drops_interrupted_creations:
            self._drop_interrupted_creations(on_disk)
        changed = False
        for topic, parts in on_disk.items():
            info = self._topics.get(topic)
            if info is None:
                topic_id = logs.topic_id_of(topic) or new_topic_id()
                info = TopicInfo(topic, bytes(topic_id), max(parts) + 1, {}, self.default_log_config())
                self._topics[topic] = info
                self._by_id[info.topic_id] = info
                changed = True
                log.warning(
                    "adopted topic found on disk but not in the registry",
                    extra={"kv": {"topic": topic, "partitions": info.num_partitions}},
                )
            elif max(parts) + 1 > info.num_partitions:
                info.num_partitions = max(parts) + 1
                changed = True
        for info in self._topics.values():
            parts = on_disk.get(info.name, {})
            for p in sorted(set(parts).union(self.backend.hosted_partitions(info))):
                lg: PartitionLog | None = parts.get(p)
                if lg is None:
                    lg = logs.create_log(info.name, p, info.log_config, info.topic_id)
                else:
                    if logs.ensure_partition_metadata(info.name, p, info.topic_id):
                        log.info("wrote a missing or unreadable partition.metadata",
                                 extra={"kv": {"topic": info.name, "partition": p}})
                    if lg.config != info.log_config:
                        lg.update_config(info.log_config)
                self._logs[(info.name, p)] = lg
        # a registry is written at the first start too (empty): from then on an empty partition it does not list
        # is known to be an interrupted creation, not a directory of another origin
        if changed or not all(p.exists() for p in self._registry_paths()):
            self.persist()

    def _drop_interrupted_creations(self, on_disk: dict[str, dict[int, PartitionLog]]) -> None:
        """Remove what a creation interrupted before its registry write left: partitions holding no record of a
        topic the registry does not list (CreateTopics), or beyond the count it lists (CreatePartitions). The
        registry is written last, so such a partition was never acknowledged to anyone. Only when a registry
        exists: without one (lost, or a directory copied from Kafka) every partition found is adopted, and a
        partition holding records always is (Kafka recovers every log directory it finds)."""
        if not any(p.exists() for p in self._registry_paths()):
            return
        drop: list[tuple[str, int]] = []
        for topic, parts in on_disk.items():
            info = self._topics.get(topic)
            limit = 0 if info is None else info.num_partitions
            extra = {p: lg for p, lg in parts.items() if p >= limit}
            if extra and all(_holds_no_records(lg) for lg in extra.values()):
                drop += [(topic, p) for p in extra]
        if not drop:
            return
        log.warning("removing partitions of an interrupted topic creation (empty, not in the registry)",
                    extra={"kv": {"partitions": len(drop), "topics": ",".join(sorted({t for t, _ in drop}))}})
        self.broker.logs.delete_logs(drop)
        for topic, partition in drop:
            del on_disk[topic][partition]
            if not on_disk[topic]:
                del on_disk[topic]

    # -- queries -----------------------------------------------------------------------------------------------

    validate_topic_name = staticmethod(validate_topic_name)

    def exists(self, name: str) -> bool:
        return name in self._topics

    def names(self) -> list[str]:
        return list(self._topics)

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: bytes) -> TopicInfo | None:
        return self._by_id.get(bytes(topic_id))

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The local PartitionLog, or None."""
        return self._logs.get((topic, partition))

    def all_topics(self) -> Iterable[TopicInfo]:
        return self._topics.values()

    # -- validation (shared by the backends) -------------------------------------------------------------------

    def validate_new_name(self, name: str) -> None:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in self._topics:
            if _collision_key(other) == key:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}"
                )

    def validate_configs(self, configs: dict[str, str | None] | None) -> tuple[dict[str, str], LogConfig]:
        overrides: dict[str, str] = {}
        for k, v in (configs or {}).items():
            if v is None:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {k}")
            overrides[k] = str(v)
        try:
            cfg = self._log_config(overrides)
        except ValueError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return overrides, cfg

    def counts_or_defaults(self, num_partitions: int, replication_factor: int) -> tuple[int, int]:
        """CreateTopics' -1s replaced by ``num.partitions`` / ``default.replication.factor``; a non-positive
        partition count is Kafka's INVALID_PARTITIONS."""
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if num_partitions <= 0:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        return num_partitions, replication_factor

    def require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        return info

    def check_open_files(self, name: str, new_partitions: int, kafka_error: ErrorCode = ErrorCode.POLICY_VIOLATION) -> None:
        """Refuse (TopicError ``kafka_error``, nothing changed) a change that would open ``new_partitions`` more
        logs than the open-file budget allows (``storage/open_files.py``). Internal topics are held to it too
        (issue 24): exempt, a CreatePartitions of ``__consumer_offsets`` to 1,000 bypassed the budget."""
        if new_partitions <= 0:
            return
        try:
            self.open_files.check(new_partitions, f"Topic '{name}' ({new_partitions} new partitions)")
        except OpenFileLimitError as exc:
            now = time.monotonic()
            if now - self._open_files_logged >= 10.0:  # one line per 10 s: a Metadata may name thousands
                self._open_files_logged = now
                log.warning("topic change refused: open-file limit", extra={"kv": {"topic": name, "error": exc}})
            raise TopicError(kafka_error, exc.message) from None

    def partitions_changed(self) -> None:
        """After partitions were added or removed (on the changing thread): tell the broker
        (``TopicHost.partitions_changed``)."""
        try:
            self.broker.partitions_changed()
        except Exception:
            log.exception("partitions_changed hook failed")

    @staticmethod
    def storage_failure(name: str, exc: OSError) -> TopicError:
        """The TopicError (KAFKA_STORAGE_ERROR) a change answers with when the disk refused it (EMFILE, ENOSPC...)."""
        return TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"Topic '{name}' could not be created: {describe_os_error(exc)}")

    # -- changes (the backend's) -------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str | None] | None = None,
        validate_only: bool = False,
        assignments: dict[int, list[int]] | None = None,
    ) -> TopicInfo:
        """``assignments`` (ZooKeeper mode, already validated by the handler) replaces Kafka's placement."""
        return self.backend.create_topic(name, num_partitions, replication_factor, configs, validate_only, assignments)

    def create_partitions(self, name: str, total_count: int, validate_only: bool = False,
                          assignments: list[list[int]] | None = None) -> TopicInfo:
        return self.backend.create_partitions(name, total_count, validate_only, assignments)

    def maybe_auto_create(self, name: str) -> TopicInfo | None:
        """Create ``name`` with broker defaults if ``auto.create.topics.enable``; None if disabled. Raises
        TopicError for invalid names or when the defaults cannot be met."""
        info = self._topics.get(name)
        if info is not None:
            return info
        if not self.config.auto_create_topics_enable:
            return None
        if name.startswith("__"):
            # Internal topics (__consumer_offsets, __transaction_state) are created by their coordinators with
            # their own configs (compaction, partition count), never by a client's Metadata/Produce request.
            return None
        # Bounded: a topic whose partitions the open-file budget cannot hold is not created and is answered
        # UNKNOWN_TOPIC_OR_PARTITION, as with auto-creation disabled (one Metadata naming 500 unknown topics
        # creates those that fit, never more; Kafka would create all of them).
        self.check_open_files(name, self.config.num_partitions, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            return self.backend.auto_create(name)
        except TopicError as exc:
            if exc.kafka_error != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        # Lost a race with a concurrent creation of the same name (another Metadata request here, or another
        # broker): Kafka's KafkaApis takes TopicExistsException as success. The topic as this broker knows it by
        # now, else LEADER_NOT_AVAILABLE until it does (never TOPIC_ALREADY_EXISTS: no Kafka broker answers that
        # inside Metadata, and clients do not retry it).
        info = self._topics.get(name)
        if info is not None:
            return info
        raise TopicError(ErrorCode.LEADER_NOT_AVAILABLE, f"Topic '{name}' is being created.")

    def alter_configs(self, name: str, overrides: dict[str, str | None], validate_only: bool = False) -> TopicInfo:
        """Replace all overrides of ``name`` (Kafka's AlterConfigs semantics)."""
        return self.backend.change_configs(name, lambda _current: overrides, validate_only)

    def incremental_alter_configs(
        self, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicInfo:
        """Apply (config, op, value) changes: SET=0, DELETE=1, APPEND=2, SUBTRACT=3 (list configs only)."""
        return self.backend.change_configs(name, lambda current: self._incremented(current, ops), validate_only)

    def delete_logs(self, name: str, tps: list[tuple[str, int]]) -> None:
        try:
            self.broker.logs.delete_logs(tps)
        except Exception:
            log.exception("deleting partitions failed", extra={"kv": {"topic": name}})

    def forget_deleted(self, name: str, tps: list[tuple[str, int]]) -> None:
        """On the loop: wake what waits on the deleted partitions, drop the topic's metrics and the groups'
        offsets of the topic."""
        purgatory = self.broker.purgatory
        if purgatory is not None:
            for tp in tps:
                purgatory.check_and_complete(tp)
        self.topic_deleted(name)
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.forget_topic(name)

    def topic_deleted(self, name: str) -> None:
        """On the loop, in both modes: tell the group coordinator that ``name`` is gone (its offsets go)."""
        coordinator = self.broker.group_coordinator  # None before the broker starts
        if coordinator is not None:
            coordinator.on_topic_deleted(name)

    def on_loop(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn`` on the broker's event loop: at once when called there (or without a loop), else scheduled
        from this worker thread."""
        loop = self.broker.loop
        if loop is not None and not loop.is_closed():
            try:
                here = asyncio.get_running_loop() is loop
            except RuntimeError:
                here = False
            if not here:
                loop.call_soon_threadsafe(fn, *args)
                return
        fn(*args)

    # -- configs -----------------------------------------------------------------------------------------------

    def apply_overrides(self, info: TopicInfo, overrides: dict[str, str], cfg: LogConfig) -> None:
        """``info``'s overrides are now ``overrides`` (their LogConfig ``cfg``): the registry and the local logs."""
        with self.change_lock:
            info.overrides = overrides
            info.log_config = cfg
            self.persist()
            for p in range(info.num_partitions):
                lg = self._logs.get((info.name, p))
                if lg is not None:
                    lg.update_config(cfg)
            log.info("topic configs changed", extra={"kv": {"topic": info.name, "configs": overrides or ""}})

    @staticmethod
    def _incremented(current: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str | None]:
        """The overrides ``current`` with IncrementalAlterConfigs ``ops`` applied (Kafka's
        ``prepareIncrementalConfigs``); TopicError for a duplicate key, an unknown config or operation."""
        overrides: dict[str, str | None] = dict(current)
        seen: set[str] = set()
        for key, op, value in ops:
            if key in seen:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {key}")
            seen.add(key)
            if not LogConfig.is_known(key):
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
            if op == OP_SET:
                if value is None:
                    raise TopicError(ErrorCode.INVALID_CONFIG, f"Null value not supported for: {key}")
                overrides[key] = value
            elif op == OP_DELETE:
                overrides.pop(key, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                default_value = LogConfig().get(key)
                if not isinstance(default_value, tuple):
                    raise TopicError(
                        ErrorCode.INVALID_CONFIG,
                        f"Config value {'append' if op == OP_APPEND else 'subtract'} is not allowed for config key: {key}",
                    )
                present = overrides.get(key)
                items = (
                    [s.strip() for s in present.split(",") if s.strip()]
                    if present is not None
                    else list(default_value)
                )
                given = [s.strip() for s in (value or "").split(",") if s.strip()]
                if op == OP_APPEND:
                    items += [g for g in given if g not in items]
                else:
                    items = [i for i in items if i not in given]
                overrides[key] = ",".join(items)
            else:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"Unknown alter config operation {op}")
        return overrides

    def _entries(self, overrides: dict[str, str], keys: Iterable[str] | None) -> list[ConfigEntry]:
        defaults = LogConfig().to_properties()
        try:
            effective = self._log_config(overrides).to_properties()
        except ValueError:
            effective = self.default_log_config().to_properties()
        broker_defaults = self.default_log_config().to_properties()
        topic_to_broker: dict[str, list[str]] = {}
        for b, t in BROKER_TO_TOPIC_CONFIG.items():
            topic_to_broker.setdefault(t, []).append(b)
        for t, bs in _BROKER_SYNONYMS.items():
            topic_to_broker.setdefault(t, []).extend(bs)
        props = self.config.props
        wanted = list(LogConfig.names()) if keys is None else [k for k in keys if LogConfig.is_known(k)]
        out: list[ConfigEntry] = []
        value: str | None
        for name in wanted:
            synonyms: list[ConfigSynonym] = []
            if name in overrides:
                synonyms.append(ConfigSynonym(name, overrides[name], DYNAMIC_TOPIC_CONFIG))
            for b in topic_to_broker.get(name, []):
                if b in props:
                    synonyms.append(ConfigSynonym(b, props[b], STATIC_BROKER_CONFIG))
            synonyms.append(ConfigSynonym(name, defaults.get(name), DEFAULT_CONFIG))
            if name in overrides:
                source, value = DYNAMIC_TOPIC_CONFIG, effective[name]
            elif any(s.source == STATIC_BROKER_CONFIG for s in synonyms):
                source, value = STATIC_BROKER_CONFIG, broker_defaults[name]
            else:
                source, value = DEFAULT_CONFIG, defaults.get(name)
            out.append(ConfigEntry(name, value, source, read_only=False, is_sensitive=False, synonyms=synonyms))
        return out

    def describe_configs(self, name: str, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
        info = self.require(name)
        return self._entries(info.overrides, keys)

    def describe_default_configs(self, configs: dict[str, str] | None = None) -> list[ConfigEntry]:
        """What ``describe_configs`` would answer for a new topic with ``configs`` (CreateTopics validate_only)."""
        overrides = {k: v for k, v in (configs or {}).items() if v is not None}
        return self._entries(overrides, None)
