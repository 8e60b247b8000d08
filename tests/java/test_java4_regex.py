"""Issue 27 (cg27): the Java 4.3 client (kafka-clients 4.3.0, ``group.protocol=consumer``) subscribed with a
broker-side regular expression (``KafkaConsumer.subscribe(SubscriptionPattern("cg27j-.*"))``, Java4RegexCheck.java)
across a one-node broker restart: the group's ConsumerGroupRegularExpression record and assignment records are
replayed, so the member goes on with the same member epoch and assignment (no reassignment seen by the client, no
commit refused, every record once); a topic created afterwards that matches is assigned (a new epoch)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from jars4 import JVM_FLAGS, compile4
from support import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOURCE = Path(__file__).with_name("Java4RegexCheck.java")
BROKER = {
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "250",
    "offsets.topic.num.partitions": "3",
}


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, v.encode())
    assert p.flush(30) == 0


def _wait(predicate: Any, timeout: float, what: str, jvm: Any) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; events: {jvm.events[-5:]}; "
                                 f"stderr: {''.join(jvm.stderr)[-2000:]}")
        time.sleep(0.05)  # polling a bounded wait on the JVM's output


class RegexJvm:
    def __init__(self, classpath: str, bootstrap: str, group: str, pattern: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(["java", *JVM_FLAGS, "-cp", classpath, "Java4RegexCheck", bootstrap, group,
                                      pattern], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def values(self) -> list[str]:
        return [v for ev in list(self.events) for v in ev["values"]]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(20)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)


def test_java_regex_member_resumes_after_restart(broker_factory: Any, tmp_path: Path) -> None:
    classpath = compile4(SOURCE, tmp_path / "classes")
    b = broker_factory(BROKER)
    for name, n in (("cg27j-a", 2), ("cg27j-b", 1), ("other-cg27j", 1)):
        create_topic(b.bootstrap, name, n, 1)
    first = [f"a{i}" for i in range(30)]
    _produce(b.bootstrap, "cg27j-a", first)
    _produce(b.bootstrap, "other-cg27j", ["not-matched"])
    jvm = RegexJvm(classpath, b.bootstrap, "g-cg27-java", "cg27j-.*")
    try:
        try:
            _wait(lambda: set(first) <= set(jvm.values()), 40, "the first records", jvm)
        except AssertionError:
            import urllib.request
            text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
            print("\n".join(ln for ln in text.splitlines() if ln.startswith("tidelog_requests_total")))
            raise
        assigned = [ev for ev in jvm.events if ev["event"] == "assigned"]
        assert assigned[-1]["assignment"] == ["cg27j-a-0", "cg27j-a-1", "cg27j-b-0"]
        epoch = [ev for ev in jvm.events if ev["event"] == "batch"][-1]["epoch"]
        seen_before = len(jvm.events)
        b.restart()
        second = [f"b{i}" for i in range(30)]
        _produce(b.bootstrap, "cg27j-a", second)
        _produce(b.bootstrap, "cg27j-b", ["b-only"])
        _wait(lambda: set(second) | {"b-only"} <= set(jvm.values()), 40, "the records produced after the restart",
              jvm)
        after = jvm.events[seen_before:]
        assert not [ev for ev in jvm.events if ev["event"] == "error"], jvm.events[-3:]
        assert not [ev for ev in after if ev["event"] == "assigned"]  # no reassignment across the restart
        assert {ev["epoch"] for ev in after if ev["event"] == "batch"} == {epoch}  # the same member epoch
        values = jvm.values()
        assert len(values) == len(set(values)) == 61 and "not-matched" not in values
        # a topic created later that matches: a new resolution, a new epoch, its partition read
        create_topic(b.bootstrap, "cg27j-c", 1, 1)
        _produce(b.bootstrap, "cg27j-c", ["c0"])
        _wait(lambda: "c0" in jvm.values(), 30, "the new topic's record", jvm)
        last = [ev for ev in jvm.events if ev["event"] == "assigned"][-1]
        assert last["assignment"] == ["cg27j-a-0", "cg27j-a-1", "cg27j-b-0", "cg27j-c-0"] and last["epoch"] > epoch
        assert not [ev for ev in jvm.events if ev["event"] == "error"], jvm.events[-3:]
    finally:
        jvm.stop()
