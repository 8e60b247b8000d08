"""Bad input against a real ``tidelog serve``, over raw sockets with frames built by ``tidelog.protocol.codec``.

Every case checks three things: the Kafka answer (an error code, or a closed connection where Kafka closes it)
arrives within a second; a second, well-behaved client on the same broker keeps being served during and after;
acknowledged data (a witness topic written before the module ran) is intact afterwards. Produce rejections also
check that nothing was written (the log end offset is unchanged and the next good batch lands right after).

Framing basics already covered by tests/broker/test_server_framing.py (negative sizes, client-id overflow,
unknown API key, unsupported Metadata version, the basic KIP-511 answer) are not repeated; here the lies are
inside the body, and every rejection is timed.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import helpers as h
import pytest

from tidelog.broker.group.records import OffsetValue, encode_offset_key, encode_offset_value
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.records import build_batch, crc32c

pytestmark = pytest.mark.integration

MAX_REQUEST = 65536
MAX_MESSAGE = 10_000
WITNESS = "witness"
WITNESS_VALUES = [f"acked-{i}".encode() for i in range(20)]


@pytest.fixture(scope="module")
def bb(broker_factory: Any) -> Any:
    """A broker with small request/message limits and a witness topic of acknowledged data."""
    b = broker_factory({"socket.request.max.bytes": str(MAX_REQUEST), "message.max.bytes": str(MAX_MESSAGE)})
    delivered = h.confluent_produce(b.bootstrap, WITNESS, [{"value": v, "key": b"w"} for v in WITNESS_VALUES],
                                    acks="all")
    assert [m.offset() for m in delivered] == list(range(len(WITNESS_VALUES)))
    return b


@pytest.fixture()
def good(bb: Any) -> Any:
    """A well-behaved client connected before the bad input and checked after it."""
    with h.RawClient(bb.port) as c:
        assert c.request(h.API_VERSIONS, 3, {"client_software_name": "good", "client_software_version": "1"})[
            "error_code"] == 0
        yield c
        # the broker still answers this long-lived connection and new ones, and the witness data is intact
        assert c.request(h.API_VERSIONS, 2, {})["error_code"] == 0
    assert bb.running, "broker process died"
    assert h.api_versions_ok(bb.port)
    with h.RawClient(bb.port) as c:
        p = h.fetch_raw(c, WITNESS, 0, 0)
        assert p["error_code"] == 0 and p["high_watermark"] == len(WITNESS_VALUES)
        from tidelog.records import decode_batches

        values = [r.value for _, _, recs in decode_batches(bytes(p["records"])) for r in recs]
        assert values == WITNESS_VALUES


def _topic(client: Any, prefix: str) -> str:
    name = h.new_topic(prefix)
    assert h.create_topic_raw(client, name)["error_code"] == 0
    return name


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _recrc(batch: bytes | bytearray) -> bytes:
    b = bytearray(batch)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def _timed_produce(client: Any, topic: str, records: bytes, **kw: Any) -> dict:
    t0 = time.monotonic()
    pr = h.produce_raw(client, topic, 0, records, **kw)
    assert time.monotonic() - t0 < 1.0, "answer took more than a second"
    return pr


# --------------------------------------------------------------------------------------------- framing / sizes


def test_frame_larger_than_socket_request_max_bytes_closes_within_a_second(bb: Any, good: Any) -> None:
    with h.RawClient(bb.port) as bad:
        # announce MAX_REQUEST + 1 bytes and keep sending a body: the broker must not wait for (or buffer) it
        bad.send(struct.pack(">i", MAX_REQUEST + 1) + encode_request(h.API_VERSIONS, 0, 1, "big", {})[4:])
        took = bad.assert_closed_within(1.0)
    assert took < 1.0
    assert good.request(h.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})["brokers"]


def test_frame_exactly_at_the_limit_is_served(bb: Any, good: Any) -> None:
    topic = _topic(good, "atlimit")
    with h.RawClient(bb.port) as c:
        # a produce whose frame is exactly socket.request.max.bytes: the limit is inclusive, as in Kafka. The
        # batch inside is above max.message.bytes, so the broker must read the whole frame and answer that.
        def frame_of(n: int) -> bytes:
            return encode_request(h.PRODUCE, 7, 1, c.client_id, h.produce_body(topic, 0, build_batch([(None, b"v" * n)])))

        n = MAX_REQUEST - (len(frame_of(0)) - 4)
        for _ in range(10):  # varint widths shift by a byte or two: converge in a few steps
            size = len(frame_of(n)) - 4
            if size == MAX_REQUEST:
                break
            n += MAX_REQUEST - size
        frame = frame_of(n)
        assert len(frame) - 4 == MAX_REQUEST
        c.send(frame)
        cid, resp = decode_response(h.PRODUCE, 7, c.recv_frame())
        assert cid == 1
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == h.MESSAGE_TOO_LARGE
    assert h.log_end_offset(bb.port, topic) == 0


def test_truncated_request_body_then_close(bb: Any, good: Any) -> None:
    frame = encode_request(h.METADATA, 9, 1, "trunc", {"topics": None, "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False})
    with h.RawClient(bb.port) as bad:
        bad.send(frame[: len(frame) // 2])
        bad.sock.shutdown(1)  # half-close: the broker sees EOF mid-frame and must drop the connection
        bad.assert_closed_within(1.0)


def _produce_v7_with_records_length(topic: bytes, declared: int, actual: bytes) -> bytes:
    return (struct.pack(">hhih", h.PRODUCE, 7, 3, -1) + struct.pack(">hhi", -1, -1, 5000) + struct.pack(">i", 1)
            + struct.pack(">h", len(topic)) + topic + struct.pack(">i", 1) + struct.pack(">i", 0)
            + struct.pack(">i", declared) + actual)


@pytest.mark.parametrize(
    "payload",
    [
        # Metadata v1: one topic whose name claims 30000 bytes
        struct.pack(">hhih", h.METADATA, 1, 3, -1) + struct.pack(">i", 1) + struct.pack(">h", 30000) + b"abc",
        # Metadata v1: a non-nullable topic name with a negative length other than -1
        struct.pack(">hhih", h.METADATA, 1, 3, -1) + struct.pack(">i", 1) + struct.pack(">h", -7),
        # Metadata v9 (flexible): compact array length (uvarint) far beyond the frame
        struct.pack(">hhih", h.METADATA, 9, 3, -1) + b"\x00" + b"\xff\xff\xff\x7f" + b"\x00\x00\x00",
        # Produce v7: records length beyond the frame
        _produce_v7_with_records_length(b"t", 1_000_000, b"\x00" * 70),
        # ApiVersions v3: header tagged field whose size lies
        struct.pack(">hhih", h.API_VERSIONS, 3, 3, 1) + b"x" + b"\x01\x00" + b"\xe8\x07" + b"\x00" * 10,
        # ListOffsets v1: partitions array count of 2^31-1
        struct.pack(">hhih", h.LIST_OFFSETS, 1, 3, -1) + struct.pack(">i", -1) + struct.pack(">i", 1)
        + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0x7FFFFFFF),
        # unknown API key with a plausible body
        struct.pack(">hhih", 32000, 0, 3, -1) + b"\x00" * 32,
        # Fetch v4 is the minimum: v3 is below the supported range -> Kafka closes the connection
        struct.pack(">hhih", h.FETCH, 3, 3, -1) + b"\x00" * 40,
        # Produce v13+ is beyond the advertised maximum
        struct.pack(">hhih", h.PRODUCE, 13, 3, -1) + b"\x00" * 40,
    ],
    ids=["string-len", "string-negative", "compact-array-len", "records-len",
         "tagged-size", "array-count", "unknown-api", "fetch-v3", "produce-v13"],
)
def test_lying_lengths_and_unsupported_requests_close_within_a_second(bb: Any, good: Any, payload: bytes) -> None:
    with h.RawClient(bb.port) as bad:
        bad.send(_frame(payload))
        bad.assert_closed_within(1.0)


def test_api_versions_unsupported_version_with_garbage_body(bb: Any, good: Any) -> None:
    """KIP-511: an ApiVersions version the broker does not know is answered in v0 whatever the body holds."""
    with h.RawClient(bb.port) as c:
        payload = struct.pack(">hhih", h.API_VERSIONS, 127, 42, 3) + b"abc" + b"\x00" + bytes(range(200))
        t0 = time.monotonic()
        c.send(_frame(payload))
        cid, body = decode_response(h.API_VERSIONS, 0, c.recv_frame())
        assert time.monotonic() - t0 < 1.0
        assert cid == 42 and body["error_code"] == h.UNSUPPORTED_VERSION
        keys = {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}
        assert {h.PRODUCE, h.FETCH, h.LIST_OFFSETS, h.METADATA, h.API_VERSIONS} <= set(keys)
        assert keys[h.API_VERSIONS] == (0, 4)
        # the connection stays open for the retry at a supported version
        assert c.request(h.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"})[
            "error_code"] == 0


# ------------------------------------------------------------------------------------------------ topic names


@pytest.mark.parametrize("name", ["bad name!", "a" * 250, ".", "..", "x/y", "tab\tname", "ünïcode"])
def test_create_topics_invalid_name(bb: Any, good: Any, name: str) -> None:
    t0 = time.monotonic()
    resp = h.create_topic_raw(good, name)
    assert time.monotonic() - t0 < 1.0
    assert resp["error_code"] == h.INVALID_TOPIC_EXCEPTION, resp
    assert not (bb.data_dir / f"{name}-0").exists() if "/" not in name else True


@pytest.mark.parametrize("name", ["bad name!", "a" * 250, "..", "semi;colon"])
def test_metadata_auto_create_invalid_name(bb: Any, good: Any, name: str) -> None:
    for version in (4, 9, 12):
        body = {"topics": [{"name": name}], "allow_auto_topic_creation": True,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        topics = good.request(h.METADATA, version, body)["topics"]
        assert [(t["name"], t["error_code"]) for t in topics] == [(name, h.INVALID_TOPIC_EXCEPTION)]
    listed = good.request(h.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})["topics"]
    assert name not in {t["name"] for t in listed}


def test_produce_to_invalid_topic_name_creates_nothing(bb: Any, good: Any) -> None:
    # Kafka does not auto-create on Produce: an unknown (here: also invalid) topic is UNKNOWN_TOPIC_OR_PARTITION
    pr = _timed_produce(good, "bad name!", build_batch([(b"k", b"v")]))
    assert pr["error_code"] == h.UNKNOWN_TOPIC_OR_PARTITION
    assert not (bb.data_dir / "bad name!-0").exists()


def test_produce_to_an_internal_topic_is_refused(bb: Any, good: Any) -> None:
    """A client cannot forge a group's committed offset by producing into __consumer_offsets (Kafka:
    INVALID_TOPIC_EXCEPTION "Cannot append to internal topic", unless the client id is AdminUtils' __admin_client)."""
    key = encode_offset_key("victim-group", "some-topic", 0)
    batch = build_batch([(key, encode_offset_value(OffsetValue(999)))])
    for internal in ("__consumer_offsets", "__transaction_state"):
        pr = h.produce_raw(good, internal, 0, batch)
        assert pr["error_code"] == h.INVALID_TOPIC_EXCEPTION, pr
        assert pr["error_message"] == f"Cannot append to internal topic {internal}"
    assert not any(p.name.startswith("__transaction_state") for p in bb.data_dir.iterdir())
    # a user topic whose name merely starts with "__" is an ordinary topic (Kafka's Topic.isInternal)
    name = h.new_topic("__user")
    assert h.create_topic_raw(good, name, 1)["error_code"] == h.NONE
    assert h.produce_raw(good, name, 0, batch)["error_code"] == h.NONE
    listed = good.request(h.METADATA, 9, {"topics": [{"name": name}], "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})["topics"]
    assert listed[0]["is_internal"] is False


# --------------------------------------------------------------------------------------------- produce batches


def _assert_rejected_and_nothing_written(client: Any, topic: str, records: bytes, expected: set[int]) -> dict:
    leo = h.log_end_offset(client_port(client), topic)
    pr = _timed_produce(client, topic, records)
    assert pr["error_code"] in expected, pr
    assert pr["base_offset"] == -1
    assert h.log_end_offset(client_port(client), topic) == leo
    # the partition is still writable and the next good batch takes exactly the next offset
    ok = h.produce_raw(client, topic, 0, build_batch([(b"after", b"ok")]))
    assert ok["error_code"] == 0 and ok["base_offset"] == leo
    return pr


def client_port(client: Any) -> int:
    return client.sock.getpeername()[1]


@pytest.fixture()
def topic(good: Any) -> str:
    name = _topic(good, "bad")
    assert h.produce_raw(good, name, 0, build_batch([(b"k", b"first")]))["base_offset"] == 0
    return name


@pytest.mark.parametrize("where", ["last-byte", "attributes", "record-count", "base-timestamp"])
def test_crc_failure_is_corrupt_message(good: Any, topic: str, where: str) -> None:
    batch = bytearray(build_batch([(b"k", b"value-%d" % i, [("h", b"x")]) for i in range(5)]))
    pos = {"last-byte": len(batch) - 1, "attributes": 22, "record-count": 60, "base-timestamp": 30}[where]
    batch[pos] ^= 0x01
    pr = _assert_rejected_and_nothing_written(good, topic, bytes(batch), {h.CORRUPT_MESSAGE})
    assert "crc" in (pr["error_message"] or "").lower()


def test_crc_failure_in_a_compressed_batch(good: Any, topic: str) -> None:
    batch = bytearray(build_batch([(b"k", b"compressible " * 50)] * 5, compression=4))
    batch[len(batch) // 2] ^= 0x40
    _assert_rejected_and_nothing_written(good, topic, bytes(batch), {h.CORRUPT_MESSAGE})


def test_oversized_batch_is_message_too_large(good: Any, topic: str) -> None:
    batch = build_batch([(b"k", b"x" * (MAX_MESSAGE + 1))])
    _assert_rejected_and_nothing_written(good, topic, batch, {h.MESSAGE_TOO_LARGE})


def test_oversized_topic_override_is_message_too_large(good: Any) -> None:
    name = h.new_topic("small")
    assert h.create_topic_raw(good, name, configs={"max.message.bytes": "500"})["error_code"] == 0
    _assert_rejected_and_nothing_written(good, name, build_batch([(None, b"y" * 600)]), {h.MESSAGE_TOO_LARGE})


@pytest.mark.parametrize("magic", [0, 1, 3, 0x7F, -1])
def test_wrong_magic_is_rejected(good: Any, topic: str, magic: int) -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">b", batch, 16, magic)
    _assert_rejected_and_nothing_written(
        good, topic, bytes(batch),
        {h.INVALID_RECORD, h.CORRUPT_MESSAGE, h.UNSUPPORTED_FOR_MESSAGE_FORMAT})


# Kafka's answers, from its source: a Produce v3+ request whose batch has magic 0 or 1 fails
# ProduceRequest.validateRecords ("Produce requests with version N are only allowed to contain record batches
# with magic version 2", an InvalidRecordException -> INVALID_RECORD 87; KafkaApis.handleProduceRequest turns
# the ApiException into the partition's error). A magic < 0 or > 2 already fails while iterating the batches,
# ByteBufferLogInputStream.nextBatch ("Invalid magic found in record", CorruptRecordException ->
# CORRUPT_MESSAGE 2).
@pytest.mark.parametrize("magic,code", [(0, 87), (1, 87), (3, 2), (0x7F, 2), (-1, 2)])
def test_wrong_magic_kafka_error_code(good: Any, topic: str, magic: int, code: int) -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">b", batch, 16, magic)
    assert _timed_produce(good, topic, bytes(batch))["error_code"] == code


@pytest.mark.parametrize("declared", [0, 1, 3, 1000, -1])
def test_record_count_mismatch(good: Any, topic: str, declared: int) -> None:
    batch = bytearray(build_batch([(b"k", b"v1"), (b"k", b"v2")]))
    struct.pack_into(">i", batch, 57, declared)
    _assert_rejected_and_nothing_written(good, topic, _recrc(batch), {h.INVALID_RECORD, h.CORRUPT_MESSAGE})


def test_batch_length_lies(good: Any, topic: str) -> None:
    batch = bytearray(build_batch([(b"k", b"v1"), (b"k", b"v2")]))
    struct.pack_into(">i", batch, 8, len(batch) + 100)  # claims more bytes than the records field holds
    _assert_rejected_and_nothing_written(good, topic, _recrc(batch), {h.INVALID_RECORD, h.CORRUPT_MESSAGE})
    cut = build_batch([(b"k", b"v1"), (b"k", b"v2")])[:-3]  # a batch cut short
    _assert_rejected_and_nothing_written(good, topic, cut, {h.INVALID_RECORD, h.CORRUPT_MESSAGE})


def _record_length_lie() -> bytes:
    batch = bytearray(build_batch([(b"k", b"value")]))
    batch[61] = 0x7E  # the first record's length varint (zig-zag 63) now runs past the end of the batch
    return _recrc(batch)


def _count_and_delta_agree_but_records_missing() -> bytes:
    batch = bytearray(build_batch([(b"k", b"v1"), (b"k", b"v2")]))
    struct.pack_into(">i", batch, 23, 2)  # lastOffsetDelta 2
    struct.pack_into(">i", batch, 57, 3)  # recordsCount 3, but only two records follow
    return _recrc(batch)


def _garbage_records() -> bytes:
    batch = bytearray(build_batch([(b"k", b"v" * 40)]))
    batch[61:] = bytes([0xFF]) * (len(batch) - 61)  # the records are garbage, the header and CRC are consistent
    return _recrc(batch)


def _compressed_garbage() -> bytes:
    batch = bytearray(build_batch([(b"k", b"v" * 40)]))
    struct.pack_into(">h", batch, 21, 4)  # claims zstd, but the payload is not a zstd frame
    return _recrc(batch)


@pytest.mark.parametrize("make", [_record_length_lie, _count_and_delta_agree_but_records_missing, _garbage_records,
                                  _compressed_garbage],
                         ids=["record-length", "count-and-delta", "garbage-records", "undecodable-zstd"])
def test_malformed_records_inside_a_valid_crc_are_rejected(good: Any, topic: str, make: Any) -> None:
    _assert_rejected_and_nothing_written(good, topic, make(), {h.INVALID_RECORD, h.CORRUPT_MESSAGE})


def test_two_batches_in_one_partition_is_invalid_record(good: Any, topic: str) -> None:
    one = build_batch([(b"k", b"v")])
    _assert_rejected_and_nothing_written(good, topic, one + one, {h.INVALID_RECORD})


def test_control_batch_from_a_client_is_rejected(good: Any, topic: str) -> None:
    from tidelog.records import build_control_batch

    assert build_control_batch
    batch = bytearray(build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]))
    struct.pack_into(">h", batch, 21, 0x20 | 0x10)  # control + transactional
    _assert_rejected_and_nothing_written(good, topic, _recrc(batch), {h.INVALID_RECORD})


