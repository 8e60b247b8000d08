"""Unit tests of the history checker (tests/jepsen/checker.py): hand-made histories that contain exactly one
anomaly type each, tricky valid ones, and a property test over histories simulated from a correct log."""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

_here = str(Path(__file__).resolve().parent)
if _here not in sys.path:
    sys.path.insert(0, _here)

import checker  # noqa: E402
from checker_model import Anomaly  # noqa: E402

RC, RU = "read_committed", "read_uncommitted"
Recs = dict[str, list[tuple[int, Any]]]


class B:
    """A hand-made history; every method returns the index of the event that completes what it records."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.add("runner", "info", "meta", {"workload": "txn", "acks": "all"})

    def add(self, p: int | str, typ: str, f: str, value: Any, error: str | None = None) -> int:
        ev: dict[str, Any] = {"index": len(self.events), "time": len(self.events) * 10_000_000, "process": p,
                              "type": typ, "f": f, "value": value}
        if error is not None:
            ev["error"] = error
        self.events.append(ev)
        return len(self.events) - 1

    def open(self, p: int, role: str = "consumer", *, transactional: bool = False, isolation: str = RC,
             mode: str = "assign", group: str | None = None) -> int:
        v = {"role": role, "client": "confluent-kafka", "transactional": transactional, "isolation": isolation,
             "mode": mode, "group": group}
        self.add(p, "invoke", "open", v)
        return self.add(p, "ok", "open", v)

    def send(self, p: int, k: str, v: int, off: int | None = None, typ: str = "ok", error: str | None = None) -> int:
        self.add(p, "invoke", "send", [["send", k, v]])
        return self.add(p, typ, "send", [["send", k, [off, v]]] if typ == "ok" else [["send", k, v]], error)

    def poll(self, p: int, recs: Recs) -> int:
        self.add(p, "invoke", "poll", [["poll"]])
        return self.add(p, "ok", "poll", [["poll", {k: [list(r) for r in lst] for k, lst in recs.items()}]])

    def txn_invoke(self, p: int, sends: list[tuple[str, int, int | None]], polls: list[Recs] | None = None,
                   offsets: tuple[str, dict[str, int]] | None = None, sends_first: bool = False) -> list[Any]:
        """Invoke a txn; returns the completed micro-ops (for txn_done)."""
        pm: list[list[Any]] = [["poll"] for _ in polls or []]
        sm: list[list[Any]] = [["send", k, v] for k, v, _ in sends]
        om: list[list[Any]] = [["offsets", offsets[0], offsets[1]]] if offsets else []
        self.add(p, "invoke", "txn", (sm + pm if sends_first else pm + sm) + om)
        pd = [["poll", {k: [list(r) for r in lst] for k, lst in recs.items()}] for recs in polls or []]
        sd = [["send", k, [off, v]] for k, v, off in sends]
        return (sd + pd if sends_first else pd + sd) + om

    def txn_done(self, p: int, done: list[Any], typ: str = "ok", error: str | None = None) -> int:
        if typ == "ok":
            return self.add(p, "ok", "txn", done)
        inv = next(e for e in reversed(self.events) if e["process"] == p and e["type"] == "invoke")
        return self.add(p, typ, "txn", inv["value"], error)

    def txn(self, p: int, sends: list[tuple[str, int, int | None]], polls: list[Recs] | None = None,
            typ: str = "ok", **kw: Any) -> int:
        return self.txn_done(p, self.txn_invoke(p, sends, polls, **kw), typ)

    def assign(self, p: int, partitions: list[str], positions: dict[str, int | None]) -> int:
        self.add(p, "invoke", "assign", {"partitions": partitions, "positions": positions})
        return self.add(p, "ok", "assign", {"partitions": partitions, "positions": positions})

    def commit(self, p: int, group: str, offsets: dict[str, int], typ: str = "ok") -> int:
        self.add(p, "invoke", "commit-offsets", {"group": group, "offsets": offsets})
        return self.add(p, typ, "commit-offsets", {"group": group, "offsets": offsets})

    def final(self, p: int, to: dict[str, int], frm: dict[str, int] | None = None) -> int:
        return self.add(p, "ok", "final-read", {"from": frm or dict.fromkeys(to, 0), "to": to})

    def nemesis(self, start: bool, fault: str) -> int:
        return self.add("nemesis", "info", "start-fault" if start else "stop-fault",
                        {"fault": fault, "targets": ["n1"], "detail": None})

    def check(self, **kw: Any) -> checker.Report:
        return checker.check(self.events, **kw)


def only(rep: checker.Report, typ: str) -> list[Anomaly]:
    """Assert the report has anomalies of exactly this type; return them."""
    assert {t for t, n in rep.counts().items() if n} == {typ}, rep.summary()
    return rep.anomalies[typ]


def clean(rep: checker.Report) -> None:
    assert rep.valid and not any(rep.counts().values()), rep.summary()


def queue(b: B, n: int = 5, k: str = "q/0", p: int = 0, base: int = 0) -> list[int]:
    """Producer p sends values base..base+n-1 to k at offsets 0..n-1; returns the ok indexes."""
    b.open(p, "producer")
    return [b.send(p, k, base + i, i) for i in range(n)]


# -- valid histories ------------------------------------------------------------------------------------------


def test_valid_queue_with_final_read() -> None:
    b = B()
    queue(b)
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1)]})
    b.poll(1, {"q/0": [(2, 2), (3, 3), (4, 4)]})
    b.final(1, {"q/0": 5})
    rep = b.check()
    clean(rep)
    assert rep.stats["acked_verified_by_final_read"] == 5
    assert rep.stats["by_f"]["send"] == {"ok": 5, "fail": 0, "info": 0}


def test_valid_info_and_failed_sends_unseen() -> None:
    b = B()
    queue(b, 2)
    b.send(0, "q/0", 10, typ="info", error="timeout")
    b.open(2, "producer")
    b.send(2, "q/0", 11, typ="fail", error="NOT_ENOUGH_REPLICAS")
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1)]})
    b.final(1, {"q/0": 2})
    rep = b.check()
    clean(rep)
    assert rep.stats["unseen"] == 1


def test_valid_info_send_seen() -> None:
    b = B()
    queue(b, 2)
    b.send(0, "q/0", 10, typ="info")
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 10)]})
    b.final(1, {"q/0": 3})
    rep = b.check()
    clean(rep)
    assert rep.stats["unseen"] == 0


def test_valid_read_uncommitted_sees_aborted_read_committed_skips() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.txn(0, [("q/0", 0, 0), ("q/1", 1, 0)])            # offsets 0, marker 1 / 0, marker 1
    b.txn(0, [("q/0", 2, 2), ("q/1", 3, 2)], typ="fail")  # aborted: 2, marker 3
    b.txn(0, [("q/0", 4, 4)])                           # 4, marker 5
    b.open(1, isolation=RU)
    b.assign(1, ["q/0", "q/1"], {"q/0": 0, "q/1": 0})
    b.poll(1, {"q/0": [(0, 0), (2, 2), (4, 4)], "q/1": [(0, 1), (2, 3)]})
    b.open(2, isolation=RC)
    b.assign(2, ["q/0", "q/1"], {"q/0": 0, "q/1": 0})
    b.poll(2, {"q/0": [(0, 0), (4, 4)], "q/1": [(0, 1)]})  # skips the aborted records and the markers
    b.final(2, {"q/0": 6, "q/1": 4})
    b.final(1, {"q/0": 6, "q/1": 4})
    clean(b.check())


def test_valid_rebalance_rereads_from_committed_offsets() -> None:
    b = B()
    queue(b, 6)
    b.open(1, mode="subscribe", group="g")
    b.assign(1, ["q/0"], {"q/0": None})
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2)]})
    b.commit(1, "g", {"q/0": 2})
    b.poll(1, {"q/0": [(3, 3)]})
    b.assign(1, ["q/0"], {"q/0": 2})  # rebalance: restarts from the committed offset, re-reads 2 and 3
    b.poll(1, {"q/0": [(2, 2), (3, 3), (4, 4), (5, 5)]})
    b.final(1, {"q/0": 6})
    clean(b.check())


def test_valid_retention_and_ack_beyond_final_read() -> None:
    b = B()
    queue(b, 5)
    b.open(1)
    b.assign(1, ["q/0"], {"q/0": 3})
    b.poll(1, {"q/0": [(3, 3), (4, 4)]})
    b.final(1, {"q/0": 5}, frm={"q/0": 3})  # 0..2 removed by retention
    b.send(0, "q/0", 5, 5)                   # acked after the final read's end
    rep = b.check()
    clean(rep)
    assert rep.stats["acked_verified_by_final_read"] == 2
    assert rep.stats["acked_not_covered_by_final_read"] == 4


def test_valid_transaction_chain_has_no_cycle() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.open(1, "producer", transactional=True)
    b.txn(0, [("x/0", 1, 0), ("y/0", 2, 0)])
    b.txn(1, [("x/0", 3, 2), ("y/0", 4, 2)], polls=[{"x/0": [(0, 1)], "y/0": [(0, 2)]}])
    b.txn(0, [("x/0", 5, 4)], polls=[{"x/0": [(2, 3)]}])
    rep = b.check(allowed=())
    clean(rep)
    assert rep.stats["graph_edges"] >= 3


def test_valid_one_process_with_two_final_reads() -> None:
    b = B()
    queue(b, 2, "a/0")
    queue(b, 2, "b/0", p=5, base=10)
    b.open(1)
    b.poll(1, {"a/0": [(0, 0), (1, 1)]})
    b.final(1, {"a/0": 2})
    b.poll(1, {"b/0": [(0, 10), (1, 11)]})
    b.final(1, {"b/0": 2})
    rep = b.check()
    clean(rep)
    assert rep.stats["acked_verified_by_final_read"] == 4


def test_availability_stats() -> None:
    b = B()
    b.open(0, "producer")
    b.send(0, "q/0", 0, 0)
    b.nemesis(True, "pause")
    for _ in range(20):
        b.add("runner", "info", "noop", None)
    b.send(0, "q/0", 1, typ="info")
    b.nemesis(False, "pause")
    b.open(3, "producer")
    b.send(3, "q/0", 2, 1)
    av = b.check().stats["availability"]["q/0"]
    assert av["ok_sends"] == 2 and av["faults_during"] == ["pause"]
    assert av["longest_without_ok_send_s"] >= 0.2


# -- one anomaly each -----------------------------------------------------------------------------------------


def test_lost_write() -> None:
    b = B()
    oks = queue(b)
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1), (3, 3), (4, 4)]})
    fin = b.final(1, {"q/0": 5})
    (a,) = only(b.check(), "lost-write")
    assert a.indexes == [oks[2], fin] and a.details["value"] == 2 and a.key == "q/0"


def test_lost_write_past_the_end_of_a_truncated_log() -> None:
    """Acked at offsets 3 and 4, then the log was truncated to 3 and nothing written since: the final read ends
    at 3, below the acked offsets; both writes are lost although no final read 'covered' their offsets."""
    b = B()
    oks = queue(b)
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2)]})
    fin = b.final(1, {"q/0": 3})
    found = only(b.check(), "lost-write")
    assert sorted(a.details["value"] for a in found) == [3, 4]
    assert all(fin in a.indexes for a in found) and {a.indexes[0] for a in found} == {oks[3], oks[4]}


def test_lost_write_of_info_send_once_read() -> None:
    b = B()
    queue(b, 2)
    info = b.send(0, "q/0", 9, typ="info")
    b.open(1)
    seen = b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 9)]})
    b.open(2)
    b.poll(2, {"q/0": [(0, 0), (1, 1)]})
    fin = b.final(2, {"q/0": 3})
    (a,) = only(b.check(), "lost-write")
    assert a.indexes == [info, seen, fin]


def test_lost_write_of_committed_transaction_value_without_offset() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    t = b.txn(0, [("q/0", 1, None), ("q/1", 2, None)])
    b.open(1)
    b.poll(1, {"q/0": [(0, 1)]})
    fin = b.final(1, {"q/0": 2, "q/1": 2})
    (a,) = only(b.check(), "lost-write")
    assert a.indexes == [t, fin] and a.details["value"] == 2


def test_lost_write_torn_info_transaction() -> None:
    """An info transaction is committed once a read_committed reader saw one of its values: all must be there."""
    b = B()
    b.open(0, "producer", transactional=True)
    t = b.txn(0, [("q/0", 1, None), ("q/1", 2, None)], typ="info")
    b.open(1, isolation=RC)
    seen = b.poll(1, {"q/0": [(0, 1)], "q/1": []})
    fin = b.final(1, {"q/0": 2, "q/1": 2})
    (a,) = only(b.check(), "lost-write")
    assert a.indexes == [t, fin] and a.details["value"] == 2 and seen < fin


def test_valid_info_transaction_seen_only_read_uncommitted() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.txn(0, [("q/0", 1, None), ("q/1", 2, None)], typ="info")  # aborted after all: only ru saw it
    b.open(1, isolation=RU)
    b.poll(1, {"q/0": [(0, 1)]})
    b.open(2, isolation=RC)
    b.final(2, {"q/0": 2, "q/1": 0})
    clean(b.check())


def test_duplicate() -> None:
    b = B()
    oks = queue(b, 4)
    b.open(1)
    p = b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2), (3, 3), (4, 3)]})
    b.final(1, {"q/0": 5})
    (a,) = only(b.check(), "duplicate")
    assert a.indexes == [oks[3], p] and a.details["positions"] == [["q/0", 3], ["q/0", 4]]


def test_divergence() -> None:
    b = B()
    oks = queue(b, 3)
    b.open(5, "producer")
    b.send(5, "q/0", 7, typ="info")
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2)]})
    b.open(2)
    p2 = b.poll(2, {"q/0": [(2, 7)]})
    (a,) = only(b.check(), "divergence")
    assert a.indexes == [oks[2], p2] and a.details["offset"] == 2


@pytest.mark.parametrize("case", ["failed", "never-sent", "other-partition", "before-its-send"])
def test_phantom_write(case: str) -> None:
    b = B()
    queue(b, 2)
    w = -1
    if case == "before-its-send":
        b.open(1)
        p = b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 9)]})
        b.open(5, "producer")
        w = b.send(5, "q/0", 9, 2)
        (a,) = only(b.check(), "phantom-write")
        assert a.indexes == [p, w]
        return
    if case == "failed":
        w = b.send(0, "q/0", 9, typ="fail", error="INVALID_RECORD")
    elif case == "other-partition":
        b.open(5, "producer")
        w = b.send(5, "q/1", 9, typ="info")
    b.open(1)
    p = b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 9)]})
    (a,) = only(b.check(), "phantom-write")
    assert a.indexes == sorted(i for i in (w, p) if i >= 0)


def test_aborted_read() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.txn(0, [("q/0", 1, 0)])
    ab = b.txn(0, [("q/0", 2, 2)], typ="fail")
    b.open(1, isolation=RC)
    p = b.poll(1, {"q/0": [(0, 1), (2, 2)]})
    (a,) = only(b.check(), "aborted-read")
    assert a.indexes == [ab, p] and a.details["values"] == [2]


def test_uncommitted_read_of_own_write() -> None:
    b = B()
    b.open(0, "producer", transactional=True, isolation=RC)
    t = b.txn(0, [("q/0", 1, 0)], polls=[{"q/0": [(0, 1)]}], sends_first=True)
    (a,) = only(b.check(), "uncommitted-read")
    assert a.indexes == [t]


def test_nonmonotonic_send() -> None:
    b = B()
    b.open(0, "producer")
    s1 = b.send(0, "q/0", 1, 5)
    s2 = b.send(0, "q/0", 2, 3)
    (a,) = only(b.check(), "nonmonotonic-send")
    assert a.indexes == [s1, s2]


def test_nonmonotonic_poll() -> None:
    b = B()
    queue(b, 3)
    b.open(1)
    p1 = b.poll(1, {"q/0": [(0, 0), (1, 1)]})
    p2 = b.poll(1, {"q/0": [(1, 1), (2, 2)]})  # no assign between: 1 again
    (a,) = only(b.check(), "nonmonotonic-poll")
    assert a.indexes == [p1, p2]


def test_poll_gap_between_polls() -> None:
    b = B()
    oks = queue(b, 3)
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2)]})
    b.open(2)
    p1 = b.poll(2, {"q/0": [(0, 0)]})
    p2 = b.poll(2, {"q/0": [(2, 2)]})
    (a,) = only(b.check(), "poll-gap")
    assert a.indexes == [oks[1], p1, p2] and a.details["skipped_offsets"] == [1]


def test_poll_gap_from_assigned_position() -> None:
    b = B()
    oks = queue(b, 3)
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2)]})
    b.open(2)
    asg = b.assign(2, ["q/0"], {"q/0": 0})
    p = b.poll(2, {"q/0": [(1, 1), (2, 2)]})
    (a,) = only(b.check(), "poll-gap")
    assert a.indexes == [oks[0], asg, p]


def test_g0_write_cycle_allowed_by_default() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.open(1, "producer", transactional=True)
    d1 = b.txn_invoke(0, [("x/0", 1, 0), ("y/0", 2, 1)])
    d2 = b.txn_invoke(1, [("y/0", 3, 0), ("x/0", 4, 1)])
    t1 = b.txn_done(0, d1)
    t2 = b.txn_done(1, d2)
    rep = b.check()
    (a,) = only(rep, "G0")
    assert rep.valid
    assert a.indexes == [t1, t2]
    assert not b.check(allowed=()).valid


def test_g1c_send_before_poll_is_legal_in_kafka() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.open(1, "producer", transactional=True, isolation=RC)
    d1 = b.txn_invoke(0, [("x/0", 1, 0), ("y/0", 3, 1)])
    d2 = b.txn_invoke(1, [("y/0", 2, 0)], polls=[{"x/0": [(0, 1)]}], sends_first=True)
    t1 = b.txn_done(0, d1)
    t2 = b.txn_done(1, d2)
    rep = b.check()
    (a,) = only(rep, "G1c")
    assert a.indexes == [t1, t2] and a.details["ww_edges"] == 1
    assert rep.valid and not b.check(allowed=()).valid


def test_g1c_through_a_concurrent_transaction_is_legal() -> None:
    """T1 -wr-> T2 -ww-> T3 -ww-> T1, every transaction polling before it sends: T3 stays open throughout."""
    b = B()
    for p in (0, 1, 2):
        b.open(p, "producer", transactional=True, isolation=RC)
    d3 = b.txn_invoke(2, [("j/0", 3, 0), ("k/0", 5, 1)])
    t1 = b.txn(0, [("x/0", 1, 0), ("j/0", 2, 1)])
    t2 = b.txn(1, [("k/0", 4, 0)], polls=[{"x/0": [(0, 1)]}])
    t3 = b.txn_done(2, d3)
    rep = b.check()
    (a,) = only(rep, "G1c")
    assert a.indexes == [t1, t2, t3] and rep.valid


def test_impossible_cycle() -> None:
    """T2 polls T1's committed value, then sends to y, where its record lands before T1's."""
    b = B()
    b.open(0, "producer", transactional=True)
    b.open(1, "producer", transactional=True, isolation=RC)
    t1 = b.txn(0, [("x/0", 1, 0), ("y/0", 3, 1)])
    t2 = b.txn(1, [("y/0", 2, 0)], polls=[{"x/0": [(0, 1)]}])
    rep = b.check()
    assert rep.counts() == {"G1c": 1, "impossible-cycle": 1} and not rep.valid, rep.summary()
    (a,) = rep.anomalies["impossible-cycle"]
    assert a.indexes == [t1, t2]
    assert "commit of event" in a.explanation and "poll #1 of event" in a.explanation


def test_lost_committed_offset() -> None:
    b = B()
    queue(b, 6)
    b.open(1, mode="subscribe", group="g")
    b.assign(1, ["q/0"], {"q/0": None})
    b.poll(1, {"q/0": [(0, 0), (1, 1), (2, 2), (3, 3)]})
    c = b.commit(1, "g", {"q/0": 4})
    b.open(2, mode="subscribe", group="g")
    asg = b.assign(2, ["q/0"], {"q/0": 1})
    b.poll(2, {"q/0": [(1, 1)]})
    (a,) = only(b.check(), "lost-committed-offset")
    assert a.indexes == [c, asg]


def test_lost_committed_offset_of_a_transaction() -> None:
    b = B()
    queue(b, 4)
    b.open(1, "producer", transactional=True, isolation=RC, group="gt")
    b.assign(1, ["q/0"], {"q/0": None})
    t = b.txn(1, [("o/0", 100, 0)], polls=[{"q/0": [(0, 0), (1, 1), (2, 2)]}], offsets=("gt", {"q/0": 3}))
    b.txn(1, [("o/0", 101, 2)], polls=[{"q/0": [(3, 3)]}], offsets=("gt", {"q/0": 4}), typ="fail")
    asg = b.assign(1, ["q/0"], {"q/0": 1})  # rewound after the abort: 3 expected
    b.open(2, "producer", transactional=True, isolation=RC, group="gt")
    b.assign(2, ["q/0"], {"q/0": None})    # null: not judged
    (a,) = only(b.check(), "lost-committed-offset")
    assert a.indexes == [t, asg]


def test_committed_offset_may_regress_to_a_concurrent_commit() -> None:
    b = B()
    queue(b, 6)
    b.open(1, mode="subscribe", group="g")
    b.open(2, mode="subscribe", group="g")
    b.add(2, "invoke", "commit-offsets", {"group": "g", "offsets": {"q/0": 1}})  # a zombie's slow commit
    b.commit(1, "g", {"q/0": 4})
    b.add(2, "ok", "commit-offsets", {"group": "g", "offsets": {"q/0": 1}})
    b.open(3, mode="subscribe", group="g")
    b.assign(3, ["q/0"], {"q/0": 1})
    clean(b.check())


def test_check_file_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = B()
    queue(b, 3)
    b.open(1)
    b.poll(1, {"q/0": [(0, 0), (2, 2)]})
    b.final(1, {"q/0": 3})
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in b.events))
    rep = checker.check_file(path)
    assert not rep.valid and rep.counts() == {"lost-write": 1}
    out = tmp_path / "report.json"
    assert checker.main([str(path), "--json", str(out)]) == 1
    assert "lost-write" in capsys.readouterr().out
    assert json.loads(out.read_text())["anomalies"]["lost-write"][0]["details"]["value"] == 1


# -- property test: histories simulated from a correct log ----------------------------------------------------


class Sim:
    """A correct partitioned log (records, transaction markers, aborts, LSO) driven by random clients, recorded
    in the history format. Every read follows the log exactly, so the history must pass."""

    KEYS = ("t/0", "t/1", "t/2")

    def __init__(self, seed: int, steps: int = 120) -> None:
        self.r = random.Random(seed)
        self.b = B()
        self.log: dict[str, list[tuple[int | None, int | None]]] = {k: [] for k in self.KEYS}  # (value, txn)
        self.txn_state: dict[int, str] = {}
        self.next_value = 0
        self.next_pid = 0
        self.committed: dict[str, int] = {}  # group g's committed offsets
        self.producers = [self._open("producer") for _ in range(2)]
        self.txns: dict[int, dict[str, Any]] = {}  # pid -> {"pos": {...}, "inflight": ...}
        for _ in range(3):
            self._new_txn_proc()
        self.consumers: dict[int, dict[str, int]] = {}
        self.iso: dict[int, str] = {}
        for iso in (RC, RU):
            p = self._open("consumer", isolation=iso)
            self.iso[p] = iso
            self.consumers[p] = self._assign(p, dict.fromkeys(self.KEYS, 0))
        self.sub = self._open("consumer", mode="subscribe", group="g")
        self.iso[self.sub] = RC
        self.consumers[self.sub] = self._assign(self.sub, dict.fromkeys(self.KEYS, None))
        for _ in range(steps):
            self.step()
        for p in list(self.txns):
            if self.txns[p]["inflight"] is not None:
                while self._txn_step(p):
                    pass
                self._txn_end(p, self.r.choice(["ok", "fail"]))
        for iso in (RC, RU):
            self._final(iso)

    def _pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def _value(self) -> int:
        self.next_value += 1
        return self.next_value

    def _open(self, role: str, **kw: Any) -> int:
        p = self._pid()
        self.b.open(p, role, **kw)
        return p

    def _assign(self, p: int, positions: dict[str, int | None]) -> dict[str, int]:
        self.b.assign(p, list(positions), positions)
        return {k: (v or 0) for k, v in positions.items()}

    def _new_txn_proc(self) -> None:
        p = self._open("producer", transactional=True, isolation=RC)
        self.txns[p] = {"pos": self._assign(p, dict.fromkeys(self.KEYS, 0)), "inflight": None}

    def _append(self, k: str, v: int | None, txn: int | None) -> int:
        self.log[k].append((v, txn))
        return len(self.log[k]) - 1

    def _read(self, k: str, pos: int, rc: bool, n: int) -> tuple[list[tuple[int, int]], int]:
        lg = self.log[k]
        end = len(lg)
        if rc:
            end = min([o for o, (_, t) in enumerate(lg) if t is not None and self.txn_state[t] == "open"] + [end])
        out: list[tuple[int, int]] = []
        o = pos
        while o < end and len(out) < n:
            v, t = lg[o]
            if v is not None and not (rc and t is not None and self.txn_state[t] == "abort"):
                out.append((o, v))
            o += 1
        return out, o

    def _poll(self, pos: dict[str, int], rc: bool, n: int) -> Recs:
        recs: Recs = {}
        for k in self.KEYS:
            got, pos[k] = self._read(k, pos[k], rc, n)
            if got:
                recs[k] = got
        return recs

    def step(self) -> None:
        r = self.r
        x = r.random()
        if x < 0.3:
            i = r.randrange(len(self.producers))
            p, k, v = self.producers[i], r.choice(self.KEYS), self._value()
            y = r.random()
            if y < 0.85:
                self.b.send(p, k, v, self._append(k, v, None))
            elif y < 0.9:
                self.b.send(p, k, v, typ="fail", error="INVALID_REQUIRED_ACKS")
            else:
                if r.random() < 0.5:
                    self._append(k, v, None)
                self.b.send(p, k, v, typ="info", error="timeout")
                self.producers[i] = self._open("producer")
        elif x < 0.5:
            p = r.choice(list(self.txns))
            st = self.txns[p]
            if st["inflight"] is None:
                self._txn_begin(p)
            elif not self._txn_step(p):
                self._txn_end(p, r.choices(["ok", "fail", "info"], [7, 2, 1])[0])
        elif x < 0.85:
            p = r.choice(list(self.consumers))
            pos = self.consumers[p]
            self.b.poll(p, self._poll(pos, self.iso[p] == RC, r.randrange(1, 4)))
        elif x < 0.92:
            self.b.commit(self.sub, "g", dict(self.consumers[self.sub]))
            self.committed.update(self.consumers[self.sub])
        elif x < 0.97:
            self.consumers[self.sub] = self._assign(self.sub, {k: self.committed.get(k) for k in self.KEYS})
        else:
            self.b.nemesis(r.random() < 0.5, r.choice(["pause", "kill"]))

    def _txn_begin(self, p: int) -> None:
        """Invoke a transaction; its micro-ops run one per step (other clients interleave), polls usually first
        (sometimes shuffled: a send before a poll)."""
        st = self.txns[p]
        st["saved"] = dict(st["pos"])
        plan: list[list[Any]] = [["poll"] for _ in range(self.r.choice([0, 1, 1, 2]))]
        plan += [["send", self.r.choice(self.KEYS), self._value()] for _ in range(self.r.randrange(1, 4))]
        if self.r.random() < 0.3:
            self.r.shuffle(plan)
        polls = any(m[0] == "poll" for m in plan)
        tid = len(self.txn_state)
        self.txn_state[tid] = "open"
        self.b.add(p, "invoke", "txn", [*plan, *([["offsets", "gt", None]] if polls else [])])
        st["inflight"] = {"plan": plan, "done": [], "tid": tid, "keys": set()}

    def _txn_step(self, p: int) -> bool:
        """Run the next micro-op of p's transaction; False when none is left."""
        t = self.txns[p]["inflight"]
        if len(t["done"]) == len(t["plan"]):
            return False
        m = t["plan"][len(t["done"])]
        if m[0] == "poll":
            recs = self._poll(self.txns[p]["pos"], True, 3)
            t["done"].append(["poll", {k: [list(r) for r in lst] for k, lst in recs.items()}])
        else:
            t["done"].append(["send", m[1], [self._append(m[1], m[2], t["tid"]), m[2]]])
            t["keys"].add(m[1])
        return True

    def _txn_end(self, p: int, typ: str) -> None:
        st = self.txns[p]
        t = st["inflight"]
        st["inflight"] = None
        done, tid, keys = t["done"], t["tid"], t["keys"]
        if any(m[0] == "poll" for m in done):
            done = [*done, ["offsets", "gt", dict(st["pos"])]]
        fate = typ if typ != "info" else self.r.choice(["ok", "fail"])
        self.txn_state[tid] = "commit" if fate == "ok" else "abort"
        for k in sorted(keys):
            self._append(k, None, None)  # the commit/abort marker takes an offset
        self.b.txn_done(p, done, typ, None if typ == "ok" else "aborted-on-purpose")
        if fate != "ok":
            st["pos"] = st["saved"]
        if typ == "info":
            del self.txns[p]
            self._new_txn_proc()

    def _final(self, iso: str) -> None:
        p = self._open("consumer", isolation=iso)
        pos = self._assign(p, dict.fromkeys(self.KEYS, 0))
        while any(pos[k] < len(self.log[k]) for k in self.KEYS):
            self.b.poll(p, self._poll(pos, iso == RC, 5))
        self.b.final(p, {k: len(self.log[k]) for k in self.KEYS})


