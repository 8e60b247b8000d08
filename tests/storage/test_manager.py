from __future__ import annotations

import contextlib
import logging
import os
import signal
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidelog.records.crc import crc32c
from tidelog.storage import log_checkpointing, log_loading
from tidelog.storage.checkpoints import (
    MetaProperties,
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    uuid_to_str,
    write_meta_properties,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.manager import (
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
    LogDirLockedError,
    LogExistsError,
    LogManager,
    parse_partition_dir,
)

TOPIC_ID = bytes.fromhex("11223344556677889900aabbccddeeff")
OTHER_ID = bytes.fromhex("ffeeddccbbaa00998877665544332211")
SMALL = LogConfig(segment_bytes=4096, segment_index_bytes=4096)


def _zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def make_batch(values: list[bytes], *, ts: int = 1_700_000_000_000, pid: int = -1, seq: int = -1) -> bytes:
    """A minimal uncompressed v2 batch (written here so these tests depend only on the storage layer)."""
    records = b""
    for i, value in enumerate(values):
        body = b"\x00" + _zigzag(0) + _zigzag(i) + _zigzag(-1) + _zigzag(len(value)) + value + _zigzag(0)
        records += _zigzag(len(body)) + body
    after_crc = (
        struct.pack(">hiqqqhii", 0, len(values) - 1, ts, ts, pid, 0 if pid >= 0 else -1, seq, len(values))
        + records
    )
    crc = crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc


def new_manager(dirs: list[Path], **kwargs: object) -> LogManager:
    return LogManager(dirs, SMALL, **kwargs)  # type: ignore[arg-type]


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("orders-0.0123abcd-delete") is None
    assert parse_partition_dir("orders-0.0123abcd-future") is None
    assert parse_partition_dir("orders") is None
    assert parse_partition_dir("orders-01") is None
    assert parse_partition_dir("bad topic-1") is None


def test_startup_on_empty_dir_and_shutdown_files(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d], broker_id=3)
    m.startup()
    assert (d / ".lock").exists()
    meta = read_meta_properties(d / "meta.properties")
    assert meta is not None and meta.version == 0 and meta.node_id == 3
    assert meta.cluster_id == m.cluster_id and meta.cluster_id is not None and len(meta.cluster_id) == 22
    text = (d / "meta.properties").read_text()
    assert text.startswith("#\n#") and "broker.id=3\n" in text and "version=0\n" in text
    assert m.all_logs() == {}
    assert not (d / ".kafka_cleanshutdown").exists()
    m.shutdown()
    assert (d / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":-1}'
    for name in (
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
    ):
        assert (d / name).read_text() == "0\n0\n"
    assert not list(d.glob("*.tmp"))


def test_create_append_shutdown_restart_clean(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    plog = m.create_log("orders", 0, None, TOPIC_ID)
    m.create_log("orders", 1, None, TOPIC_ID)
    assert m.create_log("orders", 0, None, TOPIC_ID) is plog  # get-or-create
    assert read_partition_metadata(d / "orders-0" / "partition.metadata") == TOPIC_ID
    assert (
        d / "orders-0" / "partition.metadata"
    ).read_text() == f"version: 0\ntopic_id: {uuid_to_str(TOPIC_ID)}"
    for i in range(5):
        plog.append_as_leader(make_batch([b"v%d" % i, b"w"]), leader_epoch=4)
    plog.high_watermark = 6
    assert plog.log_end_offset == 10
    assert read_leader_epoch_checkpoint(d / "orders-0" / "leader-epoch-checkpoint") == [(4, 0)]
    m.shutdown()

    assert (d / ".kafka_cleanshutdown").exists()
    assert read_offset_checkpoint(d / "recovery-point-offset-checkpoint") == {
        ("orders", 0): 10,
        ("orders", 1): 0,
    }
    assert read_offset_checkpoint(d / "log-start-offset-checkpoint") == {("orders", 0): 0, ("orders", 1): 0}
    assert read_offset_checkpoint(d / "replication-offset-checkpoint") == {("orders", 0): 6, ("orders", 1): 0}
    assert m.get_log("orders", 0) is None
    with pytest.raises(RuntimeError):
        m.tick(0)  # stopped

    m2 = new_manager([d])
    m2.startup()
    assert m2.had_clean_shutdown
    assert not (d / ".kafka_cleanshutdown").exists()  # removed so a crash from now on recovers
    plog2 = m2.get_log("orders", 0)
    assert plog2 is not None
    assert (plog2.log_end_offset, plog2.recovery_point, plog2.high_watermark) == (10, 10, 6)
    assert plog2.recovered_segments == 0
    assert m2.topic_id_of("orders") == TOPIC_ID
    assert m2.topic_id_of("nope") is None
    assert sorted(m2.all_logs()) == [("orders", 0), ("orders", 1)]
    m2.shutdown()


_CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[2]]
    from test_manager import make_batch, new_manager, TOPIC_ID
    m = new_manager([Path(sys.argv[1])])
    m.startup()
    plog = m.create_log("crash", 0, None, TOPIC_ID)
    for i in range(20):
        plog.append_as_leader(make_batch([b"x" * 100]), leader_epoch=2)
    m.checkpoint_recovery_points()   # recovery point 0: nothing was flushed
    plog.append_as_leader(make_batch([b"y" * 100], pid=77, seq=0), leader_epoch=2)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _run_crasher(d: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CRASHER, str(d), str(Path(__file__).parent)],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def test_killed_broker_recovers(tmp_path: Path) -> None:
    d = tmp_path / "data"
    _run_crasher(d)
    assert not (d / ".kafka_cleanshutdown").exists()
    # a torn write at the end of the active segment
    (seg,) = sorted((d / "crash-0").glob("*.log"))
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x15\x00\x00\x01\x00garbage")
    m = new_manager([d])
    m.startup()  # the lock of the killed process is gone with it
    assert not m.had_clean_shutdown
    plog = m.get_log("crash", 0)
    assert plog is not None
    assert plog.recovered_segments >= 1
    assert plog.log_end_offset == 21
    assert b"garbage" not in seg.read_bytes()  # truncated at the first invalid byte
    assert plog.producer_state is not None
    entry = plog.producer_state.last_entry(77)  # type: ignore[attr-defined]
    assert entry is not None and entry.last_data_offset == 20
    assert m.topic_id_of("crash") == TOPIC_ID
    m.shutdown()
    m2 = new_manager([d])
    m2.startup()
    assert m2.had_clean_shutdown
    m2.shutdown()


def test_recovery_is_announced_and_each_log_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As Kafka's LogManager: an unclean shutdown is named with the number of logs to recover, each loaded log
    is reported with its progress in the directory, and a clean start says why it skips recovery."""
    d = tmp_path / "data"
    _run_crasher(d)
    (d / "other-0").mkdir()  # a second, empty log in the same directory
    caplog.set_level(logging.INFO, logger="tidelog.storage.manager")
    m = new_manager([d])
    m.startup()
    msgs = [r.getMessage() for r in caplog.records]
    unclean = [x for x in msgs if x.startswith("unclean shutdown of")]
    assert unclean == [f"unclean shutdown of {d}: recovering 2 logs ({unclean[0].split('(')[1].split()[0]} "
                       "bytes to scan from their recovery points)"]
    assert int(unclean[0].split("(")[1].split()[0]) > 2000  # the crasher's 21 unflushed batches
    done = sorted(x for x in msgs if x.startswith("completed load of"))
    assert len(done) == 2
    assert done[0].startswith("completed load of crash-0 with 1 segments, log end offset 21 (")
    assert {x.rsplit("(", 1)[1].split(" completed")[0] for x in done} == {"1/2", "2/2"}
    m.shutdown()
    caplog.clear()
    m2 = new_manager([d])
    m2.startup()
    msgs = [r.getMessage() for r in caplog.records]
    assert f"skipping recovery of 2 logs from {d} since the clean shutdown file was found" in msgs
    assert not any(x.startswith("unclean shutdown") for x in msgs)
    m2.shutdown()


def test_lock_prevents_second_manager(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m1 = new_manager([d])
    m1.startup()
    m2 = new_manager([d])
    with pytest.raises(LogDirLockedError, match=r"\.lock"):
        m2.startup()
    # a separate process cannot take it either
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code, str(d / ".lock")], timeout=60).returncode == 3
    m1.shutdown()
    m2.startup()  # released by shutdown
    m2.shutdown()


def test_broker_id_mismatch_is_an_error_and_releases_lock(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d], broker_id=1)
    m.startup()
    m.shutdown()
    with pytest.raises(InconsistentBrokerIdError, match=r"broker\.id 2 doesn't match stored broker\.id 1"):
        new_manager([d], broker_id=2).startup()
    ok = new_manager([d], broker_id=1)
    ok.startup()
    ok.shutdown()


def test_cluster_id_kept_and_checked(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d], cluster_id="AAAAAAAAAAAAAAAAAAAAAQ")
    m.startup()
    m.shutdown()
    m = new_manager([d])
    m.startup()
    assert m.cluster_id == "AAAAAAAAAAAAAAAAAAAAAQ"
    m.shutdown()
    with pytest.raises(InconsistentClusterIdError):
        new_manager([d], cluster_id="BBBBBBBBBBBBBBBBBBBBBQ").startup()


def test_accepts_kraft_meta_properties(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    write_meta_properties(d / "meta.properties", MetaProperties(1, 0, "MkU3OEVBNTcwNTJENDM2Qg", TOPIC_ID))
    m = new_manager([d])
    m.startup()
    assert m.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    m.shutdown()
    assert read_meta_properties(d / "meta.properties") == MetaProperties(
        1, 0, "MkU3OEVBNTcwNTJENDM2Qg", TOPIC_ID
    )


def test_delete_log_and_leftover_delete_dirs(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    plog = m.create_log("gone", 0, None, TOPIC_ID)
    plog.append_as_leader(make_batch([b"a"]))
    m.create_log("kept", 0, None, OTHER_ID)
    assert m.delete_log("gone", 0)
    assert not m.delete_log("gone", 0)
    assert m.get_log("gone", 0) is None and m.topic_id_of("gone") is None
    assert not (d / "gone-0").exists()
    m.wait_for_deletions()
    assert not [p for p in d.iterdir() if p.name.startswith("gone-0")]
    assert read_offset_checkpoint(d / "recovery-point-offset-checkpoint") == {("kept", 0): 0}
    # the same topic can be re-created with a new id once deleted
    m.create_log("gone", 0, None, OTHER_ID)
    with pytest.raises(LogExistsError):
        m.create_log("gone", 1, None, TOPIC_ID)
    m.shutdown()

    leftover = d / "old-3.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    m = new_manager([d])
    m.startup()
    assert not leftover.exists()
    assert sorted(m.all_logs()) == [("gone", 0), ("kept", 0)]
    m.shutdown()


def test_delete_logs_writes_each_checkpoint_once_per_log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting a topic's N partitions writes each offset checkpoint of each log dir once, not N times (each
    write covers every partition: N writes of N lines was quadratic, 5.5 s for 1000 partitions)."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = new_manager(dirs)
    m.startup()
    for p in range(40):
        m.create_log("wide", p, None, TOPIC_ID)
    m.create_log("kept", 0, None, OTHER_ID)
    writes: list[Path] = []
    real = log_checkpointing.write_offset_checkpoint

    def counting(path: Path, entries: dict) -> None:
        writes.append(path)
        real(path, entries)

    monkeypatch.setattr(log_checkpointing, "write_offset_checkpoint", counting)
    found = m.delete_logs([("wide", p) for p in range(40)] + [("nothing", 0)])
    assert found == [True] * 40 + [False]
    assert len(writes) == 3 * len(dirs) and len(set(writes)) == len(writes)  # 3 checkpoints per log dir, once
    assert m.topic_id_of("wide") is None and sorted(m.all_logs()) == [("kept", 0)]
    m.wait_for_deletions()
    for d in dirs:
        assert not [x for x in d.iterdir() if x.name.startswith("wide-")]
        assert ("wide", 0) not in read_offset_checkpoint(d / "recovery-point-offset-checkpoint")
    m.shutdown()


def test_delete_dir_name_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    m.create_log("t", 0, None, TOPIC_ID)
    renames: list[str] = []
    real_rename = os.rename

    def spy(src: object, dst: object) -> None:
        renames.append(Path(str(dst)).name)
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", spy)
    m.delete_log("t", 0)
    monkeypatch.undo()
    (name,) = renames
    prefix, _, rest = name.partition(".")
    assert prefix == "t-0" and rest.endswith("-delete") and len(rest) == 32 + len("-delete")
    int(rest[:32], 16)
    m.shutdown()


def test_topic_configs_mapping_and_callable(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    m.create_log("a", 0, None, TOPIC_ID)
    m.create_log("b", 0, None, OTHER_ID)
    m.shutdown()
    special = LogConfig(segment_bytes=8192, retention_ms=1000)
    m = new_manager([d])
    m.startup({"a": special})
    assert m.get_log("a", 0).config == special  # type: ignore[union-attr]
    assert m.get_log("b", 0).config == SMALL  # type: ignore[union-attr]
    m.shutdown()
    m = new_manager([d])
    m.startup(lambda topic: special if topic == "b" else None)
    assert m.get_log("b", 0).config == special  # type: ignore[union-attr]
    assert m.get_log("a", 0).config == SMALL  # type: ignore[union-attr]
    m.shutdown()


def test_multiple_log_dirs_spread_and_reload(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = new_manager(dirs)
    m.startup()
    for p in range(4):
        m.create_log("t", p, None, TOPIC_ID)
    counts = [len([c for c in d.iterdir() if c.is_dir()]) for d in dirs]
    assert counts == [2, 2]
    cluster = m.cluster_id
    m.shutdown()
    for d in dirs:
        meta = read_meta_properties(d / "meta.properties")
        assert meta is not None and meta.cluster_id == cluster
        assert (d / ".kafka_cleanshutdown").exists()
        assert len(read_offset_checkpoint(d / "recovery-point-offset-checkpoint")) == 2
    m = new_manager(dirs, recovery_threads=1)
    m.startup()
    assert sorted(m.all_logs()) == [("t", p) for p in range(4)]
    assert {m.log_dir_of("t", p) for p in range(4)} == {d.absolute() for d in dirs}
    m.shutdown()


def test_tick_flushes_and_checkpoints(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = LogManager(
        [d],
        LogConfig(segment_bytes=4096, segment_index_bytes=4096, flush_ms=100),
        recovery_point_checkpoint_interval_ms=1000,
    )
    m.startup()
    plog = m.create_log("t", 0, None, TOPIC_ID)
    plog.append_as_leader(make_batch([b"a", b"b", b"c"]))
    assert plog.recovery_point == 0
    now = plog.last_flush_time
    m.tick(now)  # starts the checkpoint intervals; flush not due yet
    assert plog.recovery_point == 0
    m.tick(now + 150)  # flush.ms elapsed
    assert plog.recovery_point == 3
    assert read_offset_checkpoint(d / "recovery-point-offset-checkpoint") == {}
    m.tick(now + 1000)  # checkpoint interval elapsed
    assert read_offset_checkpoint(d / "recovery-point-offset-checkpoint") == {("t", 0): 3}
    m.shutdown()


def test_corrupt_recovery_checkpoint_means_full_recovery(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    m.create_log("t", 0, None, TOPIC_ID).append_as_leader(make_batch([b"a"]))
    m.shutdown()
    (d / ".kafka_cleanshutdown").unlink()
    (d / "recovery-point-offset-checkpoint").write_text("0\n5\nt 0 1\n")
    m = new_manager([d])
    m.startup()
    plog = m.get_log("t", 0)
    assert plog is not None and plog.recovered_segments >= 1 and plog.log_end_offset == 1
    m.shutdown()


@pytest.mark.parametrize("garbage", ["xx", "0\n2\n3 0\n", "0\n1\n-4 7\n"])
def test_corrupt_leader_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path, garbage: str) -> None:
    """A garbled ``leader-epoch-checkpoint`` (after a clean shutdown even) does not stop the log from loading:
    the epochs are assigned again from the batches' partitionLeaderEpoch by a full recovery."""
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    plog = m.create_log("t", 0, None, TOPIC_ID)
    for epoch, n in ((0, 3), (2, 2), (5, 4)):
        for _ in range(n):
            plog.append_as_leader(make_batch([b"v"]), leader_epoch=epoch)
    want = plog.epoch_cache.entries()
    assert want == [(0, 0), (2, 3), (5, 5)]
    m.shutdown()
    checkpoint = d / "t-0" / "leader-epoch-checkpoint"
    checkpoint.write_text(garbage)
    m = new_manager([d])
    m.startup()
    plog = m.get_log("t", 0)
    assert plog is not None and plog.log_end_offset == 9 and plog.recovered_segments >= 1
    assert plog.epoch_cache.entries() == want
    assert checkpoint.read_text() == "0\n3\n0 0\n2 3\n5 5\n"  # written again, in Kafka's format
    m.shutdown()


def test_unreadable_partition_metadata_is_written_again(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    m.create_log("t", 0, None, TOPIC_ID).append_as_leader(make_batch([b"a"]))
    m.shutdown()
    meta = d / "t-0" / "partition.metadata"
    good = meta.read_text()
    meta.write_text("version: 0\n")
    m = new_manager([d])
    m.startup()  # the log loads; its topic id is unknown until the broker hands it over
    assert m.get_log("t", 0).log_end_offset == 1 and m.topic_id_of("t") is None  # type: ignore[union-attr]
    assert m.ensure_partition_metadata("t", 0, TOPIC_ID) and meta.read_text() == good
    assert m.topic_id_of("t") == TOPIC_ID
    assert not m.ensure_partition_metadata("t", 0, b"\x01" * 16)  # a readable file naming another id stays
    assert meta.read_text() == good
    m.shutdown()


def test_recovery_reports_progress_through_the_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Storage reports a long recovery's progress to the RecoveryProgress it was given (``tidelog serve``: a rich
    bar), once with the bytes to scan, then ``advance`` as the logs are scanned; without one it recovers alike."""
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    plog = m.create_log("t", 0, None, TOPIC_ID)
    for _ in range(10):
        plog.append_as_leader(make_batch([b"z" * 200]))
    m.shutdown()
    (d / ".kafka_cleanshutdown").unlink()
    totals: list[int] = []
    advanced: list[int] = []
    closed: list[bool] = []

    @contextlib.contextmanager
    def progress(total_bytes: int) -> Iterator[Callable[[int], None]]:
        totals.append(total_bytes)
        yield advanced.append
        closed.append(True)

    monkeypatch.setattr(log_loading, "PROGRESS_MIN_BYTES", 1)
    m = LogManager([d], SMALL, recovery_progress=progress)
    m.startup()
    assert len(totals) == 1 and totals[0] > 2000 and closed == [True]
    assert 0 < sum(advanced) <= totals[0]
    assert m.get_log("t", 0).log_end_offset == 10  # type: ignore[union-attr]
    m.shutdown()


def test_recovery_below_the_threshold_reports_nothing(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    m.create_log("t", 0, None, TOPIC_ID).append_as_leader(make_batch([b"z"]))
    m.shutdown()
    (d / ".kafka_cleanshutdown").unlink()
    calls: list[int] = []

    def progress(total_bytes: int) -> contextlib.nullcontext[Callable[[int], None]]:
        calls.append(total_bytes)
        return contextlib.nullcontext(lambda n: None)

    m = LogManager([d], SMALL, recovery_progress=progress)
    m.startup()  # a few hundred bytes, far below PROGRESS_MIN_BYTES
    assert calls == [] and m.get_log("t", 0).log_end_offset == 1  # type: ignore[union-attr]
    m.shutdown()


def test_rejects_bad_topics(tmp_path: Path) -> None:
    m = new_manager([tmp_path / "data"])
    m.startup()
    for bad in ("", ".", "..", "a b", "x" * 250, "é"):
        with pytest.raises(ValueError):
            m.create_log(bad, 0, None, TOPIC_ID)
    with pytest.raises(ValueError):
        m.create_log("ok", -1, None, TOPIC_ID)
    with pytest.raises(ValueError):
        m.create_log("ok", 0, None, bytes(16))
    m.shutdown()


def test_failed_close_leaves_no_clean_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "data"
    m = new_manager([d])
    m.startup()
    bad = m.create_log("bad", 0, None, TOPIC_ID)
    m.create_log("good", 0, None, OTHER_ID).append_as_leader(make_batch([b"a", b"b"]))
    real_close = bad.close

    def failing_close() -> None:
        real_close()
        raise OSError("disk error while closing")

    monkeypatch.setattr(bad, "close", failing_close)
    m.shutdown()
    assert not (d / ".kafka_cleanshutdown").exists()  # the next start must recover
    # the recovery points were taken after each log's successful flush, so they are still valid
    assert read_offset_checkpoint(d / "recovery-point-offset-checkpoint") == {("bad", 0): 0, ("good", 0): 2}
    m = new_manager([d])
    m.startup()  # and the lock was released
    assert not m.had_clean_shutdown
    m.shutdown()
