"""Unit tests of the history checker (tests/jepsen/checker.py): hand-made histories that contain exactly one
anomaly type each, tricky valid ones, and a property test over histories simulated from a correct log."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

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


@pytest.mark.parametrize("case", ["failed", "never-sent", "other-partition"])
def test_phantom_write(case: str) -> None:
    b = B()
    queue(b, 2)
    w = -1
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


def test_g1c_cycle_with_read_edge() -> None:
    b = B()
    b.open(0, "producer", transactional=True)
    b.open(1, "producer", transactional=True, isolation=RC)
    d1 = b.txn_invoke(0, [("x/0", 1, 0), ("y/0", 3, 1)])
    d2 = b.txn_invoke(1, [("y/0", 2, 0)], polls=[{"x/0": [(0, 1)]}], sends_first=True)
    t1 = b.txn_done(0, d1)
    t2 = b.txn_done(1, d2)
    (a,) = only(b.check(), "G1c")
    assert a.indexes == [t1, t2] and a.details["ww_edges"] == 1


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
