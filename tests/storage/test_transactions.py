"""Transactions on the partition side (issue 14): markers, the LSO, .txnindex across segments, truncation,
retention, followers and recovery, as Kafka's UnifiedLog / ProducerStateManager / LogSegment do them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import ControlRecord, DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from tidelog.errors import ErrorCode
from tidelog.records.batch import (
    ControlRecordType,
    RecordSpec,
    build_batch,
    decode_batch,
    parse_control_record,
)
from tidelog.records.header import iter_batch_headers
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.txn_index import AbortedTxn

NOW = 1_700_000_000_000


def _open(d: Path, config: LogConfig | None = None, **kw: object) -> PartitionLog:
    return PartitionLog.open(d, config or LogConfig(), producer_state=ProducerStateManager(d), now_ms=NOW, **kw)


class Producer:
    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, n: int = 2, *, txn: bool = True) -> bytes:
        recs = [RecordSpec(b"k%d" % i, b"p%d-%d" % (self.pid, self.seq + i), (), NOW, i) for i in range(n)]
        data = build_batch(recs, producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq,
                           is_transactional=txn)
        self.seq += n
        return data


def _commit_hw(lg: PartitionLog) -> None:
    lg.high_watermark = lg.log_end_offset


@pytest.fixture
def log(tmp_path: Path):  # type: ignore[no-untyped-def]
    lg = _open(tmp_path / "t-0")
    yield lg
    lg.close()


def test_lso_follows_the_oldest_open_transaction_and_the_hw(log: PartitionLog) -> None:
    a, b = Producer(1), Producer(2)
    log.append_as_leader(build_batch([RecordSpec(b"x", b"y", (), NOW, 0)]), now_ms=NOW)  # offset 0
    _commit_hw(log)
    assert log.last_stable_offset == 1 and log.first_unstable_offset() is None
    log.append_as_leader(a.batch(), now_ms=NOW)  # 1-2
    log.append_as_leader(b.batch(), now_ms=NOW)  # 3-4
    assert log.last_stable_offset == 1  # HW is still 1
    _commit_hw(log)
    assert log.high_watermark == 5 and log.last_stable_offset == 1 and log.first_unstable_offset() == 1
    assert log.ongoing_transactions() == {1: 1, 2: 3}
    info = log.append_txn_marker(1, 0, 5, commit=True, now_ms=NOW)  # 5
    assert info.first_offset == info.last_offset == 5
    assert log.ongoing_transactions() == {2: 3}
    assert log.last_stable_offset == 1  # the marker is not below the HW yet: still unstable
    _commit_hw(log)
    assert log.last_stable_offset == 3  # b's transaction holds it now
    log.append_txn_marker(2, 0, 5, commit=False, now_ms=NOW)  # 6
    # the abort's entry: b's transaction 3..6, LSO after completion 7 (no other open transaction)
    assert log.collect_aborted_transactions(0, 100) == [AbortedTxn(2, 3, 6, 7)]
    assert log.last_stable_offset == 3
    log.high_watermark = 6
    assert log.last_stable_offset == 3  # HW 6 does not pass the marker at 6
    _commit_hw(log)
    assert log.last_stable_offset == 7 == log.high_watermark and log.first_unstable_offset() is None


def test_abort_entry_lso_is_the_next_open_transaction_of_another_producer(log: PartitionLog) -> None:
    a, b = Producer(1), Producer(2)
    log.append_as_leader(a.batch(), now_ms=NOW)  # 0-1
    log.append_as_leader(b.batch(), now_ms=NOW)  # 2-3
    log.append_as_leader(a.batch(), now_ms=NOW)  # 4-5
    log.append_txn_marker(1, 0, 0, commit=False, now_ms=NOW)  # 6
    assert log.collect_aborted_transactions(0, 7) == [AbortedTxn(1, 0, 6, 2)]


def test_marker_fencing_changes_nothing(log: PartitionLog) -> None:
    p = Producer(1, epoch=3)
    log.append_as_leader(p.batch(), now_ms=NOW)
    log.append_txn_marker(1, 3, 10, commit=True, now_ms=NOW)
    log.append_as_leader(p.batch(), now_ms=NOW)
    leo = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError) as e1:
        log.append_txn_marker(1, 2, 10, commit=False, now_ms=NOW)
    assert e1.value.kafka_error == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(TransactionCoordinatorFencedError) as e2:
        log.append_txn_marker(1, 3, 9, commit=False, now_ms=NOW)
    assert e2.value.kafka_error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == leo and log.ongoing_transactions() == {1: 3}
    # a newer coordinator epoch and a bumped producer epoch are fine
    log.append_txn_marker(1, 4, 11, commit=False, now_ms=NOW)
    assert log.ongoing_transactions() == {}
    entry = log.producer_state.last_entry(1)  # type: ignore[union-attr]
    assert entry is not None and entry.producer_epoch == 4 and entry.coordinator_epoch == 11


def test_marker_without_open_transaction_is_written_and_indexes_nothing(log: PartitionLog) -> None:
    info = log.append_txn_marker(9, 0, 1, commit=False, now_ms=NOW)
    assert info.first_offset == 0 and log.log_end_offset == 1
    assert log.collect_aborted_transactions(0, 10) == []
    assert not (log.dir / "00000000000000000000.txnindex").exists()
    data = log.read(0, 1 << 20).read_bytes()
    header, records = decode_batch(data)
    assert header.is_control and header.is_transactional and header.producer_id == 9
    assert parse_control_record(records[0]) == (ControlRecordType.ABORT, 0, 1)


def test_plain_batch_of_a_producer_with_an_open_transaction_is_refused(log: PartitionLog) -> None:
    p = Producer(1)
    log.append_as_leader(p.batch(), now_ms=NOW)
    leo = log.log_end_offset
    with pytest.raises(InvalidTxnStateError) as e:
        log.append_as_leader(p.batch(txn=False), now_ms=NOW)
    assert e.value.kafka_error == ErrorCode.INVALID_TXN_STATE and log.log_end_offset == leo
    p.seq -= 2
    log.append_txn_marker(1, 0, 0, commit=True, now_ms=NOW)
    log.append_as_leader(p.batch(txn=False), now_ms=NOW)  # after the marker: fine
    assert log.log_end_offset == leo + 3


def _write_history(lg: PartitionLog) -> None:
    """Across several segments: aborted and committed transactions of three producers, markers in later segments
    than the data they end, one transaction left open."""
    a, b, c = Producer(1), Producer(2), Producer(3)
    lg.append_as_leader(a.batch(), now_ms=NOW)  # 0-1
    lg.append_as_leader(b.batch(), now_ms=NOW)  # 2-3
    lg.roll()
    lg.append_as_leader(a.batch(), now_ms=NOW)  # 4-5 (segment 4)
    lg.append_txn_marker(1, 0, 0, commit=False, now_ms=NOW)  # 6: abort a (0..6), LSO 2 (b open)
    lg.append_as_leader(c.batch(), now_ms=NOW)  # 7-8
    lg.roll()
    lg.append_txn_marker(2, 0, 0, commit=True, now_ms=NOW)  # 9 (segment 9)
    lg.append_txn_marker(3, 0, 0, commit=False, now_ms=NOW)  # 10: abort c (7..10), LSO 11
    lg.append_as_leader(a.batch(), now_ms=NOW)  # 11-12
    lg.append_txn_marker(1, 0, 0, commit=False, now_ms=NOW)  # 13: abort a (11..13), LSO 14
    lg.roll()
    lg.append_as_leader(b.batch(), now_ms=NOW)  # 14-15 (segment 14), left open
    _commit_hw(lg)


ALL_ABORTED = [AbortedTxn(1, 0, 6, 2), AbortedTxn(3, 7, 10, 11), AbortedTxn(1, 11, 13, 14)]


def test_collect_across_segments(log: PartitionLog) -> None:
    _write_history(log)
    assert [s.base_offset for s in log.segments] == [0, 4, 9, 14]
    assert log.collect_aborted_transactions(0, 16) == ALL_ABORTED
    # a fetch of [0, 4): only a's first transaction overlaps... and its entry's LSO (2) does not reach 4, so the
    # search goes on; c's (7..10, LSO 11) completes it
    assert log.collect_aborted_transactions(0, 4) == [AbortedTxn(1, 0, 6, 2)]
    assert log.collect_aborted_transactions(7, 9) == [AbortedTxn(3, 7, 10, 11)]
    assert log.collect_aborted_transactions(11, 12) == [AbortedTxn(1, 11, 13, 14)]
    assert log.collect_aborted_transactions(14, 16) == []
    assert log.last_stable_offset == 14 and log.ongoing_transactions() == {2: 14}


def test_truncation_truncates_txnindex_and_reopens_transactions(log: PartitionLog) -> None:
    _write_history(log)
    log.truncate_to(10)  # removes c's abort (10) and everything after
    assert log.collect_aborted_transactions(0, 100) == [AbortedTxn(1, 0, 6, 2)]
    assert (log.dir / "00000000000000000009.txnindex").read_bytes() == b""  # truncated, as Kafka's truncateTo
    assert log.ongoing_transactions() == {3: 7}  # c's transaction is open again
    assert log.last_stable_offset == 7
    log.truncate_to(5)
    assert log.collect_aborted_transactions(0, 100) == []
    assert not (log.dir / "00000000000000000004.txnindex").stat().st_size
    assert log.ongoing_transactions() == {1: 0, 2: 2}
    log.truncate_fully_and_start_at(50)
    assert log.ongoing_transactions() == {} and log.last_stable_offset == 50


def test_retention_moves_past_transactions(log: PartitionLog) -> None:
    _write_history(log)
    deleted = log.delete_segments_before(9, now_ms=NOW)
    assert [s.base_offset for s in deleted] == [0, 4]
    assert log.log_start_offset == 9
    # a's first abort went with segment 4; the others remain
    assert log.collect_aborted_transactions(9, 16) == ALL_ABORTED[1:]
    assert (log.dir / "00000000000000000004.txnindex.deleted").exists()
    log.delete_expired_files(now_ms=NOW + 10**9)
    assert not (log.dir / "00000000000000000004.txnindex.deleted").exists()
    # DeleteRecords past the start of the open transaction: the LSO never falls below the log start offset
    log.maybe_increment_log_start_offset(15)
    assert log.first_unstable_offset() == 15 and log.last_stable_offset == 15


def test_follower_rebuilds_the_same_state_and_txnindex(tmp_path: Path, log: PartitionLog) -> None:
    _write_history(log)
    follower = _open(tmp_path / "f-0")
    try:
        data = log.read(0, 1 << 30, max_offset=None).read_bytes()
        offsets = [h.base_offset for _, h in iter_batch_headers(data)]
        # replicate in two fetches, rolling where the leader rolled
        cut = next(p for p, h in iter_batch_headers(data) if h.base_offset == 9)
        follower.append_as_follower(data[:cut])
        follower.roll()
        follower.append_as_follower(data[cut:])
        assert offsets[-1] == 14
        assert follower.collect_aborted_transactions(0, 100) == ALL_ABORTED
        assert follower.ongoing_transactions() == {2: 14}
        assert (follower.dir / "00000000000000000009.txnindex").read_bytes() == (
            log.dir / "00000000000000000009.txnindex").read_bytes()
        _commit_hw(follower)
        assert follower.last_stable_offset == 14
    finally:
        follower.close()


def _txnindex_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.txnindex"))}


@pytest.mark.parametrize("snapshots", [True, False])
def test_recovery_rebuilds_txnindex_and_open_transactions(tmp_path: Path, snapshots: bool) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    _write_history(lg)
    lg.close()
    expected = _txnindex_files(d)
    assert set(expected) == {"00000000000000000004.txnindex", "00000000000000000009.txnindex"}
    # a crash: the .txnindex files and (one run) the producer snapshots lost, recovery from the start
    for p in d.glob("*.txnindex"):
        p.unlink()
    if not snapshots:
        for p in d.glob("*.snapshot"):
            p.unlink()
    (d / "00000000000000000009.txnindex").write_bytes(b"\x00" * 7)  # a torn write too
    lg2 = _open(d, recovery_point=0, high_watermark=16)
    try:
        assert _txnindex_files(d) == expected
        assert lg2.collect_aborted_transactions(0, 100) == ALL_ABORTED
        assert lg2.ongoing_transactions() == {2: 14}
        assert lg2.last_stable_offset == 14
        # the producer state goes on from there: b may end its transaction, a plain batch of b is refused
        b = Producer(2)
        b.seq = 4
        with pytest.raises(InvalidTxnStateError):
            lg2.append_as_leader(b.batch(txn=False), now_ms=NOW)
        lg2.append_txn_marker(2, 0, 0, commit=True, now_ms=NOW)
        _commit_hw(lg2)
        assert lg2.last_stable_offset == lg2.log_end_offset == 17
    finally:
        lg2.close()


def test_clean_reopen_restores_open_transactions_from_the_snapshot(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    _write_history(lg)
    lg.roll()  # a snapshot at 16 holds b's open transaction (currentTxnFirstOffset 14)
    lg.close()
    snap = ProducerStateManager(d).read_snapshot(16)
    assert {e.producer_id: e.current_txn_first_offset for e in snap} == {1: None, 2: 14, 3: None}
    # only the snapshot can tell: the segments it covers are gone from the replay (clean shutdown, no recovery)
    lg2 = _open(d, clean_shutdown=True, high_watermark=16)
    try:
        assert lg2.ongoing_transactions() == {2: 14} and lg2.last_stable_offset == 14
        assert lg2.collect_aborted_transactions(0, 100) == ALL_ABORTED
    finally:
        lg2.close()


def test_a_corrupt_txnindex_is_rebuilt_after_a_clean_shutdown(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    _write_history(lg)
    lg.close()
    expected = _txnindex_files(d)
    (d / "00000000000000000004.txnindex").write_bytes(expected["00000000000000000004.txnindex"][:20])
    lg2 = _open(d, clean_shutdown=True, high_watermark=16)
    try:
        assert _txnindex_files(d) == expected
        assert lg2.collect_aborted_transactions(0, 100) == ALL_ABORTED
        assert lg2.ongoing_transactions() == {2: 14}
    finally:
        lg2.close()


def test_recovery_after_a_cut_marker_reopens_the_transaction(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _open(d)
    a = Producer(1)
    lg.append_as_leader(a.batch(), now_ms=NOW)
    lg.append_txn_marker(1, 0, 0, commit=False, now_ms=NOW)
    lg.close()
    log_path = d / "00000000000000000000.log"
    size = log_path.stat().st_size
    with open(log_path, "r+b") as f:
        f.truncate(size - 5)  # the marker is torn
    shutil.rmtree(d / "x", ignore_errors=True)
    for p in d.glob("*.snapshot"):
        p.unlink()
    lg2 = _open(d, recovery_point=0)
    try:
        assert lg2.log_end_offset == 2
        assert lg2.ongoing_transactions() == {1: 0}
        assert lg2.collect_aborted_transactions(0, 100) == []
        assert not (d / "00000000000000000000.txnindex").exists()
    finally:
        lg2.close()


def test_kafka_python_reads_the_log_around_a_marker(log: PartitionLog) -> None:
    """Byte-level cross-check: kafka-python's own record classes parse the transactional batches and the control
    batches exactly as this log wrote them (attributes, producer fields, the marker's key and value)."""
    a = Producer(42, epoch=7)
    log.append_as_leader(build_batch([RecordSpec(b"plain", b"v", (), NOW, 0)]), now_ms=NOW)  # 0
    log.append_as_leader(a.batch(3), now_ms=NOW)  # 1-3
    log.append_txn_marker(42, 7, 5, commit=False, leader_epoch=2, now_ms=NOW)  # 4
    log.append_as_leader(a.batch(1), now_ms=NOW)  # 5
    log.append_txn_marker(42, 7, 5, commit=True, leader_epoch=2, now_ms=NOW)  # 6
    data = (log.dir / "00000000000000000000.log").read_bytes()
    records = MemoryRecords(data)
    seen = []
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        assert isinstance(batch, DefaultRecordBatch) and batch.validate_crc()
        recs = list(batch)
        seen.append((batch.base_offset, batch.is_transactional, batch.is_control_batch, batch.producer_id,
                     batch.producer_epoch, len(recs)))
        if batch.is_control_batch:
            (rec,) = recs
            assert isinstance(rec, ControlRecord) and rec.version == 0
            assert rec.value == b"\x00\x00" + (5).to_bytes(4, "big")  # EndTxnMarker v0, coordinator epoch 5
            assert batch.base_sequence == -1 and batch.leader_epoch == 2 and batch.timestamp_type == 0
            seen[-1] += ("abort" if rec.abort else "commit" if rec.commit else "?",)
    assert seen == [
        (0, False, False, -1, -1, 1),
        (1, True, False, 42, 7, 3),
        (4, True, True, 42, 7, 1, "abort"),
        (5, True, False, 42, 7, 1),
        (6, True, True, 42, 7, 1, "commit"),
    ]
    assert (log.dir / "00000000000000000000.txnindex").read_bytes() == AbortedTxn(42, 1, 4, 5).encode()


# ------------------------------------------------------------------------------------- randomized histories

_ops = st.lists(
    st.tuples(st.sampled_from(["txn", "commit", "abort", "plain", "roll"]), st.integers(1, 3)),
    min_size=1, max_size=40,
)


def _consume_committed(data: bytes, fetch_offset: int, aborted: list[AbortedTxn]) -> list[int]:
    """What a read_committed consumer keeps of ``data`` (Kafka's Fetcher: aborted producers from the
    aborted-transactions list by first offset, dropped until their ABORT marker)."""
    pending = sorted(aborted, key=lambda t: t.first_offset)
    aborting: set[int] = set()
    out = []
    for pos, h in iter_batch_headers(data):
        while pending and pending[0].first_offset <= h.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if h.is_control:
            rec = decode_batch(data, pos)[1][0]
            if parse_control_record(rec).type == ControlRecordType.ABORT:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        out.extend(o for o in range(h.base_offset, h.last_offset + 1) if o >= fetch_offset)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, fetch=st.integers(0, 60), cut=st.integers(0, 60))
