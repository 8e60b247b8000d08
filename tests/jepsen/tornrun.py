"""The torn-transaction schedule on one ``tidelog serve`` behind a ``tornproxy.TornProxy``: the harness's
transactional client (``txnload.TxnClient``: confluent-kafka / librdkafka 2.16, transactions version 1; or the
``java4`` client, kafka-clients 4.3, version 2) runs consume-transform-produce transactions while the proxy holds
one EndTxn(COMMIT) of transaction N until N+1 has written (tornproxy's docstring). N+1 is then aborted on purpose
(``abort_next`` from the moment N's retried commit succeeded): under version 1 the late EndTxn has committed what
N+1 wrote before the abort, so a read_committed reader returns values of a transaction the client saw aborted --
the checker's ``aborted-read`` (Elle's G1a). Under version 2 the late copy is fenced and N+1 aborts whole.

Used by tests/jepsen/test_torn.py (one fault, deterministic) and ``bench/jepsen.py --torn`` (``randomized``:
faults armed at random moments of random transactions, N+1 aborted only at the workload's own rate).
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from recorder import History
from tornproxy import Delivery, Torn, TornProxy
from workloads import CLIENT, Ctx, common_conf, key


# a listener for the clients whose advertised address is the proxy; the inter-broker listener stays direct
def listener_props(client_port: int, proxy_port: int, host: str = "127.0.0.1") -> dict[str, str]:
    return {"listeners": f"PLAINTEXT://{host}:0,CLIENT://{host}:{client_port}",
            "advertised.listeners": f"CLIENT://{host}:{proxy_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def proxied() -> tuple[Torn, TornProxy, dict[str, str]]:
    """A ``Torn`` and its proxy listening, plus the broker properties that route clients through it."""
    torn = Torn()
    port = free_port()
    proxy = TornProxy(torn, target=("127.0.0.1", port)).start()
    return torn, proxy, listener_props(port, proxy.port)


def seed_records(ctx: Ctx, topic: str, n: int) -> None:
    """``n`` plain acked sends (recorded), so that every transaction's polls return something to offset."""
    pid = ctx.h.new_process()
    v = {"role": "producer", "client": CLIENT, "transactional": False, "isolation": "read_uncommitted",
         "mode": None, "group": None}
    ctx.h.add(pid, "invoke", "open", v)
    ctx.h.add(pid, "ok", "open", v)
    p = Producer({**common_conf(ctx.bootstrap), "enable.idempotence": True, "acks": "all", "linger.ms": 0})
    for i in range(n):
        k, value = key(topic, i % ctx.partitions), ctx.value()
        ctx.h.add(pid, "invoke", "send", [["send", k, value]])
        out: list[Any] = []

        def delivered(err: Any, msg: Any, out: list[Any] = out) -> None:
            out.append((err, msg.offset()))

        p.produce(topic, str(value).encode(), key=str(value).encode(), partition=i % ctx.partitions,
                  on_delivery=delivered)
        p.flush(30)
        assert out and out[0][0] is None, out
        ctx.h.add(pid, "ok", "send", [["send", k, [out[0][1], value]]])


def wait_for(what: str, cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)  # polling the history's counters (filled by client threads / JVMs)


def polled(h: History, path: Path) -> bool:
    """Has a transaction been committed whose polls returned records? (reads the history written so far)"""
    if h.counts.get("txn:ok", 0) == 0:
        return False
    h.flush()
    return any(e["f"] == "txn" and e["type"] == "ok" and any(m[0] == "poll" and m[1] for m in e["value"])
               for e in load(path))


def make_client(ctx: Ctx, kind: str, topic: str, n: int = 0) -> Any:
    if kind == "java4":
        from javaclient import JavaClient

        return JavaClient.txn(ctx, topic, n)
    from txnload import TxnClient

    return TxnClient(ctx, topic, n)


def one_fault(torn: Torn, h: History, client: Any, txn_id: str, timeout: float = 90.0) -> Delivery:
    """Arm one torn fault on ``txn_id``; N+1 is aborted on purpose; returns the delivery (injected or expired)."""
    before = len(torn.done)
    torn.on_retried = lambda d: client.abort_next()
    torn.on_done = lambda d: h.nemesis(False, "torn", [d.held_txn_id or txn_id], summary(d))
    h.nemesis(True, "torn", [txn_id], {"sub": "end-txn-delay"})
    assert torn.arm(txn_id)
    done = torn.wait_done(before + 1, timeout)
    if len(done) <= before:
        torn.disarm()
        done = torn.wait_done(before + 1, 5)
    return done[before]


def summary(d: Delivery) -> dict[str, Any]:
    return {"sub": "end-txn-delay", "state": d.state, "end_txn_version": d.end_txn_version,
            "producer_id": d.producer_id, "epoch": d.epoch, "retry_error": d.retry_error,
            "retry_epoch": d.retry_epoch_answer, "late_error": d.injected_error,
            "next_produce_version": d.next_txn_produce_version, "events": d.events}


class TornNemesis:
    """``bench/jepsen.py --torn``: the run's clients reach the brokers through one ``TornProxy`` per broker (in the
    root namespace, on the bridge address; each broker gets a ``CLIENT`` listener on port 9093 advertised as its
    proxy, replication stays on the direct listener). Every 5-15 s (seeded) a torn fault is armed on a random
    transactional id; half the time (seeded) the transaction after the held commit is aborted on purpose (else the
    workload's own 15 %). One fault at a time; one that catches no commit expires after ``Torn.expire_s``. It runs
    beside the other nemesis kinds (partitions, pauses, ... cut or freeze the proxies' links like the clients')."""

    CLIENT_PORT = 9093

    def __init__(self, db: Any, h: History, seed: int) -> None:
        from netspace import ROOT

        self.h, self.torn = h, Torn()
        self.rng = random.Random(seed ^ 0x70B)
        self.stop = threading.Event()
        self.clients: dict[str, Any] = {}
        self.proxies: list[TornProxy] = []
        root = db.net.addr(ROOT)
        for b in db.brokers.values():
            px = TornProxy(self.torn, listen=(root, 0), target=(b.addr, self.CLIENT_PORT)).start()
            self.proxies.append(px)
            b.props = {**b.props, "listeners": f"PLAINTEXT://{b.addr}:{b.bootstrap.rsplit(':', 1)[1]},"
                                               f"CLIENT://{b.addr}:{self.CLIENT_PORT}",
                       "advertised.listeners": f"CLIENT://{root}:{px.port}",
                       "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
                       "inter.broker.listener.name": "PLAINTEXT"}
        self.torn.on_done = lambda d: h.nemesis(False, "torn", [d.held_txn_id or d.txn_id], summary(d))
        self.torn.on_retried = self._retried

    @property
    def bootstrap(self) -> str:
        return ",".join(p.address for p in self.proxies)

    def _retried(self, d: Delivery) -> None:
        c = self.clients.get(d.held_txn_id or "")
        if c is not None and self.rng.random() < 0.5:
            c.abort_next()

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(5, 15)):
            tid = self.rng.choice(sorted(self.clients))
            if self.torn.arm(tid):
                self.h.nemesis(True, "torn", [tid], {"sub": "end-txn-delay"})

    def heal(self) -> None:
        self.stop.set()
        self.torn.disarm()

    def close(self) -> None:
        for p in self.proxies:
            p.stop()


def deliveries(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The torn faults' outcomes recorded in a history (``stop-fault`` of ``torn``)."""
    return [e["value"]["detail"] for e in events
            if e["process"] == "nemesis" and e["f"] == "stop-fault" and e["value"].get("fault") == "torn"]


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
