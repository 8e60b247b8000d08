"""The Jepsen-style checker for tidelog histories (format: tests/jepsen/HISTORY.md).

``check(events) -> Report``, ``check_file(path) -> Report``; ``python tests/jepsen/checker.py history.jsonl``
prints a summary table and exits 1 when an anomaly (of a type not allowed) is found.

Vocabulary. A *write* is one ``send`` micro-op of a ``send`` or ``txn`` op; values are unique. A write *must
exist* when it was acked (``ok``), or it is an ``info`` non-transactional send whose value some poll returned, or
it belongs to a transaction known committed (``ok``, or ``info`` with a value returned to a read_committed
reader). An *observation* is a (partition, offset, value) from an ok send's ack or from any poll. A value is
*visible* to a read_committed reader when its writer is a non-transactional send that did not fail, or a
committed transaction; to a read_uncommitted reader, any written value. Events are cited by ``index``.

Rules (type: rule -- false-positive risks and how the rule avoids them):

- ``divergence``: one (partition, offset) observed with two different values (acks and polls of any reader,
  any isolation). Control records and aborted records take offsets but never values, so gaps are not divergence.
- ``duplicate``: one value observed at two positions (offsets, or partitions). Re-reading the same offset (a
  rebalance restarting from committed offsets, two readers) is the same position, never a duplicate.
- ``phantom-write``: a poll returned a value that was never sent, was sent to another partition, was sent by a
  non-transactional send that ``fail``ed (fail means definitely not written: the runner must report indefinite
  errors -- timeouts, NOT_ENOUGH_REPLICAS_AFTER_APPEND, lost connections -- as ``info``), or was returned before
  its send was invoked. ``info`` sends may appear or not; aborted transactional values are ``aborted-read``.
- ``aborted-read`` (Elle's G1a): a read_committed reader returned a value of a transaction that ``fail``ed
  (aborted). read_uncommitted readers may see aborted values and are not judged.
- ``uncommitted-read``: a transaction read, with read_committed, a value it wrote itself (its own transaction
  was still open: Jepsen's "precommitted read"). A read_committed read racing the writer's commit is not
  flagged: the commit may be durable before the producer hears of it.
- ``lost-write``: a write that must exist is missing from a ``final-read`` that covered its position:
  ``from[k] <= offset < to[k]``, where offset is the acked offset (else the observed one). A write with no known
  offset counts as covered only when ``from[k] == 0`` and the write completed before the final reader's first
  event (so it is below the final high watermark). Records removed by retention are excluded by ``from``; writes
  acked after the final read took its ``to`` are beyond it. Acked writes no final read covers are counted in
  stats (``acked_not_covered_by_final_read``), not reported; ``info`` writes nobody saw are ``unseen`` (stats).
- ``nonmonotonic-send``: one process's writes to one partition landing at non-increasing offsets (acked offset,
  else observed). Processes are single-threaded, so each send is appended after the previous one completed.
- ``nonmonotonic-poll``: one consumer process reading a partition at an offset at or below one it read before,
  with no ``assign`` in between (a new assignment may restart from committed offsets: re-reads are fine). A
  non-``ok`` ``txn`` with poll micro-ops also resets the process (the client rewinds to its committed offsets).
- ``poll-gap``: between two successive reads of a partition by one consumer process (or between an ``assign``
  position and the first read), a record that process should have seen was skipped: a value returned by some
  poll, visible to this reader's isolation (read_committed skips aborted values and control records), not itself
  lost/duplicate/divergent/phantom, and at or above every final read's ``from`` (retention). A record nobody
  read is not a gap (if acked and covered, it is a ``lost-write``).
- ``G0`` / ``G1c`` (Elle's, from log order): a graph over writers and committed transactions: ``ww`` from the
  writer of each value to the writer of the next committed value in the partition's offset order; ``wr`` from
  the writer of the last value a committed transaction polled from a partition to that transaction. Tarjan's SCC
  finds the cycles; one short cycle per component is reported. A ww-only cycle is G0, one with a wr edge G1c.
  Kafka transactions are atomic, not serializable: they order writes per partition only, so two transactions
  writing two partitions in opposite orders make a legal G0, and a transaction running concurrently with two
  others can close a legal G1c (T1 -wr-> T2 -ww-> T3 -ww-> T1 with T3 open throughout). Both are reported, and
  allowed by default (``allowed``); ``impossible-cycle`` is the one that makes a history invalid.
- ``impossible-cycle``: a cycle in the *time graph*, whose vertices are moments inside operations (each poll
  micro-op, each send, the commit -- for a plain send, when its record became readable) and whose edges are
  "happens before": inside an op a poll precedes its later micro-ops, sends to one partition keep their order,
  all precede the commit; across ops, consecutive committed values of a partition order their appends, and a
  writer's commit precedes every poll (of a committed transaction) that returned its value. A cycle means some
  moment precedes itself: a dependency cycle Kafka cannot produce (e.g. T2 polls T1's committed value, then
  sends to a partition where its record lands before T1's). Sends of one op to different partitions are left
  unordered (the client batches per leader), so legal G0/G1c never form one; sends of one op to one partition
  keep their order because transactional producers are idempotent. Only ops inside a cycle of the coarse op
  graph (ww pairs + every read's writer -> reader) get time-graph vertices: every time-graph cycle projects
  onto one.
- ``lost-committed-offset``: a consumer process with a ``group`` is assigned a partition at a position below the
  last offset its group committed with an ack before the ``assign`` was invoked, and below every commit that may
  have landed after that one (acked after it was invoked, or ``info``; ``commit-offsets`` and transactional
  ``offsets`` of committed or info transactions; failed commits and aborted transactions never count). A group
  may legitimately move backwards when a member commits a lower offset later -- that commit is the last one. A
  null position (none committed, or the runner could not ask) is not judged.

Stats (not anomalies): ops per f and type; per partition the longest window with no ok send (between the first
send invoke and the last send completion) with the nemesis faults overlapping it; ``unseen`` info writes; acked
writes verified / not covered by a final read; the graph's size; the count of every anomaly type (at most 200
examples of each are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

try:
    from . import checker_graph, checker_rules
    from .checker_model import Anomaly, Event, Findings, History
except ImportError:
    import checker_graph
    import checker_rules
    from checker_model import Anomaly, Event, Findings, History

ANOMALY_TYPES: dict[str, str] = {
    "lost-write": "acknowledged write missing from a final read that covered it",
    "duplicate": "one value at two offsets",
    "divergence": "one offset with two values",
    "phantom-write": "read of a value never (successfully) sent",
    "aborted-read": "G1a: read_committed read of an aborted transaction's value",
    "uncommitted-read": "read_committed transaction read its own uncommitted write",
    "nonmonotonic-send": "one producer's offsets went backwards",
    "nonmonotonic-poll": "one consumer's offsets went backwards within an assignment",
    "poll-gap": "one consumer skipped records inside its assignment",
    "G0": "Elle write cycle (legal in Kafka)",
    "G1c": "Elle cycle with a read edge (can be legal in Kafka)",
    "impossible-cycle": "dependency cycle that contradicts time",
    "lost-committed-offset": "group restarted below its committed offset",
}
DEFAULT_ALLOWED: frozenset[str] = frozenset({"G0", "G1c"})


@dataclass
class Report:
    valid: bool
    anomalies: dict[str, list[Anomaly]]
    stats: dict[str, Any]
    allowed: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = self.stats.get("anomaly_counts", {})
        return counts

    def to_json(self) -> str:
        return json.dumps({"valid": self.valid, "allowed": self.allowed, "stats": self.stats,
                           "anomalies": {t: [asdict(a) for a in lst] for t, lst in self.anomalies.items()}},
                          default=repr, indent=1)

    def summary(self, examples: int = 3) -> str:
        lines = [f"{'anomaly':<24}{'count':>8}  meaning", "-" * 78]
        for t, what in ANOMALY_TYPES.items():
            n = self.counts().get(t, 0)
            mark = " [allowed]" if t in self.allowed else ""
            lines.append(f"{t:<24}{n:>8}  {what}{mark}")
        for t, lst in self.anomalies.items():
            for a in lst[:examples]:
                lines.append(f"  {t}: {a.explanation[:300]}  [events {a.indexes[:12]}]")
        s = self.stats
        lines.append("-" * 78)
        lines.append(f"events {s['events']}  ops {s['ops']}  final reads {s['final_reads']}  unseen (info, never "
                     f"read) {s['unseen']}  acked writes verified {s['acked_verified_by_final_read']}, not "
                     f"covered {s['acked_not_covered_by_final_read']}")
        lines.append("ops: " + "  ".join(f"{f} {c['ok']}/{c['fail']}/{c['info']}" for f, c in
                                         sorted(s["by_f"].items())) + "  (ok/fail/info)")
        for k, a in sorted(s["availability"].items()):
            lines.append(f"  {k}: {a['ok_sends']} ok sends, longest without one {a['longest_without_ok_send_s']} s "
                         f"[{a['from_s']}, {a['to_s']}] faults {a['faults_during']}")
        lines.append("VALID" if self.valid else "INVALID")
        return "\n".join(lines)


def check(events: Iterable[Event] | Iterable[dict[str, Any]], allowed: Collection[str] = DEFAULT_ALLOWED) -> Report:
    """Check a history (events in file order)."""
    h = History(events)  # type: ignore[arg-type]
    fx = Findings()
    checker_rules.divergence(h, fx)
    checker_rules.duplicates(h, fx)
    phantom = checker_rules.phantoms(h, fx)
    checker_rules.isolation_reads(h, fx)
    lost = checker_rules.lost_writes(h, fx)
    checker_rules.nonmonotonic_sends(h, fx)
    checker_rules.poll_order(h, fx, lost.lost | phantom)
    graph = checker_graph.cycles(h, fx)
    checker_rules.committed_offsets(h, fx)
    stats = checker_rules.statistics(h, lost)
    stats.update(graph)
    stats["anomaly_counts"] = dict(fx.counts)
    valid = not any(n for t, n in fx.counts.items() if t not in allowed)
    return Report(valid, fx.items, stats, sorted(allowed))


def read_events(path: str | Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def check_file(path: str | Path, allowed: Collection[str] = DEFAULT_ALLOWED) -> Report:
    return check(read_events(path), allowed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check a tidelog Jepsen history (tests/jepsen/HISTORY.md).")
    ap.add_argument("history", help="history.jsonl")
    ap.add_argument("--json", metavar="PATH", help="also write the full report as JSON")
    ap.add_argument("--allow", action="append", default=None, metavar="TYPE",
                    help="anomaly type that does not make the history invalid (default: G0, G1c); repeatable")
    ap.add_argument("--strict", action="store_true", help="no anomaly type is allowed")
    ap.add_argument("--examples", type=int, default=3, help="examples printed per anomaly type")
    args = ap.parse_args(argv)
    allowed: Collection[str] = () if args.strict else (args.allow if args.allow is not None else DEFAULT_ALLOWED)
    rep = check_file(args.history, allowed)
    print(rep.summary(args.examples))
    if args.json:
        Path(args.json).write_text(rep.to_json(), encoding="utf-8")
    return 0 if rep.valid else 1


if __name__ == "__main__":
    sys.exit(main())
