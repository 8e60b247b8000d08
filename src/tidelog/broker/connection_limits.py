"""Connection quotas and the request memory pool (Kafka's ``ConnectionQuotas`` and ``MemoryPool``; issue 16).

``max.connections`` (broker-wide)
    When that many connections are open, a listener stops accepting until one closes (Kafka's Acceptor waits
    for a connection slot): new connections wait in the kernel's accept backlog. The inter-broker listener is
    exempt when the broker has other listeners, as in Kafka; unlike Kafka, tidelog does not then close another listener's least recently used
    connection to make room.

``max.connections`` not set: derived from the open-file limit (issue 24)
    Every connection holds a descriptor, and so does every partition's segment ``.log``; a broker whose
    connections took the descriptors its storage needs failed its checkpoints with EMFILE. The default is the soft
    ``RLIMIT_NOFILE`` minus the descriptors open other than connections (segment files, listeners, the process's
    own) minus the open-file reserve (``tidelog.open.files.reserve``, the partitions' budget's: a quarter of the
    limit, at least 64), recomputed every tick and after each topic change (:class:`ConnectionBudget`): partitions
    created later shrink it, and a creation is refused when the descriptors open, connections included, would take
    the reserve (``storage/open_files.py``). Kafka has no such default (2147483647); an explicit
    ``max.connections`` still wins, with a warning at start when it exceeds what the descriptors allow.

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
import contextlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.broker.config import BrokerConfig, ConfigException
from tidelog.storage.open_files import default_reserve, open_file_count, open_file_limit

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
        #: times a listener stopped accepting at ``max_connections``, and the seconds it waited (Kafka's
        #: AcceptorBlockedPercent, as totals)
        self.blocked = 0
        self.blocked_seconds = 0.0

    def set_max_connections(self, n: int) -> None:
        """A new broker-wide limit (the derived default, recomputed); waiting listeners resume if it grew."""
        self.max_connections = n
        self._wake()

    def _wake(self) -> None:
        while self._slot_waiters and self.total < self.max_connections:
            fut = self._slot_waiters.pop(0)
            if not fut.done():
                fut.set_result(None)

    def rows(self) -> list[tuple[str, str, dict[str, str], float]]:
        return [
            ("tidelog_max_connections", "The broker-wide connection limit in force (max.connections, or derived "
             "from the open-file limit)", {}, float(self.max_connections)),
            ("tidelog_acceptor_blocked_total", "Times a listener stopped accepting at max.connections", {},
             float(self.blocked)),
            ("tidelog_acceptor_blocked_seconds_total", "Seconds listeners spent not accepting at max.connections",
             {}, self.blocked_seconds),
        ]

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
        self._wake()

    async def wait_for_slot(self) -> None:
        """Return once fewer than ``max.connections`` are open (Kafka's Acceptor.waitForConnectionSlot)."""
        if self.total < self.max_connections:
            return
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self.blocked += 1
        try:
            while self.total >= self.max_connections:
                fut = loop.create_future()
                self._slot_waiters.append(fut)
                try:
                    await fut
                finally:
                    if fut in self._slot_waiters:
                        self._slot_waiters.remove(fut)
        finally:
            self.blocked_seconds += loop.time() - t0


#: the least a derived max.connections allows (a broker whose files took every descriptor still takes an admin
#: client's connections, to delete topics; logged as a warning when it applies)
MIN_DERIVED_CONNECTIONS = 8


@dataclass(frozen=True, slots=True)
class Derivation:
    """How the default ``max.connections`` follows from the descriptors (:meth:`ConnectionBudget.derive`)."""

    limit: int  # the soft RLIMIT_NOFILE
    open_files: int  # descriptors open other than connections (the segment files, listeners, the process's own)
    segment_files: int  # of which the partitions' segment .log files (one descriptor each)
    partitions: int
    reserve: int  # tidelog.open.files.reserve (or its default)
    max_connections: int

    def describe(self) -> str:
        return (f"ulimit -n {self.limit} - {self.open_files} descriptors open ({self.segment_files} segment files of "
                f"{self.partitions} partitions, {self.open_files - self.segment_files} others) - {self.reserve} "
                f"reserved (tidelog.open.files.reserve)")


class ConnectionBudget:
    """The default ``max.connections`` derived from the open-file limit, kept current (issue 24).

    ``storage()`` returns (partitions, segment files) hosted now. :meth:`derive` runs on any thread (it lists
    ``/proc/self/fd``), :meth:`apply` on the network loop; :meth:`refresh_soon` does both from a worker thread (after
    a topic change). With ``max.connections`` set explicitly nothing is derived after the start's check."""

    def __init__(self, quotas: ConnectionQuotas, reserve: int | None, explicit: bool,
                 storage: Callable[[], tuple[int, int]]) -> None:
        self.quotas = quotas
        self.reserve = reserve
        self.explicit = explicit
        self.storage = storage
        self.current: Derivation | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def derive(self) -> Derivation | None:
        """None when the process has no open-file limit (or /proc is not readable)."""
        limit, used = open_file_limit(), open_file_count()
        if limit is None or used is None:
            return None
        partitions, segments = self.storage()
        reserve = self.reserve if self.reserve is not None else default_reserve(limit)
        other = max(0, used - self.quotas.total)
        n = max(MIN_DERIVED_CONNECTIONS, limit - reserve - other)
        return Derivation(limit, other, segments, partitions, reserve, n)

    def start(self) -> None:
        """At start, on the loop: derive, log one line saying how, and apply (or, with an explicit
        ``max.connections``, warn when it exceeds what the descriptors allow)."""
        self.loop = asyncio.get_running_loop()
        d = self.derive()
        configured = self.quotas.max_connections
        if d is None:
            if not self.explicit:
                log.info("max.connections not derived: the process has no open-file limit",
                         extra={"kv": {"max.connections": configured}})
            return
        kv = {"ulimit_n": d.limit, "partitions": d.partitions, "segment_files": d.segment_files,
              "open_files": d.open_files, "reserve": d.reserve}
        if self.explicit:
            if configured > d.max_connections:
                log.warning(f"max.connections={configured} exceeds what the open-file limit allows ({d.max_connections}"
                            f" = {d.describe()}): connections beyond that take descriptors the log directories need "
                            f"(their EMFILE is retried, not a disk failure); raise ulimit -n or lower max.connections",
                            extra={"kv": {**kv, "max_connections": configured, "allowed": d.max_connections}})
            return
        self.current = d
        self.quotas.set_max_connections(d.max_connections)
        log.info(f"max.connections={d.max_connections} derived from the open-file limit: {d.describe()}; set "
                 f"max.connections to override", extra={"kv": {**kv, "max_connections": d.max_connections}})
        if d.limit - d.reserve - d.open_files < MIN_DERIVED_CONNECTIONS:
            log.warning("the open files leave no room for connections: raise ulimit -n", extra={"kv": kv})

    def apply(self, d: Derivation | None) -> None:
        """On the loop: the newly derived limit replaces the one in force (a derived one only)."""
        if d is None or self.explicit or self.current is None:
            return
        old = self.current.max_connections
        self.current = d
        if d.max_connections != old:
            self.quotas.set_max_connections(d.max_connections)
            if abs(d.max_connections - old) >= max(8, old // 20):
                log.info(f"max.connections={d.max_connections} (was {old}): {d.describe()}",
                         extra={"kv": {"max_connections": d.max_connections, "was": old}})

    def refresh_soon(self) -> None:
        """From a worker thread (after a topic change): derive here, apply on the loop."""
        loop = self.loop
        if loop is None or self.explicit or self.current is None or loop.is_closed():
            return
        d = self.derive()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self.apply, d)


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
