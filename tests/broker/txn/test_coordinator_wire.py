"""The transaction coordinator over the wire, against a real ``tidelog serve``: the raw protocol for exact error
codes (tidelog's codec through ``helpers.RawClient``), confluent-kafka's transactional producer for the client
flows, fencing, broker restarts (mid-transaction; kill -9 after PrepareCommit was written) and the timeout abort."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from helpers import RawClient, create_topic_raw, metric_value, wait_for

from tidelog.broker.txn import records as txnrec
from tidelog.broker.txn.state import TxnState
from tidelog.protocol.codec import SUPPORTED_VERSIONS
from tidelog.records.batch import build_batch, decode_batches

PRODUCE, FETCH, LIST_OFFSETS, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 1, 2, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_TXN_MARKERS, DESCRIBE_TXNS, LIST_TXNS = 24, 25, 26, 27, 65, 66

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 0, 3, 42
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 47, 48, 49
INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, OPERATION_NOT_ATTEMPTED = 50, 51, 55
PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND, TRANSACTION_ABORTABLE = 90, 105, 120

BROKER_OVERRIDES = {"transaction.max.timeout.ms": "60000", "group.initial.rebalance.delay.ms": "0"}


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _init(c: RawClient, tid: str, timeout_ms: int = 30000, version: int = 4, pid: int = -1, epoch: int = -1) -> dict:
    return c.request(INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout_ms": timeout_ms,
                                                 "producer_id": pid, "producer_epoch": epoch})


def _add(c: RawClient, tid: str, pid: int, epoch: int, parts: dict[str, list[int]], version: int = 3) -> dict:
    body = {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in parts.items()]}
    resp = c.request(ADD_PARTITIONS, version, body)
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def _end(c: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return c.request(END_TXN, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": commit})["error_code"]


def _describe(c: RawClient, tid: str) -> dict:
    return c.request(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]})["transaction_states"][0]


def _produce_txn(c: RawClient, tid: str | None, topic: str, partition: int, pid: int, epoch: int, seq: int,
                 version: int = 9, values: tuple[bytes, ...] = (b"v",)) -> dict:
    batch = build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)
    body = {"transactional_id": tid, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    return c.request(PRODUCE, version, body)["responses"][0]["partition_responses"][0]


def _offsets(c: RawClient, topic: str, partition: int, isolation: int) -> int:
    body = {"replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}
    p = c.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
    assert p["error_code"] == NONE, p
    return p["offset"]


def _control_batches(c: RawClient, topic: str, partition: int) -> list[Any]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    data = c.request(FETCH, 11, body)["responses"][0]["partitions"][0]["records"]
    return [h for _, h, _ in decode_batches(bytes(data or b""))if h.is_control]


@pytest.fixture(scope="module")
def txn_broker(broker_factory: Any) -> Any:
    """One broker for this module's checks (each test uses its own transactional ids and topics)."""
    return broker_factory(BROKER_OVERRIDES)


# ---------------------------------------------------------------------------------------------- raw protocol


def test_find_coordinator_and_init_producer_id(txn_broker: Any) -> None:
    with RawClient(txn_broker.port) as c:
        r = c.request(FIND_COORDINATOR, 3, {"key": "raw-find", "key_type": 1})
        assert (r["error_code"], r["node_id"], r["port"]) == (NONE, 0, txn_broker.port)
        r = c.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["a", ""]})
        assert [k["error_code"] for k in r["coordinators"]] == [NONE, INVALID_REQUEST]
        assert _init(c, "raw-init", timeout_ms=60001)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        assert _init(c, "raw-init", timeout_ms=0)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        first = _init(c, "raw-init")
        assert first["error_code"] == NONE and first["producer_id"] >= 0 and first["producer_epoch"] == 0
        again = _init(c, "raw-init")  # a new producer instance: same id, epoch bumped
        assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1)
        # KIP-360 bump with the current epoch, then a stale one: fenced (INVALID_PRODUCER_EPOCH before v4)
        bumped = _init(c, "raw-init", pid=first["producer_id"], epoch=1)
        assert (bumped["error_code"], bumped["producer_epoch"]) == (NONE, 2)
        assert _init(c, "raw-init", pid=first["producer_id"], epoch=0)["error_code"] == PRODUCER_FENCED
        assert _init(c, "raw-init", version=3, pid=first["producer_id"], epoch=0)["error_code"] == INVALID_PRODUCER_EPOCH
        assert _init(c, "raw-init", pid=first["producer_id"], epoch=-1)["error_code"] == INVALID_REQUEST
        d = _describe(c, "raw-init")
        assert (d["error_code"], d["transaction_state"], d["producer_epoch"]) == (NONE, "Empty", 2)
        assert _describe(c, "never-seen")["error_code"] == TRANSACTIONAL_ID_NOT_FOUND


