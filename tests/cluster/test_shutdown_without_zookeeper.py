"""A ZooKeeper-mode broker stops on SIGTERM in a bounded time when its ZooKeeper is gone, and keeps its data.

Before the fix a broker whose ZooKeeper had died (or froze) ignored SIGTERM: its controlled shutdown waited, in a
worker thread, for a ZooKeeper request that kazoo only sends after a reconnect (> 120 s, then SIGKILL). The bound
(``controlled_shutdown.py``): ``controlled.shutdown.max.retries`` x ``request.timeout.ms`` +
(``max.retries`` - 1) x ``controlled.shutdown.retry.backoff.ms`` (Kafka's), and no longer than until the connection
has been down for ``zookeeper.session.timeout.ms`` (the session is expired or expiring then); the session close after it
at most ``zookeeper.session.timeout.ms``. Brokers 1 and 3 run with small controlled.shutdown values (their bound:
2 x 1.5 s + 0.5 s = 3.5 s), broker 2 with Kafka's defaults (3 x 30 s + 2 x 5 s = 100 s), which only the session
rule (6 s here) cuts short.

Real ZooKeeper, real ``tidelog serve`` processes, confluent-kafka clients."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from support import Ledger, create_topic, read_all, request, until, zk_cluster

pytestmark = pytest.mark.integration

SESSION_S = 6.0
SMALL = {"controlled.shutdown.max.retries": "2", "controlled.shutdown.retry.backoff.ms": "500",
         "request.timeout.ms": "1500"}
SMALL_BOUND_S = 2 * 1.5 + 1 * 0.5  # max.retries x request.timeout.ms + (max.retries - 1) x retry.backoff.ms
KAFKA_DEFAULT_BOUND_S = 3 * 30.0 + 2 * 5.0
#: what a loaded 2-core CI machine may add to a bound measured from outside (process exit, log closing, the
#: poll granularity of the waits); much less than any of the bounds it is added to is worth
SLACK_S = 8.0
TOPIC, PARTITIONS = "kept", 3
WARN = re.compile(r"WARNING tidelog\.cluster\.broker controlled shutdown failed.* reason=(\"[^\"]*\"|\S+).* ms=(\d+)")


@pytest.fixture(scope="module")
def cluster3() -> Iterator[Any]:
    """ZooKeeper and 3 brokers (session timeout 6 s); brokers 1 and 3 with the small controlled.shutdown values."""
    yield from zk_cluster({"zookeeper.session.timeout.ms": str(int(SESSION_S * 1000))}, {1: SMALL, 3: SMALL},
                          "tidelog-shutdown-")


def _topic(c: Any) -> None:
    """The topic (3 partitions, 3 replicas) with every broker in the ISR of every partition: each broker then has
    something a controlled shutdown must move."""
    if c.admin().list_topics(timeout=10).topics.get(TOPIC) is None:
        create_topic(c.bootstrap, TOPIC, PARTITIONS, 3)
    c.wait_for("every replica in every ISR", lambda md: (t := md.topics.get(TOPIC)) is not None and len(
        t.partitions) == PARTITIONS and all(len(q.isrs) == 3 for q in t.partitions.values()), timeout=90)


def _sigterm(brokers: list[Any], limit: float, during: Callable[[], None] | None = None) -> dict[Any, float]:
    """SIGTERM each (at once) and wait for each to exit (at most ``limit`` s, then SIGKILL and fail); seconds from
    the signal to the exit of each (one waiting thread per process). ``during()`` runs once they are signalled."""
    t0 = time.monotonic()
    took: dict[Any, float] = {}

    def wait(b: Any) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            b.proc.wait(limit)
            took[b] = time.monotonic() - t0

    waiters = [threading.Thread(target=wait, args=(b,), daemon=True) for b in brokers]
    for b in brokers:
        b.proc.send_signal(signal.SIGTERM)
    for t in waiters:
        t.start()
    if during is not None:
        during()
    for t in waiters:
        t.join(limit + 5)
    for b in brokers:
        if b not in took:
            b.kill()
            pytest.fail(f"{b} still running {limit:.0f} s after SIGTERM:\n{b.log_text()[-3000:]}")
        b._join_reader()
        assert b.proc.returncode == 0, f"{b} exited {b.proc.returncode}:\n{b.log_text()[-3000:]}"
    return took


def _warning(b: Any, since: int = 0) -> tuple[str, int]:
    """The one WARN line of the failed controlled shutdown (in the log after character ``since``): (reason, ms)."""
    text = b.log_text()[since:]
    found = WARN.findall(text)
    assert len(found) == 1, f"expected one 'controlled shutdown failed' warning:\n{text[-3000:]}"
    reason, ms = found[0]
    return reason, int(ms)


def test_sigterm_with_zookeeper_dead_is_bounded_and_the_acknowledged_data_survives(cluster3: Any) -> None:
    c = cluster3
    _topic(c)
    ledger = Ledger(PARTITIONS)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(300):
        ledger.produce(p, TOPIC, i)
    assert p.flush(60) == 0
    assert ledger.errors == [] and ledger.count() == 300
    del p  # its reconnects to the stopped brokers are noise

    c.zk.proc.kill()  # ZooKeeper gone for good (until the restart below)
    c.zk.proc.wait()
    took = _sigterm(list(c.brokers.values()), KAFKA_DEFAULT_BOUND_S)

    print("SIGTERM -> exit with ZooKeeper dead:", {f"broker {i}": round(took[b], 2) for i, b in c.brokers.items()})
    for i in (1, 3):  # ended by Kafka's bound of their small controlled.shutdown values
        b = c.brokers[i]
        reason, ms = _warning(b)
        assert ms <= SMALL_BOUND_S * 1000 + 1000, (reason, ms)  # + the 0.25 s polls and one 1 s state wait
        assert took[b] < SMALL_BOUND_S + SESSION_S + SLACK_S, (took[b], b.log_text()[-3000:])
    b2 = c.brokers[2]  # Kafka's defaults: ended by the session rule, far below their 100 s
    reason, ms = _warning(b2)
    assert "zookeeper.session.timeout.ms" in reason, reason
    assert took[b2] < 2 * SESSION_S + SLACK_S < KAFKA_DEFAULT_BOUND_S, (took[b2], b2.log_text()[-3000:])
    for b in c.brokers.values():  # the logs were flushed and closed: the storage wrote its clean-shutdown marker
        assert (b.data_dir / ".kafka_cleanshutdown").exists(), b.log_text()[-3000:]
        assert "broker stopped" in b.log_text()

    c.zk.start()  # the same data directory and port: the cluster's state is back
    for b in c.brokers.values():
        b.start()
    c.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    _topic(c)  # led again, every replica back in the ISR (they were all stopped while ZooKeeper was away)
    records = read_all(c.bootstrap, TOPIC, PARTITIONS, at_least=ledger.acked_ends())
    ledger.check(records, exact=True)


def test_sigterm_with_zookeeper_frozen_ends_at_the_session_timeout(cluster3: Any) -> None:
    c = cluster3
    if c.zk.proc is None or c.zk.proc.poll() is not None:
        pytest.skip("needs the cluster the first test left running")
    for b in c.brokers.values():
        if not b.running:
            b.start()
    _topic(c)
    b2 = c.brokers[2]  # Kafka's default controlled.shutdown values: a 100 s bound
    seen = len(b2.log_text())
    os.killpg(c.zk.proc.pid, signal.SIGSTOP)  # frozen: connections stay open, nothing answers
    try:
        until("broker 2 sees its ZooKeeper connection drop",
              lambda: "ZooKeeper connection suspended" in b2.log_text()[seen:], timeout=3 * SESSION_S)

        def serving_while_waiting() -> None:
            """The wait for ZooKeeper does not block the event loop: a client is still answered meanwhile."""
            until("broker 2's controlled shutdown asking the controller",
                  lambda: "controlled shutdown: asking the controller" in b2.log_text()[seen:], timeout=SESSION_S)
            r = request(b2, 18, 3, {"client_software_name": "t", "client_software_version": "1"}, timeout=5)
            assert r["error_code"] == 0 and "controlled shutdown failed" not in b2.log_text()[seen:], r

        took = _sigterm([b2], KAFKA_DEFAULT_BOUND_S, serving_while_waiting)[b2]
    finally:
        os.killpg(c.zk.proc.pid, signal.SIGCONT)
    reason, ms = _warning(b2, seen)
    print(f"SIGTERM -> exit with ZooKeeper frozen: {took:.2f} s (controlled shutdown {ms} ms: {reason})")
    assert "zookeeper.session.timeout.ms" in reason, reason
    assert ms <= SESSION_S * 1000 + 1000, (reason, ms)
    # the controlled shutdown (<= the session timeout after the drop), the session close (<= the session timeout)
    assert took < 2 * SESSION_S + SLACK_S < KAFKA_DEFAULT_BOUND_S, (took, b2.log_text()[-3000:])
    assert (b2.data_dir / ".kafka_cleanshutdown").exists()
