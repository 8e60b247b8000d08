"""Resource bounds of issue 24, before/after side by side: quota state per client id, decompression in flight.

Two parts, each against a fresh ``tidelog serve`` per revision (``--tidelog-rev A,B``, bench/tidelog_revs.py;
default: the commit before issue 24's work against the work tree):

* **quotas**: with a ``<default>`` client-id quota (``request_percentage`` high enough never to throttle, so
  only the quota bookkeeping is measured), 1,000 ApiVersions requests each with a new client id, then
  ``--flood`` (12,000) more new ids, then 1,000 new ids again; and 1,000 requests of one known id before and
  after. Requests are pipelined 50 at a time on one connection. Reported: the time of each 1,000 and the
  after/before ratio, and another client's p99/max latency during the flood (ApiVersions at 100/s).
* **bombs**: 1, 4 and 8 connections each send one produce request of ``--batches`` (107) zstd bomb batches
  (~2 KB each, each inflating past the 64 MiB cap: ~330 KB on the wire, ~7.2 GB of output, the issue's
  figures) at once, while another connection sends small requests at ``--rate`` per second (Metadata and a
  1-record Produce, alternating, fixed schedule, bench/loop_stall_bench.py's client). Reported: that client's
  p50/p99/max latency while the bombs are in flight, and how long the bombs took.

Usage::

    .venv/bin/python bench/bounds_bench.py --tidelog-rev 53a1311,worktree [--only quotas|bombs]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_stall_bench import (
    API_VERSIONS,
    CAP,
    PRODUCE,
    Client,
    bomb_batch,
    create_topic,
    pct,
    produce_body,
    small_requests_during,
)
from peers import ROOT, free_port
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import encode_request
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import parse_revs, prepare

ALTER_CLIENT_QUOTAS = ApiKey.ALTER_CLIENT_QUOTAS


class Broker:
    """``tidelog serve`` of one revision (its sources first on PYTHONPATH), metrics off, WARNING logs."""

    def __init__(self, src: Path, work: Path) -> None:
        self.port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.log_path = work / f"broker-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--data-dir", str(work / f"data-{self.port}"), "--log-level", "WARNING",
             "--override", "tidelog.metrics.listener=off"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=work)
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
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


# --------------------------------------------------------------------------------------------- quotas


def _api_versions_burst(c: Client, ids: list[str], window: int = 50) -> float:
    """ApiVersions v3 with each client id in ``ids``, ``window`` in flight at a time; seconds taken."""
    body = {"client_software_name": "b", "client_software_version": "1"}
    t0 = time.perf_counter()
    for start in range(0, len(ids), window):
        chunk = ids[start:start + window]
        frames = []
        for cid in chunk:
            c.cid += 1
            frames.append(encode_request(API_VERSIONS, 3, c.cid, cid, body))
        c.sock.sendall(b"".join(frames))
        for _ in chunk:
            r = c.recv(API_VERSIONS, 3)
            assert r["error_code"] == 0, r
    return time.perf_counter() - t0


def run_quotas(src: Path, work: Path, args: argparse.Namespace) -> dict[str, float]:
    broker = Broker(src, work)
    try:
        c = Client(broker.port)
        r = c.request(ALTER_CLIENT_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": None}],
            "ops": [{"key": "request_percentage", "value": 1e9, "remove": False}]}], "validate_only": False})
        assert r["entries"][0]["error_code"] == 0, r
        out = {
            "same id x1000 before": _api_versions_burst(c, ["known"] * 1000),
            "new ids x1000 before": _api_versions_burst(c, [f"a-{i}" for i in range(1000)]),
        }
        # during the flood, another client (its own id, its own connection) at 100 requests/s
        lat: list[float] = []
        stop = threading.Event()

        def other() -> None:
            o = Client(broker.port)
            body = {"client_software_name": "b", "client_software_version": "1"}
            while not stop.wait(0.01):
                t0 = time.perf_counter()
                o.request(API_VERSIONS, 3, body)
                lat.append((time.perf_counter() - t0) * 1000)
            o.close()

        th = threading.Thread(target=other)
        th.start()
        try:
            out["flood s"] = _api_versions_burst(c, [f"flood-{i}" for i in range(args.flood)])
        finally:
            stop.set()
            th.join()
        out["other client p99 ms"] = pct(lat, 99)
        out["other client max ms"] = max(lat) if lat else float("nan")
        out["new ids x1000 after"] = _api_versions_burst(c, [f"b-{i}" for i in range(1000)])
        out["same id x1000 after"] = _api_versions_burst(c, ["known"] * 1000)
        c.close()
        return out
    finally:
        broker.stop()


# --------------------------------------------------------------------------------------------- bombs


def run_bombs(src: Path, work: Path, args: argparse.Namespace, bomb: bytes) -> dict[str, dict[str, Any]]:
    broker = Broker(src, work)
    out: dict[str, dict[str, Any]] = {}
    try:
        admin = Client(broker.port)
        create_topic(admin, "small", 1)
        create_topic(admin, "bombs", args.batches)
        body = produce_body("bombs", [bomb] * args.batches)
        for n in args.concurrency:
            codes: set[int] = set()

            def bombs(_c: Client, n: int = n, codes: set[int] = codes) -> None:
                clients = [Client(broker.port, timeout=900) for _ in range(n)]
                for c in clients:
                    c.send(PRODUCE, 9, body)

                def read(c: Client) -> None:
                    try:
                        resp = c.recv(PRODUCE, 9)
                        for p in resp["responses"][0]["partition_responses"]:
                            codes.add(p["error_code"])
                    except OSError as exc:  # reported in the table (the broker closed the connection)
                        codes.add(f"{type(exc).__name__}")  # type: ignore[arg-type]
                    c.close()

                threads = [threading.Thread(target=read, args=(c,)) for c in clients]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()

            lat, secs = small_requests_during(broker.port, bombs, rate=args.rate)
            out[f"{n} bomb(s)"] = {"lat": lat, "heavy": secs, "codes": codes}
        admin.close()
    finally:
        if broker.proc.poll() is not None:
            print(f"broker ({src}) exited with {broker.proc.returncode} during the bombs", file=sys.stderr)
        broker.stop()
        text = broker.log_path.read_text(errors="replace")
        if "Traceback" in text or "ERROR" in text:
            print(f"broker log ({src}):\n{text[-3000:]}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_rev_argument(ap, default="53a1311,worktree", what="Default: 53a1311 (before issue 24) against the work tree")
    ap.add_argument("--only", default="quotas,bombs", help="parts: quotas, bombs")
    ap.add_argument("--flood", type=int, default=12_000, help="new client ids between the two measurements")
    ap.add_argument("--batches", type=int, default=107, help="zstd bomb batches per bomb request")
    ap.add_argument("--concurrency", default="1,4,8", help="bomb requests at once, per scenario")
    ap.add_argument("--rate", type=float, default=200.0, help="the other client's small requests per second")
    args = ap.parse_args()
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    bomb = bomb_batch(4, CAP + 1)
    work = Path(tempfile.mkdtemp(prefix="bounds-bench-"))
    quotas: dict[str, dict[str, float]] = {}
    bombs: dict[str, dict[str, dict[str, Any]]] = {}
    labels: list[str] = []
    try:
        for rev in prepare(parse_revs(args.tidelog_rev), work):
            labels.append(rev.label)
            if "quotas" in args.only:
                print(f"[{rev.label}] quotas ...", file=sys.stderr, flush=True)
                quotas[rev.label] = run_quotas(rev.src, work, args)
            if "bombs" in args.only:
                print(f"[{rev.label}] bombs ...", file=sys.stderr, flush=True)
                bombs[rev.label] = run_bombs(rev.src, work, args, bomb)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    width = max(22, *(len(x) + 2 for x in labels))
    print(f"\n{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the end")
    if quotas:
        print(f"\nquotas: <default> client-id quota; ApiVersions, 50 in flight; {args.flood} new ids in between "
              "(seconds)")
        print(f"{'measure':<24}" + "".join(f"{x:>{width}}" for x in labels))
        for key in quotas[labels[0]]:
            print(f"{key:<24}" + "".join(f"{quotas[x][key]:>{width}.3f}" for x in labels))
        print(f"{'new ids after/before':<24}" + "".join(
            f"{quotas[x]['new ids x1000 after'] / quotas[x]['new ids x1000 before']:>{width}.2f}" for x in labels))
    if bombs:
        print(f"\nbombs: {args.batches} zstd batches per request ({len(bomb) * args.batches / 1024:.0f} KiB, "
              f"{args.batches * (CAP + 1) / 1e9:.1f} GB of output); another client at {args.rate:.0f}/s")
        print(f"{'scenario':<14} {'metric':<18}" + "".join(f"{x:>{width}}" for x in labels))
        for scenario in bombs[labels[0]]:
            rows = [
                ("small p50 ms", lambda r: f"{pct(r['lat'], 50):.2f}"),
                ("small p99 ms", lambda r: f"{pct(r['lat'], 99):.2f}"),
                ("small max ms", lambda r: f"{max(r['lat']) if r['lat'] else float('nan'):.1f}"),
                ("small answered", lambda r: f"{len(r['lat'])}"),
                ("bombs took s", lambda r: f"{r['heavy']:.2f}"),
                ("bomb codes", lambda r: ",".join(sorted(str(c) for c in r["codes"]))),
            ]
            for metric, fmt in rows:
                print(f"{scenario:<14} {metric:<18}" + "".join(f"{fmt(bombs[x][scenario]):>{width}}"
                                                              for x in labels))


if __name__ == "__main__":
    main()
