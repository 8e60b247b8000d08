"""Broker configuration: Kafka's broker property names and defaults.

Sources: Kafka ``server.properties`` / ``KafkaConfig`` (``ServerConfigs``, ``ServerLogConfigs``, ``SocketServerConfigs``,
``GroupCoordinatorConfig``).

Differences from Kafka, on purpose:

* ``log.dirs`` defaults to ``./data`` (Kafka: ``/tmp/kafka-logs``) so ``tidelog serve`` keeps its data next to you.
* ``listeners`` defaults to ``PLAINTEXT://127.0.0.1:9092`` (Kafka binds all interfaces). PLAINTEXT, SSL,
  SASL_PLAINTEXT and SASL_SSL listeners, named through ``listener.security.protocol.map``
  (``tidelog.broker.security.listeners``). JKS key/trust stores are not readable from Python: use PEM or PKCS12.
* ``tidelog.metrics.listener`` (alias ``metrics.port``) serves Prometheus ``/metrics``; default
  ``127.0.0.1:9404``. Set it to ``off`` (or an empty value) to disable. Port ``0`` picks a free port (logged).
  A port that cannot be bound stops the start with the address named (two brokers on one host need two
  ports). The listener also answers ``/healthz`` and ``/readyz`` (docs/METRICS.md).
* ``cluster.id``: when unset, the id in ``meta.properties`` of the first log dir is used, else a new one is made.

Unknown keys are warned about and kept (Kafka does the same); a bad value raises :class:`ConfigException`
naming the key, the value and the reason.

Topic-level defaults (``log.segment.bytes``, ``log.retention.ms``, ``message.max.bytes``, ...) are validated and
turned into a :class:`tidelog.storage.config.LogConfig` by ``LogConfig.from_broker_properties``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.broker.security.authorizer import authorizer_enabled
from tidelog.storage.checkpoints import parse_properties
from tidelog.storage.config import LogConfig

if TYPE_CHECKING:
    from tidelog.storage.config import LogConfig

log = logging.getLogger("tidelog.broker.config")

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigException(ValueError):
    """A broker configuration value is invalid (Kafka: ``org.apache.kafka.common.config.ConfigException``).
    The value of a sensitive config (:func:`is_sensitive_config`) is never put in the message."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        shown = "[hidden]" if is_sensitive_config(name) else repr(value)
        super().__init__(f"Invalid value {shown} for configuration {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


# ---------------------------------------------------------------------------------------------------------------
# Value parsers (Kafka's ConfigDef types)


def _parse_int(value: str, lo: int = -(2**31), hi: int = INT_MAX) -> int:
    v = int(value.strip())
    if not lo <= v <= hi:
        raise ValueError(f"must be in [{lo}, {hi}]")
    return v


def _parse_long(value: str) -> int:
    return _parse_int(value, -(2**63), LONG_MAX)


def _authorizer_class(value: str) -> str:
    authorizer_enabled(value)  # raises for an unknown class name
    return value.strip()


def _parse_bool(value: str) -> bool:
    s = value.strip().lower()
    if s == "true":
        return True
    if s == "false":
        return False
    raise ValueError("expected true or false")


def _parse_list(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def _nonneg_int(value: str) -> int:
    return _parse_int(value, 0)


def _pos_int(value: str) -> int:
    return _parse_int(value, 1)


def _pos_long(value: str) -> int:
    v = _parse_long(value)
    if v < 1:
        raise ValueError("must be >= 1")
    return v


def _nonneg_long(value: str) -> int:
    v = _parse_long(value)
    if v < 0:
        raise ValueError("must be >= 0")
    return v


MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


def _migration_policy(value: str) -> str:
    """``group.consumer.migration.policy``: Kafka's ConsumerGroupMigrationPolicy names (case-insensitive)."""
    v = value.strip().lower()
    if v not in MIGRATION_POLICIES:
        raise ValueError(f"must be one of {', '.join(MIGRATION_POLICIES)}")
    return v


def _replication_factor(value: str) -> int:
    return _parse_int(value, 1, 32767)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:\[\]]*):(\d+)$")


