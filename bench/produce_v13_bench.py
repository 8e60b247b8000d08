"""Produce v12 (topic by name) against Produce v13 (topic by id, KIP-516, resolved to the name at the fast lane's
entry): both take the C fast lane.

    .venv/bin/python bench/produce_v13_bench.py [--requests 3000] [--repeats 3]

One ``tidelog serve`` (bench/peers.py), one topic, one connection sending single-record Produce requests (acks=1,
100 B value) one after another, in blocks of ``--requests`` per version, the versions interleaved per repeat.
Printed side by side: the broker's CPU microseconds per request (utime + stime from /proc: far less sensitive to
the other processes on the shared cores than wall time) and the wall time per request, best repeat of each, and
the ratio v13 / v12. Java clients 4.1+ send v13; librdkafka and kafka-python send at most v10 / v9.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import Tidelog, free_port
from tidelog.protocol import codec
from tidelog.records.batch import build_batch

PRODUCE, CREATE_TOPICS = 0, 19


def _client(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    return exact(int.from_bytes(exact(4), "big"))


def _call(s: socket.socket, api_key: int, version: int, body: dict) -> dict:
    s.sendall(codec.encode_request(api_key, version, 1, "bench", body))
    return codec.decode_response(api_key, version, _recv(s))[1]


def _block(broker: Tidelog, s: socket.socket, version: int, topic: str, tid: object, n: int) -> tuple[float, float]:
    t = {"topic_id": tid} if version >= 13 else {"name": topic}
    t["partition_data"] = [{"index": 0, "records": build_batch([(None, b"x" * 100)])}]
    frame = codec.encode_request(PRODUCE, version, 7, "bench", {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [t]})
    c0, w0 = broker.cpu_seconds(), time.perf_counter()
    for _ in range(n):
        s.sendall(frame)
        _recv(s)
    return (broker.cpu_seconds() - c0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="produce-v13-") as d:
        broker = Tidelog(port=free_port(), data_dir=Path(d) / "data", log_path=Path(d) / "broker.log")
        broker.start()
        try:
            s = _client(broker.port)
            r = _call(s, CREATE_TOPICS, 7, {"topics": [{"name": "v13", "num_partitions": 1, "replication_factor": 1}],
                                            "timeout_ms": 10000})
            tid = r["topics"][0]["topic_id"]
            best: dict[int, tuple[float, float]] = {}
            for _ in range(args.repeats):
                for v in (12, 13):
                    cpu, wall = _block(broker, s, v, "v13", tid, args.requests)
                    old = best.get(v)
                    best[v] = (min(cpu, old[0]), min(wall, old[1])) if old else (cpu, wall)
            s.close()
        finally:
            broker.stop()
    (c12, w12), (c13, w13) = best[12], best[13]
    print(f"{'single-record produce, acks=1':32} {'v12 (by name)':>20} {'v13 (by id)':>20} {'v13/v12':>8}")
    print(f"{'broker CPU us / request':32} {c12:20.1f} {c13:20.1f} {c13 / c12:8.2f}")
    print(f"{'wall us / request':32} {w12:20.1f} {w13:20.1f} {w13 / w12:8.2f}")


if __name__ == "__main__":
    main()
