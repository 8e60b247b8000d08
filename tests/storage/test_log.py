from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records.batch import build_batch, decode_records
from tidelog.records.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tidelog.records.header import LOG_APPEND_TIME, BatchHeader, iter_batch_headers, validate_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.errors import InvalidTimestampError, OffsetOutOfRangeError, OutOfOrderSequenceError
from tidelog.storage.log import PartitionLog, UnexpectedAppendOffsetError, parse_topic_partition
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.segment import LogSegment

NOW = 1_700_000_000_000


def records(n: int, ts: int = NOW, size: int = 10) -> list[tuple[bytes, bytes, tuple[()], int]]:
    return [(b"k%d" % i, b"v" * size, (), ts + i) for i in range(n)]


def open_log(path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "topic-with-dash-0", LogConfig(**config), now_ms=NOW)  # type: ignore[arg-type]


def fill(lg: PartitionLog, batches: int, per: int = 2, ts: int = NOW) -> list[tuple[int, int, int]]:
    """Append and return (first, last, max_ts) per batch."""
    out = []
    for i in range(batches):
        info = lg.append_as_leader(build_batch(records(per, ts + 10 * i)), now_ms=ts + 10 * i)
        out.append((info.first_offset, info.last_offset, info.max_timestamp))
    return out


def all_headers(lg: PartitionLog) -> list[BatchHeader]:
    data = lg.read(lg.log_start_offset, 1 << 30).read_bytes()
    return [h for _, h in iter_batch_headers(data)]


def test_dir_name_parsing(tmp_path: Path) -> None:
    assert parse_topic_partition("my-topic-12") == ("my-topic", 12)
    assert parse_topic_partition("t-0.0123456789abcdef0123456789abcdef-delete") == ("t", 0)
    with pytest.raises(ValueError):
        parse_topic_partition("nopartition")
    lg = open_log(tmp_path)
    assert (lg.topic, lg.partition) == ("topic-with-dash", 0)
    assert [s.base_offset for s in lg.segments] == [0]
    lg.close()


def test_append_assigns_offsets_and_stamps_epoch(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    data = build_batch(records(3), base_offset=777)
    info = lg.append_as_leader(data, leader_epoch=5, now_ms=NOW)
    assert (info.first_offset, info.last_offset, info.record_count, info.size) == (0, 2, 3, len(data))
    assert info.log_append_time == -1 and info.max_timestamp == NOW + 2 and not info.duplicate
    info = lg.append_as_leader(build_batch(records(2)), leader_epoch=5, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert lg.log_end_offset == 5
    raw = lg.read(0, 1 << 20).read_bytes()
    headers = [h for _, h in iter_batch_headers(raw)]  # CRCs still valid after stamping
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 5), (3, 5)]
    assert [r.offset for r in decode_records(raw)] == [0, 1, 2]
    lg.close()


def test_log_append_time_rewrites_timestamp_and_crc(tmp_path: Path) -> None:
    lg = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = lg.append_as_leader(build_batch(records(2, ts=5)), now_ms=NOW + 123)
    assert info.log_append_time == NOW + 123 and info.max_timestamp == NOW + 123
    raw = lg.read(0, 1 << 20).read_bytes()
    h = validate_batch(raw)
    assert h.timestamp_type == LOG_APPEND_TIME and h.max_timestamp == NOW + 123
    assert [r.timestamp for r in decode_records(raw)] == [NOW + 123, NOW + 123]
    lg.close()


def test_rejections_leave_nothing_on_disk(tmp_path: Path) -> None:
    lg = open_log(tmp_path, max_message_bytes=300, message_timestamp_before_max_ms=1000)
    good = build_batch(records(1))
    with pytest.raises(RecordTooLargeError):
        lg.append_as_leader(build_batch(records(1, size=400)), now_ms=NOW)
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(good + good, now_ms=NOW)  # exactly one batch per append
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(good[:-1] + bytes([good[-1] ^ 1]), now_ms=NOW)
    with pytest.raises(InvalidTimestampError):
        lg.append_as_leader(build_batch(records(1, ts=NOW - 1001)), now_ms=NOW)
    with pytest.raises(InvalidTimestampError):
        lg.append_as_leader(build_batch(records(1, ts=NOW + 3600001)), now_ms=NOW)
    control = build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), NOW)],
        is_control=True,
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(control, now_ms=NOW, reject_control_batches=True)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0
    lg.append_as_leader(build_batch(records(1, ts=NOW - 1000)), now_ms=NOW)
    lg.append_as_leader(control, now_ms=NOW)  # from the coordinator
    assert lg.log_end_offset == 2
    lg.close()


