"""Runs the console blocks of the project's Markdown files as a user would type them.

A ``console`` block holds commands (``$ `` lines; a line ending in ``\\`` continues on the next) each followed by
the output the document shows for it. The rules the documents are written to:

* Commands run with bash in the root of a clean checkout, stdout and stderr together, as a terminal shows them.
  Every command must exit 0, pipelines included (``pipefail``); a document shows a failure with
  ``|| echo "exit $?"``.
* Shown output is matched in order against what the command printed: each shown line must match a later line of
  the output, ``...`` inside a line stands for any text, whitespace runs compare equal, and a line that is only
  ``...`` stands for any lines (it is there for the reader; lines the document leaves out are allowed anyway).
* A command that starts ``tidelog serve`` (one, or one per word of a ``for x in ...; do`` loop) or ``tidelog
  cluster up`` runs in the background, in a process group of its own; it counts as done when each broker (or the
  cluster) printed its "ready" banner.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BANNER_END = "Ctrl-C (or SIGTERM) stops it cleanly."
REPO = Path(__file__).resolve().parents[2]


def clean_copy(dest: Path) -> Path:
    """The checkout as a fresh clone would have it, plus uncommitted work: git's files, nothing it ignores."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@dataclass
class Command:
    text: str
    expected: list[str]
    where: str

    @property
    def is_server(self) -> bool:
        return any(s in self.text for s in ("tidelog serve", "scripts/serve.sh", "tidelog cluster up"))

    @property
    def servers(self) -> int:
        """How many brokers the command starts: one per word of a ``for x in a b c; do`` loop, else one."""
        loop = re.match(r"\s*for \w+ in ([^;]+);", self.text)
        return len(loop.group(1).split()) if loop else 1


def console_blocks(path: Path) -> list[list[Command]]:
    blocks: list[list[Command]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        start = i + 1
        i += 1
        block: list[Command] = []
        while i < len(lines) and lines[i].strip() != "```":
            line = lines[i]
            if line.startswith("$ "):
                where = f"{path.name}:{i + 1}"
                text = line[2:]
                while text.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text[:-1] + " " + lines[i].strip()
                block.append(Command(text.strip(), [], where))
            elif block:
                block[-1].expected.append(line)
            else:
                raise AssertionError(f"{path.name}:{i + 1}: output before any command in the block at line {start}")
            i += 1
        if i >= len(lines):
            raise AssertionError(f"{path.name}:{start}: console block is not closed")
        blocks.append(block)
        i += 1
    return blocks


def _squash(line: str) -> str:
    return " ".join(line.split())


def _line_pattern(line: str) -> re.Pattern[str]:
    parts = [re.escape(p) for p in _squash(line).split("...")]
    return re.compile(".*".join(parts))


def match_output(expected: list[str], actual: str) -> str | None:
    """None when every shown line matches a later output line in order, else what did not match."""
    wanted = [e for e in expected if e.strip() not in ("", "...")]
    got = [_squash(line) for line in actual.splitlines()]
    pos = 0
    for e in wanted:
        pat = _line_pattern(e)
        while pos < len(got) and not pat.fullmatch(got[pos]):
            pos += 1
        if pos == len(got):
            return f"no output line (in order) matches {e!r}"
        pos += 1
    return None


def user_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a user's shell: no virtualenv of the test run, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "activate").exists()
    )
    env.update(extra or {})
    return env


@dataclass
class Server:
    command: Command
    proc: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)
    banners: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.output.append(line)
                if BANNER_END in line:
                    self.banners += 1
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.banners < self.command.servers:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.command.where}: {self.command.servers - self.banners} broker(s) not ready after "
                        f"{timeout:g}s; output:\n{''.join(self.output[-40:])}"
                    )
                self.changed.wait(left)

    def text(self) -> str:
        with self.changed:
            return "".join(self.output)

    def interrupt(self, timeout: float = 60.0) -> bool:
        """Ctrl-C to the whole process group; True when every process of it has exited in time (else killed)."""
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGINT)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.proc.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.1)  # polling for the group to be gone: there is no event for a grandchild's exit
        os.killpg(pgid, signal.SIGKILL)
        return False


class Shell:
    """Runs document commands in ``root`` and keeps track of the servers they start. ``prefix`` goes before every
    ``bash`` (e.g. ``nsenter ... --``: the commands run in the test's own network namespace, netns.py)."""

    def __init__(self, root: Path, env: dict[str, str], prefix: list[str] | None = None) -> None:
        self.root = root
        self.env = env
        self.prefix = list(prefix or [])
        self.servers: list[Server] = []

    def run(self, cmd: Command, timeout: float = 300.0, ready_timeout: float = 120.0) -> str:
        if cmd.is_server:
            return self.start_server(cmd, ready_timeout).text()
        proc = subprocess.run([*self.prefix, "bash", "-o", "pipefail", "-c", cmd.text], cwd=self.root, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"{cmd.where}: `{cmd.text}` exited {proc.returncode}:\n{proc.stdout[-4000:]}")
        self.check(cmd, proc.stdout)
        return proc.stdout

    def start_server(self, cmd: Command, ready_timeout: float) -> Server:
        text = re.sub(r"&\s*$", "", cmd.text)  # the harness does the backgrounding
        proc = subprocess.Popen([*self.prefix, "bash", "-c", text], cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        server = Server(cmd, proc)
        self.servers.append(server)
        threading.Thread(target=server._pump, daemon=True).start()
        server.wait_ready(ready_timeout)
        self.check(cmd, server.text())
        return server

    @staticmethod
    def check(cmd: Command, output: str) -> None:
        problem = match_output(cmd.expected, output)
        if problem:
            raise AssertionError(f"{cmd.where}: `{cmd.text}`: {problem}; it printed:\n{output[-4000:]}")

    def stop_all(self) -> None:
        for server in reversed(self.servers):
            server.interrupt()
        self.servers.clear()
