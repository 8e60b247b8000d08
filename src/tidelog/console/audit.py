"""The audit log: one JSON line per mutating action (who, what, on which resource, when, and the outcome).

Written to a file (``--audit-log``, default ``console-audit.log`` in the working directory) and to the logger
``tidelog.console.audit``. Never a secret: the fields are the console user, the Kafka principal the console logs in
as, the action, its target and parameters chosen by the caller (passwords are never passed here).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

log = logging.getLogger("tidelog.console.audit")


class AuditLog:
    def __init__(self, path: Path | None, principal: str, keep: int = 500) -> None:
        self.path = path
        self.principal = principal
        self._recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def record(self, user: str, action: str, target: str, outcome: str, **details: Any) -> dict[str, Any]:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "user": user,
                 "principal": self.principal, "action": action, "target": target, "outcome": outcome,
                 **({"details": details} if details else {})}
        line = json.dumps(entry, ensure_ascii=False, default=str)
        with self._lock:
            self._recent.append(entry)
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
        log.info("audit %s", line)
        return entry

    def recent(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(reversed(self._recent))
