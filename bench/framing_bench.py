"""Micro-benchmark of the request framing (``tidelog.protocol.framing.FrameDecoder``), no sockets.

    .venv/bin/python bench/framing_bench.py

Per frame, in the patterns the broker's connections see: one request per read, several pipelined requests per
read, a large request arriving in many reads, a size prefix cut between reads. Compared with the simplest
correct splitter, a bytearray that every read is appended to and each frame sliced from with the rest moved to a
new buffer (what ``Connection.read_frame`` did before the framing module). Best of 5; ns per frame.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from tidelog.protocol.framing import MAX_REQUEST_SIZE, FrameDecoder, frame

_I32 = struct.Struct(">i")


class BytearraySplitter:
    """The baseline: accumulate into a bytearray, hand out a view, move the rest to a fresh buffer."""

    def __init__(self, max_size: int) -> None:
        self._rbuf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes) -> None:
        self._rbuf += data

    def next_frame(self) -> memoryview | None:
        rbuf = self._rbuf
        if len(rbuf) < 4:
            return None
        (size,) = _I32.unpack_from(rbuf, 0)
        if size < 0 or size > self.max_size:
            raise ValueError(size)
        end = 4 + size
        if len(rbuf) < end:
            return None
        self._rbuf = bytearray(memoryview(rbuf)[end:]) if len(rbuf) > end else bytearray()
        return memoryview(rbuf)[4:end]


def _per_frame(make: Callable[[int], object], reads: list[bytes], frames: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            d = make(MAX_REQUEST_SIZE)
            feed, next_frame = d.feed, d.next_frame  # type: ignore[attr-defined]
            n = 0
            for r in reads:
                feed(r)
                while next_frame() is not None:
                    n += 1
            assert n == frames
        best = min(best, (time.perf_counter() - t0) / (repeats * frames))
    return best * 1e9


def main() -> None:
    small = frame(b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x01c" + b"x" * 30)
    kib = frame(b"p" * 1024)
    mib = frame(b"m" * (1 << 20))
    big = frame(b"m" * (16 << 20))
    cut = frame(b"s" * 300)
    cases: dict[str, tuple[list[bytes], int, int]] = {
        "1 small request per read": ([small] * 1000, 1000, 50),
        "1 KiB request per read": ([kib] * 1000, 1000, 50),
        "8 pipelined small per read": ([small * 8] * 125, 1000, 50),
        "1 MiB in 64 KiB reads": ([mib[i : i + 65536] for i in range(0, len(mib), 65536)], 1, 200),
        "1 MiB in 256 KiB reads": ([mib[i : i + 262144] for i in range(0, len(mib), 262144)], 1, 200),
        "16 MiB in 4 MiB reads": ([big[i : i + (4 << 20)] for i in range(0, len(big), 4 << 20)], 1, 10),
        "300 B, prefix cut 2+rest": ([cut[:2], cut[2:]] * 500, 500, 50),
    }
    print(f"{'case':30} {'bytearray ns':>13} {'FrameDecoder ns':>16} {'ratio':>6}")
    for name, (reads, frames, repeats) in cases.items():
        base = _per_frame(BytearraySplitter, reads, frames, repeats)
        ours = _per_frame(FrameDecoder, reads, frames, repeats)
        print(f"{name:30} {base:13.0f} {ours:16.0f} {ours / base:6.2f}")


if __name__ == "__main__":
    main()
