"""The database under test: one ZooKeeper and ``n`` ``tidelog serve`` brokers, each in its own network namespace
(``netspace.Net``), listening on its own address, logs kept in the run directory.

Processes are started with ``ip netns exec`` (which execs, so the pid is the server's own) in a new session; every
one is registered in ``LIVE`` and SIGKILLed by ``kill_all`` (called from ``close`` and ``atexit``). A paused
(SIGSTOPped) process is SIGCONTed before any kill so that it really dies.

Clock faults: with ``clock=True`` brokers start with ``tests/jepsen/clockshim`` on ``PYTHONPATH``: its
``sitecustomize`` adds the offset in ``<run>/broker-<id>.clock`` to ``time.time``/``time.time_ns`` (re-read
twice a second); ``step_clock`` writes it. Only the wall clock steps, as with NTP; timers keep running. (Not
libfaketime: with a real monotonic clock its ``clock_nanosleep`` wrapper makes every Python ``time.sleep`` fail
with EINVAL, which killed kazoo's connection thread; see clockshim/sitecustomize.py.)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspace import Net

ZK_SERVER = Path(os.environ.get("TIDELOG_ZK_SERVER", "/usr/share/zookeeper/bin/zkServer.sh"))
CLOCKSHIM = Path(__file__).resolve().parent / "clockshim"
KAFKA_PORT = 9092
ZK_PORT = 2181
SESSION_TIMEOUT_MS = 6000
REPLICA_LAG_MS = 10000

LIVE: dict[int, subprocess.Popen[bytes]] = {}
_LIVE_LOCK = threading.Lock()


def kill_all() -> None:
    with _LIVE_LOCK:
        procs = list(LIVE.values())
    for p in procs:
        _kill(p)


atexit.register(kill_all)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
    with _LIVE_LOCK:
        LIVE.pop(proc.pid, None)


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 90.0, interval: float = 0.2) -> Any:
    """Poll ``fn()`` until truthy (exceptions count as not yet); TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as exc:
            last = exc
        time.sleep(interval)  # polling interval of a condition with a deadline
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


class Node:
    """One server process in namespace ``name`` of ``net``; output appended to ``log``."""

    def __init__(self, net: Net, name: str, log: Path) -> None:
        self.net, self.name, self.log = net, name, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def addr(self) -> str:
        return self.net.addr(self.name)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONUNBUFFERED="1")

    def spawn(self) -> None:
        assert not self.running, f"{self.name} already running"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen([*self.net.exec_prefix(self.name), *self.command()], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
                                         start_new_session=True)
        with _LIVE_LOCK:
            LIVE[self.proc.pid] = self.proc
        self.paused = False

    def kill(self) -> None:
        if self.proc is not None:
            _kill(self.proc)
        self.paused = False

    def pause(self) -> None:
        if self.running:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
        self.paused = False


class ZkNode(Node):
    def __init__(self, net: Net, root: Path) -> None:
        super().__init__(net, "zk", root / "zk.log")
        self.root = root

    @property
    def connect(self) -> str:
        return f"{self.addr}:{ZK_PORT}"

    def command(self) -> list[str]:
        data = self.root / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={data}\nclientPort={ZK_PORT}\nclientPortAddress={self.addr}\n"
                       "admin.enableServer=false\nmaxSessionTimeout=20000\n4lw.commands.whitelist=*\n")
        return [str(ZK_SERVER), "start-foreground", str(cfg)]

    def env(self) -> dict[str, str]:
        return dict(os.environ, ZOO_LOG_DIR=str(self.root))

    def start(self) -> None:
        self.spawn()
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.connect)
        try:
            zk.start(timeout=60)  # a session is the readiness check
        finally:
            zk.stop()
            zk.close()


