"""The cleaner's transaction rules (Kafka's LogCleaner with CleanedTransactionMetadata): aborted records go
whatever their keys; committed transactional records are compacted like others; a marker stays until its
transaction's data is gone, then gets a delete horizon (attribute bit 6) and goes after ``delete.retention.ms``;
nothing at or past the first unstable offset is cleaned; a producer's last batch is kept (empty if need be)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from cleanup_helpers import NOW, TP, append, check_invariants, compact_config, open_log, read_all
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records.batch import build_batch, decode_batch, parse_control_record
from tidelog.storage.cleaner import FAULT_STEPS, CleanerConfig, LogCleaner, plan_log
from tidelog.storage.log import PartitionLog
from tidelog.storage.txn_index import AbortedTxn

RETENTION = 1000


class Txn:
    def __init__(self, plog: PartitionLog, pid: int) -> None:
        self.plog, self.pid, self.seq = plog, pid, 0

    def write(self, recs: list[tuple[bytes, bytes | None]], ts: int = NOW) -> None:
        batch = build_batch([(k, v, (), ts) for k, v in recs], producer_id=self.pid, producer_epoch=0,
                            base_sequence=self.seq, is_transactional=True)
        self.seq += len(recs)
        self.plog.append_as_leader(batch, now_ms=ts)
        self.plog.high_watermark = self.plog.log_end_offset

    def end(self, commit: bool) -> int:
        info = self.plog.append_txn_marker(self.pid, 0, 0, commit=commit, now_ms=NOW)
        self.plog.high_watermark = self.plog.log_end_offset
        return info.first_offset


def _clean(plog: PartitionLog, now: int, *, expect: bool = True) -> None:
    if plog.active_segment.size:
        plog.roll(now_ms=now)
    plog.high_watermark = plog.log_end_offset
    results = LogCleaner(CleanerConfig(), lambda: {TP: plog}).clean_until_done(now_ms=now)
    assert (bool(results) or not expect) and not any(r.aborted for r in results)
    check_invariants(plog)


def key_values(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record (control records left out)."""
    return [(r.offset, r.key, r.value) for h, recs in read_all(plog) if not h.is_control for r in recs]


def _markers(plog: PartitionLog) -> list[tuple[int, str, bool, int]]:
    """(offset, type, has delete horizon, records) of every control batch."""
    out = []
    for h, recs in read_all(plog):
        if h.is_control:
            kind = parse_control_record(recs[0]).type.name if recs else "EMPTY"
            out.append((h.base_offset, kind, h.has_delete_horizon, len(recs)))
    return out


