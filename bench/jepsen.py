"""Jepsen-style runs against a real 3-broker tidelog cluster and a real ZooKeeper, each node in its own network
namespace (root needed), real confluent-kafka clients, a seeded nemesis, and the history checker.

    .venv/bin/python bench/jepsen.py --workload queue --nemesis partition,pause,kill,clock \\
        --time-limit 60 --runs 10 --seed 1 [--acks all|1] [--unclean] [--out DIR] [--clients java,confluent-kafka]
    .venv/bin/python bench/jepsen.py --db noida --workload queue --nemesis pause,kill ...   # the peer, one node
    .venv/bin/python bench/jepsen.py --workload txn --torn --nemesis "" [--clients java4]   # torn transactions

Run ``i`` uses seed ``K + i``; its directory ``DIR/<workload>-s<seed>`` keeps ``history.jsonl``, ``report.json``
(tests/jepsen/checker.py), ``summary.json`` and ``db/`` (broker and ZooKeeper logs). The runs go one after the
other; at the end a table of runs x anomalies is printed and written to ``DIR/summary.md``: per run the ok ops,
the faults injected, the longest client wait (an op in flight > 5 s: see summary.json's ``client_waits`` for the
faults it overlapped), ``acked>end`` (the runner's own cross-check: acked offsets past a later final read's end)
and the checker's anomaly counts (G0 and G1c are allowed: Kafka orders transactions per partition only). The machinery is tests/jepsen/ (runner.py, nemesis.py, nodes.py, netspace.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "jepsen"))

import netspace
import peer
from nemesis import KINDS
from runner import Options, run


def table(rows: list[dict]) -> str:
    kinds = sorted({k for r in rows for k in r["anomalies"]})
    head = ["run", "seed", "secs", "ops ok", "faults", "max wait s", "hung calls", "acked>end", *kinds, "checker"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["name"], str(r["seed"]), f"{r['duration_s']:.0f}", str(r["ok"]), str(r["faults"]),
                 f"{r['max_wait']:.1f}", str(r.get("hung", 0)), str(r.get("beyond", 0)), *(str(r["anomalies"].get(k, 0)) for k in kinds),
                 "error" if r.get("checker_error") else ("no recovery" if r.get("recovery_failed") else
                                                         "valid" if r.get("valid") else "INVALID")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def row(name: str, s: dict) -> dict:
    ok = sum(v for k, v in s["ops"].items() if k.endswith(":ok"))
    return {"name": name, "seed": s["options"]["seed"], "duration_s": s["duration_s"], "ok": ok,
            "faults": len(s["faults"]), "max_wait": s["client_waits"]["max_s"], "anomalies": s["anomalies"],
            "checker_error": s.get("checker_error"), "valid": s.get("valid"),
            "beyond": s["acked_beyond_final_end"]["count"], "hung": len(s.get("hung_client_calls", [])),
            "recovery_failed": bool(s.get("recovery_failed")),
            "mix": [f"{f['fault']}/{(f.get('detail') or {}).get('sub')}" for f in s["faults"]]}


def aggregate(dirs: list[Path]) -> int:
    """The table of every run found under ``dirs`` (their summary.json), and totals per workload."""
    from runner import acked_beyond_final_end

    rows = []
    for f in sorted(f for d in dirs for f in d.glob("*/summary.json")):
        s = json.loads(f.read_text())
        events = [json.loads(line) for line in (f.parent / "history.jsonl").read_text().splitlines()]
        s["acked_beyond_final_end"] = {"count": len(acked_beyond_final_end(events))}  # the current rule
        rows.append(row(f.parent.name, s))
    print(table(rows))
    for w in sorted({r["name"].split("-s")[0] for r in rows}):
        mine = [r for r in rows if r["name"].startswith(w + "-")]
        print(f"{w}: {len(mine)} runs, {sum(r['duration_s'] for r in mine) / 60:.0f} min, "
              f"{sum(r['ok'] for r in mine)} ok ops, {sum(r['faults'] for r in mine)} faults, "
              f"{sum(1 for r in mine if r['valid'] and not r['beyond'])} valid, "
              f"{sum(r['hung'] for r in mine)} hung client calls")
        mix = Counter(m for r in mine for m in r.get("mix", []))
        print("  faults: " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items())))
    return 0


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["queue", "txn"], default="queue")
    ap.add_argument("--nemesis", default="partition,pause,kill", help=f"comma-separated subset of {KINDS}")
    ap.add_argument("--variants", default="", help="only these fault variants of their kind, e.g. leader-zk,zk")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds of faults per run")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--acks", choices=["all", "1"], default="all")
    ap.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable=true")
    ap.add_argument("--min-insync", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--quiet", type=float, default=10.0, help="seconds without faults before the final reads")
    ap.add_argument("--out", type=Path, default=Path("/tmp/tidelog-jepsen"))
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--db", choices=["tidelog", "noida"], default="tidelog",
                    help="noida: the peer noida-db, one node on 127.0.0.1, --nemesis pause,kill (tests/jepsen/peer.py)")
    ap.add_argument("--clients", default="confluent-kafka",
                    help="client libraries the roles take in turn: confluent-kafka, java (kafka-clients 3.9), java4 "
                         "(4.3; its transactional roles run JepsenTxnClient), e.g. java4,confluent-kafka")
    ap.add_argument("--torn", action="store_true",
                    help="txn only: clients through tornproxy, an EndTxn(COMMIT) held until the next transaction "
                         "wrote, at random (tests/jepsen/tornrun.py); with --clients java4 the transactional "
                         "clients run transactions v2 (kafka-clients 4.3)")
    ap.add_argument("--aggregate", type=Path, nargs="+", metavar="DIR",
                    help="print the table of the runs already in these directories, run nothing")
    a = ap.parse_args()
    if a.aggregate:
        return aggregate(a.aggregate)
    # SIGTERM/SIGHUP unwind like Ctrl-C: every run's finally kills its processes and removes its namespaces
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    why = netspace.available() if a.db == "tidelog" else peer.available()
    if why:
        print(f"network namespaces unavailable: {why}", file=sys.stderr)
        return 2
    rows: list[dict] = []
    for i in range(a.runs):
        seed = a.seed + i
        name = f"{a.workload}-s{seed}" if a.db == "tidelog" else f"{a.db}-{a.workload}-s{seed}"
        if a.torn:
            name = f"torn-{name}"
        o = Options(workload=a.workload, nemesis=[k for k in a.nemesis.split(",") if k],
                    variants=[v for v in a.variants.split(",") if v], time_limit=a.time_limit,
                    seed=seed, acks=a.acks, unclean=a.unclean, partitions=a.partitions,
                    min_insync=a.min_insync if a.db == "tidelog" else 1, rf=3 if a.db == "tidelog" else 1,
                    quiet=a.quiet, out=a.out / name, keep_data=a.keep_data, db=a.db,
                    clients=[c for c in a.clients.split(",") if c], torn=a.torn)
        t = time.monotonic()
        try:
            s = run(o)
        except Exception as exc:
            print(f"{name}: run failed: {exc!r}", file=sys.stderr)
            rows.append({"name": name, "seed": seed, "duration_s": time.monotonic() - t, "ok": 0, "faults": 0,
                         "max_wait": 0.0, "anomalies": {"run-failed": 1}})
            continue
        rows.append(row(name, s))
        ok = rows[-1]["ok"]
        print(f"{name}: {s['duration_s']:.0f}s ok-ops={ok} faults={len(s['faults'])} "
              f"anomalies={json.dumps(s['anomalies'])} harness-errors={len(s['harness_errors'])}", flush=True)
        if "torn" in s:
            got = Counter(f"{d.get('state')} EndTxn v{d.get('end_txn_version')} late={d.get('late_error')}"
                          for d in s["torn"])
            print(f"  torn faults: {dict(got)}; EndTxn versions seen {s['end_txn_versions']}", flush=True)
    out = table(rows)
    print(out)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "summary.md").write_text(out + "\n")
    return 0 if all(r.get("valid") and not r.get("beyond") and not r.get("recovery_failed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
