"""The ``tidelog-log`` source: reads the segment files of log directories directly, without a broker.

Works on tidelog's data directories and on Apache Kafka's (the layout and the v2 batch format are the same).
It only reads: no lock is taken, nothing is written, and the active segment's torn tail (a batch still being
written, or cut short by a crash) is ignored.

Planning (driver): every ``<topic>-<partition>`` directory under each given log directory whose topic and
partition pass the filters; in each, the ``<20 digits>.log`` segments whose offsets overlap the wanted range.
Each segment is one Spark partition; a segment larger than ``maxBytesPerPartition`` is split at positions of its
``.index`` (each index position is a batch boundary, so no batch is read twice). Reading (executor): batches
whose offsets or max timestamp lie outside the filters are skipped by their header, before decompression and
decoding; control batches are skipped; records below the partition's log start offset (from
``log-start-offset-checkpoint``) are dropped, as a consumer would never see them.

Options: ``path`` (``load(path)``; several directories separated by commas), ``subscribe`` /
``subscribePattern`` / ``assign`` (optional topic and partition filters; internal ``__*`` topics are read only
when named), ``startingOffsets`` / ``endingOffsets`` (``earliest`` / ``latest`` or JSON per partition, end
exclusive), ``startingTimestamp`` / ``endingTimestamp`` (ms; start inclusive, end exclusive),
``includeHeaders``, ``maxBytesPerPartition`` (default 128 MiB), ``failOnDataLoss`` (a segment deleted between
planning and reading fails the task unless false), ``verifyCrc`` (default true), ``isolationLevel``,
``packPartitions`` (default true: slices left small by pushed filters are read by fewer tasks,
:mod:`tidelog.spark.packing`).

Transactions: by default (``isolationLevel=read_committed``) only committed data is read, as a read_committed
consumer sees it. Planning reads each partition's aborted transactions from its ``.txnindex`` files and finds
the transactions still open from the newest producer-state ``.snapshot`` and the batch headers after it (the
ABORT markers met there count as aborted too, should a ``.txnindex`` entry not be written yet); the partition is
read up to its last stable offset (the first offset of the oldest open transaction; the high watermark is not
in the files, so it is not applied). Reading drops the batches of aborted transactions (a transactional batch
of producer P at offset o is aborted when an aborted transaction of P spans o: first offset <= o <= its ABORT
marker). ``isolationLevel=read_uncommitted`` reads every data record to the end of the log. Control batches
are never returned.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from tidelog.client.columnar import new_builder
from tidelog.records.batch import DEFAULT_MAX_DECOMPRESSED, decode_batch
from tidelog.records.compression import decompress
from tidelog.records.errors import RecordError
from tidelog.records.header import (
    BATCH_LENGTH_FIELD,
    COMPRESSION_MASK,
    CONTROL_MASK,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    validate_batch,
)
from tidelog.spark.arrow import BATCH_ROWS, COLUMNAR_BATCH_ROWS, columns_batch, record_batch
from tidelog.spark.fetcher import is_abort_marker
from tidelog.spark.options import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    OptionError,
    TopicPartition,
    parse_bool,
    parse_int,
    parse_isolation_level,
    parse_partition_json,
    parse_subscription,
    report_data_loss,
)
from tidelog.spark.packing import members, pack
from tidelog.spark.pushdown import PushedFilters, push_filters
from tidelog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_offset_checkpoint
from tidelog.storage.format import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_INDEX_ENTRY,
    OFFSET_INDEX_ENTRY_SIZE,
    PRODUCER_SNAPSHOT_SUFFIX,
    TIME_INDEX_ENTRY,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_ENTRY_SIZE,
    TXN_INDEX_SUFFIX,
)
from tidelog.storage.index import CorruptIndexError
from tidelog.storage.producer_state import CorruptSnapshotError, decode_snapshot
from tidelog.storage.txn_index import decode_txn_index

log = logging.getLogger("tidelog.spark")

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^(\d{20})" + re.escape(PRODUCER_SNAPSHOT_SUFFIX) + "$")
READ_CHUNK = 8 * 1024 * 1024
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
NO_END = 2**63 - 1


@dataclass(frozen=True)
class SegmentSlice(InputPartition):
    """Bytes [start_pos, end_pos) of one segment file, records with offsets in [min_offset, max_offset)."""

    path: str
    topic: str
    partition: int
    base_offset: int
    start_pos: int
    end_pos: int
    min_offset: int
    max_offset: int
    active: bool  # the last segment of its partition (a torn tail is tolerated)
    aborted: tuple[tuple[int, int, int], ...] = ()
    """read_committed: the aborted transactions overlapping the slice, ``(producer id, first offset, offset of
    the ABORT marker)``; the batches they cover are dropped."""


INDEX_READ_CHUNK = 8 * 1024
"""``.index`` bytes read at a time (doubling): the active segment's index is preallocated (10 MiB by default) and
zero-filled past its entries, so it is read only up to its last valid entry."""


def _entries(path: Path, entry: struct.Struct, limit: int) -> Iterator[tuple[int, int]]:
    """The entries of an index file's first ``limit`` bytes, read in chunks of doubling size, so that a caller
    that stops at the first invalid entry (the zero-filled, preallocated tail) reads little past it."""
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with f:
        done = 0
        chunk = INDEX_READ_CHUNK - INDEX_READ_CHUNK % entry.size
        while done < limit:
            data = f.read(min(chunk, limit - done))
            yield from entry.iter_unpack(data[: len(data) - len(data) % entry.size])
            if len(data) < chunk:
                return  # the end of the file (or of ``limit``)
            done += len(data)
            chunk = min(chunk * 2, 4 * 1024 * 1024 - 4 * 1024 * 1024 % entry.size)


def read_index_positions(path: Path, base_offset: int, log_size: int) -> list[tuple[int, int]]:
    """The valid ``(offset, position)`` entries of an ``.index`` file (read-only; a preallocated, zero-filled
    tail and entries past ``log_size`` are ignored, and not read beyond the chunk that holds the first of them: an
    index has at most one entry per batch, so no more than ``log_size / 61``)."""
    out: list[tuple[int, int]] = []
    last_rel, last_pos = -1, -1
    limit = (log_size // RECORD_BATCH_OVERHEAD + 1) * OFFSET_INDEX_ENTRY_SIZE
    for rel, pos in _entries(path, OFFSET_INDEX_ENTRY, limit):
        if (out and rel == 0 and pos == 0) or rel <= last_rel or pos <= last_pos or pos >= log_size:
            break
        out.append((base_offset + rel, pos))
        last_rel, last_pos = rel, pos
    return out


def time_index_floor(path: Path, base_offset: int, log_size: int, timestamp: int) -> int | None:
    """The last offset of a segment below which every record is older than ``timestamp`` (ms), from its
    ``.timeindex`` (entries ``(max timestamp so far, its offset)``, increasing): the offset of the last entry whose
    timestamp is below ``timestamp``; None when there is none."""
    found: int | None = None
    last_ts, last_rel = -(2**63), -1
    limit = (log_size // RECORD_BATCH_OVERHEAD + 1) * TIME_INDEX_ENTRY_SIZE
    for ts, rel in _entries(path, TIME_INDEX_ENTRY, limit):
        if ts <= last_ts or rel < last_rel or (ts == 0 and rel == 0):
            break  # the zero-filled preallocated tail (the first entry too: an empty index is all zeros)
        if ts >= timestamp:
            break
        found = base_offset + rel
        last_ts, last_rel = ts, rel
    return found


def skip_older_batches(path: Path, pos: int, end: int, timestamp: int) -> int:
    """The position of the first batch in ``[pos, end)`` of segment ``path`` whose max timestamp is at or after
    ``timestamp`` (ms): every record of the batches before it is older. One ``pread`` of 61 bytes per batch
    header, from ``pos``, the position the index files gave. They stop short in a live broker's active segment:
    tidelog's broker writes index entries into the files 1024 at a time (``storage/index.py``, ``PENDING_LIMIT``),
    so an active segment of 1 MB batches may have no entry on disk at all (a pushed ``timestamp >=`` then read the
    whole segment: 10 M records, 4 partitions, 375 MB each). Stops at a torn or zero-filled tail."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return pos
    try:
        while pos + RECORD_BATCH_OVERHEAD <= end:
            try:
                h = BatchHeader.parse(os.pread(fd, RECORD_BATCH_OVERHEAD, pos))
            except RecordError:
                break
            if (h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + h.size > end
                    or h.max_timestamp >= timestamp):
                break
            pos += h.size
    finally:
        os.close(fd)
    return pos


