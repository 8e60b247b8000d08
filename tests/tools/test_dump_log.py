"""``tidelog dump-log``: Kafka DumpLogSegments output and checks, through click and as a subprocess.

Segments are written by the storage layer (PartitionLog), so the index files under test are the ones the
broker writes; corruption is then injected byte by byte.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidelog.cli.dump_log import dump_log
from tidelog.records.batch import RecordSpec, build_batch, build_control_batch
from tidelog.records.compression import CompressionType
from tidelog.records.crc import crc32c
from tidelog.records.header import BatchHeader, iter_batch_headers
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000
SEG = "00000000000000000000"
PRODUCER_ID = 4242

BATCH_LINE = re.compile(
    r"^baseOffset: (?P<base>\d+) lastOffset: (?P<last>\d+) count: (?P<count>\d+) "
    r"baseSequence: (?P<bseq>-?\d+) lastSequence: (?P<lseq>-?\d+) producerId: (?P<pid>-?\d+) "
    r"producerEpoch: (?P<pepoch>-?\d+) partitionLeaderEpoch: (?P<ple>-?\d+) "
    r"isTransactional: (?P<txn>true|false) isControl: (?P<ctl>true|false) "
    r"deleteHorizonMs: (?P<dh>OptionalLong\.empty|OptionalLong\[\d+\]) position: (?P<pos>\d+) "
    r"(?P<tstype>CreateTime|LogAppendTime): (?P<ts>-?\d+) size: (?P<size>\d+) magic: 2 "
    r"compresscodec: (?P<codec>none|gzip|snappy|lz4|zstd) crc: (?P<crc>\d+) isvalid: (?P<valid>true|false)$"
)
RECORD_LINE = re.compile(
    r"^\| offset: (?P<offset>\d+) (?P<tstype>CreateTime|LogAppendTime): (?P<ts>-?\d+) "
    r"keySize: (?P<ksize>-?\d+) valueSize: (?P<vsize>-?\d+) sequence: (?P<seq>-?\d+) "
    r"headerKeys: \[(?P<hkeys>[^\]]*)\](?P<rest>.*)$"
)


# ------------------------------------------------------------------------------------------------ fixtures


def _records(batch: int, n: int) -> list[RecordSpec]:
    return [
        RecordSpec(
            f"key-{batch}-{j}".encode(),
            f"value-{batch}-{j}".encode() * 3,
            [("trace", b"t"), ("src", None)] if j == 0 else (),
            NOW + 100 * batch + j,
        )
        for j in range(n)
    ]


def write_segment(
    directory: Path, *, batches: int = 8, per_batch: int = 5, index_interval_bytes: int = 100
) -> tuple[Path, list[BatchHeader], int]:
    """A cleanly closed one-segment partition: plain, lz4 and idempotent batches, then a COMMIT marker.

    Returns the partition dir, the batch headers as stored, and the number of records.
    """
    part = directory / "events-0"
    log = PartitionLog.open(part, LogConfig(index_interval_bytes=index_interval_bytes), now_ms=NOW)
    for i in range(batches):
        kwargs: dict[str, object] = {}
        if i % 3 == 1:
            kwargs["compression"] = CompressionType.LZ4
        if i == batches - 1:
            kwargs.update(producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0, is_transactional=True)
        log.append_as_leader(build_batch(_records(i, per_batch), **kwargs), leader_epoch=3, now_ms=NOW)  # type: ignore[arg-type]
    marker = build_control_batch(
        1, PRODUCER_ID, 0, 7, log.log_end_offset, NOW + 100 * batches, partition_leader_epoch=3
    )
    log.append_as_follower(marker)
    log.close()
    data = (part / f"{SEG}.log").read_bytes()
    headers = [h for _, h in iter_batch_headers(data)]
    return part, headers, batches * per_batch + 1


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(dump_log, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def segment(tmp_path: Path) -> tuple[Path, list[BatchHeader], int]:
    return write_segment(tmp_path)


# --------------------------------------------------------------------------------------------------- .log


def test_log_shallow_text_matches_kafka_format(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, _ = segment
    log_path = part / f"{SEG}.log"
    code, out, err = run("--files", str(log_path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dumping {log_path}"
    assert lines[1] == "Log starting offset: 0"
    batch_lines = lines[2:]
    assert len(batch_lines) == len(headers)
    position = 0
    for line, h in zip(batch_lines, headers):
        m = BATCH_LINE.match(line)
        assert m, line
        assert int(m["base"]) == h.base_offset and int(m["last"]) == h.last_offset
        assert int(m["count"]) == h.records_count
        assert int(m["pos"]) == position and int(m["size"]) == h.size
        assert int(m["crc"]) == h.crc and m["valid"] == "true"
        assert int(m["ple"]) == 3
        assert int(m["ts"]) == h.max_timestamp and m["tstype"] == "CreateTime"
        assert m["dh"] == "OptionalLong.empty"
        position += h.size
    codecs = [BATCH_LINE.match(line)["codec"] for line in batch_lines]  # type: ignore[index]
    assert codecs.count("lz4") == 3 and codecs.count("none") == len(headers) - 3
    txn = BATCH_LINE.match(batch_lines[-2])
    assert txn and txn["txn"] == "true" and txn["pid"] == str(PRODUCER_ID)
    assert (txn["bseq"], txn["lseq"], txn["pepoch"]) == ("0", "4", "0")
    control = BATCH_LINE.match(batch_lines[-1])
    assert control and control["ctl"] == "true" and control["count"] == "1"
    assert "key:" not in out and "| offset" not in out


def test_deep_iteration_shows_every_record(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _headers, n_records = segment
    for flag in ("--deep-iteration", "--deep"):
        code, out, err = run("--files", str(part / f"{SEG}.log"), flag)
        assert code == 0, err
        recs = [RECORD_LINE.match(line) for line in out.splitlines() if line.startswith("|")]
        assert all(recs)
        assert [int(m["offset"]) for m in recs] == list(range(n_records))  # type: ignore[index]
        first = recs[0]
        assert first and first["ts"] == str(NOW) and first["ksize"] == str(len(b"key-0-0"))
        assert first["vsize"] == str(len(b"value-0-0") * 3) and first["hkeys"] == "trace,src"
        assert first["seq"] == "-1" and first["rest"] == ""
        # the transactional batch (the last data batch) carries sequences 0..4
        txn_seqs = [m["seq"] for m in recs[-6:-1]]  # type: ignore[index]
        assert txn_seqs == ["0", "1", "2", "3", "4"]
        # the control record is rendered as Kafka does
        assert recs[-1] and recs[-1]["rest"] == " endTxnMarker: COMMIT coordinatorEpoch: 7"
        assert "key:" not in out and "payload:" not in out
        assert "Non-consecutive" not in err


def test_print_data_log_shows_keys_and_payloads(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _, n_records = segment
    code, out, _ = run("--files", str(part / f"{SEG}.log"), "--print-data-log")
    assert code == 0
    record_lines = [line for line in out.splitlines() if line.startswith("|")]
    assert len(record_lines) == n_records  # --print-data-log implies deep iteration
    assert record_lines[0].endswith(" key: key-0-0 payload: value-0-0value-0-0value-0-0")
    assert record_lines[7].endswith(" key: key-1-2 payload: value-1-2value-1-2value-1-2")  # lz4 batch
    # control records have no key/payload output (Kafka skips them)
    assert "key:" not in record_lines[-1]

    code, out, _ = run("--files", str(part / f"{SEG}.log"), "--print-data-log", "--skip-record-metadata")
    assert code == 0
    record_lines = [line for line in out.splitlines() if line.startswith("|")]
    assert record_lines[0] == "| key: key-0-0 payload: value-0-0value-0-0value-0-0"


def test_json_output(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, n_records = segment
    code, out, err = run("--files", str(part / f"{SEG}.log"), "--print-data-log", "--json")
    assert code == 0 and err == ""
    events = json_lines(out)
    assert events[0] == {"type": "file", "path": str(part / f"{SEG}.log")}
    assert events[1]["type"] == "log_start" and events[1]["start_offset"] == 0
    batches = [e for e in events if e["type"] == "batch"]
    records = [e for e in events if e["type"] == "record"]
    assert [b["base_offset"] for b in batches] == [h.base_offset for h in headers]
    assert all(b["is_valid"] for b in batches)
    assert batches[1]["compression"] == "lz4" and batches[0]["compression"] == "none"
    assert [r["offset"] for r in records] == list(range(n_records))
    assert base64.b64decode(records[3]["key_b64"]) == b"key-0-3"
    assert base64.b64decode(records[3]["payload_b64"]) == b"value-0-3" * 3
    assert records[0]["headers"] == [
        {"key": "trace", "value_b64": base64.b64encode(b"t").decode()},
        {"key": "src", "value_b64": None},
    ]
    assert records[-1]["control"] == {"type": "COMMIT", "type_id": 1, "coordinator_epoch": 7}
    assert events[-1] == {"type": "result", "files": 1, "problems": 0}


def test_max_bytes_limits_the_batches_read(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, _ = segment
    limit = headers[0].size + headers[1].size + 1  # two whole batches and one byte of the third
    code, out, _ = run("--files", str(part / f"{SEG}.log"), "--max-bytes", str(limit))
    assert code == 0
    assert len([line for line in out.splitlines() if line.startswith("baseOffset")]) == 2
    assert "invalid bytes" not in out


def test_truncated_log_reports_position_and_fails(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, _ = segment
    log_path = part / f"{SEG}.log"
    size = log_path.stat().st_size
    os.truncate(log_path, size - 5)
    last_batch_position = size - headers[-1].size
    code, out, err = run("--files", str(log_path))
    assert code == 1
    assert "Traceback" not in out + err
    assert len([line for line in out.splitlines() if line.startswith("baseOffset")]) == len(headers) - 1
    expected = headers[-1].size - 5
    assert (
        f"Found {expected} invalid bytes at the end of {SEG}.log (starting at position {last_batch_position})"
        in err
    )

    code, out, _ = run("--files", str(log_path), "--json")
    assert code == 1
    bad = [e for e in json_lines(out) if e["type"] == "invalid_bytes"]
    assert bad == [
        {"type": "invalid_bytes", "path": str(log_path), "position": last_batch_position, "bytes": expected}
    ]


def test_corrupt_length_and_crc(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, _ = segment
    log_path = part / f"{SEG}.log"
    data = bytearray(log_path.read_bytes())
    third = headers[0].size + headers[1].size
    # flip a byte inside the records of batch 0: the CRC no longer matches, but the dump goes on
    data[headers[0].size - 3] ^= 0xFF
    # a negative batch length at the third batch: nothing after it can be trusted
    struct.pack_into(">i", data, third + 8, -20)
    log_path.write_bytes(bytes(data))
    code, out, err = run("--files", str(log_path), "--deep-iteration")
    assert code == 1
    assert "Traceback" not in out + err
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert len(batch_lines) == 2
    assert batch_lines[0].endswith("isvalid: false") and batch_lines[1].endswith("isvalid: true")
    assert f"at position {third}: Found record size -20 smaller than minimum record overhead (14)" in err


def test_garbage_tail_of_a_few_bytes(tmp_path: Path) -> None:
    part, headers, _ = write_segment(tmp_path, batches=2)
    log_path = part / f"{SEG}.log"
    with open(log_path, "ab") as f:
        f.write(b"\x00" * 7)
    code, _, err = run("--files", str(log_path))
    assert code == 1
    assert (
        f"Found 7 invalid bytes at the end of {SEG}.log (starting at position {sum(h.size for h in headers)})"
        in err
    )


def test_log_larger_than_the_read_window(tmp_path: Path) -> None:
    """Batches straddle the 1 MiB pread window: every batch is still read whole and checked."""
    part = tmp_path / "big-0"
    log = PartitionLog.open(part, LogConfig(), now_ms=NOW)
    payload = os.urandom(70_000)
    for i in range(45):  # ~3 MiB
        log.append_as_leader(build_batch([(b"k", payload, (), NOW + i)]), now_ms=NOW)
    log.close()
    code, out, err = run("--files", str(part / f"{SEG}.log"), "--json")
    assert code == 0, err
    batches = [e for e in json_lines(out) if e["type"] == "batch"]
    assert len(batches) == 45 and all(b["is_valid"] for b in batches)
    assert batches[-1]["position"] + batches[-1]["size"] == (part / f"{SEG}.log").stat().st_size


# ------------------------------------------------------------------------------------------------- .index


def _index_entries(path: Path) -> list[tuple[int, int]]:
    return list(struct.iter_unpack(">ii", path.read_bytes()))


def test_index_dump_and_verification(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _headers, _ = segment
    index_path = part / f"{SEG}.index"
    entries = _index_entries(index_path)
    assert len(entries) >= 3  # index.interval.bytes=100: nearly every batch is indexed
    code, out, err = run("--files", str(index_path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dumping {index_path}"
    assert lines[1 : 1 + len(entries)] == [f"offset: {rel} position: {pos}" for rel, pos in entries]
    assert lines[-1] == f"Verified {len(entries)} entries of {index_path}: 0 mismatches"

    code, out, _ = run("--files", str(index_path), "--verify-index-only")
    assert code == 0 and "offset:" not in out


def test_index_verification_catches_a_wrong_entry(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, _ = segment
    index_path = part / f"{SEG}.index"
    entries = _index_entries(index_path)
    # point the second entry at the first batch (lastOffset 4) instead of its own batch
    rel, _ = entries[1]
    data = bytearray(index_path.read_bytes())
    struct.pack_into(">ii", data, 8, rel, 0)
    index_path.write_bytes(bytes(data))
    code, out, err = run("--files", str(index_path), "--verify-index-only")
    assert code == 1
    assert err.splitlines() == [
        f"Mismatches in :{index_path.absolute()}",
        f"  Index offset: {rel}, log offset: {headers[0].last_offset}",
    ]
    assert f"Verified {len(entries)} entries of {index_path}: 1 mismatches" in out

    code, out, _ = run("--files", str(index_path), "--json")
    assert code == 1
    mismatches = [e for e in json_lines(out) if e["type"] == "index_mismatch"]
    assert len(mismatches) == 1
    assert mismatches[0]["offset"] == rel and mismatches[0]["position"] == 0
    assert mismatches[0]["log_offset"] == headers[0].last_offset


def test_index_entry_pointing_into_the_middle_of_a_batch(
    segment: tuple[Path, list[BatchHeader], int],
) -> None:
    part, _, _ = segment
    index_path = part / f"{SEG}.index"
    rel, pos = _index_entries(index_path)[0]
    data = bytearray(index_path.read_bytes())
    struct.pack_into(">ii", data, 0, rel, pos + 5)
    index_path.write_bytes(bytes(data))
    code, out, err = run("--files", str(index_path))
    assert code == 1 and "Traceback" not in out + err
    assert f"  Index offset: {rel}, log offset: -1" in err


def test_preallocated_index_stops_at_zero_entries(tmp_path: Path) -> None:
    """An active segment's index is preallocated (10 MiB of zeros); only the written entries count."""
    part = tmp_path / "open-0"
    log = PartitionLog.open(part, LogConfig(index_interval_bytes=100), now_ms=NOW)
    for i in range(4):
        log.append_as_leader(build_batch(_records(i, 5)), now_ms=NOW)
    log.flush()
    index_path = part / f"{SEG}.index"
    time_index_path = part / f"{SEG}.timeindex"
    try:
        assert index_path.stat().st_size == 10 * 1024 * 1024
        code, out, err = run("--files", f"{index_path},{time_index_path}")
        assert code == 0, err
        assert len([line for line in out.splitlines() if line.startswith("offset:")]) == 3
        assert len([line for line in out.splitlines() if line.startswith("timestamp:")]) == 3
    finally:
        log.close()


