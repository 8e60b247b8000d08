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
from tidelog_revs import parse_revs, prepare

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
    p = re.findall(r'"p50_ms": ([0-9.]+), .*"p99_ms": ([0-9.]+)', run.out)
    lat = re.search(r'"p50_ms":\s*([0-9.]+)', run.out), re.search(r'"p99_ms":\s*([0-9.]+)', run.out)
    del p
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
    ("produce handler", r"handlers/core\.py"),
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
    args = ap.parse_args()
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
