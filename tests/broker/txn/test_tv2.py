"""Transactions version 2 (KIP-890 part 2) against a real ``tidelog serve``, over the raw protocol (tidelog's codec
through ``helpers.RawClient``): the ``transaction.version`` feature, EndTxn v5's epoch bump and its answer, Produce
v12's implicit AddPartitionsToTxn, and the torn transaction of Jepsen's Bufstream analysis: a delayed
EndTxn(commit) of transaction N, sent (its bytes encoded up front, written to the socket later) after transaction
N+1 of the same producer began. Under version 1 it commits N+1's partial writes, as Kafka does; under version 2 it
is fenced and N+1 stays whole."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from helpers import RawClient, create_topic_raw, wait_for

from tidelog.protocol.api_keys import ApiKey
from tidelog.records.batch import build_batch, decode_batches

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID, API_VERSIONS = 0, 1, 2, 22, 18
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT, DESCRIBE_TXNS, UPDATE_FEATURES = 24, 25, 26, 28, 65, 57
NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED = 0, 47, 48, 51, 90
TRANSACTION_ABORTABLE, INVALID_UPDATE_VERSION = 120, 95
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _init(c: RawClient, tid: str) -> tuple[int, int]:
    r = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                        "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == NONE, r
    return r["producer_id"], r["producer_epoch"]


def _add(c: RawClient, tid: str, pid: int, epoch: int, topic: str, parts: list[int]) -> set[int]:
    r = c.request(ADD_PARTITIONS, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                      "v3_and_below_producer_epoch": epoch,
                                      "v3_and_below_topics": [{"name": topic, "partitions": parts}]})
    return {p["partition_error_code"] for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def _end_body(tid: str, pid: int, epoch: int, commit: bool) -> dict:
    return {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit}


def _produce(c: RawClient, tid: str, topic: str, partition: int, pid: int, epoch: int, seq: int, version: int,
             values: tuple[bytes, ...] = (b"v",)) -> int:
    batch = build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)
    body = {"transactional_id": tid, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    return int(c.request(PRODUCE, version, body)["responses"][0]["partition_responses"][0]["error_code"])


def _produce_retrying(c: RawClient, *args: Any, **kw: Any) -> int:
    """Produce v12 right after EndTxn: the previous transaction's markers may still be in flight, so the implicit
    add answers CONCURRENT_TRANSACTIONS (mapped to the retriable NOT_ENOUGH_REPLICAS, 19) until they are written."""
    last = [-1]

    def attempt() -> bool:
        last[0] = _produce(c, *args, **kw)
        return last[0] != 19

    wait_for(attempt, 10, "produce after the previous transaction completed")
    return last[0]


def _lso(c: RawClient, topic: str, partition: int, isolation: int) -> int:
    body = {"replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}
    p = c.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
    assert p["error_code"] == NONE, p
    return int(p["offset"])


def _committed_values(c: RawClient, topic: str, partition: int) -> list[bytes]:
    """What a read_committed consumer reads from ``partition``."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": READ_COMMITTED, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    part = c.request(FETCH, 11, body)["responses"][0]["partitions"][0]
    pending = sorted((a["first_offset"], a["producer_id"]) for a in part.get("aborted_transactions") or ())
    aborting: set[int] = set()  # the consumer's rule: from an aborted transaction's first offset to its marker
    out = []
    for _, h, recs in decode_batches(bytes(part["records"] or b"")):
        while pending and pending[0][0] <= h.base_offset:
            aborting.add(pending.pop(0)[1])
        if h.is_control:
            aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        out.extend(r.value for r in recs)
    return out


def _markers(c: RawClient, topic: str, partition: int) -> list[Any]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": READ_UNCOMMITTED, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    data = c.request(FETCH, 11, body)["responses"][0]["partitions"][0]["records"]
    return [h for _, h, _ in decode_batches(bytes(data or b"")) if h.is_control]


def _state(c: RawClient, tid: str) -> dict:
    return c.request(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]})["transaction_states"][0]


def _complete(c: RawClient, tid: str) -> dict:
    return wait_for(lambda: (s := _state(c, tid))["transaction_state"].startswith("Complete") and s, 10,
                    "the transaction to complete")


