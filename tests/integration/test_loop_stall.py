"""No client can stall the others (docs/decisions/0021-request-execution.md), against a real ``tidelog serve``.

Heavy request work (decompressing and validating compressed produce batches, creating and deleting topics) runs
on the broker's request handler threads, so while one connection's heavy request is in flight another
connection is answered. The checks are orderings of events on the wire, not timings: the small requests'
responses must arrive while the heavy request's response has not (a ``select`` with no timeout on its
socket), which fails when the event loop does the heavy work itself, since it then writes the heavy response
before it reads anything else. And appends to one partition keep the order their requests arrived in.
"""

from __future__ import annotations

import select
import struct
import threading
import time
import zlib
from typing import Any

import helpers as h
import pytest
import zstandard

from tidelog.protocol.api_keys import ApiKey
from tidelog.records import build_batch, crc32c
from tidelog.records.varint import encode_varint

pytestmark = pytest.mark.integration

CAP = 64 * 1024 * 1024  # the broker's decompression cap
DELETE_TOPICS = ApiKey.DELETE_TOPICS


def bomb_batch(codec: int = 4, decompressed: int = CAP + 1) -> bytes:
    """One record of zeros whose compressed records area inflates to ``decompressed`` bytes; zstd without a
    content size in the frame, so the broker must inflate it to learn its size (~2 KB on the wire)."""
    value_len = decompressed - 13
    prefix = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(value_len)
    head = encode_varint(len(prefix) + value_len + 1) + prefix
    obj: Any = (zstandard.ZstdCompressor(write_content_size=False).compressobj() if codec == 4
                else zlib.compressobj(9, zlib.DEFLATED, 31))
    parts = [obj.compress(head)]
    zero = bytes(1 << 20)
    left = value_len
    while left:
        k = min(left, len(zero))
        parts.append(obj.compress(zero[:k]))
        left -= k
    parts += [obj.compress(b"\x00"), obj.flush()]
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", codec, 0, now, now, -1, -1, -1, 1) + b"".join(parts)
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


def _metadata(client: h.RawClient, topic: str) -> dict:
    return client.request(h.METADATA, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})


def _pending(client: h.RawClient) -> bool:
    """True when no byte of the next response has arrived yet."""
    readable, _, _ = select.select([client.sock], [], [], 0)
    return not readable


def _answered_meanwhile(port: int, heavy: h.RawClient, topic: str, n: int = 5) -> None:
    """``n`` Metadata round trips on another connection complete while ``heavy``'s response is still pending."""
    with h.RawClient(port, timeout=60) as other:
        for i in range(n):
            assert _metadata(other, topic)["topics"][0]["error_code"] == h.NONE
            assert _pending(heavy), f"the heavy request was answered before small request {i + 1} of {n}"


def test_metadata_is_answered_while_a_bomb_produce_is_validated(broker: Any) -> None:
    bombs, small = h.new_topic("bombs"), h.new_topic("small")
    with h.RawClient(broker.port, timeout=60) as admin:
        assert h.create_topic_raw(admin, bombs, 30)["error_code"] == h.NONE
        assert h.create_topic_raw(admin, small, 1)["error_code"] == h.NONE
    bomb = bomb_batch()
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": bombs, "partition_data": [{"index": i, "records": bomb} for i in range(30)]}]}
    with h.RawClient(broker.port, timeout=120) as heavy:
        heavy.send_request(h.PRODUCE, 9, body)
        _answered_meanwhile(broker.port, heavy, small)
        resp = heavy.response()
    codes = {p["error_code"] for p in resp["responses"][0]["partition_responses"]}
    assert codes == {h.CORRUPT_MESSAGE}  # every bomb inflated up to the cap, then refused
    assert h.log_end_offset(broker.port, bombs, 0) == 0