def test_producer_state_duplicates_and_sequence_errors(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ps = ProducerStateManager(d)
    lg = PartitionLog.open(d, LogConfig(), producer_state=ps, now_ms=NOW)
    b0 = build_batch(records(2), producer_id=7, producer_epoch=0, base_sequence=0)
    first = lg.append_as_leader(b0, now_ms=NOW)
    lg.append_as_leader(build_batch(records(1)), now_ms=NOW)
    dup = lg.append_as_leader(b0, now_ms=NOW)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (first.first_offset, first.last_offset)
    assert lg.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        lg.append_as_leader(
            build_batch(records(1), producer_id=7, producer_epoch=0, base_sequence=5), now_ms=NOW
        )
    lg.append_as_leader(build_batch(records(1), producer_id=7, producer_epoch=0, base_sequence=2), now_ms=NOW)
    lg.close()
    # reopen (unclean) rebuilds producer state from the log: the duplicate is still detected
    ps2 = ProducerStateManager(d)
    lg2 = PartitionLog.open(d, LogConfig(), producer_state=ps2, now_ms=NOW)
    again = lg2.append_as_leader(b0, now_ms=NOW)
    assert again.duplicate and again.first_offset == 0
    lg2.close()


@pytest.mark.parametrize("mode", ["c", "python"])
def test_a_corrupt_idempotent_batch_reports_its_corruption_before_its_producer_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """An idempotent batch checked late (CRC and record walk after the write) still gets Kafka's precedence:
    corrupt before duplicate, corrupt before out-of-order; a corrupt next-in-sequence batch leaves nothing, and
    the producer state does not move for it."""
    import tidelog.storage.log.validator as validator_module
    import tidelog.storage.segment as segment_module
    from tidelog.records.batch import check_record_structure
    from tidelog.records.header import validate_batch_tuple

    if mode == "python":
        monkeypatch.setattr(validator_module, "_c_validate_single_batch", None)
        monkeypatch.setattr(segment_module, "_c_write_stamped", None)
    d = tmp_path / "t-0"
    lg = PartitionLog.open(d, LogConfig(), producer_state=ProducerStateManager(d), now_ms=NOW)

    def idem(seq: int, corrupt: str = "") -> bytes:
        data = build_batch(records(2, size=300), producer_id=9, producer_epoch=0, base_sequence=seq)
        if corrupt == "crc":
            return data[:-5] + bytes([data[-5] ^ 0x08]) + data[-4:]
        return _broken_walk(data) if corrupt == "walk" else data

    b0 = idem(0)
    lg.append_as_leader(b0, now_ms=NOW)
    size = lg.size_in_bytes
    for corrupt in ("crc", "walk"):
        for seq in (0, 7, 2):  # a duplicate, out of order, the next one
            data = idem(seq, corrupt)
            with pytest.raises((CorruptRecordError, InvalidRecordError)) as expected:
                check_record_structure(data, 0, validate_batch_tuple(data, check_crc=True))
            with pytest.raises((CorruptRecordError, InvalidRecordError)) as raised:
                lg.append_as_leader(data, now_ms=NOW)
            assert (type(raised.value), str(raised.value)) == (type(expected.value), str(expected.value))
            assert (lg.log_end_offset, lg.size_in_bytes, os.path.getsize(lg.active_segment.log_path)) == (2, size, size)
    assert lg.append_as_leader(b0, now_ms=NOW).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        lg.append_as_leader(idem(7), now_ms=NOW)
    info = lg.append_as_leader(idem(2), now_ms=NOW)  # the corrupt seq 2 batches left the sequence where it was
    assert (info.first_offset, info.duplicate, lg.log_end_offset) == (2, False, 4)
    lg.close()


def test_epoch_cache_assign_and_truncate(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    cache = LeaderEpochCache(d / "leader-epoch-checkpoint")
    lg = PartitionLog.open(d, LogConfig(), epoch_cache=cache, now_ms=NOW)
    lg.append_as_leader(build_batch(records(2)), leader_epoch=1, now_ms=NOW)
    lg.append_as_leader(build_batch(records(2)), leader_epoch=1, now_ms=NOW)
    lg.append_as_leader(build_batch(records(2)), leader_epoch=3, now_ms=NOW)
    assert cache.entries() == [(1, 0), (3, 4)]
    lg.truncate_to(4)
    assert cache.entries() == [(1, 0)]
    lg.close()
    # a recovery rebuilds the cache from the batches' partitionLeaderEpoch
    (tmp_path / "elsewhere").mkdir()
    cache2 = LeaderEpochCache(tmp_path / "elsewhere" / "leader-epoch-checkpoint")
    lg2 = PartitionLog.open(d, LogConfig(), epoch_cache=cache2, now_ms=NOW)
    assert cache2.entries() == [(1, 0)]
    lg2.close()


def test_roll_on_segment_bytes_and_segment_ms(tmp_path: Path) -> None:
    data = build_batch(records(1))
    lg = open_log(tmp_path, segment_bytes=3 * len(data))
    for _ in range(7):
        lg.append_as_leader(build_batch(records(1)), now_ms=NOW)
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    assert all(s.size <= 3 * len(data) for s in lg.segments)
    lg.wait_for_background_flushes()
    assert lg.recovery_point == 6  # the roll flushed the old segments off the caller's thread
    names = sorted(p.name for p in lg.dir.iterdir())
    assert "00000000000000000003.log" in names and "00000000000000000006.index" in names
    # closed segments have trimmed indexes
    assert all((s.offset_index.length == s.offset_index.size_in_bytes) for s in lg.segments[:-1])
    lg.close()

    lg = open_log(tmp_path / "b", segment_ms=1000)
    lg.append_as_leader(build_batch(records(1, ts=NOW)), now_ms=NOW)
    lg.append_as_leader(build_batch(records(1, ts=NOW + 1000)), now_ms=NOW + 1000)
    assert len(lg.segments) == 1
    lg.append_as_leader(build_batch(records(1, ts=NOW + 1001)), now_ms=NOW + 1001)
    assert [s.base_offset for s in lg.segments] == [0, 2]
    lg.close()


def test_roll_on_full_index_takes_producer_snapshot(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ps = ProducerStateManager(d)
    lg = PartitionLog.open(
        d, LogConfig(segment_index_bytes=24, index_interval_bytes=0), producer_state=ps, now_ms=NOW
    )
    for i in range(6):
        lg.append_as_leader(build_batch(records(1, ts=NOW + i)), now_ms=NOW)
    # time index of 2 slots is full after one entry: every segment holds two batches
    assert [s.base_offset for s in lg.segments] == [0, 2, 4]
    assert ps.snapshot_offsets() == [2, 4]
    lg.close()


def test_read_offsets_and_limits(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=1000)
    batches = fill(lg, 30, per=3)
    assert len(lg.segments) > 3
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(lg.log_end_offset + 1, 100)
    empty = lg.read(lg.log_end_offset, 100)
    assert empty.regions == [] and empty.size == 0 and empty.log_end_offset == 90
    one = lg.read(4, 1)
    assert one.first_batch_offset == 3 and len(one.regions) == 1
    assert lg.read(4, 1, min_one_batch=False).size == 0
    # whole log across segments
    whole = lg.read(0, 1 << 30)
    assert len(whole.regions) == len(lg.segments)
    assert [h.base_offset for _, h in iter_batch_headers(whole.read_bytes())] == [b[0] for b in batches]
    # bounded by the high watermark at batch granularity
    lg.high_watermark = 31
    assert lg.high_watermark == 31
    capped = lg.read(0, 1 << 30, max_offset=lg.high_watermark)
    assert [h.last_offset for _, h in iter_batch_headers(capped.read_bytes())][-1] == 29
    assert lg.read(31, 100, max_offset=31).size == 0
    lg.high_watermark = 10**9
    assert lg.high_watermark == lg.log_end_offset
    lg.close()


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=25),
    start=st.integers(0, 100),
    max_bytes=st.integers(0, 3000),
    min_one=st.booleans(),
)
def test_read_matches_model(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], start: int, max_bytes: int, min_one: bool
) -> None:
    lg = PartitionLog.open(tmp_path_factory.mktemp("r") / "t-0", LogConfig(segment_bytes=700), now_ms=NOW)
    model: list[tuple[int, int, int]] = []  # (first, last, size)
    for n in sizes:
        info = lg.append_as_leader(build_batch(records(n)), now_ms=NOW)
        model.append((info.first_offset, info.last_offset, info.size))
    start = min(start, lg.log_end_offset)
    got = lg.read(start, max_bytes, min_one_batch=min_one)
    expected: list[int] = []
    total = 0
    for first, last, size in model:
        if last < start:
            continue
        if total + size > max_bytes and not (min_one and not expected):
            break
        expected.append(first)
        total += size
    got_firsts = [h.base_offset for _, h in iter_batch_headers(got.read_bytes())]
    # regions stop at segment ends only when the budget allows continuing; the model allows it too
    assert got_firsts == expected
    assert got.size == total
    lg.close()