@dataclass(frozen=True)
class PartitionTxnState:
    """What the files of one partition directory say about its transactions (read_committed planning)."""

    aborted: frozenset[tuple[int, int, int]]  # (producer id, first offset, ABORT marker offset)
    last_stable_offset: int | None  # first offset of the oldest open transaction; None: none is open


def _read_txn_indexes(pdir: Path, bases: Sequence[int]) -> set[tuple[int, int, int]]:
    out: set[tuple[int, int, int]] = set()
    for base in bases:
        path = pdir / f"{base:020d}{TXN_INDEX_SUFFIX}"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        data = data[: len(data) - len(data) % TXN_INDEX_ENTRY_SIZE]  # an entry being written right now
        try:
            entries = decode_txn_index(data, str(path))
        except CorruptIndexError as exc:
            log.warning("ignoring %s: %s", path, exc)
            continue
        out.update((e.producer_id, e.first_offset, e.last_offset) for e in entries)
    return out


def _newest_snapshot(pdir: Path, first_base: int) -> tuple[int, dict[int, int]] | None:
    """``(offset, {producer id: first offset of its open transaction})`` of the newest readable producer-state
    snapshot at or above the first segment's base offset (older ones describe deleted batches)."""
    offsets = sorted((int(m.group(1)) for name in os.listdir(pdir) if (m := _SNAPSHOT.match(name))), reverse=True)
    for off in offsets:
        if off < first_base:
            break
        path = pdir / f"{off:020d}{PRODUCER_SNAPSHOT_SUFFIX}"
        try:
            entries = decode_snapshot(path.read_bytes(), str(path))
        except (OSError, CorruptSnapshotError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            continue
        return off, {e.producer_id: e.current_txn_first_offset for e in entries
                     if e.current_txn_first_offset is not None}
    return None


def partition_txn_state(pdir: Path, bases: Sequence[int]) -> PartitionTxnState:
    """Aborted transactions (``.txnindex`` files, plus ABORT markers met while scanning) and the last stable
    offset of a partition directory whose segments start at ``bases`` (ascending). Reads only: the newest
    producer snapshot, then the batch headers after it (the control batches whole)."""
    aborted = _read_txn_indexes(pdir, bases)
    if not bases:
        return PartitionTxnState(frozenset(aborted), None)
    snap = _newest_snapshot(pdir, bases[0])
    scan_from, ongoing = snap if snap is not None else (bases[0], {})
    for i, base in enumerate(bases):
        nxt = bases[i + 1] if i + 1 < len(bases) else NO_END
        if nxt <= scan_from:
            continue
        path = pdir / f"{base:020d}{LOG_SUFFIX}"
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
        try:
            _scan_txn_headers(fd, pdir / f"{base:020d}{INDEX_SUFFIX}", base, scan_from, ongoing, aborted)
        finally:
            os.close(fd)
    lso = min(ongoing.values()) if ongoing else None
    return PartitionTxnState(frozenset(aborted), lso)


def _scan_txn_headers(fd: int, index: Path, base: int, scan_from: int, ongoing: dict[int, int],
                      aborted: set[tuple[int, int, int]]) -> None:
    """Walk the batch headers of one segment from ``scan_from`` on, updating the open transactions ``ongoing``
    and ``aborted`` (ABORT markers met). Reads each header alone (one ``pread`` of its 61 bytes) and only the
    control batches whole: a buffered reader here read the whole segment, which doubled the bytes a read of a
    log without producer snapshot costs (planning read every data batch once more)."""
    size = os.fstat(fd).st_size
    pos = 0
    for off, ipos in read_index_positions(index, base, size):
        if off >= scan_from:
            break
        pos = ipos  # that batch ends below scan_from
    while pos + RECORD_BATCH_OVERHEAD <= size:
        head = os.pread(fd, RECORD_BATCH_OVERHEAD, pos)
        try:
            h = BatchHeader.parse(head)
        except RecordError:
            break  # zero-filled or torn tail
        if h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + h.size > size:
            break
        pid = h.producer_id
        if pid >= 0 and h.last_offset >= scan_from:
            if h.attributes & CONTROL_MASK:
                first = ongoing.pop(pid, None)
                if first is not None:
                    try:
                        if is_abort_marker(memoryview(os.pread(fd, h.size, pos))):
                            aborted.add((pid, first, h.base_offset))
                    except RecordError:
                        break
            elif h.attributes & TRANSACTIONAL_MASK:
                ongoing.setdefault(pid, h.base_offset)
        pos += h.size


def aborted_lookup(aborted: Sequence[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for pid, first, last in aborted:
        out.setdefault(pid, []).append((first, last))
    return out


def in_aborted_txn(lookup: Mapping[int, list[tuple[int, int]]], producer_id: int, offset: int) -> bool:
    """Whether a transactional batch of ``producer_id`` at ``offset`` belongs to one of its aborted
    transactions (a producer has at most one transaction open, so [first offset, ABORT marker] is all of it)."""
    spans = lookup.get(producer_id)
    return spans is not None and any(first <= offset <= last for first, last in spans)


def _log_start_offsets(log_dir: Path) -> dict[TopicPartition, int]:
    path = log_dir / LOG_START_OFFSET_CHECKPOINT
    if not path.exists():
        return {}
    try:
        return read_offset_checkpoint(path)
    except Exception as exc:  # a checkpoint being replaced right now; offsets then come from the segments
        log.warning("cannot read %s: %s", path, exc)
        return {}


class LogDirReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        raw = options.get("path") or options.get("paths")
        if not raw:
            raise OptionError("Option 'path' is required: load('/path/to/log-dir') or a comma-separated list")
        if raw.startswith("["):
            import json

            dirs = [str(p) for p in json.loads(raw)]
        else:
            dirs = [p.strip() for p in raw.split(",") if p.strip()]
        self.dirs = dirs
        self.subscription = parse_subscription(options, required=False)
        self.starting = self._offsets(options, "startingOffsets", EARLIEST)
        self.ending = self._offsets(options, "endingOffsets", LATEST)
        self.start_ts = parse_int(options, "startingTimestamp", None, minimum=-(2**63))
        self.end_ts = parse_int(options, "endingTimestamp", None, minimum=-(2**63))
        self.include_headers = parse_bool(options, "includeHeaders", False)
        self.max_bytes = parse_int(options, "maxBytesPerPartition", DEFAULT_MAX_BYTES) or DEFAULT_MAX_BYTES
        self.fail_on_data_loss = parse_bool(options, "failOnDataLoss", True)
        self.verify_crc = parse_bool(options, "verifyCrc", True)
        self.pack_partitions = parse_bool(options, "packPartitions", True)
        iso = options.get("isolationLevel")
        alias = options.get("kafka.isolation.level")
        if iso is not None and alias is not None and iso.strip().lower() != alias.strip().lower():
            raise OptionError("Options 'isolationLevel' and 'kafka.isolation.level' disagree; set one of them")
        self.isolation_level = parse_isolation_level(iso if iso is not None else alias, "isolationLevel",
                                                     READ_COMMITTED)
        self.pushed = PushedFilters()

    @staticmethod
    def _offsets(options: Mapping[str, str], name: str, default: int) -> dict[TopicPartition, int] | int:
        raw = options.get(name)
        if raw is None or raw.strip().lower() in ("earliest", "latest"):
            if raw is not None and raw.strip().lower() == ("latest" if default == EARLIEST else "earliest"):
                raise OptionError(f"{name} can't be {raw.strip().lower()} for the tidelog-log source")
            return default
        return parse_partition_json(raw, name)

    def _wanted(self, topic: str, partition: int) -> bool:
        if not self.pushed.wants(topic, partition):
            return False
        sub = self.subscription
        if sub is None:
            return not topic.startswith("__")
        if sub.partitions:
            return (topic, partition) in sub.partitions
        if sub.pattern is not None and topic.startswith("__"):
            return False
        return sub.matches_topic(topic)

    def _range(self, tp: TopicPartition) -> tuple[int, int]:
        lo = self.starting.get(tp, EARLIEST) if isinstance(self.starting, dict) else self.starting
        hi = self.ending.get(tp, LATEST) if isinstance(self.ending, dict) else self.ending
        return self.pushed.clamp(0 if lo in (EARLIEST, LATEST) else lo, NO_END if hi in (EARLIEST, LATEST) else hi)

    def partitions(self) -> Sequence[InputPartition]:
        out: list[SegmentSlice] = []
        for d in self.dirs:
            log_dir = Path(d)
            if not log_dir.is_dir():
                raise OptionError(f"Log directory {d} does not exist")
            starts = _log_start_offsets(log_dir)
            for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
                m = _PARTITION_DIR.match(entry.name)
                if not m or not entry.is_dir():
                    continue
                topic, partition = m.group(1), int(m.group(2))
                if not self._wanted(topic, partition):
                    continue
                lo, hi = self._range((topic, partition))
                lo = max(lo, starts.get((topic, partition), 0))
                pdir = Path(entry.path)
                bases = sorted(int(m.group(1)) for name in os.listdir(pdir) if (m := _SEGMENT.match(name)))
                aborted: tuple[tuple[int, int, int], ...] = ()
                if self.isolation_level == READ_COMMITTED:
                    state = partition_txn_state(pdir, bases)
                    if state.last_stable_offset is not None:
                        hi = min(hi, state.last_stable_offset)
                    aborted = tuple(sorted(a for a in state.aborted if a[2] >= lo and a[1] < hi))
                if hi <= lo:
                    continue
                out.extend(self._plan_partition(pdir, bases, topic, partition, lo, hi, aborted))
        if not self.pushed.empty and self.pack_partitions:
            # the filters left small slices: fewer tasks, up to maxBytesPerPartition each (tidelog.spark.packing)
            return pack(out, lambda s: s.end_pos - s.start_pos, self.max_bytes)
        return out

    def _plan_partition(self, pdir: Path, bases: Sequence[int], topic: str, partition: int, lo: int, hi: int,
                        aborted: tuple[tuple[int, int, int], ...]) -> list[SegmentSlice]:
        out: list[SegmentSlice] = []
        for i, base in enumerate(bases):
            nxt = bases[i + 1] if i + 1 < len(bases) else NO_END
            if nxt <= lo or base >= hi:
                continue
            path = pdir / f"{base:020d}{LOG_SUFFIX}"
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue  # deleted by retention while we listed
            if size == 0:
                continue
            entries = read_index_positions(pdir / f"{base:020d}{INDEX_SUFFIX}", base, size)
            seg_lo = lo
            if self.start_ts is not None:
                # startingTimestamp or a pushed lower bound: the records up to the last .timeindex entry below it are
                # older, their bytes are not read
                older = time_index_floor(pdir / f"{base:020d}{TIME_INDEX_SUFFIX}", base, size, self.start_ts)
                if older is not None:
                    seg_lo = max(lo, older + 1)
            # first position: the greatest index entry whose offset is below ``seg_lo`` (its batch ends before it)
            start_pos = 0
            for off, pos in entries:
                if off < seg_lo:
                    start_pos = pos
                else:
                    break
            # last position: an index entry (off, pos) names the last offset ``off`` of the batch at ``pos``, so
            # the entry after the first one with off >= hi starts a batch wholly past the end
            end_pos = size
            for j, (off, _pos) in enumerate(entries):
                if off >= hi:
                    if j + 1 < len(entries):
                        end_pos = entries[j + 1][1]
                    break
            if self.start_ts is not None:
                # the indexes stop short in a live broker's active segment: walk the headers from there
                start_pos = skip_older_batches(path, start_pos, end_pos, self.start_ts)
            cuts = [start_pos]
            for _off, pos in entries:
                if pos > cuts[-1] and pos - cuts[-1] >= self.max_bytes and pos < end_pos:
                    cuts.append(pos)
            cuts.append(end_pos)
            active = nxt == NO_END
            seg_aborted = tuple(t for t in aborted if t[2] >= base and t[1] < nxt)
            for a, b in itertools.pairwise(cuts):
                out.append(SegmentSlice(str(path), topic, partition, base, a, b, lo, hi, active and b == end_pos,
                                        seg_aborted))
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        for part in members(partition):
            if isinstance(part, SegmentSlice):  # else no ranges planned: PySpark hands a placeholder partition
                yield from read_slice(part, self.include_headers, self.start_ts, self.end_ts,
                                      self.fail_on_data_loss, self.verify_crc)


class LogDirPushdownReader(LogDirReader):
    """:class:`LogDirReader` taking Spark's filters (:mod:`tidelog.spark.pushdown`); only handed to Spark when
    ``spark.sql.python.filterPushdown.enabled`` is set (PySpark refuses it otherwise). A lower bound on
    ``timestamp`` also becomes the ``startingTimestamp`` the readers apply to batch headers and records."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        rest = list(push_filters(self.pushed, filters))
        ts = self.pushed.timestamp_lo_ms
        if ts is not None:
            self.start_ts = ts if self.start_ts is None else max(self.start_ts, ts)
        if not self.pushed.empty:
            log.info("tidelog-log source: pushed filters [%s]", self.pushed.describe())
        return rest


def _batches(s: SegmentSlice) -> Iterator[tuple[memoryview, int]]:
    """Yield ``(buffer, position)`` of each whole batch in the slice. A partial batch at the end of the active
    segment is a torn tail and ends the slice; elsewhere it is corruption.

    The file is read with ``readinto`` into one reused buffer (the partial batch left at its end moves to its front
    first): a yielded view is valid until the next one is asked for (every caller copies what it keeps:
    ``decode_batch``, the column builder). Before, each refill concatenated the rest and the new chunk into a new
    ``bytes``: one more copy of every byte read (issue 29)."""
    with open(s.path, "rb", buffering=0) as f:
        f.seek(s.start_pos)
        pos = s.start_pos  # file position of buf[end]
        buf = bytearray(min(READ_CHUNK, max(0, s.end_pos - s.start_pos)) or LOG_OVERHEAD)
        mv = memoryview(buf)
        off = end = 0  # buf[off:end] is read and not yet yielded
        eof = False
        while True:
            avail = end - off
            need = LOG_OVERHEAD
            if avail >= LOG_OVERHEAD:
                need = BATCH_LENGTH_FIELD.unpack_from(buf, off + LENGTH_OFFSET)[0] + LOG_OVERHEAD
            if avail < need:
                if eof or pos >= s.end_pos:
                    if avail and not s.active:
                        raise RecordError(f"{s.path}: truncated batch at position {pos - avail}")
                    return
                want = min(max(READ_CHUNK, need), s.end_pos - pos)
                if avail + want > len(buf):
                    # a batch larger than the buffer: a new one (the old may still be exported by a caller's view)
                    nbuf = bytearray(avail + want)
                    nbuf[:avail] = mv[off:end]
                    buf, mv = nbuf, memoryview(nbuf)
                elif avail:
                    mv[:avail] = mv[off:end]  # the partial batch to the front (memoryview assignment is a memmove)
                off, end = 0, avail
                got = 0
                while got < want:
                    k = f.readinto(mv[end + got : end + want])
                    if not k:
                        eof = True
                        break
                    got += k
                pos += got
                end += got
                continue
            length = need - LOG_OVERHEAD
            if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
                # zero-filled (preallocated) or torn space at the end of the active segment
                if s.active:
                    return
                raise RecordError(f"{s.path}: invalid batch length {length} at position {pos - avail}")
            yield mv[off : off + need], 0
            off += need


def read_slice(
    s: SegmentSlice,
    include_headers: bool,
    start_ts: int | None,
    end_ts: int | None,
    fail_on_data_loss: bool = True,
    verify_crc: bool = True,
) -> Iterator[Any]:
    if not include_headers:
        yield from read_slice_columnar(s, start_ts, end_ts, fail_on_data_loss, verify_crc)
        return
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    stamps: list[int] = []
    types: list[int] = []
    headers: list[Any] | None = [] if include_headers else None
    lo, hi = s.min_offset, s.max_offset
    aborted = aborted_lookup(s.aborted) if s.aborted else None
    try:
        for view, _ in _batches(s):
            h = BatchHeader.parse(view)
            if h.attributes & CONTROL_MASK or h.last_offset < lo or h.base_offset >= hi:
                continue
            if start_ts is not None and h.max_timestamp < start_ts:
                continue
            if aborted and h.attributes & TRANSACTIONAL_MASK and in_aborted_txn(aborted, h.producer_id,
                                                                                 h.base_offset):
                continue
            try:
                _, recs = decode_batch(view, verify_crc=verify_crc)
            except RecordError:
                if s.active:
                    break  # a torn tail that happens to look whole
                raise
            ts_type = 1 if h.attributes & TIMESTAMP_TYPE_MASK else 0
            if h.base_offset < lo or h.last_offset >= hi or start_ts is not None or end_ts is not None:
                recs = [
                    r for r in recs
                    if lo <= r.offset < hi
                    and (start_ts is None or r.timestamp >= start_ts)
                    and (end_ts is None or r.timestamp < end_ts)
                ]
            for r in recs:
                keys.append(r.key)
                values.append(r.value)
                offsets.append(r.offset)
                stamps.append(r.timestamp)
                types.append(ts_type)
            if headers is not None:
                headers.extend((list(r.headers) if r.headers else None) for r in recs)
            if len(values) >= BATCH_ROWS:
                yield record_batch(s.topic, s.partition, keys, values, offsets, stamps, types, headers)
                keys, values, offsets, stamps, types = [], [], [], [], []
                headers = [] if include_headers else None
    except FileNotFoundError:
        report_data_loss(fail_on_data_loss, f"Segment {s.path} was deleted before it could be read.")
    if values:
        yield record_batch(s.topic, s.partition, keys, values, offsets, stamps, types, headers)


MAX_CHUNK_BYTES = 256 * 1024 * 1024
"""Key + value bytes per Arrow batch of :func:`read_slice_columnar` at most (binary offsets are int32)."""


def read_slice_columnar(
    s: SegmentSlice,
    start_ts: int | None,
    end_ts: int | None,
    fail_on_data_loss: bool = True,
    verify_crc: bool = True,
) -> Iterator[Any]:
    """:func:`read_slice` without headers: each batch's records area is decoded straight into Arrow column
    buffers (:mod:`tidelog.client.columnar`), :data:`COLUMNAR_BATCH_ROWS` rows per Arrow batch. The same
    checks in the same order as ``decode_batch`` (header, sizes, CRC, decompression, records); a batch the
    columnar walk rejects is decoded by ``decode_batch``, which raises the exact error."""
    builder = new_builder()
    lo, hi = s.min_offset, s.max_offset
    topic, partition = s.topic, s.partition
    aborted = aborted_lookup(s.aborted) if s.aborted else None
    try:
        for view, _ in _batches(s):
            h = BatchHeader.parse(view)
            if h.attributes & CONTROL_MASK or h.last_offset < lo or h.base_offset >= hi:
                continue
            if start_ts is not None and h.max_timestamp < start_ts:
                continue
            if aborted and h.attributes & TRANSACTIONAL_MASK and in_aborted_txn(aborted, h.producer_id,
                                                                                 h.base_offset):
                continue
            try:
                if verify_crc:
                    h = validate_batch(view)
                else:
                    h.check_sizes(len(view))
                payload = view[RECORD_BATCH_OVERHEAD : h.size]
                codec = h.attributes & COMPRESSION_MASK
                data = decompress(codec, payload, DEFAULT_MAX_DECOMPRESSED) if codec else payload
            except RecordError:
                if s.active:
                    break  # a torn tail that happens to look whole
                raise
            lat = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
            ts_type = 1 if lat is not None else 0
            filtering = h.base_offset < lo or h.last_offset >= hi or start_ts is not None or end_ts is not None
            if builder.rows and builder.nbytes + len(data) > MAX_CHUNK_BYTES:
                yield columns_batch(topic, partition, builder.finish())
            added = builder.add(data, h.records_count, h.base_offset, h.base_timestamp, lat, ts_type, filtering,
                                lo, hi, start_ts, end_ts)
            if added < 0:
                # malformed records: decode_batch raises the exact error (or, should it accept them, its rows)
                if builder.rows:
                    yield columns_batch(topic, partition, builder.finish())
                try:
                    _, recs = decode_batch(view, verify_crc=False)
                except RecordError:
                    if s.active:
                        break
                    raise
                if filtering:
                    recs = [r for r in recs if lo <= r.offset < hi and (start_ts is None or r.timestamp >= start_ts)
                            and (end_ts is None or r.timestamp < end_ts)]
                if recs:
                    yield record_batch(topic, partition, [r.key for r in recs], [r.value for r in recs],
                                       [r.offset for r in recs], [r.timestamp for r in recs], ts_type, None)
            elif builder.rows >= COLUMNAR_BATCH_ROWS:
                yield columns_batch(topic, partition, builder.finish())
    except FileNotFoundError:
        report_data_loss(fail_on_data_loss, f"Segment {s.path} was deleted before it could be read.")
    if builder.rows:
        yield columns_batch(topic, partition, builder.finish())