def _acked(events: list[dict[str, Any]]) -> set[int]:
    """Values of ok sends and ok transactions (their offsets are known)."""
    out: set[int] = set()
    for e in events:
        if e["type"] == "ok" and e["f"] in ("send", "txn"):
            out.update(m[2][1] for m in e["value"] if m[0] == "send")
    return out


def _polls(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, list[list[int]]]]:
    return [(e, k, lst) for e in events if e["type"] == "ok" and e["f"] in ("poll", "txn")
            for m in e["value"] if m[0] == "poll" for k, lst in m[1].items() if lst]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32))
def test_property_simulated_correct_histories_pass(seed: int) -> None:
    """Transactions interleave their sends (and sometimes send before they poll), so Elle's G0/G1c may appear:
    legal in Kafka, allowed by default. Nothing else may."""
    rep = checker.check(Sim(seed).b.events)
    assert rep.valid, rep.summary()
    assert {t for t, n in rep.counts().items() if n} <= {"G0", "G1c"}, rep.summary()
    assert rep.stats["final_reads"] == 2


MUTATIONS = ["drop", "duplicate", "swap", "abort", "fail-send"]
EXPECT = {"drop": "lost-write", "duplicate": "duplicate", "swap": "divergence", "abort": "aborted-read",
          "fail-send": "phantom-write"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.integers(0, 2**32), st.sampled_from(MUTATIONS), st.randoms(use_true_random=False))
