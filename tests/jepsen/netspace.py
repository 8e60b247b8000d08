"""Network namespaces for the Jepsen-style harness: every node (ZooKeeper, each broker) in its own namespace with
its own address on one bridge; clients stay in the root namespace (the bridge's own address).

Layout of net ``k`` (0..63, the first free one): bridge ``tljbr<k>`` = 10.77.<k>.1/24 in the root namespace;
node ``name`` lives in namespace ``tlj<k>-<name>`` with ``eth0`` = 10.77.<k>.<host> joined to the bridge by the
veth ``tlj<k>-<name>`` (root side).

Partitions are packet drops, not refusals: this kernel has neither iptables/nftables nor tc actions nor netem, so
a cut link is a permanent neighbour (ARP) entry pointing at a MAC address nobody owns, set on both ends. Frames
are flooded by the bridge and dropped by every receiver: established connections stall and retransmit, new
connections hang in SYN_SENT, exactly as with a firewall DROP rule; healing restores the real MAC addresses.
A slow link is a ``tbf`` rate limit (queueing delay, then tail drops) on both ends of a node's veth.

Cleanup: the owner's pid is written to ``/run/tlj<k>.pid``; ``Net.create`` first removes every net of this
prefix whose owner is dead (a run killed by SIGKILL), and ``close`` (also from ``atexit``) removes its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

PREFIX = "tlj"
PID_DIR = Path("/run")
BOGUS_MAC = "02:00:00:00:de:ad"
ROOT = "root"  # the clients' side: the bridge address in the root namespace


def sh(*args: str, check: bool = True) -> str:
    """Run a command (no shell); its stdout. Raises with stderr on failure when ``check``."""
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


_AVAILABLE: list[str | None] = []


def available() -> str | None:
    """None when namespaces, a bridge and veth pairs can be made here (tried once), else why not."""
    if _AVAILABLE:
        return _AVAILABLE[0]
    why: str | None = None
    if os.geteuid() != 0:
        why = "not root"
    else:
        probe = f"{PREFIX}probe{os.getpid() % 100000}"
        try:
            sh("ip", "netns", "add", probe)
            sh("ip", "link", "add", probe[:15], "type", "veth", "peer", "name", "eth0", "netns", probe)
            sh("ip", "link", "add", f"{PREFIX}pb{os.getpid() % 100000}"[:15], "type", "bridge")
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            why = f"cannot create namespaces/veth/bridges: {exc}"
        finally:
            sh("ip", "link", "del", probe[:15], check=False)
            sh("ip", "link", "del", f"{PREFIX}pb{os.getpid() % 100000}"[:15], check=False)
            sh("ip", "netns", "del", probe, check=False)
    _AVAILABLE.append(why)
    return why


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> list[int]:
    """Remove every net of this prefix whose owner process is gone; the ids removed."""
    removed: list[int] = []
    links = sh("ip", "-o", "link", "show", "type", "bridge", check=False)
    ids = set()
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(f"{PREFIX}br") and name[len(PREFIX) + 2:].isdigit():
            ids.add(int(name[len(PREFIX) + 2:]))
    for ns in sh("ip", "netns", "list", check=False).split("\n"):
        name = ns.split(" ")[0]
        if name.startswith(PREFIX) and "-" in name and name[len(PREFIX):name.index("-")].isdigit():
            ids.add(int(name[len(PREFIX):name.index("-")]))
    for k in sorted(ids):
        pidfile = PID_DIR / f"{PREFIX}{k}.pid"
        try:
            owner = int(pidfile.read_text())
        except (OSError, ValueError):
            owner = -1
        if owner > 0 and _alive(owner):
            continue
        if owner == -1 and _young(pidfile):
            continue  # claimed by a run that has not written its pid yet (O_EXCL create, then write): not stale
        _remove(k)
        pidfile.unlink(missing_ok=True)
        removed.append(k)
    return removed


def _young(pidfile: Path, seconds: float = 60.0) -> bool:
    try:
        return time.time() - pidfile.stat().st_mtime < seconds
    except OSError:
        return False


def _remove(k: int) -> None:
    for ns in sh("ip", "netns", "list", check=False).split("\n"):
        name = ns.split(" ")[0]
        if name.startswith(f"{PREFIX}{k}-"):
            _kill_ns_pids(name)
            sh("ip", "netns", "del", name, check=False)
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(f"{PREFIX}{k}-") or name == f"{PREFIX}br{k}":
            sh("ip", "link", "del", name, check=False)


def _kill_ns_pids(ns: str) -> None:
    """SIGKILL what still runs inside namespace ``ns`` (a process of a dead run)."""
    for pid in sh("ip", "netns", "pids", ns, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)


class Net:
    """One bridge and a namespace per node. ``addr(name)`` is a node's address; ``exec_prefix(name)`` the argv
    prefix that runs a command inside its namespace."""

    def __init__(self, k: int, nodes: list[str]) -> None:
        self.k = k
        self.nodes = list(nodes)
        self.hosts = {name: 10 + i for i, name in enumerate(nodes)}
        self.macs: dict[str, str] = {}
        self.cut: set[frozenset[str]] = set()
        self.slow: set[str] = set()
        self.lock = threading.Lock()
        self.closed = False

    # -- names ------------------------------------------------------------------------------------------------
    @property
    def bridge(self) -> str:
        return f"{PREFIX}br{self.k}"

    def ns(self, name: str) -> str:
        return f"{PREFIX}{self.k}-{name}"

    def veth(self, name: str) -> str:
        return f"{PREFIX}{self.k}-{name}"[:15]

    def addr(self, name: str) -> str:
        return f"10.77.{self.k}.1" if name == ROOT else f"10.77.{self.k}.{self.hosts[name]}"

    def mac(self, host: int) -> str:
        return f"02:77:{self.k:02x}:00:00:{host:02x}"

    def exec_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(name)]

    # -- life cycle -------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, nodes: list[str]) -> Net:
        cleanup_stale()
        for k in range(64):
            pidfile = PID_DIR / f"{PREFIX}{k}.pid"
            try:
                fd = os.open(pidfile, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            net = cls(k, nodes)
            atexit.register(net.close)
            try:
                net._build()
            except BaseException:
                net.close()
                raise
            return net
        raise RuntimeError("no free network id (64 nets in use)")

    def _build(self) -> None:
        _remove(self.k)
        # fixed MAC addresses: a bridge without one takes its lowest port's MAC and changes as ports are added,
        # and healing a link writes the remembered MAC back (a stale one cut the clients off for good)
        self.macs[ROOT] = self.mac(1)
        sh("ip", "link", "add", self.bridge, "address", self.macs[ROOT], "type", "bridge")
        sh("ip", "addr", "add", f"{self.addr(ROOT)}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for name in self.nodes:
            ns = self.ns(name)
            sh("ip", "netns", "add", ns)
            self.macs[name] = self.mac(self.hosts[name])
            sh("ip", "link", "add", self.veth(name), "type", "veth", "peer", "name", "eth0", "netns", ns,
               "address", self.macs[name])
            sh("ip", "link", "set", self.veth(name), "master", self.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(name)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            link = sh("ip", "-n", ns, "-o", "link", "show", "eth0")
            assert self.macs[name] in link, link

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        _remove(self.k)
        (PID_DIR / f"{PREFIX}{self.k}.pid").unlink(missing_ok=True)

    # -- faults -----------------------------------------------------------------------------------------------
    def _neigh(self, on: str, peer: str, mac: str | None) -> None:
        """On ``on``'s side, pin ``peer``'s address to ``mac`` (None: forget the entry, ARP again)."""
        dev = self.bridge if on == ROOT else "eth0"
        base = ["ip"] if on == ROOT else ["ip", "-n", self.ns(on)]
        if mac is None:
            sh(*base, "neigh", "del", self.addr(peer), "dev", dev, check=False)
        else:
            sh(*base, "neigh", "replace", self.addr(peer), "lladdr", mac, "nud", "permanent", "dev", dev)

    def cut_link(self, a: str, b: str) -> None:
        """Drop every packet between ``a`` and ``b`` (both ways)."""
        with self.lock:
            self._neigh(a, b, BOGUS_MAC)
            self._neigh(b, a, BOGUS_MAC)
            self.cut.add(frozenset((a, b)))

    def heal_link(self, a: str, b: str) -> None:
        with self.lock:
            self._neigh(a, b, self.macs[b])
            self._neigh(b, a, self.macs[a])
            self.cut.discard(frozenset((a, b)))

    def partition(self, groups: list[list[str]]) -> list[tuple[str, str]]:
        """Cut every link between nodes of different groups (nodes not listed, e.g. ``root``, stay connected to
        everyone); the links cut."""
        cut: list[tuple[str, str]] = []
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                for a in g:
                    for b in h:
                        self.cut_link(a, b)
                        cut.append((a, b))
        return cut

    def set_slow(self, name: str, rate: str = "200kbit") -> None:
        """A ``tbf`` rate limit on both ends of ``name``'s link: queueing delay, then drops when it overflows."""
        for base, dev in ((["tc"], self.veth(name)), (["ip", "netns", "exec", self.ns(name), "tc"], "eth0")):
            sh(*base, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "16kb", "latency", "400ms")
        with self.lock:
            self.slow.add(name)

    def clear_slow(self, name: str) -> None:
        for base, dev in ((["tc"], self.veth(name)), (["ip", "netns", "exec", self.ns(name), "tc"], "eth0")):
            sh(*base, "qdisc", "del", "dev", dev, "root", check=False)
        with self.lock:
            self.slow.discard(name)

    def heal_all(self) -> None:
        """Every link back, every rate limit gone; neighbour entries forgotten so ARP learns them afresh."""
        with self.lock:
            pairs = [tuple(p) for p in self.cut]
            slow = list(self.slow)
        for a, b in pairs:
            self.heal_link(a, b)
        for name in slow:
            self.clear_slow(name)
