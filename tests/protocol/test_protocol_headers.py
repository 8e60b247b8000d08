"""Headers, version policy, tagged fields, zero-copy records."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

import pytest

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import (
    ACCEPTED_MIN,
    ACCEPTED_VERSIONS,
    GROUP_API_VERSIONS,
    SUPPORTED_VERSIONS,
    EncodeError,
    InvalidRequestError,
    RecordsChunks,
    UnknownApiKeyError,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    spec_versions,
)


def raw_request(api_key: int, version: int, corr: int, client_id: bytes | None, rest: bytes) -> bytes:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id
    return struct.pack(">hhi", api_key, version, corr) + cid + rest


def test_request_header_v1_layout() -> None:
    # Metadata v4 (non-flexible): header v1, body: topics null array, allow_auto_topic_creation bool
    frame = raw_request(3, 4, 77, b"cli", b"\xff\xff\xff\xff\x01")
    header, body = decode_request(frame)
    assert header == (3, 4, 77, "cli", 1)
    assert body == {"topics": None, "allow_auto_topic_creation": True}


def test_request_header_v2_client_id_stays_non_compact() -> None:
    # ApiVersions v3 is flexible: header v2 = v1 + tagged fields; client_id keeps its int16 length.
    body = b"\x06rdkaf" + b"\x052.16" + b"\x00"  # compact strings (len+1), empty tags
    frame = raw_request(18, 3, 5, b"rdkafka", b"\x00" + body)
    header, decoded = decode_request(frame)
    assert header.header_version == 2 and header.client_id == "rdkafka"
    assert decoded == {"client_software_name": "rdkaf", "client_software_version": "2.16"}
    # header tagged fields with unknown tags are skipped
    frame = raw_request(18, 3, 5, None, b"\x01\x07\x02zz" + body)
    header, decoded = decode_request(frame)
    assert header.client_id is None and decoded["client_software_version"] == "2.16"
    assert encode_request(18, 3, 5, "rdkafka", decoded)[4:] == raw_request(18, 3, 5, b"rdkafka", b"\x00" + body)


def test_response_header_v0_v1() -> None:
    # Metadata v8: header v0; v9: header v1 (correlation id + empty tags)
    v8 = b"".join(encode_response(3, 8, 0x01020304, {}))
    assert v8[4:8] == b"\x01\x02\x03\x04" and v8[8:12] == b"\x00\x00\x00\x00"  # throttle_time_ms follows
    v9 = b"".join(encode_response(3, 9, 0x01020304, {}))
    assert v9[4:8] == b"\x01\x02\x03\x04" and v9[8] == 0


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_response_header_is_always_v0(version: int) -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 11}]}
    frame = b"".join(encode_response(18, version, 9, body))
    assert frame[4:8] == b"\x00\x00\x00\x09"
    assert frame[8:10] == b"\x00\x00"  # error_code straight after the correlation id, no tag byte
    corr, decoded = decode_response(18, version, frame[4:])
    assert corr == 9 and decoded["api_keys"][0]["max_version"] == 11


def test_api_versions_unsupported_answer_in_v0() -> None:
    # A client asking ApiVersions v5 (newer than the broker's 4) gets UnsupportedVersionError carrying the
    # correlation id; the broker answers with a v0 body (error 35 + our ranges).
    frame = raw_request(18, 5, 31, b"java", b"\x00\x00\x00")
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request(frame)
    assert (ei.value.api_key, ei.value.version, ei.value.correlation_id) == (18, 5, 31)
    keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in SUPPORTED_VERSIONS.items()]
    out = b"".join(encode_response(18, 0, 31, {"error_code": 35, "api_keys": keys}))
    corr, body = decode_response(18, 0, out[4:])
    assert corr == 31 and body["error_code"] == 35 and len(body["api_keys"]) == len(keys)


def test_empty_tag_sections_when_defaults() -> None:
    # Fetch v12 partition with only defaults for the tagged fields: every tag section is one zero byte.
    body = {
        "responses": [{"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 5, "records": b""}]}]
    }
    frame = b"".join(encode_response(1, 12, 1, body))
    expected = (
        b"\x00\x00\x00\x01" + b"\x00"  # header v1
        + b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x00"  # throttle, error, session id
        + b"\x02" + b"\x02t"  # 1 topic, compact "t"
        + b"\x02" + b"\x00\x00\x00\x00" + b"\x00\x00"  # 1 partition: index, error
        + struct.pack(">qqq", 5, -1, -1)  # hwm, lso, log start
        + b"\x01"  # aborted_transactions: empty compact array (non-null default)
        + struct.pack(">i", -1)  # preferred read replica
        + b"\x01"  # records: empty
        + b"\x00"  # partition tags
        + b"\x00"  # topic tags
        + b"\x00"  # body tags
    )
    assert frame[4:] == expected
    assert struct.unpack(">i", frame[:4])[0] == len(expected)


def test_tagged_field_written_only_when_not_default() -> None:
    part = {"partition_index": 0, "records": b"", "current_leader": {"leader_id": 3, "leader_epoch": 7}}
    frame = b"".join(encode_response(1, 12, 1, {"responses": [{"topic": "t", "partitions": [part]}]}))
    # tag section of the partition: 1 field, tag 1, size 9: leader_id, leader_epoch, the struct's own tags
    assert b"\x01\x01\x09" + struct.pack(">ii", 3, 7) + b"\x00" in frame
    _, body = decode_response(1, 12, frame[4:])
    p = body["responses"][0]["partitions"][0]
    assert p["current_leader"] == {"leader_id": 3, "leader_epoch": 7}
    assert p["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    # a partial dict equal to the defaults is not written
    part["current_leader"] = {"leader_id": -1}
    frame2 = b"".join(encode_response(1, 12, 1, {"responses": [{"topic": "t", "partitions": [part]}]}))
    assert len(frame2) == len(frame) - 11


def test_unknown_tags_in_body_are_skipped() -> None:
    # ApiVersions v3 request body with an unknown tag 9 carrying 3 bytes
    frame = raw_request(18, 3, 1, b"c", b"\x00" + b"\x02a" + b"\x02b" + b"\x01\x09\x03xyz")
    _, body = decode_request(frame)
    assert body == {"client_software_name": "a", "client_software_version": "b"}


def test_produce_v0_to_v2_advertised_but_rejected() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE] == (0, 13)  # v13: topics by id (Kafka 4.1)
    assert ACCEPTED_VERSIONS[ApiKey.PRODUCE] == (ACCEPTED_MIN[ApiKey.PRODUCE], 13) == (3, 13)
    for v in (0, 1, 2, 14):
        with pytest.raises(UnsupportedVersionError) as ei:
            decode_request(raw_request(0, v, 8, b"c", b""))
        assert ei.value.correlation_id == 8


def test_unknown_api_key() -> None:
    with pytest.raises(UnknownApiKeyError):
        decode_request(raw_request(999, 0, 1, b"c", b""))
    # group APIs have codecs but are not accepted until the broker adds them
    with pytest.raises(UnknownApiKeyError):
        decode_request(raw_request(ApiKey.FIND_COORDINATOR, 1, 1, b"c", b"\x00\x01g\x00"))
    _, body = decode_request(
        raw_request(ApiKey.FIND_COORDINATOR, 1, 1, b"c", b"\x00\x01g\x00"),
        {**ACCEPTED_VERSIONS, **GROUP_API_VERSIONS},
    )
    assert body == {"key": "g", "key_type": 0}


def test_supported_versions_within_spec_files() -> None:
    for k, (lo, hi) in {**ACCEPTED_VERSIONS, **GROUP_API_VERSIONS}.items():
        slo, shi = spec_versions(k)
        assert slo <= lo <= hi <= shi, ApiKey(k).name


def test_aiokafka_and_librdkafka_versions_are_accepted() -> None:
    # aiokafka 0.14: ApiVersions v0 first, Metadata v5, Produce v8, Fetch v11, ListOffsets v5 ...
    for k, v in [(18, 0), (3, 5), (0, 8), (1, 11), (2, 5), (19, 3), (20, 3), (21, 2), (32, 2), (37, 1)]:
        lo, hi = ACCEPTED_VERSIONS[k]
        assert lo <= v <= hi
    # librdkafka: OffsetForLeaderEpoch exactly v2, InitProducerId up to 4
    assert ACCEPTED_VERSIONS[ApiKey.OFFSET_FOR_LEADER_EPOCH][0] == 2
    lo, hi = ACCEPTED_VERSIONS[ApiKey.INIT_PRODUCER_ID]
    assert lo == 0 and hi >= 4  # Kafka 4.1 serves 0-5


def test_produce_records_are_zero_copy_views_of_the_frame() -> None:
    records = bytes(range(256)) * 64
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": records}]}]}
    for v in (3, 8, 9, 11, 12):
        frame = bytearray(encode_request(0, v, 1, "c", body)[4:])
        _, decoded = decode_request(frame)
        rec = decoded["topic_data"][0]["partition_data"][0]["records"]
        assert isinstance(rec, memoryview) and rec.obj is frame
        assert rec == records
        # in-place stamping of the frame is visible through the view (no copy was made)
        off = bytes(frame).index(records)
        frame[off] = 0xAB
        assert rec[0] == 0xAB


@dataclass
class FileRegion:
    fd: int
    position: int
    length: int


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_records_chunks_pass_through(version: int) -> None:
    r1, r2 = FileRegion(5, 100, 3000), FileRegion(5, 9000, 50)
    head = b"H" * 10
    body = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "records": RecordsChunks([head, r1])},
                    {"partition_index": 1, "records": None},
                    {"partition_index": 2, "records": RecordsChunks([r2], 50)},
                ],
            }
        ]
    }
    chunks = encode_response(1, version, 3, body)
    assert chunks[2] is r1 and chunks[1] is head and chunks[4] is r2
    assert all(isinstance(c, bytes) for i, c in enumerate(chunks) if i not in (1, 2, 4))
    total = sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks)
    assert struct.unpack(">i", chunks[0][:4])[0] == total - 4
    # substitute the file contents and check the frame decodes
    materialised = b"".join(b"R" * c.length if isinstance(c, FileRegion) else c for c in chunks)
    _, decoded = decode_response(1, version, materialised[4:])
    parts = decoded["responses"][0]["partitions"]
    assert bytes(parts[0]["records"]) == head + b"R" * 3000
    assert parts[1]["records"] is None
    assert bytes(parts[2]["records"]) == b"R" * 50


def test_large_bytes_records_not_copied() -> None:
    big = b"z" * (1 << 20)
    body = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": big}]}]}
    chunks = encode_response(1, 12, 3, body)
    assert any(c is big for c in chunks)


def test_missing_fields_take_defaults_and_types_are_checked() -> None:
    _, body = decode_response(0, 9, b"".join(encode_response(0, 9, 1, {}))[4:])
    assert body == {"responses": [], "throttle_time_ms": 0}
    with pytest.raises(EncodeError):
        encode_response(0, 9, 1, {"throttle_time_ms": "soon"})
    with pytest.raises(EncodeError):
        encode_response(0, 9, 1, {"throttle_time_ms": 2**40})
    # a non-ignorable field this version cannot carry (Fetch session_id appears in v7)
    with pytest.raises(EncodeError):
        encode_response(1, 6, 1, {"session_id": 5})
    encode_response(1, 6, 1, {"session_id": 0})  # its default is fine


def test_uuid_fields() -> None:
    tid = uuid.uuid4()
    body = {"topics": [{"name": "t", "topic_id": tid, "partitions": []}]}
    _, decoded = decode_response(3, 12, b"".join(encode_response(3, 12, 1, body))[4:])
    assert decoded["topics"][0]["topic_id"] == tid
    _, decoded = decode_response(3, 12, b"".join(encode_response(3, 12, 1, {"topics": [{"name": "t"}]}))[4:])
    assert decoded["topics"][0]["topic_id"] == uuid.UUID(int=0)


def test_invalid_utf8_is_invalid_request() -> None:
    frame = raw_request(3, 4, 1, b"c", b"\x00\x00\x00\x01" + b"\x00\x02\xff\xfe" + b"\x01")
    with pytest.raises(InvalidRequestError) as ei:
        decode_request(frame)
    assert ei.value.correlation_id == 1


def test_empty_arrays_equal_their_default() -> None:
    # Produce v10 response: node_endpoints is a tagged array; [] is its default and is not written
    assert encode_response(0, 10, 1, {"node_endpoints": []}) == encode_response(0, 10, 1, {})
    _, body = decode_response(0, 10, b"".join(encode_response(0, 10, 1, {}))[4:])
    assert body["node_endpoints"] == [] and isinstance(body["node_endpoints"], list)
    nodes = [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]
    frame = encode_response(0, 10, 1, {"node_endpoints": nodes})
    assert decode_response(0, 10, b"".join(frame)[4:])[1]["node_endpoints"] == nodes
    # Fetch v12 cannot carry node_endpoints (v16+), but an empty list is the default, so it is fine
    encode_response(1, 12, 1, {"node_endpoints": []})
    with pytest.raises(EncodeError):
        encode_response(1, 12, 1, {"node_endpoints": nodes})