def test_transaction_errors_and_commit_over_the_wire(txn_broker: Any) -> None:
    topic = _topic("raw")
    tid = "raw-commit"
    with RawClient(txn_broker.port) as c:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == NONE
        init = _init(c, tid)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # KIP-890: a transactional batch for a partition not in the transaction is refused, nothing appended
        assert _produce_txn(c, tid, topic, 0, pid, epoch, 0, version=9)["error_code"] == INVALID_TXN_STATE
        assert _produce_txn(c, tid, topic, 0, pid, epoch, 0, version=11)["error_code"] == TRANSACTION_ABORTABLE
        assert _produce_txn(c, None, topic, 0, pid, epoch, 0)["error_code"] == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _offsets(c, topic, 0, 0) == 0
        # one unknown partition: nothing added, the others OPERATION_NOT_ATTEMPTED
        errs = _add(c, tid, pid, epoch, {topic: [0, 7], "no-such-topic": [0]})
        assert errs == {(topic, 0): OPERATION_NOT_ATTEMPTED, (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                        ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert _describe(c, tid)["transaction_state"] == "Empty"
        assert _add(c, tid, pid, epoch + 1, {topic: [0]}) == {(topic, 0): PRODUCER_FENCED}
        assert _add(c, tid, pid, epoch + 1, {topic: [0]}, version=1) == {(topic, 0): INVALID_PRODUCER_EPOCH}
        assert _add(c, tid, pid + 1000, epoch, {topic: [0]}) == {(topic, 0): INVALID_PRODUCER_ID_MAPPING}
        assert _end(c, tid, pid, epoch, True) == INVALID_TXN_STATE  # Empty: nothing to end
        assert _add(c, tid, pid, epoch, {topic: [0]}) == {(topic, 0): NONE}
        # the brokers' batched form (v4+): verify_only answers per partition and adds nothing
        r = c.request(ADD_PARTITIONS, 4, {"transactions": [{
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
            "topics": [{"name": topic, "partitions": [0, 1]}]}]})
        got = {p["partition_index"]: p["partition_error_code"]
               for t in r["results_by_transaction"][0]["topic_results"] for p in t["results_by_partition"]}
        assert (r["error_code"], got) == (NONE, {0: NONE, 1: TRANSACTION_ABORTABLE})
        assert _produce_txn(c, tid, topic, 0, pid, epoch, 0, values=(b"a", b"b"))["error_code"] == NONE
        assert _offsets(c, topic, 0, 1) == 0 < _offsets(c, topic, 0, 0) == 2  # LSO held by the open transaction
        d = _describe(c, tid)
        assert (d["transaction_state"], d["topics"]) == ("Ongoing", [{"topic": topic, "partitions": [0]}])
        assert d["transaction_start_time_ms"] > 0 and d["transaction_timeout_ms"] == 30000
        # ListTransactions: state / producer / duration / pattern filters
        r = c.request(LIST_TXNS, 0, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": []})
        assert r["unknown_state_filters"] == ["Bogus"]
        assert {"transactional_id": tid, "producer_id": pid, "transaction_state": "Ongoing"} in r["transaction_states"]
        r = c.request(LIST_TXNS, 0, {"state_filters": [], "producer_id_filters": [pid]})
        assert [t["transactional_id"] for t in r["transaction_states"]] == [tid]
        r = c.request(LIST_TXNS, 1, {"state_filters": [], "producer_id_filters": [pid], "duration_filter": 3_600_000})
        assert r["transaction_states"] == []
        r = c.request(LIST_TXNS, 2, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                                     "transactional_id_pattern": "raw-comm.*"})
        assert [t["transactional_id"] for t in r["transaction_states"]] == [tid]
        assert metric_value(txn_broker, "tidelog_txn_open_transactions") >= 1
        latency_count = metric_value(txn_broker, "tidelog_txn_marker_latency_seconds_count")
        assert _end(c, tid, pid, epoch + 1, True) == PRODUCER_FENCED
        assert _end(c, tid, pid, epoch + 1, True, version=1) == INVALID_PRODUCER_EPOCH
        assert _end(c, tid, pid, epoch, True) == NONE
        wait_for(lambda: _describe(c, tid)["transaction_state"] == "CompleteCommit", 10, "CompleteCommit")
        assert _end(c, tid, pid, epoch, True) == NONE  # a retried commit of a completed commit: NONE
        assert _end(c, tid, pid, epoch, False) == INVALID_TXN_STATE
        assert _offsets(c, topic, 0, 1) == _offsets(c, topic, 0, 0) == 3  # marker written, LSO = HW
        [marker] = _control_batches(c, topic, 0)
        assert (marker.producer_id, marker.producer_epoch, marker.is_transactional) == (pid, epoch, True)
        assert metric_value(txn_broker, "tidelog_txn_marker_latency_seconds_count") == latency_count + 1


def test_write_txn_markers_and_add_offsets(txn_broker: Any) -> None:
    topic = _topic("mark")
    tid = "raw-offsets"
    with RawClient(txn_broker.port) as c:
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
        init = _init(c, tid)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # AddOffsetsToTxn adds __consumer_offsets-<partition of the group>
        r = c.request(ADD_OFFSETS, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                       "group_id": "g-txn"})
        assert r["error_code"] == NONE
        d = _describe(c, tid)
        assert d["topics"] == [{"topic": "__consumer_offsets", "partitions": [txnrec.partition_for("g-txn", 50)]}]
        r = c.request(ADD_OFFSETS, 1, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch + 1,
                                       "group_id": "g-txn"})
        assert r["error_code"] == INVALID_PRODUCER_EPOCH
        assert _end(c, tid, pid, epoch, False) == NONE
        wait_for(lambda: _describe(c, tid)["transaction_state"] == "CompleteAbort", 10, "CompleteAbort")
        # the partition leader's side, as a remote coordinator would ask: per-partition answers
        r = c.request(WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 4242, "producer_epoch": 3, "transaction_result": True, "coordinator_epoch": 0,
            "topics": [{"name": topic, "partition_indexes": [0, 5]}, {"name": "no-such", "partition_indexes": [0]}]}]})
        [m] = r["markers"]
        got = {(t["name"], p["partition_index"]): p["error_code"] for t in m["topics"] for p in t["partitions"]}
        assert m["producer_id"] == 4242
        assert got == {(topic, 0): NONE, (topic, 5): UNKNOWN_TOPIC_OR_PARTITION, ("no-such", 0): UNKNOWN_TOPIC_OR_PARTITION}
        [marker] = _control_batches(c, topic, 0)
        assert (marker.producer_id, marker.producer_epoch) == (4242, 3)
        # an older epoch of that producer is refused by the log
        r = c.request(WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 4242, "producer_epoch": 2, "transaction_result": False, "coordinator_epoch": 0,
            "topics": [{"name": topic, "partition_indexes": [0]}]}]})
        assert r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == INVALID_PRODUCER_EPOCH
        assert len(_control_batches(c, topic, 0)) == 1


