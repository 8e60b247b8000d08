"""CPU per request of the broker: single-record Produce requests at a paced rate, and empty long-poll Fetch rounds.

    .venv/bin/python bench/request_cost_bench.py [--tidelog-rev REV[,REV...]] [--rate 5000] [--seconds 6]
                                                 [--repeats 3] [--acks 1,-1] [--fetch-wait-ms 10]
                                                 [--profile DIR]

Issue 18, goal 1. Each cell starts a fresh ``tidelog serve`` (empty data dir, metrics listener on a free port) and
measures the CPU seconds of the broker process (utime + stime from /proc, which depend far less on what else runs
on the 2 shared cores than wall time does) while

* **produce**: ``latency_producer`` (bench/loadgen/latency_producer.c, librdkafka, ``linger.ms=0``, idempotence
  off) sends 100 B records at ``--rate`` per second to one partition for ``--seconds``; almost every record is its
  own Produce request;
* **fetch**: ``rdkafka_performance -C`` consumes an empty partition with ``fetch.wait.max.ms=--fetch-wait-ms``,
  so every Fetch is a long poll that expires empty.

Requests are counted exactly from the broker's own ``tidelog_requests_total`` counter (scraped before and after),
so the figure is broker CPU seconds / requests of that API, in microseconds; the broker's idle CPU rate (measured
for 2 s before each cell) is shown beside it. Revisions (``--tidelog-rev``, see bench/tidelog_revs.py) are
interleaved per repeat and the best (lowest) repeat is reported, since interference only adds CPU.

``--inprocess``: the same requests without sockets to a client or wake-ups, per revision in a child interpreter
(``tidelog_revs.run_in_each``): a broker started in the process, a socketpair as the connection, and the thread
CPU time of ``Connection.process`` (decode, dispatch, handler, append, encode, send, metrics) per single-record
Produce request (acks=1, acks=-1) and per Fetch that finds nothing (max_wait 0), plus the stages timed one by one.
On this VM a block-and-wake of the loop costs 15-25 us of CPU by itself (``epoll_wait`` woken by another process,
measured with a bare ``select.epoll``), which the live figures include once or twice per request and the
in-process ones do not.

``--profile DIR`` additionally records the produce phase of the last revision with py-spy (installed into .venv
by hand: ``.venv/bin/pip install py-spy``; not a project dependency) as raw collapsed stacks, and prints the
share of samples per stage (see ``STAGES``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import run_bounded
from peers import WORK, Tidelog, free_port
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import emit, is_child, parse_revs, prepare, print_side_by_side, run_in_each

LATENCY_PRODUCER = WORK / "bin" / "latency_producer"
RDKAFKA_PERF = WORK / "bin" / "rdkafka_performance"


class MeteredTidelog(Tidelog):
    """``tidelog serve`` with its metrics listener on (to count requests); the revision's sources first on
    PYTHONPATH (``src``)."""

    metrics_port = 0

    def command(self) -> list[str]:
        self.metrics_port = free_port()
        return [*super().command(), "-o", f"tidelog.metrics.listener=127.0.0.1:{self.metrics_port}"]

    def requests(self) -> Counter:
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        out: Counter = Counter()
        for m in re.finditer(r'^tidelog_requests_total\{api="([A-Z_]+)"\} ([0-9.e+]+)$', body, re.M):
            out[m.group(1)] = int(float(m.group(2)))
        return out


def broker_for(src: Path, run_dir: Path, tag: str) -> MeteredTidelog:
    cls = type(f"Tidelog_{tag}", (MeteredTidelog,), {"src": str(src)})
    cell = run_dir / tag
    return cls(port=free_port(), data_dir=cell / "data", log_path=cell / "broker.log")


def idle_rate(broker: MeteredTidelog, seconds: float = 2.0) -> float:
    c0, t0 = broker.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (broker.cpu_seconds() - c0) / (time.monotonic() - t0)


def measure_produce(broker: MeteredTidelog, acks: str, rate: float, seconds: float, profile: Path | None) -> dict:
    topic = f"cost-produce-{acks.replace('-', 'm')}"
    broker.create_topic(topic, 1)
    idle = idle_rate(broker)
    cmd = [str(LATENCY_PRODUCER), "-b", broker.bootstrap, "-t", topic, "-s", "100", "-a", acks, "-r", str(rate),
           "-d", str(seconds), "-w", "1", "-X", "linger.ms=0", "-X", "enable.idempotence=false", "-p", "0"]
    spy = None
    if profile is not None:
        profile.parent.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(broker.proc.pid),
                                "--rate", "997", "--format", "raw", *os.environ.get("PYSPY_EXTRA", "--nonblocking").split(), "--output", str(profile),
                                "--duration", str(int(seconds) + 2)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    r0, c0, t0 = broker.requests(), broker.cpu_seconds(), time.monotonic()
    run = run_bounded(cmd, seconds + 60)
    cpu, wall = broker.cpu_seconds() - c0, time.monotonic() - t0
    n = broker.requests()["PRODUCE"] - r0["PRODUCE"]
    if spy is not None:
        spy.wait(seconds + 30)
    lat = re.search(r'"p50_ms":\s*([0-9.]+)', run.out), re.search(r'"p99_ms":\s*([0-9.]+)', run.out)
    return {"requests": n, "cpu_s": cpu, "wall_s": wall, "idle_cpu_per_s": idle,
            "us_per_request": cpu / n * 1e6 if n else float("nan"),
            "us_per_request_less_idle": (cpu - idle * wall) / n * 1e6 if n else float("nan"),
            "p50_ms": float(lat[0].group(1)) if lat[0] else None, "p99_ms": float(lat[1].group(1)) if lat[1] else None,
            "loadgen_cpu_s": run.cpu_s}


def measure_fetch(broker: MeteredTidelog, wait_ms: int, seconds: float) -> dict:
    topic = "cost-fetch-empty"
    broker.create_topic(topic, 1)
    cmd = [str(RDKAFKA_PERF), "-C", "-t", topic, "-b", broker.bootstrap, "-p", "0", "-o", "end", "-c", "1000000",
           "-i", "1000", "-X", f"fetch.wait.max.ms={wait_ms}"]
    r0, c0, t0 = broker.requests(), broker.cpu_seconds(), time.monotonic()
    run_bounded(cmd, seconds, grace=10)
    cpu, wall = broker.cpu_seconds() - c0, time.monotonic() - t0
    n = broker.requests()["FETCH"] - r0["FETCH"]
    return {"requests": n, "cpu_s": cpu, "wall_s": wall, "us_per_request": cpu / n * 1e6 if n else float("nan")}


# ---------------------------------------------------------------------------------------------------------------
# in process: the CPU of Connection.process per request, without client sockets and wake-ups


def inprocess(n: int) -> dict:
    import asyncio
    import socket

    from tidelog.broker import server as srv
    from tidelog.broker.config import BrokerConfig
    from tidelog.broker.handlers import RequestContext
    from tidelog.node import build_broker
    from tidelog.protocol import codec
    from tidelog.records.batch import build_batch

    clock = time.thread_time_ns
    figures: dict = {}

    def produce_frame(cid: int, acks: int) -> memoryview:
        batch = build_batch([(None, b"x" * 100)], now_ms=int(time.time() * 1000))
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}
        return memoryview(codec.encode_request(0, 9, cid, "rdkafka", body)[4:])

    def fetch_frame(cid: int) -> memoryview:
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": "e", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                          "fetch_offset": 0, "log_start_offset": -1,
                                                          "partition_max_bytes": 1048576}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        return memoryview(codec.encode_request(1, 11, cid, "rdkafka", body)[4:])

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="request-cost-inproc-") as d:
            cfg = BrokerConfig.from_properties({"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0",
                                                "tidelog.metrics.listener": "off"})
            broker = build_broker(cfg)
            await broker.start()
            for topic in ("t", "e"):
                await asyncio.to_thread(broker.topics.create_topic, topic, 1, 1)
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            conn = srv.Connection(broker, a, "127.0.0.1:1", None)

            async def run(frames: list) -> float:
                c0 = clock()
                for fr in frames:
                    await conn.process(fr)
                    b.recv(1 << 20)
                return (clock() - c0) / len(frames) / 1000

            for label, make in (("produce acks=1", lambda i: produce_frame(i, 1)),
                                ("produce acks=-1", lambda i: produce_frame(i, -1)),
                                ("empty fetch (max_wait 0)", fetch_frame)):
                frames = [make(i) for i in range(n + n // 10)]
                await run(frames[: n // 10])
                figures[f"{label} us/request"] = min([await run(frames[n // 10:]) for _ in range(1)])
            # the stages of one acks=1 produce, each timed alone in a loop (warm caches: a lower bound each)
            fr = produce_frame(1, 1)
            _, body = codec.decode_request(fr, broker.accepted_versions)
            ctx = RequestContext(broker=broker, api_key=0, api_version=9, correlation_id=1, client_id="rdkafka")
            handler = broker.handlers[0]
            k = max(1000, n // 4)

            def stage(label: str, fn) -> None:
                c0 = clock()
                for _ in range(k):
                    fn()
                figures[f"  stage {label} us"] = (clock() - c0) / k / 1000

            stage("decode_request", lambda: codec.decode_request(fr, broker.accepted_versions))
            c0 = clock()
            for _ in range(k):
                response = await handler(ctx, body)
            figures["  stage produce handler (append included) us"] = (clock() - c0) / k / 1000
            stage("encode_response", lambda: codec.encode_response(0, 9, 1, response))
            chunks = codec.encode_response(0, 9, 1, response)
            c0 = clock()
            for _ in range(k):
                await conn.write_chunks(chunks)
                b.recv(1 << 20)
            figures["  stage write_chunks (+ peer recv) us"] = (clock() - c0) / k / 1000
            stage("metrics.record_request", lambda: broker.metrics.record_request("PRODUCE", 0.0001))
            # the fast lane's stages (a revision with tidelog.protocol._produce: Connection.process takes it for
            # this request, so the figures above are then the generic path's and these the ones it runs)
            parse = getattr(srv, "_parse_produce", None)
            if parse is not None:
                from tidelog.broker.handlers.core import produce_one

                stage("fast lane: parse_produce (C)", lambda: parse(fr, broker.accepted_versions))
                parsed = parse(fr, broker.accepted_versions)
                c0 = clock()
                for _ in range(k):
                    pr = await produce_one(ctx, 1, 30000, "t", 0, parsed[7])
                figures["  stage fast lane: produce_one (append included) us"] = (clock() - c0) / k / 1000
                encode = srv._encode_produce
                stage("fast lane: encode_produce_response (C)", lambda: encode(9, 1, "t", pr, 0))
            await broker.shutdown()

    import uvloop

    uvloop.install()
    asyncio.run(main())
    return figures


# Stages of a request, by the innermost frame of a py-spy sample that matches (function, file fragment). The first
# stage whose pattern matches any frame of the stack, scanning from the innermost frame outwards, wins.
STAGES: list[tuple[str, str]] = [
    ("metrics", r"prometheus_client|metrics\.py"),
    ("logging", r"/logging/"),
    ("encode", r"encode_response|protocol/codec\.py.*encode|_encode|compiler\.py.*enc"),
    ("decode", r"decode_request|protocol/codec\.py.*decode|_decode|compiler\.py.*dec"),
    ("append (storage)", r"storage/|records/"),
    ("purgatory / acks wait", r"purgatory\.py"),
    ("send", r"write_chunks|_send_buffers|_flatten"),
    ("read / framing", r"read_frame|_recv_more|framing\.py"),
    ("produce handler", r"handlers/(core|core_shared|produce)\.py"),
    ("dispatch (process)", r"server\.py.*process|RequestContext"),
]


def breakdown(raw: Path) -> list[tuple[str, float]]:
    """Share of py-spy samples per stage (raw collapsed stacks: 'frame;frame;... count', outermost first)."""
    counts: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = stack.split(";")
        stage = "event loop / other"
        if any("(idle)" in f or "select" in f.split(" ")[0] for f in frames[-1:]):
            stage = "idle (epoll)"
        else:
            for f in reversed(frames):
                hit = next((name for name, pat in STAGES if re.search(pat, f)), None)
                if hit:
                    stage = hit
                    break
        counts[stage] += k
    return [(s, c / total) for s, c in counts.most_common()] if total else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_rev_argument(ap, default="HEAD", what="Default: HEAD alone")
    ap.add_argument("--rate", type=float, default=5000.0, help="produce requests per second")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each produce / fetch phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--acks", default="1,-1")
    ap.add_argument("--fetch-wait-ms", type=int, default=10, help="fetch.wait.max.ms of the empty consumer (0: skip)")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy raw profile of the produce phase into DIR")
    ap.add_argument("--inprocess", action="store_true", help="CPU of Connection.process per request, in process")
    ap.add_argument("--requests", type=int, default=20000, help="requests per figure with --inprocess")
    args = ap.parse_args()
    if args.inprocess:
        if is_child():
            figures = inprocess(args.requests)
            for k, v in figures.items():
                print(f"{k:<48} {v:7.2f}")
            emit(figures)
            return
        results = run_in_each(Path(__file__), sys.argv[1:], parse_revs(args.tidelog_rev), timeout=1800)
        ratio = {k: False for _, figs in results for k in (figs or {})}
        print_side_by_side(f"CPU per request in process (thread time, us; {os.cpu_count()} cores, load average "
                           f"{os.getloadavg()[0]:.1f}); after/before > 1: cheaper", results, ratio)
        return
    for b in (LATENCY_PRODUCER, RDKAFKA_PERF):
        if not b.exists():
            subprocess.run(["bash", str(Path(__file__).resolve().parent / "setup.sh")], check=True,
                           stdout=subprocess.DEVNULL, timeout=1200)
    work = Path(tempfile.mkdtemp(prefix="request-cost-"))
    acks_list = [a.strip() for a in args.acks.split(",") if a.strip()]
    results: dict[str, dict[str, list[dict]]] = {}
    try:
        revs = prepare(parse_revs(args.tidelog_rev), work)
        for rep in range(args.repeats):
            order = revs if rep % 2 == 0 else list(reversed(revs))
            for rev in order:
                broker = broker_for(rev.src, work, f"{rev.rev.replace('/', '_')}-{rep}")
                broker.start()
                try:
                    res = results.setdefault(rev.label, {})
                    for acks in acks_list:
                        prof = None
                        if args.profile is not None and rev is revs[-1] and rep == args.repeats - 1:
                            prof = args.profile / f"produce-acks{acks}.txt"
                        r = measure_produce(broker, acks, args.rate, args.seconds, prof)
                        res.setdefault(f"produce acks={acks}", []).append(r)
                        print(f"[{rev.label} r{rep}] produce acks={acks}: {r['requests']} requests, broker "
                              f"{r['cpu_s']:.2f} CPU s -> {r['us_per_request']:.1f} us/request "
                              f"({r['us_per_request_less_idle']:.1f} less idle {r['idle_cpu_per_s'] * 1000:.1f} "
                              f"ms/s); p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms", flush=True)
                    if args.fetch_wait_ms > 0:
                        r = measure_fetch(broker, args.fetch_wait_ms, args.seconds)
                        res.setdefault("empty fetch", []).append(r)
                        print(f"[{rev.label} r{rep}] empty fetch ({args.fetch_wait_ms} ms wait): {r['requests']} "
                              f"rounds, broker {r['cpu_s']:.2f} CPU s -> {r['us_per_request']:.1f} us/round",
                              flush=True)
                finally:
                    broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    labels = list(results)
    print(f"\nbroker CPU per request, best of {args.repeats} (us); 100 B records at {args.rate:.0f}/s, linger.ms=0, "
          f"1 partition; empty Fetch with fetch.wait.max.ms={args.fetch_wait_ms}; {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f}")
    width = max(14, *(len(x) + 2 for x in labels))
    head = f"{'figure':<34}" + "".join(f"{x:>{width}}" for x in labels)
    if len(labels) > 1:
        head += f"{'after/before':>14}"
    print(head)
    for key in results[labels[0]]:
        rows = [("us/request", "us_per_request"), ("us/request less idle", "us_per_request_less_idle"),
                ("p50 ms", "p50_ms"), ("p99 ms", "p99_ms")] if key.startswith("produce") else [
                ("us/round", "us_per_request")]
        for name, field in rows:
            vals = []
            for x in labels:
                runs = results[x].get(key, [])
                best = min(runs, key=lambda r: r["us_per_request"]) if runs else None
                vals.append(best.get(field) if best else None)
            line = f"{key + ' ' + name:<34}" + "".join(
                f"{v:>{width}.{3 if 'ms' in name else 1}f}" if isinstance(v, float) else f"{'-':>{width}}"
                for v in vals)
            if len(vals) > 1 and all(isinstance(v, float) and v for v in (vals[0], vals[-1])) and "us" in name:
                line += f"{vals[-1] / vals[0]:>14.2f}"
            print(line)
    if args.profile is not None:
        for f in sorted(args.profile.glob("produce-acks*.txt")):
            print(f"\npy-spy samples by stage, {f.name} ({labels[-1]}):")
            for stage, share in breakdown(f):
                print(f"  {stage:<28} {share * 100:5.1f}%")


if __name__ == "__main__":
    main()
