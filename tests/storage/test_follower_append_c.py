"""The follower's append on the C path (issue 30): ``PartitionLog.append_as_follower`` with the C extension
(``check_follower_batches`` + ``append_follower_run``) leaves exactly what the Python path leaves: the same
segment files byte for byte (``.log``, ``.index``, ``.timeindex``, ``.txnindex``), the same log end offset,
leader epoch cache, producer state (idempotent and transactional producers, markers, aborted transactions) and
the same AppendInfos; bad input appends nothing on either path."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tidelog.records.batch import ControlRecordType, RecordSpec, build_batch, build_control_batch
from tidelog.records.compression import CompressionType
from tidelog.records.errors import CorruptRecordError
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.log import PartitionLog
from tidelog.storage.log import partition_log as pl
from tidelog.storage.log.partition_log import UnexpectedAppendOffsetError
from tidelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000

pytestmark = pytest.mark.skipif(pl._c_check_follower_batches is None, reason="the C extension is not built")


def _open(d: Path, config: LogConfig) -> PartitionLog:
    d.mkdir(parents=True, exist_ok=True)
    return PartitionLog.open(d, config, producer_state=ProducerStateManager(d), now_ms=NOW,
                             epoch_cache=LeaderEpochCache(d / "leader-epoch-checkpoint"))


def random_stream(rng: random.Random, n_batches: int) -> list[bytes]:
    """A leader's log as a follower fetches it: plain, idempotent, transactional (committed and aborted, two
    producers interleaved), compressed batches, offset gaps (compaction) and growing leader epochs."""
    out: list[bytes] = []
    offset, epoch = 0, rng.randint(0, 3)
    seqs: dict[int, int] = {}
    open_txn: set[int] = set()
    codecs = [CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD,
              CompressionType.LZ4, CompressionType.SNAPPY]
    ts = NOW
    for _ in range(n_batches):
        if rng.random() < 0.08:
            epoch += rng.randint(1, 2)
        if rng.random() < 0.05:
            offset += rng.randint(1, 5)  # a gap, as after compaction
        ts += rng.randint(-5, 50)
        kind = rng.random()
        if open_txn and kind < 0.2:  # end a transaction: commit or abort marker
            pid = rng.choice(sorted(open_txn))
            open_txn.discard(pid)
            marker = ControlRecordType.ABORT if rng.random() < 0.5 else ControlRecordType.COMMIT
            out.append(build_control_batch(marker, pid, 0, 3, offset, ts, partition_leader_epoch=epoch))
            offset += 1
            continue
        n = rng.randint(1, 12)
        recs = [RecordSpec(b"k%d" % rng.randint(0, 9), rng.randbytes(rng.randint(0, 300)), (), ts + i, i)
                for i in range(n)]
        kw: dict[str, object] = {}
        if kind < 0.55:
            pid = rng.choice([7, 8, 9])  # idempotent, or transactional for 8 and 9
            txn = pid != 7 and rng.random() < 0.7
            if txn:
                open_txn.add(pid)
            elif pid in open_txn:
                pid = 7
                txn = False
            kw = {"producer_id": pid, "producer_epoch": 0, "base_sequence": seqs.get(pid, 0),
                  "is_transactional": txn}
            seqs[pid] = seqs.get(pid, 0) + n
        out.append(build_batch(recs, base_offset=offset, compression=rng.choice(codecs),
                               partition_leader_epoch=epoch, **kw))  # type: ignore[arg-type]
        offset += n
    return out


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())
            if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}


def _state(lg: PartitionLog) -> tuple:
    ps = lg.producer_state
    assert ps is not None and lg.epoch_cache is not None
    producers = {pid: (e.producer_epoch, list(e.batches), e.coordinator_epoch, e.last_timestamp,
                       e.current_txn_first_offset) for pid, e in ps._producers.items()}
    return (lg.log_end_offset, lg.epoch_cache.entries(), producers,
            lg.ongoing_transactions(), lg.first_unstable_offset(), ps.map_end_offset,
            lg.collect_aborted_transactions(0, lg.log_end_offset), [s.base_offset for s in lg.segments])


@pytest.mark.parametrize("seed", range(12))
def test_c_follower_append_matches_the_python_path(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = pl._c_append_follower_run
    written = [0]

    def counting(*args: object) -> tuple[int, int, int]:
        out = run(*args)  # type: ignore[misc]
        written[0] += out[0]
        return out  # type: ignore[no-any-return]

    monkeypatch.setattr(pl, "_c_append_follower_run", counting)
    rng = random.Random(seed)
    batches = random_stream(rng, rng.randint(40, 160))
    config = LogConfig(segment_bytes=rng.choice([2_000, 6_000, 50_000, 1 << 30]),
                       index_interval_bytes=rng.choice([0, 300, 4096]))
    c_log, py_log = _open(tmp_path / "c" / "t-0", config), _open(tmp_path / "py" / "t-0", config)
    try:
        i = 0
        while i < len(batches):  # fetch answers of 1 to 20 batches
            k = rng.randint(1, 20)
            chunk = b"".join(batches[i : i + k])
            i += k
            c_infos = c_log.append_as_follower(chunk)
            py_infos = py_log._append_follower_slow(memoryview(chunk), True)
            assert c_infos == py_infos
            assert _state(c_log) == _state(py_log)
        c_log.flush()
        py_log.flush()
        assert _files(c_log.dir) == _files(py_log.dir)
        assert len(_files(c_log.dir)) >= 4
        total = sum(map(len, batches))
        if config.segment_bytes >= 50_000:  # few rolls: the C runs wrote most of it, not the Python way
            assert written[0] > total // 2, (written[0], total)
        # the reads agree too (index lookups over what the C path indexed)
        for off in range(0, c_log.log_end_offset, max(1, c_log.log_end_offset // 25)):
            assert c_log.read(off, 1 << 20).read_bytes() == py_log.read(off, 1 << 20).read_bytes()
    finally:
        c_log.close()
        py_log.close()


def test_without_infos_nothing_is_built_and_the_log_is_the_same(tmp_path: Path) -> None:
    rng = random.Random(99)
    data = b"".join(random_stream(rng, 60))
    config = LogConfig(segment_bytes=5_000, index_interval_bytes=200)
    a, b = _open(tmp_path / "a" / "t-0", config), _open(tmp_path / "b" / "t-0", config)
    try:
        assert a.append_as_follower(data, infos=False) == []
        assert len(b.append_as_follower(data)) == 60
        assert _state(a) == _state(b)
        a.flush()
        b.flush()
        assert _files(a.dir) == _files(b.dir)
    finally:
        a.close()
        b.close()


def test_a_bad_batch_anywhere_appends_nothing(tmp_path: Path) -> None:
    rng = random.Random(5)
    batches = random_stream(rng, 10)
    lg = _open(tmp_path / "t-0", LogConfig())
    try:
        good = b"".join(batches[:9])
        flipped = bytearray(batches[9])
        flipped[-1] ^= 0x01  # a bit flipped on the way: the CRC fails
        with pytest.raises(CorruptRecordError):
            lg.append_as_follower(good + bytes(flipped))
        assert lg.log_end_offset == 0 and lg.segments[0].size == 0
        with pytest.raises(CorruptRecordError):  # cut short
            lg.append_as_follower(good + batches[9][:-4])
        assert lg.log_end_offset == 0
        lg.append_as_follower(good)
        leo = lg.log_end_offset
        with pytest.raises(UnexpectedAppendOffsetError):  # below the log end offset
            lg.append_as_follower(batches[8])
        with pytest.raises(UnexpectedAppendOffsetError):  # offsets going back inside one answer
            lg.append_as_follower(batches[9] + batches[9])
        assert lg.log_end_offset == leo
    finally:
        lg.close()
