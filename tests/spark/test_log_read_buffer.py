"""``tidelog-log``'s segment reader (``log_source._batches``): one reused read buffer (issue 29). Whole batches
in file order whatever the buffer size, batches larger than the buffer, a torn tail of the active segment, a
truncated batch elsewhere. No Spark session: the reader's functions are called directly."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tidelog.records.batch import RecordSpec, build_batch, decode_batch
from tidelog.records.errors import RecordError
from tidelog.spark import log_source
from tidelog.spark.log_source import SegmentSlice, _batches, read_slice_columnar


def _segment(tmp_path: Path, rng: random.Random, n: int) -> tuple[Path, list[bytes]]:
    batches: list[bytes] = []
    base = 0
    for _ in range(n):
        recs = [RecordSpec(None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 4, 30])),
                           rng.randbytes(rng.choice([0, 10, 100, 3000])), [], 1_700_000_000_000 + base + i, i)
                for i in range(rng.randint(1, 30))]
        batches.append(build_batch(recs, base_offset=base))
        base += len(recs)
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(b"".join(batches))
    return path, batches


def _slice(path: Path, start: int, end: int, active: bool) -> SegmentSlice:
    return SegmentSlice(str(path), "t", 0, 0, start, end, 0, 2**63 - 1, active)


@pytest.mark.parametrize("chunk", [61, 100, 4096, 8 * 1024 * 1024])
def test_whole_batches_in_order_whatever_the_buffer(tmp_path: Path, monkeypatch: Any, chunk: int) -> None:
    path, batches = _segment(tmp_path, random.Random(chunk), 60)
    assert max(len(b) for b in batches) > 4096  # some batch is larger than the smaller buffers
    monkeypatch.setattr(log_source, "READ_CHUNK", chunk)
    size = path.stat().st_size
    got = [bytes(v) for v, _ in _batches(_slice(path, 0, size, False))]
    assert got == batches
    # a slice starting at a batch boundary, ending at another
    cut1 = sum(len(b) for b in batches[:7])
    cut2 = sum(len(b) for b in batches[:41])
    assert [bytes(v) for v, _ in _batches(_slice(path, cut1, cut2, False))] == batches[7:41]
    # the columnar read gives the records decode_batch gives, in order
    rows = []
    for rb in read_slice_columnar(_slice(path, 0, size, False), None, None):
        rows.extend(zip(rb.column("offset").to_pylist(), rb.column("key").to_pylist(),
                        rb.column("value").to_pylist(), strict=True))
    want = [(r.offset, r.key, r.value) for b in batches for r in decode_batch(b)[1]]
    assert rows == want


@pytest.mark.parametrize("chunk", [100, 8 * 1024 * 1024])
def test_torn_tail_and_truncation(tmp_path: Path, monkeypatch: Any, chunk: int) -> None:
    path, batches = _segment(tmp_path, random.Random(5), 20)
    monkeypatch.setattr(log_source, "READ_CHUNK", chunk)
    with open(path, "ab") as f:
        f.write(batches[3][:150])  # a batch cut short
    size = path.stat().st_size
    # the active segment: a torn tail ends the slice
    assert [bytes(v) for v, _ in _batches(_slice(path, 0, size, True))] == batches
    # elsewhere it is corruption
    with pytest.raises(RecordError, match="truncated batch at position"):
        list(_batches(_slice(path, 0, size, False)))
    # zero-filled (preallocated) space after the last batch of the active segment
    path.write_bytes(b"".join(batches) + bytes(4096))
    assert [bytes(v) for v, _ in _batches(_slice(path, 0, path.stat().st_size, True))] == batches
    with pytest.raises(RecordError, match="invalid batch length"):
        list(_batches(_slice(path, 0, path.stat().st_size, False)))
