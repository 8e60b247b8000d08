"""The checker's per-record rules (definitions: ``checker.py``'s docstring and docs/RELIABILITY.md "The checker").
Each rule reads a ``History`` and adds to a ``Findings``; all are linear in the history (plus sorting)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

try:
    from .checker_model import (
        FAIL,
        INFO,
        OK,
        RC,
        Findings,
        History,
        Key,
        Op,
        Pid,
        Val,
        int_map,
        op_offsets,
        op_polls,
        op_sends,
    )
except ImportError:
    from checker_model import (
        FAIL,
        INFO,
        OK,
        RC,
        Findings,
        History,
        Key,
        Op,
        Pid,
        Val,
        int_map,
        op_offsets,
        op_polls,
        op_sends,
    )


def _fmt(v: Val) -> str:
    return repr(v)


def divergence(h: History, fx: Findings) -> None:
    for (k, off), vals in sorted(h.obs_conflicts.items(), key=lambda kv: min(kv[1].values())):
        seen = ", ".join(f"{_fmt(v)} (event {i})" for v, i in vals.items())
        fx.add("divergence", f"{k} offset {off} holds {len(vals)} different values: {seen}", vals.values(),
               key=k, offset=off, values=list(vals))


def duplicates(h: History, fx: Findings) -> None:
    for v, places in sorted(h.valpos_conflicts.items(), key=lambda kv: min(kv[1].values())):
        where = ", ".join(f"{k}@{off} (event {i})" for (k, off), i in places.items())
        first = next(iter(places))
        fx.add("duplicate", f"value {_fmt(v)} is at {len(places)} positions: {where}", places.values(),
               key=first[0], value=v, positions=[[k, off] for k, off in places])


def phantoms(h: History, fx: Findings) -> set[Val]:
    """Reads of values that cannot be in the log. Returns those values."""
    out: set[Val] = set()
    for v, ridx in h.polled.items():
        w = h.writer.get(v)
        k = h.valpos[v][0]
        why = ""
        idx = [ridx]
        if w is None:
            why = "was never sent"
        else:
            idx.append(w.op.idx)
            keys = {kk for kk, _ in h.valpos_conflicts.get(v, {(k, 0): 0})}
            if any(kk != w.key for kk in keys):
                why = f"was sent to {w.key} but read from {sorted(kk for kk in keys if kk != w.key)}"
            elif not w.op.txn and w.op.type == FAIL:
                why = f"was sent by a send that failed definitely (event {w.op.idx}, error {w.op.error!r})"
            elif w.op.inv >= 0 and ridx < w.op.inv:
                why = f"was read (event {ridx}) before its send was invoked (event {w.op.inv})"
        if why:
            out.add(v)
            fx.add("phantom-write", f"value {_fmt(v)} read from {k} (event {ridx}) {why}", idx, key=k, value=v)
    return out


def isolation_reads(h: History, fx: Findings) -> None:
    """aborted-read and uncommitted-read: what read_committed readers returned."""
    aborted = {w.value: w for w in h.writes if w.op.txn and w.op.type == FAIL}
    by_writer: dict[int, tuple[Op, list[Val], list[int], set[Key]]] = {}
    for op in h.ops:
        if op.f not in ("poll", "txn") or h.isolation(op.process) != RC:
            continue
        own = {v for _, v, _ in op_sends(op)} if op.txn else set()
        own_read: list[tuple[Key, int, Val]] = []
        for recs in op_polls(op):
            for k, lst in recs.items():
                for off, v in lst:
                    if aborted and v in aborted:
                        wop = aborted[v].op
                        ent = by_writer.setdefault(wop.id, (wop, [], [], set()))
                        ent[1].append(v)
                        ent[2].append(op.idx)
                        ent[3].add(k)
                    if v in own:
                        own_read.append((k, off, v))
        if own_read:
            recs_s = ", ".join(f"{_fmt(v)} at {k}@{off}" for k, off, v in own_read[:10])
            fx.add("uncommitted-read", f"transaction (event {op.idx}) read its own uncommitted writes with "
                   f"read_committed: {recs_s}", [op.idx], key=own_read[0][0], values=[v for *_, v in own_read])
    for wop, vals, readers, keys in by_writer.values():
        rs = sorted(set(readers))
        fx.add("aborted-read", f"values {sorted(set(vals), key=repr)[:10]} of transaction (event {wop.idx}, "
               f"{wop.type}{', ' + repr(wop.error) if wop.error else ''}) were read with read_committed by "
               f"events {rs[:10]}", [wop.idx, *rs[:20]], key=min(keys), values=sorted(set(vals), key=repr))


@dataclass(slots=True)
class LostResult:
    lost: set[Val] = field(default_factory=set)
    verified: int = 0
    unverified: int = 0  # acked writes no final read covered


def lost_writes(h: History, fx: Findings) -> LostResult:
    res = LostResult()
    for w in h.writes:
        if not h.must_exist(w):
            continue
        pos = h.position(w)
        done = max(w.op.idx, w.op.inv)
        covered = False
        missing = []
        for fr in h.finals:
            if w.key not in fr.to:
                continue
            lo, hi = fr.frm.get(w.key, 0), fr.to[w.key]
            cov = lo <= pos < hi if pos is not None else (lo == 0 and done < fr.first_idx)
            # a write known at an offset at or past the end a final reader read to, although it completed before
            # that reader started: the log was truncated below it (nothing written since covers the offset)
            beyond = pos is not None and pos >= hi and done < fr.first_idx
            if not cov and not beyond:
                continue
            covered = True
            if w.value not in fr.values.get(w.key, ()):
                missing.append(fr)
        if not covered:
            if w.op.type == OK:
                res.unverified += 1
            continue
        res.verified += 1
        if not missing:
            continue
        res.lost.add(w.value)
        fr = missing[0]
        how = (f"acked at offset {w.offset}" if w.offset is not None else
               f"read at offset {pos}" if pos is not None else "acked without an offset")
        why = "" if w.op.type == OK else (
            " (its transaction is known committed: a read_committed reader saw one of its values)" if w.op.txn
            else " (the send was info, but a reader saw the value)")
        seen = (f"; it was read earlier (event {h.polled[w.value]})" if w.value in h.polled
                else "; no reader ever saw it")
        idx = [w.op.idx, *(f.idx for f in missing)]
        if w.value in h.polled:
            idx.append(h.polled[w.value])
        fx.add("lost-write", f"value {_fmt(w.value)} sent to {w.key} ({how}) by event {w.op.idx}{why} is missing "
               f"from final read {fr.idx}, which covered {w.key} [{fr.frm.get(w.key, 0)}, {fr.to[w.key]}){seen}",
               idx, key=w.key, value=w.value, offset=pos, final_reads=[f.idx for f in missing])
    return res


def nonmonotonic_sends(h: History, fx: Findings) -> None:
    last: dict[tuple[Pid, Key], tuple[int, int, Val]] = {}
    for op in h.ops:
        if op.f not in ("send", "txn"):
            continue
        for k, v, _ in op_sends(op):
            w = h.writer.get(v)
            if w is None or w.op is not op:
                continue
            pos = h.position(w)
            if pos is None:
                continue
            prev = last.get((op.process, k))
            if prev is not None and pos <= prev[0]:
                fx.add("nonmonotonic-send", f"process {op.process} sent {_fmt(prev[2])} to {k} at offset {prev[0]} "
                       f"(event {prev[1]}), then {_fmt(v)} at offset {pos} (event {op.idx})",
                       [prev[1], op.idx], key=k, process=op.process, offsets=[prev[0], pos])
            last[(op.process, k)] = (pos, op.idx, v)


@dataclass(slots=True)
class _Consumer:
    last: dict[Key, tuple[int, int]] = field(default_factory=dict)  # key -> (offset, event index)
    start: dict[Key, tuple[int, int]] = field(default_factory=dict)  # key -> (position, assign's index)


def poll_order(h: History, fx: Findings, excluded: set[Val]) -> None:
    """nonmonotonic-poll and poll-gap, per consumer process, restarting at every assignment."""
    floor: dict[Key, int] = {}
    for fr in h.finals:
        for k, lo in fr.frm.items():
            floor[k] = max(floor.get(k, 0), lo)
    vis_ru: dict[Key, list[int]] = {}
    vis_rc: dict[Key, list[int]] = {}
    for k, offs in h.obs.items():
        ru, rc = [], []
        for off, (v, _) in offs.items():
            w = h.writer.get(v)
            if (v not in h.polled or v in excluded or w is None or (k, off) in h.obs_conflicts
                    or v in h.valpos_conflicts or off < floor.get(k, 0)):
                continue
            ru.append(off)
            if h.rc_visible(v):
                rc.append(off)
        ru.sort()
        rc.sort()
        vis_ru[k], vis_rc[k] = ru, rc
    states: dict[Pid, _Consumer] = {}

    def gap(op: Op, k: Key, lo: int, hi: int, prev_idx: int, rc: bool, what: str) -> None:
        lst = (vis_rc if rc else vis_ru).get(k)
        if not lst:
            return
        a, b = bisect.bisect_left(lst, lo), bisect.bisect_left(lst, hi)
        if b <= a:
            return
        skipped = lst[a:b]
        vals = [h.obs[k][o][0] for o in skipped[:5]]
        fx.add("poll-gap", f"process {op.process} read {k} {what} then offset {hi} (event {op.idx}), skipping "
               f"{len(skipped)} record(s) other readers saw: " + ", ".join(
                   f"{_fmt(v)}@{o}" for v, o in zip(vals, skipped, strict=False)),
               [prev_idx, op.idx, *(h.obs[k][o][1] for o in skipped[:3])], key=k, process=op.process,
               skipped_offsets=skipped[:20])

    for op in h.ops:
        if op.f == "assign" and op.type == OK:
            v = op.value if isinstance(op.value, dict) else op.inv_value
            st = states[op.process] = _Consumer()
            if isinstance(v, dict):
                for k, p in int_map(v.get("positions")).items():
                    st.start[k] = (p, op.idx)
            continue
        if op.f not in ("poll", "txn"):
            continue
        st = states.setdefault(op.process, _Consumer())
        rc = h.isolation(op.process) == RC
        polled = False
        for recs in op_polls(op):
            for k, lst in recs.items():
                for off, _v in lst:
                    polled = True
                    prev = st.last.get(k)
                    if prev is None:
                        s = st.start.pop(k, None)
                        if s is not None and off > s[0]:
                            gap(op, k, s[0], off, s[1], rc, f"from its assigned position {s[0]} (event {s[1]})")
                    elif off <= prev[0]:
                        fx.add("nonmonotonic-poll", f"process {op.process} read {k} offset {prev[0]} (event "
                               f"{prev[1]}), then offset {off} (event {op.idx}) with no new assignment between",
                               [prev[1], op.idx], key=k, process=op.process, offsets=[prev[0], off])
                    elif off > prev[0] + 1:
                        gap(op, k, prev[0] + 1, off, prev[1], rc, f"offset {prev[0]} (event {prev[1]})")
                    st.last[k] = (off, op.idx)
        if op.txn and op.type != OK and (polled or "p" in op.layout):
            states[op.process] = _Consumer()  # an aborted consume-transform-produce seeks back


@dataclass(slots=True)
class _Commit:
    offset: int
    inv: int
    idx: int
    type: str


def committed_offsets(h: History, fx: Findings) -> None:
    """lost-committed-offset: a consumer of group g assigned a partition below what g had committed."""
    commits: dict[tuple[str, Key], list[_Commit]] = {}
    for op in h.ops:
        if op.f not in ("commit-offsets", "txn") or op.type == FAIL:
            continue
        for g, offs in op_offsets(op):
            for k, n in offs.items():
                if isinstance(n, int):
                    commits.setdefault((g, k), []).append(_Commit(n, op.inv, op.idx, op.type))
    if not commits:
        return
    acked = {gk: sorted((c for c in cs if c.type == OK), key=lambda c: c.idx) for gk, cs in commits.items()}
    acked_idx = {gk: [c.idx for c in cs] for gk, cs in acked.items()}
    for op in h.ops:
        pr = h.procs.get(op.process)
        if op.f != "assign" or op.type != OK or pr is None or pr.group is None:
            continue
        v = op.value if isinstance(op.value, dict) else op.inv_value
        if not isinstance(v, dict):
            continue
        positions = int_map(v.get("positions"))
        parts = v.get("partitions")
        for k in map(str, parts if isinstance(parts, list) else []):
            gk = (str(pr.group), k)
            if gk not in acked:
                continue
            i = bisect.bisect_left(acked_idx[gk], op.inv if op.inv >= 0 else op.idx)
            if i == 0:
                continue
            last = acked[gk][i - 1]
            p = positions.get(k)
            if p is None or p >= last.offset:
                continue  # null: none committed, or the client could not tell (not judged)
            # Anything that may have landed after `last`: acked after it was invoked, or never known.
            floor = min([last.offset] + [c.offset for c in commits[gk] if c.inv < op.idx and
                                         (c.type == INFO or c.idx > last.inv)])
            if p >= floor:
                continue
            fx.add("lost-committed-offset", f"group {pr.group} committed {k} offset {last.offset} (acked, event "
                   f"{last.idx}); process {op.process} was then assigned {k} starting from {p} (event {op.idx})",
                   [last.idx, op.idx], key=k, group=pr.group, committed=last.offset, position=p)


def statistics(h: History, lost: LostResult) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    ok_times: dict[Key, list[int]] = {}
    t_lo, t_hi = None, 0
    for op in h.ops:
        c = counts.setdefault(op.f, {OK: 0, FAIL: 0, INFO: 0})
        c[op.type] = c.get(op.type, 0) + 1
        if op.f in ("send", "txn"):
            t_lo = op.t_inv if t_lo is None else min(t_lo, op.t_inv)
            t_hi = max(t_hi, op.t)
            if op.type == OK:
                for k, _, _ in op_sends(op):
                    ok_times.setdefault(k, []).append(op.t)
    faults: list[tuple[int, int, str]] = []
    open_f: dict[tuple[str, str], list[int]] = {}
    for _idx, t, f, fault, targets in h.nemesis:
        if f == "start-fault":
            open_f.setdefault((fault, targets), []).append(t)
        elif open_f.get((fault, targets)):
            faults.append((open_f[(fault, targets)].pop(0), t, fault))
    faults += [(t, h.t_end, fault) for (fault, _), ts in open_f.items() for t in ts]
    avail: dict[Key, dict[str, Any]] = {}
    keys = sorted(set(ok_times) | {w.key for w in h.writes})
    for k in keys:
        ts = sorted(ok_times.get(k, []))
        pts = [t_lo or 0, *ts, t_hi]
        best = max(range(len(pts) - 1), key=lambda i: pts[i + 1] - pts[i])
        a, b = pts[best], pts[best + 1]
        avail[k] = {"ok_sends": len(ts), "longest_without_ok_send_s": round((b - a) / 1e9, 3),
                    "from_s": round(a / 1e9, 3), "to_s": round(b / 1e9, 3),
                    "faults_during": sorted({f for s, e, f in faults if s < b and e > a})}
    unseen: dict[Key, int] = {}
    for w in h.writes:
        if w.op.type == INFO and w.value not in h.polled:
            unseen[w.key] = unseen.get(w.key, 0) + 1
    return {"events": h.n_events, "ops": len(h.ops), "by_f": counts, "final_reads": len(h.finals),
            "unseen": sum(unseen.values()), "unseen_by_key": unseen,
            "acked_verified_by_final_read": lost.verified, "acked_not_covered_by_final_read": lost.unverified,
            "availability": avail, "duplicate_values_sent_by_runner": len(h.dup_sends)}
