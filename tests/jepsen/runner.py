"""One run of the Jepsen-style test: cluster up, workload under a nemesis, heal, quiet phase, final reads, check.

``run(Options(...))`` leaves in ``opts.out``: ``history.jsonl``, ``report.json`` (``checker.check_file``),
``summary.json`` (anomaly counts, op counts, client waits, harness errors) and ``db/`` (ZooKeeper's and the
brokers' logs; the data dirs too when the checker found anomalies or ``keep_data``).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nemesis import Nemesis
from nodes import Db, broker_props, wait_until
from recorder import History
from txnload import TxnClient, final_read
from workloads import QUEUE_TOPIC, TXN_TOPIC, ConsumerClient, Ctx, ProducerClient

WAIT_S = 5.0  # an op slower than this is reported as a client wait


@dataclass
class Options:
    workload: str = "queue"
    nemesis: list[str] = field(default_factory=lambda: ["partition", "pause", "kill"])
    variants: list[str] = field(default_factory=list)  # e.g. ["leader-zk"]: only these variants of their kind
    time_limit: float = 60.0
    seed: int = 0
    acks: str = "all"
    unclean: bool = False
    min_insync: int = 2
    rf: int = 3
    partitions: int = 4
    producers: int = 2
    quiet: float = 10.0
    out: Path = Path("/tmp/tidelog-jepsen")
    keep_data: bool = False
    db: str = "tidelog"  # or "noida": the peer (tests/jepsen/peer.py), one node, faults pause and kill
    clients: list[str] = field(default_factory=lambda: ["confluent-kafka"])  # roles take these in turn
    torn: bool = False  # clients through tornproxy: torn-transaction faults at random (tests/jepsen/tornrun.py)


CLIENTS = ("confluent-kafka", "java", "java4")


def groups_of(o: Options) -> list[str]:
    """The consumer groups of a run (a Java subscriber has its own group: ``-j``; see ``start_clients``)."""
    base = ["jq-a", "jq-s"] if o.workload == "queue" else ["jt-rc", "jt-s", "jt-g0", "jt-g1"]
    return base + ([f"{base[1]}-j"] if {"java", "java4"} & set(o.clients) else [])


def start_clients(ctx: Ctx, o: Options) -> list[Any]:
    """The run's clients. Roles (queue: the producers, the assign consumer, two subscribers; txn: the
    transactional clients, then the two read_committed consumers) take ``o.clients`` in turn. ``java`` is
    kafka-clients 3.9, ``java4`` 4.3; a transactional role is ``JepsenTxnClient`` (4.3: transactions version 2)
    when its turn is ``java4``, else confluent-kafka (there is no 3.9 transactional client). A Java subscriber
    joins group ``<group>-j``: the two clients' default assignors differ (range,roundrobin /
    range,cooperative-sticky), so they do not share one."""
    from javaclient import JavaClient

    unknown = set(o.clients) - set(CLIENTS)
    if unknown or not o.clients:
        raise ValueError(f"clients {sorted(unknown) or '[]'}; known: {CLIENTS}")
    turn = iter(range(1 << 30))

    def lib() -> str:
        return o.clients[next(turn) % len(o.clients)]

    def consumer(topic: str, group: str, mode: str, isolation: str = "read_uncommitted") -> Any:
        kind = lib()
        if kind != "confluent-kafka":
            c = JavaClient.consumer(ctx, topic, group + ("-j" if mode == "subscribe" else ""), mode, isolation)
            c.kind = kind
            return c
        return ConsumerClient(ctx, topic, group, mode, isolation=isolation)

    def producer() -> Any:
        kind = lib()
        if kind != "confluent-kafka":
            p = JavaClient.producer(ctx, QUEUE_TOPIC, workers=3)
            p.kind = kind
            return p
        return ProducerClient(ctx, QUEUE_TOPIC, workers=3)

    clients: list[Any] = []
    if o.workload == "queue":
        clients += [producer() for _ in range(o.producers)]
        clients.append(consumer(QUEUE_TOPIC, "jq-a", "assign"))
        clients += [consumer(QUEUE_TOPIC, "jq-s", "subscribe") for _ in range(2)]
    else:
        for n in range(o.producers):
            clients.append(JavaClient.txn(ctx, TXN_TOPIC, n) if lib() == "java4" else TxnClient(ctx, TXN_TOPIC, n))
        clients.append(consumer(TXN_TOPIC, "jt-rc", "assign", isolation="read_committed"))
        clients.append(consumer(TXN_TOPIC, "jt-s", "subscribe", isolation="read_committed"))
    for c in clients:
        c.start()
    return clients


def full_isr(db: Db, topic: str, partitions: int) -> bool:
    return all(len(db.leader_isr(topic, p)[1]) == len(db.brokers) for p in range(partitions))


def client_waits(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ops that took longer than ``WAIT_S`` (invoke to completion), with the faults active while they waited: a
    client waiting on a request in flight to a frozen or cut-off broker shows up here."""
    faults: list[tuple[int, int, str]] = []  # (start, end, what)
    started: dict[str, tuple[int, str]] = {}
    end = events[-1]["time"] if events else 0
    for e in events:
        if e["process"] != "nemesis":
            continue
        v = e["value"]
        kind = "kill" if v.get("fault") == "restart" else v.get("fault")
        tag = f"{kind}:{json.dumps(v.get('targets'))}"
        if e["f"] == "start-fault":
            started[tag] = (e["time"], f"{kind}/{(v.get('detail') or {}).get('sub')} {v.get('targets')}")
        elif tag in started:
            t0, what = started.pop(tag)
            faults.append((t0, e["time"], what))
    faults += [(t0, end, what) for t0, what in started.values()]
    open_ops: dict[Any, dict[str, Any]] = {}
    waits: list[dict[str, Any]] = []
    client: dict[Any, str] = {}
    for e in events:
        if e["process"] in ("nemesis", "runner"):
            continue
        if e["f"] == "open":
            client[e["process"]] = e["value"].get("client", "?")
        if e["type"] == "invoke":
            open_ops[e["process"]] = e
            continue
        inv = open_ops.pop(e["process"], None)
        if inv is None or e["f"] not in ("send", "txn", "commit-offsets"):
            continue
        dur = (e["time"] - inv["time"]) / 1e9
        if dur > WAIT_S:
            during = [w for a, b, w in faults if a <= e["time"] and b >= inv["time"]]
            waits.append({"f": e["f"], "process": e["process"], "type": e["type"], "start_s": round(inv["time"] / 1e9, 2),
                          "wait_s": round(dur, 2), "faults": during, "error": e.get("error"),
                          "client": client.get(e["process"], "?")})
    return waits