def test_empty_index(tmp_path: Path) -> None:
    empty = tmp_path / f"{SEG}.index"
    empty.write_bytes(b"")
    zeros = tmp_path / f"{1:020d}.index"
    zeros.write_bytes(b"\x00" * 80)
    code, out, _ = run("--files", f"{empty},{zeros}")
    assert code == 0
    assert f"{empty} is empty." in out and f"{zeros} is empty." in out


def test_index_sanity_check(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _, _ = segment
    index_path = part / f"{SEG}.index"
    code, out, _ = run("--files", str(index_path), "--index-sanity-check")
    assert code == 0 and f"{index_path} passed sanity check." in out
    entries = _index_entries(index_path)
    # swap two entries: offsets go backwards
    data = bytearray(index_path.read_bytes())
    struct.pack_into(">iiii", data, 0, *entries[1], *entries[0])
    data += b"\x01\x02\x03"  # and a size that is not a multiple of 8
    index_path.write_bytes(bytes(data))
    code, out, err = run("--files", str(index_path), "--index-sanity-check")
    assert code == 1
    assert "passed sanity check" not in out
    assert "not a multiple of 8" in err and "does not increase" in err


def test_index_without_its_log(tmp_path: Path) -> None:
    index_path = tmp_path / f"{SEG}.index"
    index_path.write_bytes(struct.pack(">iiii", 3, 0, 9, 400))
    code, out, err = run("--files", str(index_path))
    assert code == 0
    assert "offset: 3 position: 0" in out and "entries not verified" in err
    code, _, err = run("--files", str(index_path), "--verify-index-only")
    assert code == 1 and "does not exist" in err


# --------------------------------------------------------------------------------------------- .timeindex


def test_time_index_dump_and_verification(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, _ = segment
    path = part / f"{SEG}.timeindex"
    entries = list(struct.iter_unpack(">qi", path.read_bytes()))
    assert entries
    by_last = {h.last_offset: h for h in headers}
    for ts, rel in entries:  # what the broker wrote satisfies Kafka's rule
        assert by_last[rel].max_timestamp == ts
    code, out, err = run("--files", str(path))
    assert code == 0, err
    assert [line for line in out.splitlines() if line.startswith("timestamp:")] == [
        f"timestamp: {ts} offset: {rel}" for ts, rel in entries
    ]


def test_time_index_verification_catches_bad_entries(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _headers, _ = segment
    path = part / f"{SEG}.timeindex"
    entries = list(struct.iter_unpack(">qi", path.read_bytes()))
    assert len(entries) >= 3
    data = bytearray(path.read_bytes())
    ts0, rel0 = entries[0]
    ts2, rel2 = entries[2]
    struct.pack_into(">qi", data, 0, ts0 + 1, rel0)  # timestamp does not match the batch
    struct.pack_into(">qi", data, 24, ts2, rel2 - 1)  # offset that is not a batch's last offset
    path.write_bytes(bytes(data))
    code, out, err = run("--files", str(path), "--verify-index-only")
    assert code == 1
    assert "timestamp:" not in out
    lines = err.splitlines()
    assert f"Found timestamp mismatch in :{path.absolute()}" in lines
    assert f"  Index timestamp: {ts0 + 1}, log timestamp: {ts0}" in lines
    assert "The following indexed offsets are not found in the log." in lines
    assert f"Indexed offset: {rel2 - 1}, found log offset: {rel2}" in lines


def test_time_index_out_of_order(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _, _ = segment
    path = part / f"{SEG}.timeindex"
    entries = list(struct.iter_unpack(">qi", path.read_bytes()))
    data = bytearray(path.read_bytes())
    # make entry 1 claim the timestamp of entry 0 (not increasing)
    struct.pack_into(">qi", data, 12, entries[0][0], entries[1][1])
    path.write_bytes(bytes(data))
    code, _, err = run("--files", str(path))
    assert code == 1
    assert f"Found out of order timestamp in {path.absolute()}" in err
    assert f"  Index timestamp: {entries[0][0]}, Previously indexed timestamp: {entries[0][0]}" in err


# ---------------------------------------------------------------------------------------------- .snapshot


def _snapshot(entries: list[tuple[int, int, int, int, int, int, int, int]]) -> bytes:
    """ProducerSnapshot v1, written here from the format description (not with the storage code)."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    crc = crc32c(body)
    return struct.pack(">hI", 1, crc) + body


def test_producer_snapshot(tmp_path: Path) -> None:
    path = tmp_path / f"{100:020d}.snapshot"
    # producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, txnFirstOffset
    path.write_bytes(_snapshot([(1000, 2, 14, 99, 4, NOW, -1, -1), (1001, 0, 3, 120, 3, NOW + 5, 7, 110)]))
    code, out, err = run("--files", str(path))
    assert code == 0, err
    assert out.splitlines()[1:] == [
        f"producerId: 1000 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {NOW} firstSequence: 10 lastSequence: 14 lastOffset: 99 offsetDelta: 4 timestamp: {NOW}",
        f"producerId: 1001 producerEpoch: 0 coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong[110] "
        f"lastTimestamp: {NOW + 5} firstSequence: 0 lastSequence: 3 lastOffset: 120 offsetDelta: 3 "
        f"timestamp: {NOW + 5}",
    ]
    code, out, _ = run("--files", str(path), "--json")
    entries = [e for e in json_lines(out) if e["type"] == "producer_snapshot_entry"]
    assert entries[1]["current_txn_first_offset"] == 110 and entries[0]["first_sequence"] == 10


def test_producer_snapshot_written_by_the_storage_layer(tmp_path: Path) -> None:
    part = tmp_path / "idem-0"
    log = PartitionLog.open(part, LogConfig(), now_ms=NOW)
    from tidelog.storage.producer_state import ProducerStateManager

    log.producer_state = ProducerStateManager(part)
    log.append_as_leader(
        build_batch(_records(0, 3), producer_id=77, producer_epoch=1, base_sequence=0), now_ms=NOW
    )
    snapshot = log.producer_state.take_snapshot(log.log_end_offset)
    log.close()
    code, out, err = run("--files", str(snapshot))
    assert code == 0, err
    assert "producerId: 77 producerEpoch: 1 " in out and "lastSequence: 2 lastOffset: 2 offsetDelta: 2" in out


def test_corrupt_snapshot(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.snapshot"
    data = bytearray(_snapshot([(1, 0, 0, 0, 0, NOW, -1, -1)]))
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    code, out, err = run("--files", str(path))
    assert code == 1 and "Traceback" not in out + err
    assert "Snapshot is corrupt (CRC is no longer valid)" in err
    path.write_bytes(struct.pack(">hIi", 9, 0, 0))
    code, _, err = run("--files", str(path))
    assert code == 1 and "unknown file version 9" in err


# -------------------------------------------------------------------------------------------- other files


def test_txn_index(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 5, 10, 20, 9) + struct.pack(">hqqqq", 0, 6, 30, 31, 30))
    code, out, _ = run("--files", str(path))
    assert code == 0
    assert out.splitlines()[1:] == [
        "version: 0 producerId: 5 firstOffset: 10 lastOffset: 20 lastStableOffset: 9",
        "version: 0 producerId: 6 firstOffset: 30 lastOffset: 31 lastStableOffset: 30",
    ]


def test_a_transactional_log_and_its_txnindex(tmp_path: Path) -> None:
    """The files PartitionLog writes for an aborted and a committed transaction, as kafka-dump-log.sh shows them."""
    d = tmp_path / "t-0"
    lg = PartitionLog.open(d, LogConfig(), producer_state=ProducerStateManager(d), now_ms=NOW)
    txn = build_batch(_records(0, 2), producer_id=PRODUCER_ID, producer_epoch=1, base_sequence=0,
                      is_transactional=True)
    lg.append_as_leader(txn, now_ms=NOW)  # 0-1
    lg.append_txn_marker(PRODUCER_ID, 1, 3, commit=False, now_ms=NOW)  # 2
    lg.append_as_leader(build_batch(_records(1, 1), producer_id=PRODUCER_ID, producer_epoch=1, base_sequence=2,
                                    is_transactional=True), now_ms=NOW)  # 3
    lg.append_txn_marker(PRODUCER_ID, 1, 3, commit=True, now_ms=NOW)  # 4
    lg.close()
    code, out, _ = run("--files", str(d / f"{SEG}.txnindex"))
    assert code == 0
    assert out.splitlines()[1:] == [f"version: 0 producerId: {PRODUCER_ID} firstOffset: 0 lastOffset: 2 lastStableOffset: 3"]
    code, out, _ = run("--files", str(d / f"{SEG}.log"), "--deep-iteration")
    assert code == 0
    markers = [m.group("rest") for m in map(RECORD_LINE.match, out.splitlines()) if m and m.group("rest")]
    assert markers == [" endTxnMarker: ABORT coordinatorEpoch: 3", " endTxnMarker: COMMIT coordinatorEpoch: 3"]
    batches = [m for m in map(BATCH_LINE.match, out.splitlines()) if m]
    assert [(b["base"], b["txn"], b["ctl"]) for b in batches] == [
        ("0", "true", "false"), ("2", "true", "true"), ("3", "true", "false"), ("4", "true", "true")]


def test_unknown_and_missing_files(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hi")
    code, _, err = run("--files", str(other))
    assert code == 0 and f"Ignoring unknown file {other}" in err
    missing = tmp_path / f"{SEG}.log"
    code, out, err = run("--files", str(missing))
    assert code == 1 and "Traceback" not in out + err and "No such file" in err


def test_several_files_in_one_run(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, _, _ = segment
    files = [part / f"{SEG}{suffix}" for suffix in (".log", ".index", ".timeindex")]
    code, out, _ = run("--files", ",".join(map(str, files)), "--json")
    assert code == 0
    events = json_lines(out)
    assert [e["path"] for e in events if e["type"] == "file"] == [str(f) for f in files]
    assert events[-1] == {"type": "result", "files": 3, "problems": 0}


def test_as_a_subprocess(segment: tuple[Path, list[BatchHeader], int]) -> None:
    part, headers, n_records = segment
    log_path = part / f"{SEG}.log"
    cmd = [sys.executable, "-m", "tidelog.cli.main", "dump-log", "--files", str(log_path), "--deep"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Dumping {log_path}"
    assert sum(1 for line in lines if BATCH_LINE.match(line)) == len(headers)
    assert sum(1 for line in lines if RECORD_LINE.match(line)) == n_records

    os.truncate(log_path, log_path.stat().st_size - 1)
    proc = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    events = json_lines(proc.stdout)
    assert events[-1]["problems"] == 1
    assert any(e["type"] == "invalid_bytes" for e in events)


def test_help_lists_kafka_option_names() -> None:
    result = CliRunner().invoke(dump_log, ["--help"])
    assert result.exit_code == 0
    for name in (
        "--files",
        "--deep-iteration",
        "--deep",
        "--print-data-log",
        "--verify-index-only",
        "--index-sanity-check",
        "--max-message-size",
        "--max-bytes",
        "--json",
    ):
        assert name in result.output
    assert CliRunner().invoke(dump_log, []).exit_code == 2


def test_null_keys_and_values(tmp_path: Path) -> None:
    part = tmp_path / "nulls-0"
    log = PartitionLog.open(part, LogConfig(), now_ms=NOW)
    log.append_as_leader(build_batch([(None, b"only-value", (), NOW), (b"tomb", None, (), NOW)]), now_ms=NOW)
    log.close()
    path = str(part / f"{SEG}.log")
    code, out, _ = run("--files", path, "--print-data-log")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("|")]
    assert "keySize: -1 valueSize: 10" in lines[0] and lines[0].endswith(" payload: only-value")
    assert "key:" not in lines[0]
    assert "keySize: 4 valueSize: -1" in lines[1] and lines[1].endswith(" key: tomb")
    code, out, _ = run("--files", path, "--print-data-log", "--skip-record-metadata")
    assert [line for line in out.splitlines() if line.startswith("|")] == [
        "| payload: only-value",
        "| key: tomb",
    ]
    code, out, _ = run("--files", path, "--print-data-log", "--json")
    records = [e for e in json_lines(out) if e["type"] == "record"]
    assert "key" not in records[0] and records[0]["key_size"] == -1
    assert "payload" not in records[1] and records[1]["value_size"] == -1
