"""The cleaner's I/O rate limit, ``log.cleaner.io.max.bytes.per.second`` across all cleaner threads (Kafka's
``Throttler``)."""

from __future__ import annotations

import threading
import time

from tidelog.storage.cleaner.config import DOUBLE_MAX


class Throttler:
    """Limits bytes per second across callers by sleeping (waits are cut short by ``stop``)."""

    def __init__(self, bytes_per_second: float, stop: threading.Event | None = None) -> None:
        self.rate = bytes_per_second
        self.stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._count = 0.0
        self.throttled_seconds = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate >= DOUBLE_MAX or nbytes <= 0:
            return
        with self._lock:
            self._count += nbytes
            now = time.monotonic()
            elapsed = now - self._start
            wait = self._count / self.rate - elapsed
            if elapsed >= 1.0 and wait <= 0:  # on schedule: start a new window (idle time is not credit)
                self._start, self._count = now, 0.0
        if wait > 0.001:
            self.throttled_seconds += wait
            self.stop.wait(wait)  # a rate limit, not synchronisation: the sleep *is* the feature