def acked_beyond_final_end(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cross-check of the checker: acked writes (with an offset) completed before a read_uncommitted final
    reader started whose offset is at or past that reader's end (the high watermark) -- the log was truncated
    below an acknowledged record."""
    first: dict[Any, int] = {}
    rc: set[Any] = set()
    finals: list[tuple[int, dict[str, int]]] = []
    for e in events:
        first.setdefault(e["process"], e["index"])
        if e["f"] == "open" and e["value"].get("isolation") == "read_committed":
            rc.add(e["process"])
        # read_committed readers end at the LSO, which trails a commit until its markers are written
        if e["f"] == "final-read" and e["type"] == "ok" and e["process"] not in rc:
            finals.append((first[e["process"]], e["value"]["to"]))
    out: list[dict[str, Any]] = []
    for e in events:
        if e["type"] != "ok" or e["f"] not in ("send", "txn"):
            continue
        for m in e["value"]:
            if m[0] != "send" or m[2][0] is None:
                continue
            k, (off, v) = m[1], m[2]
            for start, to in finals:
                if e["index"] < start and k in to and off >= to[k]:
                    out.append({"key": k, "offset": off, "value": v, "index": e["index"], "final_end": to[k]})
                    break
    return out


def summarize(report: Any) -> dict[str, int]:
    """Anomaly type -> count from the checker's report (whatever its exact shape: counts or a list)."""
    if not isinstance(report, dict):
        return {}
    stats = report.get("stats") if isinstance(report.get("stats"), dict) else {}
    for src in (report.get("anomaly_counts"), stats.get("anomaly_counts")):
        if isinstance(src, dict):
            return {str(k): int(v) for k, v in src.items()}
    anomalies = report.get("anomalies")
    if isinstance(anomalies, dict):
        return {k: (len(v) if isinstance(v, list) else int(v)) for k, v in anomalies.items()}
    if isinstance(anomalies, list):
        out: dict[str, int] = {}
        for a in anomalies:
            t = a.get("type", "?") if isinstance(a, dict) else str(a)
            out[t] = out.get(t, 0) + 1
        return out
    return {}


def check(history: Path) -> Any:
    import checker

    rep = checker.check_file(history)
    if hasattr(rep, "to_json"):
        return json.loads(rep.to_json())
    return asdict(rep) if hasattr(rep, "__dataclass_fields__") else rep


def settled(bootstrap: str, topic: str, partitions: int, timeout: float = 90.0) -> bool:
    """Wait until every partition's LSO equals its high watermark: the last commits' markers are written and no
    transaction is open (an abandoned client's is aborted after transaction.timeout.ms). False on timeout."""
    from confluent_kafka import Consumer, TopicPartition

    cons = {iso: Consumer({"bootstrap.servers": bootstrap, "group.id": "settled", "isolation.level": iso})
            for iso in ("read_committed", "read_uncommitted")}

    def same() -> bool:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return all(cons["read_committed"].get_watermark_offsets(tp, timeout=10)[1]
                   == cons["read_uncommitted"].get_watermark_offsets(tp, timeout=10)[1] for tp in tps)

    try:
        wait_until("LSO = high watermark everywhere", same, timeout=timeout, interval=0.5)
        return True
    except TimeoutError:
        return False
    finally:
        for c in cons.values():
            c.close()


def _create(admin: Any, new: Any) -> bool:
    from confluent_kafka import KafkaError, KafkaException

    try:
        admin.create_topics([new])[new.topic].result(60)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return True


def run(o: Options) -> dict[str, Any]:
    if o.out.exists():
        shutil.rmtree(o.out)  # a fresh cluster: a previous run's data dirs would be reused
    o.out.mkdir(parents=True)
    t0 = time.monotonic()
    topic = QUEUE_TOPIC if o.workload == "queue" else TXN_TOPIC
    h = History(o.out / "history.jsonl")
    h.add("runner", "info", "meta", {"workload": o.workload, "acks": o.acks, "min_insync": o.min_insync, "rf": o.rf,
                                     "unclean": o.unclean, "seed": o.seed, "nemesis": o.nemesis, "torn": o.torn,
                                     "variants": o.variants, "clients": o.producers, "time_limit": o.time_limit,
                                     "db": o.db, "client_libs": o.clients})
    db: Any
    if o.db == "noida":
        import peer

        db = peer.PeerDb(o.out / "db")
    else:
        db = Db(o.out / "db", props=broker_props(min_insync=o.min_insync, rf=o.rf, unclean=o.unclean),
                clock="clock" in o.nemesis)
    summary: dict[str, Any] = {"options": {k: str(v) for k, v in asdict(o).items()}, "phases": {}}
    torn: Any = None
    if o.torn:
        if o.db != "tidelog" or o.workload != "txn":
            raise ValueError("--torn needs --workload txn on tidelog")
        import tornrun

        torn = tornrun.TornNemesis(db, h, o.seed)
    nem: Any = None
    ctx: Ctx | None = None
    clients: list[Any] = []
    try:
        db.start()
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": db.bootstrap})
        n = len(db.brokers)
        # registered in ZooKeeper is not yet known to every broker's metadata cache (CreateTopics would answer
        # INVALID_REPLICATION_FACTOR): wait until Metadata lists them all
        wait_until(f"{n} brokers in Metadata", lambda: len(admin.list_topics(timeout=10).brokers) == n, timeout=120)
        wait_until(f"{topic} created", lambda: _create(admin, NewTopic(topic, o.partitions, o.rf)), timeout=120)
        if o.db == "tidelog":
            wait_until(f"{topic} with full ISRs", lambda: full_isr(db, topic, o.partitions), timeout=120)
        summary["phases"]["setup_s"] = round(time.monotonic() - t0, 1)
        ctx = Ctx(h, torn.bootstrap if torn else db.bootstrap, o.partitions, acks=o.acks, seed=o.seed)
        clients = start_clients(ctx, o)
        wait_until("a first acknowledged write", lambda: any(k in h.counts for k in ("send:ok", "txn:ok")),
                   timeout=120)
        if o.db == "noida":
            nem = peer.PeerNemesis(db, h, o.nemesis, o.seed)
        else:
            nem = Nemesis(db, h, o.nemesis, o.seed, topic, o.partitions, groups=groups_of(o),
                          txn_ids=[f"{topic}-tx-{n}" for n in range(o.producers)] if o.workload == "txn" else [],
                          variants=o.variants)
        t = threading.Thread(target=nem.run if o.nemesis else nem.stop.wait, daemon=True)
        t.start()
        if torn is not None:
            torn.clients = {c.txn_id: c for c in clients if getattr(c, "txn_id", None)}
            threading.Thread(target=torn.run, daemon=True).start()
        nem.stop.wait(o.time_limit)
        nem.stop.set()
        t.join(120)
        nem.heal()
        if torn is not None:
            torn.heal()
        t1 = time.monotonic()
        try:
            if o.db == "tidelog":
                db.wait_registered(timeout=180)
                wait_until("full ISRs after the heal", lambda: full_isr(db, topic, o.partitions), timeout=180)
        except TimeoutError as exc:  # an availability bug in itself: reported, and the run still checked
            summary["recovery_failed"] = str(exc)
        summary["phases"]["recovery_s"] = round(time.monotonic() - t1, 1)
        time.sleep(o.quiet)  # the quiet phase: clients keep working with no fault (a schedule, not a wait)
        ctx.stop.set()
        for c in clients:
            c.join(180)  # a client stuck in a call is left behind (a daemon thread): see hung_client_calls
        if o.workload == "txn":
            summary["phases"]["open_txns_settled"] = settled(db.bootstrap, topic, o.partitions)
        summary["final_read"] = {}
        for iso in (["read_uncommitted"] if o.workload == "queue" else ["read_committed", "read_uncommitted"]):
            summary["final_read"][iso] = final_read(h, db.bootstrap, topic, o.partitions, iso)
    finally:
        if ctx is not None:
            ctx.stop.set()
            ctx.bury()
        if nem is not None:
            nem.stop.set()
        for c in clients:
            if hasattr(c, "kill"):
                c.kill()  # a Java client's JVM (already stopped after a normal run)
        if torn is not None:
            torn.heal()
        h.close()
        db.close()
        if torn is not None:
            torn.close()
    summary["duration_s"] = round(time.monotonic() - t0, 1)
    summary["ops"] = dict(sorted(h.counts.items()))
    summary["harness_errors"] = (ctx.errors if ctx else []) + (nem.errors if nem else [])
    summary["hung_client_calls"] = ctx.hung if ctx else []
    summary["fatal_client_errors"] = [f for c in clients for f in getattr(c, "fatal", [])]
    events = [json.loads(line) for line in (o.out / "history.jsonl").read_text().splitlines()]
    waits = client_waits(events)
    summary["client_waits"] = {"count": len(waits), "max_s": max((w["wait_s"] for w in waits), default=0.0),
                               "longest": sorted(waits, key=lambda w: -w["wait_s"])[:10]}
    beyond = acked_beyond_final_end(events)
    summary["acked_beyond_final_end"] = {"count": len(beyond), "examples": beyond[:10]}
    summary["faults"] = [e["value"] for e in events if e["process"] == "nemesis" and e["f"] == "start-fault"]
    if torn is not None:
        import tornrun

        summary["torn"] = tornrun.deliveries(events)
        summary["end_txn_versions"] = dict(torn.torn.end_txn_versions)
    try:
        report = check(o.out / "history.jsonl")
        (o.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        summary["anomalies"] = summarize(report)
        summary["valid"] = report.get("valid") if isinstance(report, dict) else None
    except Exception as exc:  # the checker is developed alongside: report its failure, keep the history
        summary["anomalies"] = {}
        summary["checker_error"] = repr(exc)
    if not (o.keep_data or summary["anomalies"] or summary.get("checker_error")):
        for d in (o.out / "db").glob("broker-*"):
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(o.out / "db" / "zk-data", ignore_errors=True)
    (o.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
