"""G0 / G1c: dependency cycles between writers, derived from per-partition log order the way Elle's Kafka
analysis does (definitions: ``checker.py``'s docstring). Tarjan's SCC (iterative) finds the cyclic parts in
linear time; one short cycle per strongly connected component is reported."""

from __future__ import annotations

from collections import deque

try:
    from .checker_model import Findings, History, Key, Op, Val, op_polls
except ImportError:
    from checker_model import Findings, History, Key, Op, Val, op_polls

Adj = dict[int, list[int]]
EdgeInfo = tuple[str, Key, Val, Val | None]  # (ww|wr, key, value, next value for ww)


def sccs(adj: Adj) -> list[list[int]]:
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in list(adj):
        if root in index:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            succ = adj.get(v, ())
            recurse = False
            while i < len(succ):
                w = succ[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return out


def _path(adj: Adj, members: set[int], src: int, dst: int) -> list[int]:
    """Shortest path src -> ... -> dst inside members (BFS); [] if none."""
    prev: dict[int, int] = {src: src}
    q = deque([src])
    while q:
        v = q.popleft()
        if v == dst:
            path = [v]
            while path[-1] != src:
                path.append(prev[path[-1]])
            return path[::-1]
        for w in adj.get(v, ()):
            if w in members and w not in prev:
                prev[w] = v
                q.append(w)
    return []


def cycles(h: History, fx: Findings) -> dict[str, int]:
    ops: dict[int, Op] = {}
    ww: Adj = {}
    full: Adj = {}
    info_ww: dict[tuple[int, int], EdgeInfo] = {}
    info_wr: dict[tuple[int, int], EdgeInfo] = {}

    def edge(a: Op, b: Op, e: EdgeInfo) -> None:
        if a.id == b.id:
            return
        ab = (a.id, b.id)
        table = info_ww if e[0] == "ww" else info_wr
        if ab in table:
            return
        table[ab] = e
        ops[a.id], ops[b.id] = a, b
        if e[0] == "ww":
            ww.setdefault(a.id, []).append(b.id)
        if ab in (info_wr if e[0] == "ww" else info_ww):
            return
        full.setdefault(a.id, []).append(b.id)

    # ww: consecutive committed writers in each partition's offset order.
    ww_pairs: list[tuple[Op, Val, Op, Val]] = []
    for k, offs in h.obs.items():
        prev: tuple[Op, Val] | None = None
        for off in sorted(offs):
            v = offs[off][0]
            w = h.writer.get(v)
            if (w is None or w.key != k or not h.must_exist(w) or (k, off) in h.obs_conflicts
                    or v in h.valpos_conflicts):
                continue
            if prev is not None and prev[0].id != w.op.id:
                edge(prev[0], w.op, ("ww", k, prev[1], v))
                ww_pairs.append((prev[0], prev[1], w.op, v))
            prev = (w.op, v)
    # wr: the writer of the last value a committed transaction polled from each partition -> that transaction.
    for op in h.ops:
        if not op.txn or op.id not in h.committed_txn:
            continue
        last: dict[Key, tuple[int, Val]] = {}
        for recs in op_polls(op):
            for k, lst in recs.items():
                for off, v in lst:
                    if k not in last or off > last[k][0]:
                        last[k] = (off, v)
        for k, (_off, v) in last.items():
            w = h.writer.get(v)
            if w is not None and w.key == k and h.must_exist(w):
                edge(w.op, op, ("wr", k, v, None))

    def label(a: int, b: int, prefer_wr: bool) -> EdgeInfo:
        if prefer_wr and (a, b) in info_wr:
            return info_wr[(a, b)]
        return info_ww[(a, b)] if (a, b) in info_ww else info_wr[(a, b)]

    def describe(cyc: list[int], prefer_wr: bool) -> str:
        steps = []
        for a, b in zip(cyc, cyc[1:] + cyc[:1], strict=True):
            kind, k, v, v2 = label(a, b, prefer_wr)
            rel = f"wrote {v!r} before {v2!r} in {k}" if kind == "ww" else f"wrote {v!r} in {k}, which it read"
            steps.append(f"event {ops[a].idx} -{kind}-> event {ops[b].idx} ({rel})")
        return "; ".join(steps)

    for comp in sccs(ww):
        members = set(comp)
        s = min(comp, key=lambda i: ops[i].idx)
        best = min((_path(ww, members, t, s) for t in ww.get(s, ()) if t in members), key=len)
        cyc = [s, *best[:-1]]
        fx.add("G0", f"write cycle among {len(comp)} writers: {describe(cyc, False)}", [ops[i].idx for i in cyc],
               key=info_ww[(cyc[0], cyc[1])][1], cycle=[ops[i].idx for i in cyc], component_size=len(comp))
    for comp in sccs(full):
        members = set(comp)
        wr_edges = [(a, b) for a in comp for b in full.get(a, ()) if b in members and (a, b) in info_wr]
        if not wr_edges:
            continue  # only ww edges inside: reported as G0
        a, b = min(wr_edges, key=lambda e: (ops[e[0]].idx, ops[e[1]].idx))
        back = _path(full, members, b, a)
        cyc = [a, *back[:-1]]
        n_ww = sum(1 for x, y in zip(cyc, cyc[1:] + cyc[:1], strict=True) if (x, y) not in info_wr)
        fx.add("G1c", f"dependency cycle with read edges among {len(comp)} operations: {describe(cyc, True)}",
               [ops[i].idx for i in cyc], key=info_wr[(a, b)][1], cycle=[ops[i].idx for i in cyc],
               component_size=len(comp), ww_edges=n_ww)
    n = impossible_cycles(h, fx, ww_pairs)
    return {"graph_nodes": len(ops), "graph_edges": len(info_ww) + len(info_wr), "time_graph_vertices": n}


class _TimeGraph:
    """Points in time inside operations: each poll micro-op, each send (one per value), the commit (for a plain
    send: the moment its record became readable). Edges are "happens before": inside an op, a poll precedes every
    later micro-op, sends to one partition keep their order, everything precedes the commit; across ops, a ww
    pair orders two appends to one partition and a wr pair puts the writer's commit before the poll that read it.
    Sends of one op to different partitions are not ordered (the client batches per leader)."""

    def __init__(self, h: History) -> None:
        self.h = h
        self.adj: Adj = {}
        self.what: list[tuple[Op, str]] = []
        self.base: dict[int, tuple[int, dict[Val, int], list[int]]] = {}  # op id -> (commit, send vertex, polls)

    def _v(self, op: Op, what: str) -> int:
        self.what.append((op, what))
        return len(self.what) - 1

    def _e(self, a: int, b: int) -> None:
        self.adj.setdefault(a, []).append(b)

    def op(self, op: Op) -> tuple[int, dict[Val, int], list[int]]:
        got = self.base.get(op.id)
        if got is not None:
            return got
        c = self._v(op, "commit" if op.txn else "ack")
        sends: dict[Val, int] = {}
        polls: list[int] = []
        earlier_polls: list[int] = []
        last_in: dict[Key, int] = {}
        si = pi = 0
        for kind in op.layout or "s" * len(op.sends):
            if kind == "p":
                v = self._v(op, f"poll #{pi + 1}")
                pi += 1
                polls.append(v)
            else:
                k, val, _ = op.sends[si]
                si += 1
                v = self._v(op, f"send of {val!r} to {k}")
                sends[val] = v
                if k in last_in:
                    self._e(last_in[k], v)
                last_in[k] = v
            for p in earlier_polls:
                self._e(p, v)
            if kind == "p":
                earlier_polls.append(v)
            self._e(v, c)
        while len(polls) < len(op.polls):  # a completion with more polls than its layout names: unordered
            polls.append(self._v(op, f"poll #{len(polls) + 1}"))
            self._e(polls[-1], c)
        got = self.base[op.id] = (c, sends, polls)
        return got


def impossible_cycles(h: History, fx: Findings, ww_pairs: list[tuple[Op, Val, Op, Val]]) -> int:
    """impossible-cycle: a cycle of the time graph (``_TimeGraph``): a G1c whose edges, joined by each operation's
    own order, would make some moment precede itself. Returns the graph's size."""
    # Any time-graph cycle projects onto a cycle of ops (ww pairs + every read's writer -> reader), so only ops
    # in a strongly connected component of that graph can take part: build the time graph for those only.
    reads: list[tuple[Op, int, Op]] = []  # (writer, poll number, reader)
    for op in h.ops:
        if not op.txn or op.id not in h.committed_txn or not op.polls:
            continue
        for i, recs in enumerate(op.polls):
            writers: set[int] = set()
            for k, lst in recs.items():
                for _off, v in lst:
                    w = h.writer.get(v)
                    if (w is not None and w.key == k and w.op.id != op.id and w.op.id not in writers
                            and h.must_exist(w)):
                        writers.add(w.op.id)
                        reads.append((w.op, i, op))
    coarse: Adj = {}
    for a, _va, b, _vb in ww_pairs:
        coarse.setdefault(a.id, []).append(b.id)
    for w_op, _i, r_op in reads:
        coarse.setdefault(w_op.id, []).append(r_op.id)
    comp_of: dict[int, int] = {}
    for n, comp in enumerate(sccs(coarse)):
        for x in comp:
            comp_of[x] = n
    g = _TimeGraph(h)

    def same(a: Op, b: Op) -> bool:
        ca = comp_of.get(a.id)
        return ca is not None and ca == comp_of.get(b.id)

    for a, va, b, vb in ww_pairs:
        if same(a, b):
            g._e(g.op(a)[1][va], g.op(b)[1][vb])
    for w_op, i, r_op in reads:
        if same(w_op, r_op):
            g._e(g.op(w_op)[0], g.op(r_op)[2][i])
    for comp in sccs(g.adj):
        members = set(comp)
        s = min(comp, key=lambda x: (g.what[x][1][:4] != "poll", g.what[x][0].idx))
        back = min((_path(g.adj, members, t, s) for t in g.adj.get(s, ()) if t in members), key=len)
        cyc = [s, *back[:-1]]
        steps = []
        for x, y in zip(cyc, cyc[1:] + cyc[:1], strict=True):
            (ox, wx), (oy, wy) = g.what[x], g.what[y]
            if ox.id != oy.id:
                steps.append(f"{wx} of event {ox.idx} -> {wy} of event {oy.idx}")
        ops = list(dict.fromkeys(g.what[x][0].idx for x in cyc))
        fx.add("impossible-cycle", "a dependency cycle that contradicts time (each step happens before the next: "
               "an append before the next append to a partition, a commit before a poll that read it, a poll "
               "before its transaction's later sends): " + "; ".join(steps), ops, key=None, cycle=ops)
    return len(g.what)
