from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.storage.index import (
    CorruptIndexError,
    IndexFullError,
    InvalidIndexOffsetError,
    OffsetIndex,
    TimeIndex,
)

BASE = 1000


def test_new_offset_index_is_preallocated_and_trimmed_on_close(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    idx = OffsetIndex(path, BASE, max_index_size=100)  # rounds down to 12 entries = 96 bytes
    assert path.stat().st_size == 96
    assert idx.max_entries == 12 and idx.entries == 0
    idx.append(1005, 0)
    idx.append(1010, 4200)
    idx.close()
    assert path.read_bytes() == struct.pack(">ii", 5, 0) + struct.pack(">ii", 10, 4200)


def test_time_index_preallocated_size_and_full_one_early(tmp_path: Path) -> None:
    path = tmp_path / "t.timeindex"
    idx = TimeIndex(path, BASE, max_index_size=40)  # 3 entries of 12 bytes
    assert path.stat().st_size == 36
    assert idx.max_entries == 3
    assert idx.maybe_append(10, 1000)
    assert not idx.is_full()
    assert idx.maybe_append(20, 1001)
    assert idx.is_full()  # the last slot is kept for the final entry of an inactive segment
    with pytest.raises(IndexFullError):
        idx.maybe_append(30, 1002)
    assert idx.maybe_append(30, 1002, skip_full_check=True)
    assert idx.entries == 3
    idx.close()
    assert path.read_bytes() == b"".join(struct.pack(">qi", t, o) for t, o in [(10, 0), (20, 1), (30, 2)])


def test_default_capacities(tmp_path: Path) -> None:
    o = OffsetIndex(tmp_path / "a.index", 0, 10 * 1024 * 1024)
    t = TimeIndex(tmp_path / "a.timeindex", 0, 10 * 1024 * 1024)
    assert o.max_entries == 1310720
    assert t.max_entries == 873813
    o.close()
    t.close()


def test_offset_index_append_rules(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", BASE, 8 * 4)
    idx.append(1003, 10)
    with pytest.raises(InvalidIndexOffsetError):
        idx.append(1003, 20)
    with pytest.raises(InvalidIndexOffsetError):
        idx.append(BASE + 2**31, 20)
    idx.append(1004, 20)
    idx.append(1005, 30)
    idx.append(1006, 40)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(1007, 50)


def test_time_index_only_appends_larger_timestamps(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", BASE, 12 * 10)
    assert idx.last_entry == (-1, BASE)
    assert not idx.maybe_append(-1, 1000)
    assert idx.maybe_append(100, 1002)
    assert not idx.maybe_append(100, 1003)
    with pytest.raises(InvalidIndexOffsetError):
        idx.maybe_append(99, 1004)
    with pytest.raises(InvalidIndexOffsetError):
        idx.maybe_append(200, 1001)
    assert idx.maybe_append(200, 1004)
    assert idx.lookup(50) == (-1, BASE)
    assert idx.lookup(100) == (100, 1002)
    assert idx.lookup(199) == (100, 1002)
    assert idx.lookup(10**12) == (200, 1004)


@settings(max_examples=60, deadline=None)
@given(
    deltas=st.lists(st.integers(min_value=1, max_value=50), min_size=0, max_size=40),
    targets=st.lists(st.integers(min_value=BASE - 5, max_value=BASE + 2100), min_size=1, max_size=20),
)
def test_offset_lookup_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[int], targets: list[int]
) -> None:
    path = tmp_path_factory.mktemp("idx") / "o.index"
    idx = OffsetIndex(path, BASE, 8 * 64)
    entries = []
    off, pos = BASE, 0
    for d in deltas:
        off += d
        pos += d * 7
        idx.append(off, pos)
        entries.append((off, pos))
    for t in targets:
        below = [e for e in entries if e[0] <= t]
        assert idx.lookup(t) == (below[-1] if below else (BASE, 0))
    idx.close()


@settings(max_examples=60, deadline=None)
@given(
    deltas=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), max_size=30),
    cut=st.integers(min_value=BASE - 2, max_value=BASE + 1000),
)
def test_truncate_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[tuple[int, int]], cut: int
) -> None:
    d = tmp_path_factory.mktemp("idx")
    o = OffsetIndex(d / "o.index", BASE, 8 * 64)
    t = TimeIndex(d / "o.timeindex", BASE, 12 * 64)
    off, ts = BASE, 0
    o_entries, t_entries = [], []
    for do, dt in deltas:
        off += do
        ts += dt
        o.append(off, off * 3)
        t.maybe_append(ts, off)
        o_entries.append((off, off * 3))
        t_entries.append((ts, off))
    o.truncate_to(cut)
    t.truncate_to(cut)
    assert o.entries_list() == [e for e in o_entries if e[0] < cut]
    assert t.entries_list() == [e for e in t_entries if e[1] < cut]
    expected_last = [e for e in o_entries if e[0] < cut]
    assert o.last_offset == (expected_last[-1][0] if expected_last else BASE)
    # appending after a truncation continues from the truncated state
    o.append(max(cut, off + 1), 10**6)
    o.close()
    t.close()


