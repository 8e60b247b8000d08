"""Shared by the console tests: a console served by uvicorn on a loopback socket of its own (a real HTTP server in
a thread of the test process), the browser's availability, screenshots."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

from tidelog.console.app import Console, ConsoleConfig, build_app

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS_ENV = "TIDELOG_CONSOLE_SCREENSHOTS"  # a directory (docs/console) to copy the screenshots into


class RunningConsole:
    def __init__(self, console: Console, url: str, server: Any, thread: threading.Thread) -> None:
        self.console = console
        self.url = url
        self._server = server
        self._thread = thread

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def start_console(bootstrap: str, props: dict[str, str] | None = None, *, host: str = "127.0.0.1",
                  password: str | None = None, audit: Path | None = None, user: str = "tester",
                  cache_ttl: float = 5.0) -> RunningConsole:
    """A console for ``bootstrap``; ``host`` decides whether a login is required (beyond loopback), though the
    server itself always listens on 127.0.0.1 (tests reach nothing else)."""
    import uvicorn

    console = Console(ConsoleConfig(bootstrap, dict(props or {}), host=host, user=user, password=password,
                                    audit_path=audit, timeout=20.0, cache_ttl=cache_ttl))
    app = build_app(console, allowed_hosts=["127.0.0.1", "localhost"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    started = threading.Event()

    def run() -> None:
        import asyncio

        async def main() -> None:
            task = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
            started.set()
            await task

        asyncio.run(main())
        started.set()

    thread = threading.Thread(target=run, name="console-under-test", daemon=True)
    thread.start()
    assert started.wait(20) and server.started, "the console did not start"
    return RunningConsole(console, f"http://127.0.0.1:{port}", server, thread)



def browser_missing() -> str | None:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        return f"{CHROMIUM} and {CHROMEDRIVER} are needed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e .[test])"
    return None



def save_screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    """A PNG of the page; also copied into $TIDELOG_CONSOLE_SCREENSHOTS (docs/console) when set."""
    path = tmp_path / f"{name}.png"
    driver.execute_script("window.scrollTo(0, 0)")
    assert driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
    return path
