"""``__transaction_state`` key/value codecs against the bytes of Kafka's TransactionLogKey / TransactionLogValue
schemas (built here field by field from the JSON specs), and the state machine of the coordinator."""

from __future__ import annotations

import struct

import pytest

from tidelog.broker.group.records import java_string_hash
from tidelog.broker.txn import records as rec
from tidelog.broker.txn.records import TxnLogValue, partition_for
from tidelog.broker.txn.state import (
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
    is_epoch_exhausted,
)
from tidelog.errors import ErrorCode


def _s16(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


def test_key_is_version_0_then_the_transactional_id() -> None:
    assert rec.encode_key("tx-1") == b"\x00\x00" + b"\x00\x04tx-1"
    assert rec.decode_key(b"\x00\x00\x00\x04tx-1") == "tx-1"
    with pytest.raises(rec.TxnSchemaError):
        rec.decode_key(b"\x00\x01\x00\x04tx-1")  # another coordinator record type
    with pytest.raises(rec.TxnSchemaError):
        rec.decode_key(b"\x00\x00\x00\x09tx")  # length past the end


def test_value_v0_bytes_as_the_schema_lays_them_out() -> None:
    v = TxnLogValue(producer_id=1000, producer_epoch=3, transaction_timeout_ms=60000, status=1,
                    partitions={"orders": [0, 2], "__consumer_offsets": [17]}, last_update_timestamp_ms=1_700_000_000_123,
                    start_timestamp_ms=1_700_000_000_000)
    expected = (
        struct.pack(">h", 0)  # value version
        + struct.pack(">qhib", 1000, 3, 60000, 1)  # ProducerId, ProducerEpoch, TransactionTimeoutMs, Status
        + struct.pack(">i", 2)  # TransactionPartitions: 2 entries
        + _s16("orders") + struct.pack(">iii", 2, 0, 2)
        + _s16("__consumer_offsets") + struct.pack(">ii", 1, 17)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)  # LastUpdate, Start
    )
    assert rec.encode_value(v) == expected
    assert rec.decode_value(expected) == v


def test_value_empty_state_writes_null_partitions() -> None:
    v = TxnLogValue(5, 0, 1000, TxnState.EMPTY.id, {"ignored": [1]}, 10, -1)
    raw = rec.encode_value(v)
    assert raw[2 + 15:2 + 19] == struct.pack(">i", -1)  # null array after the 15 fixed bytes
    back = rec.decode_value(raw)
    assert back.partitions == {} and back.status == 0 and back.start_timestamp_ms == -1


def test_value_v1_flexible_with_tagged_fields() -> None:
    # v1: compact array/strings, a tag section per partitions entry, and the value's tags 0, 1, 2 (+ an unknown 3)
    body = (
        struct.pack(">h", 1) + struct.pack(">qhib", 7, 9, 30000, 2)
        + bytes([2])  # compact array of 1
        + bytes([2]) + b"t" + bytes([3]) + struct.pack(">ii", 4, 5) + b"\x00"
        + struct.pack(">qq", 200, 100)
        + bytes([4])  # four tagged fields
        + bytes([0, 8]) + struct.pack(">q", 6)
        + bytes([1, 8]) + struct.pack(">q", 8)
        + bytes([2, 2]) + struct.pack(">h", 2)
        + bytes([3, 2]) + struct.pack(">h", 10)  # a tag from a newer Kafka (NextProducerEpoch): skipped
    )
    v = rec.decode_value(body)
    assert (v.producer_id, v.producer_epoch, v.transaction_timeout_ms, v.status) == (7, 9, 30000, 2)
    assert v.partitions == {"t": [4, 5]}
    assert (v.last_update_timestamp_ms, v.start_timestamp_ms) == (200, 100)
    assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version) == (6, 8, 2)
    # our v1 encoder writes the same layout (without the unknown tag)
    v.partitions = {"t": [4, 5]}
    assert rec.decode_value(rec.encode_value(v, 1)) == v


@pytest.mark.parametrize("bad", [b"", b"\x00\x05" + bytes(30), b"\x00\x00" + struct.pack(">qhib", 1, 1, 1, 9) + bytes(20),
                                 b"\x00\x00" + struct.pack(">qhib", 1, 1, 1, 1) + struct.pack(">i", 3)])
def test_value_garbage_raises_schema_error(bad: bytes) -> None:
    with pytest.raises(rec.TxnSchemaError):
        rec.decode_value(bad)


def test_partition_for_is_utils_abs_of_java_hash() -> None:
    for tid in ("tx1", "my-transactional-id", "\u00e9t\u00e9", "polygenelubricants"):
        h = java_string_hash(tid)
        assert partition_for(tid, 50) == (0 if h == -(1 << 31) else abs(h)) % 50
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0


