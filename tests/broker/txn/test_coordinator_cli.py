"""``tidelog transactions list | describe | abort | find-hanging`` against a real broker."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner
from helpers import RawClient, create_topic_raw

from tidelog.cli.transactions import transactions
from tidelog.records.batch import build_batch

INIT_PRODUCER_ID, ADD_PARTITIONS, LIST_OFFSETS, PRODUCE = 22, 24, 2, 0


def _cli(b: Any, *args: str) -> Any:
    result = CliRunner().invoke(transactions, [*args, "--bootstrap-server", b.bootstrap], catch_exceptions=False)
    return result


def _lso(c: RawClient, topic: str) -> int:
    body = {"replica_id": -1, "isolation_level": 1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
    return c.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]["offset"]


def test_list_describe_and_abort_a_hanging_transaction(broker_factory: Any) -> None:
    # verification off: a transactional batch the coordinator never heard of can reach the log (how transactions
    # hang: a pre-KIP-890 broker, a bug); find-hanging must see it and abort must end it
    b = broker_factory({"transaction.partition.verification.enable": "false"})
    with RawClient(b.port) as c:
        assert create_topic_raw(c, "cli-t", partitions=1)["error_code"] == 0
        init = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": "cli-tx", "transaction_timeout_ms": 30000,
                                               "producer_id": -1, "producer_epoch": -1})
        pid = init["producer_id"]
        r = c.request(ADD_PARTITIONS, 3, {"v3_and_below_transactional_id": "cli-tx", "v3_and_below_producer_id": pid,
                                          "v3_and_below_producer_epoch": 0,
                                          "v3_and_below_topics": [{"name": "cli-t", "partitions": [0]}]})
        assert r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        batch = build_batch([(None, b"orphan")], producer_id=9999, producer_epoch=4, base_sequence=0,
                            is_transactional=True)
        r = c.request(PRODUCE, 9, {"transactional_id": "ghost", "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": "cli-t", "partition_data": [{"index": 0, "records": batch}]}]})
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
        tracked = build_batch([(None, b"tracked")], producer_id=pid, producer_epoch=0, base_sequence=0,
                              is_transactional=True)
        r = c.request(PRODUCE, 9, {"transactional_id": "cli-tx", "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": "cli-t", "partition_data": [{"index": 0, "records": tracked}]}]})
        assert r["responses"][0]["partition_responses"][0]["base_offset"] == 1
        assert _lso(c, "cli-t") == 0

    listed = _cli(b, "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert {"transactionalId": "cli-tx", "coordinator": 0, "producerId": pid, "state": "Ongoing"} in json.loads(listed.output)
    assert json.loads(_cli(b, "list", "--json", "--state", "CompleteCommit").output) == []
    bad = _cli(b, "list", "--state", "Bogus")
    assert bad.exit_code == 1 and "Bogus" in bad.output

    described = _cli(b, "describe", "--transactional-id", "cli-tx", "--json")
    d = json.loads(described.output)
    assert (d["state"], d["producerId"], d["producerEpoch"], d["partitions"]) == ("Ongoing", pid, 0, "cli-t-0")
    missing = _cli(b, "describe", "--transactional-id", "nobody")
    assert missing.exit_code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.output

    hanging = _cli(b, "find-hanging", "--topic", "cli-t", "--max-transaction-timeout", "0")
    assert hanging.exit_code == 0, hanging.output
    rows = [line.split() for line in hanging.output.strip().splitlines()[1:]]  # kafka-transactions' padded cells
    # the orphan only: cli-tx's open transaction (offset 1) is one its coordinator tracks
    assert [(r[0], r[1], r[2], r[5]) for r in rows] == [("cli-t", "0", "9999", "0")]

    aborted = _cli(b, "abort", "--topic", "cli-t", "--partition", "0", "--start-offset", "0")
    assert aborted.exit_code == 0 and "producer 9999" in aborted.output, aborted.output
    with RawClient(b.port) as c:
        assert _lso(c, "cli-t") == 1  # the orphan is aborted (marker at 2): the LSO moved on to cli-tx's batch
    assert _cli(b, "find-hanging", "--topic", "cli-t", "--max-transaction-timeout", "0").output.strip().count("\n") == 0
    usage = _cli(b, "abort", "--topic", "cli-t", "--partition", "0")
    assert usage.exit_code == 2
