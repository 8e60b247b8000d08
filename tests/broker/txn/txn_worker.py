"""Transactional clients run as subprocesses by test_txn_faults.py, so the tests can kill -9 them.

    python txn_worker.py hang BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT TRANSACTION_TIMEOUT_MS
        init_transactions, begin, produce COUNT records to partition 0, flush, print {"event": "produced"} and
        wait (forever) to be killed with the transaction open.

    python txn_worker.py copier BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID BATCH PAUSE_MS
        A transactional copier: SRC partition p -> DST partition p, BATCH records per transaction, each
        transaction committing the consumer's positions with send_offsets_to_transaction. It starts where the
        group's committed offsets are (read with require_stable: a read_committed consumer's committed()),
        prints {"event": "resumed", "offsets": ...} and, after every commit, {"event": "committed", ...}; a
        transaction failing with an abortable error is aborted and the copy goes on from the committed offsets
        ({"event": "aborted", "offsets": ...}); a fatal error is reported ({"event": "fatal", "error": name}) and a new producer takes over;
        fenced by a newer producer with its transactional id, it reports {"event": "fenced"} and stops copying.
        PAUSE_MS between transactions spreads the copy over time so the test's kills land inside it.

Every line on stdout is one JSON object; the process never exits by itself, but for a client call hung past its
timeout (``guarded``: {"event": "hung"}, exit status 3).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

T = TypeVar("T")


def _debug_conf() -> dict[str, str]:
    """librdkafka debug contexts from TIDELOG_TEST_RDKAFKA_DEBUG (e.g. ``eos,fetch,msg,protocol``); the logs go to
    stderr, which the worker sends to the file named by TIDELOG_TEST_RDKAFKA_LOG (see main)."""
    dbg = os.environ.get("TIDELOG_TEST_RDKAFKA_DEBUG")
    return {"debug": dbg} if dbg else {}


def emit(**kw: object) -> None:
    print(json.dumps(kw), flush=True)


def hang(bootstrap: str, topic: str, tid: str, count: int, timeout_ms: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": timeout_ms,
                  "linger.ms": 5})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, value=f"doomed-{i}".encode(), partition=0)
    assert p.flush(20) == 0
    emit(event="produced", count=count)
    while True:
        signal.pause()


# librdkafka's fatal error for a producer fenced by a newer one with its transactional id (and the broker's codes)
FENCED = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})


COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                KafkaError.COORDINATOR_LOAD_IN_PROGRESS})

# the copier's client calls time out after API_TIMEOUT_S (librdkafka: a retriable error, the call is made again);
# one that has not returned well after that is hung (see guarded())
API_TIMEOUT_S = 30
HANG_S = API_TIMEOUT_S + 10.0


def guarded(call: Callable[[], T]) -> T:
    """``call()``, or the process reports {"event": "hung"} and exits (status 3) if it has not returned after
    HANG_S. librdkafka >= 2.10 decommissions a broker that leaves the Metadata answers, and a transactional call
    waiting on it (its group or transaction coordinator) can then hang past its own timeout (confluentinc/librdkafka
    #5511); a hung application is restarted, and the new copier fences this one (the test does so)."""
    def hung() -> None:
        emit(event="hung")
        os._exit(3)

    timer = threading.Timer(HANG_S, hung)
    timer.daemon = True
    timer.start()
    try:
        return call()
    finally:
        timer.cancel()


def retrying(call: Callable[[], object]) -> None:
    """Call a transactional API until it does not fail with a retriable error (librdkafka: call it again)."""
    while True:
        try:
            guarded(call)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


def copier(bootstrap: str, src: str, dst: str, group: str, tid: str, batch: int, pause_ms: int) -> None:
    def new_producer() -> Producer:
        # the transaction timeout (and so librdkafka's message timeout) is well above a failover's stall, so the
        # coordinator never fences a live copier; a killed or stopped one is fenced by the next copier's start
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 30000,
                      "linger.ms": 2, **_debug_conf()})
        retrying(lambda: p.init_transactions(API_TIMEOUT_S))  # fences an earlier instance, aborts what it left open
        return p

    p = new_producer()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, **_debug_conf()})
    meta = c.list_topics(src, timeout=10).topics[src]
    tps = [TopicPartition(src, part) for part in sorted(meta.partitions)]

    def rewind(event: str) -> None:
        """Start (again) at the group's committed offsets: after a start or an aborted transaction."""
        while True:
            try:
                committed = guarded(lambda: c.committed(tps, timeout=API_TIMEOUT_S))
                break
            except KafkaException as exc:
                # the group coordinator moving or just elected (its leadership not yet applied): ask again
                if not (exc.args[0].retriable() or exc.args[0].code() in COORDINATOR_MOVING):
                    raise
                time.sleep(0.1)  # retry backoff
        emit(event=event, offsets={str(tp.partition): tp.offset for tp in committed})
        c.assign([TopicPartition(src, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                  for tp in committed])

    rewind("resumed")
    while True:
        msgs = [m for m in c.consume(batch, 0.5) if not m.error()]
        if not msgs:
            continue
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, key=m.key(), value=m.value(), partition=m.partition())
            positions = c.position(c.assignment())
            retrying(lambda p=p, pos=positions: p.send_offsets_to_transaction(pos, c.consumer_group_metadata(),
                                                                              API_TIMEOUT_S))
            retrying(lambda p=p: p.commit_transaction(API_TIMEOUT_S))
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                try:  # e.g. a broker went away mid-transaction: abort, read again
                    retrying(lambda p=p: p.abort_transaction(API_TIMEOUT_S))
                    rewind("aborted")
                    continue
                except KafkaException as abort_exc:
                    err = abort_exc.args[0]  # the abort itself failed fatally (see below)
            if err.name() in FENCED:
                # a newer producer with this transactional id took over: this one is a zombie, and stops for good
                emit(event="fenced", error=err.name())
                while True:
                    signal.pause()
            # a fatal error: as librdkafka asks of an application, this producer is dropped and a new one with the
            # same transactional id fences it and resumes from the committed offsets (the test decides which fatal
            # errors it accepts)
            emit(event="fatal", error=err.name())
            p = new_producer()
            rewind("resumed")
            continue
        emit(event="committed", offsets={str(tp.partition): tp.offset for tp in positions})
        time.sleep(pause_ms / 1000)  # pacing of the workload (see the docstring), not a wait for an event


