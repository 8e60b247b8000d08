"""The replica fetcher's side of KIP-227 fetch sessions (issue 30): what a follower's Fetch lists and forgets,
and how it answers the leader's session id and errors (``broker/fetch_session.FollowerSessionState``). The
leader's side runs in tests/cluster/test_replication.py (followers replicate byte-identically through
sessions) and tests/broker/test_fetch_sessions.py."""

from __future__ import annotations

from tidelog.broker.fetch_session import (
    CachedPartition,
    FollowerSessionState,
)

FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71
A, B, C = ("t", 0), ("t", 1), ("u", 0)


def state(offset: int, epoch: int = 5, last: int = 4, start: int = 0) -> tuple[int, int, int, int, int]:
    return (offset, epoch, last, start, 1 << 20)


def test_full_then_incremental_lists_only_changes() -> None:
    s = FollowerSessionState()
    sid, epoch, listed, forgotten = s.build({A: state(10), B: state(20)})
    assert (sid, epoch, sorted(listed), forgotten) == (0, 0, [A, B], [])
    s.answered(0, 77)
    # nothing changed: an incremental request listing nothing (the leader fetches its cached offsets)
    assert s.build({A: state(10), B: state(20)}) == (77, 1, [], [])
    s.answered(0, 77)
    # A moved on, B's leader epoch changed, C is new
    sid, epoch, listed, forgotten = s.build({A: state(15), B: state(20, epoch=6), C: state(0)})
    assert (sid, epoch, sorted(listed), forgotten) == (77, 2, [A, B, C], [])
    s.answered(0, 77)
    # B backs off (not fetched now): forgotten; listed again (whole) when it comes back
    assert s.build({A: state(15), C: state(0)}) == (77, 3, [], [B])
    s.answered(0, 77)
    assert s.build({A: state(15), B: state(20, epoch=6), C: state(0)}) == (77, 4, [B], [])
    s.answered(0, 77)
    assert (s.full_requests, s.incremental_requests) == (1, 4)


def test_a_change_is_listed_again_until_an_answer_took_it() -> None:
    s = FollowerSessionState()
    s.build({A: state(10)})
    s.answered(0, 9)
    assert s.build({A: state(11)})[2] == [A]
    s.reset()  # the connection closed before the answer: the session is gone, a full request follows
    assert s.build({A: state(11)}) == (0, 0, [A], [])


def test_session_errors_and_a_leader_without_sessions() -> None:
    s = FollowerSessionState()
    s.build({A: state(1)})
    s.answered(0, 0)  # the leader opened no session (full cache, an older broker): full requests go on
    assert s.build({A: state(1)}) == (0, 0, [A], [])
    s.answered(0, 5)
    assert s.build({A: state(2)})[:2] == (5, 1)
    for code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
        s.answered(code, 0)  # the leader lost it: start over with a full request
        assert s.build({A: state(2)}) == (0, 0, [A], [])
        s.answered(0, 6)
        assert s.build({A: state(2)})[:2] == (6, 1)
    s.answered(0, 99)  # another id than ours: start over
    assert s.build({A: state(2)})[:2] == (0, 0)


def test_a_diverging_epoch_is_always_news_for_the_session() -> None:
    cp = CachedPartition(b"", 0, 1 << 20, 5, 4)
    entry = {"error_code": 0, "records": b"", "high_watermark": 3, "last_stable_offset": 3, "log_start_offset": 0}
    assert cp.must_respond(dict(entry))  # the first answer
    assert not cp.must_respond(dict(entry))  # nothing new
    assert cp.must_respond(dict(entry, diverging_epoch={"epoch": 3, "end_offset": 2}))
    assert not cp.must_respond(dict(entry, diverging_epoch={"epoch": -1, "end_offset": -1}))
