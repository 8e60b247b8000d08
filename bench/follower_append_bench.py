"""The follower's append alone (issue 30): ``PartitionLog.append_as_follower`` on the C path against the Python
path, in one process, side by side, CPU seconds (``time.process_time``) per batch and per record.

    .venv/bin/python bench/follower_append_bench.py [--batches 3000] [--per-fetch 3] [--repeats 3]

The leader's log is built first (64 KiB batches of 100 B and of 1 KiB records, uncompressed, no producer id,
as `cluster_bench.py`'s rdkafka_performance load sends them; and the same with an idempotent producer id), then
appended to a fresh follower log in fetch answers of ``--per-fetch`` batches, once through the C path
(``append_as_follower(..., infos=False)``, what the replica fetcher calls) and once through the Python path it
replaced (``_append_follower_slow``, building the AppendInfos as before); alternating, median of the repeats.
The page cache takes the writes (no fsync on this path). The logs are compared byte for byte after each pair.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tidelog.records.batch import RecordSpec, build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.log import PartitionLog
from tidelog.storage.log import partition_log as pl
from tidelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000


def leader_batches(n: int, value_size: int, idempotent: bool) -> list[bytes]:
    per_batch = max(1, (64 << 10) // (value_size + 10))
    out = []
    offset = seq = 0
    for i in range(n):
        recs = [RecordSpec(None, bytes(value_size), (), NOW + i, j) for j in range(per_batch)]
        kw = {"producer_id": 1000, "producer_epoch": 0, "base_sequence": seq} if idempotent else {}
        out.append(build_batch(recs, base_offset=offset, partition_leader_epoch=3, **kw))  # type: ignore[arg-type]
        offset += per_batch
        seq += per_batch
    return out


def one(root: Path, fetches: list[bytes], c_path: bool) -> tuple[float, Path]:
    d = root / ("c" if c_path else "py") / "t-0"
    d.mkdir(parents=True)
    lg = PartitionLog.open(d, LogConfig(), producer_state=ProducerStateManager(d), now_ms=NOW,
                           epoch_cache=LeaderEpochCache(d / "leader-epoch-checkpoint"))
    try:
        t0 = time.process_time()
        if c_path:
            for f in fetches:
                lg.append_as_follower(f, infos=False)
        else:
            for f in fetches:
                lg._append_follower_slow(memoryview(f), True)
        return time.process_time() - t0, d
    finally:
        lg.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=3000)
    ap.add_argument("--per-fetch", type=int, default=3, help="batches per fetch answer (default 3)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if pl._c_check_follower_batches is None:
        print("the C extension is not built (or TIDELOG_PURE_PYTHON is set): nothing to compare")
        return 2
    rows = []
    for value_size in (100, 1024):
        for idem in (False, True):
            batches = leader_batches(args.batches, value_size, idem)
            records = args.batches * max(1, (64 << 10) // (value_size + 10))
            fetches = [b"".join(batches[i : i + args.per_fetch]) for i in range(0, len(batches), args.per_fetch)]
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.repeats):
                root = Path(tempfile.mkdtemp(prefix="follower-append-"))
                try:
                    t_py, d_py = one(root, fetches, False)
                    t_c, d_c = one(root, fetches, True)
                    a = b"".join(p.read_bytes() for p in sorted(d_c.glob("*.log")))
                    b = b"".join(p.read_bytes() for p in sorted(d_py.glob("*.log")))
                    if a != b:
                        print("MISMATCH: the two logs differ")
                        return 1
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                times[True].append(t_c)
                times[False].append(t_py)
            c, py = statistics.median(times[True]), statistics.median(times[False])
            rows.append((f"{value_size} B{' idempotent' if idem else ''}", py / args.batches * 1e6,
                         c / args.batches * 1e6, py / records * 1e6, c / records * 1e6, c / py))
    print(f"follower append, {args.batches} batches of ~64 KiB in fetch answers of {args.per_fetch}, CPU "
          f"(process_time) median of {args.repeats}; logs byte-identical\n")
    head = ("records", "Python us/batch", "C us/batch", "Python us/record", "C us/record", "C / Python")
    print(" | ".join(head))
    print(" | ".join("-" * len(h) for h in head))
    for name, pb, cb, pr, cr, ratio in rows:
        print(f"{name} | {pb:.1f} | {cb:.1f} | {pr:.3f} | {cr:.3f} | {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
