"""The cleaner reuses one offset map between cleanings (as Kafka keeps one per cleaner thread): every cleaning
starts from a cleared map, so nothing of an earlier log's keys decides what a later log keeps."""

from __future__ import annotations

from pathlib import Path

from cleanup_helpers import NOW, append, check_invariants, compact_config, key_values, open_log

from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.log import PartitionLog


def build(root: Path, prefix: bytes, shared_first: bool) -> PartitionLog:
    """A log whose keys ``prefix<i>`` are each written twice, plus key ``shared`` written once: at its start
    (``shared_first``) or at its end."""
    plog = open_log(root, compact_config())
    if shared_first:
        append(plog, [(b"shared", b"only-" + prefix)])
    for rnd in range(2):
        for i in range(0, 40, 4):
            append(plog, [(prefix + b"%d" % k, b"v%d" % rnd) for k in range(i, i + 4)])
    if not shared_first:
        append(plog, [(b"shared", b"only-" + prefix)])
    plog.roll(now_ms=NOW)
    plog.high_watermark = plog.log_end_offset
    return plog


def expected(prefix: bytes) -> set[tuple[bytes, bytes]]:
    return {(prefix + b"%d" % k, b"v1") for k in range(40)} | {(b"shared", b"only-" + prefix)}


def test_one_map_for_every_synchronous_cleaning(tmp_path: Path) -> None:
    # log "a" writes ``shared`` last (a high offset), log "b" first (offset 0): a map that kept a's entries
    # would make b's only ``shared`` record look superseded and drop it
    a = build(tmp_path / "a", b"a", shared_first=False)
    b = build(tmp_path / "b", b"b", shared_first=True)
    logs = {("a", 0): a}
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 16), lambda: logs)
    first = cleaner.clean_until_done(now_ms=NOW)
    offset_map = cleaner.offset_map()
    assert [r.tp for r in first] == [("a", 0)]
    assert offset_map.size > 0
    del logs[("a", 0)]
    logs[("b", 0)] = b
    second = cleaner.clean_until_done(now_ms=NOW)
    assert [r.tp for r in second] == [("b", 0)]
    assert cleaner.offset_map() is offset_map  # reused, not allocated again
    assert offset_map.size == second[0].map_entries  # b's keys only: the map was cleared first
    assert offset_map.get(b"a0") == -1
    assert offset_map.get(b"shared") == 0
    for plog, prefix in ((a, b"a"), (b, b"b")):
        kept = {(k, v) for _, k, v in key_values(plog)}
        assert kept == expected(prefix)
        check_invariants(plog)
        plog.close()


def test_reused_map_cleans_like_a_fresh_one(tmp_path: Path) -> None:
    logs: dict[tuple[str, int], PartitionLog] = {}
    reused = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 16), lambda: logs)
    a1 = build(tmp_path / "a1", b"a", shared_first=False)
    logs[("a", 0)] = a1
    reused.clean_until_done(now_ms=NOW)
    b1 = build(tmp_path / "b1", b"b", shared_first=True)
    logs.clear()  # the cleaner now sees only b1
    logs[("b", 0)] = b1
    reused.clean_until_done(now_ms=NOW)
    b2 = build(tmp_path / "b2", b"b", shared_first=True)
    LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 16), lambda: {("b", 0): b2}).clean_until_done(now_ms=NOW)
    assert [s.log_path.read_bytes() for s in b1.segments] == [s.log_path.read_bytes() for s in b2.segments]
    assert [s.offset_index.entries_list() for s in b1.segments] == [s.offset_index.entries_list() for s in b2.segments]
    for plog in (a1, b1, b2):
        plog.close()