def test_reopen_trimmed_and_preallocated(tmp_path: Path) -> None:
    path = tmp_path / "o.index"
    idx = OffsetIndex(path, BASE, 8 * 100)
    for i in range(1, 6):
        idx.append(BASE + i * 10, i * 100)
    # crash before the trim: the file keeps its preallocated zero tail
    idx.flush()
    idx.close_handler()
    assert path.stat().st_size == 800
    reopened = OffsetIndex(path, BASE, 8 * 100)
    assert reopened.entries == 5
    assert reopened.last_offset == BASE + 50
    reopened.sanity_check()
    reopened.close()
    assert path.stat().st_size == 40
    trimmed = OffsetIndex(path, BASE, 8 * 100)
    assert trimmed.entries == 5
    assert trimmed.max_entries == 5 and trimmed.is_full()
    trimmed.resize(8 * 100)
    assert trimmed.max_entries == 100 and not trimmed.is_full()
    trimmed.append(BASE + 60, 600)
    assert trimmed.lookup(BASE + 1000) == (BASE + 60, 600)
    trimmed.close()


def test_reopen_time_index_with_zero_tail(tmp_path: Path) -> None:
    path = tmp_path / "t.timeindex"
    idx = TimeIndex(path, BASE, 12 * 10)
    idx.maybe_append(5, BASE)
    idx.maybe_append(7, BASE + 3)
    idx.close_handler()
    again = TimeIndex(path, BASE, 12 * 10)
    assert again.entries_list() == [(5, BASE), (7, BASE + 3)]
    assert again.last_entry == (7, BASE + 3)
    again.close()


