"""Where the CPU of a paced single-record Produce goes, live: the broker's loop thread with stage timers.

    .venv/bin/python bench/produce_stages.py [--acks 1] [--seconds 8] [--generic] [--no-timers]

Issue 18, goal 1 (the breakdown tables in bench/README.md). A broker of this checkout runs in this process (uvloop,
one partition); ``latency_producer`` (bench/loadgen, built by bench/setup.sh) sends 100 B records at 5000/s with
``linger.ms=0`` and idempotence off, so almost every record is its own Produce request. After 1.5 s of warm-up,
the loop thread's CPU (``time.thread_time_ns``, and user/system from ``/proc/self/task/<tid>/stat``, in clock
ticks) is divided by the Produce requests the broker counted. Each stage is wrapped in ``thread_time_ns`` (the
wrapping costs ~1-1.5 us per wrapped call; ``--no-timers`` measures the total without them):

* ``read_frame``: the wait for the socket, the loop's wake-up from ``epoll_wait``, ``recv``, the framing;
* in ``process``: the fast lane's ``parse_produce``, ``produce_one`` and ``encode_produce_response``, or with
  ``--generic`` (``Connection.fast_produce`` off) the codec's ``decode_request``, the Produce handler and
  ``encode_response``; ``write_chunks`` (the send).

Not an A/B of revisions: run the two lanes one after the other, several times, and compare ranges (the VM's
other load moves every figure; see bench/README.md, "How to read them").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import WORK, free_port
from tidelog.broker import connection
from tidelog.broker import produce_lane as lane
from tidelog.broker import server as srv
from tidelog.broker.config import BrokerConfig
from tidelog.node import build_broker

clock = time.thread_time_ns
TIMES: dict[str, int] = {}


def _add(label: str, ns: int) -> None:
    TIMES[label] = TIMES.get(label, 0) + ns


def _timed_async(fn: Any, label: str) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0 = clock()
        try:
            return await fn(*args, **kwargs)
        finally:
            _add(label, clock() - c0)
    return wrapper


def _timed(fn: Any, label: str) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(label, clock() - c0)
    return wrapper


def _install_timers(generic: bool) -> None:
    conn = srv.Connection
    conn.process = _timed_async(conn.process, "process (all of it)")  # type: ignore[method-assign]
    conn.read_frame = _timed_async(conn.read_frame, "read_frame (wait, wake-up, recv, framing)")  # type: ignore[method-assign]
    conn.write_chunks = _timed_async(conn.write_chunks, "  send (write_chunks)")  # type: ignore[method-assign]
    if generic:
        srv.codec.decode_request = _timed(srv.codec.decode_request, "  decode_request")  # type: ignore[assignment]
        srv.codec.encode_response = _timed(srv.codec.encode_response, "  encode_response")  # type: ignore[assignment]
    else:
        # the names the connection's modules call (tidelog.broker.connection / produce_lane since the split)
        lane.produce_one = _timed_async(lane.produce_one, "  produce_one (append included)")  # type: ignore[assignment]
        connection._parse_produce = _timed(connection._parse_produce, "  parse_produce (C)")
        lane._encode_produce = _timed(lane._encode_produce, "  encode_produce_response (C)")


def _task_times() -> tuple[float, float]:
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/self/task/{threading.get_native_id()}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / tick, int(fields[12]) / tick


async def run(acks: str, seconds: float, generic: bool, timers: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="produce-stages-") as d:
        port = free_port()
        cfg = BrokerConfig.from_properties({"log.dirs": d, "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                                            "tidelog.metrics.listener": "off"})
        broker = build_broker(cfg)
        await broker.start()
        if timers and generic:
            broker.handlers[0] = _timed_async(broker.handlers[0], "  produce handler (append included)")
        await asyncio.to_thread(broker.topics.create_topic, "t", 1, 1)
        cmd = [str(WORK / "bin" / "latency_producer"), "-b", f"127.0.0.1:{port}", "-t", "t", "-s", "100", "-a", acks,
               "-r", "5000", "-d", str(seconds), "-w", "1", "-X", "linger.ms=0", "-X", "enable.idempotence=false",
               "-p", "0"]
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.5)  # connected, metadata fetched, caches warm
        TIMES.clear()
        n0 = broker.metrics.requests.get("PRODUCE", [0])[0]
        c0, (u0, s0) = clock(), _task_times()
        await asyncio.sleep(max(seconds - 2.5, 1.0))
        c1, (u1, s1) = clock(), _task_times()
        n = broker.metrics.requests.get("PRODUCE", [0])[0] - n0
        stages = dict(TIMES)
        await proc.wait()
        await broker.shutdown()
    lane = "generic path" if generic else "fast lane"
    print(f"{lane}, acks={acks}: {n} requests, load average {os.getloadavg()[0]:.1f}, "
          f"{'with' if timers else 'without'} stage timers")
    if not n:
        return
    print(f"{'loop thread total':<50} {(c1 - c0) / n / 1000:6.1f} us/request "
          f"(user {(u1 - u0) / n * 1e6:.1f}, system {(s1 - s0) / n * 1e6:.1f})")
    for label, ns in stages.items():
        print(f"{label:<50} {ns / n / 1000:6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acks", default="1")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--generic", action="store_true", help="the generic path (Connection.fast_produce off)")
    ap.add_argument("--no-timers", action="store_true", help="only the total, without the stage timers")
    args = ap.parse_args()
    if not (WORK / "bin" / "latency_producer").exists():
        subprocess.run(["bash", str(Path(__file__).resolve().parent / "setup.sh")], check=True,
                       stdout=subprocess.DEVNULL, timeout=1200)
    if args.generic or srv._parse_produce is None:
        srv.Connection.fast_produce = False
    if not args.no_timers:
        _install_timers(not srv.Connection.fast_produce)
    import uvloop

    uvloop.install()
    asyncio.run(run(args.acks, args.seconds, not srv.Connection.fast_produce, not args.no_timers))


if __name__ == "__main__":
    main()
