"""A peer broker under the same workloads and checker: noida-db (PyPI ``noida-db==0.2.3``, installed by
``bench/setup.sh`` into ``bench/.work/peers``; see bench/peers.py), one node, its Kafka listener only, on
127.0.0.1 (no namespaces: the faults that make sense for one node need none).

Faults (``PeerNemesis``, seeded like ``nemesis.Nemesis`` and recorded the same way): ``kill`` (SIGKILL, restarted
on the same data dir and port a few seconds later) and ``pause`` (SIGSTOP held 8-18 s, then SIGCONT). Partitions,
clock steps and slow links are not meaningful with one node and one client network.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path
from typing import Any

from nodes import Node, wait_until
from recorder import History

ROOT = Path(__file__).resolve().parents[2]
NOIDA = Path(os.environ.get("TIDELOG_NOIDA", str(ROOT / "bench" / ".work" / "peers" / "noida_db" / "noida-db")))
PEER_KINDS = ("pause", "kill")


def available() -> str | None:
    return None if NOIDA.exists() else f"{NOIDA} missing (run bench/setup.sh)"


class _LocalNet:
    """The ``Net`` interface ``nodes.Node`` needs, for a process in the root namespace."""

    def exec_prefix(self, _name: str) -> list[str]:
        return []

    def addr(self, _name: str) -> str:
        return "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NoidaNode(Node):
    def __init__(self, root: Path) -> None:
        super().__init__(_LocalNet(), "noida", root / "noida.log")  # type: ignore[arg-type]
        self.data_dir = root / "noida-data"
        self.port = _free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [str(NOIDA), "start", "--data-dir", str(self.data_dir), "--host", "127.0.0.1", "--only", "kafka",
                "--kafka-port", str(self.port)]

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.spawn()

        def up() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True

        wait_until("noida listening", up, timeout=60)


class PeerDb:
    """What the runner needs of a ``nodes.Db``, for one noida node."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.node = NoidaNode(root)
        self.brokers = {1: self.node}

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    def start(self) -> None:
        self.node.start()

    def close(self) -> None:
        self.node.kill()  # SIGCONT then SIGKILL of its process group, dropped from nodes.LIVE


class PeerNemesis:
    def __init__(self, db: PeerDb, h: History, kinds: list[str], seed: int) -> None:
        unknown = set(kinds) - set(PEER_KINDS)
        if unknown:
            raise ValueError(f"nemesis kinds {sorted(unknown)} do not apply to a one-node peer; use {PEER_KINDS}")
        self.db, self.h, self.kinds = db, h, list(kinds)
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.active: str | None = None

    def _start(self, kind: str) -> None:
        n = self.db.node
        if kind == "pause":
            n.pause()
        else:
            n.kill()
        self.active = kind
        self.h.nemesis(True, kind, ["noida"], {"sub": "node"})

    def _stop(self) -> None:
        kind, self.active = self.active, None
        if kind is None:
            return
        n = self.db.node
        try:
            if kind == "pause":
                n.resume()
            elif not n.running:
                n.start()
        except Exception as exc:
            self.errors.append(f"stop {kind}: {exc!r}")
        self.h.nemesis(False, "restart" if kind == "kill" else kind, ["noida"], {"sub": "node"})

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(3, 8)):
            try:
                self._start(self.rng.choice(self.kinds))
            except Exception as exc:
                self.errors.append(f"start: {exc!r}")
                continue
            self.stop.wait(self.rng.uniform(8, 18) if self.active == "pause" else self.rng.uniform(2, 6))
            self._stop()

    def heal(self) -> None:
        self._stop()
        n = self.db.node
        if n.paused:
            n.resume()
        if not n.running:
            n.start()


def peer_meta() -> dict[str, Any]:
    return {"broker": "noida-db 0.2.3", "nodes": 1}