def test_sanity_check_detects_corruption(tmp_path: Path) -> None:
    path = tmp_path / "o.index"
    path.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 200))  # offsets decrease
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE).sanity_check()
    path.write_bytes(struct.pack(">ii", 5, 100) + b"\x01\x02\x03")  # not a multiple of 8
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE).sanity_check()
    path.write_bytes(struct.pack(">ii", -5, 100))  # below the base offset
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE).sanity_check()
    path.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 9, 50))  # positions decrease
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE).sanity_check()
    path.write_bytes(struct.pack(">ii", 5, 100))
    OffsetIndex(path, BASE).sanity_check()
    with pytest.raises(CorruptIndexError):  # position beyond the log
        OffsetIndex(path, BASE).sanity_check(log_size=50)

    tpath = tmp_path / "t.timeindex"
    tpath.write_bytes(struct.pack(">qi", 50, 1) + struct.pack(">qi", 40, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(tpath, BASE).sanity_check()
    tpath.write_bytes(struct.pack(">qi", 50, 1) + b"\x00" * 5)
    with pytest.raises(CorruptIndexError):
        TimeIndex(tpath, BASE).sanity_check()
    tpath.write_bytes(struct.pack(">qi", 50, 4) + struct.pack(">qi", 60, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(tpath, BASE).sanity_check()


def test_reset_restores_preallocation(tmp_path: Path) -> None:
    path = tmp_path / "o.index"
    idx = OffsetIndex(path, BASE, 80)
    idx.append(BASE + 1, 10)
    idx.trim_to_valid_size()
    assert path.stat().st_size == 8
    idx.reset()
    assert idx.entries == 0 and path.stat().st_size == 80
    assert idx.lookup(BASE + 5) == (BASE, 0)
    idx.close()
    assert path.stat().st_size == 0
    empty = OffsetIndex(path, BASE, 80)
    assert empty.entries == 0 and empty.is_full()
    empty.close()


@pytest.mark.parametrize("limit", [1, 3, 1024])
def test_buffered_entries_are_looked_up_and_reach_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    from tidelog.storage.index import AbstractIndex

    monkeypatch.setattr(AbstractIndex, "PENDING_LIMIT", limit)
    oi = OffsetIndex(tmp_path / "a.index", BASE)
    ti = TimeIndex(tmp_path / "a.timeindex", BASE)
    model_o: list[tuple[int, int]] = []
    model_t: list[tuple[int, int]] = []
    for i in range(10):
        oi.append_unlocked(BASE + 3 * i + 2, 100 * i)
        ti.maybe_append_unlocked(5000 + 10 * i, BASE + 3 * i + 2)
        model_o.append((BASE + 3 * i + 2, 100 * i))
        model_t.append((5000 + 10 * i, BASE + 3 * i + 2))
        for target in range(BASE - 1, BASE + 3 * i + 5):
            want = max((e for e in model_o if e[0] <= target), default=(BASE, 0))
            assert oi.lookup(target) == want
        for ts in range(4990, 5000 + 10 * i + 5, 3):
            want_t = max((e for e in model_t if e[0] <= ts), default=(-1, BASE))
            assert ti.lookup(ts) == want_t
    assert oi.entries == ti.entries == 10
    assert oi.entries_list() == model_o and ti.entries_list() == model_t  # entry() writes the buffer out
    oi.append_unlocked(BASE + 40, 2000)
    ti.maybe_append_unlocked(6000, BASE + 40)
    oi.flush()
    ti.flush()
    raw = (tmp_path / "a.index").read_bytes()
    assert struct.unpack_from(">ii", raw, 10 * 8) == (40, 2000)
    assert struct.unpack_from(">qi", (tmp_path / "a.timeindex").read_bytes(), 10 * 12) == (6000, 40)
    oi.truncate_to(BASE + 3 * 5 + 2)
    assert oi.entries == 5 and oi.lookup(BASE + 100) == model_o[4]
    oi.close()
    ti.close()
    assert (tmp_path / "a.index").stat().st_size == 5 * 8
    assert TimeIndex(tmp_path / "a.timeindex", BASE).entries_list() == [*model_t, (6000, BASE + 40)]


def test_buffered_appends_race_with_a_flushing_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from tidelog.storage.index import AbstractIndex

    monkeypatch.setattr(AbstractIndex, "PENDING_LIMIT", 7)
    oi = OffsetIndex(tmp_path / "r.index", 0)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            oi.flush()
            oi.lookup(10**6)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(20_000):
            oi.append_unlocked(i, 8 * i)
    finally:
        stop.set()
        t.join()
    assert oi.entries_list() == [(i, 8 * i) for i in range(20_000)]
    oi.close()


@settings(max_examples=200, deadline=None)
@given(
    fmt=st.sampled_from(["ii", "qi"]),
    pairs=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)), max_size=40),
    wide=st.integers(-(2**63), 2**63 - 1),
    extra=st.integers(0, 3),
)
def test_materialized_entries_are_the_struct_packing(fmt: str, pairs: list, wide: int, extra: int) -> None:  # type: ignore[type-arg]
    """_materialize's array packing gives the bytes of struct.pack(">" + fmt * k) (pending entries past k,
    still being appended, are left out)."""
    from array import array

    from tidelog.storage.index import _big_endian_entries

    if fmt == "qi" and pairs:
        pairs[0] = (wide, pairs[0][1])
    k = len(pairs)
    pairs = pairs + [(1, 2)] * extra
    keys, values = array("q", [p[0] for p in pairs]), array("i", [p[1] for p in pairs])
    expect = struct.pack(">" + fmt * k, *[v for p in pairs[:k] for v in p])
    assert _big_endian_entries(keys, values, k, fmt).tobytes() == expect
