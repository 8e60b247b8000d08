"""Who is at the page: sessions, login and CSRF tokens.

On loopback (the default bind) a visitor gets a session at once, named after the OS user running the console.
Bound beyond loopback, the console requires a login (``--password-file``: one line, the password of the user
``--user``); it refuses to start without one. A session is a random token in an HttpOnly, SameSite=Strict cookie,
kept in memory (bounded, idle sessions expire); each has its own CSRF token that every mutating request must carry
in the ``X-CSRF-Token`` header (a cross-site form cannot set a header). Passwords are compared in constant time
and never logged.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

COOKIE = "tidelog_console"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


@dataclass
class Session:
    user: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    seen: float = field(default_factory=time.monotonic)


class Sessions:
    def __init__(self, login_required: bool, user: str, password: str | None, max_sessions: int = 1000,
                 idle_seconds: float = 8 * 3600) -> None:
        if login_required and not password:
            raise ValueError("a console bound beyond loopback needs a login: give --password-file")
        self.login_required = login_required
        self.user = user
        self._password = password
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()

    def _new(self, user: str) -> tuple[str, Session]:
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            for t in [t for t, s in self._by_token.items() if now - s.seen > self.idle_seconds]:
                del self._by_token[t]
            while len(self._by_token) >= self.max_sessions:
                del self._by_token[min(self._by_token, key=lambda t: self._by_token[t].seen)]
            s = self._by_token[token] = Session(user)
        return token, s

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        with self._lock:
            s = self._by_token.get(token)
            if s is not None:
                if time.monotonic() - s.seen > self.idle_seconds:
                    del self._by_token[token]
                    return None
                s.seen = time.monotonic()
            return s

    def open_local(self) -> tuple[str, Session]:
        """A session without a login (loopback only)."""
        assert not self.login_required
        return self._new(self.user)

    def login(self, user: str, password: str) -> tuple[str, Session] | None:
        ok_user = hmac.compare_digest(user.encode(), self.user.encode())
        ok_pw = self._password is not None and hmac.compare_digest(password.encode(), self._password.encode())
        if not (ok_user and ok_pw):
            return None
        return self._new(user)

    def logout(self, token: str | None) -> None:
        with self._lock:
            self._by_token.pop(token or "", None)

    @staticmethod
    def csrf_ok(session: Session, header: str | None) -> bool:
        return header is not None and hmac.compare_digest(header.encode(), session.csrf.encode())