@settings(max_examples=25, deadline=None)
@given(timestamps=st.lists(st.integers(0, 1000), min_size=1, max_size=30), target=st.integers(-10, 1100))
def test_find_offset_by_timestamp_matches_model(
    tmp_path_factory: pytest.TempPathFactory, timestamps: list[int], target: int
) -> None:
    lg = PartitionLog.open(
        tmp_path_factory.mktemp("ts") / "t-0",
        LogConfig(
            segment_bytes=400,
            index_interval_bytes=50,
            message_timestamp_after_max_ms=10**13,
            message_timestamp_before_max_ms=10**13,
        ),
        now_ms=NOW,
    )
    recs: list[tuple[int, int]] = []
    for i in range(0, len(timestamps), 2):
        chunk = timestamps[i : i + 2]
        info = lg.append_as_leader(build_batch([(b"k", b"v", (), t) for t in chunk]), now_ms=NOW)
        recs.extend((info.first_offset + j, t) for j, t in enumerate(chunk))
    # Kafka's answer: the first batch whose max timestamp >= target, then its first record with ts >= target
    by_batch: dict[int, list[tuple[int, int]]] = {}
    for off, t in recs:
        by_batch.setdefault(off // 2, []).append((off, t))
    expected = None
    for _, rs in sorted(by_batch.items()):
        if max(t for _, t in rs) >= target:
            expected = next((o, t) for o, t in rs if t >= target)
            break
    assert lg.find_offset_by_timestamp(target) == expected
    best = max(t for _, t in recs)
    assert lg.latest_timestamp() == best
    assert lg.offset_of_max_timestamp() == next((o, t) for o, t in recs if t == best)
    lg.close()


def test_truncate_to_and_fully(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=600)
    fill(lg, 20, per=2)
    n_segments = len(lg.segments)
    lg.high_watermark = 40
    lg.flush()
    assert lg.recovery_point == 40
    assert not lg.truncate_to(40)
    assert lg.truncate_to(17)  # inside batch [16, 17]: cut at the batch boundary
    assert lg.log_end_offset == 16 and lg.high_watermark == 16 and lg.recovery_point == 16
    assert len(lg.segments) < n_segments
    assert all_headers(lg)[-1].last_offset == 15
    info = lg.append_as_leader(build_batch(records(2)), now_ms=NOW)
    assert info.first_offset == 16
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset, len(lg.segments)) == (100, 100, 1)
    assert [p.name for p in sorted(lg.dir.glob("*.log"))] == ["00000000000000000100.log"]
    assert lg.append_as_leader(build_batch(records(1)), now_ms=NOW).first_offset == 100
    lg.close()


