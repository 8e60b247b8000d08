"""``tidelog cluster up``: ZooKeeper and N brokers in one command, a working cluster, a clean stop on Ctrl-C
(issue 25, item 8)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(not Path("/usr/share/zookeeper/bin/zkServer.sh").exists(),
                                 reason="Debian's zookeeper package is not installed")]


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(n: int) -> int:
    """A base port with n free ports after it."""
    for _ in range(200):
        base = random.randint(20000, 60000)
        if all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no free port range")


def test_cluster_up_forms_a_cluster_and_stops_cleanly(tmp_path: Path) -> None:
    base, zk_port = _ports(3), _ports(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli.main", "cluster", "up", "--brokers", "3", "--dir", str(tmp_path / "c"),
         "--base-port", str(base), "--metrics-base-port", "0", "--zookeeper-port", str(zk_port),
         "-o", "zookeeper.session.timeout.ms=6000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C (or SIGTERM) stops it cleanly." in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(180) and proc.poll() is None, "".join(lines)
        bootstrap = next(line.split()[-1] for line in lines if "bootstrap servers" in line)
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # "ready" means every broker registered in ZooKeeper; the broker answering Metadata learns of the last
        # registration from its watch a few ms later (CI once asked within that window and saw two brokers)
        deadline = time.monotonic() + 30
        while sorted(admin.list_topics(timeout=30).brokers) != [1, 2, 3] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(admin.list_topics(timeout=30).brokers) == [1, 2, 3]
        admin.create_topics([NewTopic("up", 2, 3)])["up"].result(60)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(20):
            p.produce("up", value=b"%d" % i, partition=i % 2)
        assert p.flush(60) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "up-g", "auto.offset.reset": "earliest"})
        c.subscribe(["up"])
        seen: set[bytes] = set()
        for _ in range(300):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.add(m.value())
            if len(seen) == 20:
                break
        c.close()
        assert seen == {b"%d" % i for i in range(20)}
        replicas = admin.list_topics("up", timeout=30).topics["up"].partitions[0].replicas
        assert sorted(replicas) == [1, 2, 3]
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
    assert code == 0, "".join(lines)
    assert "cluster stopped" in "".join(lines)
    for port in (base, base + 1, base + 2, zk_port):  # nothing left listening
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert (tmp_path / "c" / "broker-1" / ".kafka_cleanshutdown").exists()  # stopped cleanly
    # all brokers stop at once: none waits for the controller to move its leaderships to brokers that are
    # shutting down too (it never does; that wait took the retries' whole request.timeout.ms, ~100 s)
    for i in (1, 2, 3):
        log = (tmp_path / "c" / f"broker-{i}.log").read_text()
        assert "controlled shutdown failed" not in log, log[-2000:]


def test_cluster_up_names_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "up", "-n", "1", "--dir",
                            str(tmp_path / "c"), "--base-port", str(port)], capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 1
    assert f"port(s) {port} on 127.0.0.1 are taken" in r.stderr
    assert not (tmp_path / "c").exists()