def test_aborted_records_go_regardless_of_key_and_the_marker_after_its_horizon(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config(delete_retention_ms=RETENTION))
    p = Txn(plog, 7)
    append(plog, [(b"a", b"1")])  # 0
    p.write([(b"unique", b"aborted"), (b"a", b"aborted-a")])  # 1-2
    abort_at = p.end(commit=False)  # 3
    p.write([(b"b", b"committed")])  # 4
    commit_at = p.end(commit=True)  # 5
    append(plog, [(b"c", b"3")])  # 6
    assert plog.collect_aborted_transactions(0, 10) == [AbortedTxn(7, 1, 3, 4)]

    _clean(plog, NOW + 10)
    # the aborted records are gone (the unique key too) and did not supersede a=1; the committed record stays
    assert key_values(plog) == [(0, b"a", b"1"), (4, b"b", b"committed"), (6, b"c", b"3")]
    # both markers stay: the walk saw their transactions' batches; the abort keeps its .txnindex entry
    assert _markers(plog) == [(abort_at, "ABORT", False, 1), (commit_at, "COMMIT", False, 1)]
    assert plog.collect_aborted_transactions(0, 10) == [AbortedTxn(7, 1, 3, 4)]

    # the committed value is superseded by a plain write; its batch is the producer's last data batch, so it is
    # kept empty (producer state), and as a batch of the committed transaction it keeps the COMMIT marker too
    append(plog, [(b"b", b"newer")], ts=NOW + 20)  # 7
    _clean(plog, NOW + 30)
    assert key_values(plog) == [(0, b"a", b"1"), (6, b"c", b"3"), (7, b"b", b"newer")]
    empties = [(h.base_offset, h.producer_id, h.is_transactional) for h, recs in read_all(plog) if not recs]
    assert empties == [(4, 7, True)]
    # the second cleaning saw no batch of the aborted transaction: its marker gets the delete horizon (bit 6,
    # baseTimestamp = now + delete.retention.ms), and its entry is not carried into the cleaned .txnindex
    assert _markers(plog) == [(abort_at, "ABORT", True, 1), (commit_at, "COMMIT", False, 1)]
    horizon = next(h.base_timestamp for h, _ in read_all(plog) if h.base_offset == abort_at)
    assert horizon == NOW + 30 + RETENTION
    assert plog.collect_aborted_transactions(0, 10) == []

    # before the horizon the marker stays; after it, it goes
    append(plog, [(b"d", b"4")], ts=NOW + 40)
    _clean(plog, NOW + 40)
    assert len(_markers(plog)) == 2
    append(plog, [(b"e", b"5")], ts=NOW + 50)
    _clean(plog, NOW + 30 + RETENTION)
    assert _markers(plog) == [(commit_at, "COMMIT", False, 1)]
    plog.close()


def test_commit_marker_goes_once_its_data_is_gone(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config(delete_retention_ms=RETENTION))
    p = Txn(plog, 5)
    p.write([(b"k", b"txn")])  # 0
    commit_at = p.end(commit=True)  # 1
    append(plog, [(b"z", b"0")])  # 2
    # the same producer writes later (idempotent, not transactional): batch 0 is no longer its last
    plog.append_as_leader(build_batch([(b"other", b"v", (), NOW)], producer_id=5, producer_epoch=0,
                                      base_sequence=1), now_ms=NOW)  # 3
    append(plog, [(b"k", b"plain")])  # 4: supersedes the committed k
    _clean(plog, NOW + 10)
    assert [o for o, _, _ in key_values(plog)] == [2, 3, 4]
    assert _markers(plog) == [(commit_at, "COMMIT", False, 1)]  # the walk still saw batch 0
    append(plog, [(b"y", b"1")], ts=NOW + 20)
    _clean(plog, NOW + 20)
    assert _markers(plog) == [(commit_at, "COMMIT", True, 1)]
    append(plog, [(b"y", b"2")], ts=NOW + 30)
    _clean(plog, NOW + 20 + RETENTION)
    assert _markers(plog) == []
    plog.close()


def test_committed_transactional_records_supersede_and_aborted_ones_do_not(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config())
    p, q = Txn(plog, 1), Txn(plog, 2)
    append(plog, [(b"k", b"v1"), (b"j", b"j1")])  # 0-1
    p.write([(b"k", b"v2")])  # 2
    p.end(commit=True)  # 3
    q.write([(b"k", b"v3"), (b"j", b"j3")])  # 4-5
    q.end(commit=False)  # 6
    append(plog, [(b"x", b"x")])  # 7
    _clean(plog, NOW + 10)
    values = {k: v for _, k, v in key_values(plog)}
    assert values == {b"k": b"v2", b"j": b"j1", b"x": b"x"}
    # q's aborted batch was its last data batch: kept empty, transactional bit kept
    empty = [h for h, recs in read_all(plog) if not recs]
    assert [(h.base_offset, h.last_offset, h.producer_id, h.is_transactional) for h in empty] == [(4, 5, 2, True)]
    # p's batch kept whole, still transactional
    kept = [h for h, recs in read_all(plog) if h.producer_id == 1 and not h.is_control]
    assert [(h.base_offset, h.is_transactional, h.records_count) for h in kept] == [(2, True, 1)]
    plog.close()


