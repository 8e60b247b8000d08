"""Dump and verify Kafka segment files, like Kafka's ``DumpLogSegments`` (``kafka-dump-log.sh``).

Handled suffixes (Kafka's ``LogFileUtils`` names):

* ``.log``        record batches: one line per batch, with ``deep_iteration`` one line per record;
* ``.index``      offset index entries, each verified against the segment's ``.log``;
* ``.timeindex``  time index entries, each verified against the segment's ``.log`` (via its ``.index``);
* ``.snapshot``   producer-state snapshot entries (``ProducerSnapshot`` v1, CRC checked);
* ``.txnindex``   aborted-transaction entries.

The text lines follow Kafka's output so that scripts written for ``kafka-dump-log.sh`` keep working; the
same information is available as one JSON object per event (see :class:`Event`).

``offsets_decoder`` (Kafka's ``--offsets-decoder``, which implies ``--print-data-log``) shows the records of
``__consumer_offsets`` segments decoded, as Kafka's ``OffsetsMessageParser`` does: see
:func:`parse_offsets_record`. A record it cannot decode is shown as such and is not counted as a problem
(the segment itself is intact; Kafka's exit status does not change either).

Checks follow Kafka's rules:

* a ``.log`` is read batch by batch (``os.pread`` through a bounded window, never the whole file); a
  batch whose CRC does not match is printed with ``isvalid: false``; a batch whose header cannot be
  trusted (bad length, bad magic) stops the dump at its position; bytes after the last whole batch are
  reported as ``Found N invalid bytes at the end of <file>``.
* an offset index entry must point at the position of a batch whose *last* offset is the entry's offset
  (``LogSegment.append`` indexes the largest offset of an append at the append's start position).
  Mismatches are listed on stderr as ``Mismatches in :<file>`` / ``  Index offset: X, log offset: Y``.
* a time index entry ``(T, O)`` must name the last offset ``O`` of a batch whose max timestamp is ``T``,
  and timestamps must strictly increase.
* preallocated index files end with zero entries: reading stops at the first entry (after the first) whose
  offset equals the segment base offset (Kafka's rule). A first entry that is all zeros followed by
  another all-zero entry means the index is empty.

Every problem found (corruption, mismatch, unreadable file) is counted in :attr:`Dumper.problems`; the CLI
exits non-zero when it is not zero.
"""

from __future__ import annotations

import base64
import bisect
import struct
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.records.batch import DEFAULT_MAX_DECOMPRESSED, Record, decode_records, parse_control_record
from tidelog.records.crc import crc32c
from tidelog.records.errors import RecordError
from tidelog.records.header import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
)
from tidelog.storage.format import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_INDEX_ENTRY,
    PRODUCER_ENTRIES_OFFSET,
    PRODUCER_SNAPSHOT_ENTRY,
    PRODUCER_SNAPSHOT_HEADER,
    PRODUCER_SNAPSHOT_SUFFIX,
    PRODUCER_SNAPSHOT_VERSION,
    TIME_INDEX_ENTRY,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_ENTRY,
    TXN_INDEX_SUFFIX,
)
from tidelog.storage.header_scan import HeaderScan, classify_header
from tidelog.storage.producer_state import decrement_sequence
from tidelog.tools.dump_files import LogFile, read_entries, valid_prefix
from tidelog.tools.offsets_decoder import parse_offsets_record
from tidelog.tools.share_state_decoder import parse_share_state_record

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Kafka's --max-message-size default
DEFAULT_MAX_BYTES = 2**31 - 1  # Kafka's --max-bytes default (Integer.MAX_VALUE)



COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}



@dataclass(slots=True, frozen=True)
class DumpOptions:
    """The knobs of ``kafka-dump-log.sh`` that tidelog supports (same meaning, snake_case)."""

    deep_iteration: bool = False
    print_data_log: bool = False  # implies deep_iteration, as in Kafka
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    skip_record_metadata: bool = False
    offsets_decoder: bool = False  # decode __consumer_offsets records; implies print_data_log, as in Kafka
    share_state_decoder: bool = False  # decode __share_group_state records (Kafka's --share-group-state-decoder)

    @property
    def print_data(self) -> bool:
        return self.print_data_log or self.offsets_decoder or self.share_state_decoder

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data