@pytest.mark.parametrize("partitions", [600])
def test_metadata_is_answered_while_topics_are_created_and_deleted(broker: Any, partitions: int) -> None:
    wide, small = h.new_topic("wide"), h.new_topic("small")
    with h.RawClient(broker.port, timeout=60) as admin:
        assert h.create_topic_raw(admin, small, 1)["error_code"] == h.NONE
    create = {"topics": [{"name": wide, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                          "configs": []}], "timeout_ms": 60000, "validate_only": False}
    with h.RawClient(broker.port, timeout=120) as heavy:
        heavy.send_request(h.CREATE_TOPICS, 5, create)
        _answered_meanwhile(broker.port, heavy, small, 3)
        resp = heavy.response()
        assert resp["topics"][0]["error_code"] == h.NONE
        with h.RawClient(broker.port) as c:  # complete once answered: every partition has its leader and log
            parts = _metadata(c, wide)["topics"][0]["partitions"]
            assert len(parts) == partitions
            assert h.produce_raw(c, wide, partitions - 1, build_batch([(None, b"v")]))["error_code"] == h.NONE
        heavy.send_request(DELETE_TOPICS, 4, {"topic_names": [wide], "timeout_ms": 60000})
        _answered_meanwhile(broker.port, heavy, small, 3)
        resp = heavy.response()
        assert resp["responses"][0]["error_code"] == h.NONE
    with h.RawClient(broker.port) as c:
        assert _metadata(c, wide)["topics"][0]["error_code"] == h.UNKNOWN_TOPIC_OR_PARTITION
    assert not h.partition_dir(broker.data_dir, wide, 0).exists() or h.wait_for(
        lambda: not h.partition_dir(broker.data_dir, wide, 0).exists(), what="partition directory removed")


def test_appends_keep_arrival_order_when_an_earlier_request_is_validated_on_a_worker(broker: Any) -> None:
    """A request whose validation leaves the loop (bombs on other partitions plus one good zstd batch for P)
    arrives first; a small uncompressed produce to P from another connection arrives after it. P's offsets
    follow arrival order: the small batch waits for the earlier request's append instead of overtaking it."""
    topic, bombs = h.new_topic("order"), h.new_topic("order-bombs")
    with h.RawClient(broker.port, timeout=60) as admin:
        assert h.create_topic_raw(admin, topic, 1)["error_code"] == h.NONE
        assert h.create_topic_raw(admin, bombs, 10)["error_code"] == h.NONE
    first = build_batch([(None, b"first-%d" % i) for i in range(5)], compression=4)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": bombs, "partition_data": [{"index": i, "records": bomb_batch()} for i in range(10)]},
                           {"name": topic, "partition_data": [{"index": 0, "records": first}]}]}
    with h.RawClient(broker.port, timeout=120) as early, h.RawClient(broker.port, timeout=120) as late:
        early.send_request(h.PRODUCE, 9, body)
        for _ in range(3):  # causality: by the time these are answered the broker has read the early request
            _metadata(late, topic)
        assert _pending(early)
        second = h.produce_raw(late, topic, 0, build_batch([(None, b"second")]), acks=1)
        resp = early.response()
    by_topic = {t["name"]: t["partition_responses"] for t in resp["responses"]}
    assert by_topic[topic][0]["error_code"] == h.NONE and by_topic[topic][0]["base_offset"] == 0
    assert second["error_code"] == h.NONE and second["base_offset"] == 5
    values = [r.value for _, r in h.records_on_disk(broker.data_dir, topic)]
    assert values == [b"first-%d" % i for i in range(5)] + [b"second"]


def test_concurrent_idempotent_compressed_producers_to_one_partition(broker: Any) -> None:
    """Two idempotent zstd producers (their batches validated on the workers) and one uncompressed one (on the
    loop) write one partition at once: every message exactly once, each producer's messages in its order."""
    topic = h.new_topic("concurrent")
    with h.RawClient(broker.port, timeout=60) as admin:
        assert h.create_topic_raw(admin, topic, 1)["error_code"] == h.NONE
    n = 3000
    errors: list[BaseException] = []

    def run(name: str, compression: str) -> None:
        try:
            h.confluent_produce(broker.bootstrap, topic, [{"value": f"{name}-{i}".encode()} for i in range(n)],
                                **{"enable.idempotence": True, "acks": "all", "compression.type": compression,
                                   "batch.size": 4096, "linger.ms": 1, "max.in.flight.requests.per.connection": 5})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name, comp))
               for name, comp in (("zstd-a", "zstd"), ("zstd-b", "zstd"), ("plain", "none"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    values = [m.value().decode() for m in h.consume_all(broker.bootstrap, topic)]
    assert len(values) == 3 * n
    for name in ("zstd-a", "zstd-b", "plain"):
        mine = [int(v.rsplit("-", 1)[1]) for v in values if v.rsplit("-", 1)[0] == name]
        assert mine == list(range(n)), name
