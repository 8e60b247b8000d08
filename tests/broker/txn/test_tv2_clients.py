"""The installed real clients against a broker with ``transaction.version`` 2 finalized (KIP-890 part 2).

None of the installed ones runs transactions v2 yet (the Kafka 4.3 Java producer does: test_tv2_java.py):
librdkafka 2.16 (confluent-kafka) sends AddPartitionsToTxn v0, Produce v10 and EndTxn v1 even when the level is
finalized; kafka-python 3.0 caps EndTxn and AddPartitionsToTxn at v3; the Java 3.9 client has no version 2 code
(tests/java covers it). So they keep version 1 semantics (the
epoch stays across transactions) and must keep working; the test below checks both, and would tell when a client
starts using EndTxn v5 (then its transactions v2 path deserves its own test)."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from helpers import RawClient
from txnhelp import READ_COMMITTED, create_topics, read_to_end, txn_producer

DESCRIBE_TXNS = 65


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _epoch(port: int, tid: str) -> tuple[str, int]:
    with RawClient(port) as c:
        s = c.request(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]})["transaction_states"][0]
    return s["transaction_state"], s["producer_epoch"]


def test_confluent_kafka_keeps_version_1_with_tv2_finalized(txn_broker: Any) -> None:
    topic, tid = f"tv2c-{uuid.uuid4().hex[:8]}", f"tv2c-{uuid.uuid4().hex[:8]}"
    create_topics(txn_broker.bootstrap, {topic: 2})
    lines = _Lines()
    logger = logging.getLogger(f"librdkafka.{tid}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    p = txn_producer(txn_broker.bootstrap, tid, debug="protocol", logger=logger)
    p.init_transactions(15)
    epochs = []
    for i, commit in enumerate((True, False, True)):
        p.begin_transaction()
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
        if commit:
            p.commit_transaction(15)
        else:
            assert p.flush(15) == 0
            p.abort_transaction(15)
        p.poll(0)  # serve the logger queue
        epochs.append(_epoch(txn_broker.port, tid))
    p.flush(5)
    versions = {int(v) for v in re.findall(r"Sent EndTxnRequest \(v(\d+)", "\n".join(lines.lines))}
    assert versions and max(versions) < 5, versions  # librdkafka 2.16: version 1 (an update may change this)
    # version 1: the epoch stays across transactions (version 2 would bump it on each EndTxn)
    assert len({e for _, e in epochs}) == 1, epochs
    got = read_to_end(txn_broker.bootstrap, [(topic, 0), (topic, 1)], READ_COMMITTED)
    assert sorted(r[4] for r in got) == [b"v0", b"v2"]
