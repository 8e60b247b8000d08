"""The README is a test: what it tells a newcomer to type is run as written, so drift fails CI instead of a user.

From a clean copy of the checkout (the files git tracks or would track: committed or not, nothing ignored), with
the environment of a user's shell (no virtualenv of this test run):

1. ``bash scripts/serve.sh`` (the README's first set-up command) makes ``.venv`` with only what it installs and
   starts the broker on 127.0.0.1:9092;
2. every ``console`` block of README.md runs against it, in order (a ZooKeeper is started on the address the
   cluster block names; the brokers the blocks start are stopped with Ctrl-C at the end of the module): the
   security example among them (a self-signed certificate made with ``openssl``, a SCRAM user, a SASL_SSL
   broker, the CLI through ``--command-config``);
3. docs/SPARK.md's install command adds the ``spark`` extra, the README's Python example runs, and
   examples/README.md's commands (pipeline, exactly_once, results_and_offsets, recent_events) run;
4. Ctrl-C stops the README's broker cleanly.

All of it runs in a network namespace of the test's own (netns.py): the commands use the README's addresses as
written (127.0.0.1:9092 and the others) while the reader's own broker, started with the README's first command, may
hold the same ports on the machine; the test suite and that broker work in either order and together. Where no
namespace can be made (no user namespaces), the commands run on the machine's loopback and need those ports free.

The rules the documents are written to are in docrun.py. A separate test builds a wheel and runs it from an
empty venv (test_wheel.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from docrun import Command, Shell, clean_copy, console_blocks, user_env
from netns import Namespace, open_namespace

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SETUP_COMMANDS = ("bash scripts/serve.sh", "bash scripts/test.sh")
README_PORTS = (2181, 9092, 9093, 9094, 9095, 9191, 9192, 9193, 9401, 9402, 9403)


def _zookeeper_class() -> type:
    spec = importlib.util.spec_from_file_location("tidelog_test_readme_zk", REPO / "tests" / "cluster" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ZooKeeper


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


class Session:
    def __init__(self, root: Path, namespace: Namespace | None) -> None:
        self.root = root
        self.namespace = namespace
        if namespace is None:
            self.shell = Shell(root, user_env())
        else:
            self.shell = Shell(root, user_env(namespace.env()), prefix=namespace.prefix)
        self.broker = None
        self.zookeepers: list = []

    def listening(self, port: int) -> bool:
        """Something accepts connections on 127.0.0.1:``port`` where the commands run."""
        return self.namespace.listening(port) if self.namespace is not None else _listening("127.0.0.1", port)

    def ensure_zookeeper(self, cmd: Command) -> None:
        m = re.search(r"(?:zookeeper\.connect=|-z )(127\.0\.0\.1):(\d+)", cmd.text)
        if m is None or self.listening(int(m.group(2))):
            return
        zk_class = _zookeeper_class()
        if not Path("/usr/share/zookeeper/bin/zkServer.sh").exists():
            pytest.fail("ZooKeeper is not installed; the test command (bash scripts/test.sh) installs it")
        port = int(m.group(2))
        zk = zk_class(self.root / f"zk-{port}", port=port)
        if self.namespace is None:
            zk.start()
        else:  # started inside the namespace, ready when it accepts connections there
            zk.start(prefix=self.namespace.prefix, ready=lambda: self.listening(port))
        self.zookeepers.append(zk)

    def close(self) -> None:
        self.shell.stop_all()
        for zk in self.zookeepers:
            zk.stop()
        if self.namespace is not None:
            self.namespace.close()


@pytest.fixture(scope="module")
def session() -> Iterator[Session]:
    namespace = open_namespace()
    if namespace is None:
        for port in README_PORTS:
            if _listening("127.0.0.1", port):
                pytest.fail(f"port {port} is taken; the README's commands use it (and no network namespace of "
                            "the test's own could be made: unshare --user --net failed)")
    # not under pytest's basetemp: another pytest run of the same user (a second suite on the machine) removes
    # all but the newest three, this checkout and its .venv with them, while the commands still run
    root = Path(tempfile.mkdtemp(prefix="tidelog-readme-"))
    s = Session(clean_copy(root), namespace)
    # a user's first command writes tidelog's __pycache__ and the next ones reuse it; this suite runs with
    # PYTHONDONTWRITEBYTECODE=1 (CI), under which each of the ~40 commands (brokers, CLIs, the Spark examples and
    # their Python workers) compiled ~220 modules from source again. The interpreter scripts/bootstrap.sh makes the
    # copy's .venv with (python3 on the user's PATH) byte-compiles them once, as a user's first run would.
    subprocess.run([os.environ.get("PYTHON", "python3"), "-m", "compileall", "-q", "src/tidelog"], cwd=root,
                   env=user_env(), capture_output=True, timeout=300)
    try:
        yield s
    finally:
        s.close()
        if os.environ.get("TIDELOG_KEEP_TEST_DIRS") is None:
            shutil.rmtree(root, ignore_errors=True)


def test_setup_commands_are_the_two_the_readme_gives() -> None:
    indented = [line.strip() for line in README.read_text().splitlines() if line.startswith("    bash scripts/")]
    assert tuple(indented) == SETUP_COMMANDS


def test_serve_script_installs_and_starts_the_broker(session: Session) -> None:
    cmd = Command(SETUP_COMMANDS[0], ["...", "bootstrap servers 127.0.0.1:9092", "...", "data .../data"],
                  "README.md (set up)")
    session.broker = session.shell.start_server(cmd, ready_timeout=900)
    # only what the first command installs: no test or spark extras in the user's venv
    pip = subprocess.run([str(session.root / ".venv/bin/python"), "-m", "pip", "list", "--format=freeze"],
                         capture_output=True, text=True, check=True).stdout.lower()
    assert "confluent-kafka" in pip and "pytest" not in pip and "pyspark" not in pip


@pytest.mark.parametrize("index", range(len(console_blocks(README))))
def test_readme_console_block(session: Session, index: int) -> None:
    if session.broker is None:
        pytest.fail("the README's broker did not start (see the test before)")
    for cmd in console_blocks(README)[index]:
        session.ensure_zookeeper(cmd)
        session.shell.run(cmd)


def test_spark_docs_and_the_readme_python_example(session: Session) -> None:
    (install,) = [c for block in console_blocks(REPO / "docs" / "SPARK.md") for c in block]
    session.shell.run(install, timeout=900)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no Python example"
    for code in blocks:
        example = session.root / "readme_example.py"
        example.write_text(code + "\nprint('rows', df.count(), history.count())\n")
        out = session.shell.run(Command(".venv/bin/python readme_example.py", [r"rows ... ..."], "README.md (python)"))
        rows = re.findall(r"^rows (\d+) (\d+)$", out, flags=re.M)
        assert rows and int(rows[-1][0]) > 0 and int(rows[-1][1]) > 0, out[-2000:]


def test_examples(session: Session) -> None:
    cmds = [c for block in console_blocks(REPO / "examples" / "README.md") for c in block]
    assert [c.text for c in cmds] == [f".venv/bin/python examples/{name}.py"
                                      for name in ("pipeline", "exactly_once", "results_and_offsets", "recent_events")]
    # two at a time (each starts its own broker in its own temporary directory, on free ports): the four Spark
    # applications were the longest test of CI run one after the other (~250 s), mostly JVM start and waits
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in [pool.submit(session.shell.run, cmd, timeout=900) for cmd in cmds]:
            f.result()


def test_ctrl_c_stops_the_broker_cleanly(session: Session) -> None:
    server = session.broker
    if server is None:
        pytest.fail("the README's broker did not start")
    server.proc.send_signal(signal.SIGINT)  # serve.sh execs the broker: this is its process
    assert server.proc.wait(timeout=60) == 0
    assert "broker stopped" in server.text()
    assert (session.root / "data" / ".kafka_cleanshutdown").exists()
    assert "Traceback" not in server.text()
