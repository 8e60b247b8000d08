"""A real ZooKeeper (Debian's ``zookeeper`` package, standalone) and three real ``tidelog serve`` processes in
ZooKeeper mode, all on 127.0.0.1. Skips with the reason when ZooKeeper (or kazoo) is not installed."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ZK_SERVER = Path(os.environ.get("TIDELOG_ZK_SERVER", "/usr/share/zookeeper/bin/zkServer.sh"))
SESSION_TIMEOUT_MS = 3000

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_test_cluster_broker_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
BrokerProcess = _fixtures.BrokerProcess
JbodBroker = _fixtures.JbodBroker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ZooKeeper:
    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, prefix: list[str] | None = None, ready: Any = None) -> None:
        """``prefix`` goes before the server's command (tests/docs: ``nsenter`` into the test's network namespace);
        ``ready()`` replaces the readiness check (a ZooKeeper client connecting) where this process cannot reach
        it."""
        data = self.root / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(
            f"tickTime=500\ndataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\nmaxSessionTimeout=20000\n"
        )
        env = dict(os.environ, ZOO_LOG_DIR=str(self.root))
        out = open(self.root / "zk.out", "wb")  # noqa: SIM115  (owned by the process)
        self.proc = subprocess.Popen([*(prefix or []), str(ZK_SERVER), "start-foreground", str(cfg)], stdout=out,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if ready is not None:
            deadline = time.monotonic() + 30
            while not ready():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ZooKeeper did not start: {(self.root / 'zk.out').read_text()[-2000:]}")
                time.sleep(0.2)  # polling interval of a bounded wait for the port
            return
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.connect)
        try:
            zk.start(timeout=30)  # connecting is the readiness check
        finally:
            zk.stop()
            zk.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Cluster:
    def __init__(self, root: Path, zk: ZooKeeper, n: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.root, self.zk = root, zk
        self.brokers: dict[int, Any] = {}
        for i in range(1, n + 1):
            props = {
                "broker.id": str(i), "zookeeper.connect": zk.connect,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "replica.lag.time.max.ms": "10000", "replica.fetch.backoff.ms": "200",
                "default.replication.factor": "3", "min.insync.replicas": "2",
                "auto.create.topics.enable": "false", "num.partitions": "1",
                "replica.high.watermark.checkpoint.interval.ms": "500",
            }
            props.update(overrides or {})
            self.brokers[i] = BrokerProcess(root / f"broker-{i}", props)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def wait_for(self, what: str, pred: Any, timeout: float = 60.0) -> Any:
        """Re-read cluster metadata until ``pred(metadata)`` holds (a condition, not a fixed sleep)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                md = self.admin().list_topics(timeout=5)
                last = md
                result = pred(md)
                if result:
                    return result
            except Exception as exc:  # brokers coming and going
                last = exc
            time.sleep(0.2)  # polling interval of the metadata re-read
        raise AssertionError(f"timed out waiting for {what}; last metadata: {last!r}")

    def partition(self, md: Any, topic: str, p: int = 0) -> Any:
        t = md.topics.get(topic)
        if t is None or t.error is not None or p not in t.partitions:
            return None
        return t.partitions[p]


def _cluster(overrides: dict[str, str] | None = None, per_broker: dict[int, dict[str, str]] | None = None,
             prefix: str = "tidelog-cluster-") -> Iterator[Cluster]:
    """A fresh ZooKeeper and 3 brokers with ``overrides`` (and ``per_broker[id]`` on top for that broker), all
    registered; everything killed at the end (a ZooKeeper a failed test left frozen with SIGSTOP is resumed first)."""
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo==2.11.0)")
    if not ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip(f"ZooKeeper is not installed ({ZK_SERVER} missing or no java); apt-get install zookeeper")
    root = Path(tempfile.mkdtemp(prefix=prefix))
    zk = ZooKeeper(root)
    zk.start()
    c = Cluster(root, zk, overrides=overrides)
    for i, extra in (per_broker or {}).items():
        c.brokers[i].overrides.update(extra)
    try:
        for b in c.brokers.values():
            b.start()
        c.wait_for("3 registered brokers and a controller", lambda md: len(md.brokers) == 3 and md.controller_id > 0)
        yield c
    finally:
        if zk.proc is not None and zk.proc.poll() is None:
            os.killpg(zk.proc.pid, signal.SIGCONT)
        for b in c.brokers.values():
            b.kill()
        zk.stop()
        if os.environ.get("TIDELOG_KEEP_TEST_DIRS") is None:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from _cluster()


@pytest.fixture(scope="module")
def cluster_with() -> Iterator[Any]:
    """``cluster_with({"zookeeper.session.timeout.ms": "2000"})``: a fresh ZooKeeper and 3 brokers with these
    broker properties on top of the defaults above; everything it started is killed at the end of the module."""
    made: list[Iterator[Cluster]] = []

    def make(overrides: dict[str, str] | None = None) -> Cluster:
        gen = _cluster(overrides)
        c = next(gen)
        made.append(gen)
        return c

    try:
        yield make
    finally:
        for gen in made:
            gen.close()


