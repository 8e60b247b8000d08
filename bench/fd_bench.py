"""Open file descriptors per partition of a running broker (issue 17).

Starts ``tidelog serve`` on a fresh data dir, counts ``/proc/<pid>/fd``, creates one topic of ``--partitions``
partitions with a CreateTopics request, counts again, restarts the broker and counts once more; prints the
descriptors per partition. ``--src`` runs another checkout's code (its ``src`` put first on PYTHONPATH), e.g. to
compare with main::

    .venv/bin/python bench/fd_bench.py --partitions 200
    .venv/bin/python bench/fd_bench.py --partitions 200 --src /work/main/src
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.framing import ClientConnection

CREATE_TOPICS = ApiKey.CREATE_TOPICS
_STARTED = re.compile(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)")


def _request(port: int, api_key: int, version: int, body: dict) -> dict:
    conn = ClientConnection("fd-bench")
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(conn.send(api_key, version, body)[1])
        while (resp := conn.next_response()) is None:
            conn.feed(sock.recv(conn.missing))
    return resp.body


def _start(data: Path, src: str | None, nofile: int | None) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir",
           str(data), "--override", "log.index.size.max.bytes=65536", "--override", "tidelog.metrics.listener=off"]
    if nofile:
        cmd = ["prlimit", f"--nofile={nofile}:{nofile}", "--", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _STARTED.search(line)
        if m:
            return proc, int(m.group(1))
    raise RuntimeError(f"broker did not start (exit {proc.wait()})")


def _fds(proc: subprocess.Popen[str]) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))  # prlimit execs the broker: the same pid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--src", help="another checkout's src directory")
    ap.add_argument("--nofile", type=int, help="run the broker under prlimit --nofile=N:N")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fd-bench-"))
    try:
        proc, port = _start(root / "data", args.src, args.nofile)
        before = _fds(proc)
        t0 = time.perf_counter()
        body = {"topics": [{"name": "fds", "num_partitions": args.partitions, "replication_factor": 1,
                            "assignments": [], "configs": []}], "timeout_ms": 60000, "validate_only": False}
        result = _request(port, CREATE_TOPICS, 5, body)["topics"][0]
        took = time.perf_counter() - t0
        after = _fds(proc)
        proc.terminate()
        proc.wait()
        n = args.partitions
        print(f"create {n} partitions: error_code={result['error_code']} {result.get('error_message') or ''} "
              f"in {took:.2f}s")
        print(f"fds: idle broker {before}, after create {after} ({(after - before) / n:.2f}/partition)")
        try:
            proc, port = _start(root / "data", args.src, args.nofile)
        except RuntimeError as exc:
            print(f"restart: FAILED ({exc})")
            return
        restarted = _fds(proc)
        proc.terminate()
        proc.wait()
        print(f"restart: fds {restarted} ({(restarted - before) / n:.2f}/partition)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
