"""A short-lived cache of what the Overview and Topics pages fetch (issue 28: pages in < 300 ms against 1,000
partitions on a busy machine).

A value is fresh for ``ttl`` seconds. After that, and up to ``stale`` seconds, a read still answers at once with the
old value while one worker thread fetches the new one (refresh-ahead): a page that refreshes itself every 5 s never
waits for a full Metadata + ListOffsets + DescribeLogDirs round over 1,000 partitions. Older than ``stale``, or
never fetched, a read waits for the fetch; concurrent reads of one key share one fetch.

The console's own writes (every mutating action) call :meth:`invalidate`: the next read fetches again, so a page
shows the topic just created or deleted. A fetch that was running during the invalidation does not store its
(possibly older) result. Changes made by others show within ``ttl`` (plus one fetch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any


class _Entry:
    __slots__ = ("at", "error", "generation", "loading", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.at = -1.0  # monotonic time of the fetch's start; -1: never fetched
        self.loading: threading.Event | None = None
        self.generation = -1
        self.error: BaseException | None = None


class TtlCache:
    """Values by key, each fetched by the function given to :meth:`get`; thread-safe (reads come from the web
    layer's worker threads)."""

    def __init__(self, ttl: float = 5.0, stale: float = 60.0, max_keys: int = 64,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.stale, self.max_keys, self.clock = ttl, stale, max_keys, clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}
        self._generation = 0
        self.hits = self.misses = self.refreshes = 0

    def invalidate(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def age(self, key: Hashable) -> float | None:
        """Seconds since the value of ``key`` was fetched (None: none cached)."""
        with self._lock:
            e = self._entries.get(key)
            return None if e is None or e.at < 0 else self.clock() - e.at

    def get(self, key: Hashable, fetch: Callable[[], Any]) -> Any:
        if self.ttl <= 0:  # off
            return fetch()
        while True:
            with self._lock:
                e = self._entries.get(key)
                if e is None:
                    if len(self._entries) >= self.max_keys:
                        self._entries.pop(next(iter(self._entries)))
                    e = self._entries[key] = _Entry()
                now = self.clock()
                age = now - e.at if e.at >= 0 else None
                if age is not None and age < self.ttl:
                    self.hits += 1
                    return e.value
                if age is not None and age < self.stale:
                    if e.loading is None:  # refresh ahead, answer with the value we have
                        e.loading = threading.Event()
                        self.refreshes += 1
                        threading.Thread(target=self._load, args=(key, e, fetch, self._generation),
                                         name="console-cache-refresh", daemon=True).start()
                    self.hits += 1
                    return e.value
                if e.loading is None:
                    e.loading = threading.Event()
                    self.misses += 1
                    generation, waiter = self._generation, None
                else:
                    waiter = e.loading
            if waiter is None:
                self._load(key, e, fetch, generation)
                with self._lock:
                    if e.error is not None:
                        error, e.error = e.error, None
                        raise error
                    if e.at >= 0 and self._entries.get(key) is e:
                        return e.value
                continue  # invalidated meanwhile: fetch again
            waiter.wait()

    def _load(self, key: Hashable, e: _Entry, fetch: Callable[[], Any], generation: int) -> None:
        started = self.clock()
        try:
            value = fetch()
        except BaseException as exc:  # handed to the reader that waits for it
            with self._lock:
                e.error = exc if e.at < 0 else None  # a failed refresh ahead keeps the old value
                done, e.loading = e.loading, None
            if done is not None:
                done.set()
            return
        with self._lock:
            if generation == self._generation and self._entries.get(key) is e:
                e.value, e.at, e.generation = value, started, generation
            done, e.loading = e.loading, None
        if done is not None:
            done.set()