# ---------------------------------------------------------------------------------------------- state machine


def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.state_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert TxnState.from_name("Ongoing") is TxnState.ONGOING and TxnState.from_name("ongoing") is None


def _md(state: TxnState = TxnState.EMPTY, epoch: int = 0) -> TransactionMetadata:
    return TransactionMetadata("tx", 100, 60000, state=state, producer_epoch=epoch)


def test_commit_cycle_through_pending_transitions() -> None:
    md = _md()
    t = md.prepare_add_partitions({("a", 0)}, now_ms=1000)
    assert md.pending_state is TxnState.ONGOING and md.state is TxnState.EMPTY  # not applied before the write
    with pytest.raises(IllegalTransitionError):
        md.prepare_add_partitions({("b", 0)}, now_ms=1001)  # one pending transition at a time
    md.complete_transition(t)
    assert md.state is TxnState.ONGOING and md.partitions == {("a", 0)} and md.txn_start_timestamp == 1000
    md.complete_transition(md.prepare_add_partitions({("b", 1)}, now_ms=2000))
    assert md.txn_start_timestamp == 1000 and md.partitions == {("a", 0), ("b", 1)}
    md.complete_transition(md.prepare_abort_or_commit(TxnState.PREPARE_COMMIT, 3000))
    assert md.state is TxnState.PREPARE_COMMIT
    md.complete_transition(md.prepare_complete(4000))
    assert md.state is TxnState.COMPLETE_COMMIT and md.partitions == set()


@pytest.mark.parametrize("state,target", [
    (TxnState.EMPTY, TxnState.PREPARE_COMMIT), (TxnState.COMPLETE_ABORT, TxnState.PREPARE_COMMIT),
    (TxnState.PREPARE_COMMIT, TxnState.ONGOING), (TxnState.ONGOING, TxnState.DEAD),
    (TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT), (TxnState.EMPTY, TxnState.PREPARE_EPOCH_FENCE)])
def test_invalid_transitions_are_refused(state: TxnState, target: TxnState) -> None:
    md = _md(state)
    with pytest.raises(IllegalTransitionError):
        md._prepare(target, 100, 0, -1, 1000, set(), -1, 0)
    assert md.pending_state is None and md.state is state


def test_failed_write_changes_nothing() -> None:
    md = _md()
    md.prepare_add_partitions({("a", 0)}, now_ms=1)
    md.abort_transition()
    assert md.state is TxnState.EMPTY and md.partitions == set() and md.pending_state is None


def test_epoch_bump_rules() -> None:
    md = _md(TxnState.COMPLETE_COMMIT, epoch=4)
    t = md.prepare_increment_producer_epoch(1000, None, 1)  # new producer instance: bump
    assert (t.producer_epoch, t.last_producer_epoch) == (5, -1)
    md.abort_transition()
    t = md.prepare_increment_producer_epoch(1000, 4, 1)  # KIP-360 bump with the current epoch
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    md.complete_transition(t)
    t = md.prepare_increment_producer_epoch(1000, 4, 1)  # retry of that bump (answer lost): same epoch again
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    md.abort_transition()
    assert md.prepare_increment_producer_epoch(1000, 2, 1) == ErrorCode.PRODUCER_FENCED


def test_fence_bumps_once_and_rotation_takes_a_new_id() -> None:
    md = _md(TxnState.ONGOING, epoch=3)
    assert md.prepare_fence_producer_epoch().producer_epoch == 4
    md.abort_transition()
    md.has_failed_epoch_fence = True
    assert md.prepare_fence_producer_epoch().producer_epoch == 3  # a failed fence is not bumped again
    md.abort_transition()
    assert is_epoch_exhausted(32766) and not is_epoch_exhausted(32765)
    md = _md(TxnState.COMPLETE_ABORT, epoch=32766)
    t = md.prepare_producer_id_rotation(555, 1000, 1, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch, t.previous_producer_id) == (555, 0, 32766, 100)


def test_transit_log_value_round_trips_to_metadata() -> None:
    md = _md()
    t = md.prepare_add_partitions({("b", 1), ("a", 0), ("a", 3)}, now_ms=77)
    value = rec.decode_value(rec.encode_value(t.log_value()))
    back = TransactionMetadata.from_log("tx", value)
    assert back.state is TxnState.ONGOING and back.partitions == {("a", 0), ("a", 3), ("b", 1)}
    assert (back.producer_id, back.producer_epoch, back.txn_start_timestamp) == (100, 0, 77)
