"""SCRAM credentials in ZooKeeper, where Kafka's ZooKeeper mode keeps them (``AdminZkClient`` /
``ConfigEntityName`` "users"):

=========================================== ==============================================================
``/config/users/<name>``                     ``{"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=
                                             <b64>,server_key=<b64>,iterations=<n>"}}`` (other user configs,
                                             e.g. quotas, are kept as they are)
``/config/changes/config_change_<seq>``      ``{"version":2,"entity_path":"users/<name>"}``
=========================================== ==============================================================

``<name>`` is the user name sanitized as Kafka's ``Sanitizer`` does (URL encoding: ``ana@example.com`` is
``ana%40example.com``), as for quotas (``cluster/quotas.py``), so Kafka's tools and brokers find the credentials
tidelog writes and the other way round. Older tidelog versions wrote the raw name; such a znode (a child whose name
is not the sanitized form of its decoding) is still read as that raw name, a sanitized znode of the same user wins
over it, and the next change of that user's credentials moves them to the sanitized znode (the raw one deleted in
the same transaction).

Every broker keeps a cache fed by watches (a children watch on ``/config/users``, a data watch per user), so a
login never waits for ZooKeeper and a credential changed through any broker (or ``kafka-configs.sh``) is seen by
all. The store has the interface of the single node's ``ScramCredentialStore`` (``get``, ``describe``, ``alter``).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from tidelog.broker.quotas import DEFAULT_NAME
from tidelog.broker.security.scram import MECHANISMS, ScramCredential
from tidelog.cluster import zkdata as zd

log = logging.getLogger("tidelog.cluster.scram")

CONFIG_USERS = "/config/users"


def user_path(name: str) -> str:
    """The znode of user ``name``'s configs: ``/config/users/<sanitized name>``, as Kafka's."""
    return f"{CONFIG_USERS}/{zd.sanitize(name)}"


def user_of_node(child: str) -> tuple[str, bool] | None:
    """The user a child of ``/config/users`` names and whether it is the sanitized (Kafka's) form, or None for the
    quota default entity ``<default>``. A child that is not the sanitized form of its decoding is an older
    tidelog's raw user name, taken as it is."""
    if child == DEFAULT_NAME:
        return None
    user = zd.desanitize(child)
    if zd.sanitize(user) == child:
        return user, True
    return child, False


def _decode(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    try:
        config = json.loads(data).get("config") or {}
        return {str(k): str(v) for k, v in config.items()}
    except (ValueError, AttributeError):
        return {}


class ZkScramCredentialStore:
    def __init__(self, zk: Any) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._nodes: dict[str, dict[str, ScramCredential]] = {}
        """Credentials per child of ``/config/users`` (its znode name)."""
        self._users: dict[str, dict[str, ScramCredential]] = {}
        """Credentials per user name, derived from ``_nodes`` (a sanitized znode over an older raw one)."""
        self._watched: set[str] = set()
        zk.ensure_path(CONFIG_USERS)
        zk.ChildrenWatch(CONFIG_USERS, self._children)

    # -- watches (kazoo's thread) --------------------------------------------------------------------------

    def _children(self, children: list[str]) -> None:
        for name in children:
            if name not in self._watched:
                self._watched.add(name)
                self.zk.DataWatch(f"{CONFIG_USERS}/{name}", self._data_watch(name))

    def _data_watch(self, name: str) -> Any:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            self._set(name, _decode(data))
            if data is None and stat is None:  # deleted: stop watching (a new child gets a new watch)
                self._watched.discard(name)
                return False
            return None

        return changed

    def _set(self, name: str, config: dict[str, str]) -> None:
        """The credentials of the znode ``/config/users/<name>`` are now those of ``config``."""
        creds: dict[str, ScramCredential] = {}
        for mech, text in config.items():
            if mech in MECHANISMS:
                try:
                    creds[mech] = ScramCredential.from_text(text)
                except ValueError:
                    log.error("unreadable SCRAM credential in ZooKeeper", extra={"kv": {"user": name, "mechanism": mech}})
        with self._lock:
            if creds:
                self._nodes[name] = creds
            else:
                self._nodes.pop(name, None)
            users: dict[str, dict[str, ScramCredential]] = {}
            sanitized: set[str] = set()
            for node, node_creds in self._nodes.items():
                found = user_of_node(node)
                if found is None:
                    continue
                user, kafka_form = found
                if kafka_form or user not in sanitized:
                    users[user] = node_creds
                if kafka_form:
                    sanitized.add(user)
            self._users = users

    # -- the store's interface -----------------------------------------------------------------------------

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def describe(self) -> dict[str, dict[str, ScramCredential]]:
        with self._lock:
            return {u: dict(ms) for u, ms in self._users.items()}

    def alter(self, upserts: list[tuple[str, str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        """Blocking (ZooKeeper round trips): per user, its config znode rewritten (conditional on the version
        read) and a change notification, in one transaction, as Kafka's ``changeUserOrUserClientIdConfig``. An
        older raw-named znode of the user is folded in and deleted in the same transaction."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        by_user: dict[str, tuple[list[tuple[str, ScramCredential]], list[str]]] = {}
        for user, mech, cred in upserts:
            by_user.setdefault(user, ([], []))[0].append((mech, cred))
        for user, mech in deletes:
            by_user.setdefault(user, ([], []))[1].append(mech)
        for user, (ups, dels) in by_user.items():
            path = user_path(user)
            raw: str | None = f"{CONFIG_USERS}/{user}"
            if raw == path or "/" in user or user in ("", ".", "..") or user_of_node(user) != (user, False):
                raw = None  # no older raw znode can exist for this name (or it is the same znode)
            while True:
                try:
                    data, stat = self.zk.get(path)
                    version = stat.version
                except NoNodeError:
                    data, version = None, -1
                raw_version, raw_config, raw_children = -1, {}, []
                if raw is not None:
                    try:
                        raw_data, raw_stat = self.zk.get(raw)
                        raw_version, raw_config = raw_stat.version, _decode(raw_data)
                        raw_children = self.zk.get_children(raw)
                    except NoNodeError:
                        pass
                # the raw znode's credentials (all of it when it goes away), under what the sanitized one says
                carried = raw_config if not raw_children else {k: v for k, v in raw_config.items() if k in MECHANISMS}
                config = {**carried, **_decode(data)}
                for mech in dels:
                    config.pop(mech, None)
                for mech, cred in ups:
                    config[mech] = cred.to_text()
                value = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
                t = self.zk.transaction()
                if version < 0:
                    t.create(path, value)
                else:
                    t.set_data(path, value, version=version)
                if raw_version >= 0 and raw_children:  # (not written by tidelog) keep it, without credentials
                    rest = {k: v for k, v in raw_config.items() if k not in MECHANISMS}
                    t.set_data(raw, json.dumps({"version": 1, "config": rest}, separators=(",", ":")).encode(),
                               version=raw_version)
                elif raw_version >= 0:
                    t.delete(raw, version=raw_version)
                t.create(zd.config_change_path(), zd.encode_config_change(f"users/{zd.sanitize(user)}"),
                         sequence=True)
                results = t.commit()
                if not any(isinstance(r, Exception) for r in results):
                    break
                if not any(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError)) for r in results):
                    raise next(r for r in results if isinstance(r, Exception))
            if raw_version >= 0:
                self._set(user, {})
            self._set(zd.sanitize(user), config)  # seen at once here; the other brokers through their watches
