"""The leader's segment read per follower round, alone (issue 30): ``LogSegment.read`` as two followers call it.

    .venv/bin/python bench/follower_read_bench.py [--rounds 1000] [--batches 3] [--batch-kib 64] [--repeats 5]
    PYTHONPATH=/path/to/other/src .venv/bin/python bench/follower_read_bench.py ...   # another revision's storage

Each round appends ``--batches`` batches of ``--batch-kib`` KiB to one segment (what the producer's pipelined
requests add between two follower fetches at the cluster bench's 1 KiB load), then reads from the previous
round's end offset to the log end twice (the two followers), as ``ReadService.read_from_log`` does for a
follower (max_offset = LEO, 1 MiB partition_max_bytes). Prints the best of ``--repeats`` runs: CPU us per round
of the two reads, and the header ``pread`` calls per round (counted around ``os.pread``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tidelog.records.batch import build_batch
from tidelog.records.header import BatchHeader
from tidelog.storage import header_scan
from tidelog.storage.config import LogConfig
from tidelog.storage.segment import LogSegment


def run(rounds: int, batches: int, batch_kib: int) -> tuple[float, float]:
    value = os.urandom(1000)
    per_batch = max(1, batch_kib * 1024 // 1070)
    data = [build_batch([(None, value, (), 1000)] * per_batch, base_offset=0)]
    calls = [0]
    real = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        calls[0] += 1
        return real(fd, n, pos)

    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        seg = LogSegment(Path(d), 0, LogConfig(segment_bytes=1 << 31))
        offset = 0
        fetch = 0
        cpu = 0.0
        header_scan.os.pread = counting  # type: ignore[attr-defined]
        try:
            for _ in range(rounds):
                for _ in range(batches):
                    raw = bytearray(data[0])
                    raw[0:8] = offset.to_bytes(8, "big")  # base offset (the CRC does not cover it)
                    h = BatchHeader.parse(bytes(raw))
                    seg.append(h.last_offset, h.max_timestamp, h.last_offset, bytes(raw))
                    offset = h.last_offset + 1
                t0 = time.thread_time()
                for _ in range(2):
                    region = seg.read(fetch, 1 << 20, max_offset=offset)
                    assert region is not None and region.next_offset == offset
                cpu += time.thread_time() - t0
                fetch = offset
        finally:
            header_scan.os.pread = real  # type: ignore[attr-defined]
            seg.close()
    return 1e6 * cpu / rounds, calls[0] / rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--batch-kib", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    results = [run(a.rounds, a.batches, a.batch_kib) for _ in range(a.repeats)]
    best = min(results)
    import tidelog

    print(f"{Path(tidelog.__file__).parent}: {best[0]:.1f} us CPU per round of two follower reads "
          f"({a.batches} x {a.batch_kib} KiB batches per round), {best[1]:.2f} header preads per round "
          f"(all runs: {', '.join(f'{r[0]:.1f}' for r in results)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