class BrokerNode(Node):
    def __init__(self, net: Net, root: Path, broker_id: int, zk: ZkNode, props: dict[str, str],
                 clock: bool = False) -> None:
        super().__init__(net, f"b{broker_id}", root / f"broker-{broker_id}.log")
        self.id = broker_id
        self.data_dir = root / f"broker-{broker_id}"
        self.zk, self.props, self.clock = zk, props, clock
        self.clock_file = root / f"broker-{broker_id}.clock"

    @property
    def bootstrap(self) -> str:
        return f"{self.addr}:{KAFKA_PORT}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", self.addr, "--port", str(KAFKA_PORT),
               "--data-dir", str(self.data_dir), "--log-level", "INFO"]
        props = {"broker.id": str(self.id), "zookeeper.connect": self.zk.connect,
                 "tidelog.metrics.listener": "off", **self.props}
        for k, v in props.items():
            cmd += ["-o", f"{k}={v}"]
        return cmd

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.clock:
            if not self.clock_file.exists():
                self.clock_file.write_text("0\n")
            env.update(TIDELOG_CLOCK_FILE=str(self.clock_file),
                       PYTHONPATH=os.pathsep.join(filter(None, [str(CLOCKSHIM), env.get("PYTHONPATH")])))
        return env

    def step_clock(self, offset_s: float) -> None:
        """Set this broker's wall clock to real time + ``offset_s`` (seen within half a second)."""
        tmp = self.clock_file.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:.0f}\n")
        tmp.replace(self.clock_file)

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.spawn()


def broker_props(*, min_insync: int = 2, rf: int = 3, unclean: bool = False) -> dict[str, str]:
    return {
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "replica.lag.time.max.ms": str(REPLICA_LAG_MS),
        "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
        "default.replication.factor": str(rf), "min.insync.replicas": str(min_insync),
        "unclean.leader.election.enable": "true" if unclean else "false",
        "auto.create.topics.enable": "false", "num.partitions": "1",
        "offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4",
        "offsets.topic.replication.factor": str(rf), "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min(min_insync, rf)),
        "group.initial.rebalance.delay.ms": "0",
        "replica.high.watermark.checkpoint.interval.ms": "500",
    }


class Db:
    """ZooKeeper plus brokers ``1..n`` in namespaces; ``close`` kills everything and removes the namespaces."""

    def __init__(self, root: Path, *, n: int = 3, props: dict[str, str] | None = None, clock: bool = False) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.net = Net.create(["zk", *(f"b{i}" for i in range(1, n + 1))])
        atexit.register(self.close)
        self.zk = ZkNode(self.net, root)
        self.brokers = {i: BrokerNode(self.net, root, i, self.zk, props or broker_props(), clock)
                        for i in range(1, n + 1)}
        self._kazoo: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def node(self, name: str) -> Node:
        return self.zk if name == "zk" else self.brokers[int(name[1:])]

    def start(self) -> None:
        self.zk.start()
        for b in self.brokers.values():
            b.start()
        self.wait_registered()

    def kazoo(self) -> Any:
        """A kazoo client of the root namespace (recreated by ``zk_read`` when a read times out)."""
        if self._kazoo is None:
            from kazoo.client import KazooClient

            zk = KazooClient(hosts=self.zk.connect, timeout=5)
            zk.start(timeout=15)
            self._kazoo = zk
        return self._kazoo

    def _drop_kazoo(self) -> None:
        zk, self._kazoo = self._kazoo, None
        if zk is not None:
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()

    def zk_read(self, op: str, path: str, timeout: float = 10.0) -> Any:
        """``get``/``get_children`` bounded by ``timeout``: a kazoo call without one can block for good after
        ZooKeeper was cut from the clients (seen: the runner stuck in ``get_children`` after a heal). On a
        timeout or a lost connection the client is dropped and the next read makes a new one."""
        try:
            return getattr(self.kazoo(), f"{op}_async")(path).get(timeout=timeout)
        except Exception as exc:
            from kazoo.exceptions import NoNodeError

            if not isinstance(exc, NoNodeError):
                self._drop_kazoo()
            raise

    def registered(self) -> set[int]:
        return {int(x) for x in self.zk_read("get_children", "/brokers/ids")}

    def wait_registered(self, ids: set[int] | None = None, timeout: float = 120.0) -> None:
        want = set(self.brokers) if ids is None else ids
        wait_until(f"brokers {sorted(want)} registered", lambda: want <= self.registered(), timeout=timeout)

    def controller(self) -> int | None:
        import json

        data, _ = self.zk_read("get", "/controller")
        return int(json.loads(data)["brokerid"])

    def leader_isr(self, topic: str, p: int) -> tuple[int, list[int]]:
        from tidelog.cluster import zkdata as zd

        data, stat = self.zk_read("get", zd.state_path(topic, p))
        st = zd.decode_state(data, stat.version)
        return st.leader, list(st.isr)

    def close(self) -> None:
        self._drop_kazoo()
        for b in self.brokers.values():
            b.kill()
        self.zk.kill()
        self.net.close()
