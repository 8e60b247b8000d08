"""The inline lane on and off in one broker process, alternating, under one paced client (issue 30 goal 3).

    .venv/bin/python bench/inline_lane_bench.py [--rate 5000] [--blocks 8] [--block-seconds 2] [--acks 1]

A broker is started in this process (empty data dir, metrics listener off) and a client process connects to it over
TCP on 127.0.0.1 and sends single-record Produce requests (100 B, v9) at ``--rate`` per second, each after the
answer to the one before (a paced ``linger.ms=0`` producer). The broker alternates blocks of ``--block-seconds``
with ``Connection.inline_lane`` on and off (on, off, off, on, ...), and prints the broker process's CPU (utime +
stime, all threads) per request of each block, the wake-ups of its loop thread per request, and the median per
mode with the ratio. One process and one connection for both modes, blocks interleaved: what differs between them
is only where the request is answered (the reader callback, or the connection's task), not the machine's minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paced_profile import sched_stats

ROOT = Path(__file__).resolve().parent.parent


def client(port: int, rate: float, seconds: float, acks: int) -> None:
    from tidelog.protocol import codec
    from tidelog.records.batch import build_batch

    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    interval = 1.0 / rate
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    cid = 0
    while time.monotonic() < end:
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        cid += 1
        batch = build_batch([(None, b"x" * 100)], now_ms=time.time_ns() // 1_000_000)
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
                "topic_data": [{"name": "p", "partition_data": [{"index": 0, "records": batch}]}]}
        sock.sendall(codec.encode_request(0, 9, cid, "paced", body))
        need, got = None, b""
        while need is None or len(got) < need:
            chunk = sock.recv(65536)
            if not chunk:
                return
            got += chunk
            if need is None and len(got) >= 4:
                need = 4 + int.from_bytes(got[:4], "big")
    sock.close()


def loop_thread_stats() -> tuple[float, int]:
    return sched_stats(f"/proc/self/task/{threading.get_native_id()}/sched")


async def serve(args: argparse.Namespace) -> None:
    from tidelog.broker import server as srv
    from tidelog.broker.config import BrokerConfig
    from tidelog.node import build_broker

    data = Path(tempfile.mkdtemp(prefix="inline-lane-bench-"))
    cfg = BrokerConfig.from_properties({"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0",
                                        "tidelog.metrics.listener": "off"})
    broker = build_broker(cfg)
    await broker.start()
    await asyncio.to_thread(broker.topics.create_topic, "p", 1, 1, None)
    seconds = args.blocks * args.block_seconds + 3
    child = subprocess.Popen([sys.executable, __file__, "--client", str(broker.port), "--rate", str(args.rate),
                              "--seconds", str(seconds), "--acks", str(args.acks)],
                             env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    plog = None
    try:
        await asyncio.sleep(2.0)  # connected, warmed up
        plog = broker.topics.get_log("p", 0)
        assert plog is not None
        modes = [(True, False, False, True)[i % 4] for i in range(args.blocks)]
        results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for on in modes:
            srv.Connection.inline_lane = on
            await asyncio.sleep(0.05)  # the wait in progress was entered in the other mode
            t0, (r0, v0), n0 = os.times(), loop_thread_stats(), plog.log_end_offset
            await asyncio.sleep(args.block_seconds)
            t1, (r1, v1), n1 = os.times(), loop_thread_stats(), plog.log_end_offset
            n = max(n1 - n0, 1)
            cpu = (t1.user + t1.system - t0.user - t0.system) / n * 1e6
            loop_cpu = (r1 - r0) / n * 1e6
            results[on].append((cpu, (v1 - v0) / n))
            print(f"inline {'on ' if on else 'off'}: {n} requests, process {cpu:6.1f} us/request, loop thread "
                  f"{loop_cpu:6.1f} us/request, {(v1 - v0) / n:.2f} wake-ups/request", flush=True)
        on_med = statistics.median(c for c, _ in results[True])
        off_med = statistics.median(c for c, _ in results[False])
        print(f"median us/request: inline on {on_med:.1f}, off {off_med:.1f}, on/off {on_med / off_med:.2f} "
              f"(load average {os.getloadavg()[0]:.2f})")
    finally:
        await asyncio.to_thread(child.wait, seconds + 30)
        await broker.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block-seconds", type=float, default=2.0)
    ap.add_argument("--acks", type=int, default=1)
    ap.add_argument("--client", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        client(args.client, args.rate, args.seconds, args.acks)
        return
    import uvloop

    uvloop.run(serve(args))


if __name__ == "__main__":
    main()
