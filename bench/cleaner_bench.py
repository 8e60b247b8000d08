"""Log cleaner benchmark: compaction throughput against a plain sequential copy, and memory against the
dedupe buffer setting, measured in one run.

* **Throughput**: logs of ``--records`` keyed records (``--value-size`` bytes each, batches of ``--batch``
  records, 1 MiB segments) with 1 %, 50 % and 99 % duplicate keys (the share of records whose key was
  written before). The cleaner cleans each log once (offset map large enough for one round); MB/s is log
  bytes cleaned (read) per second. Baseline: copying the very same ``.log`` files sequentially with
  ``os.read``/``os.write`` (warm page cache for both; neither fsyncs except the cleaner's one fsync per
  cleaned segment, which is part of what it must do). Each log is cleaned with the C per-batch loops
  (``tidelog.storage._cleanwalk``, row ``C``) and, in the same run, an identical log with them disabled (row
  ``python``, the pure-Python reference; ``--no-python`` skips it). The two cleaned logs are checked to be
  byte-identical. The 64 MiB offset map is allocated before the clock starts, as a broker's cleaner thread
  allocates its map once and reuses it (cleared) for every cleaning; clearing it is timed.
* **Memory**: the Python heap high-water mark (tracemalloc peak) of one cleaning of the 50 % log with several
  ``log.cleaner.dedupe.buffer.size`` settings; the offset map is preallocated, so the peak follows the setting
  plus a constant for batch buffers. Smaller settings clean in more rounds.

Usage::

    .venv/bin/python bench/cleaner_bench.py           # 100k records of 100 bytes (~15 MB per log)
    .venv/bin/python bench/cleaner_bench.py --quick   # 20k records
    .venv/bin/python bench/cleaner_bench.py --quick --no-python --tidelog-rev ce67fc6   # ce67fc6 vs HEAD
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from tidelog.records.batch import build_batch
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager
from tidelog_revs import add_argument as add_rev_argument
from tidelog_revs import emit, parse_revs, print_side_by_side, run_in_each

try:  # the cleaner split into modules (issue 13); older revisions (--tidelog-rev) had one cleaner module
    from tidelog.storage.cleaner import batch_filter, build_map
except ImportError:
    from tidelog.storage import cleaner as batch_filter  # type: ignore[no-redef]
    from tidelog.storage import cleaner as build_map  # type: ignore[no-redef]

NOW = 1_700_000_000_000
TP = ("bench", 0)
#: the C per-batch hooks, each a global of the module that calls it (set to None there: the pure-Python path)
C_FUNCS = ((build_map, "c_put_records"), (batch_filter, "c_filter_records"))


def make_log(root: Path, records: int, dup: float, value_size: int, batch: int, seed: int = 1) -> PartitionLog:
    cfg = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=1 << 20,
        min_cleanable_dirty_ratio=0.0,
        file_delete_delay_ms=0,
        message_timestamp_after_max_ms=2**63 - 1,
    )
    d = root / f"{TP[0]}-{TP[1]}"
    plog = PartitionLog.open(d, cfg, clean_shutdown=True, producer_state=ProducerStateManager(d), now_ms=NOW)
    rng = random.Random(seed)
    unique = max(1, round(records * (1 - dup)))
    # the first ``unique`` records introduce every key once; the rest rewrite random earlier keys, interleaved
    order = [i for i in range(unique)] + [rng.randrange(unique) for _ in range(records - unique)]
    head, tail = order[:unique], order[unique:]
    mixed: list[int] = []
    while head or tail:
        if head and (not tail or rng.random() < len(head) / (len(head) + len(tail))):
            mixed.append(head.pop(0))
        else:
            mixed.append(tail.pop())
    value = b"v" * value_size
    for i in range(0, records, batch):
        recs = [(b"key-%010d" % k, value, (), NOW + i) for k in mixed[i : i + batch]]
        plog.append_as_leader(build_batch(recs), now_ms=NOW + i)
    plog.roll(now_ms=NOW + records)
    plog.high_watermark = plog.log_end_offset
    plog.flush()
    return plog


def clean(plog: PartitionLog, pure: bool) -> tuple[float, list]:
    """Seconds to clean ``plog`` until done (``pure``: with the C loops disabled), and the results."""
    saved = {(module, name): getattr(module, name) for module, name in C_FUNCS}
    if pure:
        for module, name in C_FUNCS:
            setattr(module, name, None)
    try:
        cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=64 << 20), lambda plog=plog: {TP: plog})
        cleaner.offset_map()  # allocated once per cleaner (a broker's thread keeps its map): not timed
        t0 = time.perf_counter()
        results = cleaner.clean_until_done(now_ms=NOW + 10**9)
        return time.perf_counter() - t0, results
    finally:
        for (module, name), fn in saved.items():
            setattr(module, name, fn)


def log_bytes(plog: PartitionLog) -> list[bytes]:
    return [s.log_path.read_bytes() for s in plog.segments]


def copy_files(paths: list[Path], dest: Path) -> tuple[int, float]:
    dest.mkdir()
    total = 0
    t0 = time.perf_counter()
    for p in paths:
        fin = os.open(p, os.O_RDONLY)
        fout = os.open(dest / p.name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while chunk := os.read(fin, 1 << 20):
                os.write(fout, chunk)
                total += len(chunk)
        finally:
            os.close(fin)
            os.close(fout)
    return total, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-python", action="store_true", help="skip the pure-Python comparison rows")
    add_rev_argument(ap, what="Each runs this script in a child interpreter; their figures are then printed side "
                     "by side (after/before: > 1 means the last revision is faster)")
    args = ap.parse_args()
    if args.tidelog_rev:
        results = run_in_each(__file__, sys.argv[1:], parse_revs(args.tidelog_rev))
        ratios = {k: True for _, figs in results for k in (figs or {}) if k.endswith("cleaner MB/s")}
        print_side_by_side("cleaner bench, revisions side by side", results, ratios)
        return 0 if all(figs for _, figs in results) else 1
    figures: dict[str, object] = {}
    if args.quick:
        args.records = 20_000
    have_c = all(getattr(module, name) is not None for module, name in C_FUNCS)
    paths = (["C"] if have_c else []) + ([] if args.no_python and have_c else ["python"])
    work = Path(tempfile.mkdtemp(prefix="cleaner-bench-"))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {args.records} records x {args.value_size} B, "
          f"batches of {args.batch}; warm page cache"
          + ("" if have_c else "; C loops not available (not built or TIDELOG_PURE_PYTHON set)"))
    print()
    print(f"{'duplicates':>10} | {'path':>6} | {'log MB':>7} | {'kept %':>6} | {'cleaner MB/s':>12} | "
          f"{'copy MB/s':>9} | {'ratio':>7} | {'vs python':>9}")
    print("-" * 90)
    try:
        for dup in (0.01, 0.50, 0.99):
            cleaned: dict[str, list[bytes]] = {}
            mbps_of: dict[str, float] = {}
            rows = []
            copy_mbps = 0.0
            for path in paths:
                root = work / f"dup{int(dup * 100)}-{path}"
                plog = make_log(root, args.records, dup, args.value_size, args.batch)
                files = [s.log_path for s in plog.segments[:-1]]
                size = sum(p.stat().st_size for p in files)
                if not copy_mbps:  # one copy baseline per log, shared by its C and python rows
                    copied, copy_s = copy_files(files, work / f"copy{int(dup * 100)}")
                    assert copied == size
                    copy_mbps = size / copy_s / 1e6
                secs, results = clean(plog, pure=path == "python")
                read = sum(r.bytes_read for r in results)
                written = sum(r.bytes_written for r in results)
                after = sum(s.size for s in plog.segments)
                # bytes_read counts the dirty section twice (map pass + copy pass); throughput is per log byte
                mbps_of[path] = size / secs / 1e6
                rows.append((path, size, after))
                assert read >= size and written <= size
                cleaned[path] = log_bytes(plog)
                plog.close()
                shutil.rmtree(root)
            if len(cleaned) == 2:
                assert cleaned["C"] == cleaned["python"], "the C and Python cleaners disagree"
            for path, size, after in rows:
                mbps = mbps_of[path]
                gain = f"{mbps / mbps_of['python']:8.2f}x" if "python" in mbps_of else f"{'-':>9}"
                print(f"{int(dup * 100):>9}% | {path:>6} | {size / 1e6:7.2f} | {100 * after / size:6.1f} | "
                      f"{mbps:12.2f} | {copy_mbps:9.1f} | {mbps / copy_mbps:7.4f} | {gain}")
                figures[f"{int(dup * 100)}% duplicates, {path}: cleaner MB/s"] = round(mbps, 2)
                figures[f"{int(dup * 100)}% duplicates, {path}: kept %"] = round(100 * after / size, 1)
                figures[f"{int(dup * 100)}% duplicates: copy MB/s"] = round(copy_mbps, 1)

        print()
        print("memory: one cleaning of the 50 % log (tracemalloc peak of the Python heap)")
        print(f"{'dedupe.buffer.size':>18} | {'map slots':>9} | {'rounds':>6} | {'peak MiB':>8} | {'peak/setting':>12}")
        print("-" * 66)
        for setting in (256 << 10, 1 << 20, 4 << 20, 16 << 20):
            root = work / f"mem{setting}"
            plog = make_log(root, args.records, 0.5, args.value_size, args.batch)
            cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=setting), lambda plog=plog: {TP: plog})
            tracemalloc.start()
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            results = cleaner.clean_until_done(now_ms=NOW + 10**9)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            used = peak - base
            print(f"{setting / 1048576:>14.2f} MiB | {setting // 24:>9} | {len(results):>6} | {used / 1048576:8.2f} | "
                  f"{used / setting:12.2f}")
            figures[f"memory peak MiB, dedupe.buffer.size {setting / 1048576:.2f} MiB"] = round(used / 1048576, 2)
            plog.close()
            shutil.rmtree(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
