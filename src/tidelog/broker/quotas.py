"""Client quotas (Kafka's ``ClientQuotaManager`` / ``ClientRequestQuotaManager``, KIP-13, KIP-55, KIP-124, KIP-219).

Entities and precedence
    A quota is set on an entity: a user, a client id, or both, each either named or ``<default>`` (the name
    ``None`` on the wire). For each quota key separately, the quota applied to a request of (user, client id) is
    the first configured one in Kafka's order::

        /config/users/<user>/clients/<client-id>
        /config/users/<user>/clients/<default>
        /config/users/<user>
        /config/users/<default>/clients/<client-id>
        /config/users/<default>/clients/<default>
        /config/users/<default>
        /config/clients/<client-id>
        /config/clients/<default>

    The user is the principal's name (``User:alice`` -> ``alice``; an unauthenticated client is ``ANONYMOUS``).
    Clients that resolve to the same entry share its rate: the sensor is keyed as Kafka keys it (a user-level
    quota is shared by every client id of that user, a client-id level one by every user of that client id).

Keys
    ``producer_byte_rate`` (bytes of Produce requests per second), ``consumer_byte_rate`` (bytes of Fetch
    responses per second), ``request_percentage`` (handler time, as a percentage of one thread, per second) and
    ``controller_mutation_rate`` (partitions created or deleted per second by CreateTopics, CreatePartitions and
    DeleteTopics, on a token bucket, KIP-599).

Rates and throttle time
    Kafka's ``Rate`` over a ``SampledStat``: ``quota.window.num`` samples (11) of ``quota.window.size.seconds``
    (1 s). The rate is the sum of the live samples over the elapsed time since the oldest sample started, that
    time counted as at least ``num - 1`` full windows; a value is recorded first, then checked. A rate above
    the bound ``Q`` gives the throttle time ``(rate - Q) / Q * window`` ms (``QuotaUtils.throttleTime``); the
    request quota's is capped at one window (``ClientRequestQuotaManager``).

Hot path
    ``ClientQuotaManager.enabled`` is False while no quota is configured: the server and the Produce/Fetch
    handlers test that one attribute and do nothing else (the admin handlers test the mutation quota's limits).

Bounds (issue 24)
    The sensors and the resolution cache are bounded tables (``quota_sensors.py``): O(1) amortized per request,
    at most ``tidelog.quota.sensors.max`` entries per key, sensors expiring after
    ``tidelog.quota.sensor.expiration.ms`` unused; past the bound, new client ids share an overflow sensor.

Storage
    The store is the replica manager's (``make_quota_store``): one node, :class:`LocalQuotaStore`, the file
    ``tidelog-quotas.json`` in the first log dir written atomically; ZooKeeper mode,
    ``tidelog.cluster.quotas.ZkQuotaStore`` (``/config/users``, ``/config/clients``, as Kafka). The broker holds
    it (``broker.quota_store``, AlterClientQuotas writes it); it is made with the listener
    (:meth:`ClientQuotaManager.listener_on`) that hands every change to this manager.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tidelog.broker.quota_sensors import RateSensor, ResolutionCache, Sensor, SensorTable, TokenBucket
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.storage.checkpoints import atomic_write

if TYPE_CHECKING:
    import asyncio

    from tidelog.broker.handlers import RequestContext
    from tidelog.broker.handlers.bodies import ComponentData, EntityData, OpData

log = logging.getLogger("tidelog.broker.quotas")

QUOTAS_FILE = "tidelog-quotas.json"

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
DEFAULT_NAME = "<default>"  # how ZooKeeper paths and tools write the default entity (None on the wire)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's QuotaConfigs (user and client-id entities): the key and its ConfigDef type
QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}

INVALID_REQUEST = ErrorCode.INVALID_REQUEST
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
NANOS_TO_PERCENTAGE = 100.0 / 1e9  # Kafka's ClientRequestQuotaManager.NanosToPercentagePerSecond
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000  # Kafka purges quota sensors idle for an hour
MAX_SENSORS = 10_000  # per quota key, and as many cached resolutions (see quota_sensors.py)


class _Default:
    """The ``<default>`` entity name (``None`` in the protocol)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return DEFAULT_NAME


