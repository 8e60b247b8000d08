"""Where a ``tidelog-log`` batch read's time goes on the Python side, without Spark (issue 29, read throughput).

For a data directory (e.g. one ``bench/spark_bench.py --workdir DIR`` left behind: ``DIR/data``), measures the CPU
seconds of this one process, least of ``--repeat``:

1. ``read``: every slice the ``tidelog-log`` source plans, read by ``read_slice`` into Arrow batches (file I/O,
   CRC, the C column builder, the Arrow arrays): tidelog's own cost;
2. ``read + IPC``: the same batches also written as an Arrow IPC stream into a pipe (a buffered Python file, as
   PySpark's Python worker writes them into its socket to the JVM): the hand-off's Python-side cost;
3. ``floor IPC``: pre-built in-memory batches of the same shape through the same IPC writer (what the
   ``tidelog-floor`` bench row costs its Python worker).

Usage::

    .venv/bin/python bench/spark_read_profile.py --data DIR/data --topic bench --repeat 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--topic", default="bench")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import pyarrow as pa

    from tidelog.spark.log_source import LogDirReader, read_slice

    reader = LogDirReader({"path": args.data, "subscribe": args.topic})
    slices = list(reader.partitions())

    def batches() -> Any:
        for s in slices:
            yield from read_slice(s, False, None, None)

    def ipc(it: Any) -> tuple[int, int]:
        # as PySpark's worker: a buffered Python file (64 KiB) over a socket to the JVM; here a pipe to ``cat``,
        # whose reading (the JVM's side) is not counted
        drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert drain.stdin is not None
        out = os.fdopen(os.dup(drain.stdin.fileno()), "wb", 65536)
        drain.stdin.close()
        rows = 0
        sink = pa.PythonFile(out, mode="w")
        writer = None
        for b in it:
            if writer is None:
                writer = pa.ipc.new_stream(sink, b.schema)
            writer.write_batch(b)
            rows += b.num_rows
        if writer is not None:
            writer.close()
        nbytes = out.tell() if out.seekable() else 0
        out.close()
        drain.wait()
        return rows, nbytes

    best: dict[str, float] = {}
    rows = 0
    sizes: list[int] = []
    for _ in range(args.repeat):
        t0 = time.process_time()
        rows = 0
        sizes = []
        for b in batches():
            rows += b.num_rows
            sizes.append(b.num_rows)
        best["read"] = min(best.get("read", 1e9), time.process_time() - t0)
        t0 = time.process_time()
        ipc(batches())
        best["read + IPC"] = min(best.get("read + IPC", 1e9), time.process_time() - t0)
    # pre-built batches of the same shape
    built = list(batches())
    for _ in range(args.repeat):
        t0 = time.process_time()
        ipc(iter(built))
        best["IPC only (batches in memory)"] = min(best.get("IPC only (batches in memory)", 1e9),
                                                   time.process_time() - t0)
    print(f"{len(slices)} slices, {rows:,} rows, {len(sizes)} Arrow batches (mean {rows / max(1, len(sizes)):,.0f} "
          f"rows); least CPU seconds of {args.repeat} (this process; the "
          "machine's load does not inflate them as it does wall time):")
    for k, v in best.items():
        print(f"  {k}: {v:.2f} CPU s ({rows / v / 1e6:.2f} M rows per CPU second)")


if __name__ == "__main__":
    main()