def test_property_one_mutation_is_caught(seed: int, mutation: str, rnd: random.Random) -> None:
    events = copy.deepcopy(Sim(seed).b.events)
    acked = _acked(events)
    polls = _polls(events)
    if mutation == "drop":
        cands = sorted({r[1] for _, _, lst in polls for r in lst} & acked)
        assume(cands)
        v = rnd.choice(cands)
        for _, _, lst in polls:
            lst[:] = [r for r in lst if r[1] != v]
    elif mutation == "duplicate":
        assume(polls)
        _, _, lst = rnd.choice(polls)
        lst.append([10_000, lst[-1][1]])
    elif mutation == "swap":
        cands = [lst for _, _, lst in polls if len(lst) >= 2 and lst[0][1] in acked and lst[1][1] in acked]
        assume(cands)
        lst = rnd.choice(cands)
        lst[0][1], lst[1][1] = lst[1][1], lst[0][1]
    elif mutation == "fail-send":
        read = {r[1] for _, _, lst in polls for r in lst}
        cands = [e for e in events if e["f"] == "send" and e["type"] == "ok" and e["value"][0][2][1] in read]
        assume(cands)
        e = rnd.choice(cands)
        k, (_off, v) = e["value"][0][1], e["value"][0][2]
        e["type"], e["value"] = "fail", [["send", k, v]]
    else:
        rc = {e["process"] for e in events if e["f"] == "open" and e["type"] == "ok"
              and e["value"]["isolation"] == RC}
        read_rc = {r[1] for e, _, lst in polls if e["process"] in rc for r in lst}
        cands = [e for e in events if e["f"] == "txn" and e["type"] == "ok"
                 and any(m[0] == "send" and m[2][1] in read_rc for m in e["value"])]
        assume(cands)
        e = rnd.choice(cands)
        inv = next(x for x in reversed(events[:e["index"]]) if x["process"] == e["process"])
        e["type"], e["value"] = "fail", inv["value"]
    rep = checker.check(events)
    assert not rep.valid and rep.counts().get(EXPECT[mutation]), rep.summary()


