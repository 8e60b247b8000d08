"""The CPU floor of one paced request on this machine, without tidelog: a client process sends 1 byte every
200 µs (5000/s, as request_cost_bench.py's producer) over a socketpair and waits for the echo; the server child
answers it (a) with a bare ``select.epoll`` loop, (b) with ``uvloop`` (``sock_recv``/``sock_sendall``), (c) with
a uvloop reader callback resolving a future a task awaits (tidelog's connection before issue 30's inline lane)
and (d) with the reader callback answering by itself (the inline lane's pattern).
Prints the server's CPU (utime + stime) per request. Issue 18 goal 1: what any Python server pays per paced
request before it does any work. Usage: .venv/bin/python bench/wakeup_floor.py [--requests N]"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import time


def _pace(sock: socket.socket, n: int, interval: float) -> None:
    nxt = time.perf_counter()
    for _ in range(n):
        nxt += interval
        while time.perf_counter() < nxt:
            time.sleep(interval / 4)
        sock.send(b"x")
        sock.recv(64)


def _report(label: str, n: int) -> None:
    t = os.times()
    print(f"{label:>12}: {(t.user + t.system) / n * 1e6:6.1f} us CPU per paced request "
          f"(user {t.user / n * 1e6:.1f}, sys {t.system / n * 1e6:.1f})", flush=True)


def _serve_epoll(sock: socket.socket, n: int) -> None:
    ep = select.epoll()
    ep.register(sock.fileno(), select.EPOLLIN)
    for _ in range(n):
        ep.poll()
        sock.send(sock.recv(64))
    _report("bare epoll", n)


def _serve_uvloop(sock: socket.socket, n: int) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        for _ in range(n):
            await loop.sock_sendall(sock, await loop.sock_recv(sock, 64))
        _report("uvloop", n)

    uvloop.run(main())


def _serve_uvloop_task(sock: socket.socket, n: int) -> None:
    """tidelog's connection before issue 30's inline lane: the reader stays registered, its callback resolves a
    future a connection task awaits, and the task reads and answers (one future and one task step per request)."""
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        waiter: list[asyncio.Future[None] | None] = [None]

        def readable() -> None:
            fut = waiter[0]
            if fut is not None and not fut.done():
                fut.set_result(None)

        loop.add_reader(sock.fileno(), readable)
        for _ in range(n):
            fut = waiter[0] = loop.create_future()
            await fut
            waiter[0] = None
            sock.send(sock.recv(64))
        loop.remove_reader(sock.fileno())
        _report("uvloop task", n)

    uvloop.run(main())


def _serve_uvloop_callback(sock: socket.socket, n: int) -> None:
    """The inline lane's pattern: the reader callback itself reads and answers; no future, no task step."""
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        done = loop.create_future()
        count = [0]

        def readable() -> None:
            sock.send(sock.recv(64))
            count[0] += 1
            if count[0] == n:
                done.set_result(None)

        loop.add_reader(sock.fileno(), readable)
        await done
        loop.remove_reader(sock.fileno())
        _report("uvloop cb", n)

    uvloop.run(main())


def run(server, n: int, interval: float) -> None:
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        try:
            server(b, n)
        finally:
            os._exit(0)
    b.close()
    _pace(a, n, interval)
    os.waitpid(pid, 0)
    a.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=5000.0)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.requests} requests at {args.rate:.0f}/s")
    for server in (_serve_epoll, _serve_uvloop, _serve_uvloop_task, _serve_uvloop_callback):
        run(server, args.requests, 1.0 / args.rate)


if __name__ == "__main__":
    main()
