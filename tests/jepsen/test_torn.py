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

Each test takes about 20 s: 10 s (the client's request timeout) per held EndTxn; a fault is repeated, at most 4 times,
until N+1 is recorded `fail`. Both clients script the fault's N+1 (one record, flushed before its offsets, then the
abort), so the first fault normally does: the Java client's N+1 used to abort with its record still unsent, the next
transaction's Produce took the late EndTxn, and version 2 went through all 4 faults (~48 s in CI).
"""

from __future__ import annotations

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


def _run(setup: Any, tmp_path: Path, kind: str, topic: str) -> tuple[list[Any], dict[str, Any], list[dict[str, Any]], Any]:
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
        # a fault's N+1 is aborted on purpose, and whether the history can show the torn commit depends on how far
        # N+1 got (docs: "What a version-1 history shows"): the client makes that N+1 poll until it has records,
        # write one record and flush it before sending offsets, so the first fault shows it under both versions
        # (6 of 6 on a loaded machine); faults are still repeated (at most 4) until N+1 is recorded `fail`
        faults = []
        for _ in range(4):
            d = tornrun.one_fault(torn, h, client, f"{topic}-tx-0")
            assert d.state == "injected", d
            faults.append(d)
            outcome = _wait_outcome(h, tmp_path / "history.jsonl")
            if outcome["type"] == "fail":
                break
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
    return faults, outcome, events, checker.check_file(tmp_path / "history.jsonl")


def _wait_outcome(h: Any, path: Path, timeout: float = 90.0) -> dict[str, Any]:
    """The completion of the transaction that was open, or began next, when the last late EndTxn came."""
    import tornrun

    def find() -> dict[str, Any] | None:
        h.flush()
        events = tornrun.load(path)
        stop = max(e["index"] for e in events if e["process"] == "nemesis" and e["f"] == "stop-fault")
        inv = [e for e in events if e["f"] == "txn" and e["type"] == "invoke" and e["index"] < stop]
        if not inv:
            return None
        last = inv[-1]
        return next((e for e in events if e["index"] > last["index"] and e["process"] == last["process"]
                     and e["f"] == "txn" and e["type"] != "invoke"), None)

    box: list[dict[str, Any]] = []
    tornrun.wait_for("N+1 completed", lambda: bool(box.append(x) or True) if (x := find()) else False, timeout)
    return box[-1]


def test_torn_transaction_under_version_1_is_an_aborted_read(setup: Any, tmp_path: Path) -> None:
    faults, outcome, _events, report = _run(setup, tmp_path, "confluent-kafka", "jtv1")
    for d in faults:
        assert d.end_txn_version <= 4 and d.retry_error == 0, d
        assert d.injected_error == 0, d  # version 1: the late copy of N's commit is applied to the open N+1
    assert outcome["type"] == "fail", [d.as_dict() for d in faults]  # N+1 aborted (its abort succeeded)
    n1_values = {m[2] for m in outcome["value"] if m[0] == "send"}
    counts = report.stats.get("anomaly_counts", {})
    assert not report.valid and "aborted-read" in counts, report.to_json()[:3000]
    # an earlier fault whose N+1 ended `info` shows as lost-write (the part of it the late EndTxn did not commit)
    assert set(counts) <= {"aborted-read", "lost-write", "G0", "G1c"}, counts
    seen = {v for a in report.anomalies.get("aborted-read", []) for v in a.details.get("values", [])}
    assert seen and seen <= n1_values, (seen, n1_values)


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None, reason="needs a JDK")
def test_delayed_end_txn_is_fenced_under_version_2(setup: Any, tmp_path: Path) -> None:
    from javaclient import classpath

    classpath("java4")  # kafka-clients 4.3 (tests/java/jars4.py) and the client, compiled before the clock starts
    b, torn, _proxy = setup
    torn.end_txn_versions.clear()  # the proxy's counts of this test only (the module's first test ran v1)
    faults, _outcome, _events, report = _run(setup, tmp_path, "java4", "jtv2")
    for d in faults:
        assert d.end_txn_version == 5 and d.retry_error == 0, d
        assert d.retry_epoch_answer == d.epoch + 1, d  # the retry of N's commit: answered with the bumped epoch
        assert d.injected_error == 90, d  # PRODUCER_FENCED: the late copy of N's commit is refused
    counts = report.stats.get("anomaly_counts", {})
    assert report.valid and set(counts) <= {"G0", "G1c"}, report.to_json()[:3000]
    assert torn.end_txn_versions.get(5, 0) >= 3 and set(torn.end_txn_versions) == {5}, torn.end_txn_versions
    # the broker's log: every commit/abort of this client was prepared by an EndTxn of transactions version 2
    prepared = [line for line in b.log_text().splitlines()
                if "transaction prepared" in line and "jtv2-tx-0" in line and "by=client" in line]
    assert prepared and all("transaction_version=2" in line for line in prepared), prepared[:5]