# ---------------------------------------------------------------------------------------------- confluent-kafka


def _producer(b: Any, tid: str, **conf: Any) -> Producer:
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    p.init_transactions(20)
    return p


def _read_committed(b: Any, topic: str, partitions: int, expect: int, timeout: float = 15.0) -> list[bytes]:
    """Every committed value (read_committed) up to the end of each partition, waiting for ``expect`` of them."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    try:
        def done() -> bool:
            while (m := c.poll(0.2)) is not None:
                if not m.error():
                    got.append(m.value())
            return len(got) >= expect
        wait_for(done, timeout, f"{expect} committed records")
        for _ in range(3):  # nothing more arrives (e.g. aborted records)
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def test_confluent_commit_and_abort(txn_broker: Any) -> None:
    topic = _topic("cf")
    with RawClient(txn_broker.port) as c:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == NONE
    p = _producer(txn_broker, "cf-commit")
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=b"a%d" % i, partition=i % 2)
    p.flush(20)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce(topic, value=b"c-last", partition=0)
    p.commit_transaction(20)
    got = _read_committed(txn_broker, topic, 2, 7)
    assert sorted(got) == sorted([b"c%d" % i for i in range(6)] + [b"c-last"])
    with RawClient(txn_broker.port) as c:
        d = _describe(c, "cf-commit")
        assert (d["transaction_state"], d["topics"]) == ("CompleteCommit", [])
        for part in (0, 1):
            assert _offsets(c, topic, part, 1) == _offsets(c, topic, part, 0)  # LSO caught up with the HW


def test_a_second_producer_fences_the_first(txn_broker: Any) -> None:
    topic = _topic("fence")
    with RawClient(txn_broker.port) as c:
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
    p1 = _producer(txn_broker, "cf-fence")
    p1.begin_transaction()
    p1.produce(topic, value=b"zombie", partition=0)
    p1.flush(20)
    p2 = _producer(txn_broker, "cf-fence")  # aborts p1's transaction with epoch 1 (PrepareEpochFence), retries
    with RawClient(txn_broker.port) as c:
        d = _describe(c, "cf-fence")
        # fenced at epoch 1, aborted at 2 (the coordinator's own abort runs at the finalized transaction.version,
        # 2: one more bump, as Kafka 4's), then bumped by p2's InitProducerId
        assert (d["transaction_state"], d["producer_epoch"]) == ("Empty", 3)
    with pytest.raises(KafkaException) as info:
        p1.produce(topic, value=b"zombie-2", partition=0)
        p1.commit_transaction(20)
    err = info.value.args[0]
    assert err.fatal() and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                          KafkaError.INVALID_PRODUCER_EPOCH), err
    p2.begin_transaction()
    p2.produce(topic, value=b"p2", partition=0)
    p2.commit_transaction(20)
    assert _read_committed(txn_broker, topic, 1, 1) == [b"p2"]


def test_restart_mid_transaction_then_commit(broker_factory: Any) -> None:
    b = broker_factory(BROKER_OVERRIDES)
    topic = _topic("restart")
    with RawClient(b.port) as c:
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
    p = _producer(b, "cf-restart")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"r%d" % i, partition=0)
    p.flush(20)
    b.restart()  # clean restart: the Ongoing state is reloaded from __transaction_state
    with RawClient(b.port) as c:
        d = wait_for(lambda: (r := _describe(c, "cf-restart"))["error_code"] == NONE and r, 20, "loaded")
        assert d["transaction_state"] == "Ongoing" and d["topics"] == [{"topic": topic, "partitions": [0]}]
    p.commit_transaction(30)
    assert sorted(_read_committed(b, topic, 1, 3)) == [b"r0", b"r1", b"r2"]


def test_kill_after_prepare_commit_completes_at_restart(broker_factory: Any) -> None:
    """The broker dies after PrepareCommit is in __transaction_state and before any marker: the restarted
    coordinator finds it at load, writes the markers and CompleteCommit, exactly once."""
    b = broker_factory(BROKER_OVERRIDES)
    topic = _topic("prep")
    tid = "cf-prepare"
    with RawClient(b.port) as c:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == NONE
    p = _producer(b, tid)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=b"p%d" % i, partition=i % 2)
    p.flush(20)
    with RawClient(b.port, client_id="__admin_client") as c:
        d = _describe(c, tid)
        assert d["transaction_state"] == "Ongoing"
        # the record the coordinator writes for EndTxn(commit), appended as it would be, then kill -9 before
        # anything else happens (the coordinator's memory still says Ongoing and sends no marker)
        value = txnrec.TxnLogValue(d["producer_id"], d["producer_epoch"], d["transaction_timeout_ms"],
                                   TxnState.PREPARE_COMMIT.id, {topic: [0, 1]}, d["transaction_start_time_ms"] + 1,
                                   d["transaction_start_time_ms"])
        batch = build_batch([(txnrec.encode_key(tid), txnrec.encode_value(value))])
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": "__transaction_state", "partition_data": [
                    {"index": txnrec.partition_for(tid, 50), "records": batch}]}]}
        assert c.request(PRODUCE, 9, body)["responses"][0]["partition_responses"][0]["error_code"] == NONE
        assert _offsets(c, topic, 0, 1) == 0  # no marker yet
    b.kill()
    b.start()
    with RawClient(b.port) as c:
        wait_for(lambda: _describe(c, tid)["transaction_state"] == "CompleteCommit", 20, "commit completed")
        for part in (0, 1):
            assert len(_control_batches(c, topic, part)) == 1  # one COMMIT marker per partition, exactly once
            assert _offsets(c, topic, part, 1) == _offsets(c, topic, part, 0) == 3
    assert sorted(_read_committed(b, topic, 2, 4)) == [b"p0", b"p1", b"p2", b"p3"]


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(broker_factory: Any) -> None:
    b = broker_factory({**BROKER_OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = _topic("timeout")
    tid = "cf-timeout"
    with RawClient(b.port) as c:
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
    p = _producer(b, tid, **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic, value=b"late", partition=0)
    p.flush(20)
    with RawClient(b.port) as c:
        epoch = _describe(c, tid)["producer_epoch"]
        d = wait_for(lambda: (r := _describe(c, tid))["transaction_state"] == "CompleteAbort" and r, 15, "timeout abort")
        # fenced (epoch + 1), then the abort bumps once more: the coordinator's own abort runs at the finalized
        # transaction.version, 2 (Kafka 4: "not from client, use server TV")
        assert d["producer_epoch"] == epoch + 2
        assert [h.producer_epoch for h in _control_batches(c, topic, 0)] == [epoch + 2]
        assert _offsets(c, topic, 0, 1) == _offsets(c, topic, 0, 0) == 2  # the LSO moved past the aborted txn
    with pytest.raises(KafkaException) as info:
        p.commit_transaction(20)
    assert info.value.args[0].fatal(), info.value.args[0]  # fenced by the bumped epoch
    assert _read_committed(b, topic, 1, 0, timeout=2) == []


def test_every_advertised_version_of_the_transaction_apis(txn_broker: Any) -> None:
    with RawClient(txn_broker.port) as c:
        for v in range(SUPPORTED_VERSIONS[INIT_PRODUCER_ID][0], SUPPORTED_VERSIONS[INIT_PRODUCER_ID][1] + 1):
            r = _init(c, f"ver-{v}", version=v)
            assert (r["error_code"], r["producer_epoch"]) == (NONE, 0), v
        lo, hi = SUPPORTED_VERSIONS[END_TXN]
        for v in range(lo, hi + 1):
            r = c.request(END_TXN, v, {"transactional_id": "ver-none", "producer_id": 1, "producer_epoch": 0,
                                       "committed": True})
            assert r["error_code"] == INVALID_PRODUCER_ID_MAPPING, v
            if v >= 5:
                assert (r["producer_id"], r["producer_epoch"]) == (-1, -1)
        lo, hi = SUPPORTED_VERSIONS[ADD_OFFSETS]
        for v in range(lo, hi + 1):
            r = c.request(ADD_OFFSETS, v, {"transactional_id": "ver-none", "producer_id": 1, "producer_epoch": 0,
                                           "group_id": "g"})
            assert r["error_code"] == INVALID_PRODUCER_ID_MAPPING, v
        for v in range(4):
            assert _add(c, "ver-none", 1, 0, {"no-such": [0]}, version=v) == {("no-such", 0): UNKNOWN_TOPIC_OR_PARTITION}
        for v in range(3):
            body: dict[str, Any] = {"state_filters": ["Empty"], "producer_id_filters": []}
            body.update({"duration_filter": -1} if v >= 1 else {})
            r = c.request(LIST_TXNS, v, body)
            assert r["error_code"] == NONE and {"ver-0", "ver-1"} <= {t["transactional_id"] for t in r["transaction_states"]}
