"""Quota sensors and their bounded tables (Kafka's ``Sensor`` with a ``Rate`` or a ``TokenBucket``, and the
``Metrics`` registry's expiry of inactive sensors).

Bounds (issue 24; docs/decisions/0034-quota-sensor-bounds.md)
    Kafka keeps one sensor per quota entity a client resolves to (with a ``<default>`` client-id quota, one per
    client id) and purges the sensors idle for ``inactiveSensorExpirationTimeSeconds`` (an hour). tidelog keeps
    that expiry and bounds both the work and the memory whatever the number of client ids:

    * :class:`SensorTable` holds each quota key's sensors in least-recently-used order (an ``OrderedDict``:
      a use moves its sensor to the end). Expired sensors are popped from the front, so expiry costs O(1)
      amortized per request (each sensor is popped once); nothing ever scans the table.
    * At most ``max_sensors`` per table. When a new sensor is needed and the table is full, the least recently
      used sensor is evicted if it has been idle for ``quota.window.num`` x ``quota.window.size.seconds`` (all
      of its samples are then out of the rate window, so dropping it loses no rate: a fresh sensor measures the
      same). Otherwise every sensor in the table was used within the window, and the request is measured on a
      shared *overflow* sensor, one per (user tag, quota value): the client ids beyond the cap share one quota
      rather than each getting a fresh one, so no client escapes its quota by flooding new ids (they are more
      throttled than in Kafka, never less). A client id gets its own sensor again once a slot frees.
    * :class:`ResolutionCache` keeps the resolved quota of each (user, client id) in insertion order with at
      most ``max_entries`` entries, the oldest dropped first (a dropped entry is recomputed: eight dict lookups).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

OVERFLOW_CLIENT = "<overflow>"  # the client_id label of an overflow sensor's metrics


class RateSensor:
    """Kafka's ``Sensor`` with one ``Rate`` (a ``SampledTotal`` of ``num`` windows of ``window_ms``) and its
    quota bound, plus the throttle-time statistics. Times in ms."""

    __slots__ = ("bound", "current", "last_used_ms", "num", "samples", "throttle_count", "throttle_total_ms",
                 "window_ms")

    def __init__(self, bound: float, num: int, window_ms: int) -> None:
        self.bound = bound
        self.num = num
        self.window_ms = window_ms
        self.samples: list[list[float]] = []  # [start_ms, value]
        self.current = 0
        self.last_used_ms = 0.0
        self.throttle_total_ms = 0
        self.throttle_count = 0

    def _current(self, now: float) -> list[float]:
        if not self.samples:
            self.samples.append([now, 0.0])
        return self.samples[self.current]

    def _purge(self, now: float) -> None:
        expire = self.num * self.window_ms
        for s in self.samples:
            if now - s[0] >= expire:
                s[0], s[1] = now, 0.0

    def add(self, value: float, now: float) -> None:
        sample = self._current(now)
        if now - sample[0] >= self.window_ms:  # complete: the next sample (reused once there are num of them)
            self.current = (self.current + 1) % self.num
            if self.current >= len(self.samples):
                sample = [now, 0.0]
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample[0], sample[1] = now, 0.0
        sample[1] += value
        self.last_used_ms = now

    def window_size(self, now: float) -> float:
        """``Rate.windowSize``: elapsed since the oldest sample, at least ``num - 1`` full windows, >= 1 ms."""
        self._purge(now)
        if not self.samples:
            self.samples.append([now, 0.0])
        oldest = min(s[0] for s in self.samples)
        elapsed = now - oldest
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def rate(self, now: float) -> float:
        """Per second."""
        window = self.window_size(now)
        return sum(s[1] for s in self.samples) / (window / 1000.0)

    def record(self, value: float, now: float, max_throttle_ms: float | None = None) -> int:
        """Record ``value`` then check the quota: the throttle time in ms (0 within the quota)."""
        self.add(value, now)
        window = self.window_size(now)
        rate = sum(s[1] for s in self.samples) / (window / 1000.0)
        bound = self.bound
        if rate <= bound:
            return 0
        throttle = (rate - bound) / bound * window if bound > 0 else float(self.num * self.window_ms)
        if max_throttle_ms is not None:
            throttle = min(throttle, max_throttle_ms)
        return min(math.floor(throttle + 0.5), 2**31 - 1)  # Java's Math.round


class TokenBucket:
    """Kafka's ``TokenBucket`` stat, the controller mutation quota's (KIP-599): up to ``num * window`` seconds of
    quota in tokens (the burst), refilled at the quota per second; a record takes tokens (below zero too); the
    quota is exceeded while tokens < 0, and the throttle time is ``-tokens / quota`` seconds."""

    __slots__ = ("bound", "last_ms", "last_used_ms", "num", "throttle_count", "throttle_total_ms", "tokens",
                 "window_ms")

    def __init__(self, bound: float, num: int, window_ms: int) -> None:
        self.bound = bound
        self.num = num
        self.window_ms = window_ms
        self.tokens: float | None = None  # full at first use (Kafka: 0 tokens at time 0, refilled to the burst)
        self.last_ms = 0.0
        self.last_used_ms = 0.0
        self.throttle_total_ms = 0
        self.throttle_count = 0

    def _refill(self, now: float) -> float:
        burst = self.num * self.window_ms / 1000.0 * self.bound
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + self.bound * (now - self.last_ms) / 1000.0)
        self.last_ms = now
        return burst

    def add(self, value: float, now: float) -> None:
        burst = self._refill(now)
        self.tokens = min(burst, (self.tokens or 0.0) - value)
        self.last_used_ms = now

    def throttle_ms(self, now: float) -> int:
        self._refill(now)
        tokens = self.tokens or 0.0
        if tokens >= 0:
            return 0
        if self.bound <= 0:
            return self.num * self.window_ms
        return min(math.floor(-tokens / self.bound * 1000 + 0.5), 2**31 - 1)


Sensor = RateSensor | TokenBucket


class SensorTable:
    """One quota key's sensors, keyed by their (user, client id) tags, bounded (see the module docstring).

    ``factory(bound)`` makes a sensor; ``expire_ms``: a sensor unused that long is dropped; ``idle_ms``: a
    sensor unused that long has no sample left in its rate window (``num * window``), so it may be evicted
    to make room. Runs on the event loop (no lock)."""

    __slots__ = ("evicted", "expire_ms", "factory", "idle_ms", "max_sensors", "overflow", "overflowed", "sensors")

    def __init__(self, factory: Callable[[float], Sensor], max_sensors: int, expire_ms: float,
                 idle_ms: float) -> None:
        self.factory = factory
        self.max_sensors = max(1, int(max_sensors))
        self.expire_ms = expire_ms
        self.idle_ms = idle_ms
        self.sensors: OrderedDict[tuple[str, str], Sensor] = OrderedDict()  # least recently used first
        self.overflow: dict[tuple[str, float], Sensor] = {}
        self.evicted = 0  # sensors dropped to make room (idle past the rate window)
        self.overflowed = 0  # new sensors refused: measured on an overflow sensor instead

    def __len__(self) -> int:
        return len(self.sensors) + len(self.overflow)

    def get(self, tags: tuple[str, str], bound: float, now: float) -> Sensor:
        """The sensor for ``tags`` (made with ``bound`` if new), marked used at ``now``; an overflow sensor
        when the table is full of sensors used within the rate window."""
        sensors = self.sensors
        sensor = sensors.get(tags)
        if sensor is not None:
            sensors.move_to_end(tags)
        else:
            if len(sensors) >= self.max_sensors:
                self.expire(now)
            if len(sensors) >= self.max_sensors:
                oldest = next(iter(sensors.values()))
                if now - oldest.last_used_ms < self.idle_ms:
                    self.overflowed += 1
                    return self._overflow(tags[0], bound, now)
                sensors.popitem(last=False)
                self.evicted += 1
            sensor = sensors[tags] = self.factory(bound)
        sensor.last_used_ms = now
        # amortized O(1): the front is the least recently used; each expired sensor is popped once
        first = next(iter(sensors.values()))
        if now - first.last_used_ms >= self.expire_ms:
            self.expire(now)
        return sensor

    def _overflow(self, user: str, bound: float, now: float) -> Sensor:
        key = (user, bound)
        sensor = self.overflow.get(key)
        if sensor is None:
            sensor = self.overflow[key] = self.factory(bound)
        sensor.last_used_ms = now
        return sensor

    def expire(self, now: float) -> int:
        """Drop the sensors unused for ``expire_ms`` (from the front, stopping at the first one in use); the
        number dropped."""
        sensors = self.sensors
        cutoff = now - self.expire_ms
        n = 0
        while sensors:
            first = next(iter(sensors.values()))
            if first.last_used_ms > cutoff:
                break
            sensors.popitem(last=False)
            n += 1
        for key, s in list(self.overflow.items()) if self.overflow else ():
            if s.last_used_ms <= cutoff:
                del self.overflow[key]
        return n

    def rebind(self, limit_of: Callable[[tuple[str, str]], float | None]) -> None:
        """A quota changed: each sensor takes its tags' new bound (keeping its samples) or is dropped when no
        quota applies to it any more; overflow sensors are dropped (their bound was their key)."""
        for tags, sensor in list(self.sensors.items()):
            limit = limit_of(tags)
            if limit is None:
                del self.sensors[tags]
            else:
                sensor.bound = limit
        self.overflow.clear()

    def items(self) -> Iterator[tuple[tuple[str, str], Sensor]]:
        """Every sensor with its metric tags (an overflow sensor's client id is ``<overflow>``)."""
        yield from list(self.sensors.items())
        for (user, _), s in list(self.overflow.items()):
            yield (user, OVERFLOW_CLIENT), s

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(list(self.sensors))


class ResolutionCache(Generic[K, V]):
    """A bounded map, oldest insertion dropped first: what a (user, client id) resolves to for one quota key.
    No reordering on a hit (a dropped entry only costs its recomputation)."""

    __slots__ = ("_entries", "max_entries")

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max(1, int(max_entries))
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        entries = self._entries
        entries[key] = value
        if len(entries) > self.max_entries:
            entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


__all__ = ["OVERFLOW_CLIENT", "RateSensor", "ResolutionCache", "Sensor", "SensorTable", "TokenBucket"]
