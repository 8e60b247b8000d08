"""The checker's model of a history (tests/jepsen/HISTORY.md): operations paired from invoke/completion events,
the writes and reads they carry, and the indexes every rule shares. The rules themselves are in
``checker_rules.py`` / ``checker_graph.py``; the API and the rule definitions in ``checker.py``."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

Pid = int | str
Val = Hashable
Key = str
Record = tuple[int, Val]  # (offset, value)
Send = tuple[Key, Val, int | None]  # (key, value, acked offset or None)

OK, FAIL, INFO, INVOKE = "ok", "fail", "info", "invoke"
RC, RU = "read_committed", "read_uncommitted"
MAX_EXAMPLES = 200  # anomalies kept per type (all are counted in stats["anomaly_counts"])


class Event(TypedDict, total=False):
    index: int
    time: int
    process: Pid
    type: str
    f: str
    value: Any
    error: str


@dataclass(slots=True)
class Anomaly:
    """One anomaly: ``indexes`` are the ``index`` fields of the events that show it."""

    type: str
    explanation: str
    indexes: list[int]
    key: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Proc:
    """What a process declared in its ``open`` (defaults: what a client does when told nothing)."""

    role: str | None = None
    transactional: bool = False
    isolation: str = RU
    mode: str | None = None
    group: str | None = None


@dataclass(slots=True)
class Op:
    """An invoke paired with its completion. ``type`` is the completion's (an invoke never completed is ``info``);
    ``idx`` is the completion's index (the invoke's when there is none), ``inv`` the invoke's (-1 if none)."""

    id: int
    process: Pid
    f: str
    type: str
    inv: int
    idx: int
    t_inv: int
    t: int
    value: Any
    inv_value: Any
    error: str | None
    sends: Sequence[Send] = ()  # filled by _parse
    polls: Sequence[dict[Key, list[Record]]] = ()
    commits: Sequence[tuple[str, dict[Key, int]]] = ()
    layout: str = ""  # a txn's micro-ops in order: "p" poll, "s" send

    @property
    def txn(self) -> bool:
        return self.f == "txn"


@dataclass(slots=True)
class Write:
    key: Key
    value: Val
    op: Op
    offset: int | None


@dataclass(slots=True)
class FinalRead:
    process: Pid
    idx: int
    first_idx: int  # the index of the process's first event
    frm: dict[Key, int]
    to: dict[Key, int]
    values: dict[Key, set[Val]] = field(default_factory=dict)  # what its polls read, per partition


def mops(value: Any) -> list[list[Any]]:
    """The micro-ops of an op's value ([] when it is not a list of lists)."""
    if isinstance(value, list):
        return [m for m in value if isinstance(m, list) and m]
    return []


def op_sends(op: Op) -> Sequence[Send]:
    """(key, value, acked offset or None) of every send micro-op, in order."""
    return op.sends


def op_polls(op: Op) -> Sequence[dict[Key, list[Record]]]:
    """The record maps of the op's completed poll micro-ops, in order."""
    return op.polls


def op_offsets(op: Op) -> Sequence[tuple[str, dict[Key, int]]]:
    """(group, {key: next offset}) committed by the op: a ``commit-offsets`` or a txn's ``offsets`` micro-op."""
    return op.commits


def _parse(op: Op) -> None:
    """Fill op.sends / polls / commits from the raw values (the completion's for ``ok``: it carries offsets and
    records; the invoke's otherwise), then drop the raw values of send/poll/txn ops (memory)."""
    src = op.value if op.type == OK and mops(op.value) else op.inv_value
    sends: list[Send] = []
    polls: list[dict[Key, list[Record]]] = []
    commits: list[tuple[str, dict[Key, int]]] = []
    layout: list[str] = []
    if op.f in ("send", "txn"):
        for m in mops(src):
            if m[0] == "poll":
                layout.append("p")
            elif m[0] == "send" and len(m) >= 3:
                layout.append("s")
                x = m[2]
                if isinstance(x, list) and len(x) == 2:
                    sends.append((str(m[1]), _hashable(x[1]), x[0] if type(x[0]) is int else None))
                else:
                    sends.append((str(m[1]), _hashable(x), None))
            elif m[0] == "offsets" and len(m) >= 3 and isinstance(m[2], dict):
                commits.append((str(m[1]), int_map(m[2])))
    if op.f == "commit-offsets":
        v = op.inv_value if isinstance(op.inv_value, dict) else op.value
        if isinstance(v, dict) and isinstance(v.get("offsets"), dict):
            commits.append((str(v.get("group")), int_map(v["offsets"])))
    if op.f in ("poll", "txn"):
        for m in mops(op.value):
            if m[0] == "poll" and len(m) >= 2 and isinstance(m[1], dict):
                polls.append({str(k): _records(recs) for k, recs in m[1].items() if isinstance(recs, list)})
            elif m[0] == "poll" and op.f == "txn":
                polls.append({})  # keeps op.polls aligned with the "p"s of op.layout
    if op.f in ("send", "poll", "txn", "commit-offsets"):
        op.value = op.inv_value = None
    op.sends, op.polls, op.commits = sends or (), polls or (), commits or ()
    if op.f == "txn":
        op.layout = "".join(layout)


