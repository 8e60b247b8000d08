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
        ({"event": "aborted", "offsets": ...}); a fatal error is reported ({"event": "fatal", "error": name}) and a new producer takes over.
        PAUSE_MS between transactions spreads the copy over time so the test's kills land inside it.

Every line on stdout is one JSON object; the process never exits by itself.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


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


def retrying(call: Callable[[], object]) -> None:
    """Call a transactional API until it does not fail with a retriable error (librdkafka: call it again)."""
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


def copier(bootstrap: str, src: str, dst: str, group: str, tid: str, batch: int, pause_ms: int) -> None:
    def new_producer() -> Producer:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 10000,
                      "linger.ms": 2})
        p.init_transactions(60)  # fences an earlier instance and aborts what it left open
        return p

    p = new_producer()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    meta = c.list_topics(src, timeout=10).topics[src]
    tps = [TopicPartition(src, part) for part in sorted(meta.partitions)]

    def rewind(event: str) -> None:
        """Start (again) at the group's committed offsets: after a start or an aborted transaction."""
        committed = c.committed(tps, timeout=60)
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
            retrying(lambda p=p, pos=positions: p.send_offsets_to_transaction(pos, c.consumer_group_metadata(), 60))
            retrying(lambda p=p: p.commit_transaction(60))
        except KafkaException as exc:
            err = exc.args[0]
            if not err.txn_requires_abort():
                # a fatal error: as librdkafka asks of an application, this producer is dropped and a new one with
                # the same transactional id fences it and resumes from the committed offsets (the test decides
                # which fatal errors it accepts)
                emit(event="fatal", error=err.name())
                p = new_producer()
                rewind("resumed")
                continue
            retrying(lambda p=p: p.abort_transaction(60))  # e.g. a broker went away mid-transaction: abort, read again
            rewind("aborted")
            continue
        emit(event="committed", offsets={str(tp.partition): tp.offset for tp in positions})
        time.sleep(pause_ms / 1000)  # pacing of the workload (see the docstring), not a wait for an event


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "hang":
        hang(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif mode == "copier":
        copier(argv[1], argv[2], argv[3], argv[4], argv[5], int(argv[6]), int(argv[7]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
