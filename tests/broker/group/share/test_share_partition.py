"""The share-partition state machine (broker/group/share_partition.py) on its own: acquisition, locks, delivery
counts, acknowledgement types, the SPSO/SPEO window and its bound."""

from __future__ import annotations

import pytest

from tidelog.broker.group.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    AckError,
    SharePartition,
    batch_ranges,
)
from tidelog.errors import ErrorCode
from tidelog.records.batch import build_batch


def _sp(limit: int = 3, locks: int = 100) -> SharePartition:
    return SharePartition(0, lock_ms=1000, delivery_limit=limit, max_locks=locks)


def test_acquire_ack_and_window() -> None:
    sp = _sp()
    batches = [(0, 3, False), (4, 9, False)]
    assert sp.acquire("a", batches, 2, 0.0, 10) == [(0, 3, 1)]  # whole batches: MaxRecords is a soft limit
    assert sp.acquire("b", batches, 100, 0.0, 10) == [(4, 9, 1)]  # the rest, never a record held by a
    assert sp.speo == 10 and sp.spso == 0
    with pytest.raises(AckError) as e:
        sp.acknowledge("b", 0, 0, [ACCEPT])  # a's record
    assert e.value.name == ErrorCode.INVALID_RECORD_STATE
    sp.acknowledge("a", 0, 3, [ACCEPT, ACCEPT, RELEASE, REJECT])
    assert sp.spso == 2  # 0-1 accepted; 2 is available again
    assert sp.state_of(3) == (ARCHIVED, 1) and sp.state_of(2) == (AVAILABLE, 1)
    assert sp.acquire("b", [(0, 9, False)], 100, 0.0, 10) == [(2, 2, 2)]
    sp.acknowledge("b", 2, 2, [ACCEPT])
    sp.acknowledge("b", 4, 9, [ACCEPT])  # one type for the whole batch
    assert sp.spso == sp.speo == 10 and not sp.runs


def test_lock_expiry_and_delivery_count_limit() -> None:
    sp = _sp(limit=2)
    assert sp.acquire("a", [(0, 0, False)], 10, 0.0, 1) == [(0, 0, 1)]
    assert sp.expire(0.5) == 0
    assert sp.expire(1.0) == 1  # the lock (1 s) ran out: available again
    assert sp.acquire("b", [(0, 0, False)], 10, 1.0, 1) == [(0, 0, 2)]
    sp.acknowledge("b", 0, 0, [RELEASE])  # second delivery released at the limit: archived, the window moves on
    assert sp.spso == 1 and sp.acquire("c", [(0, 0, False)], 10, 2.0, 1) == []


def test_member_release_window_bound_and_control_batches() -> None:
    sp = _sp(locks=100)
    batches = [(0, 59, False), (60, 119, False), (120, 199, False)]
    # no batch is started once 100 are in flight; a started batch is acquired whole (60..119)
    assert sp.acquire("a", batches, 1000, 0.0, 200) == [(0, 119, 1)]
    assert sp.fetch_offset() is None  # the window is full
    assert sp.acquire("b", batches, 1000, 0.0, 200) == []
    assert sp.release_member("a") == 120
    assert sp.fetch_offset() == 0
    sp2 = _sp()
    assert sp2.acquire("a", [(0, 0, True), (1, 2, False)], 10, 0.0, 3) == [(1, 2, 1)]  # a control batch: archived
    sp2.acknowledge("a", 1, 2, [GAP])
    assert sp2.spso == 3 and sp2.runs == []
    with pytest.raises(AckError):
        sp2.acknowledge("a", 5, 4, [ACCEPT])  # last < first: INVALID_REQUEST
    assert sp2.state_of(0) is None  # below the SPSO: done


def test_runs_split_and_stay_bounded() -> None:
    sp = _sp(limit=5, locks=100)
    assert sp.acquire("a", [(0, 9, False)], 100, 0.0, 10) == [(0, 9, 1)]
    assert len(sp.runs) == 1  # one run for a whole acquisition
    sp.acknowledge("a", 0, 9, [ACCEPT, RELEASE, RELEASE, ACCEPT, REJECT, ACCEPT, ACCEPT, RELEASE, ACCEPT, ACCEPT])
    assert sp.spso == 1
    assert [(r.first, r.last, r.state) for r in sp.runs] == [
        (1, 2, AVAILABLE), (3, 3, ACKNOWLEDGED), (4, 4, ARCHIVED), (5, 6, ACKNOWLEDGED), (7, 7, AVAILABLE),
        (8, 9, ACKNOWLEDGED)]
    # a re-acquisition takes the available runs inside what was read, in order, each with its count
    assert sp.acquire("b", [(0, 9, False)], 2, 0.0, 10) == [(1, 2, 2)]
    assert sp.acquire("b", [(0, 9, False)], 10, 0.0, 10) == [(7, 7, 2)]
    sp.acknowledge("b", 1, 2, [ACCEPT])
    sp.acknowledge("b", 7, 7, [ACCEPT])
    assert sp.spso == sp.speo == 10 and sp.runs == []
    assert ACKNOWLEDGED != ARCHIVED


def test_batch_ranges_of_log_bytes() -> None:
    data = build_batch([(None, b"x", [])] * 3, base_offset=5) + build_batch([(None, b"y", [])], base_offset=8)
    assert [(b, last, c) for _, _, b, last, c in batch_ranges(data)] == [(5, 7, False), (8, 8, False)]
    assert batch_ranges(data[:-1])[-1][3] == 7  # a truncated trailing batch is left out
