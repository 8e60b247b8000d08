"""Where a paced single-record Produce request's broker CPU goes: per thread, per wake-up, idle included.

    .venv/bin/python bench/paced_profile.py [--tidelog-rev REV[,REV...]] [--rate 5000] [--seconds 4]
                                            [--acks 1] [--size 100] [--repeats 2] [--idle 3]
                                            [--attach 'strace -c -f -p {pid}' | --attach 'perf stat -p {pid}']

Issue 30 goal 3 (broker CPU per paced request <= 60 us). Each run starts a fresh ``tidelog serve`` (metrics listener
off, as in ``broker_bench.py``), creates the topic, measures the idle process for ``--idle`` seconds, then sends
``latency_producer`` 100 B records at ``--rate`` per second for ``--seconds`` (``linger.ms=0``, one record per
Produce request, as broker_bench's latency cells). It prints, per revision and repeat:

* the broker's CPU per request (utime + stime of the process from /proc, over the records the producer had
  acknowledged: one record per request), also with the idle rate taken out;
* per thread (``/proc/PID/task/*/sched``): CPU and voluntary context switches (each a sleep, i.e. one wake-up) per
  request, idle and paced;
* the client's p50 / p99.

``--attach CMD`` runs CMD (``{pid}`` replaced by the broker's pid) for the paced phase only, e.g. ``strace -c -f``
for the syscalls per request or ``perf stat`` / ``perf record -g``; its output goes to stderr. Revisions
(``--tidelog-rev``, bench/tidelog_revs.py) are interleaved per repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import run_bounded
from peers import WORK, Tidelog
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import parse_revs, prepare

LATENCY_PRODUCER = WORK / "bin" / "latency_producer"


def sched_stats(path: str) -> tuple[float, int]:
    """(ms of CPU, voluntary switches) of one thread from its ``/proc/.../sched`` file."""
    with open(path) as f:
        text = f.read()
    runtime, vol = 0.0, 0
    for line in text.splitlines():
        if line.startswith("se.sum_exec_runtime"):
            runtime = float(line.split(":")[1]) / 1000.0
        elif line.startswith("nr_voluntary_switches"):
            vol = int(line.split(":")[1])
    return runtime, vol


def thread_stats(pid: int) -> dict[str, tuple[float, int]]:
    """{thread name + tid: (CPU seconds, voluntary switches)} of every thread of pid."""
    out: dict[str, tuple[float, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            runtime, vol = sched_stats(f"/proc/{pid}/task/{tid}/sched")
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        out[f"{comm}/{tid}"] = (runtime, vol)
    return out


def diff(a: dict[str, tuple[float, int]], b: dict[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
    return {k: (b[k][0] - a.get(k, (0.0, 0))[0], b[k][1] - a.get(k, (0.0, 0))[1]) for k in b}


def one_run(src: Path, run_dir: Path, tag: str, args: argparse.Namespace) -> dict:
    cls = type(f"Tidelog_{tag}", (Tidelog,), {"src": str(src)})
    cell = run_dir / tag
    broker = cls(port=0, data_dir=cell / "data", log_path=cell / "broker.log")
    from peers import free_port

    broker.port = free_port()
    broker.start()
    try:
        topic = "paced"
        broker.create_topic(topic, 1)
        assert broker.proc is not None
        pid = broker.proc.pid
        s0, c0, t0 = thread_stats(pid), broker.cpu_seconds(), time.monotonic()
        time.sleep(args.idle)
        s1, c1, t1 = thread_stats(pid), broker.cpu_seconds(), time.monotonic()
        idle_rate = (c1 - c0) / (t1 - t0)
        idle_threads = diff(s0, s1)
        attach = None
        if args.attach:
            attach = subprocess.Popen(shlex.split(args.attach.format(pid=pid)), stdout=sys.stderr,
                                      stderr=sys.stderr, start_new_session=True)
            time.sleep(1.0)
        cmd = [str(LATENCY_PRODUCER), "-b", broker.bootstrap, "-t", topic, "-s", str(args.size), "-a", args.acks,
               "-r", str(args.rate), "-d", str(args.seconds), "-w", "1", "-X", "linger.ms=0", "-X",
               "enable.idempotence=false", "-p", "0"]
        s2, c2, t2 = thread_stats(pid), broker.cpu_seconds(), time.monotonic()
        run = run_bounded(cmd, args.seconds + 60)
        s3, c3, t3 = thread_stats(pid), broker.cpu_seconds(), time.monotonic()
        if attach is not None:
            os.killpg(attach.pid, signal.SIGINT)
            attach.wait(60)
        lines = [ln for ln in run.out.splitlines() if ln.startswith("{")]
        d = json.loads(lines[-1]) if lines else {}
        n = int(d.get("sent", 0)) or 1
        cpu, wall = c3 - c2, t3 - t2
        paced = diff(s2, s3)
        return {
            "tag": tag, "requests": n, "cpu_s": cpu, "wall_s": wall, "idle_cpu_per_s": idle_rate,
            "us_per_request": cpu / n * 1e6, "us_per_request_less_idle": (cpu - idle_rate * wall) / n * 1e6,
            "p50_ms": d.get("p50_ms"), "p99_ms": d.get("p99_ms"), "p999_ms": d.get("p999_ms"),
            "max_ms": d.get("max_ms"), "loadgen_cpu_s": run.cpu_s,
            "threads_paced": {k: (v[0] / n * 1e6, v[1] / n) for k, v in paced.items()},
            "threads_idle": {k: (v[0] / args.idle * 1e3, v[1] / args.idle) for k, v in idle_threads.items()},
            "load": os.getloadavg()[0],
        }
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--acks", default="1", help="comma list (1,-1)")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--idle", type=float, default=3.0, help="seconds of idle measured before the paced phase")
    ap.add_argument("--attach", default="", help="command run against {pid} during the paced phase")
    add_rev_argument(ap, what="Without it: the work tree")
    args = ap.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("paced-%Y%m%d-%H%M%S-"), dir=WORK / "runs"))
    revs = prepare(parse_revs(args.tidelog_rev) or ["worktree"], run_dir / "src")
    rows = []
    for rep in range(args.repeats):
        for acks in args.acks.split(","):
            args_acks = argparse.Namespace(**{**vars(args), "acks": acks})
            order = revs if rep % 2 == 0 else list(reversed(revs))
            for rev in order:
                r = one_run(rev.src, run_dir, f"{rev.rev.replace('/', '_')}-a{acks}-r{rep}", args_acks)
                r["rev"], r["acks"] = rev.rev, acks
                rows.append(r)
                print(f"{rev.rev:>10} acks={acks:>2} rep {rep}: {r['us_per_request']:6.1f} us/request "
                      f"({r['us_per_request_less_idle']:6.1f} less idle {r['idle_cpu_per_s'] * 1e3:.1f} ms/s), "
                      f"{r['requests']} requests, p50 {r['p50_ms']} p99 {r['p99_ms']} p99.9 {r['p999_ms']} "
                      f"max {r['max_ms']} ms, load {r['load']:.2f}", flush=True)
                for k, (us, sw) in sorted(r["threads_paced"].items(), key=lambda kv: -kv[1][0]):
                    ims, isw = r["threads_idle"].get(k, (0.0, 0.0))
                    if us > 0.05 or ims > 0.05:
                        print(f"{'':12}{k:28} {us:6.2f} us/req {sw:5.2f} wake/req | idle {ims:6.2f} ms/s "
                              f"{isw:6.1f} wake/s")
    (run_dir / "results.json").write_text(json.dumps(rows, indent=1))
    print(f"results: {run_dir / 'results.json'}")


if __name__ == "__main__":
    main()
