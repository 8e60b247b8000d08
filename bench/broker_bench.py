"""Broker benchmark: tidelog side by side with a Kafka-compatible peer, same native client load.

    .venv/bin/python bench/broker_bench.py [--quick] [--brokers tidelog,tansu] [--partitions 1,3]
                                           [--loadgen rdkafka|java]

For every broker, one after the other, each on its own port with a fresh data dir:
  * produce throughput, acks=1 and acks=-1, 100 B and 1 KiB messages (fixed count, bounded time)
  * consume throughput of what was just produced (from the beginning, all partitions)
  * produce latency p50/p99 at a fixed moderate rate (default 5000 msg/s)
then prints: metric | broker A | broker B | ratio, plus the CPU seconds the broker and the load generator
used (so a load generator that saturates itself shows up), and checks tidelog's `.log` segment files.

The load generator is native: librdkafka's rdkafka_performance (built by bench/setup.sh from Debian's
source package) or, with --loadgen java, bench/loadgen/LoadGen.java on the kafka-clients jar.
Everything talks to 127.0.0.1 only and every child process is bounded by a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import BROKERS, ROOT, WORK, Tidelog, check_segments, free_port
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import parse_revs, prepare

SIZES = (100, 1024)
ACKS = ("1", "-1")
#: every acks setting a cell may use: "idem" is acks=-1 with enable.idempotence=true (the default of modern clients)
ACKS_CHOICES = ("1", "-1", "idem")


def _acks(acks: str) -> str:
    return "-1" if acks == "idem" else acks


def _idempotence(acks: str) -> str:
    return "true" if acks == "idem" else "false"


# --------------------------------------------------------------------------------------------------------
# child processes with a time limit and their CPU use


@dataclass
class Run:
    rc: int
    out: str
    err: str
    wall_s: float
    cpu_s: float
    timed_out: bool


def run_bounded(cmd: list[str], timeout: float, grace: float = 20.0) -> Run:
    """Run cmd; after `timeout` send SIGINT (the load generators then print their summary), after
    `grace` more seconds SIGKILL. Returns output and the child's CPU time (from wait4's rusage)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = threading.Event()

        def interrupt() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

        def kill() -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        t1 = threading.Timer(timeout, interrupt)
        t2 = threading.Timer(timeout + grace, kill)
        t1.start()
        t2.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        except BaseException:  # e.g. Ctrl-C: never leave the load generator behind
            kill()
            proc.wait(10)
            raise
        finally:
            t1.cancel()
            t2.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode(errors="replace")
        err = fe.read().decode(errors="replace")
    return Run(proc.returncode, out, err, wall, ru.ru_utime + ru.ru_stime, timed_out.is_set())


# --------------------------------------------------------------------------------------------------------
# load generators: produce(...) and consume(...) return a flat dict


@dataclass
class Result:
    msgs: int = 0
    msgs_per_s: float = 0.0
    mb_per_s: float = 0.0
    seconds: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    loadgen_cpu_s: float = 0.0
    broker_cpu_s: float = 0.0
    wall_s: float = 0.0
    note: str = ""
    extra: dict = field(default_factory=dict)