def parse_listeners(value: str) -> list[Listener]:
    out: list[Listener] = []
    for part in _parse_list(value):
        m = _LISTENER_RE.match(part)
        if not m:
            raise ValueError(f"{part!r} is not NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if port > 65535:
            raise ValueError(f"port {port} out of range")
        out.append(Listener(name, host, port))
    if not out:
        raise ValueError("at least one listener is required")
    names = [li.name for li in out]
    if len(set(names)) != len(names):
        raise ValueError("each listener name must appear once")
    return out


def parse_host_port(value: str) -> tuple[str, int] | None:
    """``host:port`` or ``port`` or ``off``/empty (disabled)."""
    s = value.strip()
    if s.lower() in ("", "off", "none", "false", "disabled"):
        return None
    if ":" in s:
        host, _, port_s = s.rpartition(":")
        host = host.strip("[]") or "0.0.0.0"
    else:
        host, port_s = "127.0.0.1", s
    port = int(port_s)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    return host, port


# ---------------------------------------------------------------------------------------------------------------
# The known keys: name -> (default as Kafka writes it, parser, doc). ``None`` default = unset.


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: str | None
    parse: Callable[[str], Any]
    doc: str


def _key(name: str, default: str | None, parse: Callable[[str], Any], doc: str = "") -> ConfigKey:
    return ConfigKey(name, default, parse, doc)


BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _key("node.id", None, _nonneg_int, "this broker's id (KRaft name); defaults to broker.id"),
        _key("broker.id", "0", lambda v: _parse_int(v, -1), "this broker's id (ZooKeeper-era name)"),
        _key("listeners", "PLAINTEXT://127.0.0.1:9092", parse_listeners, "NAME://host:port, comma separated"),
        _key("advertised.listeners", None, parse_listeners, "what Metadata tells clients; default listeners"),
        _key("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
             str, "listener name -> security protocol"),
        _key("inter.broker.listener.name", None, str),
        _key("security.inter.broker.protocol", "PLAINTEXT", str),
        # TLS (Kafka's SslConfigs / BrokerSecurityConfigs); each may be given per listener as listener.name.<l>.<key>
        _key("ssl.keystore.type", "JKS", str, "PEM or PKCS12 (JKS is not readable here)"),
        _key("ssl.keystore.location", None, str),
        _key("ssl.keystore.password", None, str),
        _key("ssl.key.password", None, str),
        _key("ssl.keystore.certificate.chain", None, str),
        _key("ssl.keystore.key", None, str),
        _key("ssl.truststore.type", "JKS", str, "PEM or PKCS12 (JKS is not readable here)"),
        _key("ssl.truststore.location", None, str),
        _key("ssl.truststore.password", None, str),
        _key("ssl.truststore.certificates", None, str),
        _key("ssl.client.auth", "none", str, "none | requested | required"),
        _key("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", str),
        _key("ssl.protocol", "TLSv1.3", str),
        _key("ssl.cipher.suites", None, str),
        _key("ssl.principal.mapping.rules", "DEFAULT", str),
        _key("ssl.endpoint.identification.algorithm", "https", str),
        # SASL (Kafka's BrokerSecurityConfigs / SaslConfigs)
        _key("sasl.enabled.mechanisms", "GSSAPI", str, "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 are implemented"),
        _key("sasl.mechanism.inter.broker.protocol", "GSSAPI", str),
        _key("sasl.jaas.config", None, str),
        _key("sasl.server.max.receive.size", "524288", _pos_int, "largest frame before authentication"),
        _key("connections.max.reauth.ms", "0", _nonneg_long, "KIP-368: SASL session lifetime (0: none)"),
        # dynamic password configs at rest (Kafka's PasswordEncoderConfigs; broker/password_encoder.py)
        _key("password.encoder.secret", None, str, "encodes dynamic password configs in the config store"),
        _key("password.encoder.old.secret", None, str, "the previous secret, while rotating it"),
        _key("password.encoder.keyfactory.algorithm", None, str,
             "PBKDF2WithHmacSHA512 (default), PBKDF2WithHmacSHA256 or PBKDF2WithHmacSHA1"),
        _key("password.encoder.cipher.algorithm", "AES/CBC/PKCS5Padding", str, "or AES/GCM/NoPadding"),
        _key("password.encoder.key.length", "128", _pos_int, "bits: 128, 192 or 256"),
        _key("password.encoder.iterations", "4096", _pos_int, "PBKDF2 iterations, at least 1024"),
        # authorization (Kafka's AclAuthorizer / StandardAuthorizer settings)
        _key("authorizer.class.name", "", _authorizer_class,
             "empty: no authorizer; kafka.security.authorizer.AclAuthorizer, "
             "org.apache.kafka.metadata.authorizer.StandardAuthorizer or tidelog.AclAuthorizer: ACLs"),
        _key("super.users", "", str, "principals allowed everything, semicolon separated (User:a;User:b)"),
        _key("allow.everyone.if.no.acl.found", "false", _parse_bool,
             "a resource without any ACL is open to everyone"),
        _key("log.dirs", None, _parse_list, "data directories (tidelog default ./data; Kafka /tmp/kafka-logs)"),
        _key("log.dir", "./data", str, "single data directory, used when log.dirs is unset"),
        _key("num.partitions", "1", _pos_int, "partitions of an auto-created topic"),
        _key("default.replication.factor", "1", _replication_factor),
        _key("auto.create.topics.enable", "true", _parse_bool),
        _key("max.request.partition.size.limit", "2000", _pos_int,
             "most partitions one DescribeTopicPartitions response describes (KIP-966)"),
        _key("delete.topic.enable", "true", _parse_bool),
        _key("socket.request.max.bytes", "104857600", _pos_int, "largest request frame accepted"),
        _key("socket.send.buffer.bytes", "102400", lambda v: _parse_int(v, -1)),
        _key("socket.receive.buffer.bytes", "102400", lambda v: _parse_int(v, -1)),
        _key("socket.listen.backlog.size", "50", _pos_int),
        _key("connections.max.idle.ms", "600000", _parse_long, "idle connections are closed after this"),
        _key("num.network.threads", "3", _pos_int, "accepted for compatibility; tidelog uses one event loop"),
        _key("num.io.threads", "8", _pos_int, "request handler threads: heavy produce validation, topic changes"),
        _key("tidelog.decompression.heavy.slots", "0", _nonneg_int,
             "produce validations inflating past tidelog.decompression.unbudgeted.bytes that run at once, "
             "broker-wide (0: half the cores, at least 1); the others wait"),
        _key("tidelog.decompression.unbudgeted.bytes", str(16 << 20), _nonneg_int,
             "decompressed bytes a produce request may validate without a heavy slot"),
        _key("queued.max.requests", "500", _pos_int,
             "accepted for compatibility: a connection has one request in flight (bounded by max.connections; "
             "plus tidelog.produce.pipeline.max.requests acks=all produces waiting for their replicas)"),
        _key("queued.max.request.bytes", "-1", _parse_long,
             "bound on memory of request frames being read (-1: none); reading pauses when it is reached"),
        _key("max.connections", "2147483647", _nonneg_int,
             "broker-wide; accepting waits for a free slot (the inter-broker listener is exempt); when not set, "
             "derived from ulimit -n: what the open files and tidelog.open.files.reserve leave (logged at start)"),
        _key("max.connections.per.ip", "2147483647", _nonneg_int, "new connections beyond it are closed"),
        _key("max.connections.per.ip.overrides", "", str, "host:count,host:count"),
        _key("quota.window.num", "11", _pos_int, "samples of a client quota's rate"),
        _key("quota.window.size.seconds", "1", _pos_int, "length of one sample of a client quota's rate"),
        _key("tidelog.quota.sensors.max", "10000", _pos_int,
             "quota sensors (and cached resolutions) per quota key; beyond it, sensors idle past the rate window "
             "are evicted, else new client ids share an overflow sensor"),
        _key("tidelog.quota.sensor.expiration.ms", "3600000", _pos_int,
             "a quota sensor unused this long is dropped (Kafka: one hour)"),
        _key("num.recovery.threads.per.data.dir", "2", _pos_int),
        _key("log.flush.offset.checkpoint.interval.ms", "60000", _nonneg_int),
        _key("log.flush.start.offset.checkpoint.interval.ms", "60000", _nonneg_int),
        _key("log.flush.scheduler.interval.ms", str(LONG_MAX), _parse_long),
        _key("log.retention.check.interval.ms", "300000", _nonneg_long),
        _key("replica.high.watermark.checkpoint.interval.ms", "5000", _nonneg_long),
        _key("group.initial.rebalance.delay.ms", "3000", _nonneg_int),
        _key("group.min.session.timeout.ms", "6000", _nonneg_int),
        _key("group.max.session.timeout.ms", "1800000", _nonneg_int),
        # KIP-848 consumer groups (broker/group/consumer_group.py): Kafka's GroupCoordinatorConfig names and defaults
        _key("group.consumer.session.timeout.ms", "45000", _pos_int),
        _key("group.consumer.min.session.timeout.ms", "45000", _pos_int),
        _key("group.consumer.max.session.timeout.ms", "60000", _pos_int),
        _key("group.consumer.heartbeat.interval.ms", "5000", _pos_int),
        _key("group.consumer.min.heartbeat.interval.ms", "5000", _pos_int),
        _key("group.consumer.max.heartbeat.interval.ms", "15000", _pos_int),
        _key("group.consumer.max.size", "2147483647", _pos_int),
        _key("group.consumer.regex.refresh.interval.ms", "600000", _pos_int, "a group's regex subscriptions are "
             "resolved again (with the heartbeating principal's DESCRIBE ACLs) at least this often; min 1000 here"),
        _key("group.consumer.assignors", "uniform", str, "server-side assignors: uniform, range (the first is the "
             "default)"),
        _key("group.consumer.migration.policy", "bidirectional", _migration_policy,
             "online conversion between classic and consumer groups: disabled, downgrade, upgrade, bidirectional"),
        # KIP-932 share groups (broker/group/share_group.py): Kafka's ShareGroupConfig names and defaults
        _key("group.share.session.timeout.ms", "45000", _pos_int),
        _key("group.share.heartbeat.interval.ms", "5000", _pos_int),
        _key("group.share.max.size", "200", _pos_int),
        _key("group.share.record.lock.duration.ms", "30000", _pos_int),
        _key("group.share.min.record.lock.duration.ms", "15000", _pos_int),
        _key("group.share.max.record.lock.duration.ms", "60000", _pos_int),
        _key("group.share.delivery.count.limit", "5", _pos_int),
        _key("group.share.partition.max.record.locks", "2000", _pos_int),
        _key("group.share.max.share.sessions", "2000", _pos_int),
        _key("group.share.initialize.retry.interval.ms", "30000", _pos_int),
        _key("share.auto.offset.reset", "latest", str, "where a share group starts on a partition it never read: "
             "latest or earliest (Kafka: a group config; tidelog: a broker-wide default)"),
        # KIP-932 share coordinator (broker/group/share_coordinator.py): Kafka's ShareCoordinatorConfig names, defaults
        _key("share.coordinator.state.topic.num.partitions", "50", _pos_int),
        _key("share.coordinator.state.topic.replication.factor", "3", _replication_factor),
        _key("share.coordinator.state.topic.segment.bytes", "104857600", _pos_int),
        _key("share.coordinator.state.topic.min.isr", "2", _pos_int),
        _key("share.coordinator.snapshot.update.records.per.snapshot", "500", _nonneg_int),
        _key("share.coordinator.write.timeout.ms", "5000", _pos_int),
        _key("offsets.topic.num.partitions", "50", _pos_int),
        _key("offsets.topic.replication.factor", "3", _replication_factor),
        _key("offsets.topic.segment.bytes", "104857600", _pos_int),
        _key("offsets.retention.minutes", "10080", _pos_int),
        _key("transaction.state.log.num.partitions", "50", _pos_int),
        _key("transaction.state.log.replication.factor", "3", _replication_factor),
        _key("transaction.state.log.min.isr", "2", _pos_int),
        _key("transaction.max.timeout.ms", "900000", _pos_int),
        _key("transactional.id.expiration.ms", "604800000", _pos_int),
        _key("transaction.state.log.segment.bytes", "104857600", _pos_int),
        _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", _pos_int),
        _key("transaction.remove.expired.transaction.cleanup.interval.ms", "3600000", _pos_int),
        _key("transaction.partition.verification.enable", "true", _parse_bool,
             "KIP-890: verify a transactional batch's partition with the coordinator before appending it"),
        _key("producer.id.expiration.ms", "86400000", _nonneg_int),
        _key("replica.fetch.max.bytes", "1048576", _nonneg_int),
        _key("replica.lag.time.max.ms", "30000", _parse_long),
        _key("fetch.max.bytes", "57671680", _nonneg_int, "upper bound on a fetch response"),
        _key("max.incremental.fetch.session.cache.slots", "1000", _nonneg_int, "cached fetch sessions (KIP-227)"),
        _key("min.incremental.fetch.session.eviction.ms", "120000", _nonneg_int,
             "idle time before a fetch session may be evicted for a new one"),
        _key("request.timeout.ms", "30000", _nonneg_int),
        _key("cluster.id", None, str, "default: from meta.properties, else generated"),
        _key("process.roles", None, str, "accepted; tidelog runs broker,controller in one process"),
        _key("controller.quorum.voters", None, str),
        _key("controller.listener.names", None, str),
        _key("zookeeper.connect", None, str, "set: cluster mode (replication coordinated by ZooKeeper); unset: one node"),
        _key("zookeeper.session.timeout.ms", "18000", _pos_int),
        _key("controlled.shutdown.enable", "true", _parse_bool, "ZooKeeper mode: move leaderships away on SIGTERM"),
        _key("controlled.shutdown.max.retries", "3", _pos_int),
        _key("controlled.shutdown.retry.backoff.ms", "5000", _nonneg_int),
        _key("auto.leader.rebalance.enable", "true", _parse_bool, "ZooKeeper mode: give leaderships back to preferred replicas"),
        _key("leader.imbalance.check.interval.seconds", "300", _pos_int),
        _key("leader.imbalance.per.broker.percentage", "10", _nonneg_int),
        _key("replica.fetch.wait.max.ms", "500", _nonneg_int),
        _key("replica.fetch.backoff.ms", "1000", _nonneg_int),
        _key("replica.fetch.min.bytes", "1", _pos_int),
        _key("replica.fetch.response.max.bytes", "10485760", _nonneg_int),
        _key("num.replica.fetchers", "1", _pos_int, "ZooKeeper mode: fetchers (connections) per source broker"),
        _key("num.replica.alter.log.dirs.threads", None, _pos_int,
             "AlterReplicaLogDirs: threads moving replicas between log dirs (default: one per log dir)"),
        _key("replica.alter.log.dirs.io.max.bytes.per.second", str(LONG_MAX), _pos_long,
             "AlterReplicaLogDirs: the copy rate of a replica move, bytes per second"),
        _key("tidelog.metadata.departed.broker.ms", "0", _nonneg_int,
             "ZooKeeper mode: a broker that left stays in Metadata's broker list this long (librdkafka failover)"),
        _key("tidelog.zookeeper.close.previous.session", "true", _parse_bool,
             "ZooKeeper mode: a broker restarted after a crash closes its previous, still open ZooKeeper session "
             "(kept in its log directory) instead of waiting for it to expire"),
        _key("metrics.port", None, str, "alias of tidelog.metrics.listener"),
        _key("tidelog.metrics.listener", "127.0.0.1:9404", parse_host_port, "Prometheus host:port, or off"),
        _key("tidelog.produce.pipeline.max.requests", "5", _pos_int,
             "acks=all Produce requests of one plain connection appended while earlier ones still wait for their "
             "replicas (answered in order); 1: one request at a time, as Kafka"),
        _key("tidelog.log.tick.interval.ms", "1000", _pos_int, "how often the log manager's tick runs"),
        _key("tidelog.open.files.reserve", None, _nonneg_int,
             "open files kept out of the partitions' and connections' budget (default a quarter of ulimit -n, at "
             "least 64): a creation that would open more is refused (POLICY_VIOLATION; auto-creation: "
             "UNKNOWN_TOPIC_OR_PARTITION)"),
        _key(
            "tidelog.min.segment.bytes",
            None,
            _pos_int,
            "lower the 1 MiB minimum of segment.bytes (KIP-1030) for tests that need tiny segments",
        ),
    ]
}

