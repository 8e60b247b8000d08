"""Dynamic broker configs: AlterConfigs / IncrementalAlterConfigs on the BROKER resource (issue 27 item 5).

Kafka's ``DynamicBrokerConfig``: a broker's effective config is, in order of precedence,

1. DYNAMIC_BROKER_CONFIG: set for this broker id (resource name ``"<id>"``);
2. DYNAMIC_DEFAULT_BROKER_CONFIG: the cluster-wide default (resource name ``""``);
3. STATIC_BROKER_CONFIG: ``server.properties`` and ``--override``;
4. DEFAULT_CONFIG: the config's default.

Where they are kept
    One node: ``dynamic-broker-configs.json`` in the first log dir (``{"version": 1, "default": {..},
    "brokers": {"<id>": {..}}}``), written atomically (temp file, fsync, rename) and read at start before any part
    of the broker reads its config, so every dynamic config also holds after a restart. ZooKeeper mode:
    ``/config/brokers/<id>`` and ``/config/brokers/<default>`` (``{"version":1,"config":{..}}``) with a
    ``/config/changes/config_change_`` notification, as Kafka's ZooKeeper mode (see ``tidelog.cluster.broker_configs``).

Which configs may change (Kafka's ``DynamicBrokerConfig.AllDynamicConfigs``): the topic-config defaults
(``log.*`` synonyms of topic configs, ``message.max.bytes``, ``compression.type``, ...), the cleaner's
(``log.cleaner.threads`` ...), the thread pools', the connection limits, listener SSL / SASL settings (per
listener), ``metric.reporters``, the producer-state and remote-log ones. A config tidelog knows that is not among
them is refused with INVALID_REQUEST "Cannot update these configs dynamically: Set(..)"; a name neither Kafka
nor tidelog knows is kept as a custom config (Kafka: ``customPropsAllowed``).

Applied live by tidelog: the topic-config defaults (every topic without an override of its own takes the new
value at once), the log cleaner's settings (its threads are restarted with the new config, as Kafka's
``LogCleaner.reconfigure`` does), ``max.connections`` / ``max.connections.per.ip`` / ``.overrides``,
``num.io.threads`` (the request handler pool is resized, with Kafka's half/double bounds). The others
are accepted, stored and described as Kafka does, and take effect at the next start (tidelog does not rebuild
listeners, SSL contexts or thread pools while running).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker import config as bc
from tidelog.broker import password_encoder as pw
from tidelog.broker.connection_limits import ConnectionBudget, ConnectionQuotas, parse_overrides
from tidelog.errors import ApiError, ErrorCode
from tidelog.storage.cleaner import CleanerConfig

if TYPE_CHECKING:
    from tidelog.broker.request_pool import RequestHandlerPool
    from tidelog.broker.topics import TopicManager
    from tidelog.storage.manager import LogManager

log = logging.getLogger("tidelog.broker.dynamic_config")

STORE_FILE = "dynamic-broker-configs.json"
STORE_VERSION = 1
DEFAULT_ENTITY = "<default>"  # ZooKeeper's name of the cluster default
#: the most one layer may hold, as JSON (ZooKeeper's default jute.maxbuffer bounds Kafka's znode the same way)
MAX_LAYER_BYTES = 1_000_000

# -- Kafka's lists (facts from DynamicBrokerConfig.scala, SslConfigs, SocketServer, LogCleaner) ----------------

#: SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix
SECURITY_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})
CLEANER_CONFIGS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
})
#: ServerTopicConfigSynonyms' broker names, but message.format.version (DynamicLogConfig.ReconfigurableConfigs)
LOG_CONFIGS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.roll.jitter.ms", "log.roll.jitter.hours",
    "log.index.size.max.bytes", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.flush.scheduler.interval.ms", "log.retention.bytes", "log.retention.ms", "log.retention.minutes",
    "log.retention.hours", "log.index.interval.bytes", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleanup.policy", "unclean.leader.election.enable",
    "min.insync.replicas", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "log.preallocate", "log.message.timestamp.type",
    "log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "log.message.downconversion.enable", "log.local.retention.ms",
    "log.local.retention.bytes", "message.max.bytes",
})
THREAD_CONFIGS = frozenset({"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
                            "background.threads"})
LISTENER_CONFIGS = frozenset({
    "advertised.listeners", "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate", "num.network.threads",
})
SOCKET_SERVER_CONFIGS = frozenset({"max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections",
                                   "max.connection.creation.rate"})
PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
REMOTE_LOG_CONFIGS = frozenset({
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
    "remote.list.offsets.request.timeout.ms",
})
ALL_DYNAMIC_CONFIGS = (SECURITY_CONFIGS | CLEANER_CONFIGS | LOG_CONFIGS | THREAD_CONFIGS | {"metric.reporters"}
                       | LISTENER_CONFIGS | SOCKET_SERVER_CONFIGS | PRODUCER_STATE_CONFIGS | REMOTE_LOG_CONFIGS)
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate",
                                            "num.network.threads"})
PER_BROKER_CONFIGS = (SECURITY_CONFIGS | LISTENER_CONFIGS) - CLUSTER_LEVEL_LISTENER_CONFIGS
_LISTENER_RE = re.compile(r"listener\.name\.[^.]*\.(.*)")

#: applied to the running broker (the rest take effect at the next start)
LIVE_CONFIGS = (LOG_CONFIGS | CLEANER_CONFIGS
                | {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "num.io.threads"})


class DynamicConfigError(ApiError):
    """A refused change: ``kafka_error`` and Kafka's message."""

    def __init__(self, kafka_error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error
        self.message = message


def kafka_set(names: Iterable[str]) -> str:
    """Scala's ``Set(a, b)``, as Kafka's messages print the offending names."""
    return "Set(" + ", ".join(sorted(set(names))) + ")"


def _known_non_dynamic(name: str) -> bool:
    """A config Kafka or tidelog knows that may not change while the broker runs (``nonDynamicProps``); names
    nobody knows are custom configs, allowed."""
    if name in ALL_DYNAMIC_CONFIGS or name.startswith("listener.name."):
        return False
    return name in bc.BROKER_KEYS or name in bc.LOG_DEFAULT_KEYS or name.startswith("tidelog.")


def validate_names(props: Mapping[str, str | None], per_broker: bool) -> None:
    """Kafka's ``DynamicBrokerConfig.validateConfigs`` checks on the names (the values are checked by parsing the
    resulting config)."""
    names = set(props)
    bad = {n for n in names if _known_non_dynamic(n)}
    if bad:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {kafka_set(bad)}")
    bad = names & SECURITY_CONFIGS
    if bad:
        raise DynamicConfigError(
            ErrorCode.INVALID_REQUEST,
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            f"{kafka_set(bad)}")
    if not per_broker:
        bad = names & PER_BROKER_CONFIGS
        for n in names:
            m = _LISTENER_RE.fullmatch(n)
            if m and m.group(1) not in CLUSTER_LEVEL_LISTENER_CONFIGS:
                bad.add(n)
        if bad:
            raise DynamicConfigError(
                ErrorCode.INVALID_REQUEST,
                f"Cannot update these configs at default cluster level, broker id must be specified: {kafka_set(bad)}")


def synonyms_of(name: str) -> list[str]:
    """Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms`` (the names that set the same config, by precedence)."""
    if name in ("log.roll.ms", "log.roll.hours"):
        return ["log.roll.ms", "log.roll.hours"]
    if name in ("log.roll.jitter.ms", "log.roll.jitter.hours"):
        return ["log.roll.jitter.ms", "log.roll.jitter.hours"]
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    if name in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        return ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    return [name]


class LiveBroker(Protocol):
    """What :meth:`DynamicBrokerConfig.apply_live` reconfigures of the running broker: the topics' defaults, the
    cleaner, the connection limits, the request handler pool."""

    @property
    def topics(self) -> TopicManager: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def connection_quotas(self) -> ConnectionQuotas: ...

    @property
    def connection_budget(self) -> ConnectionBudget | None:
        """None until the broker's listeners are bound (``max.connections`` not derived yet)."""
        ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def request_pool(self) -> RequestHandlerPool: ...


class DynamicBrokerConfig:
    """The dynamic layers over a broker's static config. ``config``'s ``props``/``values`` are kept equal to the
    effective config (static, then the default layer, then the per-broker layer), so every part reading them
    sees the dynamic values; :meth:`apply_live` reconfigures the running parts that follow them.

    ``live`` is the broker that owns it, given at construction. The cycle is real: the stored layers must be
    merged into ``config`` before any part of the broker reads it, so this part is made first, and it reconfigures
    parts made after it. It holds the broker as the narrow :class:`LiveBroker` and touches it only once a change is
    applied (AlterConfigs, or another broker's change notified through ZooKeeper); None (unit tests): changes are
    stored and merged, nothing running is reconfigured."""

    def __init__(self, config: bc.BrokerConfig, live: LiveBroker | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.static: dict[str, str] = dict(config.props)
        self.default: dict[str, str] = {}
        self.broker: dict[str, str] = {}
        self.live = live
        #: where the layers are kept (one node: the file; ZooKeeper mode replaces it)
        self.store: Any = FileStore(Path(config.log_dirs[0]) / STORE_FILE) if config.log_dirs else None
        #: password configs at rest (module password_encoder): encoded with password.encoder.secret; without a
        #: secret ZooKeeper mode refuses them as Kafka's ZooKeeper mode does, one node keeps them in its own
        #: file in clear (mode 0600) as a KRaft controller keeps them in its metadata log
        try:
            self.encoder = pw.encoder_from(config.props)
            self.old_encoder = pw.old_encoder_from(config.props)
        except pw.PasswordEncoderError as exc:  # a bad password.encoder.* value: the start fails, as Kafka's
            raise bc.ConfigException(exc.config, exc.value, exc.reason) from None
        self.secret_required = False
        self._lock = threading.RLock()  # a change through this broker vs. a notification from another

    # -- layers ------------------------------------------------------------------------------------------------

    def effective_props(self, default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
        return {**self.static, **default, **broker}

    def layer(self, resource_name: str) -> dict[str, str]:
        return self.default if resource_name == "" else self.broker

    def check(self, resource_name: str, new_layer: dict[str, str], changed: Iterable[str]) -> bc.BrokerConfig:
        """The config ``new_layer`` (for ``resource_name``) would give; DynamicConfigError when refused."""
        validate_names({n: None for n in changed}, per_broker=resource_name != "")
        size = len(json.dumps(new_layer))
        if size > MAX_LAYER_BYTES:  # custom names are allowed: bound what a client can make the broker keep
            raise DynamicConfigError(
                ErrorCode.INVALID_REQUEST, f"The dynamic configs would take {size} bytes, more than the {MAX_LAYER_BYTES} allowed")
        default = new_layer if resource_name == "" else self.default
        broker = new_layer if resource_name != "" else self.broker
        try:
            candidate = bc.BrokerConfig.from_properties(self.effective_props(default, broker), warn_unknown=False)
            candidate.log_config()
            if any(n.startswith("log.cleaner.") for n in changed):
                threads = CleanerConfig.from_properties(candidate.props).threads
                current = CleanerConfig.from_properties(self.config.props).threads
                # LogCleaner.validateReconfiguration
                if threads < 1:
                    raise ValueError("Log cleaner threads should be at least 1")
                if threads < current // 2:
                    raise ValueError("Log cleaner threads cannot be reduced to less than half the current value "
                                     f"{current}")
                if threads > current * 2:
                    raise ValueError("Log cleaner threads cannot be increased to more than double the current "
                                     f"value {current}")
            if "max.connections.per.ip.overrides" in changed:
                parse_overrides(candidate.props.get("max.connections.per.ip.overrides", ""))
        except (ValueError, bc.ConfigException) as exc:
            raise DynamicConfigError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        for n in sorted(set(changed) & THREAD_CONFIGS):  # DynamicThreadPool.validateReconfiguration
            new, old = _thread_count(candidate, n), _thread_count(self.config, n)
            if new is None or old is None or new == old:
                continue
            why = f"Dynamic thread count update validation failed for {n}={new}"
            if new <= 0:
                raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"{why}, value should be at least 1")
            if new < old // 2:
                raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"{why}, value should be at least half the current value {old}")
            if new > old * 2:
                raise DynamicConfigError(ErrorCode.INVALID_REQUEST,
                                         f"{why}, value should not be greater than double the current value {old}")
        return candidate

    def set_layers(self, default: dict[str, str], broker: dict[str, str]) -> set[str]:
        """Adopt new layers (from the store, or after an accepted change): the names whose effective value
        changed; the config object is updated in place."""
        before = dict(self.config.props)
        self.default, self.broker = dict(default), dict(broker)
        props = self.effective_props(self.default, self.broker)
        try:
            fresh = bc.BrokerConfig.from_properties(props, warn_unknown=False)
        except bc.ConfigException as exc:
            log.error("dynamic broker configs invalid, ignoring them", extra={"kv": {"error": exc}})
            self.default, self.broker = {}, {}
            fresh = bc.BrokerConfig.from_properties(self.static, warn_unknown=False)
        changed = {k for k in set(before) | set(fresh.props) if before.get(k) != fresh.props.get(k)}
        self.config.props.clear()
        self.config.props.update(fresh.props)
        self.config.values.clear()
        self.config.values.update(fresh.values)
        self.config._log_config = None
        return changed

    def source_of(self, name: str) -> str | None:
        """Which layer sets ``name``: 'broker', 'default', 'static' or None."""
        if name in self.broker:
            return "broker"
        if name in self.default:
            return "default"
        if name in self.static:
            return "static"
        return None

    # -- start and change --------------------------------------------------------------------------------------

    def load(self) -> None:
        """At start (before the broker's parts read the config): the stored layers."""
        if self.store is None:
            return
        default, broker = self._read_store(rewrite=True)
        changed = self.set_layers(default, broker)
        if changed:
            log.info("dynamic broker configs loaded", extra={"kv": {"configs": ",".join(sorted(changed))}})

    # -- password configs at rest --------------------------------------------------------------------------------

    def _read_store(self, rewrite: bool = False) -> tuple[dict[str, str], dict[str, str]]:
        """The default layer and this broker's layer from the store, password configs decoded (Kafka's
        fromPersistentProps: one that cannot be decoded is logged and ignored). With ``rewrite`` (at start), a
        password encoded with ``password.encoder.old.secret``, or one kept in clear while a secret is now set,
        is written back encoded with the current secret (Kafka's maybeReEncodePasswords)."""
        default, brokers = self.store.read()
        broker = dict(brokers.get(str(self.node_id), {}))
        stale = False
        for name, value in list(broker.items()):
            if not pw.is_password_config(name):
                continue
            if not pw.looks_encoded(value):
                if self.encoder is not None:
                    stale = True
                else:
                    log.warning("dynamic password config stored in clear; set password.encoder.secret to encode it",
                                extra={"kv": {"config": name}})
                continue
            decoded = None
            for encoder, old in ((self.encoder, False), (self.old_encoder, True)):
                if encoder is None:
                    continue
                try:
                    decoded = encoder.decode(value)
                except pw.PasswordEncoderError:
                    continue
                stale = stale or old
                break
            if decoded is None:
                log.error("dynamic password config could not be decoded, ignoring it",
                          extra={"kv": {"config": name, "secret_set": self.encoder is not None}})
                del broker[name]
            else:
                broker[name] = decoded
        if rewrite and stale and self.encoder is not None:
            self.store.write(str(self.node_id), self.node_id, self._persistent(str(self.node_id), broker))
            log.info("dynamic password configs encoded again with the current password.encoder.secret")
        return dict(default), broker

    def _persistent(self, resource_name: str, layer: dict[str, str]) -> dict[str, str]:
        """``layer`` as stored: password configs encoded (Kafka's toPersistentProps)."""
        out = dict(layer)
        for name, value in layer.items():
            if not pw.is_password_config(name):
                continue
            if resource_name == "":
                raise DynamicConfigError(ErrorCode.INVALID_CONFIG, "Password config can be defined only at broker level")
            if self.encoder is not None:
                out[name] = self.encoder.encode(value)
            elif self.secret_required:
                raise DynamicConfigError(ErrorCode.INVALID_CONFIG, "Password encoder secret not configured")
        return out

    def use_store(self, store: Any) -> None:
        """ZooKeeper mode (before storage opens): the layers come from ``store`` instead of the file, and a
        notification that this broker's or the default layer changed (the store was made with
        :meth:`store_changed` as its listener) makes it read and apply them again."""
        self.store = store
        self.secret_required = True  # Kafka's ZooKeeper mode: no password in ZooKeeper without the encoder
        with self._lock:
            changed = self.set_layers(*self._read_store(rewrite=True))
        if changed:
            log.info("dynamic broker configs loaded", extra={"kv": {"configs": ",".join(sorted(changed))}})
        store.start_watching()

    def store_changed(self) -> None:
        """The listener a store of another mode is made with (``make_broker_config_store``): kazoo's event thread
        calls it; the reload (which may restart the cleaner's threads) runs on a thread of its own, one at a time
        (the lock)."""
        threading.Thread(target=self.reload, name="tidelog-dynamic-config", daemon=True).start()

    def reload(self) -> None:
        """Read the layers from the store again and apply what changed (another broker altered them)."""
        with self._lock:
            changed = self.set_layers(*self._read_store())
            self.apply_live(changed)

    def alter(self, resource_name: str, new_layer: dict[str, str], changed: set[str],
              validate_only: bool) -> None:
        """Check, store and apply ``new_layer`` as the ``resource_name`` layer (blocking: runs off the loop)."""
        with self._lock:
            self.check(resource_name, new_layer, changed)
            stored = self._persistent(resource_name, new_layer) if self.store is not None else new_layer
            if validate_only:
                return
            if self.store is not None:
                self.store.write(resource_name, self.node_id, stored)
            default = new_layer if resource_name == "" else self.default
            broker = new_layer if resource_name != "" else self.broker
            self.apply_live(self.set_layers(default, broker))

    def apply_live(self, changed: set[str]) -> None:
        """Reconfigure the running broker for the configs in ``changed`` (their new values are in the config)."""
        b = self.live
        if b is None or not changed:
            return
        log.info("dynamic broker configs applied",
                 extra={"kv": {"configs": ",".join(f"{k}={bc.shown_value(k, self.config.props.get(k, ''))}"
                                                   for k in sorted(changed))}})
        if changed & (LOG_CONFIGS | {"log.flush.scheduler.interval.ms"}) or any(k.startswith("log.") for k in changed):
            _refresh_topic_defaults(b)
        if changed & CLEANER_CONFIGS and b.logs.cleaner is not None:
            b.logs.cleaner.reconfigure(CleanerConfig.from_properties(self.config.props))
        if changed & {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}:
            _refresh_connection_limits(b, self.config)
        if "num.io.threads" in changed:
            b.request_pool.resize(int(self.config.get("num.io.threads")))


def _thread_count(cfg: bc.BrokerConfig, name: str) -> int | None:
    raw = cfg.values.get(name) if name in bc.BROKER_KEYS else cfg.props.get(name)
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def _refresh_topic_defaults(b: LiveBroker) -> None:
    """Every topic takes the new broker defaults under its own overrides (Kafka's DynamicLogConfig.reconfigure)."""
    topics = b.topics
    with topics.change_lock:  # not while a topic is created, altered or deleted
        for info in list(topics.all_topics()):
            cfg = topics.stored_log_config(info.name, info.overrides)
            if cfg == info.log_config:
                continue
            info.log_config = cfg
            for p in range(int(info.num_partitions)):
                lg = topics.get_log(info.name, p)
                if lg is not None:
                    lg.update_config(cfg)


def _refresh_connection_limits(b: LiveBroker, cfg: bc.BrokerConfig) -> None:
    quotas = b.connection_quotas
    quotas.per_ip = cfg.get("max.connections.per.ip")
    quotas.overrides = parse_overrides(cfg.get("max.connections.per.ip.overrides") or "")
    budget = b.connection_budget
    loop = b.loop
    assert loop is not None  # a change is applied to a running broker
    explicit = "max.connections" in cfg.props
    if budget is not None:
        budget.explicit = explicit
    if explicit or budget is None or budget.current is None:
        loop.call_soon_threadsafe(quotas.set_max_connections, int(cfg.get("max.connections")))
    else:  # back to the derived default (the last one derived at once, then derived afresh)
        loop.call_soon_threadsafe(quotas.set_max_connections, budget.current.max_connections)
        budget.refresh_soon()


class FileStore:
    """One node's layers in a JSON file in the first log dir."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}, {}
        except (OSError, ValueError) as exc:
            log.error("dynamic broker configs unreadable, ignoring them", extra={"kv": {"path": self.path,
                                                                                      "error": exc}})
            return {}, {}
        if not isinstance(data, dict) or data.get("version") != STORE_VERSION:
            log.error("dynamic broker configs of an unknown version, ignoring them", extra={"kv": {"path": self.path}})
            return {}, {}
        default = {str(k): str(v) for k, v in (data.get("default") or {}).items()}
        brokers = {str(i): {str(k): str(v) for k, v in (c or {}).items()}
                   for i, c in (data.get("brokers") or {}).items()}
        return default, brokers

    def write(self, resource_name: str, node_id: int, layer: dict[str, str]) -> None:
        default, brokers = self.read()
        if resource_name == "":
            default = dict(layer)
        else:
            brokers[str(node_id)] = dict(layer)
        body = json.dumps({"version": STORE_VERSION, "default": default, "brokers": brokers},
                          indent=1, sort_keys=True).encode()
        tmp = self.path.with_suffix(".tmp")
        # may hold password configs (in clear when no password.encoder.secret is set): the owner's only
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a tmp file left by an older version kept its own mode
        with open(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        with contextlib.suppress(OSError):
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def incremented(layer: Mapping[str, str], ops: list[tuple[str, int, str | None]],
                list_default: Callable[[str], list[str] | None]) -> dict[str, str]:
    """IncrementalAlterConfigs ``ops`` (SET 0, DELETE 1, APPEND 2, SUBTRACT 3) applied to a layer."""
    out = dict(layer)
    for name, op, value in ops:
        if op == 0:
            out[name] = value or ""
        elif op == 1:
            out.pop(name, None)
        else:
            current = list_default(name)
            if current is None:
                raise DynamicConfigError(
                    ErrorCode.INVALID_REQUEST,
                    f"Config value {'append' if op == 2 else 'subtract'} is not allowed for config key: {name}")
            if name in out:
                current = [s.strip() for s in out[name].split(",") if s.strip()]
            given = [s.strip() for s in (value or "").split(",") if s.strip()]
            current = current + [g for g in given if g not in current] if op == 2 else \
                [c for c in current if c not in given]
            out[name] = ",".join(current)
    return out