def test_nothing_at_or_past_the_first_unstable_offset_is_cleaned(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config(segment_bytes=1 << 20))
    p = Txn(plog, 3)
    append(plog, [(b"k", b"old")])  # 0
    plog.roll(now_ms=NOW)
    p.write([(b"t", b"open")])  # 1: an open transaction
    append(plog, [(b"k", b"new")])  # 2
    plog.roll(now_ms=NOW)
    append(plog, [(b"k", b"newest")])  # 3
    plog.roll(now_ms=NOW)
    plog.high_watermark = plog.log_end_offset
    assert plog.first_unstable_offset() == 1 and plog.last_stable_offset == 1
    ltc = plan_log(TP, plog, None, NOW + 10)
    assert ltc.first_uncleanable_offset == 1
    LogCleaner(CleanerConfig(), lambda: {TP: plog}).clean_until_done(now_ms=NOW + 10)
    # k=old at 0 stays: the newer values lie past the first unstable offset, which the map never reads
    assert key_values(plog) == [(0, b"k", b"old"), (1, b"t", b"open"), (2, b"k", b"new"), (3, b"k", b"newest")]
    p.end(commit=True)
    _clean(plog, NOW + 20)
    assert key_values(plog) == [(1, b"t", b"open"), (3, b"k", b"newest")]
    plog.close()


def test_cleaned_log_reopens_with_its_txnindex(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config())
    p = Txn(plog, 9)
    append(plog, [(b"a", b"1")])
    p.write([(b"a", b"x")])
    p.end(commit=False)
    p.write([(b"b", b"y")])
    p.end(commit=True)
    _clean(plog, NOW + 10)
    entries = plog.collect_aborted_transactions(0, 100)
    assert entries == [AbortedTxn(9, 1, 2, 3)]
    assert not list(plog.dir.glob("*.cleaned")) and not list(plog.dir.glob("*.swap"))
    plog.close()
    again = open_log(tmp_path, compact_config())
    assert again.collect_aborted_transactions(0, 100) == entries
    again.close()


_steps = st.lists(
    st.tuples(st.sampled_from(["txn", "commit", "abort", "plain", "roll"]), st.integers(1, 3), st.integers(0, 4)),
    min_size=1, max_size=40,
)


def _committed_view(plog: PartitionLog) -> dict[bytes, bytes | None]:
    """The newest value per key a read_committed consumer sees (aborted records skipped by the aborted list)."""
    lso = plog.last_stable_offset
    info = plog.read(plog.log_start_offset, 1 << 30, max_offset=lso)
    aborted = sorted(plog.collect_aborted_transactions(plog.log_start_offset, lso), key=lambda t: t.first_offset)
    aborting: set[int] = set()
    view: dict[bytes, bytes | None] = {}
    data = info.read_bytes()
    pos = 0
    while pos < len(data):
        h, recs = decode_batch(data, pos)
        pos += h.size
        while aborted and aborted[0].first_offset <= h.last_offset:
            aborting.add(aborted.pop(0).producer_id)
        if h.is_control:
            if recs and parse_control_record(recs[0]).type.name == "ABORT":
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        for r in recs:
            view[r.key] = r.value
    return view


