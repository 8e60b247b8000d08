"""The replica fetcher's read path alone: CPU of the client per Fetch answer, asyncio streams vs FrameReader (issue 30).

    .venv/bin/python bench/peer_read_bench.py                 # ~20 s
    .venv/bin/python bench/peer_read_bench.py --sizes 65536 --requests 20000 --repeats 5

A server in its own process answers every request on one connection with a Fetch v12 answer of one partition
whose records are ``size`` bytes (pre-encoded; only the correlation id changes), with one ``sendall``. The
client is :class:`tidelog.cluster.peer.Peer` on uvloop, as a broker's replica fetcher runs it, either over
asyncio streams (the path TLS/SASL connections keep: given a PLAINTEXT ``ClientSecurity``) or over
:class:`~tidelog.cluster.peer.FrameReader` (a PLAINTEXT peer's path since issue 30). It sends ``--requests``
Fetch requests one at a time; the table shows the client process's CPU (user + system, so the kernel's copy of
each answer counts on both sides) per answer, best of ``--repeats`` runs alternating the two paths, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tidelog.client.security import ClientSecurity
from tidelog.cluster.peer import Peer
from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey

FETCH = int(ApiKey.FETCH)


def _answer(size: int) -> bytes:
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 7, "responses": [{"topic": "t", "partitions": [{
        "partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
        "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
        "records": bytes(size)}]}]}
    return b"".join(bytes(c) for c in codec.encode_response(FETCH, 12, 0, body))


def serve(port_file: str, size: int) -> None:
    """Answer every request frame on each accepted connection with the Fetch answer, its correlation id set."""
    answer = bytearray(_answer(size))
    srv = socket.create_server(("127.0.0.1", 0))
    Path(port_file).write_text(str(srv.getsockname()[1]))
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + n:
                        break
                    answer[4:8] = buf[8:12]  # the request's correlation id (after api key and version)
                    buf = buf[4 + n:]
                    conn.sendall(answer)


def _request_body() -> dict:
    return {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 10 << 20, "isolation_level": 0,
            "session_id": 7, "session_epoch": 1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}


async def _run(port: int, streams: bool, requests: int) -> float:
    peer = Peer("127.0.0.1", port, "bench", ClientSecurity("PLAINTEXT") if streams else None)
    body = _request_body()
    try:
        await peer.request(FETCH, 12, body)  # connect
        t0 = time.process_time()
        for _ in range(requests):
            resp = await peer.request(FETCH, 12, body)
            assert resp["responses"][0]["partitions"][0]["records"]
        return (time.process_time() - t0) / requests
    finally:
        peer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16384,65536,262144,1048576", help="record bytes per answer")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--serve", nargs=2, metavar=("PORT_FILE", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    try:
        import uvloop
        new_loop = uvloop.new_event_loop
    except ImportError:  # the broker runs uvloop when installed; without it both paths run on asyncio's loop
        new_loop = asyncio.new_event_loop
    print(f"client CPU per Fetch answer (user+system), best of {args.repeats}, {args.requests} requests per run, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'record bytes':>12} | {'streams us':>10} | {'FrameReader us':>14} | {'FrameReader/streams':>19}")
    for size in (int(s) for s in args.sizes.split(",")):
        port_file = Path(f"/tmp/peer_read_bench.{os.getpid()}.port")
        port_file.unlink(missing_ok=True)
        srv = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), str(size)])
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if time.monotonic() > deadline or srv.poll() is not None:
                    raise SystemExit("the answer server did not start")
                time.sleep(0.05)
            port = int(port_file.read_text())
            best = {True: float("inf"), False: float("inf")}
            for _ in range(args.repeats):
                for streams in (True, False):
                    loop = new_loop()
                    try:
                        best[streams] = min(best[streams], loop.run_until_complete(_run(port, streams, args.requests)))
                    finally:
                        loop.close()
            print(f"{size:>12} | {best[True] * 1e6:>10.1f} | {best[False] * 1e6:>14.1f} | "
                  f"{best[False] / best[True]:>18.2f}x")
        finally:
            srv.kill()
            srv.wait()
            port_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
