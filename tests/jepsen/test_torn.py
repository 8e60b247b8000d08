"""The torn transaction of Jepsen's Bufstream analysis, shown with the harness (issue 31): one ``tidelog serve``
whose clients go through ``tornproxy`` (it holds one EndTxn(COMMIT) of transaction N until the client's retry
committed N and N+1 wrote its first records, then delivers it), the harness's transactional clients recording a
history, N+1 aborted on purpose, final reads, the checker (tests/jepsen/tornrun.py).

* **version 1** (confluent-kafka, librdkafka 2.16: EndTxn v1, no epoch bump): the late EndTxn is answered NONE and
  commits N+1's first records; N+1's abort then aborts only what came after; the read_committed readers return
  values of a transaction recorded ``fail``: the checker reports ``aborted-read`` (G1a), with those values.
* **version 2** (the ``java4`` client, kafka-clients 4.3: EndTxn v5): the late EndTxn is fenced
  (PRODUCER_FENCED, the epoch moved on with N's commit), N+1 aborts whole, the history is valid. The broker's
  broker's log confirms that each of its transactions ended with
  an EndTxn of transactions version 2 (v5), as the proxy saw on the wire.

Each test takes 20-40 s (one client request timeout of 10 s for the held EndTxn).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2


@pytest.fixture(scope="module")
def setup(broker_factory: Any) -> Any:
    import tornrun

    torn, proxy, props = tornrun.proxied()
    b = broker_factory({**props, "num.partitions": "1", "group.initial.rebalance.delay.ms": "0"})
    try:
        yield b, torn, proxy
    finally:
        proxy.stop()


def _run(setup: Any, tmp_path: Path, kind: str, topic: str) -> tuple[Any, list[dict[str, Any]], Any]:
    import checker
    import tornrun
    from confluent_kafka.admin import AdminClient, NewTopic
    from recorder import History
    from runner import settled
    from txnload import final_read
    from workloads import Ctx

    _b, torn, proxy = setup
    bootstrap = proxy.address
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    h = History(tmp_path / "history.jsonl")
    ctx = Ctx(h, bootstrap, PARTITIONS, abort_rate=0.0, seed=31)
    client = tornrun.make_client(ctx, kind, topic)
    try:
        tornrun.seed_records(ctx, topic, 1000)
        client.start()
        # armed once the client's consumer is fetching (a committed transaction that polled records): N+1 then
        # polls records too, and sends their offsets (see docs/RELIABILITY.md, "The torn transaction")
        tornrun.wait_for("a committed transaction that polled records",
                         lambda: tornrun.polled(h, tmp_path / "history.jsonl"), 60)
        d = tornrun.one_fault(torn, h, client, f"{topic}-tx-0")
        assert d.state == "injected", d
        ok = h.counts.get("txn:ok", 0)
        tornrun.wait_for("two more transactions", lambda: h.counts.get("txn:ok", 0) >= ok + 2, 60)
        ctx.stop.set()
        client.join(60)
        assert settled(bootstrap, topic, PARTITIONS, timeout=60)
        for iso in ("read_committed", "read_uncommitted"):
            assert final_read(h, bootstrap, topic, PARTITIONS, iso, timeout=60)
    finally:
        ctx.stop.set()
        if hasattr(client, "kill"):
            client.kill()
        ctx.bury()
        h.close()
    events = tornrun.load(tmp_path / "history.jsonl")
    assert ctx.errors == [] and ctx.hung == [], (ctx.errors, ctx.hung)
    return d, events, checker.check_file(tmp_path / "history.jsonl")


def _aborted_after_fault(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``fail`` txn (aborted on purpose) that was open when the late EndTxn came: N+1."""
    stop = next(e for e in events if e["process"] == "nemesis" and e["f"] == "stop-fault")
    opened = {}
    for e in events:
        if e["f"] == "txn" and e["type"] == "invoke":
            opened[e["process"]] = e
        elif (e["f"] == "txn" and e["type"] == "fail" and e["index"] > stop["index"]
              and opened[e["process"]]["index"] < stop["index"]):
            return e
    raise AssertionError("no transaction aborted across the late EndTxn: "
                         + "\n".join(json.dumps(e)[:300] for e in events if e["f"] in ("txn", "stop-fault")))


def test_torn_transaction_under_version_1_is_an_aborted_read(setup: Any, tmp_path: Path) -> None:
    d, events, report = _run(setup, tmp_path, "confluent-kafka", "jtv1")
    assert d.end_txn_version <= 4 and d.retry_error == 0, d
    assert d.injected_error == 0, d  # version 1: the late copy of N's commit is applied to N+1
    n1 = _aborted_after_fault(events)
    n1_values = {m[2] for m in n1["value"] if m[0] == "send"}
    counts = report.stats.get("anomaly_counts", {})
    assert not report.valid and "aborted-read" in counts, report.to_json()[:3000]
    assert set(counts) <= {"aborted-read", "G0", "G1c"}, counts
    seen = {v for a in report.anomalies.get("aborted-read", []) for v in a.details.get("values", [])}
    assert seen and seen <= n1_values, (seen, n1_values)


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None, reason="needs a JDK")
def test_delayed_end_txn_is_fenced_under_version_2(setup: Any, tmp_path: Path) -> None:
    from javaclient import classpath

    classpath("java4")  # kafka-clients 4.3 (test_tv2_java's jars) and the client, compiled before the clock starts
    b, torn, _proxy = setup
    d, events, report = _run(setup, tmp_path, "java4", "jtv2")
    assert d.end_txn_version == 5 and d.retry_error == 0, d
    assert d.retry_epoch_answer == d.epoch + 1, d  # the retry of N's commit: answered with the bumped epoch
    assert d.injected_error == 90, d  # PRODUCER_FENCED: the late copy of N's commit is refused
    _aborted_after_fault(events)
    counts = report.stats.get("anomaly_counts", {})
    assert report.valid and set(counts) <= {"G0", "G1c"}, report.to_json()[:3000]
    assert torn.end_txn_versions.get(5, 0) >= 3, torn.end_txn_versions
    # the broker's log: every commit/abort of this client was prepared by an EndTxn of transactions version 2
    prepared = [line for line in b.log_text().splitlines()
                if "transaction prepared" in line and "jtv2-tx-0" in line and "by=client" in line]
    assert prepared and all("transaction_version=2" in line for line in prepared), prepared[:5]