@settings(max_examples=20, deadline=None)
@given(steps=_steps, finish=st.lists(st.booleans(), min_size=3, max_size=3))
def test_random_transactional_logs_keep_the_committed_view(steps: list, finish: list[bool]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plog = open_log(Path(tmp), compact_config(segment_bytes=400))
        txns = {pid: Txn(plog, pid) for pid in (1, 2, 3)}
        open_ = set()
        aborted_offsets: set[int] = set()
        pending: dict[int, list[int]] = {}
        for op, pid, key in steps:
            k = b"k%d" % key
            if op == "roll":
                if plog.active_segment.size:
                    plog.roll(now_ms=NOW)
            elif op == "plain":
                append(plog, [(k, b"plain-%d" % plog.log_end_offset)])
            elif op == "txn":
                start = plog.log_end_offset
                txns[pid].write([(k, b"txn-%d" % start)])
                open_.add(pid)
                pending.setdefault(pid, []).append(start)
            elif pid in open_:
                txns[pid].end(commit=op == "commit")
                open_.discard(pid)
                if op == "abort":
                    aborted_offsets.update(pending.get(pid, []))
                pending.pop(pid, None)
        for pid, commit in zip((1, 2, 3), finish, strict=True):
            if pid in open_:
                txns[pid].end(commit=commit)
                if not commit:
                    aborted_offsets.update(pending.get(pid, []))
        before = _committed_view(plog)
        _clean(plog, NOW + 10, expect=False)
        assert _committed_view(plog) == before
        # no record of an aborted transaction is left in the cleaned segments
        cleaned_end = plog.active_segment.base_offset
        left = {r.offset for h, recs in read_all(plog) if not h.is_control for r in recs}
        assert not {o for o in aborted_offsets if o < cleaned_end} & left
        # a second round (more dirt) keeps the view, and so does a reopen
        append(plog, [(b"k0", b"late")], ts=NOW + 20)
        before = _committed_view(plog)
        _clean(plog, NOW + 30 + RETENTION, expect=False)
        assert _committed_view(plog) == before
        plog.close()
        again = open_log(Path(tmp), compact_config(segment_bytes=400))
        assert _committed_view(again) == before
        again.close()


@pytest.mark.parametrize("step", FAULT_STEPS)
def test_a_crash_at_each_cleaning_step_keeps_the_txnindex_right(tmp_path: Path, step: str) -> None:
    """Whatever step of the swap a cleaning dies at, the reopened log answers the same aborted transactions and
    read_committed view (a recovered .swap has its .txnindex rebuilt from the log)."""
    plog = open_log(tmp_path, compact_config(segment_bytes=300))
    txns = {pid: Txn(plog, pid) for pid in (1, 2)}
    for i in range(12):
        pid = 1 + i % 2
        txns[pid].write([(b"k%d" % (i % 3), b"v%d" % i)])
        append(plog, [(b"p%d" % (i % 4), b"plain%d" % i)])
        txns[pid].end(commit=i % 3 != 0)
    plog.roll(now_ms=NOW)
    plog.high_watermark = plog.log_end_offset
    view = _committed_view(plog)

    def fault(name: str) -> None:
        if name == step:
            raise RuntimeError(name)

    cleaner = LogCleaner(CleanerConfig(), lambda: {TP: plog})
    cleaner.fault = fault
    with pytest.raises(RuntimeError):
        cleaner.clean_until_done(now_ms=NOW + 10)
    # the process dies: the log is abandoned without close and reopened after an unclean shutdown
    again = open_log(tmp_path, compact_config(segment_bytes=300), clean_shutdown=False)
    try:
        d = again.dir
        assert not [p for p in d.iterdir() if p.name.endswith((".cleaned", ".swap"))]
        assert _committed_view(again) == view
        check_invariants(again)
        entries = again.collect_aborted_transactions(0, 10**9)
        # every ABORT marker whose transaction still has batches in the log has its entry, and every entry is
        # that of an ABORT marker in the log
        needed, markers, seen = set(), set(), set()
        for h, recs in read_all(again):
            if h.is_control and recs:
                if parse_control_record(recs[0]).type.name == "ABORT":
                    markers.add(h.base_offset)
                    if h.producer_id in seen:
                        needed.add(h.base_offset)
                seen.discard(h.producer_id)
            elif h.is_transactional:
                seen.add(h.producer_id)
        got = [e.last_offset for e in entries]
        assert got == sorted(got) and needed <= set(got) <= markers
        LogCleaner(CleanerConfig(), lambda: {TP: again}).clean_until_done(now_ms=NOW + 20)
        assert _committed_view(again) == view
    finally:
        again.close()
