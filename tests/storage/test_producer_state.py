from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tidelog.records.crc import crc32c
from tidelog.records.header import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from tidelog.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tidelog.storage.format import PRODUCER_SNAPSHOT_ENTRY_SIZE as ENTRY_SIZE
from tidelog.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateManager,
    decode_snapshot,
    snapshot_file_name,
)

INT32_MAX = 2**31 - 1


def batch(
    pid: int,
    epoch: int,
    seq: int,
    count: int = 1,
    *,
    base_offset: int = 0,
    transactional: bool = False,
    control: bool = False,
    ts: int = 1000,
) -> BatchHeader:
    attributes = (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    return BatchHeader(
        base_offset=base_offset,
        batch_length=49,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


class Log:
    """A tiny leader: check, then assign offsets and update, as PartitionLog.append_as_leader does."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.next_offset = 0

    def append(self, header: BatchHeader, ts: int = 1000) -> tuple[int, int, int]:
        dup = self.state.check(header)
        if dup is not None:
            return dup
        first = self.next_offset
        last = first + header.last_offset_delta
        self.state.update(header, first, last, ts)
        self.next_offset = last + 1
        return first, last, ts


def test_non_idempotent_batches_are_ignored(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    h = batch(-1, -1, -1, 3)
    assert state.check(h) is None
    state.update(h, 0, 2, 5)
    assert state.active_producers() == {}
    assert state.map_end_offset == 3


def test_in_order_appends(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    assert log.append(batch(7, 0, 0, 3)) == (0, 2, 1000)
    assert log.append(batch(7, 0, 3, 2)) == (3, 4, 1000)
    assert log.append(batch(7, 0, 5, 1)) == (5, 5, 1000)
    entry = log.state.last_entry(7)
    assert entry is not None
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 0, 5, 5)


def test_unknown_producer_accepts_any_sequence(tmp_path: Path) -> None:
    # Kafka >= 2.5 (KIP-360): a producer the partition does not know is accepted at any sequence
    state = ProducerStateManager(tmp_path)
    assert state.check(batch(9, 3, 42)) is None


def test_duplicates_of_each_retained_batch_return_original_offsets(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    originals = []
    seq = 0
    for i in range(NUM_BATCHES_TO_RETAIN + 1):  # 6 batches of 2 records
        h = batch(1, 0, seq, 2)
        originals.append((h, log.append(h, ts=100 + i)))
        seq += 2
    end = log.next_offset
    # the 5 newest are recognised, with their original offsets and timestamp, and nothing is appended
    for h, result in originals[1:]:
        assert log.append(h, ts=999) == result
    assert log.next_offset == end
    # the 6th-oldest is no longer recognised: sequence 0 after 11 is out of order
    with pytest.raises(OutOfOrderSequenceError):
        log.state.check(originals[0][0])


def test_duplicate_needs_exact_sequence_range_and_epoch(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 0, 0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        log.state.check(batch(1, 0, 0, 2))  # same first seq, different last seq
    log.append(batch(1, 1, 0, 3))  # new epoch: state for epoch 0 is gone
    assert log.append(batch(1, 1, 0, 3)) == (3, 5, 1000)
    with pytest.raises(InvalidProducerEpochError):
        log.state.check(batch(1, 0, 0, 3))


@pytest.mark.parametrize("seq", [5, 7, 100, 0, 2])
def test_gap_or_rewind_is_out_of_order(tmp_path: Path, seq: int) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 0, 0, 3))
    log.append(batch(1, 0, 3, 1))  # last seq 3
    with pytest.raises(OutOfOrderSequenceError):
        log.state.check(batch(1, 0, seq, 1))
    assert log.state.check(batch(1, 0, 4, 1)) is None


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 0, INT32_MAX - 1, 2))  # sequences MAX-1, MAX
    entry = log.state.last_entry(1)
    assert entry is not None and entry.last_seq == INT32_MAX
    assert log.state.check(batch(1, 0, 0, 1)) is None
    # a batch spanning the wrap: first MAX, last 1
    log2 = Log(ProducerStateManager(tmp_path / "x"))
    h = batch(2, 0, INT32_MAX, 3)
    assert h.last_sequence == 1
    first = log2.append(h)
    assert log2.append(h) == first  # recognised as a duplicate across the wrap
    assert log2.state.check(batch(2, 0, 2, 1)) is None


def test_epoch_fencing(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 5, 0, 2))
    with pytest.raises(InvalidProducerEpochError):
        log.state.check(batch(1, 4, 2, 1))
    # a new epoch must start at sequence 0
    with pytest.raises(OutOfOrderSequenceError):
        log.state.check(batch(1, 6, 2, 1))
    log.append(batch(1, 6, 0, 1))
    entry = log.state.last_entry(1)
    assert entry is not None and entry.producer_epoch == 6 and len(entry.batches) == 1
    with pytest.raises(InvalidProducerEpochError):
        log.state.check(batch(1, 5, 2, 1))


def test_transactions_track_first_offset_and_control_ends_them(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 0, 0, 1))  # offset 0, non transactional
    log.append(batch(1, 0, 1, 2, transactional=True))  # offsets 1-2
    log.append(batch(1, 0, 3, 1, transactional=True))  # offset 3
    entry = log.state.last_entry(1)
    assert entry is not None and entry.current_txn_first_offset == 1
    assert log.state.first_unstable_offset() == 1
    marker = batch(1, 0, -1, 1, transactional=True, control=True)
    assert log.state.check(marker) is None
    completed = log.state.update(marker, 4, 4, 2000, coordinator_epoch=3, abort=False)
    assert completed == CompletedTxn(1, 1, 4, False)
    entry = log.state.last_entry(1)
    assert entry is not None
    assert entry.current_txn_first_offset is None and entry.coordinator_epoch == 3
    assert entry.last_seq == 3  # a marker is not a data batch
    # decided once the log completed it, but unstable until the high watermark passes the marker
    assert log.state.last_stable_offset_of(completed) == 5
    log.state.complete_txn(completed)
    assert log.state.first_undecided_offset() is None and log.state.first_unstable_offset() == 1
    log.state.on_high_watermark_updated(4)
    assert log.state.first_unstable_offset() == 1
    log.state.on_high_watermark_updated(5)
    assert log.state.first_unstable_offset() is None


def test_expire(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(1, 0, 0), 0, 0, 1000)
    state.update(batch(2, 0, 0), 1, 1, 5000)
    state.update(batch(3, 0, 0, transactional=True), 2, 2, 1000)  # open transaction: never expires
    assert state.expire(now_ms=6000, producer_id_expiration_ms=5000) == [1]
    assert sorted(state.active_producers()) == [2, 3]


def test_on_log_start_drops_producers_below(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(1, 0, 0), 0, 0, 1)
    state.update(batch(2, 0, 0), 5, 5, 1)
    state.on_log_start(3)
    assert sorted(state.active_producers()) == [2]
    state.on_log_start(50)
    assert state.map_end_offset == 50


# ----------------------------------------------------------------------------------------------- snapshots


def test_snapshot_byte_layout(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(0x0102030405060708, 9, 10, 3), 100, 102, 1_700_000_000_000)
    state.update(batch(5, 1, 0, 1, transactional=True), 103, 103, 42)
    path = state.take_snapshot(104)
    assert path.name == "00000000000000000104.snapshot" == snapshot_file_name(104)
    data = path.read_bytes()
    assert len(data) == 2 + 4 + 4 + 2 * 46 and ENTRY_SIZE == 46
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count) == (1, 2)
    assert crc == crc32c(data[6:])
    # entries are sorted by producer id; check every field at its byte offset
    e0 = data[10:56]
    assert struct.unpack_from(">q", e0, 0)[0] == 5  # producerId
    assert struct.unpack_from(">h", e0, 8)[0] == 1  # epoch
    assert struct.unpack_from(">i", e0, 10)[0] == 0  # lastSequence
    assert struct.unpack_from(">q", e0, 14)[0] == 103  # lastOffset
    assert struct.unpack_from(">i", e0, 22)[0] == 0  # offsetDelta
    assert struct.unpack_from(">q", e0, 26)[0] == 42  # timestamp
    assert struct.unpack_from(">i", e0, 34)[0] == -1  # coordinatorEpoch
    assert struct.unpack_from(">q", e0, 38)[0] == 103  # currentTxnFirstOffset
    e1 = data[56:102]
    assert struct.unpack(">qhiqiqiq", e1) == (0x0102030405060708, 9, 12, 102, 2, 1_700_000_000_000, -1, -1)


def test_empty_snapshot(tmp_path: Path) -> None:
    data = ProducerStateManager(tmp_path).take_snapshot(0).read_bytes()
    assert data[:2] == b"\x00\x01" and data[6:] == b"\x00\x00\x00\x00" and len(data) == 10
    assert struct.unpack_from(">I", data, 2)[0] == crc32c(b"\x00\x00\x00\x00")


def test_snapshot_reload_keeps_last_batch(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    for seq in range(0, 6, 2):
        log.append(batch(1, 2, seq, 2))
    log.state.take_snapshot(log.next_offset)
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(log_start_offset=0, log_end_offset=log.next_offset) == 6
    assert reloaded.map_end_offset == 6
    entry = reloaded.last_entry(1)
    assert entry is not None
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset, len(entry.batches)) == (2, 5, 5, 1)
    assert reloaded.check(batch(1, 2, 4, 2)) == (4, 5, 1000)  # last batch still a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        reloaded.check(batch(1, 2, 2, 2))  # older ones are not (only one batch per producer in a snapshot)
    assert reloaded.check(batch(1, 2, 6, 1)) is None


def test_load_picks_newest_valid_snapshot(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(1, 0, 0), 0, 0, 1)
    state.take_snapshot(1)
    state.update(batch(2, 0, 0), 1, 1, 1)
    state.take_snapshot(2)
    state.update(batch(3, 0, 0), 2, 2, 1)
    state.take_snapshot(3)
    # corrupt the newest one (flip an entry byte: CRC mismatch), and leave a snapshot above the LEO
    p3 = state.snapshot_path(3)
    raw = bytearray(p3.read_bytes())
    raw[20] ^= 0xFF
    p3.write_bytes(bytes(raw))
    state.take_snapshot(10)
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(log_start_offset=0, log_end_offset=3) == 2
    assert sorted(fresh.active_producers()) == [1, 2]
    assert fresh.snapshot_offsets() == [1, 2]  # the corrupt one and the one above the LEO are deleted


def test_load_without_snapshots_and_log_start(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    assert state.load(log_start_offset=7, log_end_offset=20) == 7
    state.update(batch(1, 0, 0), 7, 7, 1)
    state.update(batch(2, 0, 0), 12, 12, 1)
    state.take_snapshot(13)
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(log_start_offset=10, log_end_offset=20) == 13
    assert sorted(fresh.active_producers()) == [2]  # producer 1's last offset is below the log start


def test_load_snapshot_below_log_start_replays_from_start(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(1, 0, 0), 0, 0, 1)
    state.take_snapshot(1)
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(log_start_offset=5, log_end_offset=9) == 5
    assert fresh.active_producers() == {}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d[:5],  # truncated header
        lambda d: b"\x00\x02" + d[2:],  # wrong version
        lambda d: d[:-1],  # truncated entry (CRC no longer matches)
        lambda d: d + b"\x00",  # trailing garbage
    ],
)
def test_decode_snapshot_strict(tmp_path: Path, mutate: object) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(1, 0, 0), 0, 0, 1)
    data = state.take_snapshot(1).read_bytes()
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(mutate(data))  # type: ignore[operator]


def test_decode_snapshot_count_mismatch_with_valid_crc() -> None:
    body = struct.pack(">i", 2) + bytes(ENTRY_SIZE)
    data = struct.pack(">hI", 1, crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError, match="do not match"):
        decode_snapshot(data)


def test_truncate_and_reload(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 0, 0, 2))  # 0-1
    log.state.take_snapshot(2)
    log.append(batch(1, 0, 2, 2))  # 2-3
    log.state.take_snapshot(4)
    log.append(batch(1, 0, 4, 2))  # 4-5
    # the log is truncated to 3: snapshot 4 is above the end, state reloads from snapshot 2
    replay_from = log.state.truncate_and_reload(0, 3)
    assert replay_from == 2
    assert log.state.snapshot_offsets() == [2]
    entry = log.state.last_entry(1)
    assert entry is not None and entry.last_seq == 1
    # nothing to do when the state already ends at the log end
    log.state.update(batch(1, 0, 2, 1), 2, 2, 1)
    assert log.state.truncate_and_reload(0, 3) == 3
    entry = log.state.last_entry(1)
    assert entry is not None and entry.last_seq == 2


def test_delete_snapshots_below_and_stray_tmp(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    for off in (1, 5, 9):
        state.take_snapshot(off)
    (tmp_path / "00000000000000000009.snapshot.tmp").write_bytes(b"torn")
    state.delete_snapshots_below(5)
    assert state.snapshot_offsets() == [5, 9]
    state.load(0, 100)
    assert not (tmp_path / "00000000000000000009.snapshot.tmp").exists()


def test_plain_batch_during_a_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(batch(1, 0, 0, 2, transactional=True))
    with pytest.raises(InvalidTxnStateError):
        log.state.check(batch(1, 0, 2, 1))  # next in sequence, but not transactional
    with pytest.raises(InvalidTxnStateError):
        log.state.check(batch(1, 1, 0, 1))  # a new epoch does not end the transaction either
    assert log.state.check(batch(1, 0, 0, 2, transactional=True)) == (0, 1, 1000)  # a duplicate is still one
    log.state.check(batch(1, 0, 2, 1, transactional=True))


def test_marker_checks(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.check_marker(5, 0, 0)  # unknown producer: nothing to check
    state.update(batch(5, 3, 0, 1, transactional=True), 0, 0, 1000)
    state.update(batch(5, 3, -1, 1, transactional=True, control=True), 1, 1, 1000, coordinator_epoch=4, abort=True)
    with pytest.raises(InvalidProducerEpochError):
        state.check_marker(5, 2, 4)
    with pytest.raises(TransactionCoordinatorFencedError):
        state.check_marker(5, 3, 3)
    state.check_marker(5, 3, 4)
    state.check_marker(5, 4, 9)


def test_snapshot_restores_open_transactions(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(batch(1, 0, 0, 2, transactional=True), 10, 11, 1000)
    state.update(batch(2, 0, 0, 1, transactional=True), 12, 12, 1000)
    state.update(batch(3, 0, 0, 1), 13, 13, 1000)
    completed = state.update(batch(2, 0, -1, 1, transactional=True, control=True), 14, 14, 1000,
                             coordinator_epoch=6, abort=False)
    assert completed is not None
    state.complete_txn(completed)
    state.take_snapshot(15)
    again = ProducerStateManager(tmp_path)
    assert again.load(0, 15) == 15
    assert again.ongoing_transactions() == {1: 10} and again.first_unstable_offset() == 10
    entry = again.last_entry(2)
    assert entry is not None and entry.coordinator_epoch == 6 and entry.current_txn_first_offset is None
    # the marker of the restored transaction completes it
    done = again.update(batch(1, 0, -1, 1, transactional=True, control=True), 15, 15, 1000, 6, True)
    assert done == CompletedTxn(1, 10, 15, True)
    again.complete_txn(done)
    again.on_high_watermark_updated(16)
    assert again.first_unstable_offset() is None and again.ongoing_transactions() == {}