# Broker keys that set topic-level defaults; validated by LogConfig.from_broker_properties. Listed so they do
# not trigger the unknown-key warning. Sources: Kafka ServerLogConfigs, CleanerConfig.
LOG_DEFAULT_KEYS: frozenset[str] = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.roll.jitter.ms",
        "log.roll.jitter.hours",
        "log.index.size.max.bytes",
        "log.index.interval.bytes",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.cleanup.policy",
        "log.cleaner.enable",
        "log.cleaner.threads",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.max.bytes.per.second",
        "log.message.timestamp.type",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.message.timestamp.difference.max.ms",
        "log.message.downconversion.enable",
        "log.segment.delete.delay.ms",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.preallocate",
        "log.local.retention.ms",
        "log.local.retention.bytes",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "message.max.bytes",
        "min.insync.replicas",
        "unclean.leader.election.enable",
    }
)


def is_known_key(name: str) -> bool:
    # listener.name.<l>.<config>: per-listener security settings, validated when the listeners are built
    return name in BROKER_KEYS or name in LOG_DEFAULT_KEYS or name.startswith("listener.name.")


# Kafka's PASSWORD-type broker configs (ConfigDef.Type.PASSWORD): DescribeConfigs answers them with a null value
# and isSensitive=true, and Kafka never logs their values. A listener prefix (``listener.name.<l>.`` and
# ``listener.name.<l>.<mechanism>.``) keeps the base config's type.
SENSITIVE_CONFIGS = frozenset({
    "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "sasl.jaas.config",
    "password.encoder.secret", "password.encoder.old.secret", "delegation.token.master.key",
    "delegation.token.secret.key", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase",
})