def test_random_histories_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list, fetch: int, cut: int
) -> None:
    d = tmp_path_factory.mktemp("h") / "t-0"
    lg = _open(d)
    producers = {pid: Producer(pid) for pid in (1, 2, 3)}
    open_txns: dict[int, int] = {}  # pid -> first offset
    expected_index: list[AbortedTxn] = []
    committed: list[int] = []  # offsets a read_committed consumer must see
    txn_offsets: dict[int, list[int]] = {}
    for op, pid in ops:
        if op == "roll":
            if lg.active_segment.size:
                lg.roll()
        elif op == "plain":
            info = lg.append_as_leader(build_batch([RecordSpec(b"k", b"v", (), NOW, 0)]), now_ms=NOW)
            committed.append(info.first_offset)
        elif op == "txn":
            info = lg.append_as_leader(producers[pid].batch(2), now_ms=NOW)
            open_txns.setdefault(pid, info.first_offset)
            txn_offsets.setdefault(pid, []).extend(range(info.first_offset, info.last_offset + 1))
        else:
            info = lg.append_txn_marker(pid, 0, 0, commit=op == "commit", now_ms=NOW)
            first = open_txns.pop(pid, None)
            if first is not None:
                if op == "abort":
                    others = [f for p, f in open_txns.items() if p != pid]
                    expected_index.append(AbortedTxn(pid, first, info.first_offset,
                                                     min(others) if others else info.first_offset + 1))
                else:
                    committed.extend(txn_offsets.get(pid, []))
            txn_offsets.pop(pid, None)
        _commit_hw(lg)
    assert lg.collect_aborted_transactions(0, lg.log_end_offset + 1) == expected_index
    assert lg.ongoing_transactions() == dict(sorted(open_txns.items(), key=lambda kv: kv[1]))
    lso = min(open_txns.values(), default=lg.log_end_offset)
    assert lg.last_stable_offset == lso
    start = min(fetch, lso)
    if start < lso:
        info = lg.read(start, 1 << 30, max_offset=lso)
        aborted = lg.collect_aborted_transactions(start, info.next_offset)
        assert _consume_committed(info.read_bytes(), start, aborted) == sorted(o for o in committed if start <= o < lso)
    files = _txnindex_files(d)
    lg.close()
    # crash: every .txnindex and snapshot lost; recovery rebuilds the same files and the same open transactions
    for p in [*d.glob("*.txnindex"), *d.glob("*.snapshot")]:
        p.unlink()
    again = _open(d, recovery_point=0, high_watermark=10**9)
    try:
        assert _txnindex_files(d) == files
        assert again.ongoing_transactions() == dict(sorted(open_txns.items(), key=lambda kv: kv[1]))
        assert again.last_stable_offset == lso
        # truncation (a follower's) leaves what a follower replicating only the kept batches builds
        data = again.read(0, 1 << 30).read_bytes()
        bounds = [h.base_offset for _, h in iter_batch_headers(data)]
        target = max([b for b in bounds if b <= cut], default=0)
        again.truncate_to(target)
        follower = _open(tmp_path_factory.mktemp("f") / "t-0")
        try:
            if target:
                follower.append_as_follower(again.read(0, 1 << 30).read_bytes())
            assert again.collect_aborted_transactions(0, 10**9) == follower.collect_aborted_transactions(0, 10**9)
            assert again.ongoing_transactions() == follower.ongoing_transactions()
            _commit_hw(again)
            _commit_hw(follower)
            assert again.last_stable_offset == follower.last_stable_offset
        finally:
            follower.close()
    finally:
        again.close()


