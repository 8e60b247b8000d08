"""The history writer (tests/jepsen/HISTORY.md): one JSON line per event, written under a lock in the order the
events happened, ``time`` in nanoseconds of the monotonic clock since the run started."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO


class History:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._out: TextIO = open(path, "w", encoding="utf-8")  # noqa: SIM115  (closed by close())
        self._lock = threading.Lock()
        self._index = 0
        self._t0 = time.monotonic_ns()
        self._pids = itertools.count()
        self.counts: dict[str, int] = {}

    def new_process(self) -> int:
        """A fresh client process id (never reused)."""
        with self._lock:
            return next(self._pids)

    def add(self, process: int | str, type_: str, f: str, value: Any, error: str | None = None) -> dict[str, Any]:
        with self._lock:
            ev: dict[str, Any] = {"index": self._index, "time": time.monotonic_ns() - self._t0,
                                  "process": process, "type": type_, "f": f, "value": value}
            if error is not None:
                ev["error"] = error
            self._out.write(json.dumps(ev, separators=(",", ":")) + "\n")
            self._index += 1
            key = f"{f}:{type_}"
            self.counts[key] = self.counts.get(key, 0) + 1
            return ev

    def nemesis(self, start: bool, fault: str, targets: list[Any], detail: Any = None) -> None:
        self.add("nemesis", "info", "start-fault" if start else "stop-fault",
                 {"fault": fault, "targets": targets, "detail": detail})

    def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def close(self) -> None:
        with self._lock:
            if not self._out.closed:
                self._out.close()
