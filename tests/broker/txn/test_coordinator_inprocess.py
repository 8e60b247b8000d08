"""The transaction coordinator in a real in-process broker, requests through the real codec: the cases that need
the event loop held still (a commit in flight) or a state hard to reach over the wire (an exhausted epoch), and the
expiration of idle transactional ids (tombstones that survive a restart)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tidelog.broker.txn.state import TxnState
from tidelog.errors import ErrorCode

_spec = importlib.util.spec_from_file_location(
    "tidelog_test_admin_harness_txn", Path(__file__).parents[1] / "test_admin_handlers.py")
assert _spec is not None and _spec.loader is not None
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)
Harness, run_broker = _harness.Harness, _harness.run_broker

CREATE_TOPICS, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, DESCRIBE_TXNS = 19, 22, 24, 26, 65
NONE = 0  # "no error" stays a plain int (docs/decisions/0066)


async def _init(h: Harness, tid: str, pid: int = -1, epoch: int = -1) -> dict:
    return await h.call(INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                              "producer_id": pid, "producer_epoch": epoch})


async def _add(h: Harness, tid: str, pid: int, epoch: int, topic: str) -> int:
    r = await h.call(ADD_PARTITIONS, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                         "v3_and_below_producer_epoch": epoch,
                                         "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]


async def _end(h: Harness, tid: str, pid: int, epoch: int, commit: bool) -> int:
    r = await h.call(END_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "committed": commit})
    return r["error_code"]


async def _describe(h: Harness, tid: str) -> dict:
    return (await h.call(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]}))["transaction_states"][0]


async def _topic(h: Harness, name: str) -> None:
    r = await h.call(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                                    "assignments": [], "configs": []}],
                                        "timeout_ms": 10000, "validate_only": False})
    assert r["topics"][0]["error_code"] == NONE


def test_requests_while_a_commit_completes(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _topic(h, "t")
        init = await _init(h, "tx")
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert await _add(h, "tx", pid, epoch, "t") == NONE
        assert await _end(h, "tx", pid, epoch, True) == NONE
        # PrepareCommit is written and answered; the markers have not run yet (the loop has not been yielded)
        coord = h.broker.txn_coordinator
        assert coord.txns["tx"].state is TxnState.PREPARE_COMMIT
        assert (await _init(h, "tx"))["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
        assert await _add(h, "tx", pid, epoch, "t") == ErrorCode.CONCURRENT_TRANSACTIONS
        assert await _end(h, "tx", pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert await _end(h, "tx", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
        assert (await _describe(h, "tx"))["transaction_state"] == "PrepareCommit"
        await coord.completions["tx"]
        d = await _describe(h, "tx")
        assert (d["transaction_state"], d["topics"]) == ("CompleteCommit", [])
        assert h.broker.topics.get_log("t", 0).log_end_offset == 1  # the COMMIT marker
        again = await _init(h, "tx")
        assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (NONE, pid, epoch + 1)

    run_broker(tmp_path, scenario)


def test_exhausted_epoch_rotates_the_producer_id(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        first = await _init(h, "tx-ex")
        old = first["producer_id"]
        h.broker.txn_coordinator.txns["tx-ex"].producer_epoch = 32766  # Short.MaxValue - 1: cannot be bumped
        r = await _init(h, "tx-ex", pid=old, epoch=32766)  # KIP-360 bump at the last epoch: a new producer id
        assert r["error_code"] == NONE and r["producer_id"] != old and r["producer_epoch"] == 0
        retry = await _init(h, "tx-ex", pid=old, epoch=32766)  # the same request again (answer lost)
        assert (retry["error_code"], retry["producer_id"], retry["producer_epoch"]) == (NONE, r["producer_id"], 0)
        stale = await _init(h, "tx-ex", pid=old, epoch=5)
        assert stale["error_code"] == ErrorCode.PRODUCER_FENCED

    run_broker(tmp_path, scenario)


def test_idle_transactional_ids_expire_with_a_tombstone(tmp_path: Path) -> None:
    props = {"transactional.id.expiration.ms": "1000"}

    async def scenario(h: Harness) -> None:
        await _topic(h, "t")
        idle = await _init(h, "tx-idle")
        busy = await _init(h, "tx-busy")
        assert await _add(h, "tx-busy", busy["producer_id"], busy["producer_epoch"], "t") == NONE
        coord = h.broker.txn_coordinator
        later = coord.txns["tx-idle"].txn_last_update_timestamp + 1000
        assert await coord.remove_expired_transactional_ids(now_ms=later - 1) == 0
        assert await coord.remove_expired_transactional_ids(now_ms=later + 3_600_000) == 1  # Ongoing never expires
        assert (await _describe(h, "tx-idle"))["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert (await _describe(h, "tx-busy"))["transaction_state"] == "Ongoing"
        assert idle["producer_id"] >= 0

    async def after_restart(h: Harness) -> None:
        await h.broker.txn_coordinator.loaded.wait()
        assert (await _describe(h, "tx-idle"))["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert (await _describe(h, "tx-busy"))["transaction_state"] == "Ongoing"
        fresh = await _init(h, "tx-idle")  # starts over: a new producer id at epoch 0
        assert fresh["error_code"] == NONE and fresh["producer_epoch"] == 0

    run_broker(tmp_path, scenario, props)
    run_broker(tmp_path, after_restart, props)


def test_loading_gates_requests_and_batched_add_partitions(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _topic(h, "t")
        init = await _init(h, "tx-load")
        pid, epoch = init["producer_id"], init["producer_epoch"]
        coord = h.broker.txn_coordinator
        coord.loaded.clear()  # as while __transaction_state is replayed at start
        try:
            assert await coord.find_coordinator("tx-load") == (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
            assert (await _init(h, "tx-load"))["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert (await _describe(h, "tx-load"))["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            r = await h.call(66, 0, {"state_filters": [], "producer_id_filters": []})
            assert r["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        finally:
            coord.loaded.set()
        assert (await coord.find_coordinator("tx-load"))[1] == (h.broker.node_id, h.broker.host, h.broker.port)
        # AddPartitionsToTxn v5 from a broker, not verify_only: adds, per transaction
        r = await h.call(ADD_PARTITIONS, 5, {"transactions": [
            {"transactional_id": "tx-load", "producer_id": pid, "producer_epoch": epoch, "verify_only": False,
             "topics": [{"name": "t", "partitions": [0]}]},
            {"transactional_id": "tx-none", "producer_id": 1, "producer_epoch": 0, "verify_only": False,
             "topics": [{"name": "t", "partitions": [0]}]}]})
        got = {t["transactional_id"]: t["topic_results"][0]["results_by_partition"][0]["partition_error_code"]
               for t in r["results_by_transaction"]}
        assert got == {"tx-load": NONE, "tx-none": ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        d = await _describe(h, "tx-load")
        assert (d["transaction_state"], d["topics"]) == ("Ongoing", [{"topic": "t", "partitions": [0]}])

    run_broker(tmp_path, scenario)
