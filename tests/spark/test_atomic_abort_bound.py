"""The driver's ``abort`` of an atomic micro-batch is bounded by its ``timeout_s`` when no broker answers.

``query.stop()`` after the broker died waits for the sink's driver-side abort (Spark calls it for the batch that
was running). ``abort_batch`` first reads the batch's commit decision; that read retried FindCoordinator until
``delivery.timeout.ms`` (120 s by default), whatever bound the caller gave, so examples/exactly_once.py's
``q.stop()`` after its SIGKILL took about two minutes. Now the decision read and the EndTxn calls share the
caller's bound, and a batch whose decision cannot be read is left to the replay (some of its transactions may be
committed already: the replay reads the decision and finishes them)."""

from __future__ import annotations

import socket
import time

from tidelog.spark.atomic import AtomicCommit, abort_batch


def _dead_port() -> int:
    """A loopback port nothing listens on (as a broker killed -9: connections refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_abort_batch_is_bounded_when_no_broker_answers() -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{_dead_port()}", "delivery.timeout.ms": "30000"}
    open_txns = [AtomicCommit(f"tidelog-spark-q-{p}", 3, 10, False, producer_id=7 + p, producer_epoch=1,
                              partitions=[("out", p)]) for p in (0, 1)]
    started = time.monotonic()
    left = abort_batch(conf, "out-markers", 3, list(open_txns), timeout_s=2.0)
    elapsed = time.monotonic() - started
    assert left == ["tidelog-spark-q-0", "tidelog-spark-q-1"]  # not aborted: left to the replay
    assert elapsed < 10.0, f"abort_batch took {elapsed:.1f}s for a 2 s bound (delivery.timeout.ms is 30 s)"
