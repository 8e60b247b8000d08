"""The segment's header memo (storage/header_memo.py, issue 30): a read from where the previous one ended, or of
batches another read just scanned, reads no header from the file; after a truncation nothing stale is served."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tidelog.records.batch import build_batch
from tidelog.records.header import BatchHeader
from tidelog.storage import header_scan
from tidelog.storage.config import LogConfig
from tidelog.storage.header_memo import MEMO_ENTRIES
from tidelog.storage.header_scan import iter_header_tuples
from tidelog.storage.segment import LogSegment


def batch(base: int, n: int, value_size: int) -> bytes:
    return build_batch([(b"k", os.urandom(value_size), (), 1000 + i) for i in range(n)], base_offset=base)


def append(seg: LogSegment, data: bytes) -> BatchHeader:
    h = BatchHeader.parse(data)
    seg.append(h.last_offset, h.max_timestamp, h.last_offset, data)
    return h


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Positions of the header preads the scans make (the real os.pread, counted)."""
    seen: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        seen.append(pos)
        return real(fd, n, pos)

    monkeypatch.setattr(header_scan.os, "pread", counting)
    return seen


def test_follower_rounds_read_no_header_twice(tmp_path: Path, preads: list[int]) -> None:
    seg = LogSegment(tmp_path, 0, LogConfig())
    # 64 KiB batches, each larger than the 4 KiB scan chunk: without the memo one pread per batch per read
    for i in range(3):
        append(seg, batch(i * 10, 10, 6500))
    first = seg.read(0, 1 << 20, max_offset=30)
    assert first is not None and first.next_offset == 30 and first.length == seg.size
    scanned = len(preads)
    assert scanned >= 3
    second = seg.read(0, 1 << 20, max_offset=30)  # the other follower, same batches
    assert second is not None and (second.position, second.length, second.next_offset) == (0, seg.size, 30)
    assert len(preads) == scanned
    # the next round: two batches appended, both followers read from offset 30
    end = seg.size
    for i in range(3, 5):
        append(seg, batch(i * 10, 10, 6500))
    preads.clear()
    third = seg.read(30, 1 << 20, max_offset=50)
    assert third is not None and (third.position, third.next_offset) == (end, 50)
    assert all(p >= end for p in preads), "only the new batches' headers are read"
    assert len(preads) == 2
    fourth = seg.read(30, 1 << 20, max_offset=50)
    assert fourth is not None and (fourth.position, fourth.length) == (third.position, third.length)
    assert len(preads) == 2
    seg.close()


def test_truncation_forgets_the_batches_cut(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, LogConfig())
    for i in range(4):
        append(seg, batch(i * 10, 10, 200))
    whole = seg.read(0, 1 << 20)
    assert whole is not None and whole.next_offset == 40
    cut_at = seg.translate_offset(10)
    assert cut_at is not None
    seg.truncate_to(10)
    # other batches at the same positions: offsets 10..12 in one batch, then 13..29
    append(seg, batch(10, 3, 900))
    append(seg, batch(13, 17, 50))
    got = seg.read(10, 1 << 20)
    assert got is not None and got.position == cut_at[0] and got.next_offset == 30
    assert got.length == seg.size - cut_at[0]
    one = seg.read(13, 1 << 20, max_offset=30)
    assert one is not None and one.first_offset == 13
    assert BatchHeader.parse(one.read_bytes()).base_offset == 13
    seg.close()


def test_reads_match_a_scan_of_the_file(tmp_path: Path) -> None:
    """Random appends, reads (any start offset, size limit, max offset) and truncations: every read returns
    what a fresh scan of the file says, whether its headers came from the memo or not."""
    rnd = random.Random(30)
    seg = LogSegment(tmp_path, 0, LogConfig(index_interval_bytes=2048))
    next_offset = 0
    for _ in range(400):
        action = rnd.random()
        if action < 0.35 or next_offset == 0:
            n = rnd.randint(1, 5)
            append(seg, batch(next_offset, n, rnd.choice((20, 300, 3000))))
            next_offset += n
        elif action < 0.4:
            cut = rnd.randrange(next_offset)
            seg.truncate_to(cut)
            headers = list(iter_header_tuples(seg.fd, 0, seg.size))
            next_offset = headers[-1][1][0] + headers[-1][1][6] + 1 if headers else 0
        else:
            start = rnd.randrange(next_offset)
            max_size = rnd.choice((1, 500, 5000, 1 << 20))
            max_offset = rnd.choice((None, rnd.randint(start, next_offset)))
            got = seg.read(start, max_size, max_offset=max_offset)
            expected = _scan_read(seg, start, max_size, max_offset)
            assert (None if got is None else (got.position, got.length, got.next_offset)) == expected
        assert len(seg._memo) <= MEMO_ENTRIES
    seg.close()


def _scan_read(seg: LogSegment, start: int, max_size: int, max_offset: int | None) -> tuple[int, int, int] | None:
    """LogSegment.read's rule (whole batches from the one holding ``start``; the first even when larger than
    ``max_size``) from a plain scan of the whole file."""
    headers = list(iter_header_tuples(seg.fd, 0, seg.size))
    i = next((k for k, (_, f) in enumerate(headers) if f[0] + f[6] >= start), None)
    if i is None:
        return None
    position = headers[i][0]
    length, next_off = 0, -1
    for _pos, f in headers[i:]:
        last = f[0] + f[6]
        if max_offset is not None and last >= max_offset:
            break
        size = f[1] + 12
        if length and length + size > max_size:
            break
        length += size
        next_off = last + 1
    return position, length, next_off
