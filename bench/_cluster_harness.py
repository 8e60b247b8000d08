"""Processes for bench/cluster_bench.py: a standalone ZooKeeper (Debian's ``zookeeper`` package) and
``tidelog serve`` brokers in ZooKeeper mode, all on 127.0.0.1, plus a kazoo view of the cluster state.

Every child runs in its own session (process group). Each one is registered in ``LIVE`` when started and
``kill_all()`` SIGKILLs whatever is still registered; cluster_bench calls it from ``finally`` and from its
SIGTERM/SIGHUP handlers, so Ctrl-C or an error never leaves a broker or ZooKeeper behind. Nothing here talks
to any address but 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import HOST, ROOT, cpu_seconds, free_port

ZK_SERVER = Path(os.environ.get("TIDELOG_ZK_SERVER", "/usr/share/zookeeper/bin/zkServer.sh"))

# every process group this module started and has not reaped yet
LIVE: dict[int, subprocess.Popen] = {}
_LIVE_LOCK = threading.Lock()


def track(proc: subprocess.Popen) -> None:
    """Register a child started elsewhere (in its own session) so that kill_all() reaches it."""
    with _LIVE_LOCK:
        LIVE[proc.pid] = proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (it leads its own session) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
    with _LIVE_LOCK:
        LIVE.pop(proc.pid, None)


def kill_all() -> None:
    """SIGKILL every process group started here that is still registered."""
    with _LIVE_LOCK:
        procs = list(LIVE.values())
    for p in procs:
        kill_group(p)


def spawn(cmd: list[str], log_path: Path, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen:
    """Start cmd in its own session, output appended to log_path, and register it for kill_all()."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            **kw,
        )
    track(proc)
    return proc


class ProcessExited(RuntimeError):
    """A child the benchmark waits on is gone: no point in polling until the deadline."""


def poll_until(what: str, pred: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Re-evaluate pred until it returns something truthy; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = pred()
            if result:
                return result
            last = result
        except ProcessExited:
            raise
        except Exception as exc:  # a broker or ZooKeeper coming and going
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class ZooKeeper:
    """``zkServer.sh start-foreground CONFIG``, standalone, on a free loopback port."""

    def __init__(self, root: Path, tick_ms: int = 500, max_session_timeout_ms: int = 60000) -> None:
        self.root = root
        self.port = free_port()
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{HOST}:{self.port}"

    @staticmethod
    def available() -> str | None:
        if not ZK_SERVER.exists():
            return f"{ZK_SERVER} missing (apt-get install zookeeper)"
        try:
            import kazoo  # noqa: F401
        except ImportError:
            return "kazoo is not installed in this Python"
        return None

    def start(self, timeout: float = 60.0) -> None:
        data = self.root / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\ndataDir={data}\nclientPort={self.port}\nclientPortAddress={HOST}\n"
            f"admin.enableServer=false\nmaxSessionTimeout={self.max_session_timeout_ms}\n"
        )
        env = dict(os.environ, ZOO_LOG_DIR=str(self.root))
        self.proc = spawn([str(ZK_SERVER), "start-foreground", str(cfg)], self.root / "zk.out", env=env)
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.connect)
        try:
            zk.start(timeout=timeout)  # a session is the readiness check
        finally:
            zk.stop()
            zk.close()

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid) if self.proc is not None and self.proc.poll() is None else 0.0

    def stop(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)