def test_produce_to_unknown_partition(good: Any, topic: str) -> None:
    for partition in (1, 7, 2**31 - 1, -1):
        t0 = time.monotonic()
        pr = h.produce_raw(good, topic, partition, build_batch([(b"k", b"v")]))
        assert time.monotonic() - t0 < 1.0
        assert pr["error_code"] == h.UNKNOWN_TOPIC_OR_PARTITION, (partition, pr)
    assert h.log_end_offset(client_port(good), topic) == 1


def test_out_of_order_sequence_for_idempotent_producer(good: Any, topic: str) -> None:
    init = good.request(h.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                 "producer_id": -1, "producer_epoch": -1})
    assert init["error_code"] == 0
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def batch(seq: int, n: int = 2) -> bytes:
        return build_batch([(b"k", b"s%d" % (seq + i)) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq)

    assert h.produce_raw(good, topic, 0, batch(0))["base_offset"] == 1
    leo = h.log_end_offset(client_port(good), topic)
    pr = _timed_produce(good, topic, batch(5))  # a gap: 2..4 never sent
    assert pr["error_code"] == h.OUT_OF_ORDER_SEQUENCE_NUMBER, pr
    assert h.log_end_offset(client_port(good), topic) == leo
    ok = h.produce_raw(good, topic, 0, batch(2))  # the expected sequence is still accepted
    assert ok["error_code"] == 0 and ok["base_offset"] == leo


def test_acks_zero_produce_error_closes_the_connection(bb: Any, good: Any, topic: str) -> None:
    """acks=0 has no response: Kafka closes the connection so the producer notices the failure."""
    leo = h.log_end_offset(bb.port, topic)
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[-1] ^= 1
    with h.RawClient(bb.port) as bad:
        bad.send(encode_request(h.PRODUCE, 9, 1, "acks0", h.produce_body(topic, 0, bytes(batch), acks=0)))
        bad.assert_closed_within(1.0)
    assert h.log_end_offset(bb.port, topic) == leo
