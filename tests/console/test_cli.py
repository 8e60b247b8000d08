"""``tidelog serve --console`` (the README's one command) and ``tidelog console`` as processes: the console
answers on loopback for the broker it was started with, and stops with it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"nothing answered at {url}"
            time.sleep(0.1)


def test_serve_with_console(tmp_path: Path) -> None:
    port, cport = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "serve", "--port", str(port), "--data-dir",
                             str(tmp_path / "data"), "--console", "--console-port", str(cport),
                             "--override", "tidelog.metrics.listener=127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            cwd=tmp_path, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        page = wait_http(f"http://127.0.0.1:{cport}/", proc)
        assert page.status_code == 200 and "tidelog console" in page.text
        c = httpx.Client(base_url=f"http://127.0.0.1:{cport}", cookies=page.cookies)
        assert c.get("/api/session").json()["bootstrap"] == f"127.0.0.1:{port}"
        brokers = c.get("/api/overview", timeout=30).json()["brokers"]
        assert [b["port"] for b in brokers] == [port]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert re.search(rf"tidelog console on http://127.0.0.1:{cport}/", out)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{cport}/", timeout=2)
