"""Fixtures that run a real ``tidelog serve`` subprocess on 127.0.0.1 with a temporary data dir.

Reusable by every suite (``tests/conftest.py`` re-exports them for all test packages):

* ``broker`` (module scope): a running broker with default config. Attributes: ``bootstrap``
  ("127.0.0.1:PORT"), ``port``, ``data_dir``, ``metrics_port``, ``overrides``; methods ``stop()`` (SIGTERM, waits
  for a clean exit), ``kill()`` (SIGKILL), ``start()``, ``restart()`` (same port and data dir), ``log_text()``.
* ``broker_factory`` (module scope): ``broker_factory(**overrides)`` or ``broker_factory({"log.retention.ms":
  "1000"})`` starts another broker with extra properties (dots may be written as underscores in keyword form:
  ``broker_factory(num_partitions="3")``). Every broker it made is stopped at the end of the module.

Readiness is an event, not a sleep: the fixture reads the broker's log stream and waits for its
"broker started" line (which also carries the bound port), with a timeout.
Environment: ``TIDELOG_TEST_LOOP=asyncio`` runs the brokers on the default asyncio loop instead of uvloop.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")
_METRICS = re.compile(r"metrics listening url=http://[^ ]*:(\d+)/metrics")


class BrokerProcess:
    """One ``tidelog serve`` subprocess."""

    def __init__(self, data_dir: Path, overrides: Mapping[str, str] | None = None, port: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.overrides: dict[str, str] = dict(overrides or {})
        self.port = port
        self.metrics_port: int | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._lines_lock = threading.Lock()
        self._started = threading.Event()
        self._reader: threading.Thread | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--data-dir", str(self.data_dir), "--log-level", "INFO",
               "--loop", os.environ.get("TIDELOG_TEST_LOOP", "uvloop")]
        props = {"tidelog.metrics.listener": "127.0.0.1:0"}
        props.update(self.overrides)
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def _read(self, stream: Any, started: threading.Event) -> None:
        with open(self.log_path, "a", encoding="utf-8") as sink:
            for line in stream:
                sink.write(line)
                sink.flush()
                with self._lines_lock:
                    self._lines.append(line)
                m = _METRICS.search(line)
                if m:
                    self.metrics_port = int(m.group(1))
                m = _STARTED.search(line)
                if m:
                    self.port = int(m.group(1))
                    started.set()
        started.set()  # EOF: wake the waiter (it checks whether the process died)

    def start(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        assert not self.running, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # a new event per start: the previous process's reader, if its pipe outlived the 5 s join, sets only its own
        # at EOF (it once woke a restart's wait before the new broker listened: a connection refused right after)
        self._started = threading.Event()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self._command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout, self._started), daemon=True)
        self._reader.start()
        if not self._started.wait(timeout) or self.proc.poll() is not None:
            rc = self.proc.poll()
            if rc is None:
                self.kill()
            raise RuntimeError(f"tidelog serve did not start (exit code {rc}):\n{self.log_text()[-4000:]}")
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"broker did not stop within {timeout}s:\n{self.log_text()[-4000:]}") from None
        self._join_reader()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no marker, page cache keeps what was written."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._join_reader()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
            self._reader = None

    def restart(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        """Stop (if running) and start again on the same port and data dir."""
        if self.running:
            self.stop()
        return self.start(timeout)

    def log_text(self) -> str:
        with self._lines_lock:
            return "".join(self._lines)

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir}, running={self.running})"

class JbodBroker(BrokerProcess):
    """A ``tidelog serve`` with several ``log.dirs`` (``--data-dir`` would set a single one)."""

    def __init__(self, dirs: list[Path], overrides: Mapping[str, str] | None = None) -> None:
        super().__init__(dirs[0], overrides)
        self.dirs = dirs

    def _command(self) -> list[str]:
        cmd = super()._command()
        i = cmd.index("--data-dir")
        del cmd[i:i + 2]
        return [*cmd, "--override", "log.dirs=" + ",".join(str(d) for d in self.dirs)]



def _normalise(overrides: Mapping[str, Any] | None, kw: Mapping[str, Any]) -> dict[str, str]:
    out = {str(k): str(v) for k, v in (overrides or {}).items()}
    for k, v in kw.items():
        out[k.replace("_", ".")] = str(v) if not isinstance(v, (dict, list)) else json.dumps(v)
    return out


@pytest.fixture(scope="module")
def broker_factory() -> Iterator[Any]:
    root = Path(tempfile.mkdtemp(prefix="tidelog-it-"))
    made: list[BrokerProcess] = []

    def factory(overrides: Mapping[str, Any] | None = None, /, **kw: Any) -> BrokerProcess:
        data_dir = root / f"broker{len(made)}" / "data"
        b = BrokerProcess(data_dir, _normalise(overrides, kw))
        made.append(b)
        return b.start()

    try:
        yield factory
    finally:
        for b in made:
            try:
                b.stop()
            except Exception:
                b.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def broker(broker_factory: Any) -> BrokerProcess:
    return broker_factory()
