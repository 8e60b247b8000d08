"""Transactions v2 in a real in-process broker (requests through the real codec): the states hard to reach over
the wire. An EndTxn v5 from an exhausted epoch (32766) moves the producer to a new producer id with epoch 0
(Kafka's ``NextProducerId``, written with the Prepare state; installed with Complete*); a retry of that EndTxn
(the old id at 32766) is answered with the new id; the Prepare state is written with ``ClientTransactionVersion``
2 (value version 1) and survives a reload."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tidelog.broker.internal_topics import replay_log
from tidelog.broker.txn import records as txnrec
from tidelog.broker.txn.state import TransactionMetadata, TxnState
from tidelog.errors import ErrorCode

_spec = importlib.util.spec_from_file_location(
    "tidelog_test_admin_harness_tv2", Path(__file__).parents[1] / "test_admin_handlers.py")
assert _spec is not None and _spec.loader is not None
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)
Harness, run_broker = _harness.Harness, _harness.run_broker

CREATE_TOPICS, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 19, 22, 24, 26
NONE = 0


def test_end_txn_v5_at_an_exhausted_epoch_rotates_the_producer_id(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        r = await h.call(CREATE_TOPICS, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                        "assignments": [], "configs": []}],
                                            "timeout_ms": 10000, "validate_only": False})
        assert r["topics"][0]["error_code"] == NONE
        init = await h.call(INIT_PRODUCER_ID, 4, {"transactional_id": "ov", "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1})
        old = init["producer_id"]
        coord = h.broker.txn_coordinator
        coord.txns["ov"].producer_epoch = 32766  # Short.MaxValue - 1: one bump left
        # the partition added as a transactions-v2 partition leader would (AddPartitionsToTxn v5, verify_only false)
        r = await h.call(ADD_PARTITIONS, 5, {"transactions": [{
            "transactional_id": "ov", "producer_id": old, "producer_epoch": 32766, "verify_only": False,
            "topics": [{"name": "t", "partitions": [0]}]}]})
        assert r["results_by_transaction"][0]["topic_results"][0]["results_by_partition"][0][
            "partition_error_code"] == NONE
        md = coord.txns["ov"]
        assert (md.state, md.client_transaction_version) == (TxnState.ONGOING, 2)
        end = {"transactional_id": "ov", "producer_id": old, "producer_epoch": 32766, "committed": True}
        r = await h.call(END_TXN, 5, end)
        new = r["producer_id"]
        assert r["error_code"] == NONE and new not in (old, -1) and r["producer_epoch"] == 0
        # Prepare: the last epoch 32767 with the next producer id, written as a v1 value with version 2
        assert (md.state, md.producer_id, md.producer_epoch, md.next_producer_id) == (
            TxnState.PREPARE_COMMIT, old, 32767, new)
        await coord.completions["ov"]
        assert (md.state, md.producer_id, md.producer_epoch, md.previous_producer_id) == (
            TxnState.COMPLETE_COMMIT, new, 0, old)
        # the COMMIT marker is in the partition
        log = h.broker.topics.get_log("t", 0)
        assert log.log_end_offset == 1
        # a retry of that EndTxn (the old id at 32766): the answer with the new id
        r = await h.call(END_TXN, 5, end)
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (NONE, new, 0)
        stale = dict(end, producer_epoch=32765)
        assert (await h.call(END_TXN, 5, stale))["error_code"] in (ErrorCode.PRODUCER_FENCED,
                                                                   ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        # what the coordinator wrote to __transaction_state (what a new coordinator loads)
        tlog = h.broker.topics.get_log(txnrec.TRANSACTION_STATE_TOPIC, coord._partition("ov"))
        raws = [bytes(rec.value) for hdr, recs in replay_log(tlog) if not hdr.is_control for rec in recs
                if rec.key is not None and txnrec.decode_key(rec.key) == "ov"]
        prepare, complete = raws[-2], raws[-1]
        assert prepare[:2] == complete[:2] == b"\x00\x01"  # value version 1 (ClientTransactionVersion tag)
        v = txnrec.decode_value(prepare)
        assert (v.status, v.producer_id, v.producer_epoch, v.next_producer_id, v.client_transaction_version) == (
            TxnState.PREPARE_COMMIT.id, old, 32767, new, 2)
        back = TransactionMetadata.from_log("ov", txnrec.decode_value(complete))
        assert (back.state, back.producer_id, back.producer_epoch, back.previous_producer_id,
                back.client_transaction_version) == (TxnState.COMPLETE_COMMIT, new, 0, old, 2)

    run_broker(tmp_path, scenario)