def is_sensitive_config(name: str) -> bool:
    """True for a config whose value must not be shown or logged: Kafka's PASSWORD configs (with or without a
    listener prefix), and, erring on the safe side for keys tidelog does not know, any name that ends in
    ``password``, ``jaas.config`` or ``passphrase`` or mentions ``secret``."""
    base = name.lower()
    if base.startswith("listener.name."):
        parts = base.split(".")
        # listener.name.<l>.<config> or listener.name.<l>.<mechanism>.<config>
        candidates = {".".join(parts[3:]), ".".join(parts[4:])}
    else:
        candidates = {base}
    return any(
        c in SENSITIVE_CONFIGS or c.endswith(("password", "jaas.config", "passphrase")) or "secret" in c
        for c in candidates if c
    )


def shown_value(name: str, value: object) -> object:
    """``value`` for logs and messages, or ``[hidden]`` for a sensitive config."""
    return "[hidden]" if is_sensitive_config(name) else value


# ---------------------------------------------------------------------------------------------------------------
# Java properties files


# Java properties files: one parser for the project, the storage layer's ``parse_properties`` (meta.properties
# is read with it too); imported above and re-exported here for the configuration code.


def load_properties(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigException("--config", str(path), f"cannot read file: {exc.strerror or exc}") from exc
    try:
        return parse_properties(text)
    except ValueError as exc:  # Java's Properties.load: "Malformed \\uxxxx encoding"
        raise ConfigException("--config", str(path), str(exc)) from exc


def parse_override(item: str) -> tuple[str, str]:
    """``key=value`` as given to ``--override`` (kafka-server-start.sh ``--override``)."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigException("--override", item, "expected key=value")
    return key, value.strip()


# ---------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class BrokerConfig:
    """Parsed broker configuration. ``props`` keeps every key as given (file, then overrides)."""

    props: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)
    _log_config: LogConfig | None = None

    # -- construction ----------------------------------------------------------------------------------------

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, warn_unknown: bool = True) -> BrokerConfig:
        props = {str(k).strip(): str(v) for k, v in props.items()}
        values: dict[str, Any] = {}
        for key in BROKER_KEYS.values():
            raw = props.get(key.name, key.default)
            if raw is None:
                values[key.name] = None
                continue
            try:
                values[key.name] = key.parse(raw)
            except (ValueError, TypeError) as exc:
                raise ConfigException(key.name, raw, str(exc) or "not a valid value") from None
        unknown = sorted(k for k in props if not is_known_key(k))
        if warn_unknown:
            for k in unknown:
                log.warning("unknown broker config %s=%s ignored (kept as given)", k, shown_value(k, props[k]))
        cfg = cls(props=props, values=values, unknown_keys=unknown)
        cfg._validate()
        return cfg

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        overrides: Iterable[str | tuple[str, str]] = (),
        **convenience: Any,
    ) -> BrokerConfig:
        """Load a properties file (optional), then apply ``key=value`` overrides, then convenience options
        (``host``, ``port``, ``data_dir``; ``None`` = not given), later wins."""
        props: dict[str, str] = load_properties(path) if path is not None else {}
        for item in overrides:
            k, v = parse_override(item) if isinstance(item, str) else item
            props[k] = v
        host, port, data_dir = convenience.get("host"), convenience.get("port"), convenience.get("data_dir")
        if host is not None or port is not None:
            base = cls.from_properties({k: v for k, v in props.items() if k in ("listeners", "listener.security.protocol.map")},
                                       warn_unknown=False)
            first = base.listeners[0]
            # --host/--port set the first listener; the others stay as configured
            props["listeners"] = ",".join([
                f"{first.name}://{host if host is not None else first.host}:{port if port is not None else first.port}",
                *(str(li) for li in base.listeners[1:]),
            ])
        if data_dir is not None:
            props["log.dirs"] = str(data_dir)
        return cls.from_properties(props)

    def _validate(self) -> None:
        pmap = self.security_protocol_map
        for li in self.listeners:
            if li.name not in pmap:
                raise ConfigException(
                    "listener.security.protocol.map", self.values["listener.security.protocol.map"],
                    f"no security protocol defined for listener {li.name}",
                )
        adv = self.values.get("advertised.listeners")
        names = {li.name for li in self.listeners}
        for a in adv or ():
            if a.name not in names:
                raise ConfigException(
                    "advertised.listeners", self.props["advertised.listeners"],
                    f"{a.name} is not a listener (advertised listener names must also appear in listeners)",
                )
        ibl = self.values.get("inter.broker.listener.name")
        if ibl is not None and ibl.upper() not in names:
            raise ConfigException("inter.broker.listener.name", ibl, "must be one of the listeners")
        if "node.id" in self.props and "broker.id" in self.props and self.node_id != self.values["broker.id"]:
            raise ConfigException("node.id", self.props["node.id"], "differs from broker.id")
        if self.node_id < 0:
            raise ConfigException("broker.id", self.values["broker.id"], "automatic broker ids are not supported")
        if self.values["default.replication.factor"] > 1 and not self.values.get("zookeeper.connect"):
            log.warning(
                "default.replication.factor=%s: this broker runs alone, topics with RF>1 cannot be created",
                self.values["default.replication.factor"],
            )
        if "metrics.port" in self.props and "tidelog.metrics.listener" not in self.props:
            try:
                self.values["tidelog.metrics.listener"] = parse_host_port(self.props["metrics.port"])
            except ValueError as exc:
                raise ConfigException("metrics.port", self.props["metrics.port"], str(exc)) from None
        for d in self.log_dirs:  # a file where a log directory (or one of its parents) should be
            existing = next((a for a in (d, *d.parents) if a.exists()), None)
            if existing is not None and not existing.is_dir():
                raise ConfigException("log.dirs", str(d), f"{existing} is a file, not a directory")
        # validate topic-level defaults now, so a bad value stops the broker at start with a clear message
        self.log_config()

    # -- typed accessors -------------------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        return self.values[name]

    @property
    def node_id(self) -> int:
        nid = self.values.get("node.id")
        return int(nid) if nid is not None else int(self.values["broker.id"])

    @property
    def listeners(self) -> list[Listener]:
        return self.values["listeners"]

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as {LISTENER NAME: protocol}."""
        out: dict[str, str] = {}
        raw = self.values["listener.security.protocol.map"]
        for item in _parse_list(raw):
            name, sep, proto = item.partition(":")
            proto = proto.strip().upper()
            if not sep or proto not in SECURITY_PROTOCOLS:
                raise ConfigException("listener.security.protocol.map", raw,
                                      f"{item!r} is not NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
            out[name.strip().upper()] = proto
        return out

    @property
    def listener(self) -> Listener:
        """The inter-broker listener (``inter.broker.listener.name``, else the one named after
        ``security.inter.broker.protocol``), else the first: the endpoint this broker registers in cluster mode."""
        names = {li.name: li for li in self.listeners}
        ibl = self.values.get("inter.broker.listener.name")
        if ibl is not None and ibl.upper() in names:
            return names[ibl.upper()]
        sib = str(self.values.get("security.inter.broker.protocol") or "").upper()
        if sib in names:
            return names[sib]
        return self.listeners[0]

    def advertised_for(self, name: str) -> Listener | None:
        """The advertised endpoint of listener ``name`` (None: advertise what it binds)."""
        for a in self.values.get("advertised.listeners") or ():
            if a.name == name:
                return a
        return None

    @property
    def advertised_listener(self) -> Listener | None:
        return self.advertised_for(self.listener.name)

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values.get("log.dirs") or [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def num_partitions(self) -> int:
        return self.values["num.partitions"]

    @property
    def default_replication_factor(self) -> int:
        return self.values["default.replication.factor"]

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.values["auto.create.topics.enable"]

    @property
    def socket_request_max_bytes(self) -> int:
        return self.values["socket.request.max.bytes"]

    @property
    def produce_pipeline_max_requests(self) -> int:
        return self.values["tidelog.produce.pipeline.max.requests"]

    @property
    def connections_max_idle_ms(self) -> int:
        return self.values["connections.max.idle.ms"]

    @property
    def metrics_listener(self) -> tuple[str, int] | None:
        return self.values["tidelog.metrics.listener"]

    @property
    def cluster_id(self) -> str | None:
        return self.values.get("cluster.id")

    @property
    def message_max_bytes(self) -> int:
        raw = self.props.get("message.max.bytes", "1048588")
        try:
            return int(raw)
        except ValueError:
            raise ConfigException("message.max.bytes", raw, "not an integer") from None

    def broker_log_properties(self) -> dict[str, str]:
        """The broker-level properties that define topic defaults (``log.*``, ``message.max.bytes``, ...)."""
        return {k: v for k, v in self.props.items() if k in LOG_DEFAULT_KEYS or k.startswith("log.")}

    def log_config(self) -> LogConfig:
        """The default LogConfig for topics (topic overrides are applied on top by the TopicManager)."""
        if self._log_config is None:
            try:
                self._log_config = LogConfig.from_broker_properties(
                    self.broker_log_properties(), min_segment_bytes=self.values.get("tidelog.min.segment.bytes")
                )
            except ValueError as exc:  # storage's InvalidConfigError is a ValueError
                name = getattr(exc, "name", "log config")
                value = getattr(exc, "value", "")
                reason = getattr(exc, "reason", str(exc))
                raise ConfigException(name, value, reason) from None
        return self._log_config

    def describe(self) -> dict[str, str]:
        """Effective value of every known key (for logs and DescribeConfigs on the broker resource)."""
        out: dict[str, str] = {}
        for key in BROKER_KEYS.values():
            raw = self.props.get(key.name, key.default)
            if raw is not None:
                out[key.name] = raw
        for k, v in self.props.items():
            out.setdefault(k, v)
        return out