JUNK: list[Any] = [
    None, 3, "x", [], [[]], [["poll", None]], {"positions": None}, [["send", 5, [None, 7]]],
    [["send", "t/0", ["a", 7]]], [["poll", {"t/0": [["x", 1], [1]]}]], [["poll", {"t/0": [[1, [1, 2]]]}]],
    {"partitions": None, "positions": {"t/0": "x"}}, {"group": None, "offsets": {"t/0": "a"}},
    [["offsets", None, {"t/0": None}]], {"from": None, "to": {"t/0": "5"}}, [["send", "t/0", [3, {"a": 1}]]],
    [["poll", {5: [[1, 2]]}]]]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32), st.randoms(use_true_random=False))
def test_property_damaged_histories_do_not_crash_the_checker(seed: int, rnd: random.Random) -> None:
    """Events lost, completions of the wrong type, invokes never completed, junk values, processes and fs: a
    report, no exception."""
    events = [e for e in copy.deepcopy(Sim(seed, steps=60).b.events) if rnd.random() > 0.05]
    for e in events:
        x = rnd.random()
        if x < 0.05:
            e["type"] = rnd.choice(["ok", "fail", "info", "invoke"])
        elif x < 0.12:
            e["value"] = rnd.choice(JUNK)
        elif x < 0.13:
            e["process"] = rnd.choice(["nemesis", "runner", None, 99])
        elif x < 0.14:
            e["f"] = rnd.choice(["final-read", "assign", "txn", "open", "x"])
    rep = checker.check(events)
    assert isinstance(rep.to_json(), str) and rep.summary()
