"""The web console on large topics (issue 28): search of a 1 M (``--records 10000000`` for 10 M) record partition
by a header value, and page loads against a cluster of 1,000 partitions.

One ``tidelog serve`` (a subprocess on 127.0.0.1, its own data dir) and the console's Starlette app served by
uvicorn in this process (as ``tidelog console`` serves it). Printed side by side:

* search: the console's server-side job (scan, match by a header substring and by a filter expression, progress
  count, cancellable) against a bare confluent-kafka
  consumer reading the same partition without matching (the floor any console pays), records/s and the ratio;
  the console process's peak RSS growth during the search (the job keeps at most ``max_results`` matches, so
  memory is flat in the partition's size); the time from the cancel to the job's end;
* pages: ``/api/topics``, ``/api/overview`` and ``/api/groups`` over 1,000 partitions (100 topics of 10), against
  the issue's 300 ms target, side by side without the page cache (``cache_ttl=0``: every load asks the cluster, as
  before the cache) and with it (5 s, console/cache.py): per page the median and p95 of ``--rounds`` loads spaced
  ``--interval`` s apart (the page refreshes itself every 5 s; a spacing beyond the TTL makes every load a refresh
  ahead), and the "cold" load just after a write of the console (the cache invalidated, so it fetches); ``--load N``
  runs N busy-looping processes during the page rounds (a busy machine).

Usage: ``.venv/bin/python bench/console_bench.py [--records 1000000] [--skip-pages] [--pages-only] [--load 2]``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "console"))
from consolesupport import start_console


def start_broker(work: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir",
           str(work / "data"), "--override", "tidelog.metrics.listener=127.0.0.1:0", "--override",
           "offsets.topic.num.partitions=1"]
    log = work / "broker.log"
    sink = open(log, "w")  # noqa: SIM115 - the broker's output, open for its lifetime
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"broker started .*listener=PLAINTEXT://[^ ]*:(\d+)", log.read_text())
        if m:
            return proc, f"127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"broker did not start:\n{log.read_text()[-3000:]}")


def fill(bootstrap: str, topic: str, n: int, needle: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000, "compression.type": "lz4"})
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"k%d" % i, value=b'{"n": %d, "pad": "%s"}' % (i, b"x" * 40),
                          headers=[("trace", b"needle" if i == needle else b"t-%d" % i)])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(600) == 0
    return time.monotonic() - t0


def bare_scan(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    seen, t0 = 0, time.monotonic()
    while seen < n:
        for m in c.consume(2000, 0.2):
            if m.error() is None:
                seen += 1
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise SystemExit(str(m.error()))
    c.close()
    return time.monotonic() - t0


def rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def search(client: httpx.Client, h: dict[str, str], topic: str, **how: str) -> tuple[float, dict, float]:
    samples: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            samples.append(current_rss_mib())
            stop.wait(0.05)

    base = current_rss_mib()
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    t0 = time.monotonic()
    job = client.post("/api/search", json={"topic": topic, "partition": 0, **how}, headers=h).json()
    while True:
        s = client.get(f"/api/search/{job['id']}", params={"since": 0}).json()
        if s["state"] != "running":
            break
        time.sleep(0.1)
    took = time.monotonic() - t0
    stop.set()
    w.join()
    return took, s, max(samples, default=base) - base


def cancel_latency(client: httpx.Client, h: dict[str, str], topic: str) -> tuple[float, int]:
    job = client.post("/api/search", json={"topic": topic, "text": "nothing matches this"}, headers=h).json()
    while client.get(f"/api/search/{job['id']}").json()["scanned"] < 10000:
        time.sleep(0.05)
    t0 = time.monotonic()
    client.post(f"/api/search/{job['id']}/cancel", headers=h)
    while (s := client.get(f"/api/search/{job['id']}").json())["state"] == "running":
        time.sleep(0.01)
    return time.monotonic() - t0, s["scanned"]


def page_times(client: httpx.Client, path: str, rounds: int) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        t0 = time.monotonic()
        r = client.get(path, timeout=60)
        times.append(time.monotonic() - t0)
        assert r.status_code == 200, r.text
    times.sort()
    return statistics.median(times) * 1000, times[int(0.95 * (len(times) - 1))] * 1000


def search_part(bootstrap: str, admin: AdminClient, records: int, rc: Any) -> None:
    admin.create_topics([NewTopic("big", 1)])["big"].result(30)
    needle = records * 2 // 3
    took = fill(bootstrap, "big", records, needle)
    print(f"filled big-0 with {records:,} records in {took:.1f}s")
    client = httpx.Client(base_url=rc.url, timeout=60)
    h = {"X-CSRF-Token": client.get("/api/session").json()["csrf"]}
    bare = bare_scan(bootstrap, "big", records)
    took, s, rss = search(client, h, "big", field="header", header="trace", text="needle")
    assert s["state"] == "done" and s["scanned"] == records and s["matched"] == 1, s
    took_x, sx, _ = search(client, h, "big", field="expression",
                           expression='headers["trace"] == "needle" and json["n"] > 0')
    assert sx["state"] == "done" and sx["matched"] == 1, sx
    print(f"\n{'search of ' + format(records, ',') + ' records':<44}{'seconds':>10}{'records/s':>14}")
    print(f"{'bare consumer, no matching (floor)':<44}{bare:>10.2f}{records / bare:>14,.0f}")
    print(f"{'console job by header value':<44}{took:>10.2f}{records / took:>14,.0f}")
    print(f"{'console job by filter expression':<44}{took_x:>10.2f}{records / took_x:>14,.0f}")
    print(f"ratio console / bare: {took / bare:.2f}x the time (expression: {took_x / bare:.2f}x); "
          f"console RSS growth during the search "
          f"{rss:.1f} MiB (peak RSS of this process {rss_peak_mib():.0f} MiB)")
    lat, scanned = cancel_latency(client, h, "big")
    print(f"cancel: the job ended {lat * 1000:.0f} ms after the cancel, at {scanned:,} records scanned")


def cold_times(client: httpx.Client, console: Any, path: str, rounds: int) -> float:
    """The median load just after the console's own write (the cache dropped): what such a load costs."""
    times = []
    for _ in range(rounds):
        console.cache.invalidate()
        t0 = time.monotonic()
        assert client.get(path, timeout=60).status_code == 200
        times.append(time.monotonic() - t0)
    return statistics.median(times) * 1000


