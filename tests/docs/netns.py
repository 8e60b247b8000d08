"""A network namespace of the docs test's own, so the README's commands run exactly as written (``127.0.0.1:9092``,
``9093``..., ZooKeeper on ``2181``, metrics on ``9404``) while a broker the reader started with the README's first
command holds the same ports on the machine (issue 25 item 9): the two commands work in either order and together.

The namespace (``unshare --user --map-root-user --net``: no privilege needed where user namespaces are allowed)
has only a loopback interface, brought up by the process that holds it. That process also opens a listening
socket inside it and hands it to the test process (``SCM_RIGHTS``), which serves an HTTP CONNECT proxy on it: the
commands that download (``pip install`` of the set-up script and of docs/SPARK.md) reach the package index
through it, the only way out of the namespace (``HTTPS_PROXY``; loopback addresses are left out with
``NO_PROXY``). Commands enter the namespace with ``nsenter`` (which execs: the process started is the command's
own, so Ctrl-C and exit codes are the command's).

:func:`open_namespace` returns None where no namespace can be made; the test then runs on the machine's
loopback as before and needs the README's ports free.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from contextlib import suppress
from pathlib import Path

# Run inside the new namespace: loopback up (SIOCGIFFLAGS / SIOCSIFFLAGS on "lo", IFF_UP), a listening socket for
# the proxy handed to the parent over the socket pair, then wait until the parent closes its end.
_HOLDER = r"""
import fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0))[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
s.close()
proxy = socket.socket()
proxy.bind(("127.0.0.1", 0))
proxy.listen(64)
parent = socket.socket(fileno=int(sys.argv[1]))
socket.send_fds(parent, [str(proxy.getsockname()[1]).encode()], [proxy.fileno()])
proxy.close()
parent.recv(1)
"""

_UPSTREAM_PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")


class Namespace:
    """The namespace's holder process, the ``nsenter`` prefix that runs a command inside it and the proxy."""

    def __init__(self, holder: subprocess.Popen[bytes], control: socket.socket, listener: socket.socket,
                 proxy_port: int) -> None:
        self.holder = holder
        self._control = control
        self._listener = listener
        self.proxy_port = proxy_port
        self.prefix = ["nsenter", f"--target={holder.pid}", "--user", "--net", "--preserve-credentials", "--"]
        self._closed = threading.Event()
        self._inode = os.stat(f"/proc/{holder.pid}/ns/net").st_ino
        threading.Thread(target=self._accept, name="docs-netns-proxy", daemon=True).start()

    def env(self) -> dict[str, str]:
        """What a command inside needs to download: the proxy (loopback addresses stay direct)."""
        proxy = f"http://127.0.0.1:{self.proxy_port}"
        no_proxy = "127.0.0.1,localhost,::1"
        return {"https_proxy": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "HTTP_PROXY": proxy,
                "no_proxy": no_proxy, "NO_PROXY": no_proxy}

    def listening(self, port: int) -> bool:
        """Whether something accepts connections on 127.0.0.1:``port`` inside the namespace."""
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1).close()"
        return subprocess.run([*self.prefix, sys.executable, "-c", probe], capture_output=True,
                              timeout=30).returncode == 0

    def close(self) -> None:
        """Kill what is still running inside (only processes this test started can be there), then the holder."""
        self._closed.set()
        for pid in self._pids_inside():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._control.close()
        self._listener.close()
        try:
            self.holder.wait(10)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait()

    def _pids_inside(self) -> list[int]:
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.holder.pid:
                continue
            with suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino == self._inode:
                    out.append(int(entry.name))
        return out

    # -- the proxy ----------------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk or len(head) > 65536:
                    return
                head += chunk
            method, target, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            upstream = next((os.environ[v] for v in _UPSTREAM_PROXY_VARS if os.environ.get(v)), None)
            try:
                if upstream is not None:  # the machine itself goes out through a proxy: hand it the request
                    host, _, port = upstream.split("://", 1)[-1].rstrip("/").rpartition(":")
                    remote = socket.create_connection((host, int(port)), timeout=30)
                    remote.sendall(head)
                elif method.upper() == "CONNECT":
                    host, _, port = target.rpartition(":")
                    remote = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    rest = head.split(b"\r\n\r\n", 1)[1]
                    if rest:
                        remote.sendall(rest)
                else:
                    conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                    return
            except OSError as exc:
                conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nX-Error: {exc}\r\n\r\n".encode())
                return
            with remote:
                _pump(conn, remote)


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side closes."""
    a.settimeout(None)
    b.settimeout(None)
    peers = {a: b, b: a}
    while True:
        readable, _, _ = select.select(list(peers), [], [], 300)
        if not readable:
            return
        for s in readable:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                return
            peers[s].sendall(data)


def open_namespace(timeout: float = 30.0) -> Namespace | None:
    """A new namespace (None where ``unshare``/``nsenter`` are missing or user namespaces are not allowed)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return None
    control, theirs = socket.socketpair()
    holder = subprocess.Popen(["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c", _HOLDER,
                               str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    theirs.close()
    control.settimeout(timeout)
    try:
        msg, fds, _, _ = socket.recv_fds(control, 64, 1)
    except OSError:
        fds, msg = [], b""
    if not fds:
        control.close()
        holder.kill()
        holder.wait()
        return None
    control.settimeout(None)
    return Namespace(holder, control, socket.socket(fileno=fds[0]), int(msg))
