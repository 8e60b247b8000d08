"""Group tests run real clients against a real ``tidelog serve`` (the integration fixtures), plus helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# ``broker`` / ``broker_factory`` come from tests/conftest.py

# small timeouts so rebalances and expiries happen within a test's time budget
FAST_GROUPS = {
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: Callable[[], None] | None = None) -> Any:
    """Bounded polling: call ``step`` (e.g. a consumer poll) until ``predicate`` is truthy or the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if step is None:
            time.sleep(0.05)  # polling interval of a bounded wait, not a synchronisation stand-in


MEMBER_SCRIPT = Path(__file__).resolve().parent / "member.py"


class MemberProcess:
    """A group member subprocess (``member.py``) and the events it reported."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, **opts: Any) -> None:
        import json
        import subprocess
        import sys
        import threading

        self.client = client
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), client, bootstrap, group, topic, json.dumps(opts)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                with self._lock:
                    self.events.append(ev)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    @property
    def assigned(self) -> list[int]:
        last: list[int] = []
        for ev in self.snapshot():
            if ev["event"] == "assigned":
                last = ev["partitions"]
        return last

    def values(self) -> list[str]:
        return [ev["v"] for ev in self.snapshot() if ev["event"] == "msg"]

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read()


def exclusive_cover(members: list[MemberProcess], partitions: int) -> bool:
    """Every partition owned by exactly one live member."""
    owned: list[int] = []
    for m in members:
        owned += m.assigned
    return sorted(owned) == list(range(partitions))


def produce_values(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
