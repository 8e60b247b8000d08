"""Authorization overhead: produce and consume throughput with Kafka's ACL authorizer holding 1,000 ACLs against
the same broker without an authorizer, 1 KiB records, one run side by side.

    .venv/bin/python bench/acl_bench.py [--records 200000] [--rounds 1] [--acls 1000]

Two ``tidelog serve`` runs, one after the other, each with a SASL_PLAINTEXT listener (PLAIN, user ``bench``) so
that only authorization differs: "no authorizer" (the default) and "1,000 ACLs"
(``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``, ``super.users=User:admin``, ``--acls`` ACLs
created through CreateAcls: LITERAL and PREFIXED topic ACLs of other principals, some on prefixes of the bench
topic's name, group, transactional-id and cluster ACLs, and the bench user's own PREFIXED WRITE/READ/CREATE
on ``bench-`` and READ on its group). Per broker, two workloads on a fresh one-partition topic: "batched"
(confluent-kafka, linger 5 ms, 1 MiB batches, acks=all, as bench/security_bench.py) and "small requests"
(linger 0, 16 KiB batches, so about one Produce per 16 records: the per-request cost shows). Reported: MB/s,
the ratio to no authorizer, and the broker's CPU seconds per GB (from /proc). A last table times the decision
itself in this process: ``Authorizer.authorize`` with 1,000 ACLs, cache hit and cache miss (the index walk).
Goal (issue 16): >= 0.95x of no authorizer.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as CkResourceType

from security_bench import consume, cpu_seconds, produce
from tidelog.broker.security.acls import AclBinding as Binding
from tidelog.broker.security.acls import AclOperation as Op
from tidelog.broker.security.acls import PatternType, PermissionType, ResourceType
from tidelog.broker.security.authorizer import AclChanges, Authorizer

ROOT = Path(__file__).resolve().parents[1]
SIZE = 1024
USERS = {"admin": "admin-secret", "bench": "bench-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def start_broker(work: Path, authorizer: bool) -> tuple[subprocess.Popen, int]:
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "tidelog.metrics.listener": "off",
        "offsets.topic.num.partitions": "1",
    }
    if authorizer:
        props.update({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"})
    cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--data-dir", str(work / "data"), "--log-level", "INFO"]
    for k, v in props.items():
        cmd += ["--override", f"{k}={v}"]
    log = work / "broker.log"
    sink = open(log, "w")  # noqa: SIM115 - the broker's output, open for its lifetime
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"SASL_PLAINTEXT\(SASL_PLAINTEXT\)://[^:]+:(\d+)", log.read_text())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"broker did not start:\n{log.read_text()[-3000:]}")


def conf(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def acl_set(n: int, seed: int = 7) -> list[tuple]:
    """``n`` ACLs as (resource type, name, pattern type, principal, operation, permission); the bench user's own
    four come last."""
    rnd = random.Random(seed)
    out: set[tuple] = set()
    T, G, C, X = CkResourceType.TOPIC, CkResourceType.GROUP, CkResourceType.BROKER, CkResourceType.TRANSACTIONAL_ID
    L, P = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL]
    own = [(T, "bench-", P, "User:bench", AclOperation.WRITE, AclPermissionType.ALLOW),
           (T, "bench-", P, "User:bench", AclOperation.READ, AclPermissionType.ALLOW),
           (T, "bench-", P, "User:bench", AclOperation.CREATE, AclPermissionType.ALLOW),
           (G, "bench", L, "User:bench", AclOperation.READ, AclPermissionType.ALLOW)]
    while len(out) < n - len(own):
        k = rnd.random()
        user = f"User:u{rnd.randrange(200)}"
        perm = AclPermissionType.DENY if rnd.random() < 0.1 else AclPermissionType.ALLOW
        if k < 0.55:
            out.add((T, f"topic-{rnd.randrange(2000)}", L, user, rnd.choice(ops), perm))
        elif k < 0.75:
            out.add((T, rnd.choice(["b", "be", "ben", "benc", "bench", "bench-x", "orders-", "pay", "t"]) +
                     str(rnd.randrange(3) or ""), P, user, rnd.choice(ops), perm))
        elif k < 0.9:
            out.add((G, f"group-{rnd.randrange(500)}", rnd.choice([L, P]), user, AclOperation.READ, perm))
        elif k < 0.97:
            out.add((X, f"tx-{rnd.randrange(100)}", L, user, AclOperation.WRITE, perm))
        else:
            out.add((C, "kafka-cluster", L, user, rnd.choice([AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE]),
                     perm))
    return [*sorted(out, key=str), *own]


def run_broker(work: Path, authorizer: bool, records: int, n_acls: int, rounds: int) -> dict[str, list[float]]:
    proc, port = start_broker(work, authorizer)
    bootstrap = f"127.0.0.1:{port}"
    best: dict[str, list[float]] = {}
    try:
        if authorizer:
            admin = AdminClient({"bootstrap.servers": bootstrap, **conf("admin")})
            acls = acl_set(n_acls)
            for i in range(0, len(acls), 200):
                chunk = [AclBinding(rt, name, pt, principal, "*", op, perm)
                         for rt, name, pt, principal, op, perm in acls[i:i + 200]]
                for f in admin.create_acls(chunk).values():
                    f.result(60)
            del admin
        workloads = {"batched": {}, "small requests": {"linger.ms": 0, "batch.size": 16384}}
        for r in range(rounds):
            for name, extra in workloads.items():
                topic = f"bench-{name.split()[0]}-{r}"
                c0 = cpu_seconds(proc.pid)
                tp = produce(bootstrap, topic, records, {**conf("bench"), **extra})
                c1 = cpu_seconds(proc.pid)
                tc = consume(bootstrap, topic, records, conf("bench"))
                c2 = cpu_seconds(proc.pid)
                mb = records * SIZE / 1e6
                row = [mb / tp, mb / tc, (c1 - c0) / mb * 1000, (c2 - c1) / mb * 1000]
                old = best.get(name)
                best[name] = row if old is None else [max(row[0], old[0]), max(row[1], old[1]),
                                                      min(row[2], old[2]), min(row[3], old[3])]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return best


class _Store:
    def start(self) -> None:
        pass

    def change(self, add: list[Binding], remove: list[Binding]) -> None:
        pass


def decision_costs(n_acls: int) -> tuple[float, float, float]:
    """ns per authorize(): no ACLs, 1,000 ACLs cache hit, 1,000 ACLs cache miss."""
    rt_of = {2: ResourceType.TOPIC, 3: ResourceType.GROUP, 4: ResourceType.CLUSTER, 5: ResourceType.TRANSACTIONAL_ID}
    bindings = [Binding(rt_of[rt.value], name, PatternType(pt.value), principal, "*", Op(op.value),
                        PermissionType(perm.value)) for rt, name, pt, principal, op, perm in acl_set(n_acls)]
    empty = Authorizer(_Store(), AclChanges())
    full = Authorizer(_Store(), AclChanges())
    full.reload(bindings)
    n = 200_000
    args = ("User:bench", "127.0.0.1", Op.WRITE, ResourceType.TOPIC, "bench-batched-0")
    out = []
    for auth, clear in ((empty, False), (full, False), (full, True)):
        auth.authorize(*args)
        t0 = time.perf_counter_ns()
        if clear:
            for _ in range(n):
                auth._cache.clear()
                auth.authorize(*args)
        else:
            for _ in range(n):
                auth.authorize(*args)
        out.append((time.perf_counter_ns() - t0) / n)
    assert full.authorize(*args) and not full.authorize("User:u1", "h", Op.WRITE, ResourceType.TOPIC, "bench-x")
    return out[0], out[1], out[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=1, help="repeat each broker's workloads (best kept)")
    ap.add_argument("--acls", type=int, default=1000)
    args = ap.parse_args()
    results = {}
    for label, on in (("no authorizer", False), (f"{args.acls} ACLs", True)):
        with tempfile.TemporaryDirectory(prefix="tidelog-acl-bench-") as tmp:
            results[label] = run_broker(Path(tmp), on, args.records, args.acls, args.rounds)
    base = results["no authorizer"]
    print(f"{args.records} records of {SIZE} B, one partition, acks=all, SASL_PLAINTEXT; broker CPU in s per GB")
    print(f"{'broker':<14} {'workload':<15} {'produce MB/s':>13} {'ratio':>6} {'consume MB/s':>13} {'ratio':>6} "
          f"{'CPU/GB prod':>12} {'CPU/GB cons':>12}")
    for label, rows in results.items():
        for wl, (p, c, cp, cc) in rows.items():
            b = base[wl]
            print(f"{label:<14} {wl:<15} {p:>13.1f} {p / b[0]:>6.2f} {c:>13.1f} {c / b[1]:>6.2f} {cp:>12.2f} "
                  f"{cc:>12.2f}")
    print("goal: >= 0.95x of no authorizer")
    none, hit, miss = decision_costs(args.acls)
    print(f"\nAuthorizer.authorize() in-process, ns per call: no ACLs {none:.0f}, {args.acls} ACLs cached {hit:.0f}, "
          f"{args.acls} ACLs uncached (index walk) {miss:.0f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