def test_follower_append(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=500)
    data = b"".join(build_batch(records(2), base_offset=o, partition_leader_epoch=4) for o in (0, 2, 10, 12))
    infos = lg.append_as_follower(data)
    assert [i.first_offset for i in infos] == [0, 2, 10, 12]
    assert lg.log_end_offset == 14
    with pytest.raises(UnexpectedAppendOffsetError):
        lg.append_as_follower(build_batch(records(1), base_offset=13))
    with pytest.raises(CorruptRecordError):
        lg.append_as_follower(build_batch(records(1), base_offset=14)[:-3])
    assert lg.log_end_offset == 14
    assert lg.read(5, 1000).first_batch_offset == 10  # an offset gap (as after compaction)
    lg.close()


def test_log_start_offset_and_segment_deletion(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=600, file_delete_delay_ms=1000)
    fill(lg, 20, per=2)
    bases = [s.base_offset for s in lg.segments]
    lg.high_watermark = 20
    with pytest.raises(OffsetOutOfRangeError):
        lg.maybe_increment_log_start_offset(21)
    assert lg.maybe_increment_log_start_offset(5)
    assert not lg.maybe_increment_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(4, 100)
    assert lg.read(5, 1).first_batch_offset == 4  # the batch holding offset 5
    removed = lg.delete_segments_before(10**9, now_ms=NOW)  # capped at the high watermark
    assert removed and all(
        (bases + [lg.log_end_offset])[bases.index(s.base_offset) + 1] <= 20 for s in removed
    )
    assert lg.segments[0].base_offset <= 20 and lg.log_start_offset == lg.segments[0].base_offset
    assert list(lg.dir.glob("*.deleted"))
    assert lg.delete_expired_files(NOW + 999) == 0
    assert lg.delete_expired_files(NOW + 1000) == len(removed)
    assert not list(lg.dir.glob("*.deleted"))
    lg.close()


def test_flush_policies(tmp_path: Path) -> None:
    lg = open_log(tmp_path, flush_messages=5)
    fill(lg, 2, per=2)
    assert lg.recovery_point == 0
    fill(lg, 1, per=2)
    assert lg.recovery_point == 6  # 6 unflushed >= flush.messages
    lg.update_config(LogConfig(flush_ms=100))
    fill(lg, 1, per=1)
    before = lg.last_flush_time
    assert not lg.flush_if_due(before + 99)
    assert lg.flush_if_due(before + 100)
    assert lg.recovery_point == 7
    lg.close()


def test_clean_reopen_skips_recovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = open_log(tmp_path, segment_bytes=600)
    fill(lg, 20)
    leo = lg.log_end_offset
    lg.close()
    calls: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment, *args: object, **kwargs: object) -> int:
        calls.append(self.base_offset)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", spy)
    lg = PartitionLog.open(tmp_path / "topic-with-dash-0", LogConfig(segment_bytes=600), clean_shutdown=True)
    assert calls == [] and lg.log_end_offset == leo and lg.recovery_point == leo
    lg.close()
    progress: list[tuple[int, int]] = []
    lg = PartitionLog.open(
        tmp_path / "topic-with-dash-0",
        LogConfig(segment_bytes=600),
        recovery_point=leo,
        progress=lambda done, total: progress.append((done, total)),
    )
    # unclean: only the segment holding the recovery point onwards is scanned
    assert calls == [lg.segments[-1].base_offset]
    assert progress[-1][0] == progress[-1][1] == lg.segments[-1].size
    lg.close()