@pytest.fixture(scope="module")
def broker(broker_factory: Any) -> Any:
    return broker_factory({"transaction.max.timeout.ms": "60000"})


# ---------------------------------------------------------------------------------------------- the feature


def _tv(c: RawClient) -> tuple[dict, dict, int]:
    r = c.request(API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"})
    sup = {f["name"]: (f["min_version"], f["max_version"]) for f in r["supported_features"]}
    fin = {f["name"]: f["max_version_level"] for f in r["finalized_features"]}
    return sup, fin, r["finalized_features_epoch"]


def _update_tv(c: RawClient, level: int, upgrade_type: int) -> dict:
    return c.request(UPDATE_FEATURES, 1, {"timeout_ms": 5000, "validate_only": False, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": level, "upgrade_type": upgrade_type}]})


def test_transaction_version_is_finalized_at_2_and_can_be_lowered(broker_factory: Any) -> None:
    b = broker_factory({})  # its own broker: the level changes here
    with RawClient(b.port) as c:
        sup, fin, epoch = _tv(c)
        assert sup["transaction.version"] == (0, 2) and fin["transaction.version"] == 2
        assert _update_tv(c, 1, 1)["error_code"] == INVALID_UPDATE_VERSION  # a downgrade typed as an upgrade
        assert _update_tv(c, 3, 1)["error_code"] == INVALID_UPDATE_VERSION  # above the supported range
        assert _update_tv(c, 0, 2)["error_code"] == NONE  # safe downgrade: transactions v2 off
        sup, fin, epoch2 = _tv(c)
        assert "transaction.version" not in fin and epoch2 == epoch + 1  # level 0 is not listed, as Kafka
        tid, topic = "tv-off", _topic("tvoff")
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
        pid, ep = _init(c, tid)
        # level 0: Produce v12 of a transactional batch is verified as v11 (the partition must have been added)
        assert _produce(c, tid, topic, 0, pid, ep, 0, version=12) == TRANSACTION_ABORTABLE
        # and TxnOffsetCommit v5 as v4 (the offsets partition must have been added by AddOffsetsToTxn)
        assert _txn_offset_commit(c, tid, "g-tv-off", pid, ep, topic, 1, version=5) == TRANSACTION_ABORTABLE
        assert _update_tv(c, 2, 1)["error_code"] == NONE
        assert _tv(c)[1]["transaction.version"] == 2
        assert _produce(c, tid, topic, 0, pid, ep, 0, version=12) == NONE  # added implicitly now


# ---------------------------------------------------------------------------------------------- EndTxn v5


def test_end_txn_v5_bumps_the_epoch_and_returns_it(broker: Any) -> None:
    tid, topic = "tv2-bump", _topic("bump")
    with RawClient(broker.port) as c:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == NONE
        pid, e = _init(c, tid)
        # no AddPartitionsToTxn: Produce v12 adds each partition at the coordinator
        assert _produce(c, tid, topic, 0, pid, e, 0, version=12, values=(b"a",)) == NONE
        assert _produce(c, tid, topic, 1, pid, e, 0, version=12, values=(b"b",)) == NONE
        s = _state(c, tid)
        assert (s["transaction_state"], s["topics"]) == ("Ongoing", [{"topic": topic, "partitions": [0, 1]}])
        r = c.request(END_TXN, 5, _end_body(tid, pid, e, True))
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (NONE, pid, e + 1)
        s = _complete(c, tid)
        assert (s["transaction_state"], s["producer_id"], s["producer_epoch"]) == ("CompleteCommit", pid, e + 1)
        [m0] = _markers(c, topic, 0)
        assert (m0.producer_id, m0.producer_epoch) == (pid, e + 1)  # the marker carries the bumped epoch
        assert _committed_values(c, topic, 0) == [b"a"] and _committed_values(c, topic, 1) == [b"b"]
        # a retry of that EndTxn (the old epoch): the answer it would have got, with the current id and epoch
        r = c.request(END_TXN, 5, _end_body(tid, pid, e, True))
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (NONE, pid, e + 1)
        assert c.request(END_TXN, 5, _end_body(tid, pid, e, False))["error_code"] == INVALID_TXN_STATE
        # the current epoch in CompleteCommit is the next transaction's, which added nothing: no commit
        assert c.request(END_TXN, 5, _end_body(tid, pid, e + 1, True))["error_code"] == INVALID_TXN_STATE
        assert c.request(END_TXN, 5, _end_body(tid, pid, e - 1, True))["error_code"] == PRODUCER_FENCED
        assert c.request(END_TXN, 5, _end_body(tid, pid, e + 2, True))["error_code"] == PRODUCER_FENCED
        # the next transaction: epoch e+1, sequences from 0; an abort bumps again
        assert _produce_retrying(c, tid, topic, 0, pid, e + 1, 0, version=12, values=(b"x",)) == NONE
        r = c.request(END_TXN, 5, _end_body(tid, pid, e + 1, False))
        assert (r["error_code"], r["producer_epoch"]) == (NONE, e + 2)
        assert _complete(c, tid)["transaction_state"] == "CompleteAbort"
        assert _committed_values(c, topic, 0) == [b"a"]
        # a stale batch of the old epoch is refused once the epoch moved on
        assert _produce(c, tid, topic, 0, pid, e, 1, version=12) in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED)
        # version 2 lets a client abort a transaction that added nothing: PrepareAbort without partitions, a bump
        r = c.request(END_TXN, 5, _end_body(tid, pid, e + 2, False))
        assert (r["error_code"], r["producer_epoch"]) == (NONE, e + 3)
        s = _complete(c, tid)
        assert (s["transaction_state"], s["producer_epoch"], s["topics"]) == ("CompleteAbort", e + 3, [])
        r = c.request(END_TXN, 5, _end_body(tid, pid, e + 2, False))  # its retry
        assert (r["error_code"], r["producer_epoch"]) == (NONE, e + 3)
        assert c.request(END_TXN, 5, _end_body(tid, pid, e + 2, True))["error_code"] == INVALID_TXN_STATE


def test_end_txn_v4_keeps_version_1(broker: Any) -> None:
    """A client of EndTxn <= v4 (AddPartitionsToTxn, Produce <= v11) keeps its epoch across transactions."""
    tid, topic = "tv1-keep", _topic("keep")
    with RawClient(broker.port) as c:
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
        pid, e = _init(c, tid)
        for seq in (0, 1):
            assert _add(c, tid, pid, e, topic, [0]) == {NONE}
            assert _produce(c, tid, topic, 0, pid, e, seq, version=11) == NONE
            r = c.request(END_TXN, 4, _end_body(tid, pid, e, True))
            assert r["error_code"] == NONE
            s = _complete(c, tid)
            assert (s["producer_id"], s["producer_epoch"]) == (pid, e)
        assert [(m.producer_epoch) for m in _markers(c, topic, 0)] == [e, e]


# ---------------------------------------------------------------------------------------------- torn transaction


def _torn(broker: Any, version2: bool) -> None:
    tid, topic = f"torn-{'v2' if version2 else 'v1'}-{uuid.uuid4().hex[:6]}", _topic("torn")
    end_v, produce_v = (5, 12) if version2 else (4, 11)
    with RawClient(broker.port) as c, RawClient(broker.port) as late:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == NONE
        pid, e = _init(c, tid)
        # transaction N: one record on each partition
        if not version2:
            assert _add(c, tid, pid, e, topic, [0, 1]) == {NONE}
        assert _produce(c, tid, topic, 0, pid, e, 0, produce_v, (b"N-0",)) == NONE
        assert _produce(c, tid, topic, 1, pid, e, 0, produce_v, (b"N-1",)) == NONE
        # the client's EndTxn(commit) of N: its bytes are encoded now and reach the coordinator only later (a
        # retry of a request whose first copy went through, delayed in the network)
        _, delayed = late.conn.send(END_TXN, end_v, _end_body(tid, pid, e, True))
        r = c.request(END_TXN, end_v, _end_body(tid, pid, e, True))
        assert r["error_code"] == NONE
        e1 = r["producer_epoch"] if version2 else e
        assert e1 == (e + 1 if version2 else e)
        _complete(c, tid)
        # transaction N+1 begins and writes to partition 0 only (so far)
        if not version2:
            assert _add(c, tid, pid, e1, topic, [0, 1]) == {NONE}
        seq = 0 if version2 else 1
        assert _produce_retrying(c, tid, topic, 0, pid, e1, seq, version=produce_v, values=(b"N+1-0",)) == NONE
        # now the delayed EndTxn(commit) of N arrives
        late.send(delayed)
        answer = late.response()["error_code"]
        if not version2:
            # version 1 (Kafka's behaviour too): the coordinator cannot tell it from N+1's commit and applies it
            assert answer == NONE
            _complete(c, tid)
            assert _committed_values(c, topic, 0) == [b"N-0", b"N+1-0"]  # N+1 torn: half of it committed
            # the rest of N+1 is refused (KIP-890 part 1: partition 1 is in no open transaction any more)
            assert _produce(c, tid, topic, 1, pid, e1, 1, produce_v, (b"N+1-1",)) == TRANSACTION_ABORTABLE
            assert _committed_values(c, topic, 1) == [b"N-1"]
            return
        assert answer == PRODUCER_FENCED  # version 2: the epoch moved on with N's commit
        s = _state(c, tid)
        assert (s["transaction_state"], s["producer_epoch"]) == ("Ongoing", e1)
        assert _lso(c, topic, 0, READ_COMMITTED) < _lso(c, topic, 0, READ_UNCOMMITTED)  # N+1 still open
        assert _committed_values(c, topic, 0) == [b"N-0"]
        assert _produce(c, tid, topic, 1, pid, e1, 0, produce_v, (b"N+1-1",)) == NONE
        r = c.request(END_TXN, end_v, _end_body(tid, pid, e1, True))
        assert (r["error_code"], r["producer_epoch"]) == (NONE, e1 + 1)
        _complete(c, tid)
        wait_for(lambda: _committed_values(c, topic, 1) == [b"N-1", b"N+1-1"], 10, "N+1 committed whole")
        assert _committed_values(c, topic, 0) == [b"N-0", b"N+1-0"]


def test_torn_transaction_under_version_1(broker: Any) -> None:
    _torn(broker, version2=False)


def test_delayed_end_txn_is_fenced_under_version_2(broker: Any) -> None:
    _torn(broker, version2=True)


# ---------------------------------------------------------------------------------------------- TxnOffsetCommit v5

OFFSET_FETCH = ApiKey.OFFSET_FETCH


def _txn_offset_commit(c: RawClient, tid: str, group: str, pid: int, epoch: int, topic: str, offset: int,
                       version: int) -> int:
    r = c.request(TXN_OFFSET_COMMIT, version, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return int(r["topics"][0]["partitions"][0]["error_code"])


def _committed_offset(c: RawClient, group: str, topic: str) -> int:
    r = c.request(OFFSET_FETCH, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                    "require_stable": True})
    p = r["topics"][0]["partitions"][0]
    return int(p["committed_offset"]) if p["error_code"] == NONE else -2


def test_txn_offset_commit_v5_adds_the_offsets_partition(broker: Any) -> None:
    """Transactions v2: no AddOffsetsToTxn; TxnOffsetCommit v5 adds the group's ``__consumer_offsets`` partition to
    the transaction and EndTxn v5 commits the offsets with the records. v4 still needs AddOffsetsToTxn."""
    tid, topic, group = "tv2-offsets", _topic("offs"), _topic("g")
    with RawClient(broker.port) as c:
        assert create_topic_raw(c, topic, partitions=1)["error_code"] == NONE
        pid, e = _init(c, tid)
        assert _produce(c, tid, topic, 0, pid, e, 0, version=12) == NONE
        assert _txn_offset_commit(c, tid, group, pid, e, topic, 7, version=4) == INVALID_TXN_STATE
        assert _txn_offset_commit(c, tid, group, pid, e, topic, 7, version=5) == NONE
        assert {t["topic"] for t in _state(c, tid)["topics"]} == {topic, "__consumer_offsets"}
        r = c.request(END_TXN, 5, _end_body(tid, pid, e, True))
        assert (r["error_code"], r["producer_epoch"]) == (NONE, e + 1)
        _complete(c, tid)
        wait_for(lambda: _committed_offset(c, group, topic) == 7, 10, "the transactional offset committed")
