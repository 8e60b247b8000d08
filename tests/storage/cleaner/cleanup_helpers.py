"""Shared helpers for the cleanup tests: building logs, reading them back, checking the invariants."""

from __future__ import annotations

from pathlib import Path

from tidelog.records.batch import build_batch, decode_batch
from tidelog.records.header import BatchHeader, validate_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochCache
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.segment import LogSegment

NOW = 1_700_000_000_000
TP = ("cleanme", 0)


def compact_config(**overrides: object) -> LogConfig:
    base: dict[str, object] = {
        "cleanup_policy": ("compact",),
        "segment_bytes": 2048,
        "index_interval_bytes": 256,
        "segment_index_bytes": 4096,
        "min_cleanable_dirty_ratio": 0.0,
        "delete_retention_ms": 1000,
        "file_delete_delay_ms": 0,
        "message_timestamp_after_max_ms": 2**63 - 1,
    }
    base.update(overrides)
    return LogConfig(**base)  # type: ignore[arg-type]


def open_log(root: Path, config: LogConfig, *, clean_shutdown: bool = True, recovery_point: int = 0) -> PartitionLog:
    d = root / f"{TP[0]}-{TP[1]}"
    d.mkdir(parents=True, exist_ok=True)
    plog = PartitionLog.open(
        d,
        config,
        clean_shutdown=clean_shutdown,
        recovery_point=recovery_point,
        epoch_cache=LeaderEpochCache(d / "leader-epoch-checkpoint"),
        producer_state=ProducerStateManager(d),
        now_ms=NOW,
    )
    plog.high_watermark = plog.log_end_offset  # a single-replica leader: the HW catches up at once
    return plog


def append(plog: PartitionLog, recs: list[tuple[bytes | None, bytes | None]], ts: int = NOW, **kw: object) -> None:
    plog.append_as_leader(build_batch([(k, v, (), ts) for k, v in recs], **kw), now_ms=ts)  # type: ignore[arg-type]
    plog.high_watermark = plog.log_end_offset


def read_all(plog: PartitionLog) -> list[tuple[BatchHeader, list]]:
    """Every batch from the log start offset, decoded (CRC checked)."""
    info = plog.read(plog.log_start_offset, 1 << 30)
    data = info.read_bytes()
    out = []
    pos = 0
    while pos < len(data):
        header, records = decode_batch(data, pos)
        out.append((header, records))
        pos += header.size
    return out


def key_values(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, recs in read_all(plog) for r in recs]


def check_invariants(plog: PartitionLog) -> None:
    """Offsets strictly ascending across batches and records; every batch valid; every segment's indexes
    point at batch boundaries and agree with a rebuild."""
    last = -1
    for header, records in read_all(plog):
        assert header.base_offset > last, (header.base_offset, last)
        for r in records:
            assert header.base_offset <= r.offset <= header.last_offset
            assert r.offset > last
            last = r.offset
        last = max(last, header.last_offset)
    segments = plog.segments
    for i, seg in enumerate(segments):
        raw = seg.read_batch(0, seg.size) if seg.size else b""
        pos = 0
        positions = {}
        while pos < len(raw):
            h = validate_batch(raw, pos)
            positions[pos] = h
            pos += h.size
        assert pos == len(raw)
        if i + 1 < len(segments):
            assert all(h.last_offset < segments[i + 1].base_offset for h in positions.values())
        for off, p in seg.offset_index.entries_list():
            assert p in positions, f"index entry ({off}, {p}) of {seg.log_path} is not a batch start"
            assert positions[p].last_offset == off
        seg.offset_index.sanity_check(seg.size)
        seg.time_index.sanity_check()
        assert all(isinstance(s, LogSegment) for s in segments)
