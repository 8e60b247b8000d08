"""Bug 9 of docs/RELIABILITY.md (decision 0072): a transactional batch that repeats the (epoch, first, last sequence)
of a retained batch whose transaction already ended at the partition is refused (INVALID_TXN_STATE), not answered
with the old batch's offsets; a retry inside the transaction still open is still a duplicate. Pure producer state,
no broker (the wire-level and librdkafka tests are in tests/broker/txn/test_reused_sequence*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.records.header import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from tidelog.storage.errors import InvalidTxnStateError
from tidelog.storage.producer_state import ProducerStateManager


def _batch(seq: int, count: int = 1, *, epoch: int = 0, transactional: bool = True, control: bool = False,
           pid: int = 1000) -> BatchHeader:
    attributes = (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    return BatchHeader(base_offset=0, batch_length=49, partition_leader_epoch=0, magic=2, crc=0,
                       attributes=attributes, last_offset_delta=count - 1, base_timestamp=1000, max_timestamp=1000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, records_count=count)


class _Leader:
    """Check, then assign offsets and update, as PartitionLog.append_validated does."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.next_offset = 0

    def append(self, header: BatchHeader) -> tuple[int, int, int]:
        dup = self.state.check(header)
        if dup is not None:
            return dup
        first = self.next_offset
        last = first + header.last_offset_delta
        self.state.update(header, first, last, 1000)
        self.next_offset = last + 1
        return first, last, 1000

    def marker(self, abort: bool, epoch: int = 0) -> None:
        header = _batch(-1, epoch=epoch, control=True)
        self.state.check(header)
        completed = self.state.update(header, self.next_offset, self.next_offset, 2000, coordinator_epoch=0,
                                      abort=abort)
        assert completed is not None
        self.state.complete_txn(completed)
        self.next_offset += 1


@pytest.mark.parametrize("abort", [True, False])
def test_sequence_of_an_ended_transaction_is_refused(tmp_path: Path, abort: bool) -> None:
    leader = _Leader(ProducerStateManager(tmp_path))
    assert leader.append(_batch(0, 2)) == (0, 1, 1000)  # transaction 1: offsets 0-1
    leader.marker(abort)  # offset 2
    with pytest.raises(InvalidTxnStateError, match=r"repeats the batch at offsets 0\.\.1.*no open transaction"):
        leader.state.check(_batch(0, 2))  # transaction 2 reuses sequences 0-1 (other records)
    # nothing was recorded: the client's next sequence after its aborted transaction is still accepted
    assert leader.append(_batch(2)) == (3, 3, 1000)


def test_sequence_before_the_open_transaction_is_refused(tmp_path: Path) -> None:
    leader = _Leader(ProducerStateManager(tmp_path))
    leader.append(_batch(0))  # transaction 1: offset 0
    leader.marker(True)  # offset 1
    assert leader.append(_batch(1)) == (2, 2, 1000)  # transaction 2 opens at offset 2
    with pytest.raises(InvalidTxnStateError, match="an open transaction from offset 2"):
        leader.state.check(_batch(0))
    assert leader.state.check(_batch(1)) == (2, 2, 1000)  # a retry inside the open transaction: a duplicate


def test_retry_inside_the_open_transaction_is_a_duplicate(tmp_path: Path) -> None:
    leader = _Leader(ProducerStateManager(tmp_path))
    assert leader.append(_batch(0, 3)) == (0, 2, 1000)
    assert leader.append(_batch(3, 2)) == (3, 4, 1000)
    assert leader.state.check(_batch(0, 3)) == (0, 2, 1000)
    assert leader.state.check(_batch(3, 2)) == (3, 4, 1000)


def test_idempotent_duplicates_are_unchanged(tmp_path: Path) -> None:
    leader = _Leader(ProducerStateManager(tmp_path))
    assert leader.append(_batch(0, 2, transactional=False)) == (0, 1, 1000)
    assert leader.state.check(_batch(0, 2, transactional=False)) == (0, 1, 1000)


def test_a_bumped_epoch_is_not_concerned(tmp_path: Path) -> None:
    """Transactions version 2 (and librdkafka after an epoch bump): the next transaction has another epoch, so its
    sequence 0 matches no retained batch and starts the new epoch."""
    leader = _Leader(ProducerStateManager(tmp_path))
    leader.append(_batch(0))
    leader.marker(True, epoch=1)
    assert leader.append(_batch(0, epoch=1)) == (2, 2, 1000)


def test_rule_holds_after_a_snapshot_reload(tmp_path: Path) -> None:
    leader = _Leader(ProducerStateManager(tmp_path))
    leader.append(_batch(0))
    leader.marker(True)
    leader.state.take_snapshot(leader.next_offset)
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(log_start_offset=0, log_end_offset=leader.next_offset) == leader.next_offset
    with pytest.raises(InvalidTxnStateError):
        reloaded.check(_batch(0))