class RdkafkaPerf:
    name = "rdkafka_performance + latency_producer (librdkafka, C)"

    def __init__(self, binary: Path, latency_binary: Path) -> None:
        self.binary = binary
        self.latency_binary = latency_binary

    def produce(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        size: int,
        acks: str,
        count: int,
        timeout: float,
        rate: float = 0.0,
        linger_ms: int = 5,
        batch_size: int = 65536,
    ) -> tuple[Result, Run]:
        cmd = [
            str(self.binary),
            "-P",
            "-t",
            topic,
            "-b",
            bootstrap,
            "-s",
            str(size),
            "-a",
            _acks(acks),
            "-c",
            str(count),
            "-i",
            "1000",
            "-X",
            f"linger.ms={linger_ms}",
            "-X",
            f"batch.size={batch_size}",
            "-X",
            f"enable.idempotence={_idempotence(acks)}",
            "-X",
            "queue.buffering.max.kbytes=65536",
            "-X",
            "message.timeout.ms=60000",
        ]
        if partitions == 1:
            cmd += ["-p", "0"]
        run = run_bounded(cmd, timeout)
        r = Result(loadgen_cpu_s=run.cpu_s, wall_s=run.wall_s)
        # it prints a running summary every second; the last one is the final tally
        ms = re.findall(
            r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset (-?\d+), (\d+) failed\) "
            r"in (\d+)ms",
            run.out,
        )
        if not ms:
            r.note = "no summary: " + (run.out + run.err).strip()[-300:]
            return r, run
        _, _, delivered, _, failed, ms_total = ms[-1]
        r.msgs, r.errors, r.seconds = int(delivered), int(failed), int(ms_total) / 1000
        r.msgs_per_s = r.msgs / r.seconds if r.seconds else 0.0
        r.mb_per_s = r.msgs * size / r.seconds / 1e6 if r.seconds else 0.0
        if run.timed_out:
            r.note = f"stopped after {timeout:.0f}s"
        if r.errors:
            r.note += f" {r.errors} failed deliveries"
        return r, run

    def latency(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        size: int,
        acks: str,
        rate: float,
        seconds: float,
        timeout: float,
    ) -> tuple[Result, Run]:
        cmd = [
            str(self.latency_binary),
            "-b",
            bootstrap,
            "-t",
            topic,
            "-s",
            str(size),
            "-a",
            _acks(acks),
            "-r",
            str(rate),
            "-d",
            str(seconds),
            "-w",
            "1",
            "-X",
            "linger.ms=0",
            "-X",
            f"enable.idempotence={_idempotence(acks)}",
        ]
        if partitions == 1:
            cmd += ["-p", "0"]
        run = run_bounded(cmd, timeout)
        r = Result(loadgen_cpu_s=run.cpu_s, wall_s=run.wall_s)
        lines = [ln for ln in run.out.splitlines() if ln.startswith("{")]
        if not lines:
            r.note = "no result: " + (run.out + run.err).strip()[-300:]
            return r, run
        d = json.loads(lines[-1])
        r.msgs, r.errors, r.seconds = d["delivered"], d["failed"], d["seconds"]
        r.msgs_per_s = r.msgs / r.seconds if r.seconds else 0.0
        r.mb_per_s = r.msgs * size / r.seconds / 1e6 if r.seconds else 0.0
        r.p50_ms, r.p99_ms = d["p50_ms"], d["p99_ms"]
        r.extra = {k: d[k] for k in ("samples", "p90_ms", "p999_ms", "max_ms", "sent")}
        if d["failed"]:
            r.note = f"{d['failed']} failed: {d['first_error']}"
        return r, run

    def consume(
        self, bootstrap: str, topic: str, partitions: int, count: int, timeout: float
    ) -> tuple[Result, Run]:
        cmd = [
            str(self.binary),
            "-C",
            "-t",
            topic,
            "-b",
            bootstrap,
            "-o",
            "beginning",
            "-c",
            str(count),
            "-i",
            "1000",
            "-X",
            "fetch.max.bytes=52428800",
            "-X",
            "queued.max.messages.kbytes=262144",
        ]
        for p in range(partitions):
            cmd += ["-p", str(p)]
        run = run_bounded(cmd, timeout)
        r = Result(loadgen_cpu_s=run.cpu_s, wall_s=run.wall_s)
        ms = re.findall(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms", run.out)
        if not ms:
            r.note = "no summary: " + (run.out + run.err).strip()[-300:]
            return r, run
        n, b, t = (int(x) for x in ms[-1])
        r.msgs, r.seconds = n, t / 1000
        r.msgs_per_s = n / r.seconds if r.seconds else 0.0
        r.mb_per_s = b / r.seconds / 1e6 if r.seconds else 0.0
        if n < count:
            r.note = f"got {n} of {count}"
        return r, run


class JavaLoadGen:
    name = "LoadGen.java (kafka-clients)"

    def __init__(self, jars: Path) -> None:
        classes = WORK / "classes"
        classes.mkdir(parents=True, exist_ok=True)
        cp = ":".join(str(p) for p in sorted(jars.glob("*.jar")))
        src = ROOT / "bench" / "loadgen" / "LoadGen.java"
        if not (classes / "LoadGen.class").exists() or (
            (classes / "LoadGen.class").stat().st_mtime < src.stat().st_mtime
        ):
            subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(src)], check=True, timeout=300)
        self.cp = cp + ":" + str(classes)

    def _java(self, args: list[str], timeout: float) -> tuple[dict, Run]:
        cmd = ["java", "-Xms512m", "-Xmx2g", "-XX:+UseParallelGC", "-cp", self.cp, "LoadGen", *args]
        run = run_bounded(cmd, timeout)
        lines = [ln for ln in run.out.splitlines() if ln.startswith("{")]
        return (json.loads(lines[-1]) if lines else {}), run

    def produce(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        size: int,
        acks: str,
        count: int,
        timeout: float,
        rate: float = 0.0,
        linger_ms: int = 5,
    ) -> tuple[Result, Run]:
        args = [
            "produce",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--size",
            str(size),
            "--acks",
            _acks(acks),
            "--count",
            str(count),
            "--duration",
            str(max(1.0, timeout - 10)),
            "--linger-ms",
            str(linger_ms),
            "--idempotence",
            _idempotence(acks),
        ]
        if rate:
            args += ["--rate", str(rate)]
        d, run = self._java(args, timeout)
        r = Result(loadgen_cpu_s=run.cpu_s, wall_s=run.wall_s)
        if not d:
            r.note = "no result: " + (run.out + run.err).strip()[-300:]
            return r, run
        r.msgs, r.errors, r.seconds = d["acked"], d["errors"], d["seconds"]
        r.msgs_per_s, r.mb_per_s = d["msgs_per_s"], d["mb_per_s"]
        if rate:
            r.p50_ms, r.p99_ms = d["p50_ms"], d["p99_ms"]
        if d["sent"] < count:
            r.note = f"time limit: sent {d['sent']} of {count}"
        return r, run

    def latency(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        size: int,
        acks: str,
        rate: float,
        seconds: float,
        timeout: float,
    ) -> tuple[Result, Run]:
        return self.produce(
            bootstrap, topic, partitions, size, acks, int(rate * seconds), timeout, rate=rate, linger_ms=0
        )

    def consume(
        self, bootstrap: str, topic: str, partitions: int, count: int, timeout: float
    ) -> tuple[Result, Run]:
        d, run = self._java(
            [
                "consume",
                "--bootstrap",
                bootstrap,
                "--topic",
                topic,
                "--count",
                str(count),
                "--timeout",
                str(max(1.0, timeout - 10)),
            ],
            timeout,
        )
        r = Result(loadgen_cpu_s=run.cpu_s, wall_s=run.wall_s)
        if not d:
            r.note = "no result: " + (run.out + run.err).strip()[-300:]
            return r, run
        r.msgs, r.seconds, r.msgs_per_s, r.mb_per_s = (
            d["received"],
            d["seconds"],
            d["msgs_per_s"],
            d["mb_per_s"],
        )
        if r.msgs < count:
            r.note = f"got {r.msgs} of {count}"
        return r, run


