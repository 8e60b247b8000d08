"""The Java clients of the Jepsen-style runs (JepsenClient.java through javaclient.py) against one real ``tidelog
serve``, no faults (about 30 s): their events follow tests/jepsen/HISTORY.md closely enough that the checker reads
them, every acknowledged Java send is read by the final read, and a Java send's ``invoke`` is in the history before
any reader (another JVM) records its value (the ``g PID`` handshake; without it the checker reported
``phantom-write``s in the first trial). Skipped without a JDK or the kafka-clients jars (tests/java/conftest.py).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None,
                                reason="needs a JDK (java, javac)")


def test_java_queue_clients_record_a_valid_history(broker: Any, tmp_path: Path) -> None:
    import checker
    from confluent_kafka.admin import AdminClient, NewTopic
    from javaclient import JavaClient, classpath
    from recorder import History
    from txnload import final_read
    from workloads import Ctx

    classpath()  # compiles JepsenClient (and fetches the jars) before the clock starts
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("jq", 3, 1)])["jq"].result(30)
    h = History(tmp_path / "history.jsonl")
    ctx = Ctx(h, broker.bootstrap, 3)
    clients = [JavaClient.producer(ctx, "jq", workers=2), JavaClient.consumer(ctx, "jq", "jq-a", "assign"),
               JavaClient.consumer(ctx, "jq", "jq-s-j", "subscribe")]
    try:
        for c in clients:
            c.start()
        deadline = time.monotonic() + 60
        while h.counts.get("send:ok", 0) < 200 or h.counts.get("commit-offsets:ok", 0) < 2:
            assert time.monotonic() < deadline, f"Java clients made no progress: {h.counts}"
            time.sleep(0.2)  # polling the history's counters (no event to await across the JVMs)
        for c in clients:
            c.join(60)
        assert all(c.done for c in clients), "a JVM did not stop when its stdin closed"
        assert final_read(h, broker.bootstrap, "jq", 3, "read_uncommitted", timeout=60)
    finally:
        for c in clients:
            c.kill()
        h.close()
    events = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    java = {e["process"] for e in events if e["f"] == "open" and e["value"]["client"] == "java"}
    assert len(java) >= 4  # two producer processes, two consumers
    acked = {m[2][1] for e in events if e["f"] == "send" and e["type"] == "ok" for m in e["value"]}
    assert acked and min(acked) >= 1_000_000_000  # the Java value range
    assert ctx.errors == [] and ctx.hung == []
    report = checker.check_file(tmp_path / "history.jsonl")
    assert report.stats.get("anomaly_counts", {}) == {}, report.to_json()[:3000]
    assert report.valid
