"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and their store.

A credential is what Kafka keeps (``ScramCredential``): salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")),
ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count; never the password. Its text form is
Kafka's, as written under ``/config/users/<name>`` in ZooKeeper:
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``.

On one node the credentials live in ``tidelog-users.json`` in the first log dir (``{"version": 1, "users":
{name: {"SCRAM-SHA-256": "<credential text>"}}}``, the layout of Kafka's ZooKeeper config node), written
atomically (temporary file, fsync, rename, directory fsync) and re-read when the file changes, so
``tidelog users add --data-dir`` on a stopped or running broker is picked up.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from tidelog.client.scram import MECHANISMS, MIN_ITERATIONS, hmac_, salted_password

MECHANISM_BY_TYPE = {t: name for name, (_, t) in MECHANISMS.items()}
MAX_ITERATIONS = 16384  # the most AlterUserScramCredentials accepts (Kafka's ScramMechanism.maxIterations)
USERS_FILE = "tidelog-users.json"


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted(cls, mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
        alg = MECHANISMS[mechanism][0]
        client_key = hmac_(alg, salted, b"Client Key")
        return cls(salt, hashlib.new(alg, client_key).digest(), hmac_(alg, salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> ScramCredential:
        salt = salt if salt is not None else secrets.token_bytes(32)
        return cls.from_salted(mechanism, salt, salted_password(MECHANISMS[mechanism][0], password, salt,
                                                                 iterations), iterations)

    def to_text(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"invalid SCRAM credential: {exc}") from None


class ScramCredentialStore:
    """Users' SCRAM credentials in a file of the data dir (single-node mode). Thread-safe; lookups are cheap
    (one ``stat`` to notice an outside change)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._stamp: tuple[int, int] | None = None
        self._reload()

    def _reload(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._users, self._stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        raw = json.loads(self.path.read_text(encoding="utf-8"))
        users: dict[str, dict[str, ScramCredential]] = {}
        for name, mechs in (raw.get("users") or {}).items():
            users[name] = {m: ScramCredential.from_text(t) for m, t in mechs.items() if m in MECHANISMS}
        self._users, self._stamp = users, stamp

    def _persist(self) -> None:
        data = {"version": 1, "users": {u: {m: c.to_text() for m, c in sorted(ms.items())}
                                        for u, ms in sorted(self._users.items()) if ms}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(data, indent=1).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        st = self.path.stat()
        self._stamp = (st.st_mtime_ns, st.st_size)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            self._reload()
            return self._users.get(user, {}).get(mechanism)

    def describe(self) -> dict[str, dict[str, ScramCredential]]:
        with self._lock:
            self._reload()
            return {u: dict(ms) for u, ms in self._users.items() if ms}

    def alter(self, upserts: list[tuple[str, str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        """Apply deletions and upsertions at once (one atomic file write). Blocking: run off the event loop."""
        with self._lock:
            self._reload()
            for user, mech in deletes:
                self._users.get(user, {}).pop(mech, None)
            for user, mech, cred in upserts:
                self._users.setdefault(user, {})[mech] = cred
            self._users = {u: ms for u, ms in self._users.items() if ms}
            self._persist()
