"""SCRAM credentials in ZooKeeper, where Kafka's ZooKeeper mode keeps them (``AdminZkClient`` /
``ConfigEntityName`` "users"):

=========================================== ==============================================================
``/config/users/<name>``                     ``{"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=
                                             <b64>,server_key=<b64>,iterations=<n>"}}`` (other user configs,
                                             e.g. quotas, are kept as they are)
``/config/changes/config_change_<seq>``      ``{"version":2,"entity_path":"users/<name>"}``
=========================================== ==============================================================

Every broker keeps a cache fed by watches (a children watch on ``/config/users``, a data watch per user), so a
login never waits for ZooKeeper and a credential changed through any broker (or ``kafka-configs.sh``) is seen by
all. The store has the interface of the single node's ``ScramCredentialStore`` (``get``, ``describe``, ``alter``).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from tidelog.broker.security.scram import MECHANISMS, ScramCredential
from tidelog.cluster import zkdata as zd

log = logging.getLogger("tidelog.cluster.scram")

CONFIG_USERS = "/config/users"


def user_path(name: str) -> str:
    return f"{CONFIG_USERS}/{name}"


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
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._watched: set[str] = set()
        zk.ensure_path(CONFIG_USERS)
        zk.ChildrenWatch(CONFIG_USERS, self._children)

    # -- watches (kazoo's thread) --------------------------------------------------------------------------

    def _children(self, children: list[str]) -> None:
        for name in children:
            if name not in self._watched:
                self._watched.add(name)
                self.zk.DataWatch(user_path(name), self._data_watch(name))

    def _data_watch(self, name: str) -> Any:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            self._set(name, _decode(data))
            if data is None and stat is None:  # deleted: stop watching (a new child gets a new watch)
                self._watched.discard(name)
                return False
            return None

        return changed

    def _set(self, name: str, config: dict[str, str]) -> None:
        creds: dict[str, ScramCredential] = {}
        for mech, text in config.items():
            if mech in MECHANISMS:
                try:
                    creds[mech] = ScramCredential.from_text(text)
                except ValueError:
                    log.error("unreadable SCRAM credential in ZooKeeper", extra={"kv": {"user": name, "mechanism": mech}})
        with self._lock:
            if creds:
                self._users[name] = creds
            else:
                self._users.pop(name, None)

    # -- the store's interface -----------------------------------------------------------------------------

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def describe(self) -> dict[str, dict[str, ScramCredential]]:
        with self._lock:
            return {u: dict(ms) for u, ms in self._users.items()}

    def alter(self, upserts: list[tuple[str, str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        """Blocking (ZooKeeper round trips): per user, its config znode rewritten (conditional on the version
        read) and a change notification, in one transaction, as Kafka's ``changeUserOrUserClientIdConfig``."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        by_user: dict[str, tuple[list[tuple[str, ScramCredential]], list[str]]] = {}
        for user, mech, cred in upserts:
            by_user.setdefault(user, ([], []))[0].append((mech, cred))
        for user, mech in deletes:
            by_user.setdefault(user, ([], []))[1].append(mech)
        for user, (ups, dels) in by_user.items():
            while True:
                try:
                    data, stat = self.zk.get(user_path(user))
                    version = stat.version
                except NoNodeError:
                    data, version = None, -1
                config = _decode(data)
                for mech in dels:
                    config.pop(mech, None)
                for mech, cred in ups:
                    config[mech] = cred.to_text()
                value = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
                t = self.zk.transaction()
                if version < 0:
                    t.create(user_path(user), value)
                else:
                    t.set_data(user_path(user), value, version=version)
                t.create(zd.config_change_path(), zd.encode_config_change(f"users/{user}"), sequence=True)
                results = t.commit()
                if not any(isinstance(r, Exception) for r in results):
                    break
                if not any(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError)) for r in results):
                    raise next(r for r in results if isinstance(r, Exception))
            self._set(user, config)  # seen at once here; the other brokers through their watches