# -- network faults (tests/cluster/test_faults.py): every link of every broker through a FaultProxy -----------

def _faultproxy() -> Any:
    """tests/cluster/faultproxy.py, loaded once by path (pytest's importlib mode puts no test dir on sys.path)."""
    import sys

    mod = sys.modules.get("tidelog_test_faultproxy")
    if mod is None:
        spec = importlib.util.spec_from_file_location("tidelog_test_faultproxy", Path(__file__).parent / "faultproxy.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return mod


class ProxiedCluster(Cluster):
    """A ``Cluster`` whose brokers can be cut off from the network without root.

    Broker ``i`` listens on its own port but advertises ``PLAINTEXT://127.0.0.1:<kafka[i].port>`` (registered in
    ZooKeeper, so Metadata sends clients there and followers fetch from it there), and reaches ZooKeeper through
    its own proxy ``zk[i]``. ``isolate(i)`` blackholes ZooKeeper and every inbound link of broker i, and, on
    the other brokers' proxies, the connections whose client id is ``tidelog-replica-<i>`` (its outgoing
    follower fetches) or ``tidelog-broker-<i>`` (its other requests: transaction markers, verifications). ``heal()`` lets everything flow again. ``direct(i)`` is broker i's own port (a client on
    the isolated side of the partition)."""

    def __init__(self, root: Path, zk: ZooKeeper, overrides: dict[str, str] | None = None) -> None:
        super().__init__(root, zk, overrides=overrides)
        fp = _faultproxy()
        self.faults = fp
        self.kafka: dict[int, Any] = {}
        self.zk_links: dict[int, Any] = {}
        for i, b in self.brokers.items():
            b.port = _free_port()  # known before start: the proxy forwards there from the first connection
            self.kafka[i] = fp.FaultProxy(b.port, kafka=True, name=f"broker-{i}").start()
            self.zk_links[i] = fp.FaultProxy(zk.port, kafka=False, name=f"zk-{i}").start()
            b.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.kafka[i].port}"
            b.overrides["zookeeper.connect"] = f"127.0.0.1:{self.zk_links[i].port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka[i].port}" for i, b in self.brokers.items() if b.running)

    def direct(self, i: int) -> int:
        return self.brokers[i].port

    def proxies(self) -> list[Any]:
        return [*self.kafka.values(), *self.zk_links.values()]

    def isolate(self, i: int, zookeeper: bool = True) -> None:
        """Blackhole broker i's links (with ``zookeeper=False`` its ZooKeeper link stays up: only the data links
        to clients and the other brokers are cut)."""
        bh = self.faults.BLACKHOLE
        if zookeeper:
            self.zk_links[i].set_mode(bh)
        self.kafka[i].set_mode(bh)
        for j, p in self.kafka.items():
            if j != i:
                p.set_client_mode(f"tidelog-replica-{i}", bh)
                p.set_client_mode(f"tidelog-broker-{i}", bh)  # its other requests (transaction markers, ...)

    def heal(self) -> None:
        for p in self.proxies():
            p.heal()

    def stop_proxies(self) -> None:
        for p in self.proxies():
            p.stop()


@pytest.fixture(scope="module")
def proxied_cluster(request: pytest.FixtureRequest) -> Iterator[ProxiedCluster]:
    """ZooKeeper and 3 brokers (the defaults above, session timeout 3 s) with every link through a FaultProxy
    (see ``ProxiedCluster``); the proxies are healed before the fixture is handed out and closed at the end. A
    module's ``PROXIED_CLUSTER_OVERRIDES`` (broker properties) go on top."""
    pytest.importorskip("kazoo", reason="kazoo is not installed (pip install kazoo==2.11.0)")
    if not ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip(f"ZooKeeper is not installed ({ZK_SERVER} missing or no java); apt-get install zookeeper")
    root = Path(tempfile.mkdtemp(prefix="tidelog-faults-"))
    zk = ZooKeeper(root)
    zk.start()
    c: ProxiedCluster | None = None
    try:
        c = ProxiedCluster(root, zk, overrides={"replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "100",
                                                **getattr(request.module, "PROXIED_CLUSTER_OVERRIDES", {})})
        for b in c.brokers.values():
            b.start()
        c.wait_for("3 registered brokers and a controller", lambda md: len(md.brokers) == 3 and md.controller_id > 0)
        yield c
    finally:
        if c is not None:
            for b in c.brokers.values():
                b.kill()
            c.stop_proxies()
        zk.stop()
        if os.environ.get("TIDELOG_KEEP_TEST_DIRS") is None:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def proxied_broker(broker_factory: Any) -> Iterator[tuple[Any, Any]]:
    """``(broker, proxy)``: one single-node broker (the ``broker_factory`` of tests/integration/conftest.py)
    advertising a Kafka FaultProxy in front of it, so every client connection goes through the proxy."""
    fp = _faultproxy()
    proxy = fp.FaultProxy(kafka=True, name="single").start()
    try:
        b = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target_port = b.port
        yield b, proxy
    finally:
        proxy.stop()