# --------------------------------------------------------------------------------------------------------
# one broker's full run


@dataclass
class Plan:
    counts: dict[int, int]  # message size -> messages per produce run
    timeout: float  # per load-generator run
    latency_rate: float
    latency_seconds: float
    partitions: list[int]
    repeats: int = 1
    latency_repeats: int = 1
    sizes: tuple[int, ...] = SIZES
    kinds: tuple[str, ...] = ("throughput", "latency")
    acks: tuple[str, ...] = ACKS


def machine_busy_seconds() -> float:
    """CPU seconds spent busy by the whole machine (all processes), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass
class Cell:
    kind: str  # "throughput" (produce, then consume what was produced) or "latency"
    parts: int
    size: int
    acks: str

    @property
    def key(self) -> str:
        return f"p{self.parts} {self.size}B acks={self.acks}"

    @property
    def slug(self) -> str:
        return f"p{self.parts}-{self.size}B-acks{self.acks}-{self.kind}"


def run_cell(name: str, cell: Cell, rep: int, loadgen, plan: Plan, run_dir: Path, log, keep: bool) -> dict:
    """Start a fresh broker (empty data dir), run one cell, stop it. Returns {metric key: Result dict}."""
    cls = BROKERS[name]
    cell_dir = run_dir / name / f"{cell.slug}-r{rep}"
    out: dict = {"results": {}, "segments": None, "error": None}
    broker = cls(port=free_port(), data_dir=cell_dir / "data", log_path=cell_dir / "broker.log")
    topic = f"bench-{cell.slug.replace('=', '')}"

    def measured(fn):
        c0, m0 = broker.cpu_seconds(), machine_busy_seconds()
        res, _ = fn()
        res.broker_cpu_s = broker.cpu_seconds() - c0
        # CPU the rest of the machine (other users, other test suites) burned meanwhile
        res.extra["other_cpu_s"] = max(
            0.0, machine_busy_seconds() - m0 - res.broker_cpu_s - res.loadgen_cpu_s
        )
        return res

    def show(what: str, r: Result) -> str:
        lat = f" p50 {r.p50_ms} ms p99 {r.p99_ms} ms" if r.p50_ms is not None else ""
        return (
            f"[{name} r{rep}] {what} {cell.key}: {r.msgs_per_s:,.0f} msg/s {r.mb_per_s:.1f} MB/s{lat} "
            f"({r.msgs} msgs in {r.seconds:.1f}s; cpu s broker {r.broker_cpu_s:.1f} loadgen "
            f"{r.loadgen_cpu_s:.1f} other {r.extra['other_cpu_s']:.1f}) {r.note}"
        )

    try:
        broker.start()
        broker.create_topic(topic, cell.parts)
        if cell.kind == "throughput":
            res = measured(
                lambda: loadgen.produce(
                    broker.bootstrap,
                    topic,
                    cell.parts,
                    cell.size,
                    cell.acks,
                    plan.counts[cell.size],
                    plan.timeout,
                )
            )
            out["results"][f"produce {cell.key}"] = asdict(res)
            log(show("produce", res))
            if res.msgs > 0:
                cres = measured(
                    lambda: loadgen.consume(broker.bootstrap, topic, cell.parts, res.msgs, plan.timeout)
                )
                out["results"][f"consume {cell.key}"] = asdict(cres)
                log(show("consume", cres))
        else:
            res = measured(
                lambda: loadgen.latency(
                    broker.bootstrap,
                    topic,
                    cell.parts,
                    cell.size,
                    cell.acks,
                    plan.latency_rate,
                    plan.latency_seconds,
                    plan.latency_seconds + 45,
                )
            )
            out["results"][f"latency {cell.key}"] = asdict(res)
            log(show(f"latency @{plan.latency_rate:.0f}/s", res))
        out["rss_mib"] = round(broker.rss_mib(), 1)
    except Exception as exc:
        out["error"] = f"{cell.slug} r{rep}: {type(exc).__name__}: {exc}"
        log(f"[{name} r{rep}] {cell.slug} FAILED: {type(exc).__name__}: {exc}")
    finally:
        broker.stop()
        if cls.writes_kafka_segments:
            seg = check_segments(cell_dir / "data")
            out["segments"] = {"cell": f"{cell.slug}-r{rep}", **asdict(seg)}
            if seg.problems or not seg.bytes:
                log(
                    f"[{name} r{rep}] segment check: {seg.files} files, {seg.bytes:,} bytes, aligned "
                    f"{seg.aligned} {seg.problems[:3]}"
                )
        if not keep:
            shutil.rmtree(cell_dir / "data", ignore_errors=True)
    return out


def pick(results: list[dict], key: str) -> dict | None:
    """Throughput: the best of the repeats (the machine is shared, so interference only ever lowers a
    number); latency: the repeat with the median p99."""
    rs = [r for r in results if r["msgs"] > 0]
    if not rs:
        return results[0] if results else None
    if key.startswith("latency"):
        rs.sort(key=lambda r: r["p99_ms"] if r["p99_ms"] is not None else float("inf"))
        return rs[(len(rs) - 1) // 2]
    return max(rs, key=lambda r: r["msgs_per_s"])


def bench_all(names: list[str], loadgen, plan: Plan, run_dir: Path, log, keep: bool) -> dict[str, dict]:
    """Cells are interleaved across brokers (A B, then B A on the next repeat) so that background load on
    the shared machine hits both sides alike."""
    cells = [
        Cell(kind, parts, size, acks)
        for parts in plan.partitions
        for kind in plan.kinds
        for size in plan.sizes
        for acks in plan.acks
    ]
    raw: dict[str, dict[str, list[dict]]] = {n: {} for n in names}
    info: dict[str, dict] = {
        n: {"storage": BROKERS[n].storage, "segments": [], "errors": [], "rss_mib_max": 0.0} for n in names
    }
    for cell in cells:
        reps = plan.repeats if cell.kind == "throughput" else plan.latency_repeats
        for rep in range(reps):
            order = names if rep % 2 == 0 else list(reversed(names))
            for n in order:
                out = run_cell(n, cell, rep, loadgen, plan, run_dir, log, keep)
                for k, v in out["results"].items():
                    raw[n].setdefault(k, []).append(v)
                if out["segments"] is not None:
                    info[n]["segments"].append(out["segments"])
                if out["error"]:
                    info[n]["errors"].append(out["error"])
                info[n]["rss_mib_max"] = max(info[n]["rss_mib_max"], out.get("rss_mib", 0.0))
    for n in names:
        info[n]["runs"] = raw[n]
        info[n]["results"] = {k: pick(v, k) for k, v in raw[n].items()}
    return info


# --------------------------------------------------------------------------------------------------------
# table


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.2f}"
    if unit == "MB/s":
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def table(all_info: dict[str, dict], plan: Plan) -> str:
    names = list(all_info)
    base = names[0]
    peers = names[1:]
    rows: list[list[str]] = []
    header = ["metric", *names] + [f"{base}/{p}" for p in peers] + ["cpu s broker/loadgen/other"]

    def add(label: str, key: str, field_: str, unit: str, higher_better: bool = True) -> None:
        vals = []
        for n in names:
            r = all_info[n]["results"].get(key)
            vals.append(None if r is None or (not r["msgs"] and field_ != "p99_ms") else r.get(field_))
        ratios = []
        for i in range(1, len(names)):
            a, b = vals[0], vals[i]
            if a is None or b is None or a == 0 or b == 0:
                ratios.append("-")
            else:
                ratio = a / b if higher_better else b / a
                ratios.append(f"{ratio:.2f}x")
        cpu = []
        for n in names:
            r = all_info[n]["results"].get(key)
            cpu.append(
                "-"
                if r is None
                else f"{r['broker_cpu_s']:.1f}/{r['loadgen_cpu_s']:.1f}/{r['extra'].get('other_cpu_s', 0):.1f}"
            )
        rows.append([label, *[fmt(v, unit) for v in vals], *ratios, "  ".join(cpu)])

    for parts in plan.partitions:
        for size in plan.sizes:
            for acks in plan.acks:
                key = f"p{parts} {size}B acks={acks}"
                add(f"produce msg/s  {key}", f"produce {key}", "msgs_per_s", "msg/s")
                add(f"produce MB/s   {key}", f"produce {key}", "mb_per_s", "MB/s")
        for size in plan.sizes:
            key = f"p{parts} {size}B acks=1"
            add(f"consume msg/s  p{parts} {size}B", f"consume {key}", "msgs_per_s", "msg/s")
            add(f"consume MB/s   p{parts} {size}B", f"consume {key}", "mb_per_s", "MB/s")
        for size in plan.sizes:
            for acks in plan.acks:
                key = f"p{parts} {size}B acks={acks}"
                rate = f"@{plan.latency_rate:.0f}/s"
                add(f"produce p50 ms {key} {rate}", f"latency {key}", "p50_ms", "ms", higher_better=False)
                add(f"produce p99 ms {key} {rate}", f"latency {key}", "p99_ms", "ms", higher_better=False)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths)), "-+-".join("-" * w for w in widths)]
    for r in rows:
        lines.append(
            " | ".join((c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in enumerate(zip(r, widths)))
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------


def setup(skip_rdkafka: bool) -> dict[str, str]:
    env = dict(os.environ, BENCH_SKIP_RDKAFKA="1" if skip_rdkafka else "0")
    r = subprocess.run(
        ["bash", str(ROOT / "bench" / "setup.sh")], capture_output=True, text=True, env=env, timeout=1200
    )
    if r.returncode != 0:
        raise SystemExit(f"bench/setup.sh failed:\n{r.stdout}\n{r.stderr}")
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (smaller counts, shorter latency runs)")
    ap.add_argument(
        "--brokers",
        default="tidelog,tansu",
        help="comma list, first is the one compared; choices: " + ",".join(BROKERS),
    )
    ap.add_argument("--partitions", default="1,3", help="comma list of partition counts, e.g. 1,3")
    ap.add_argument("--loadgen", choices=["rdkafka", "java"], default="rdkafka")
    ap.add_argument("--latency-rate", type=float, default=5000.0)
    ap.add_argument("--timeout", type=float, default=None, help="cap per load-generator run, seconds")
    ap.add_argument(
        "--repeats", type=int, default=None, help="throughput repeats per cell (default 3, quick 1)"
    )
    ap.add_argument("--latency-repeats", type=int, default=None, help="latency repeats per cell (default 1)")
    ap.add_argument("--sizes", default="100,1024", help="message sizes in bytes (default 100,1024)")
    ap.add_argument(
        "--only", choices=["throughput", "latency"], default=None, help="run only one kind of cell"
    )
    ap.add_argument("--acks", default="1,-1",
                    help="acks settings of the produce cells (default 1,-1); 'idem' = acks=-1 with "
                    "enable.idempotence=true")
    add_rev_argument(ap, what="Without it: HEAD alone. With several, each is a broker of its own "
                     "(tidelog@REV), the last one first, so the ratio columns are after/before")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs under bench/.work/runs/")
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.brokers.split(",") if n.strip()]
    for n in names:
        if n not in BROKERS:
            ap.error(f"unknown broker {n!r}")
    if args.quick:
        plan = Plan(
            counts={100: 500_000, 1024: 150_000},
            timeout=args.timeout or 40,
            latency_rate=args.latency_rate,
            latency_seconds=4,
            partitions=[int(x) for x in args.partitions.split(",")],
            repeats=args.repeats or 1,
            latency_repeats=args.latency_repeats or 1,
        )
    else:
        plan = Plan(
            counts={100: 5_000_000, 1024: 1_000_000},
            timeout=args.timeout or 90,
            latency_rate=args.latency_rate,
            latency_seconds=10,
            partitions=[int(x) for x in args.partitions.split(",")],
            repeats=args.repeats or 3,
            latency_repeats=args.latency_repeats or 1,
        )

    plan.sizes = tuple(int(x) for x in args.sizes.split(","))
    plan.kinds = (args.only,) if args.only else ("throughput", "latency")
    plan.acks = tuple(a.strip() for a in args.acks.split(",") if a.strip())
    for a in plan.acks:
        if a not in ACKS_CHOICES:
            ap.error(f"--acks: {a!r} is not one of {', '.join(ACKS_CHOICES)}")
    for size in plan.sizes:
        plan.counts.setdefault(size, max(1, plan.counts[100] * 100 // size))
    paths = setup(skip_rdkafka=args.loadgen != "rdkafka")
    if args.loadgen == "rdkafka":
        loadgen = RdkafkaPerf(Path(paths["RDKAFKA_PERF"]), Path(paths["LATENCY_PRODUCER"]))
    else:
        loadgen = JavaLoadGen(Path(paths["JARS"]))

    def log(msg: str) -> None:
        print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)

    skipped = {}
    for n in list(names):
        why = BROKERS[n](port=0, data_dir=Path("."), log_path=Path(".")).available()
        if why:
            skipped[n] = why
            names.remove(n)
            log(f"[{n}] skipped: {why}")
    if not names:
        log("no broker available")
        return 2

    runs = WORK / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=runs))
    log(
        f"load generator: {loadgen.name}; counts {plan.counts}; per-run cap {plan.timeout:.0f}s; "
        f"latency at {plan.latency_rate:.0f} msg/s for {plan.latency_seconds:.0f}s; cores {os.cpu_count()}"
    )
    commits: dict[str, str] = {}  # tidelog broker name -> the commit it runs ("" = the work tree)
    if "tidelog" in names:
        revisions = prepare(parse_revs(args.tidelog_rev) or ["HEAD"], run_dir / "tidelog-src")
        tidelogs = []
        for rev in reversed(revisions):  # the last (after) first: the ratio columns are after/before
            name = "tidelog" if len(revisions) == 1 else f"tidelog@{rev.rev}"
            BROKERS[name] = type("Tidelog_" + rev.rev.replace("~", "_"), (Tidelog,), {"name": name,
                                                                                       "src": str(rev.src)})
            commits[name] = rev.commit
            tidelogs.append(name)
            log(f"[{name}] benchmarking {'the work tree' if not rev.commit else 'commit ' + rev.commit[:12]} "
                f"({rev.src})")
        i = names.index("tidelog")
        names[i:i + 1] = tidelogs
    load0 = os.getloadavg()
    all_info = bench_all(names, loadgen, plan, run_dir, log, args.keep)
    load1 = os.getloadavg()

    out = {
        "plan": asdict(plan),
        "loadgen": loadgen.name,
        "skipped": skipped,
        "brokers": all_info,
        "cpu_count": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "tidelog_commits": commits,
        "loadavg_start": load0,
        "loadavg_end": load1,
    }
    (run_dir / "results.json").write_text(json.dumps(out, indent=2))

    print()
    print(
        f"tidelog broker benchmark: load generator {loadgen.name}, {os.cpu_count()} cores shared by broker and "
        f"load generator; ratio = {names[0]}/peer (latency rows: peer/{names[0]}, >1 means {names[0]} is faster)"
    )
    print(
        f"  messages per produce run {plan.counts}; throughput = best of {plan.repeats} interleaved repeat(s), "
        f"latency at {plan.latency_rate:.0f} msg/s for {plan.latency_seconds:.0f}s (linger.ms=0, first 1s "
        f"dropped), median of {plan.latency_repeats}; every cell on a freshly started broker"
    )
    print(
        f"  load average at start {load0[0]:.2f}, at end {load1[0]:.2f}; 'other' = CPU seconds used by the rest "
        f"of the machine during the run"
    )
    for n, i in all_info.items():
        extra = f", errors: {i['errors']}" if i.get("errors") else ""
        commit = "" if n not in commits else f", commit {commits[n][:12] or 'work tree'}"
        print(f"  {n}: storage {i['storage']}{commit}{extra}")
    for n, why in skipped.items():
        print(f"  {n}: skipped ({why})")
    print()
    print(table(all_info, plan))
    segments_ok = True
    for n, i in all_info.items():
        if i["segments"]:
            segs = i["segments"]
            files, size = sum(s["files"] for s in segs), sum(s["bytes"] for s in segs)
            batches, records = sum(s["batches"] for s in segs), sum(s["records"] for s in segs)
            aligned = all(s["aligned"] and not s["problems"] for s in segs)
            all_written = all(s["bytes"] > 0 for s in segs)
            ok = aligned and all_written
            segments_ok &= ok
            print(
                f"\n{n} segment files (all cells): {files} .log files, {size:,} bytes, {batches:,} v2 batches, "
                f"{records:,} records; every cell wrote bytes: {all_written}; every file ends on a batch "
                f"boundary: {aligned} -> {'OK' if ok else 'FAIL'}"
            )
            for s in segs:
                if s["problems"] or not s["bytes"]:
                    print(f"  {s['cell']}: {s['bytes']} bytes {s['problems'][:3]}")
    print(f"\nresults: {run_dir / 'results.json'}")
    return 0 if segments_ok and all(not i.get("errors") for i in all_info.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
