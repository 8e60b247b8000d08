"""Client quotas in ZooKeeper, where Kafka's ZooKeeper mode keeps them (``AdminZkClient.changeClientIdConfig`` /
``changeUserOrUserClientIdConfig``, ``ConfigEntityName``):

=============================================== ===========================================================
``/config/users/<user>``                         ``{"version":1,"config":{"producer_byte_rate":"1048576"}}``
``/config/users/<user>/clients/<client-id>``     the same, for a (user, client id) entity
``/config/clients/<client-id>``                  the same, for a client id
``/config/changes/config_change_<seq>``          ``{"version":2,"entity_path":"users/<user>/clients/<c>"}``
=============================================== ===========================================================

``<default>`` is written as is; other names are sanitized as Kafka's ``Sanitizer`` does (URL encoding, ``*``
and space as ``%2A`` / ``%20``). Values are strings, as Kafka writes configs. ``/config/users/<user>`` also
holds the user's SCRAM credentials (``cluster/scram.py``): both stores rewrite only their own keys of the
znode, conditionally on the version they read, so neither clobbers the other.

Every broker reads all quota znodes at start and then follows ``/config/changes``: each notification newer
than the last one seen names an entity whose znode is read again (Kafka's ``ZkNodeChangeNotificationListener``
feeding ``ClientIdConfigHandler`` / ``UserConfigHandler``). A change made through any broker reaches all.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from tidelog.broker.quotas import DEFAULT, DEFAULT_NAME, QUOTA_KEYS, Entity, QuotaListener, apply_alterations
from tidelog.cluster import zkdata as zd
from tidelog.cluster.zk_bounded import watch_callback

log = logging.getLogger("tidelog.cluster.quotas")

CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"


def sanitize(name: Any) -> str:
    """Kafka's ``Sanitizer.sanitize`` (the default entity is ``<default>``)."""
    if name is DEFAULT:
        return DEFAULT_NAME
    return zd.sanitize(str(name))


def desanitize(name: str) -> Any:
    return DEFAULT if name == DEFAULT_NAME else zd.desanitize(name)


def entity_path(entity: Entity) -> str:
    """``users/<u>``, ``users/<u>/clients/<c>`` or ``clients/<c>`` (under ``/config``)."""
    user, client = entity
    if user is not None and client is not None:
        return f"users/{sanitize(user)}/clients/{sanitize(client)}"
    if user is not None:
        return f"users/{sanitize(user)}"
    return f"clients/{sanitize(client)}"


def entity_of_path(path: str) -> Entity | None:
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return desanitize(parts[1]), desanitize(parts[3])
    if len(parts) == 2 and parts[0] == "users":
        return desanitize(parts[1]), None
    if len(parts) == 2 and parts[0] == "clients":
        return None, desanitize(parts[1])
    return None


def _config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        config = json.loads(data).get("config") or {}
        return {str(k): str(v) for k, v in config.items()}
    except (ValueError, AttributeError):
        return {}


def _quotas(config: dict[str, str]) -> dict[str, float]:
    out = {}
    for k, v in config.items():
        if k in QUOTA_KEYS:
            try:
                out[k] = float(v)
            except ValueError:
                log.error("unreadable quota in ZooKeeper", extra={"kv": {"key": k}})
    return out


def _value_text(key: str, value: float) -> str:
    return str(int(value)) if QUOTA_KEYS[key] == "LONG" else repr(float(value))


class ZkQuotaStore:
    """The quota store of ZooKeeper mode, with the interface of ``LocalQuotaStore`` (``entities``, ``alter``; made
    with the ``listener`` it calls after each change)."""

    def __init__(self, zk: Any, listener: QuotaListener | None = None) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._entities: dict[Entity, dict[str, float]] = {}
        self._last_change = -1
        self.listener = listener
        for path in (CONFIG_USERS, CONFIG_CLIENTS, zd.CONFIG_CHANGES):
            zk.ensure_path(path)
        first = zk.get_children(zd.CONFIG_CHANGES)
        self._last_change = max((s for s in map(zd.config_change_sequence, first) if s is not None), default=-1)
        self._scan()
        zk.ChildrenWatch(zd.CONFIG_CHANGES, self._changes)

    # -- reading (start, and kazoo's thread) -------------------------------------------------------------

    def _read(self, entity: Entity) -> dict[str, float]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"/config/{entity_path(entity)}")
        except NoNodeError:
            return {}
        return _quotas(_config(data))

    def _scan(self) -> None:
        from kazoo.exceptions import NoNodeError

        found: dict[Entity, dict[str, float]] = {}
        entities: list[Entity] = []
        for user in self.zk.get_children(CONFIG_USERS):
            entities.append((desanitize(user), None))
            try:
                clients = self.zk.get_children(f"{CONFIG_USERS}/{user}/clients")
            except NoNodeError:
                clients = []
            entities.extend((desanitize(user), desanitize(c)) for c in clients)
        entities.extend((None, desanitize(c)) for c in self.zk.get_children(CONFIG_CLIENTS))
        for entity in entities:
            values = self._read(entity)
            if values:
                found[entity] = values
        with self._lock:
            self._entities = found

    @watch_callback("reading client quota changes", log)
    def _changes(self, children: list[str]) -> bool | None:
        changed = False
        self._last_change, paths = zd.new_config_changes(self.zk, children, self._last_change)
        for path in paths:
            entity = entity_of_path(path)
            if entity is None:
                continue  # a topic's (the replica manager's listener)
            values = self._read(entity)
            with self._lock:
                if values:
                    self._entities[entity] = values
                else:
                    self._entities.pop(entity, None)
            changed = True
        if changed and self.listener is not None:
            self.listener(self.entities())
        return None

    # -- the store's interface ---------------------------------------------------------------------------

    def entities(self) -> dict[Entity, dict[str, float]]:
        with self._lock:
            return {e: dict(v) for e, v in self._entities.items()}

    def alter(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        """Blocking (ZooKeeper round trips): per entity, its config znode rewritten conditionally on the version
        read (only the quota keys: SCRAM credentials in a user's znode are kept) with a change notification, in
        one transaction, as Kafka's ``changeUserOrUserClientIdConfig`` / ``changeClientIdConfig``."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for entity, ops in changes:
            path = f"/config/{entity_path(entity)}"
            parent = path.rsplit("/", 1)[0]
            if parent not in (CONFIG_USERS, CONFIG_CLIENTS):
                self.zk.ensure_path(parent)  # /config/users/<u>/clients
            while True:
                try:
                    data, stat = self.zk.get(path)
                    version = stat.version
                except NoNodeError:
                    data, version = None, -1
                config = _config(data)
                for key, value in ops.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = _value_text(key, value)
                encoded = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
                t = self.zk.transaction()
                if version < 0:
                    t.create(path, encoded)
                else:
                    t.set_data(path, encoded, version=version)
                t.create(zd.config_change_path(), zd.encode_config_change(entity_path(entity)), sequence=True)
                results = t.commit()
                if not any(isinstance(r, Exception) for r in results):
                    break
                if not any(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError)) for r in results):
                    raise next(r for r in results if isinstance(r, Exception))
        with self._lock:  # seen at once here; the other brokers (and this one again) through the notifications
            self._entities = apply_alterations(self._entities, changes)
        if self.listener is not None:
            self.listener(self.entities())
