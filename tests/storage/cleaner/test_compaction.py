"""Compaction correctness: the newest value per key survives, tombstones live for delete.retention.ms, batches
and indexes stay valid, the cleaner works in rounds when its offset map is small."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from cleanup_helpers import NOW, TP, append, check_invariants, compact_config, key_values, open_log, read_all
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.records.batch import build_batch
from tidelog.storage.cleaner import (
    CleanerConfig,
    DedupeBufferTooSmallError,
    LogCleaner,
    Throttler,
    group_segments_by_size,
    plan_log,
)
from tidelog.storage.offset_map import BYTES_PER_ENTRY, OffsetMap

KEYS = [b"k%d" % i for i in range(12)]

# a write is (key index, value or None for a tombstone); a stream is batches of writes
writes = st.tuples(st.integers(0, len(KEYS) - 1), st.one_of(st.none(), st.binary(min_size=0, max_size=40)))
streams = st.lists(st.lists(writes, min_size=1, max_size=6), min_size=1, max_size=60)


def _expected(stream: list[list[tuple[int, bytes | None]]]) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    offset = 0
    for batch in stream:
        for k, v in batch:
            latest[KEYS[k]] = (offset, v)
            offset += 1
    return latest


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams, map_entries=st.sampled_from([8, 13, 64, 1000]), codec=st.sampled_from([0, 1]))
def test_cleaning_keeps_exactly_the_newest_record_per_key(
    stream: list[list[tuple[int, bytes | None]]], map_entries: int, codec: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plog = open_log(Path(tmp), compact_config(segment_bytes=600))
        for i, batch in enumerate(stream):
            append(plog, [(KEYS[k], v) for k, v in batch], ts=NOW + i, compression=codec)
        plog.roll(now_ms=NOW + 1000)  # everything written becomes cleanable
        before_leo = plog.log_end_offset
        memory = int(map_entries / 0.9) * BYTES_PER_ENTRY + BYTES_PER_ENTRY
        cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=memory), lambda: {TP: plog})
        results = cleaner.clean_until_done(now_ms=NOW + 2000)
        assert results and not any(r.aborted for r in results)
        assert cleaner.checkpoints()[TP] == before_leo
        expected = _expected(stream)

        # within delete.retention.ms: the newest record of every key, tombstones included
        got = {k: (o, v) for o, k, v in key_values(plog)}
        assert len(key_values(plog)) == len(got), "a key appears twice"
        assert got == expected
        check_invariants(plog)
        assert plog.log_end_offset == before_leo

        # past the delete horizon the tombstones go; live keys keep their newest value
        cleaner.clean_until_done(now_ms=NOW + 2000 + plog.config.delete_retention_ms + 1)
        live = {k: ov for k, ov in expected.items() if ov[1] is not None}
        got = {k: (o, v) for o, k, v in key_values(plog)}
        assert got == live
        check_invariants(plog)
        plog.close()


def test_tombstone_batch_gets_delete_horizon(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config(delete_retention_ms=5000))
    append(plog, [(b"a", b"1"), (b"b", b"2")])
    append(plog, [(b"a", None), (b"c", b"3")], ts=NOW + 1)
    plog.roll(now_ms=NOW + 2)
    cleaner = LogCleaner(CleanerConfig(), lambda: {TP: plog})
    cleaner.clean_until_done(now_ms=NOW + 10)
    batches = read_all(plog)
    tomb_batch = [h for h, recs in batches if any(r.value is None for r in recs)]
    assert len(tomb_batch) == 1
    h = tomb_batch[0]
    assert h.has_delete_horizon and h.base_timestamp == NOW + 10 + 5000
    # record timestamps survive the rebase onto the horizon
    assert [r.timestamp for r in batches[-1][1]] == [NOW + 1, NOW + 1]
    # not yet due: the cleaner leaves the log alone; due: tombstone removed
    assert cleaner.clean_until_done(now_ms=NOW + 4000) == []
    cleaner.clean_until_done(now_ms=NOW + 5011)
    assert [(k, v) for _, k, v in key_values(plog)] == [(b"b", b"2"), (b"c", b"3")]
    check_invariants(plog)


def test_producer_last_batch_kept_empty(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config())
    batch = build_batch([(b"k", b"from-producer", (), NOW)], producer_id=7, producer_epoch=0, base_sequence=0)
    plog.append_as_leader(batch, now_ms=NOW)
    append(plog, [(b"k", b"newer")], ts=NOW + 1)
    plog.roll(now_ms=NOW + 2)
    LogCleaner(CleanerConfig(), lambda: {TP: plog}).clean_until_done(now_ms=NOW + 3)
    batches = read_all(plog)
    empty = [h for h, recs in batches if not recs]
    assert len(empty) == 1
    h = empty[0]
    assert (h.producer_id, h.base_sequence, h.base_offset, h.last_offset, h.records_count) == (7, 0, 0, 0, 0)
    assert key_values(plog) == [(1, b"k", b"newer")]
    # the producer's sequence state is intact after a reload from the cleaned log
    plog.close()
    plog = open_log(tmp_path, compact_config(), clean_shutdown=False)
    dup = plog.append_as_leader(batch, now_ms=NOW + 5)
    assert dup.duplicate and dup.first_offset == 0
    check_invariants(plog)


def test_active_segment_and_min_lag_untouched(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config(min_compaction_lag_ms=10_000))
    for i in range(60):
        append(plog, [(b"same", b"v%03d" % i)], ts=NOW + i * 100)
    segs = plog.segments
    assert len(segs) > 2
    active_bytes = segs[-1].read_batch(0, segs[-1].size)
    # the first segment is older than min.compaction.lag.ms, the second is not
    now = segs[0].largest_timestamp + 1 + 10_000
    assert segs[1].largest_timestamp > now - 10_000
    ltc = plan_log(TP, plog, None, now)
    assert ltc.first_uncleanable_offset == segs[1].base_offset
    LogCleaner(CleanerConfig(), lambda: {TP: plog}).clean_until_done(now_ms=now)
    assert plog.segments[-1].read_batch(0, plog.segments[-1].size) == active_bytes
    values = [v for _, _, v in key_values(plog)]
    # only the newest record of the cleanable first segment survives; younger data is untouched
    assert values == [b"v%03d" % i for i in range(segs[1].base_offset - 1, 60)]
    check_invariants(plog)


def test_dirty_ratio_and_max_compaction_lag_select_logs(tmp_path: Path) -> None:
    a = open_log(tmp_path / "a", compact_config(min_cleanable_dirty_ratio=0.99))
    for i in range(40):
        append(a, [(b"k%d" % (i % 3), b"x" * 20)], ts=NOW + i)
    a.roll(now_ms=NOW + 100)
    cleaner = LogCleaner(CleanerConfig(), lambda: {TP: a})
    # first pass: everything is dirty (ratio 1.0 > 0.99)
    assert cleaner.clean_until_done(now_ms=NOW + 200)
    for i in range(3):
        append(a, [(b"k%d" % i, b"y" * 20)], ts=NOW + 300 + i)
    a.roll(now_ms=NOW + 400)
    plan = cleaner.plans(now_ms=NOW + 500)[0]
    assert 0 < plan.dirty_ratio < 0.99
    assert cleaner.clean_until_done(now_ms=NOW + 500) == []
    # max.compaction.lag.ms forces the cleaning regardless of the ratio
    a.update_config(compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000))
    assert cleaner.plans(now_ms=NOW + 5000)[0].needs_compaction_now
    assert cleaner.clean_until_done(now_ms=NOW + 5000)
    assert sorted(v for _, _, v in key_values(a)) == [b"y" * 20] * 3
    stats = cleaner.stats()[TP]
    assert stats.runs == 2 and stats.records_removed > 0


def test_offset_map_is_fixed_memory_and_exact() -> None:
    m = OffsetMap(24 * 100, 0.9)
    assert m.max_entries == 90 and m.memory_bytes == 2400
    for i in range(90):
        m.put(b"key-%d" % i, i)
    m.put(b"key-5", 1000)
    assert m.full and m.get(b"key-5") == 1000 and m.get(b"key-89") == 89 and m.get(b"nope") == -1
    with pytest.raises(OverflowError):
        m.put(b"one-more", 1)
    m.clear()
    assert len(m) == 0 and m.get(b"key-5") == -1


def test_dedupe_buffer_smaller_than_a_batch(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config())
    append(plog, [(b"k%d" % i, b"v") for i in range(20)])
    plog.roll(now_ms=NOW + 1)
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=24 * 10), lambda: {TP: plog})
    with pytest.raises(DedupeBufferTooSmallError):
        cleaner.clean_until_done(now_ms=NOW + 2)
    assert [k for _, k, _ in key_values(plog)] == [b"k%d" % i for i in range(20)]


def test_grouping_respects_segment_and_index_sizes(tmp_path: Path) -> None:
    plog = open_log(tmp_path, compact_config(segment_bytes=1000))
    for i in range(100):
        append(plog, [(b"k%d" % i, b"v" * 30)], ts=NOW + i)
    segs = plog.segments[:-1]
    uppers = [s.base_offset for s in plog.segments[1:]]
    groups = group_segments_by_size(segs, uppers, 2500, 1 << 20)
    assert [s for g in groups for s in g] == segs
    assert all(sum(s.size for s in g) <= 2500 or len(g) == 1 for g in groups)
    assert any(len(g) > 1 for g in groups)
    # index sizes bound the groups too
    tight = group_segments_by_size(segs, uppers, 1 << 30, max(s.offset_index.size_in_bytes for s in segs))
    assert all(sum(s.offset_index.size_in_bytes for s in g) <= max(s.offset_index.size_in_bytes for s in segs) for g in tight)


def test_throttler_limits_rate() -> None:
    import time

    t = Throttler(200_000)
    start = time.monotonic()
    for _ in range(10):
        t.maybe_throttle(10_000)  # 100 kB at 200 kB/s: at least ~0.5 s
    assert time.monotonic() - start >= 0.45


def test_cleaner_config_from_broker_properties() -> None:
    cfg = CleanerConfig.from_properties(
        {"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": "1048576", "log.cleaner.enable": "false"}
    )
    assert (cfg.threads, cfg.dedupe_buffer_size, cfg.enable) == (2, 1048576, False)
    assert cfg.map_memory_per_thread() == 524288
    with pytest.raises(ValueError, match=r"log\.cleaner\.io\.buffer\.load\.factor"):
        CleanerConfig.from_properties({"log.cleaner.io.buffer.load.factor": "1.5"})
