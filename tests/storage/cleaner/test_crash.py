"""Crash injection in cleaning and retention: stop at every step (an exception, or the process killed with
os._exit), reopen the directory as a restart would, and check that the log is consistent: the newest record of
every key is there, offsets ascend without duplicates, batches and indexes are valid; a later cleaning finishes
the job."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cleanup_helpers import NOW, TP, append, check_invariants, compact_config, key_values, open_log

from tidelog.storage.cleaner import FAULT_STEPS, CleanerConfig, LogCleaner
from tidelog.storage.retention import apply_retention

HERE = Path(__file__).resolve().parent


class Crash(Exception):
    pass


def build(root: Path) -> dict[bytes, tuple[int, bytes | None]]:
    """A compacted log of several segments with overwrites and tombstones; returns the newest record per key."""
    plog = open_log(root, compact_config(segment_bytes=700))
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(120):
        key = b"key-%d" % (i * 7 % 11)
        value = None if i % 13 == 5 else b"value-%d" % i
        latest[key] = (plog.log_end_offset, value)
        append(plog, [(key, value)], ts=NOW + i)
    plog.roll(now_ms=NOW + 500)
    plog.close()
    return latest


def newest(plog: object) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for o, k, v in key_values(plog):  # type: ignore[arg-type]
        assert k is not None
        out[k] = (o, v)
    return out


def leftovers(root: Path) -> list[str]:
    d = root / f"{TP[0]}-{TP[1]}"
    return sorted(p.name for p in d.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted")))


def reopen_and_check(root: Path, expected: dict[bytes, tuple[int, bytes | None]], checkpoint: dict) -> None:
    plog = open_log(root, compact_config(segment_bytes=700), clean_shutdown=False)
    assert leftovers(root) == []
    check_invariants(plog)
    assert newest(plog) == expected  # no lost newest value, nothing resurrected
    cleaner = LogCleaner(CleanerConfig(), lambda: {TP: plog}, checkpoint)
    cleaner.clean_until_done(now_ms=NOW + 1500)  # before the delete horizon (NOW + 1000 + 1000)
    check_invariants(plog)
    assert newest(plog) == expected
    assert len(key_values(plog)) == len(expected)  # fully compacted after the restart
    plog.close()


@pytest.mark.parametrize("occurrence", [1, 2])
@pytest.mark.parametrize("step", FAULT_STEPS)
def test_exception_at_each_cleaning_step(tmp_path: Path, step: str, occurrence: int) -> None:
    expected = build(tmp_path)
    plog = open_log(tmp_path, compact_config(segment_bytes=700))
    seen = 0

    def fault(name: str) -> None:
        nonlocal seen
        if name == step:
            seen += 1
            if seen == occurrence:
                raise Crash(name)

    persisted: dict = {}
    cleaner = LogCleaner(
        CleanerConfig(dedupe_buffer_size=24 * 9), lambda: {TP: plog}, None, lambda e: persisted.update(e)
    )
    cleaner.fault = fault
    try:
        cleaner.clean_until_done(now_ms=NOW + 1000)
    except Crash:
        pass
    if seen < occurrence:
        pytest.skip(f"step {step} happens fewer than {occurrence} times here")
    # the process "dies" here: the old PartitionLog is abandoned without close, as after a crash
    reopen_and_check(tmp_path, expected, dict(persisted))


KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from cleanup_helpers import TP, NOW, compact_config, open_log
    from tidelog.storage.cleaner import CleanerConfig, LogCleaner
    root, step, occurrence = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    plog = open_log(root, compact_config(segment_bytes=700))
    seen = 0
    def fault(name):
        global seen
        if name == step:
            seen += 1
            if seen == occurrence:
                os._exit(17)
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=24 * 9), lambda: {{TP: plog}})
    cleaner.fault = fault
    cleaner.clean_until_done(now_ms=NOW + 1000)
    os._exit(0)
    """
)


@pytest.mark.parametrize("step", FAULT_STEPS)
def test_process_killed_at_each_cleaning_step(tmp_path: Path, step: str) -> None:
    expected = build(tmp_path)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.format(here=str(HERE)))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), step, "2"], timeout=120)
    assert proc.returncode in (0, 17)
    reopen_and_check(tmp_path, expected, {})


def test_killed_between_cleaned_and_swap_leaves_cleaned_files(tmp_path: Path) -> None:
    """A dead process leaves .cleaned files behind (an exception would remove them): the loader drops them."""
    expected = build(tmp_path)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.format(here=str(HERE)))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), "cleaned", "1"], timeout=120)
    assert proc.returncode == 17
    assert any(n.endswith(".log.cleaned") for n in leftovers(tmp_path))
    reopen_and_check(tmp_path, expected, {})


def test_loader_drops_swap_newer_than_cleaned(tmp_path: Path) -> None:
    """Kafka's LogLoader rule: a .swap at or above the smallest .cleaned base offset is not trusted."""
    expected = build(tmp_path)
    d = tmp_path / f"{TP[0]}-{TP[1]}"
    plog = open_log(tmp_path, compact_config(segment_bytes=700))
    segs = plog.segments
    plog.close()
    # fake an unfinished operation: a garbage swap above a cleaned file
    (d / f"{segs[1].base_offset:020d}.log.cleaned").write_bytes(b"")
    (d / f"{segs[2].base_offset:020d}.log.swap").write_bytes(b"\0" * 100)
    reopen_and_check(tmp_path, expected, {})


RETENTION_KILL = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from cleanup_helpers import NOW, compact_config, open_log
    from tidelog.storage.retention import apply_retention
    root = Path(sys.argv[1])
    plog = open_log(root, compact_config(cleanup_policy=("delete",), segment_bytes=700, retention_bytes=1500,
                                         file_delete_delay_ms=60000))
    r = apply_retention(plog, NOW + 1000)
    assert r.deleted_segments > 0
    os._exit(17)  # after the rename to .deleted, before the files are removed
    """
)


def test_retention_killed_between_rename_and_delete(tmp_path: Path) -> None:
    build(tmp_path)
    before = open_log(tmp_path, compact_config(cleanup_policy=("delete",), segment_bytes=700))
    bases = [s.base_offset for s in before.segments]
    before.close()
    script = tmp_path / "kill.py"
    script.write_text(RETENTION_KILL.format(here=str(HERE)))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], timeout=120)
    assert proc.returncode == 17
    assert any(n.endswith(".log.deleted") for n in leftovers(tmp_path))
    plog = open_log(tmp_path, compact_config(cleanup_policy=("delete",), segment_bytes=700), clean_shutdown=False)
    assert leftovers(tmp_path) == []
    remaining = [s.base_offset for s in plog.segments]
    assert remaining == bases[len(bases) - len(remaining) :] and len(remaining) < len(bases)
    assert plog.log_start_offset == remaining[0]
    assert key_values(plog)[0][0] == remaining[0]
    check_invariants(plog)
    plog.close()


def test_retention_exception_keeps_log_consistent(tmp_path: Path) -> None:
    build(tmp_path)
    plog = open_log(tmp_path, compact_config(cleanup_policy=("delete",), segment_bytes=700, retention_bytes=1500))
    r = apply_retention(plog, NOW + 1000)
    assert r.deleted_segments > 0 and r.reason == "retention.bytes"
    assert all(s.size for s in plog.segments[:-1])
    # .deleted files wait for file.delete.delay.ms (0 here) and go on the next call
    assert plog.delete_expired_files(NOW + 1000) == r.deleted_segments
    assert leftovers(tmp_path) == []
    assert os.listdir(tmp_path / f"{TP[0]}-{TP[1]}")
    plog.close()