DEFAULT = _Default()

#: one part of an entity: None (that entity type is not part of it), DEFAULT, or a name
EntityName = str | _Default | None
# an entity: (user, client_id)
Entity = tuple[EntityName, EntityName]


class QuotaError(Exception):
    """A refused quota request: a Kafka error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ----------------------------------------------------------------------------------------------------------------
# Entities: the protocol's [(entity_type, entity_name)] <-> (user, client_id)


def entity_from_protocol(parts: Iterable[EntityData]) -> Entity:
    """``[{"entity_type", "entity_name"}]`` (name None: the default) as ``(user, client_id)``. Raises QuotaError
    (INVALID_REQUEST) with Kafka's messages (``ClientQuotaControlManager.validateEntity``)."""
    user: EntityName = None
    client: EntityName = None
    seen: set[str | None] = set()
    parts = list(parts)
    if not parts:
        raise QuotaError(INVALID_REQUEST, "Invalid empty client quota entity")
    for p in parts:
        etype = p.get("entity_type")
        name = p.get("entity_name")
        if etype in seen:
            raise QuotaError(INVALID_REQUEST, f"Invalid empty client quota entity, duplicate entity entry {etype}")
        seen.add(etype)
        if etype not in (USER, CLIENT_ID, IP):
            raise QuotaError(INVALID_REQUEST, f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise QuotaError(INVALID_REQUEST, f"Empty {etype} not supported")
        if etype == IP:
            # Kafka's IP quotas (connection_creation_rate, KIP-612) are not implemented
            raise QuotaError(INVALID_REQUEST, "ip quota entities (connection_creation_rate) are not supported")
        value = DEFAULT if name is None else name
        if etype == USER:
            user = value
        else:
            client = value
    return user, client


def entity_to_protocol(entity: Entity) -> list[EntityData]:
    user, client = entity
    out: list[EntityData] = []
    if user is not None:
        out.append({"entity_type": USER, "entity_name": None if isinstance(user, _Default) else user})
    if client is not None:
        out.append({"entity_type": CLIENT_ID, "entity_name": None if isinstance(client, _Default) else client})
    return out


def entity_to_json(entity: Entity) -> dict[str, str | None]:
    """The file's form: ``{"user": "alice", "client-id": null}`` (null: the default; an absent key: not part)."""
    out: dict[str, str | None] = {}
    for etype, value in zip((USER, CLIENT_ID), entity, strict=True):
        if value is not None:
            out[etype] = None if isinstance(value, _Default) else value
    return out


def entity_from_json(value: dict) -> Entity:
    def one(key: str) -> EntityName:
        if key not in value:
            return None
        v = value[key]
        return DEFAULT if v is None else str(v)

    return one(USER), one(CLIENT_ID)


def entity_label(entity: Entity) -> str:
    """``user 'alice', client-id <default>`` (for tools and logs)."""
    parts = []
    for etype, value in zip((USER, CLIENT_ID), entity, strict=True):
        if value is not None:
            parts.append(f"{etype} {DEFAULT_NAME if value is DEFAULT else repr(value)}")
    return ", ".join(parts)


def validate_value(key: str, value: object) -> float:
    """Kafka's ``validateQuotaKeyValue``: a known key; LONG keys take integral values. Returns the value."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        raise QuotaError(INVALID_REQUEST, f"Invalid configuration key {key}")
    if not isinstance(value, (int, float)) or math.isnan(value):
        raise QuotaError(INVALID_REQUEST, f"Configuration {key} must be a number")
    if kind == "LONG":
        eps = 1e-6
        if math.isinf(value) or abs(float(int(value + eps)) - value) > eps:
            raise QuotaError(INVALID_REQUEST, f"Configuration {key} must be a Long value")
    return float(value)


def alteration(entity_ops: list[OpData]) -> dict[str, float | None]:
    """One AlterClientQuotas entry's ops as ``{key: value or None (remove)}``, validated (raises QuotaError)."""
    out: dict[str, float | None] = {}
    for op in entity_ops:
        key = op.get("key") or ""
        if key in out:
            raise QuotaError(INVALID_REQUEST, f"Duplicate quota key {key} not updating quota for this entity")
        if op.get("remove"):
            if key not in QUOTA_KEYS:
                raise QuotaError(INVALID_REQUEST, f"Invalid configuration key {key}")
            out[key] = None
        else:
            out[key] = validate_value(key, op.get("value"))
    return out


def describe(entities: dict[Entity, dict[str, float]], components: list[ComponentData], strict: bool) -> list[Entity]:
    """The entities a DescribeClientQuotas filter selects (Kafka's ``ClientQuotasImage.describe``). Raises
    QuotaError: INVALID_REQUEST for a bad filter, UNSUPPORTED_VERSION for an unknown entity type."""
    exact: dict[str, str | _Default] = {}
    typed: set[str] = set()
    for c in components:
        etype = c.get("entity_type") or ""
        if not etype:
            raise QuotaError(INVALID_REQUEST, "Invalid empty entity type.")
        if etype in exact or etype in typed:
            raise QuotaError(INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in (IP, USER, CLIENT_ID):
            raise QuotaError(UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
        match_type, match = c.get("match_type"), c.get("match")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaError(INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaError(INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = DEFAULT
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaError(INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(etype)
        else:
            raise QuotaError(INVALID_REQUEST, f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and (set(exact) | typed) - {IP}:
        raise QuotaError(INVALID_REQUEST, "Invalid entity filter component combination. IP filter component "
                                          "should not be used with user or clientId filter component.")
    if not exact and not typed:
        return [] if strict else list(entities)
    out = []
    for entity in entities:
        values: dict[str, EntityName] = {USER: entity[0], CLIENT_ID: entity[1], IP: None}
        if any(values[t] is None or values[t] != want for t, want in exact.items()):
            continue
        if any(values[t] is None for t in typed):
            continue
        if strict and sum(v is not None for v in entity) != len(exact) + len(typed):
            continue
        out.append(entity)
    return out


def apply_alterations(entities: dict[Entity, dict[str, float]],
                      changes: list[tuple[Entity, dict[str, float | None]]]) -> dict[Entity, dict[str, float]]:
    """A copy of ``entities`` with ``changes`` applied (a value None removes the key; an entity with no key
    left is gone)."""
    out = {e: dict(v) for e, v in entities.items()}
    for entity, ops in changes:
        values = out.setdefault(entity, {})
        for key, value in ops.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        if not values:
            del out[entity]
    return out


# ----------------------------------------------------------------------------------------------------------------
# Storage: one node


QuotaListener = Callable[[dict[Entity, dict[str, float]]], None]
"""Called by a quota store with every entity's values after each change (any thread)."""


class QuotaStore(Protocol):
    """Where quota configs live (:class:`LocalQuotaStore`; ZooKeeper mode's ``ZkQuotaStore``): read and altered
    (blocking); made with the :data:`QuotaListener` it calls after each change."""

    def entities(self) -> dict[Entity, dict[str, float]]: ...

    def alter(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None: ...


class LocalQuotaStore:
    """Quota configs in ``tidelog-quotas.json`` in the first log dir (single-node mode): ``{"version": 1,
    "entities": [{"entity": {"user": "alice", "client-id": null}, "config": {"producer_byte_rate": 1048576}}]}``
    (null: ``<default>``), written atomically (temporary file, fsync, rename, directory fsync)."""

    def __init__(self, path: str | Path, listener: QuotaListener | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entities: dict[Entity, dict[str, float]] = {}
        self.listener = listener
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raw = {}
        for item in raw.get("entities") or ():
            entity = entity_from_json(item.get("entity") or {})
            config = {k: float(v) for k, v in (item.get("config") or {}).items() if k in QUOTA_KEYS}
            if config and entity != (None, None):
                self._entities[entity] = config

    def entities(self) -> dict[Entity, dict[str, float]]:
        with self._lock:
            return {e: dict(v) for e, v in self._entities.items()}

    def alter(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        """Blocking (a file write): run off the event loop."""
        with self._lock:
            entities = apply_alterations(self._entities, changes)
            data = {"version": 1, "entities": [{"entity": entity_to_json(e), "config": v}
                                               for e, v in entities.items()]}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(data, indent=1).encode())
            self._entities = entities
        if self.listener is not None:
            self.listener(self.entities())


# ----------------------------------------------------------------------------------------------------------------
# Rates


class _Kind:
    """The quotas of one key: the configured values per entity, the bounded cache of what each (user, client
    id) resolves to, and the bounded sensor table (``quota_sensors.py``)."""

    __slots__ = ("key", "limits", "resolved", "sensors")

    def __init__(self, key: str, sensors: SensorTable, max_resolved: int) -> None:
        self.key = key
        self.limits: dict[Entity, float] = {}
        self.resolved: ResolutionCache[tuple[str, str], tuple[float | None, tuple[str, str]]] = \
            ResolutionCache(max_resolved)
        self.sensors = sensors


def resolve(limits: dict[Entity, float], user: str, client: str) -> tuple[float | None, tuple[str, str]]:
    """The quota of (user, client id) for one key in Kafka's precedence order, and the (user, client id) tags
    of the sensor its rate is measured on (``DefaultQuotaCallback.quotaLimit`` / ``quotaMetricTags``)."""
    d = DEFAULT
    for entity, tags in (((user, client), (user, client)), ((user, d), (user, client)), ((user, None), (user, "")),
                         ((d, client), (user, client)), ((d, d), (user, client)), ((d, None), (user, "")),
                         ((None, client), ("", client)), ((None, d), ("", client))):
        limit = limits.get(entity)
        if limit is not None:
            return limit, tags
    return None, ("", "")


class ClientQuotaManager:
    """The broker's client quotas: configured values (from the store), rates and throttle times. Runs on the
    event loop; store changes arrive through :meth:`set_entities` (at start, from the storage thread) and the
    store's listener (:meth:`listener_on`)."""

    def __init__(self, window_num: int = 11, window_size_s: int = 1, max_sensors: int = MAX_SENSORS,
                 sensor_expiration_ms: float = INACTIVE_SENSOR_EXPIRATION_MS) -> None:
        self.window_num = max(1, int(window_num))
        self.window_ms = max(1, int(window_size_s)) * 1000
        self.enabled = False  # the hot path's one test: any quota configured
        self.entities: dict[Entity, dict[str, float]] = {}
        idle_ms = self.window_num * self.window_ms  # no sample left in the rate window: evictable when full

        def kind(key: str) -> _Kind:
            cls = TokenBucket if key == CONTROLLER_MUTATION_RATE else RateSensor
            table = SensorTable(lambda bound: cls(bound, self.window_num, self.window_ms), max_sensors,
                                sensor_expiration_ms, idle_ms)
            return _Kind(key, table, max_sensors)

        self.kinds: dict[str, _Kind] = {k: kind(k) for k in QUOTA_KEYS}
        # sensors: RateSensor (byte rates, request percentage) or TokenBucket (controller mutations)
        self.produce = self.kinds[PRODUCER_BYTE_RATE]
        self.fetch = self.kinds[CONSUMER_BYTE_RATE]
        self.request = self.kinds[REQUEST_PERCENTAGE]
        self.mutation = self.kinds[CONTROLLER_MUTATION_RATE]

    def listener_on(self, loop: asyncio.AbstractEventLoop | None) -> QuotaListener:
        """The listener a quota store is made with: every change it sees (on another thread, a request handler's
        or ZooKeeper's) is applied on ``loop``, which owns the sensors (None: at once, on the caller's thread)."""

        def changed(entities: dict[Entity, dict[str, float]]) -> None:
            if loop is None:
                self.set_entities(entities)
            else:
                loop.call_soon_threadsafe(self.set_entities, entities)

        return changed

    def set_entities(self, entities: dict[Entity, dict[str, float]]) -> None:
        for kind in self.kinds.values():
            limits = {e: v[kind.key] for e, v in entities.items() if kind.key in v}
            kind.limits = limits
            kind.resolved.clear()
            # existing rates keep their samples, new bound
            kind.sensors.rebind(functools.partial(_tag_limit, limits))
        self.entities = entities
        self.enabled = any(kind.limits for kind in self.kinds.values())

    # -- recording ---------------------------------------------------------------------------------------------

    def _sensor(self, kind: _Kind, user: str, client: str, now: float | None = None) -> Sensor | None:
        """The sensor a request of (user, client id) is measured on (None: no quota applies). O(1) amortized,
        bounded memory (``quota_sensors.py``)."""
        key = (user, client)
        resolved = kind.resolved
        res = resolved.get(key)
        if res is None:
            res = resolve(kind.limits, user, client)
            resolved.put(key, res)
        limit, tags = res
        if limit is None:
            return None
        return kind.sensors.get(tags, limit, time.monotonic() * 1000 if now is None else now)

    def expire(self, now_ms: float | None = None) -> None:
        """Drop the sensors idle past the expiration (each request also does it, from the front)."""
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        for kind in self.kinds.values():
            kind.sensors.expire(now)

    def record(self, kind: _Kind, principal: str, client_id: str | None, value: float,
               now_ms: float | None = None, max_throttle_ms: float | None = None) -> int:
        """Record ``value`` for the client; the throttle time in ms (0: within its quota, or none applies)."""
        if not kind.limits:
            return 0
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        sensor = self._sensor(kind, user_of(principal), client_id or "", now)
        if not isinstance(sensor, RateSensor):  # None: no quota applies (a TokenBucket is never recorded here)
            return 0
        return sensor.record(value, now, max_throttle_ms)

    def unrecord(self, kind: _Kind, principal: str, client_id: str | None, value: float) -> None:
        """Kafka's ``unrecordQuotaSensor``: a throttled Fetch answers no data, so its bytes are taken back."""
        sensor = self._sensor(kind, user_of(principal), client_id or "") if kind.limits else None
        if sensor is not None:
            sensor.add(-value, time.monotonic() * 1000)

    def max_value_in_window(self, kind: _Kind, principal: str, client_id: str | None) -> float:
        """The most one request may record without being throttled for sure (the fetch size cap):
        ``quota * (num - 1) * window`` (``maxValueInQuotaWindow``)."""
        if not kind.limits:
            return math.inf
        limit, _ = resolve(kind.limits, user_of(principal), client_id or "")
        if limit is None:
            return math.inf
        return limit * (self.window_num - 1) * self.window_ms / 1000.0

    def record_request(self, principal: str, client_id: str | None, seconds: float) -> int:
        """``request_percentage``: handler time as a percentage of one thread; throttle capped at one window."""
        if not self.request.limits:
            return 0
        return self.record(self.request, principal, client_id, seconds * 1e9 * NANOS_TO_PERCENTAGE,
                           max_throttle_ms=self.window_ms)

    def throttled(self, kind: _Kind, principal: str, client_id: str | None, throttle_ms: int) -> None:
        """Count a throttle (the throttle-time metric)."""
        sensor = self._sensor(kind, user_of(principal), client_id or "") if kind.limits else None
        if sensor is not None:
            sensor.throttle_total_ms += throttle_ms
            sensor.throttle_count += 1

    # -- metrics -----------------------------------------------------------------------------------------------

    def rows(self) -> Iterable[tuple[str, str, dict[str, str], float]]:
        """Prometheus rows: per quota type and (user, client-id) sensor, the measured rate, the quota, and the
        throttle time given (Kafka's ``byte-rate`` / ``request-time`` and ``throttle-time`` per user/client-id)."""
        now = time.monotonic() * 1000
        self.expire(now)
        names = {PRODUCER_BYTE_RATE: "Produce", CONSUMER_BYTE_RATE: "Fetch", REQUEST_PERCENTAGE: "Request",
                 CONTROLLER_MUTATION_RATE: "ControllerMutation"}
        for key, qtype in names.items():
            kind = self.kinds[key]
            labels = {"quota_type": qtype}
            yield ("tidelog_quota_sensors", "Quota sensors held (bounded by tidelog.quota.sensors.max, plus the "
                   "shared overflow sensors)", labels, float(len(kind.sensors)))
            yield ("tidelog_quota_resolutions_cached", "Cached quota resolutions per (user, client id) (bounded "
                   "by tidelog.quota.sensors.max)", labels, float(len(kind.resolved)))
            yield ("tidelog_quota_sensors_evicted_total", "Sensors idle past the rate window evicted to make "
                   "room", labels, float(kind.sensors.evicted))
            yield ("tidelog_quota_sensors_overflowed_total", "Requests measured on a shared overflow sensor "
                   "because the sensor table was full", labels, float(kind.sensors.overflowed))
            if key == CONTROLLER_MUTATION_RATE:
                continue
            for (user, client), s in kind.sensors.items():
                if not isinstance(s, RateSensor):  # a TokenBucket: controller_mutation_rate only, skipped above
                    continue
                labels = {"quota_type": qtype, "user": user, "client_id": client}
                yield "tidelog_quota_rate", "Measured rate per quota sensor (bytes/s, or % of a thread)", labels, \
                    s.rate(now)
                yield "tidelog_quota_bound", "Quota applied to the sensor", labels, s.bound
                yield ("tidelog_quota_throttle_time_ms_total", "Throttle time given to clients, ms", labels,
                       float(s.throttle_total_ms))
                yield ("tidelog_quota_throttled_requests_total", "Responses that carried a throttle time", labels,
                       float(s.throttle_count))


def _tag_limit(limits: dict[Entity, float], tags: tuple[str, str]) -> float | None:
    """The limit of a sensor with these tags now (Kafka's ``quotaLimit(metricTags)``): (user, client) tags look
    at the four user-and-client levels, (user, "") at the user levels, ("", client) at the client-id levels."""
    user, client = tags
    d = DEFAULT
    if user and client:
        order: tuple[Entity, ...] = ((user, client), (user, d), (d, client), (d, d))
    elif user:
        order = ((user, None), (d, None))
    else:
        order = ((None, client), (None, d))
    for entity in order:
        if entity in limits:
            return limits[entity]
    return None


def user_of(principal: str) -> str:
    """``User:alice`` -> ``alice`` (Kafka's ``KafkaPrincipal.getName``)."""
    _, sep, name = principal.partition(":")
    return name if sep else principal


def fetch_response_bytes(body: dict) -> int:
    """The record bytes of a Fetch response body (file regions counted by their length)."""
    total = 0
    for t in body.get("responses") or ():
        for p in t.get("partitions") or ():
            records = p.get("records")
            if records is not None:
                length = getattr(records, "length", None)
                total += length if length is not None else len(records)
    return total


# APIs not counted by request_percentage: cluster actions (Kafka's ``ApiKeys.clusterAction``) and SASL
REQUEST_QUOTA_EXEMPT: frozenset[int] = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.SASL_HANDSHAKE, ApiKey.WRITE_TXN_MARKERS, ApiKey.SASL_AUTHENTICATE})
FETCH_KEY = ApiKey.FETCH  # a consumer's Fetch records its own request time (:func:`fetch_throttle`)
# KIP-219: from these versions on the client throttles itself and the broker answers at once, then mutes the
# channel; before them (Produce < 6, Fetch < 8) the response itself is held back for the throttle time
CLIENT_SIDE_THROTTLE: dict[int, int] = {ApiKey.PRODUCE: 6, ApiKey.FETCH: 8}


def after_handler(quotas: ClientQuotaManager, ctx: RequestContext, response: object, elapsed_s: float) -> int:
    """After a handler (quotas enabled): record ``request_percentage`` (handler time minus purgatory waits), the
    throttle time is the larger of it and the handler's bandwidth throttle, written into the response's
    ``throttle_time_ms``. Returns that throttle time (0: none)."""
    throttle = ctx.throttle_ms
    if throttle < 0:
        return 0
    if ctx.api_key not in REQUEST_QUOTA_EXEMPT and ctx.api_key != FETCH_KEY and quotas.request.limits:
        rt = quotas.record_request(ctx.principal, ctx.client_id, max(elapsed_s - ctx.wait_s, 0.0))
        if rt > throttle:
            quotas.throttled(quotas.request, ctx.principal, ctx.client_id, rt)
            throttle = rt
    if throttle and isinstance(response, dict):
        response["throttle_time_ms"] = throttle
    return throttle


def client_throttles(api_key: int, version: int) -> bool:
    """KIP-219: whether a client of this API version throttles itself (else the response is delayed)."""
    low = CLIENT_SIDE_THROTTLE.get(api_key)
    return low is None or version >= low


# KIP-599: from these versions (CreateTopics v6, CreatePartitions v3, DeleteTopics v5) the controller mutation
# quota is strict: a request arriving while the quota is exceeded has its topics refused with
# THROTTLING_QUOTA_EXCEEDED; older versions are accepted and only throttled
STRICT_MUTATION_VERSION: dict[int, int] = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3,
                                          ApiKey.DELETE_TOPICS: 5}
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


def _mutation_sensor(ctx: RequestContext) -> TokenBucket | None:
    quotas = ctx.broker.client_quotas
    if not quotas.mutation.limits:
        return None
    sensor = quotas._sensor(quotas.mutation, user_of(ctx.principal), ctx.client_id or "")
    return sensor if isinstance(sensor, TokenBucket) else None  # controller_mutation_rate: always a TokenBucket


def mutation_refused(ctx: RequestContext) -> bool:
    """A strict request (KIP-599) while the client's ``controller_mutation_rate`` is exceeded: refuse the topic
    (THROTTLING_QUOTA_EXCEEDED) before changing anything."""
    sensor = _mutation_sensor(ctx)
    if sensor is None or ctx.api_version < STRICT_MUTATION_VERSION.get(ctx.api_key, 0):
        return False
    return sensor.throttle_ms(time.monotonic() * 1000) > 0


def record_mutations(ctx: RequestContext, partitions: int) -> None:
    """Partitions created or deleted (Kafka's ``ControllerMutationQuota.record``)."""
    sensor = _mutation_sensor(ctx)
    if sensor is not None and partitions > 0:
        sensor.add(float(partitions), time.monotonic() * 1000)


def mutation_throttle(ctx: RequestContext) -> None:
    """At the end of CreateTopics / CreatePartitions / DeleteTopics: the mutation quota's throttle time, if
    exceeded, becomes the response's (``ctx.throttle_ms``; the server writes it and mutes the connection)."""
    sensor = _mutation_sensor(ctx)
    if sensor is None:
        return
    throttle = sensor.throttle_ms(time.monotonic() * 1000)
    if throttle > max(ctx.throttle_ms, 0):
        sensor.throttle_total_ms += throttle
        sensor.throttle_count += 1
        ctx.throttle_ms = throttle


def fetch_throttle(quotas: ClientQuotaManager, ctx: RequestContext, total: int, elapsed_s: float) -> int:
    """A consumer's Fetch (quotas enabled), as Kafka's ``handleFetchRequest``: its response bytes on
    ``consumer_byte_rate`` and its handler time on ``request_percentage``; if either throttles, the bytes are taken
    back (the answer will carry no data). Returns the larger throttle time (0: answer normally)."""
    principal, client = ctx.principal, ctx.client_id
    bandwidth = quotas.record(quotas.fetch, principal, client, total)
    request = 0
    if quotas.request.limits:
        request = quotas.record_request(principal, client, max(elapsed_s - ctx.wait_s, 0.0))
    throttle = max(bandwidth, request)
    if throttle:
        quotas.unrecord(quotas.fetch, principal, client, total)
        quotas.throttled(quotas.fetch if bandwidth >= request else quotas.request, principal, client, throttle)
    return throttle
