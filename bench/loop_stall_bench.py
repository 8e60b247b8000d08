"""Can one client stall the others? Small-request latency while a heavy request is in flight.

One client sends a heavy request; another client, on its own connection, sends small requests one after the
other (Metadata for one topic and an uncompressed 1-record Produce, acks=1, alternating) until the heavy
request's response arrives. The latency (send to response) of every small request sent while the heavy one was
in flight is reported as p50 / p99 / max, with how many there were and how long the heavy request itself took
(a broker that stalls answers one small request, late: its latency is the stall). Scenarios:

* **idle**: no heavy request (2 s of small requests): the baseline.
* **bomb produce**: one Produce request to a topic of ``--bombs`` partitions, one small compressed batch per
  partition, alternately zstd (RLE blocks, no content size in the frame, ~2 KB) and gzip (~65 KB), each
  decompressing to one byte more than the broker's 64 MiB cap (refused with CORRUPT_MESSAGE once inflated,
  as a hostile client's bombs would be). Sent ``--repeats`` times.
* **create 1000**: CreateTopics of one topic with ``--partitions`` partitions.
* **delete 1000**: DeleteTopics of that topic.
* **move 600 MB** (``--only move``): AlterReplicaLogDirs of a partition holding ``--move-mb`` MB (1 MB batches of
  1 KB records, 100 MB segments) into the broker's second log directory; the heavy "request" lasts until the
  move is done (DescribeLogDirs polled every 50 ms shows the partition in its new directory and no future
  replica; a revision that moves inside the request answers once it is done). The small requests alternate
  Metadata, a Produce to another topic and a Produce to the moving partition itself. Also reported: the longest
  time the partition's appends waited (its max produce latency).

Every revision runs a fresh ``tidelog serve`` with an empty data dir on a free port. ``--tidelog-rev A,B``
(or ``REV`` = REV,HEAD) exports each commit with ``git archive`` (bench/tidelog_revs.py ``snapshot_tidelog``, C extensions built in place) and
prints them side by side in one table (``worktree`` = the live tree; default ``HEAD``).

``--calibrate`` instead measures what the broker's choice between the loop and a worker thread rests on
(``tidelog.broker.handlers.produce.INLINE_VALIDATION_NS``): the round trip of a call to a worker thread from a
uvloop loop, and the validation cost per byte of output of each codec and of an uncompressed batch.

Usage::

    .venv/bin/python bench/loop_stall_bench.py --tidelog-rev ce67fc6,HEAD
    .venv/bin/python bench/loop_stall_bench.py --calibrate
    .venv/bin/python bench/loop_stall_bench.py --tidelog-rev 53a1311,HEAD --only move --move-mb 600
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import ROOT, free_port
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.records.batch import build_batch
from tidelog.records.crc import crc32c
from tidelog.records.varint import encode_varint
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import parse_revs, prepare

PRODUCE, METADATA, CREATE_TOPICS, DELETE_TOPICS, API_VERSIONS = 0, 3, 19, 20, 18
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
CAP = 64 * 1024 * 1024  # the broker's decompression cap (DEFAULT_MAX_DECOMPRESSED)


# --------------------------------------------------------------------------------------------- raw client


class Client:
    def __init__(self, port: int, timeout: float = 120.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0

    def send(self, api: int, version: int, body: dict) -> int:
        self.cid += 1
        self.sock.sendall(encode_request(api, version, self.cid, "stall-bench", body))
        return self.cid

    def recv(self, api: int, version: int) -> dict:
        head = self._exact(4)
        (size,) = struct.unpack(">i", head)
        _, resp = decode_response(api, version, self._exact(size))
        return resp

    def request(self, api: int, version: int, body: dict) -> dict:
        self.send(api, version, body)
        return self.recv(api, version)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def create_topic(c: Client, name: str, partitions: int, configs: dict[str, str] | None = None) -> dict:
    return c.request(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                                    "replication_factor": 1, "assignments": [],
                                                    "configs": [{"name": k, "value": v}
                                                                for k, v in (configs or {}).items()]}],
                                        "timeout_ms": 120000, "validate_only": False})


def produce_body(topic: str, batches: list[bytes], acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": i, "records": b}
                                                              for i, b in enumerate(batches)]}]}


# --------------------------------------------------------------------------------------------- bombs


def bomb_batch(codec: int, decompressed: int) -> bytes:
    """A v2 batch of one record of zeros whose compressed records area inflates to exactly ``decompressed``
    bytes (zstd: no content size in the frame, so the broker must inflate it to find out)."""
    value_len = decompressed - 13  # 4-byte length varint + attributes, two 1-byte varints, key -1, 4-byte value
    body_prefix = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(value_len)
    head = encode_varint(len(body_prefix) + value_len + 1) + body_prefix
    assert len(head) + value_len + 1 == decompressed
    if codec == 4:
        obj: Any = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    else:
        obj = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [obj.compress(head)]
    zero = bytes(1 << 20)
    left = value_len
    while left:
        k = min(left, len(zero))
        parts.append(obj.compress(zero[:k]))
        left -= k
    parts.append(obj.compress(b"\x00"))  # headers count 0
    parts.append(obj.flush())
    records = b"".join(parts)
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", codec, 0, now, now, -1, -1, -1, 1) + records
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


# --------------------------------------------------------------------------------------------- broker


class Broker:
    def __init__(self, src: Path | None, work: Path, dirs: int = 1, log_level: str = "WARNING") -> None:
        self.port = free_port()
        self.data = work / f"data-{self.port}"
        self.dirs = [self.data] if dirs == 1 else [work / f"data-{self.port}-{i}" for i in range(dirs)]
        where = (["--data-dir", str(self.data)] if dirs == 1
                 else ["--override", "log.dirs=" + ",".join(str(d) for d in self.dirs)])
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.log_path = work / f"broker-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), *where, "--log-level", log_level,
             "--override", "tidelog.metrics.listener=off"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=work,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                c = Client(self.port, timeout=5)
                c.request(API_VERSIONS, 3, {"client_software_name": "b", "client_software_version": "1"})
                c.close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"broker did not start, see {self.log_path}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


# --------------------------------------------------------------------------------------------- scenarios


def small_requests_during(port: int, heavy: Any, min_seconds: float = 0.0, rate: float = 0.0,
                          also_to: str | None = None, also_lat: list[float] | None = None
                          ) -> tuple[list[float], float]:
    """Run ``heavy(client)`` on its own connection in a thread; meanwhile send small requests on another one
    (with ``also_to``, every third one is a Produce to that topic's partition 0, its latencies also appended to
    ``also_lat``). Returns (latencies in ms of small requests answered while the heavy one was in flight,
    heavy seconds)."""
    small = Client(port)
    small_body = produce_body("small", [build_batch([(None, b"x" * 100)])])
    also_body = produce_body(also_to, [build_batch([(None, b"y" * 100)])]) if also_to else None
    meta = {"topics": [{"name": "small", "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}
    small.request(METADATA, 12, meta)  # warm
    done = threading.Event()
    heavy_s: list[float] = []
    errors: list[BaseException] = []

    def run_heavy() -> None:
        try:
            c = Client(port)
            t0 = time.perf_counter()
            heavy(c)
            heavy_s.append(time.perf_counter() - t0)
            c.close()
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    lat: list[float] = []
    t_start = time.perf_counter()
    th = threading.Thread(target=run_heavy, daemon=True)
    if heavy is not None:
        th.start()
        time.sleep(0.02)  # let the heavy request reach the broker first
    i = 0
    gap = 1.0 / rate if rate > 0 else 0.0
    next_at = time.perf_counter()
    while True:
        if gap:  # a fixed rate (absolute deadlines): a stall shows as latency, not as fewer requests
            next_at += gap
            pause = next_at - time.perf_counter()
            if pause > 0:
                done.wait(pause) if heavy is not None else time.sleep(pause)
        if heavy is not None and done.is_set():
            break
        if heavy is None and time.perf_counter() - t_start > min_seconds:
            break
        started_after_done = done.is_set()
        t0 = time.perf_counter()
        to_moving = also_body is not None and i % 3 == 2
        if to_moving:
            r = small.request(PRODUCE, 9, also_body)
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
        elif i % 2:
            small.request(PRODUCE, 9, small_body)
        else:
            small.request(METADATA, 12, meta)
        t1 = time.perf_counter()
        if heavy is None or not started_after_done:  # sent while the heavy request was in flight
            lat.append((t1 - t0) * 1000)
            if to_moving and also_lat is not None:
                also_lat.append((t1 - t0) * 1000)
        i += 1
    small.close()
    if heavy is not None:
        th.join()
    if errors:
        raise errors[0]
    return lat, (heavy_s[0] if heavy_s else 0.0)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def log_dirs_of(c: Client, topic: str) -> dict[str, list[bool]]:
    """log dir -> is_future_key of each replica of ``topic`` there."""
    r = c.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {d["log_dir"]: [p["is_future_key"] for t in d["topics"] if t["name"] == topic for p in t["partitions"]]
            for d in r["results"]}


def run_move(src: Path | None, work: Path, args: argparse.Namespace) -> dict[str, dict]:
    """The move scenario, on a broker with two log directories."""
    broker = Broker(src, work, dirs=2, log_level="INFO")
    out: dict[str, dict] = {}
    try:
        admin = Client(broker.port)
        create_topic(admin, "small", 1)
        create_topic(admin, "moving", 1, {"segment.bytes": str(100 * 1024 * 1024)})
        batch = build_batch([(None, b"z" * 1000)] * 1000)
        for _ in range(args.move_mb * 1024 * 1024 // len(batch)):
            r = admin.request(PRODUCE, 9, produce_body("moving", [batch]))
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
        dirs = log_dirs_of(admin, "moving")
        [src_dir] = [d for d, keys in dirs.items() if keys == [False]]
        [dst_dir] = [d for d in dirs if d != src_dir]
        lat, _ = small_requests_during(broker.port, None, 2.0, args.rate)
        out["idle"] = {"lat": lat, "heavy": 0.0}
        moving_lat: list[float] = []

        def move(c: Client) -> None:
            r = c.request(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
                {"path": dst_dir, "topics": [{"name": "moving", "partitions": [0]}]}]})
            assert r["results"][0]["partitions"][0]["error_code"] == 0, r
            while log_dirs_of(c, "moving") != {src_dir: [], dst_dir: [False]}:
                time.sleep(0.05)  # polling the move's progress, as kafka-reassign-partitions.sh --verify

        lat, s = small_requests_during(broker.port, move, rate=args.rate, also_to="moving", also_lat=moving_lat)
        out[f"move {args.move_mb} MB"] = {"lat": lat, "heavy": s, "moving max": max(moving_lat, default=0.0)}
        admin.close()
    finally:
        broker.stop()
    held = re.findall(r"the swap held the partition's lock ([0-9.]+) ms", broker.log_path.read_text())
    out[f"move {args.move_mb} MB"]["swap"] = float(held[-1]) if held else float("nan")
    return out


def run_rev(src: Path | None, work: Path, args: argparse.Namespace, bombs: list[bytes]) -> dict[str, dict]:
    if args.only == "move":
        return run_move(src, work, args)
    broker = Broker(src, work)
    out: dict[str, dict] = {}
    try:
        admin = Client(broker.port)
        create_topic(admin, "small", 1)
        create_topic(admin, "bombs", len(bombs))
        lat, _ = small_requests_during(broker.port, None, 2.0, args.rate)
        out["idle"] = {"lat": lat, "heavy": 0.0}
        bomb_body = produce_body("bombs", bombs)
        codes: set[int] = set()

        def bomb(c: Client) -> None:
            resp = c.request(PRODUCE, 9, bomb_body)
            for p in resp["responses"][0]["partition_responses"]:
                codes.add(p["error_code"])

        lats: list[float] = []
        secs: list[float] = []
        for _ in range(args.repeats if "bomb" in args.only else 0):
            lat, s = small_requests_during(broker.port, bomb, rate=args.rate)
            lats += lat
            secs.append(s)
        if secs:
            out["bomb produce"] = {"lat": lats, "heavy": statistics.median(secs), "codes": codes}
        if "create" not in args.only:
            return out

        def create(c: Client) -> None:
            r = create_topic(c, "wide", args.partitions)
            assert r["topics"][0]["error_code"] == 0, r

        lat, s = small_requests_during(broker.port, create, rate=args.rate)
        out[f"create {args.partitions}"] = {"lat": lat, "heavy": s}

        def delete(c: Client) -> None:
            r = c.request(DELETE_TOPICS, 4, {"topic_names": ["wide"], "timeout_ms": 120000})
            assert r["responses"][0]["error_code"] == 0, r

        lat, s = small_requests_during(broker.port, delete, rate=args.rate)
        out[f"delete {args.partitions}"] = {"lat": lat, "heavy": s}
        admin.close()
    finally:
        broker.stop()
    return out


# --------------------------------------------------------------------------------------------- calibration


def calibrate() -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import uvloop

    from tidelog.records.batch import check_record_structure
    from tidelog.records.header import validate_batch_tuple

    pool = ThreadPoolExecutor(8)

    async def hop() -> float:
        loop = asyncio.get_running_loop()
        for _ in range(200):
            await loop.run_in_executor(pool, int)
        n = 5000
        t = time.perf_counter()
        for _ in range(n):
            await loop.run_in_executor(pool, int)
        return (time.perf_counter() - t) / n * 1e6

    print(f"round trip loop -> worker thread -> loop (uvloop): {uvloop.run(hop()):.0f} us")
    rng = __import__("random").Random(1)
    print("validation (header + CRC + decompression + record walk), 100 B records, half random:")
    for codec, name in ((0, "none"), (1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        recs = [(None, rng.randbytes(50) + b"x" * 50) for _ in range(10000)]
        b = build_batch(recs, compression=codec)
        fields = validate_batch_tuple(b, 0, None, check_crc=True)
        n = 20
        t = time.perf_counter()
        for _ in range(n):
            validate_batch_tuple(b, 0, None, check_crc=True)
            check_record_structure(b, 0, fields)
        us = (time.perf_counter() - t) / n * 1e6
        out_bytes = sum(len(v) + 8 for _, v in recs)
        print(f"  {name:6} {len(b) / 1024:7.0f} KiB stored, {out_bytes / 1024:5.0f} KiB of records: {us:7.0f} us, "
              f"{us * 1000 / out_bytes:.2f} ns per byte of records")
    for codec, name in ((4, "zstd"), (1, "gzip")):
        b = bomb_batch(codec, CAP + 1)
        fields = validate_batch_tuple(b, 0, None, check_crc=True)
        t = time.perf_counter()
        try:
            check_record_structure(b, 0, fields)
        except Exception as exc:
            kind = type(exc).__name__
        us = (time.perf_counter() - t) * 1e6
        print(f"  {name} bomb: {len(b)} B inflating past the 64 MiB cap: {us / 1000:.0f} ms ({kind})")


# --------------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_rev_argument(ap, default="HEAD", what="Default: HEAD alone")
    ap.add_argument("--bombs", type=int, default=150, help="bomb batches (partitions) in the bomb produce")
    ap.add_argument("--repeats", type=int, default=3, help="bomb produces per revision")
    ap.add_argument("--partitions", type=int, default=1000, help="partitions of the created/deleted topic")
    ap.add_argument("--rate", type=float, default=1000.0,
                    help="small requests per second (fixed schedule); 0: back to back, as fast as answered")
    ap.add_argument("--only", default="bomb,create",
                    help="scenarios: bomb, create (create and delete); or move alone")
    ap.add_argument("--move-mb", type=int, default=600, help="size of the moved partition (--only move)")
    ap.add_argument("--calibrate", action="store_true", help="measure the loop/worker threshold's inputs instead")
    args = ap.parse_args()
    if args.calibrate:
        calibrate()
        return
    bombs_by_codec = {c: bomb_batch(c, CAP + 1) for c in (4, 1)}
    bombs = [bombs_by_codec[4 if i % 2 == 0 else 1] for i in range(args.bombs)]
    total = sum(len(b) for b in bombs)
    work = Path(tempfile.mkdtemp(prefix="loop-stall-"))
    results: dict[str, dict[str, dict]] = {}
    labels: list[str] = []
    try:
        for rev in prepare(parse_revs(args.tidelog_rev), work):
            print(f"[{rev.label}] running...", file=sys.stderr, flush=True)
            results[rev.label] = run_rev(rev.src, work, args, bombs)
            labels.append(rev.label)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = f"{args.rate:.0f}/s" if args.rate > 0 else "back to back"
    print(f"\nsmall requests (Metadata / 1-record Produce, alternating, one connection, {rate}) while another "
          f"connection's heavy request is in flight; {os.cpu_count()} cores")
    if args.only != "move":
        print(f"bomb produce: {args.bombs} batches (zstd ~{len(bombs_by_codec[4]) / 1024:.0f} KiB / gzip "
              f"~{len(bombs_by_codec[1]) / 1024:.0f} KiB, each inflating past the 64 MiB cap), "
              f"{total / 1024:.0f} KiB request, x{args.repeats}")
    print()
    width = max(24, *(len(x) + 2 for x in labels))
    print(f"{'scenario':<16} {'metric':<22}" + "".join(f"{x:>{width}}" for x in labels))
    for scenario in results[labels[0]]:
        rows = [
            ("small p50 ms", lambda r: f"{pct(r['lat'], 50):.2f}"),
            ("small p99 ms", lambda r: f"{pct(r['lat'], 99):.2f}"),
            ("small max ms", lambda r: f"{max(r['lat']) if r['lat'] else float('nan'):.1f}"),
            ("small answered", lambda r: f"{len(r['lat'])}"),
        ]
        if scenario != "idle":
            rows.append(("heavy request s", lambda r: f"{r['heavy']:.2f}"))
        if scenario.startswith("move"):
            rows.append(("moving produce max ms", lambda r: f"{r['moving max']:.1f}"))
            rows.append(("swap lock held ms", lambda r: f"{r['swap']:.1f}"))
        for metric, fmt in rows:
            print(f"{scenario:<16} {metric:<22}" + "".join(f"{fmt(results[x][scenario]):>{width}}" for x in labels))
    for x in labels if args.only != "move" else []:
        codes = results[x].get("bomb produce", {}).get("codes")
        print(f"bomb partition error codes [{x}]: {sorted(codes) if codes else '-'}")


if __name__ == "__main__":
    main()