def spaced_times(clients: list[httpx.Client], path: str, rounds: int,
                 interval: float) -> list[tuple[float, float]]:
    """Median and p95 of each client's loads of ``path``, interleaved (one load of each per round) so that a
    machine whose load changes during the run weighs on both sides alike."""
    times: list[list[float]] = [[] for _ in clients]
    for _ in range(rounds):
        for i, client in enumerate(clients):
            t0 = time.monotonic()
            r = client.get(path, timeout=60)
            times[i].append(time.monotonic() - t0)
            assert r.status_code == 200, r.text
        time.sleep(interval)  # the page's own refresh cadence, not a synchronisation
    out = []
    for ts in times:
        ts.sort()
        out.append((statistics.median(ts) * 1000, ts[int(0.95 * (len(ts) - 1))] * 1000))
    return out


def pages(bootstrap: str, rounds: int, interval: float, load: int) -> None:
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        print(f"\n{'page, 1,000 partitions':<24}{'no cache: median':>17}{'p95':>7}{'cache: median':>15}{'p95':>7}"
              f"{'cold':>7}{'ratio':>8}   (ms; target 300; load {load}, loadavg {os.getloadavg()[0]:.1f})")
        consoles = {ttl: start_console(bootstrap, cache_ttl=ttl) for ttl in (0.0, 5.0)}
        try:
            clients = {ttl: httpx.Client(base_url=rc.url, timeout=60) for ttl, rc in consoles.items()}
            for cl in clients.values():
                cl.get("/api/session")
            for path in ("/api/topics", "/api/overview", "/api/groups"):
                off, on = spaced_times([clients[0.0], clients[5.0]], path, rounds, interval)
                if path == "/api/groups":  # not cached: both sides ask the cluster (the machine's spread)
                    print(f"{path:<24}{off[0]:>17.0f}{off[1]:>7.0f}{on[0]:>15.0f}{on[1]:>7.0f}{'':>7}"
                          f"{'(not cached)':>15}")
                    continue
                cold = cold_times(clients[5.0], consoles[5.0].console, path, max(3, rounds // 4))
                print(f"{path:<24}{off[0]:>17.0f}{off[1]:>7.0f}{on[0]:>15.0f}{on[1]:>7.0f}{cold:>7.0f}"
                      f"{off[0] / max(on[0], 0.001):>7.0f}x")
        finally:
            for rc in consoles.values():
                rc.stop()
    finally:
        for b in burners:
            b.kill()
            b.wait()
    print(f"(loadavg at the end {os.getloadavg()[0]:.1f}; cold: the median load just after a write of the console)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--skip-pages", action="store_true")
    ap.add_argument("--pages-only", action="store_true", help="Only the page loads (no 1 M-record search).")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--interval", type=float, default=1.0, help="Seconds between two page loads.")
    ap.add_argument("--load", type=int, default=0, help="Busy-looping processes during the page rounds.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="console-bench-"))
    broker, bootstrap = start_broker(work)
    rc = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        if not args.pages_only:
            rc = start_console(bootstrap)
            search_part(bootstrap, admin, args.records, rc)
        if not args.skip_pages:
            for i in range(100):
                admin.create_topics([NewTopic(f"p{i:03d}", 10)])[f"p{i:03d}"].result(60)
            pages(bootstrap, args.rounds, args.interval, args.load)
    finally:
        if rc is not None:
            rc.stop()
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
