"""Connection quotas and the request memory pool (Kafka's ``ConnectionQuotas`` and ``MemoryPool``; issue 16).

``max.connections`` (broker-wide)
    When that many connections are open, a listener stops accepting until one closes (Kafka's Acceptor waits
    for a connection slot): new connections wait in the kernel's accept backlog. The inter-broker listener is
    exempt when the broker has other listeners, as in Kafka; unlike Kafka, tidelog does not then close another listener's least recently used
    connection to make room.

``max.connections.per.ip`` / ``max.connections.per.ip.overrides``
    A connection from an address that already has its limit open is accepted and closed at once (Kafka's
    ``TooManyConnectionsException``). Overrides are ``host:count`` pairs, comma separated; a host name is
    resolved once at start.

``queued.max.request.bytes`` (default -1: unbounded)
    A shared pool of bytes for request frames being read. When a frame's size prefix has arrived the whole size
    is taken from the pool (as Kafka's non-strict ``SimpleMemoryPool``: granted whenever some memory is left,
    so the pool can overshoot by one frame); when nothing is left the connection stops reading until a frame is
    released (after its request is processed). Frames of at most ``SMALL_FRAME`` bytes are not counted (unlike
    Kafka, which counts them all), so small requests - metadata, heartbeats, commits - are still served while
    large partial frames hold the pool; they are bounded by ``max.connections`` x ``SMALL_FRAME``.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from tidelog.broker.config import BrokerConfig, ConfigException

log = logging.getLogger("tidelog.broker.server")

SMALL_FRAME = 64 * 1024


class TooManyConnections(Exception):
    def __init__(self, ip: str, limit: int) -> None:
        super().__init__(f"Rejected connection from {ip}, address already has the configured maximum of "
                         f"{limit} connections.")
        self.ip = ip
        self.limit = limit


def parse_overrides(raw: str) -> dict[str, int]:
    """``host:count,host:count`` -> {ip: count} (host names resolved; IPv6 hosts as ``[::1]:3``)."""
    out: dict[str, int] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        n = int(count)
        if n < 0:
            raise ValueError(f"{item!r}: the count must be >= 0")
        host = host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            addrs = {str(i[4][0]) for i in infos}
        except OSError:
            addrs = {host}
        for a in addrs | {host}:
            out[a] = n
    return out


class ConnectionQuotas:
    """Open connections per address and in total, shared by the broker's listeners."""

    def __init__(self, max_connections: int, per_ip: int, overrides: dict[str, int]) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = overrides
        self.total = 0
        self.by_ip: dict[str, int] = {}
        self._slot_waiters: list[asyncio.Future[None]] = []

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.per_ip)

    def inc(self, ip: str) -> None:
        """Count a new connection from ``ip``; TooManyConnections when that address is at its limit."""
        n = self.by_ip.get(ip, 0)
        limit = self.limit_for(ip)
        if n >= limit:
            raise TooManyConnections(ip, limit)
        self.by_ip[ip] = n + 1
        self.total += 1

    def dec(self, ip: str) -> None:
        n = self.by_ip.get(ip, 0) - 1
        if n <= 0:
            self.by_ip.pop(ip, None)
        else:
            self.by_ip[ip] = n
        self.total = max(0, self.total - 1)
        while self._slot_waiters and self.total < self.max_connections:
            fut = self._slot_waiters.pop(0)
            if not fut.done():
                fut.set_result(None)

    async def wait_for_slot(self) -> None:
        """Return once fewer than ``max.connections`` are open (Kafka's Acceptor.waitForConnectionSlot)."""
        while self.total >= self.max_connections:
            fut = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(fut)
            try:
                await fut
            finally:
                if fut in self._slot_waiters:
                    self._slot_waiters.remove(fut)


class RequestMemoryPool:
    """Bytes of request frames being read (``queued.max.request.bytes``); ``limit`` <= 0: unbounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.available = limit
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def bounded(self) -> bool:
        return self.limit > 0

    def try_allocate(self, size: int) -> bool:
        if self.available <= 0:  # non-strict, as Kafka's: granted while anything is left
            return False
        self.available -= size
        return True

    def release(self, size: int) -> None:
        if size <= 0:
            return
        self.available += size
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def waiter(self) -> asyncio.Future[None]:
        """A future done at the next release (the caller awaits it, then tries again)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut


def limits_from(config: BrokerConfig) -> tuple[ConnectionQuotas, RequestMemoryPool]:
    """The broker's quotas and request memory pool from its configuration (a bad override list is a
    ConfigException at start)."""
    raw = config.get("max.connections.per.ip.overrides") or ""
    try:
        overrides = parse_overrides(raw)
    except ValueError as exc:
        raise ConfigException("max.connections.per.ip.overrides", raw, str(exc)) from None
    quotas = ConnectionQuotas(config.get("max.connections"), config.get("max.connections.per.ip"), overrides)
    return quotas, RequestMemoryPool(config.get("queued.max.request.bytes"))