def read(bootstrap: str, isolation: str, timeout: float, tps: list[str]) -> None:
    """Every record a consumer with ``isolation`` reads to the end of each ``topic:partition`` (txnhelp's
    read_to_end), printed as one JSON line: a test reads in this subprocess so that a client crashing fails that
    test, never the whole pytest run."""
    from txnhelp import read_to_end  # tests/broker/txn is this script's directory, so sys.path[0]

    def b64(v: bytes | None) -> str | None:
        return None if v is None else base64.b64encode(v).decode()

    parsed = [(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in tps]
    recs = read_to_end(bootstrap, parsed, isolation, timeout, **_debug_conf())
    emit(event="read", records=[[t, p, o, b64(k), b64(v)] for t, p, o, k, v in recs])


def main(argv: list[str]) -> None:
    log_file = os.environ.get("TIDELOG_TEST_RDKAFKA_LOG")
    if log_file:  # librdkafka's debug log (stderr) to a file of its own per process
        fd = os.open(f"{log_file}.{argv[0]}.{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)
    mode = argv[0]
    if mode == "hang":
        hang(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif mode == "copier":
        copier(argv[1], argv[2], argv[3], argv[4], argv[5], int(argv[6]), int(argv[7]))
    elif mode == "read":
        read(argv[1], argv[2], float(argv[3]), argv[4:])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