def test_verification_guard_refuses_a_batch_whose_transaction_ended_after_its_verification(log: PartitionLog) -> None:
    """KIP-890's VerificationGuard: the broker takes the guard before asking the coordinator; a marker written
    before the verified batch reaches the log clears it, so the late batch cannot open a transaction the
    coordinator no longer knows (a hanging transaction); nothing of it is written."""
    ps = log.producer_state
    assert ps is not None
    a = Producer(7)
    guard = ps.start_verification(7)
    assert ps.start_verification(7) is guard  # one live guard per producer until used or cleared
    log.append_as_leader(a.batch(), now_ms=NOW, verification_guard=guard)  # opens the transaction: 0-1
    assert log.ongoing_transactions() == {7: 0}
    later = a.batch()
    log.append_as_leader(later, now_ms=NOW, verification_guard=object())  # joins the open transaction: 2-3
    log.append_txn_marker(7, 0, 0, commit=False, now_ms=NOW)  # 4
    # the next transaction: verified, then the coordinator aborts it (timeout) before the batch is appended
    guard = ps.start_verification(7)
    log.append_txn_marker(7, 0, 0, commit=False, now_ms=NOW)  # 5
    late = a.batch()
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(late, now_ms=NOW, verification_guard=guard)
    # a batch that was not verified because a transaction was open at the produce, which ended meanwhile
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(late, now_ms=NOW, verification_guard=object())
    assert log.log_end_offset == 6 and log.ongoing_transactions() == {}
    # verified again: accepted
    log.append_as_leader(late, now_ms=NOW, verification_guard=ps.start_verification(7))
    assert log.ongoing_transactions() == {7: 6}
