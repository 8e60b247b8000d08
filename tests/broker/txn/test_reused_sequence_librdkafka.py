"""Bug 9 of docs/RELIABILITY.md, reproduced deterministically with librdkafka (confluent-kafka) against a real
``tidelog serve``: an acknowledged transactional write that was never appended.

The broker advertises a proxy (``leaderloss_proxy.py``). Transaction 1 sends value A to the partition; the broker
appends it, the proxy answers NOT_LEADER_OR_FOLLOWER and shows the partition without a leader, as the Jepsen run's
leader did when its ZooKeeper session expired. librdkafka marks A "not persisted" and keeps it queued for a retry;
the client aborts on purpose. ``abort_transaction`` purges A from the queue and advances the partition's epoch base
message id past it (``rd_kafka_toppar_purge_queues``, RD_KAFKA_PURGE_F_ABORT_TXN, debug line ADVBASE), without an
epoch bump: the next message gets A's sequence. The leader comes back; transaction 2 sends value B with A's epoch
and sequence. Before the fix the broker took B for a retry of A and answered A's offset: B's delivery report and
commit succeeded, and B is nowhere in the log (a lost write). Now B is refused (INVALID_TXN_STATE, abortable):
the client aborts and sends B again in transaction 3, where it is appended and committed at a new offset.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from leaderloss_proxy import LeaderLossProxy
from txnhelp import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TXN_BROKER,
    create_topics,
    name,
    read_to_end,
    txn_producer,
    wait_for,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def proxied_txn_broker(broker_factory: Any) -> Iterator[tuple[Any, LeaderLossProxy]]:
    proxy = LeaderLossProxy().start()
    try:
        b = broker_factory({**TXN_BROKER, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target = ("127.0.0.1", b.port)
        yield b, proxy
    finally:
        proxy.stop()


class _Lines(logging.Handler):
    """librdkafka's debug log (confluent-kafka hands it to a Python logger)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock2:
            self.lines.append(record.getMessage())

    def grep(self, *words: str) -> list[str]:
        with self._lock2:
            return [line for line in self.lines if all(w in line for w in words)]


def _send(p: Any, topic: str, value: bytes, reports: dict[bytes, tuple[Any, int]]) -> None:
    def cb(err: Any, msg: Any) -> None:
        reports[value] = (err, msg.offset() if err is None else -1)

    p.produce(topic, value=value, partition=0, on_delivery=cb)


def test_sequence_reused_after_an_abort_does_not_lose_the_write(proxied_txn_broker: tuple[Any, Any]) -> None:
    _broker, proxy = proxied_txn_broker
    bs = f"127.0.0.1:{proxy.port}"
    topic, tid = name("txn-reuse"), name("reuse-tid")
    create_topics(bs, {topic: 1})
    log = _Lines()
    logger = logging.getLogger(f"rdkafka.{tid}")
    logger.addHandler(log)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    p = txn_producer(bs, tid, debug="eos,msg,protocol", logger=logger)
    reports: dict[bytes, tuple[Any, int]] = {}
    committed: list[bytes] = []
    try:
        p.init_transactions(20)

        # transaction 1: A appended, answered NOT_LEADER_OR_FOLLOWER, the partition shown leaderless; aborted
        proxy.arm(tid, topic, 0)
        p.begin_transaction()
        _send(p, topic, b"A", reports)
        wait_for(lambda: (p.poll(0), proxy.settled())[1], 30, "A answered NOT_LEADER and kept queued")
        assert b"A" not in reports, "A must still be queued for its retry"
        p.abort_transaction(30)
        proxy.release()
        err_a, _ = reports[b"A"]
        assert err_a is not None and err_a.code() == KafkaError._PURGE_QUEUE, err_a
        advanced = log.grep("ADVBASE", "advancing epoch base msgid")
        assert advanced, "librdkafka did not advance its base msgid on the abort:\n" + "\n".join(log.lines[-40:])

        # transaction 2 (and 3 if the broker refuses 2's write): B, committed
        for attempt in range(2):
            p.begin_transaction()
            _send(p, topic, b"B", reports)
            try:
                p.commit_transaction(30)
                committed.append(b"B")
                break
            except KafkaException as exc:
                e = exc.args[0]
                assert e.txn_requires_abort() and not e.fatal(), f"attempt {attempt}: {e}"
                assert reports[b"B"][0] is not None and reports[b"B"][0].code() == KafkaError.INVALID_TXN_STATE, (
                    reports[b"B"])
                p.abort_transaction(30)
        assert committed == [b"B"], "B was never committed"
        # the mechanism: B's first send carried A's sequence (message ids 1 and 2, both base sequence 0, epoch 0);
        # A may have been sent more than once before the abort (librdkafka retried it after a metadata refresh)
        sent = log.grep("Produce MessageSet", "BaseSeq 0, PID{")
        kinds = ["A" if "MsgId 1," in s else "B" if "MsgId 2," in s else "?" for s in sent]
        assert kinds[-1:] == ["B"] and kinds[:-1] and set(kinds[:-1]) == {"A"}, "\n".join(sent)
    finally:
        proxy.release()
        p.flush(10)

    uncommitted = read_to_end(bs, [(topic, 0)], READ_UNCOMMITTED)
    read_committed = read_to_end(bs, [(topic, 0)], READ_COMMITTED)
    seen = {rec[4]: rec[2] for rec in read_committed}
    b_offset = reports[b"B"][1]
    proof = ("\n".join(log.grep("BaseSeq") + log.grep("ADVBASE") + log.grep("DUPSEQ"))
             + f"\nProduce versions {sorted(proxy.produce_versions)}, uncommitted read "
             + repr([(r[2], r[4]) for r in uncommitted]))
    # A (aborted) was appended once, at offset 0
    assert [(r[2], r[4]) for r in uncommitted][:1] == [(0, b"A")], proof
    assert b"A" not in seen, proof
    # the acknowledged write: B's commit succeeded, so read_committed has it at its reported offset
    assert b"B" in seen, f"lost write: B committed, acknowledged at offset {b_offset}, absent from read_committed\n{proof}"
    assert seen[b"B"] == b_offset, proof
    assert b_offset != 0, proof
    print(proof)  # librdkafka's sequences, shown with -s (and in a failure's captured output)