def test_coordinator_end_txn_marker_without_sequence_is_accepted(tmp_path: Path) -> None:
    # Kafka allows baseSequence -1 on control batches: the coordinator's markers carry no sequence
    from tidelog.records.batch import ControlRecordType, build_control_batch

    d = tmp_path / "t-0"
    lg = PartitionLog.open(d, LogConfig(), producer_state=ProducerStateManager(d), now_ms=NOW)
    data = build_batch(records(1), producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    lg.append_as_leader(data, now_ms=NOW)
    marker = build_control_batch(ControlRecordType.COMMIT, 9, 0, 3, 0, NOW)
    assert BatchHeader.parse(marker).base_sequence == -1
    with pytest.raises(InvalidRecordError, match="control records"):
        lg.append_as_leader(marker, now_ms=NOW, reject_control_batches=True)
    info = lg.append_as_leader(marker, now_ms=NOW, reject_control_batches=False)
    assert (info.first_offset, lg.log_end_offset) == (1, 2)
    # a data batch with a producer id still needs a base sequence
    with pytest.raises(InvalidRecordError, match="without a base sequence"):
        lg.append_as_leader(build_batch(records(1), producer_id=9, producer_epoch=0, base_sequence=-1), now_ms=NOW)
    assert lg.log_end_offset == 2
    lg.close()


def test_append_stamps_without_touching_the_callers_buffer(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    first = build_batch(records(3))
    frame = bytearray(b"request-frame:" + first + b":tail")
    view = memoryview(frame)[14 : 14 + len(first)]  # the broker passes a slice of its request frame
    before = bytes(frame)
    lg.append_as_leader(build_batch(records(2)), leader_epoch=4, now_ms=NOW)
    info = lg.append_as_leader(view, leader_epoch=4, now_ms=NOW)
    assert bytes(frame) == before  # stamped on the way to the file, not in the caller's memory
    assert (info.first_offset, info.last_offset, info.size) == (2, 4, len(first))
    region = lg.read(2, 10**6).regions[0]
    on_disk = region.read_bytes()
    header = validate_batch(on_disk)  # CRC still valid
    assert (header.base_offset, header.partition_leader_epoch) == (2, 4)
    assert on_disk[16:] == first[16:]
    lg.close()


def test_rejected_batch_crc_leaves_nothing_and_log_append_time_copy_path(tmp_path: Path) -> None:
    lg = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    good = build_batch(records(2, ts=5))
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(bytes(bad), now_ms=NOW)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0
    info = lg.append_as_leader(memoryview(good), now_ms=NOW + 7)
    assert info.log_append_time == NOW + 7 and info.max_timestamp == NOW + 7
    h = validate_batch(lg.read(0, 10**6).read_bytes())
    assert h.timestamp_type == LOG_APPEND_TIME and h.max_timestamp == NOW + 7
    lg.close()


@pytest.mark.parametrize("compression", [0, 1])
def test_find_offset_by_timestamp_inside_batches(tmp_path: Path, compression: int) -> None:
    from tidelog.records.compression import CompressionType

    lg = open_log(tmp_path)
    # timestamps inside a batch need not increase: the first record >= the target is the answer
    lg.append_as_leader(
        build_batch(
            [(b"k", b"v" * i, (), NOW + t) for i, t in enumerate([5, 1, 9, 3, 7])],
            compression=CompressionType(compression),
        ),
        now_ms=NOW,
    )
    lg.append_as_leader(build_batch([(None, b"x", (), NOW + 20), (b"k", None, (), NOW + 11)]), now_ms=NOW)
    assert lg.find_offset_by_timestamp(NOW) == (0, NOW + 5)
    assert lg.find_offset_by_timestamp(NOW + 6) == (2, NOW + 9)
    assert lg.find_offset_by_timestamp(NOW + 10) == (5, NOW + 20)
    assert lg.find_offset_by_timestamp(NOW + 21) is None
    assert lg.offset_of_max_timestamp() == (5, NOW + 20)
    lg.close()
    lat = open_log(tmp_path / "lat", message_timestamp_type="LogAppendTime")
    lat.append_as_leader(build_batch(records(3, ts=5)), now_ms=NOW + 50)
    assert lat.find_offset_by_timestamp(NOW) == (0, NOW + 50)
    lat.close()


def test_large_batch_crc_checked_after_write_leaves_nothing(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=500_000)
    big = build_batch([(b"k", b"v" * 100_000, (), NOW + i) for i in range(3)])
    corrupt = bytearray(big)
    corrupt[len(corrupt) // 2] ^= 0x01
    lg.append_as_leader(build_batch(records(2)), now_ms=NOW)
    size_before = lg.size_in_bytes
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(memoryview(corrupt), now_ms=NOW)
    seg = lg.active_segment
    assert lg.log_end_offset == 2 and lg.size_in_bytes == size_before == os.path.getsize(seg.log_path)
    assert seg.offset_index.entries == 0 and seg.max_timestamp_so_far == NOW + 1
    # a corrupt batch with an out-of-range timestamp still reports the corruption (check-first precedence)
    stale = bytearray(build_batch([(b"k", b"v" * 300_000, (), NOW - 10**9)]))
    stale[-1] ^= 0x01
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(bytes(stale), now_ms=NOW)
    info = lg.append_as_leader(big, now_ms=NOW)
    assert (info.first_offset, lg.log_end_offset) == (2, 5)
    # the next big batch needs a roll: a corrupt one must not roll the log
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(bytes(corrupt), now_ms=NOW)
    assert len(lg.segments) == 1 and lg.log_end_offset == 5
    lg.append_as_leader(big, now_ms=NOW)
    assert len(lg.segments) == 2 and lg.log_end_offset == 8
    raw = lg.read(0, 10**7).read_bytes()
    assert [h.base_offset for _, h in iter_batch_headers(raw)] == [0, 2, 5]  # validated, CRCs intact
    lg.close()
    reopened = PartitionLog.open(tmp_path / "topic-with-dash-0", LogConfig(), recovery_point=0, now_ms=NOW)
    assert reopened.log_end_offset == 8
    reopened.close()


@pytest.mark.parametrize("size", [200_000, 1_000_000])  # CRC before / after the write (C writer when built)
def test_a_corrupt_batch_gets_the_check_first_error_message(tmp_path: Path, size: int) -> None:
    lg = open_log(tmp_path)
    lg.append_as_leader(build_batch(records(2)), now_ms=NOW)
    corrupt = bytearray(build_batch([(b"k", b"v" * size, (), NOW)]))
    corrupt[-7] ^= 0x40
    with pytest.raises(CorruptRecordError) as expected:
        validate_batch(bytes(corrupt))
    size_before = lg.size_in_bytes
    for buf in (corrupt, bytes(corrupt), memoryview(corrupt)):
        with pytest.raises(CorruptRecordError) as got:
            lg.append_as_leader(buf, now_ms=NOW)
        assert str(got.value) == str(expected.value)
        assert lg.log_end_offset == 2 and lg.size_in_bytes == size_before
        assert os.path.getsize(lg.active_segment.log_path) == size_before
    corrupt[-7] ^= 0x40
    assert lg.append_as_leader(corrupt, now_ms=NOW).first_offset == 2
    lg.close()


def _broken_walk(batch: bytes) -> bytes:
    """``batch`` with its first record's length varint changed and the CRC recomputed: only the walk fails."""
    import struct

    from tidelog.records.crc import crc32c

    out = bytearray(batch)
    out[61] ^= 0x02
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize("mode", ["c-fast", "c", "c-validator-python-writer", "python"])
def test_late_checks_leave_nothing_and_report_the_check_first_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The CRC and the record walk, done by the C writer after its write (or before it without C): a bad batch
    leaves no byte, no offset and no roll behind, and its error is the one the check-first order raises."""
    import tidelog.storage.log.partition_log as log_module
    import tidelog.storage.log.validator as validator_module
    import tidelog.storage.segment as segment_module
    from tidelog.records.batch import check_record_structure
    from tidelog.records.crc import crc32c
    from tidelog.records.header import validate_batch_tuple

    if mode != "python" and validator_module._c_validate_single_batch is None:
        pytest.skip("the optional C extension is not in use")
    if mode != "c-fast":
        monkeypatch.setattr(log_module, "_c_append_leader_fast", None)
    if mode not in ("c", "c-fast"):
        monkeypatch.setattr(segment_module, "_c_write_stamped", None)
    if mode == "python":
        monkeypatch.setattr(validator_module, "_c_validate_single_batch", None)
    lg = open_log(tmp_path, segment_bytes=3_000)
    good = build_batch(records(4, size=200))
    bad_crc = bytearray(good)
    bad_crc[-3] ^= 0x10
    bad_walk = _broken_walk(good)
    bad_zstd = bytearray(good)  # claims zstd, but the records are no zstd frame (the CRC matches)
    bad_zstd[22] |= 0x04
    bad_zstd[17:21] = crc32c(bytes(bad_zstd[21:])).to_bytes(4, "big")
    expected = {}
    for name, data in (("crc", bytes(bad_crc)), ("walk", bad_walk), ("zstd", bytes(bad_zstd))):
        with pytest.raises((CorruptRecordError, InvalidRecordError)) as raised:
            check_record_structure(data, 0, validate_batch_tuple(data, check_crc=True))
        expected[name] = (type(raised.value), str(raised.value))
    lg.append_as_leader(good, now_ms=NOW)
    for _ in range(4):  # the active segment fills up: the fourth append needs a roll
        cases = (("crc", bytes(bad_crc)), ("walk", bad_walk), ("walk", memoryview(bad_walk)), ("zstd", bad_zstd))
        for name, data in cases:
            before = (lg.log_end_offset, lg.size_in_bytes, len(lg.segments))
            with pytest.raises((CorruptRecordError, InvalidRecordError)) as raised:
                lg.append_as_leader(data, now_ms=NOW)
            assert (type(raised.value), str(raised.value)) == expected[name]
            assert (lg.log_end_offset, lg.size_in_bytes, len(lg.segments)) == before
            assert os.path.getsize(lg.active_segment.log_path) == lg.active_segment.size
        lg.append_as_leader(good, now_ms=NOW)
    assert len(lg.segments) == 2 and lg.log_end_offset == 20
    assert [h.base_offset for h in all_headers(lg)] == [0, 4, 8, 12, 16]
    lg.close()
    reopened = PartitionLog.open(tmp_path / "topic-with-dash-0", LogConfig(segment_bytes=3_000), recovery_point=0)
    assert reopened.log_end_offset == 20
    reopened.close()


def _append_script(seed: int) -> list[tuple[str, bytes, int, int]]:
    """A random mix of appends for the fast-path equivalence test: (kind, batch, leader_epoch, now)."""
    import random

    from tidelog.records.batch import CompressionType

    rng = random.Random(seed)
    script = []
    epoch = 0
    for i in range(300):
        now = NOW + 10 * i
        n = rng.choice([1, 2, 5, 20])
        size = rng.choice([10, 300, 3000])
        ts = now + rng.randint(-50, 5)  # max timestamps often do not grow
        recs = [(b"k%d" % j, b"v" * size, (), ts + rng.randint(-3, 3)) for j in range(n)]
        if rng.random() < 0.05:
            epoch += 1
        kind = rng.choices(["plain", "pid", "zstd", "crc", "walk", "stale", "idem", "idem-retry", "idem-crc",
                            "idem-noseq"], [60, 6, 5, 3, 3, 3, 20, 3, 2, 1])[0]
        if kind == "idem-retry" and not any(k == "idem" for k, *_ in script):
            kind = "idem"  # nothing to retry yet
        if kind == "pid":
            data = build_batch(recs, producer_id=1, producer_epoch=0, base_sequence=sum(
                1 for k, *_ in script if k == "pid"
            ) * 1000)
        elif kind.startswith("idem"):
            # an idempotent producer (id 2) in sequence (the C path since issue 18), its retries (duplicates), a
            # corrupted one (caught by the late CRC after the producer-state check) and one without a sequence
            seq = sum(int(BatchHeader.parse(d).records_count) for k, d, *_ in script if k == "idem")
            if kind == "idem-retry":
                data = next(d for k, d, *_ in reversed(script) if k == "idem")
            else:
                data = build_batch(recs, producer_id=2, producer_epoch=0,
                                   base_sequence=-1 if kind == "idem-noseq" else seq)
                if kind == "idem-crc":
                    data = bytes(data[:-2]) + bytes([data[-2] ^ 0x20]) + data[-1:]
        elif kind == "zstd":
            data = build_batch(recs, compression=CompressionType.ZSTD)
        elif kind == "stale":
            data = build_batch([(b"k", b"v", (), NOW - 10**12)])
        else:
            data = build_batch(recs)
            if kind == "crc":
                data = bytes(data[:-2]) + bytes([data[-2] ^ 0x20]) + data[-1:]
            elif kind == "walk":
                data = _broken_walk(data)
        script.append((kind, data, epoch, now))
    return script


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_c_fast_path_appends_exactly_as_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """``append_leader_fast`` (C) and the Python steps it short-cuts leave byte-identical .log, .index and
    .timeindex files, epoch and producer state, and return the same AppendInfo or raise the same error."""
    import tidelog.storage.log.partition_log as log_module

    if log_module._c_append_leader_fast is None:
        pytest.skip("the optional C extension is not in use")
    script = _append_script(seed)
    results = {}
    c_fast = log_module._c_append_leader_fast
    taken = []

    def counted(*args: object) -> object:
        info = c_fast(*args)
        taken.append(info is not None)
        return info

    for name, fast in (("fast", counted), ("python", None)):
        monkeypatch.setattr(log_module, "_c_append_leader_fast", fast)
        d = tmp_path / name / "t-0"
        d.mkdir(parents=True)
        cache = LeaderEpochCache(d / "leader-epoch-checkpoint")
        ps = ProducerStateManager(d)
        lg = PartitionLog.open(
            d, LogConfig(segment_bytes=60_000, index_interval_bytes=700, segment_index_bytes=1200),
            epoch_cache=cache, producer_state=ps, now_ms=NOW,
        )
        out = []
        for kind, data, epoch, now in script:
            try:
                info = lg.append_as_leader(data, leader_epoch=epoch, now_ms=now, reject_control_batches=True)
                out.append((kind, info))
            except (CorruptRecordError, InvalidRecordError, InvalidTimestampError, OutOfOrderSequenceError) as e:
                out.append((kind, type(e).__name__, str(e)))
            out.append((lg.log_end_offset, lg.size_in_bytes, len(lg.segments), ps.map_end_offset))
        lookups = [lg.find_offset_by_timestamp(NOW + t) for t in range(0, 3000, 97)]
        lg.close()
        files = {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in (".log", ".index", ".timeindex")}
        results[name] = (out, lookups, files, cache.entries(), ps.active_producers())
    fast, python = results["fast"], results["python"]
    assert fast[0] == python[0]
    assert fast[1] == python[1]
    assert fast[2].keys() == python[2].keys() and len(fast[2]) >= 9  # several rolls happened
    for name in fast[2]:
        assert fast[2][name] == python[2][name], name
    assert fast[3] == python[3]
    assert fast[4] == python[4] and 2 in fast[4]  # the idempotent producer's state, batch for batch
    kinds = {o[0] for o in fast[0] if isinstance(o[0], str) and len(o) == 2}
    assert {"plain", "pid", "zstd", "idem"} <= kinds
    assert sum(taken) > len(script) // 2 and not all(taken)  # mostly the fast path, sometimes the Python one


def _reserved_bytes(path: Path) -> int:
    """Disk bytes allocated to ``path`` beyond its size rounded up to 4 KiB blocks (ext4 may add a block or two
    of extent tree: a reservation shows as far more, given back as at most 16 KiB)."""
    st = os.stat(path)
    return st.st_blocks * 512 - -(-st.st_size // 4096) * 4096


GIVEN_BACK = 16 * 1024


def test_the_active_segment_reserves_disk_blocks_ahead_and_gives_them_back(tmp_path: Path) -> None:
    """Blocks past the end of the active .log are reserved in growing stretches (the file's size and bytes do
    not change); a roll, a truncation and a close give them back and keep the file's mtime."""
    import tidelog.storage.segment as segment_module

    if segment_module._c_preallocate is None:
        pytest.skip("the optional C extension is not in use")
    lg = open_log(tmp_path, segment_bytes=8 * 1024 * 1024)
    data = build_batch(records(20, size=1000))
    lg.append_as_leader(data, now_ms=NOW)
    first = lg.active_segment
    if _reserved_bytes(first.log_path) <= GIVEN_BACK:
        pytest.skip("this file system does not support fallocate(FALLOC_FL_KEEP_SIZE)")
    assert os.path.getsize(first.log_path) == len(data)
    assert os.stat(first.log_path).st_blocks * 512 >= segment_module.PREALLOC_MIN_BYTES
    while len(lg.segments) == 1:  # about 8 MiB: the stretches grow past the first one
        lg.append_as_leader(data, now_ms=NOW)
    old_size = os.path.getsize(first.log_path)
    assert old_size == first.size and _reserved_bytes(first.log_path) <= GIVEN_BACK  # given back at the roll
    # a truncation gives back what the new active segment reserved, a close too, and the mtime stays
    lg.append_as_leader(data, now_ms=NOW)
    active = lg.active_segment.log_path
    assert _reserved_bytes(active) > 128 * 1024
    os.utime(active, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    lg.close()
    assert _reserved_bytes(active) <= GIVEN_BACK and os.stat(active).st_mtime_ns == 1_600_000_000_000_000_000
    reopened = open_log(tmp_path, segment_bytes=8 * 1024 * 1024)
    reopened.append_as_leader(data, now_ms=NOW)
    assert _reserved_bytes(active) > 128 * 1024
    reopened.truncate_to(reopened.log_end_offset - 20)
    assert _reserved_bytes(active) <= GIVEN_BACK
    reopened.close()
    raw = b"".join(p.read_bytes() for p in sorted((tmp_path / "topic-with-dash-0").glob("*.log")))
    assert [h.last_offset for _, h in iter_batch_headers(raw)][-1] == reopened.log_end_offset - 1


def test_blocks_a_crash_left_reserved_are_given_back_and_preallocate_reserves_the_segment(tmp_path: Path) -> None:
    import tidelog.storage.segment as segment_module

    if segment_module._c_preallocate is None:
        pytest.skip("the optional C extension is not in use")
    lg = open_log(tmp_path, preallocate=True, segment_bytes=4 * 1024 * 1024)
    lg.append_as_leader(build_batch(records(3)), now_ms=NOW)
    path = lg.active_segment.log_path
    if _reserved_bytes(path) <= GIVEN_BACK:
        pytest.skip("this file system does not support fallocate(FALLOC_FL_KEEP_SIZE)")
    assert _reserved_bytes(path) >= 4 * 1024 * 1024 - 8192  # preallocate=true: the whole segment.bytes
    size = os.path.getsize(path)
    # a crash: the process goes without closing; the blocks stay reserved on disk
    lg2 = PartitionLog.open(tmp_path / "topic-with-dash-0", LogConfig(), recovery_point=0, now_ms=NOW)
    assert lg2.log_end_offset == 3 and os.path.getsize(path) == size
    lg2.close()
    assert _reserved_bytes(path) <= GIVEN_BACK


def test_compression_type_of_the_topic_recompresses_as_kafka_does(tmp_path: Path) -> None:
    """compression.type other than ``producer``: every client batch is stored with the topic's codec (Kafka's
    LogValidator), records, timestamps, headers and producer fields unchanged; ``producer`` keeps the batch."""
    from tidelog.records.batch import CompressionType, decode_batch

    recs = [(b"k%d" % i, b"value-%d" % i * 50, (("h", b"%d" % i),), NOW + i) for i in range(30)]
    cases = [
        ("zstd", CompressionType.NONE, CompressionType.ZSTD),
        ("gzip", CompressionType.LZ4, CompressionType.GZIP),
        ("uncompressed", CompressionType.SNAPPY, CompressionType.NONE),
        ("producer", CompressionType.LZ4, CompressionType.LZ4),
        ("uncompressed", CompressionType.NONE, CompressionType.NONE),
    ]
    for i, (topic_codec, sent, stored) in enumerate(cases):
        d = tmp_path / f"t{i}-0"
        ps = ProducerStateManager(d)
        lg = PartitionLog.open(d, LogConfig(compression_type=topic_codec), producer_state=ps, now_ms=NOW)
        lg.append_as_leader(build_batch(recs[:2]), now_ms=NOW)
        data = build_batch(recs, compression=sent, producer_id=9, producer_epoch=2, base_sequence=0)
        info = lg.append_as_leader(data, leader_epoch=4, now_ms=NOW)
        assert (info.first_offset, info.last_offset, info.max_timestamp) == (2, 31, NOW + 29)
        raw = lg.read(2, 1 << 20).read_bytes()
        header, records = decode_batch(raw)
        assert header.compression == stored, topic_codec
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 0)
        assert (header.base_offset, header.partition_leader_epoch, header.last_offset_delta) == (2, 4, 29)
        assert [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in records] == [
            (k, v, list(h), t, 2 + j) for j, (k, v, h, t) in enumerate(recs)
        ]
        assert info.size == len(raw)
        # the producer state saw the batch: a retry of the client's bytes is a duplicate
        assert lg.append_as_leader(data, leader_epoch=4, now_ms=NOW).duplicate
        lg.close()


def test_compression_type_recompression_that_outgrows_max_message_bytes_is_refused(tmp_path: Path) -> None:
    from tidelog.records.batch import CompressionType
    from tidelog.records.errors import RecordTooLargeError as TooLarge

    lg = open_log(tmp_path, compression_type="uncompressed", max_message_bytes=50_000)
    small = build_batch([(b"k", bytes(200_000), (), NOW)], compression=CompressionType.GZIP)
    assert len(small) < 50_000
    with pytest.raises(TooLarge, match=r"compression\.type uncompressed"):
        lg.append_as_leader(small, now_ms=NOW)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0
    lg.close()


@pytest.mark.parametrize("topic_codec", ["zstd", "uncompressed"])
def test_a_corrupt_batch_is_refused_before_any_recompression(tmp_path: Path, topic_codec: str) -> None:
    """The client batch's CRC and records are checked before it is rebuilt with the topic's codec: a corrupt
    batch must not come out of the rebuild with a fresh, valid CRC."""
    from tidelog.records.batch import CompressionType

    lg = open_log(tmp_path, compression_type=topic_codec)
    sent = CompressionType.NONE if topic_codec == "zstd" else CompressionType.GZIP
    good = build_batch(records(5, size=100), compression=sent)
    bad = bytearray(good)
    bad[34] ^= 0x01  # baseTimestamp: under the CRC, yet the records still decode
    with pytest.raises(CorruptRecordError, match="CRC"):
        lg.append_as_leader(bytes(bad), now_ms=NOW)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0
    assert lg.append_as_leader(good, now_ms=NOW).last_offset == 4
    lg.close()
