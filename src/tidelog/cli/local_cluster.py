"""``tidelog cluster up``: a ZooKeeper-mode cluster on this machine in one command.

It finds (or, as root on Debian, installs) Apache ZooKeeper from Debian's ``zookeeper`` package, starts one
ZooKeeper node and N brokers (``tidelog serve``), each with its own port, metrics port, data directory and log file
under ``--dir``, waits until every broker has registered in ZooKeeper and a controller is elected, prints the
bootstrap servers, and stops everything cleanly on Ctrl-C or SIGTERM: the brokers first (controlled shutdown, in
reverse order), ZooKeeper last. The data stays in ``--dir``: the same command starts the same cluster again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import click

ZK_SERVER = Path("/usr/share/zookeeper/bin/zkServer.sh")
BANNER_END = "Ctrl-C (or SIGTERM) stops it cleanly."


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ensure_zookeeper(install: bool) -> None:
    if ZK_SERVER.exists():
        return
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise click.ClickException(
            f"ZooKeeper is not installed ({ZK_SERVER} is missing); install Debian's package "
            "(sudo apt-get install zookeeper) or run this command as root with --install-zookeeper")
    click.echo("installing ZooKeeper (apt-get install zookeeper) ...", err=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "zookeeper"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise click.ClickException(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    if not ZK_SERVER.exists():
        raise click.ClickException(f"the zookeeper package did not provide {ZK_SERVER}")


class _Proc:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.log_path = name, log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115  (closed in wait())
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait()
        finally:
            self._log.close()

    def tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _wait(what: str, ready: Any, procs: list[_Proc], stop: threading.Event, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for p in procs:
            if not p.alive():
                raise click.ClickException(f"{p.name} exited (code {p.proc.returncode}) before {what}; the end of "
                                           f"{p.log_path}:\n{p.tail()}")
        if stop.is_set():
            raise KeyboardInterrupt
        if time.monotonic() > deadline:
            raise click.ClickException(f"timed out after {timeout:.0f} s waiting for {what}")
        stop.wait(0.2)  # a bounded poll of ZooKeeper's state, woken at once by Ctrl-C


@click.command("up")
@click.option("--brokers", "-n", type=click.IntRange(1, 9), default=3, show_default=True, help="number of brokers")
@click.option("--dir", "root", type=click.Path(file_okay=False), default="cluster", show_default=True,
              help="where ZooKeeper's and the brokers' data and logs go")
@click.option("--base-port", type=click.IntRange(1, 65000), default=9191, show_default=True,
              help="broker i listens on base-port + i - 1")
@click.option("--metrics-base-port", type=click.IntRange(0, 65000), default=9401, show_default=True,
              help="broker i serves /metrics on this + i - 1 (0: metrics off)")
@click.option("--zookeeper-port", type=click.IntRange(1, 65535), default=2181, show_default=True)
@click.option("--override", "-o", "overrides", multiple=True, metavar="KEY=VALUE",
              help="a broker property for every broker (repeatable)")
@click.option("--install-zookeeper/--no-install-zookeeper", default=True, show_default=True,
              help="as root, install Debian's zookeeper package when it is missing")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="seconds to wait for the cluster")
def up(brokers: int, root: str, base_port: int, metrics_base_port: int, zookeeper_port: int,
       overrides: tuple[str, ...], install_zookeeper: bool, timeout: float) -> None:
    """Start ZooKeeper and N brokers on this machine, wait until they form a cluster, print the bootstrap servers,
    and run until Ctrl-C (or SIGTERM), which stops them all cleanly."""
    for o in overrides:
        if "=" not in o:
            raise click.UsageError(f"--override {o!r}: expected KEY=VALUE")
    ports = [base_port + i for i in range(brokers)]
    metrics = [metrics_base_port + i for i in range(brokers)] if metrics_base_port else []
    taken = [p for p in [zookeeper_port, *ports, *metrics] if not _port_free(p)]
    if taken:
        raise click.ClickException(f"port(s) {', '.join(map(str, taken))} on 127.0.0.1 are taken (another cluster "
                                   "or broker?); choose others with --base-port, --metrics-base-port, --zookeeper-port")
    _ensure_zookeeper(install_zookeeper)
    base = Path(root).resolve()
    base.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    procs: list[_Proc] = []
    try:
        (base / "zookeeper").mkdir(exist_ok=True)
        cfg = base / "zookeeper" / "zoo.cfg"
        cfg.write_text(f"tickTime=2000\ndataDir={base / 'zookeeper' / 'data'}\nclientPort={zookeeper_port}\n"
                       "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n")
        zk = _Proc("ZooKeeper", [str(ZK_SERVER), "start-foreground", str(cfg)], base / "zookeeper" / "zookeeper.log",
                   dict(os.environ, ZOO_LOG_DIR=str(base / "zookeeper")))
        procs.append(zk)
        connect = f"127.0.0.1:{zookeeper_port}"
        _wait("ZooKeeper to answer", lambda: _zk_ok(zookeeper_port), procs, stop, timeout)
        rf = min(3, brokers)
        for i in range(1, brokers + 1):
            cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1",
                   "--port", str(ports[i - 1]), "--data-dir", str(base / f"broker-{i}"),
                   "-o", f"broker.id={i}", "-o", f"zookeeper.connect={connect}",
                   "-o", f"default.replication.factor={rf}", "-o", f"offsets.topic.replication.factor={rf}",
                   "-o", f"transaction.state.log.replication.factor={rf}",
                   "-o", f"transaction.state.log.min.isr={min(2, rf)}", "-o", f"min.insync.replicas={min(2, rf)}",
                   "-o", f"tidelog.metrics.listener={f'127.0.0.1:{metrics[i - 1]}' if metrics else 'off'}"]
            for o in overrides:
                cmd += ["-o", o]
            procs.append(_Proc(f"broker {i}", cmd, base / f"broker-{i}.log"))
        _wait(f"{brokers} brokers to register and a controller", lambda: _registered(connect, brokers), procs, stop,
              timeout)
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        click.echo(f"tidelog cluster of {brokers} broker(s) ready (ZooKeeper {connect})")
        click.echo(f"  bootstrap servers  {bootstrap}")
        for i in range(1, brokers + 1):
            m = f", metrics http://127.0.0.1:{metrics[i - 1]}/metrics" if metrics else ""
            click.echo(f"  broker {i}           127.0.0.1:{ports[i - 1]}{m}, log {base / f'broker-{i}.log'}")
        click.echo(f"  data               {base}")
        click.echo(f"  {BANNER_END}")
        sys.stdout.flush()
        while not stop.wait(0.5):
            dead = [p for p in procs if not p.alive()]
            if dead:
                raise click.ClickException(f"{dead[0].name} exited (code {dead[0].proc.returncode}); the end of "
                                           f"{dead[0].log_path}:\n{dead[0].tail()}")
    except KeyboardInterrupt:
        pass
    finally:
        _stop_all(procs)
        for s, h in previous.items():
            signal.signal(s, h)
    click.echo("cluster stopped")


def _stop_all(procs: list[_Proc]) -> None:
    """Brokers first, in reverse order, each with SIGTERM (controlled shutdown while ZooKeeper still runs), then
    ZooKeeper."""
    brokers, zks = [p for p in procs if p.name != "ZooKeeper"], [p for p in procs if p.name == "ZooKeeper"]
    for p in reversed(brokers):
        p.signal(signal.SIGTERM)
    for p in reversed(brokers):
        code = p.wait(60)
        if code not in (0, None, -signal.SIGTERM):
            click.echo(f"{p.name} exited with code {code} (see {p.log_path})", err=True)
    for p in zks:
        p.signal(signal.SIGTERM)
        p.wait(30)


def _zk_ok(port: int) -> bool:
    """ZooKeeper's ``srvr`` four-letter word (whitelisted by default) answers once it serves."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"srvr")
            return b"Mode:" in s.recv(4096)
    except OSError:
        return False


def _registered(connect: str, n: int) -> bool:
    import logging

    from kazoo.client import KazooClient

    logging.getLogger("kazoo.client").setLevel(logging.CRITICAL)
    zk = KazooClient(hosts=connect)
    try:
        zk.start(timeout=5)
        ids = zk.get_children("/brokers/ids") if zk.exists("/brokers/ids") else []
        return len(ids) >= n and zk.exists("/controller") is not None
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            zk.stop()
            zk.close()