@dataclass(slots=True)
class Event:
    """One thing the dump reports.

    ``kind`` and ``data`` form the machine-readable view (``{"type": kind, **data}``); ``text`` is the
    Kafka-style line (``None``: nothing in text mode) and ``stderr`` says where that line goes.
    ``text_only`` events (Kafka's grouped end-of-run reports) carry nothing new for JSON consumers.
    """

    kind: str
    data: dict[str, Any]
    text: str | None = None
    stderr: bool = False
    text_only: bool = False

    def to_json_obj(self) -> dict[str, Any]:
        return {"type": self.kind, **self.data}


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _base_offset_from_name(path: Path) -> int | None:
    stem = path.name.split(".")[0]
    try:
        return int(stem)
    except ValueError:
        return None


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.split(".")[0] + suffix)


def _timestamp_type_name(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type == 1 else "CreateTime"


# ------------------------------------------------------------------------------------------- .log reading


def _read_header_at(log: LogFile, pos: int, limit: int) -> HeaderScan:
    """Header of the batch at ``pos`` by random access, the batch having to end before ``limit``."""
    if pos < 0 or pos >= log.size:
        return HeaderScan(error=f"position {pos} is outside the log (size {log.size})")
    head = log.pread(pos, RECORD_BATCH_OVERHEAD)
    return classify_header(head, pos, min(log.size, limit) - pos)


# ------------------------------------------------------------------------------------------------ dumper


@dataclass
class Dumper:
    """Dump files one after another; collect Kafka's end-of-run reports; count problems."""

    options: DumpOptions = field(default_factory=DumpOptions)
    problems: int = 0
    # Kafka prints these grouped at the end, on stderr.
    _index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    # ----------------------------------------------------------------------------------------- driving

    def dump_all(self, paths: list[str]) -> Iterator[Event]:
        for p in paths:
            yield from self.dump(p)
        yield from self.final_report()
        yield Event("result", {"files": len(paths), "problems": self.problems})

    def dump(self, name: str) -> Iterator[Event]:
        path = Path(name)
        yield Event("file", {"path": name}, f"Dumping {name}")
        suffix = path.suffix
        handlers = {
            LOG_SUFFIX: self._dump_log,
            INDEX_SUFFIX: self._dump_index,
            TIME_INDEX_SUFFIX: self._dump_time_index,
            PRODUCER_SNAPSHOT_SUFFIX: self._dump_snapshot,
            TXN_INDEX_SUFFIX: self._dump_txn_index,
        }
        handler = handlers.get(suffix)
        if handler is None:
            yield Event("ignored", {"path": name}, f"Ignoring unknown file {name}", stderr=True)
            return
        try:
            yield from handler(path)
        except OSError as exc:
            yield self._error(name, None, f"{exc.strerror or exc}: {exc.filename or name}")

    def _error(self, path: str, position: int | None, message: str) -> Event:
        self.problems += 1
        where = f" at position {position}" if position is not None else ""
        return Event(
            "error",
            {"path": path, "position": position, "message": message},
            f"Error in {path}{where}: {message}",
            stderr=True,
        )

    # ------------------------------------------------------------------------------------------- .log

    def _dump_log(self, path: Path) -> Iterator[Event]:
        name = str(path)
        opts = self.options
        start_offset = _base_offset_from_name(path)
        if start_offset is not None:
            yield Event(
                "log_start",
                {"path": name, "start_offset": start_offset},
                f"Log starting offset: {start_offset}",
            )
        with LogFile(path) as log:
            limit = min(log.size, opts.max_bytes)
            pos = 0
            last_offset = -1
            stopped_on_error = False
            while pos < limit:
                head = log.read(pos, RECORD_BATCH_OVERHEAD)
                scan = classify_header(head, pos, limit - pos)
                if scan.partial:
                    break
                if scan.error is not None or scan.header is None:
                    yield self._error(name, pos, scan.error or "unreadable batch header")
                    stopped_on_error = True
                    break
                header = scan.header
                batch = log.read(pos, header.size)
                valid = crc32c(batch[ATTRIBUTES_OFFSET:]) == header.crc
                yield self._batch_event(name, pos, header, valid)
                if not valid:
                    self.problems += 1
                if opts.deep:
                    for ev in self._records(name, pos, header, batch):
                        if ev.kind == "record":
                            off = ev.data["offset"]
                            if last_offset != -1 and off != last_offset + 1:
                                self._non_consecutive.setdefault(str(path.absolute()), []).append(
                                    (last_offset, off)
                                )
                            last_offset = off
                        yield ev
                pos += header.size
            # Kafka reports the bytes after the last whole batch only when reading the whole file.
            if not stopped_on_error and limit == log.size and pos < log.size:
                yield self._trailing(name, pos, log.size - pos)

    def _trailing(self, name: str, pos: int, trailing: int) -> Event:
        self.problems += 1
        return Event(
            "invalid_bytes",
            {"path": name, "position": pos, "bytes": trailing},
            f"Found {trailing} invalid bytes at the end of {Path(name).name} (starting at position {pos})",
            stderr=True,
        )

    def _batch_event(self, name: str, pos: int, h: BatchHeader, valid: bool) -> Event:
        delete_horizon = h.base_timestamp if h.has_delete_horizon else None
        ts_type = _timestamp_type_name(h)
        codec = COMPRESSION_NAMES.get(h.compression, f"unknown({h.compression})")
        data = {
            "path": name,
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "count": h.records_count,
            "base_sequence": h.base_sequence,
            "last_sequence": h.last_sequence,
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
            "partition_leader_epoch": h.partition_leader_epoch,
            "is_transactional": h.is_transactional,
            "is_control": h.is_control,
            "delete_horizon_ms": delete_horizon,
            "position": pos,
            "timestamp_type": ts_type,
            "max_timestamp": h.max_timestamp,
            "size": h.size,
            "magic": h.magic,
            "compression": codec,
            "crc": h.crc,
            "is_valid": valid,
        }
        text = (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} isTransactional: {_bool(h.is_transactional)} "
            f"isControl: {_bool(h.is_control)} deleteHorizonMs: {_optional_long(delete_horizon)} "
            f"position: {pos} {ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {codec} crc: {h.crc} isvalid: {_bool(valid)}"
        )
        return Event("batch", data, text)

    def _records(self, name: str, pos: int, h: BatchHeader, batch: memoryview) -> Iterator[Event]:
        opts = self.options
        try:
            # The CRC was checked (and reported) by the caller; Kafka shows the records of a bad batch too.
            records = decode_records(
                batch, 0, max_decompressed=max(DEFAULT_MAX_DECOMPRESSED, 100 * h.size), verify_crc=False
            )
        except RecordError as exc:
            yield self._error(
                name, pos, f"cannot decode the records of the batch at offset {h.base_offset}: {exc}"
            )
            return
        ts_type = _timestamp_type_name(h)
        log_append = h.timestamp_type == 1
        for rec in records:
            key: bytes | None = rec.key
            value: bytes | None = rec.value
            headers = list(rec.headers or ())
            header_keys = [_text(k) for k, _ in headers]
            timestamp = h.max_timestamp if log_append else rec.timestamp
            offset_delta = rec.offset - h.base_offset
            if h.base_sequence == NO_SEQUENCE:
                sequence = NO_SEQUENCE
            else:
                sequence = (h.base_sequence + offset_delta) & 0x7FFFFFFF
            key_size = -1 if key is None else len(key)
            value_size = -1 if value is None else len(value)
            data: dict[str, Any] = {
                "path": name,
                "offset": rec.offset,
                "timestamp_type": ts_type,
                "timestamp": timestamp,
                "key_size": key_size,
                "value_size": value_size,
                "sequence": sequence,
                "header_keys": header_keys,
            }
            parts: list[str] = []
            if not opts.skip_record_metadata:
                parts.append(
                    f"| offset: {rec.offset} {ts_type}: {timestamp} keySize: {key_size} valueSize: {value_size}"
                    f" sequence: {sequence} headerKeys: [{','.join(header_keys)}]"
                )
                if h.attributes & CONTROL_MASK:
                    control_text, control_data = _describe_control(rec)
                    parts.append(control_text)
                    data["control"] = control_data
            if (opts.offsets_decoder or opts.share_state_decoder) and not h.is_control:
                parse = parse_share_state_record if opts.share_state_decoder else parse_offsets_record
                decoded = parse(rec.offset, key, value)
                parts.append(f"key: {decoded.key_text}" if parts else f"| key: {decoded.key_text}")
                data["key"] = decoded.key_text
                data["key_decoded"] = decoded.key_json
                if key is not None:
                    data["key_b64"] = base64.b64encode(key).decode("ascii")
                if decoded.payload_text is not None:
                    parts.append(f"payload: {decoded.payload_text}")
                    data["payload"] = decoded.payload_text
                data["payload_decoded"] = decoded.payload_json
                if value is not None:
                    data["payload_b64"] = base64.b64encode(value).decode("ascii")
            elif opts.print_data and not h.is_control:
                if key is not None:
                    key_text = bytes(key).decode("utf-8", "replace")
                    parts.append(f"key: {key_text}" if parts else f"| key: {key_text}")
                    data["key"] = key_text
                    data["key_b64"] = base64.b64encode(key).decode("ascii")
                if value is not None:
                    value_text = bytes(value).decode("utf-8", "replace")
                    parts.append(f"payload: {value_text}" if parts else f"| payload: {value_text}")
                    data["payload"] = value_text
                    data["payload_b64"] = base64.b64encode(value).decode("ascii")
            if opts.print_data and not h.is_control:
                data["headers"] = [
                    {
                        "key": k,
                        "value_b64": None if v is None else base64.b64encode(v).decode("ascii"),
                    }
                    for k, (_, v) in zip(header_keys, headers)
                ]
            text = " ".join(parts) if parts else "|"
            yield Event("record", data, text)

    # ------------------------------------------------------------------------------------------ .index

    def _open_index(
        self, path: Path, entry: struct.Struct, offset_field: int
    ) -> Generator[Event, None, tuple[int, list[tuple[int, int]]] | None]:
        """The base offset and valid entries of an index file, or None once the file's whole dump was yielded
        (no base offset in the name, empty, or ``--index-sanity-check``)."""
        name = str(path)
        base = _base_offset_from_name(path)
        if base is None:
            yield self._error(name, None, "file name does not start with a base offset")
            return None
        raw, file_size = read_entries(path, entry)
        entries = valid_prefix(raw, offset_field)
        if not entries:
            yield Event("empty", {"path": name}, f"{name} is empty.")
            return None
        if self.options.index_sanity_check:
            yield from self._sanity(name, base, file_size, entry.size, entries, offset_field=offset_field)
            return None
        return base, entries

    def _missing_log(self, name: str, log_path: Path) -> Event:
        """The log segment beside an index does not exist: an error with --verify-index-only, else a warning."""
        if self.options.verify_index_only:
            return self._error(name, None, f"cannot verify: {log_path} does not exist")
        return Event(
            "warning",
            {"path": name, "message": f"no {log_path.name} beside the index: entries not verified"},
            f"No {log_path} beside {name}: entries not verified",
            stderr=True,
        )

    def _dump_index(self, path: Path) -> Iterator[Event]:
        name = str(path)
        opts = self.options
        opened = yield from self._open_index(path, OFFSET_INDEX_ENTRY, 0)
        if opened is None:
            return
        base, entries = opened
        log_path = _sibling(path, LOG_SUFFIX)
        log: LogFile | None = None
        if log_path.exists():
            log = LogFile(log_path)
        else:
            yield self._missing_log(name, log_path)
        mismatches = 0
        try:
            for rel, position in entries:
                offset = base + rel
                if log is not None:
                    scan = _read_header_at(log, position, position + opts.max_message_size)
                    log_offset = scan.header.last_offset if scan.header is not None and not scan.error else -1
                    if log_offset != offset:
                        mismatches += 1
                        self.problems += 1
                        self._index_mismatches.setdefault(str(path.absolute()), []).append(
                            (offset, log_offset)
                        )
                        reason = scan.error or ("partial batch" if scan.partial else None)
                        yield Event(
                            "index_mismatch",
                            {
                                "path": name,
                                "offset": offset,
                                "position": position,
                                "log_offset": log_offset,
                                "reason": reason,
                            },
                        )
                if not opts.verify_index_only:
                    yield Event(
                        "index_entry",
                        {"path": name, "offset": offset, "position": position},
                        f"offset: {offset} position: {position}",
                    )
        finally:
            if log is not None:
                log.close()
        if log is not None:
            yield Event(
                "index_summary",
                {"path": name, "entries": len(entries), "mismatches": mismatches},
                f"Verified {len(entries)} entries of {name}: {mismatches} mismatches",
            )

    def _sanity(
        self,
        name: str,
        base: int,
        file_size: int,
        entry_size: int,
        entries: list[tuple[int, int]],
        offset_field: int,
    ) -> Iterator[Event]:
        """Kafka's ``sanityCheck`` (size multiple of the entry size, last offset ≥ base) plus ordering."""
        errors: list[str] = []
        if file_size % entry_size != 0:
            errors.append(f"found {file_size} bytes which is not a multiple of {entry_size}")
        prev: tuple[int, int] | None = None
        for i, entry in enumerate(entries):
            rel = entry[offset_field]
            other = entry[1 - offset_field]
            if rel < 0:
                errors.append(f"entry {i} has offset {base + rel} below the base offset {base}")
            if prev is not None:
                if rel <= prev[offset_field]:
                    errors.append(
                        f"entry {i} offset {base + rel} does not increase (previous {base + prev[offset_field]})"
                    )
                if offset_field == 0 and other <= prev[1]:
                    errors.append(f"entry {i} position {other} does not increase (previous {prev[1]})")
                if offset_field == 1 and other <= prev[0]:
                    errors.append(f"entry {i} timestamp {other} does not increase (previous {prev[0]})")
            prev = entry
        if errors:
            for msg in errors[:20]:
                yield self._error(name, None, f"Corrupt index: {msg}")
            if len(errors) > 20:
                yield Event(
                    "note",
                    {"path": name, "more_errors": len(errors) - 20},
                    f"... and {len(errors) - 20} more",
                    stderr=True,
                )
            return
        yield Event("sanity_ok", {"path": name, "entries": len(entries)}, f"{name} passed sanity check.")

    # -------------------------------------------------------------------------------------- .timeindex

    def _dump_time_index(self, path: Path) -> Iterator[Event]:
        name = str(path)
        opts = self.options
        opened = yield from self._open_index(path, TIME_INDEX_ENTRY, 1)
        if opened is None:
            return
        base, entries = opened
        log_path = _sibling(path, LOG_SUFFIX)
        if not log_path.exists():
            yield self._missing_log(name, log_path)
            for ts, rel in entries:
                if not opts.verify_index_only:
                    yield Event(
                        "time_index_entry",
                        {"path": name, "timestamp": ts, "offset": base + rel},
                        f"timestamp: {ts} offset: {base + rel}",
                    )
            return
        # Positions come from the offset index, as in Kafka (index.lookup(offset).position).
        index_path = _sibling(path, INDEX_SUFFIX)
        offset_entries: list[tuple[int, int]] = []
        if index_path.exists():
            offset_entries = valid_prefix(read_entries(index_path, OFFSET_INDEX_ENTRY)[0], 0)
        index_offsets = [base + rel for rel, _ in offset_entries]
        key = str(path.absolute())
        prev_ts = -1
        problems_before = self.problems
        with LogFile(log_path) as log:
            for ts, rel in entries:
                offset = base + rel
                i = bisect.bisect_right(index_offsets, offset) - 1
                position = offset_entries[i][1] if i >= 0 else 0
                found = self._find_batch(log, position, offset)
                if found is None or found.last_offset != offset:
                    log_offset = -1 if found is None else found.last_offset
                    self.problems += 1
                    self._time_not_found.setdefault(key, []).append((offset, log_offset))
                    yield Event(
                        "time_index_offset_not_found",
                        {"path": name, "timestamp": ts, "offset": offset, "log_offset": log_offset},
                    )
                else:
                    if found.max_timestamp != ts:
                        self.problems += 1
                        self._time_mismatches.setdefault(key, []).append((ts, found.max_timestamp))
                        yield Event(
                            "time_index_mismatch",
                            {
                                "path": name,
                                "timestamp": ts,
                                "offset": offset,
                                "log_timestamp": found.max_timestamp,
                            },
                        )
                    if prev_ts >= ts:
                        self.problems += 1
                        self._time_out_of_order.setdefault(key, []).append((ts, prev_ts))
                        yield Event(
                            "time_index_out_of_order",
                            {"path": name, "timestamp": ts, "offset": offset, "previous_timestamp": prev_ts},
                        )
                if not opts.verify_index_only:
                    yield Event(
                        "time_index_entry",
                        {"path": name, "timestamp": ts, "offset": offset},
                        f"timestamp: {ts} offset: {offset}",
                    )
                prev_ts = ts
        yield Event(
            "time_index_summary",
            {"path": name, "entries": len(entries), "problems": self.problems - problems_before},
            f"Verified {len(entries)} entries of {name}: {self.problems - problems_before} problems",
        )

    @staticmethod
    def _find_batch(log: LogFile, position: int, offset: int) -> BatchHeader | None:
        """First batch at or after ``position`` whose last offset is ≥ ``offset`` (headers only)."""
        pos = position
        while pos < log.size:
            scan = _read_header_at(log, pos, log.size)
            if scan.header is None or scan.error or scan.partial:
                return None
            if scan.header.last_offset >= offset:
                return scan.header
            pos += scan.header.size
        return None

    # --------------------------------------------------------------------------------------- .snapshot

    def _dump_snapshot(self, path: Path) -> Iterator[Event]:
        name = str(path)
        data = path.read_bytes()
        if len(data) < PRODUCER_SNAPSHOT_HEADER.size:
            yield self._error(
                name, None, f"Snapshot is truncated: {len(data)} bytes, need {PRODUCER_SNAPSHOT_HEADER.size}"
            )
            return
        version, stored_crc, count = PRODUCER_SNAPSHOT_HEADER.unpack_from(data, 0)
        if version != PRODUCER_SNAPSHOT_VERSION:
            yield self._error(name, None, f"Snapshot contained an unknown file version {version}")
            return
        computed = crc32c(memoryview(data)[PRODUCER_ENTRIES_OFFSET:])
        if computed != stored_crc:
            yield self._error(
                name,
                None,
                f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. Computed crc: {computed}",
            )
            return
        body = len(data) - PRODUCER_SNAPSHOT_HEADER.size
        if count < 0 or body != count * PRODUCER_SNAPSHOT_ENTRY.size:
            yield self._error(
                name,
                None,
                f"Snapshot failed schema validation: {count} entries declared, {body} bytes of entries "
                f"({PRODUCER_SNAPSHOT_ENTRY.size} bytes each)",
            )
            return
        for (
            pid,
            epoch,
            last_seq,
            last_offset,
            offset_delta,
            ts,
            coord_epoch,
            txn_first,
        ) in PRODUCER_SNAPSHOT_ENTRY.iter_unpack(data[PRODUCER_SNAPSHOT_HEADER.size :]):
            first_seq = decrement_sequence(last_seq, offset_delta)
            txn = None if txn_first < 0 else txn_first
            yield Event(
                "producer_snapshot_entry",
                {
                    "path": name,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "coordinator_epoch": coord_epoch,
                    "current_txn_first_offset": txn,
                    "last_timestamp": ts,
                    "first_sequence": first_seq,
                    "last_sequence": last_seq,
                    "last_offset": last_offset,
                    "offset_delta": offset_delta,
                    "timestamp": ts,
                },
                f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord_epoch} "
                f"currentTxnFirstOffset: {_optional_long(txn)} lastTimestamp: {ts} "
                f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                f"offsetDelta: {offset_delta} timestamp: {ts}",
            )

    # --------------------------------------------------------------------------------------- .txnindex

    def _dump_txn_index(self, path: Path) -> Iterator[Event]:
        name = str(path)
        data = path.read_bytes()
        whole = len(data) - len(data) % TXN_INDEX_ENTRY.size
        for version, pid, first, last, lso in TXN_INDEX_ENTRY.iter_unpack(data[:whole]):
            yield Event(
                "txn_index_entry",
                {
                    "path": name,
                    "version": version,
                    "producer_id": pid,
                    "first_offset": first,
                    "last_offset": last,
                    "last_stable_offset": lso,
                },
                f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                f"lastStableOffset: {lso}",
            )
        if whole != len(data):
            yield self._error(name, whole, f"{len(data) - whole} trailing bytes do not form a whole entry")

    # ------------------------------------------------------------------------------------ final report

    def final_report(self) -> Iterator[Event]:
        """Kafka's grouped stderr reports (text mode only; JSON already had one event per problem)."""

        def line(text: str) -> Event:
            return Event("report", {}, text, stderr=True, text_only=True)

        for file, items in self._index_mismatches.items():
            yield line(f"Mismatches in :{file}")
            for index_offset, log_offset in items:
                yield line(f"  Index offset: {index_offset}, log offset: {log_offset}")
        for file, items in self._time_mismatches.items():
            yield line(f"Found timestamp mismatch in :{file}")
            for index_ts, log_ts in items:
                yield line(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}")
        for file, items in self._time_out_of_order.items():
            yield line(f"Found out of order timestamp in {file}")
            for index_ts, prev_ts in items:
                yield line(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}")
        for items in self._time_not_found.values():
            yield line("The following indexed offsets are not found in the log.")
            for indexed, found in items:
                yield line(f"Indexed offset: {indexed}, found log offset: {found}")
        for file, pairs in self._non_consecutive.items():
            yield line(f"Non-consecutive offsets in {file}")
            for first, second in pairs:
                yield line(f"  {first} is followed by {second}")


def _text(key: str) -> str:
    """A header key as printable text (keys are decoded with surrogateescape; show bad bytes as U+FFFD)."""
    return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _describe_control(record: Record) -> tuple[str, dict[str, Any]]:
    """Kafka's control-record rendering: end-txn markers in full, other types by name and id."""
    try:
        control = parse_control_record(record)
    except RecordError as exc:
        return f"controlType: UNKNOWN(-1) ({exc})", {"type": "UNKNOWN", "type_id": -1, "error": str(exc)}
    type_id = int(control.type)
    type_name = CONTROL_TYPE_NAMES.get(type_id, "UNKNOWN")
    if control.is_end_txn:
        return (
            f"endTxnMarker: {type_name} coordinatorEpoch: {control.coordinator_epoch}",
            {"type": type_name, "type_id": type_id, "coordinator_epoch": control.coordinator_epoch},
        )
    return f"controlType: {type_name}({type_id})", {"type": type_name, "type_id": type_id}