class ClusterBroker:
    """One ``tidelog serve`` in ZooKeeper mode on a fixed port (kept across restarts, as is its data dir).
    If TIDELOG_BENCH_SRC points at a source snapshot (peers.snapshot_tidelog), that code runs."""

    def __init__(
        self, broker_id: int, root: Path, overrides: dict[str, str], log_level: str = "WARNING"
    ) -> None:
        self.id = broker_id
        self.port = free_port()
        self.data_dir = root / f"broker-{broker_id}"
        self.log_path = root / f"broker-{broker_id}.log"
        self.overrides = overrides
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.expected_up = False  # started by the benchmark and not killed by it

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        cmd = [
            str(ROOT / ".venv" / "bin" / "tidelog"),
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            self.log_level,
            "-o",
            "tidelog.metrics.listener=off",
            "-o",
            f"broker.id={self.id}",
        ]
        for k, v in self.overrides.items():
            cmd += ["-o", f"{k}={v}"]
        return cmd

    def start(self) -> None:
        """Start the process; readiness (listener up and registered in ZooKeeper) is Cluster.wait_registered."""
        assert not self.running, f"broker {self.id} already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        src = os.environ.get("TIDELOG_BENCH_SRC")
        if src:
            old = os.environ.get("PYTHONPATH")
            env["PYTHONPATH"] = src + (os.pathsep + old if old else "")
        with open(self.log_path, "a") as f:
            f.write(f"--- start {time.strftime('%H:%M:%S')} ---\n")
        self.proc = spawn(self.command(), self.log_path, env=env, cwd=self.data_dir)
        self.expected_up = True

    def listening(self) -> bool:
        if not self.running:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-4:]
            raise ProcessExited(
                f"broker {self.id} exited with {self.proc.returncode if self.proc else None}; the end of "
                f"{self.log_path}:\n  " + "\n  ".join(tail)
            )
        try:
            with socket.create_connection((HOST, self.port), timeout=1):
                return True
        except OSError:
            return False

    def kill9(self) -> float:
        """SIGKILL (no controlled shutdown); returns the monotonic time just before the signal."""
        assert self.proc is not None
        self.expected_up = False
        t = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGKILL)
        kill_group(self.proc)
        return t

    def terminate(self) -> float:
        """SIGTERM (a clean stop: in ZooKeeper mode the broker asks the controller to move its leaderships away
        first, Kafka's controlled shutdown); returns the monotonic time just before the signal. Does not wait."""
        assert self.proc is not None
        self.expected_up = False
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return t

    def wait_exit(self, timeout: float) -> None:
        """Wait for the process to end (after terminate); SIGKILL it if it has not after ``timeout``."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.proc)

    def stop(self) -> None:
        self.expected_up = False
        if self.proc is not None:
            kill_group(self.proc)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid) if self.running and self.proc is not None else 0.0


class Cluster:
    """ZooKeeper + n brokers, and a kazoo session of the benchmark's own for reading state and watching it."""

    def __init__(
        self,
        root: Path,
        overrides: dict[str, str],
        n: int = 3,
        log_level: str = "WARNING",
        max_session_timeout_ms: int = 60000,
    ) -> None:
        self.root = root
        self.zk = ZooKeeper(root, max_session_timeout_ms=max_session_timeout_ms)
        self.overrides = overrides
        self.brokers: dict[int, ClusterBroker] = {}
        self.n = n
        self.log_level = log_level
        self.kz: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def start(self, timeout: float = 120.0) -> None:
        self.zk.start()
        from kazoo.client import KazooClient

        self.kz = KazooClient(hosts=self.zk.connect, timeout=30)
        self.kz.start(timeout=60)
        props = dict(self.overrides, **{"zookeeper.connect": self.zk.connect})
        for i in range(1, self.n + 1):
            self.brokers[i] = ClusterBroker(i, self.root, props, self.log_level)
            self.brokers[i].start()
        for b in self.brokers.values():
            self.wait_registered(b.id, timeout)
        poll_until("an elected controller", lambda: self.check_alive() and self.controller() > 0, timeout)

    def check_running(self) -> None:
        """Like check_alive without connecting: only whether each broker's process still exists."""
        for b in self.brokers.values():
            if b.expected_up and not b.running:
                b.listening()  # raises ProcessExited with the end of its log

    def check_alive(self) -> bool:
        """True, or ProcessExited naming a broker that died although the benchmark did not stop it."""
        for b in self.brokers.values():
            if b.expected_up:
                b.listening()
        return True

    def wait_registered(self, broker_id: int, timeout: float = 120.0) -> None:
        b = self.brokers[broker_id]
        poll_until(
            f"broker {broker_id} listening and registered in ZooKeeper",
            lambda: b.listening() and broker_id in self.live_ids(),
            timeout,
            interval=0.1,
        )

    # -- ZooKeeper reads (Kafka's znode layout, decoded with tidelog's own zkdata) --

    def live_ids(self) -> set[int]:
        from tidelog.cluster import zkdata as zd

        return {int(c) for c in self.kz.get_children(zd.BROKER_IDS)}

    def controller(self) -> int:
        from tidelog.cluster import zkdata as zd

        if self.kz.exists(zd.CONTROLLER) is None:
            return -1
        return zd.decode_controller(self.kz.get(zd.CONTROLLER)[0])

    def state(self, topic: str, partition: int = 0) -> Any:
        """The partition's LeaderIsr from its state znode, or None before the controller wrote it."""
        from tidelog.cluster import zkdata as zd

        path = zd.state_path(topic, partition)
        if self.kz.exists(path) is None:
            return None
        data, stat = self.kz.get(path)
        return zd.decode_state(data, stat.version)

    def create_topic(
        self, name: str, rf: int, configs: dict[str, str] | None = None, timeout: float = 120.0
    ) -> Any:
        """CreateTopics through the Kafka protocol (1 partition), then wait for a leader and a full ISR in
        ZooKeeper and for the leader to answer metadata for it. Returns the LeaderIsr."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, 1, rf, config=configs or {})], request_timeout=60)[name].result(
            90
        )

        def ready() -> Any:
            s = self.state(name)
            return s if s is not None and s.leader > 0 and len(s.isr) == rf else None

        s = poll_until(
            f"{name}: a leader and {rf} replicas in the ISR", lambda: self.check_alive() and ready(), timeout
        )

        def served() -> bool:
            md = admin.list_topics(topic=name, timeout=5).topics.get(name)
            return (
                md is not None
                and md.error is None
                and 0 in md.partitions
                and md.partitions[0].leader == s.leader
            )

        poll_until(f"{name} in the brokers' metadata", served, timeout, interval=0.2)
        return s

    def cpu_seconds(self) -> float:
        """CPU seconds of the brokers (process trees); ZooKeeper's counts as 'other'."""
        return sum(b.cpu_seconds() for b in self.brokers.values())

    def stop(self) -> None:
        if self.kz is not None:
            try:
                self.kz.stop()
                self.kz.close()
            except Exception:
                pass
            self.kz = None
        for b in self.brokers.values():
            b.stop()
        self.zk.stop()