def int_map(d: Any) -> dict[Key, int]:
    """{partition: int} from a JSON object (entries that are not ints dropped)."""
    if not isinstance(d, dict):
        return {}
    return {str(k): v for k, v in d.items() if type(v) is int}


def _records(recs: list[Any]) -> list[Record]:
    try:
        out = [(o, v) for o, v in recs]
        if all(type(o) is int and type(v) is int for o, v in out):
            return out
    except (TypeError, ValueError):
        pass
    return [(r[0], _hashable(r[1])) for r in recs if isinstance(r, list) and len(r) == 2 and type(r[0]) is int]


def _hashable(x: Any) -> Val:
    if isinstance(x, list):
        return tuple(_hashable(y) for y in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    return x  # type: ignore[no-any-return]


class History:
    """Everything the rules share, built in two linear passes."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.ops: list[Op] = []
        self.procs: dict[Pid, Proc] = {}
        self.finals: list[FinalRead] = []
        self.nemesis: list[tuple[int, int, str, str, str]] = []  # (index, time, start/stop-fault, fault, targets)
        self.meta: dict[str, Any] = {}
        self.first_idx: dict[Pid, int] = {}
        self.n_events = 0
        self.t_end = 0
        self._pair(events)
        self.writer: dict[Val, Write] = {}
        self.writes: list[Write] = []
        self.dup_sends: list[Val] = []
        # Every (partition, offset, value) anybody observed: an ok send's ack or a poll.
        self.obs: dict[Key, dict[int, tuple[Val, int]]] = {}  # key -> offset -> (first value, its first index)
        self.obs_conflicts: dict[tuple[Key, int], dict[Val, int]] = {}
        self.valpos: dict[Val, tuple[Key, int, int]] = {}  # value -> (key, offset, first index)
        self.valpos_conflicts: dict[Val, dict[tuple[Key, int], int]] = {}
        self.polled: dict[Val, int] = {}  # value -> index of the first poll that returned it
        self.polled_rc: set[Val] = set()  # ... by a read_committed reader
        self.committed_txn: set[int] = set()  # txn op ids known committed: ok, or info with a value read by rc
        self._index()

    # -- pass 1: pair invokes with completions ---------------------------------------------------------------
    def _pair(self, events: Iterable[Event]) -> None:
        pending: dict[Pid, Event] = {}
        ops = self.ops
        for n, ev in enumerate(events):
            self.n_events += 1
            idx = ev.get("index", n)
            p = ev.get("process")
            t = ev.get("time", 0)
            self.t_end = max(self.t_end, t)
            typ, f = ev.get("type"), ev.get("f", "")
            if p is None:
                continue
            self.first_idx.setdefault(p, idx)
            if p == "nemesis":
                v = ev.get("value")
                fault = str(v.get("fault", "?")) if isinstance(v, dict) else "?"
                fault = "kill" if fault == "restart" else fault  # kill starts, restart stops
                targets = repr(v.get("targets")) if isinstance(v, dict) else ""
                self.nemesis.append((idx, t, f, fault, targets))
                continue
            if f == "meta":
                self.meta = ev.get("value") or {}
                continue
            if typ == INVOKE:
                if p in pending:  # contract broken: an invoke without completion; close it as info
                    self._add_op(pending.pop(p), None)
                pending[p] = ev
                continue
            inv = pending.pop(p, None)
            if inv is not None and inv.get("f") != f:
                self._add_op(inv, None)
                inv = None
            self._add_op(inv, ev)
        for inv in pending.values():
            self._add_op(inv, None)
        ops.sort(key=lambda o: o.idx)
        for i, op in enumerate(ops):
            op.id = i

    def _add_op(self, inv: Event | None, done: Event | None) -> None:
        base = done if done is not None else inv
        assert base is not None
        i_inv = inv.get("index", -1) if inv is not None else -1
        op = Op(id=0, process=base["process"], f=base.get("f", ""),
                type=done.get("type", INFO) if done is not None else INFO,
                inv=i_inv, idx=done.get("index", i_inv) if done is not None else i_inv,
                t_inv=(inv or base).get("time", 0), t=base.get("time", 0),
                value=done.get("value") if done is not None else (inv or {}).get("value"),
                inv_value=inv.get("value") if inv is not None else base.get("value"),
                error=done.get("error") if done is not None else "no completion")
        if op.f == "open" and op.type == OK:
            v = op.value if isinstance(op.value, dict) else op.inv_value
            if isinstance(v, dict):
                self.procs[op.process] = Proc(role=v.get("role"), transactional=bool(v.get("transactional")),
                                              isolation=v.get("isolation") or RU, mode=v.get("mode"),
                                              group=v.get("group"))
        if op.f == "final-read" and op.type == OK:
            v = op.value if isinstance(op.value, dict) else {}
            self.finals.append(FinalRead(op.process, op.idx, self.first_idx.get(op.process, op.idx),
                                         int_map(v.get("from")), int_map(v.get("to"))))
        _parse(op)
        self.ops.append(op)

    def isolation(self, p: Pid) -> str:
        pr = self.procs.get(p)
        return pr.isolation if pr is not None else RU

    # -- pass 2: writes, observations --------------------------------------------------------------------------
    def _observe(self, k: Key, off: int, v: Val, idx: int) -> None:
        bykey = self.obs.get(k)
        if bykey is None:
            bykey = self.obs[k] = {}
        cur = bykey.get(off)
        if cur is None:
            bykey[off] = (v, idx)
        elif cur[0] != v:
            c = self.obs_conflicts.setdefault((k, off), {cur[0]: cur[1]})
            c.setdefault(v, idx)
        pos = self.valpos.get(v)
        if pos is None:
            self.valpos[v] = (k, off, idx)
        elif pos[0] != k or pos[1] != off:
            c2 = self.valpos_conflicts.setdefault(v, {(pos[0], pos[1]): pos[2]})
            c2.setdefault((k, off), idx)

    def _index(self) -> None:
        final_by_proc: dict[Pid, list[FinalRead]] = {}
        for fr in self.finals:
            final_by_proc.setdefault(fr.process, []).append(fr)
        for op in self.ops:
            if op.f in ("send", "txn"):
                for k, v, off in op_sends(op):
                    if v in self.writer:
                        self.dup_sends.append(v)
                        continue
                    w = Write(k, v, op, off if op.type == OK else None)
                    self.writer[v] = w
                    self.writes.append(w)
                    if w.offset is not None:
                        self._observe(k, w.offset, v, op.idx)
                if op.txn and op.type == OK:
                    self.committed_txn.add(op.id)
            if op.f not in ("poll", "txn"):
                continue
            rc = self.isolation(op.process) == RC
            frs = [f for f in final_by_proc.get(op.process, ()) if op.idx < f.idx]
            for recs in op_polls(op):
                for k, lst in recs.items():
                    for off, v in lst:
                        self._observe(k, off, v, op.idx)
                        self.polled.setdefault(v, op.idx)
                        if rc:
                            self.polled_rc.add(v)
                    for fr in frs:
                        fr.values.setdefault(k, set()).update(v for _, v in lst)
        for v in self.polled_rc:
            w = self.writer.get(v)
            if w is not None and w.op.txn and w.op.type == INFO:
                self.committed_txn.add(w.op.id)

    # -- shared predicates ----------------------------------------------------------------------------------------
    def must_exist(self, w: Write) -> bool:
        """The write is known to have taken effect: acked, or an info send somebody read, or a value of a
        transaction known committed."""
        if w.op.txn:
            return w.op.id in self.committed_txn
        return w.op.type == OK or (w.op.type == INFO and w.value in self.polled)

    def position(self, w: Write) -> int | None:
        if w.offset is not None:
            return w.offset
        pos = self.valpos.get(w.value)
        return pos[1] if pos is not None and pos[0] == w.key else None

    def rc_visible(self, v: Val) -> bool:
        """A read_committed reader must see this value (if it is in the log): a non-transactional write, or one of
        a committed transaction."""
        w = self.writer.get(v)
        if w is None:
            return False
        if w.op.txn:
            return w.op.id in self.committed_txn
        return w.op.type != FAIL


class Findings:
    """Collects anomalies: all are counted, the first MAX_EXAMPLES of each type are kept."""

    def __init__(self) -> None:
        self.items: dict[str, list[Anomaly]] = {}
        self.counts: dict[str, int] = {}

    def add(self, typ: str, explanation: str, indexes: Iterable[int], key: Key | None = None,
            **details: Any) -> None:
        self.counts[typ] = self.counts.get(typ, 0) + 1
        lst = self.items.setdefault(typ, [])
        if len(lst) < MAX_EXAMPLES:
            lst.append(Anomaly(typ, explanation, sorted({i for i in indexes if i >= 0}), key, details))
