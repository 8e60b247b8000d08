"""Decompression work in flight is bounded broker-wide (issue 24, item 5), on a real ``tidelog serve``.

Eight connections send a produce request of zstd bombs at once (each batch ~2 KB inflating past the 64 MiB
cap). The broker validates at most ``tidelog.decompression.heavy.slots`` (here 1) of them at a time, read from
its own gauge of the most heavy validations ever in flight; every bomb is refused with CORRUPT_MESSAGE as before,
another connection is answered all along, and the broker's memory stays bounded (a refused bomb's inflated
chunks used to stay alive, through its exception's traceback, until its request was answered: a request of 107
bombs held 7 GB). Ordinary compressed produce requests stay in the light pass (no
slot taken)."""

from __future__ import annotations

import select
import struct
import threading
import time
import urllib.request
from typing import Any

import helpers as h
import pytest
import zstandard
from confluent_kafka import Producer

from tidelog.records import crc32c
from tidelog.records.varint import encode_varint

pytestmark = pytest.mark.integration

CAP = 64 * 1024 * 1024
BOMBS = 8
BATCHES = 8  # partitions per bomb request: 512 MiB of output each


def bomb_batch(decompressed: int = CAP + 1) -> bytes:
    """One record of zeros whose zstd records area (no content size in the frame) inflates to ``decompressed``."""
    value_len = decompressed - 13
    prefix = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(value_len)
    head = encode_varint(len(prefix) + value_len + 1) + prefix
    obj: Any = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    parts = [obj.compress(head)]
    zero = bytes(1 << 20)
    left = value_len
    while left:
        k = min(left, len(zero))
        parts.append(obj.compress(zero[:k]))
        left -= k
    parts += [obj.compress(b"\x00"), obj.flush()]
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 4, 0, now, now, -1, -1, -1, 1) + b"".join(parts)
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


def gauges(b: Any) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
    return {line.split()[0]: float(line.split()[-1]) for line in text.splitlines()
            if line.startswith("tidelog_heavy_validations_")}


@pytest.fixture(scope="module")
def budget_broker(broker_factory: Any) -> Any:
    return broker_factory({"tidelog.decompression.heavy.slots": "1"})


def test_eight_bombs_at_once_take_one_heavy_slot_at_a_time(budget_broker: Any) -> None:
    b = budget_broker
    bombs, small = h.new_topic("bombs"), h.new_topic("small")
    with h.RawClient(b.port, timeout=60) as admin:
        assert h.create_topic_raw(admin, bombs, BATCHES)["error_code"] == h.NONE
        assert h.create_topic_raw(admin, small, 1)["error_code"] == h.NONE
    bomb = bomb_batch()
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": bombs, "partition_data": [{"index": i, "records": bomb}
                                                              for i in range(BATCHES)]}]}
    clients = [h.RawClient(b.port, timeout=300) for _ in range(BOMBS)]
    codes: list[set[int]] = []
    assert b.proc is not None
    baseline = h.rss_kib(b.proc.pid)
    peak = [baseline]
    sampling = threading.Event()

    def sample_rss() -> None:  # the broker's resident memory while the bombs are in flight
        while not sampling.wait(0.005):
            try:
                peak[0] = max(peak[0], h.rss_kib(b.proc.pid))  # type: ignore[union-attr]
            except (OSError, RuntimeError):
                return

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    try:
        for c in clients:  # all eight in flight at once
            c.send_request(h.PRODUCE, 9, body)
        # the broker keeps serving another connection while the bombs are pending
        served_meanwhile = 0
        with h.RawClient(b.port, timeout=60) as other:
            meta = {"topics": [{"name": small, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False}
            for _ in range(20):
                assert other.request(h.METADATA, 12, meta)["topics"][0]["error_code"] == h.NONE
                readable, _, _ = select.select([c.sock for c in clients], [], [], 0)
                if len(readable) < BOMBS:
                    served_meanwhile += 1
        assert served_meanwhile > 0
        done: list[BaseException] = []

        def read(c: h.RawClient) -> None:
            try:
                r = c.response()
                codes.append({p["error_code"] for p in r["responses"][0]["partition_responses"]})
            except BaseException as exc:
                done.append(exc)

        threads = [threading.Thread(target=read, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not done, done
    finally:
        sampling.set()
        sampler.join(10)
        for c in clients:
            c.close()
    assert codes == [{h.CORRUPT_MESSAGE}] * BOMBS  # each bomb inflated up to the cap, then refused
    # one heavy validation at a time, holding one batch's output (64 MiB) plus the light passes' (8 x 16 MiB):
    # never the 8 x 8 x 64 MiB the requests inflate to in all, nor one request's 512 MiB
    assert (peak[0] - baseline) / 1024 < 450, f"broker RSS grew by {(peak[0] - baseline) / 1024:.0f} MiB"
    g = gauges(b)
    assert g["tidelog_heavy_validations_slots"] == 1
    assert g["tidelog_heavy_validations_in_flight_max"] == 1, g  # never two at once
    assert g["tidelog_heavy_validations_total"] >= BOMBS, g
    assert g["tidelog_heavy_validations_in_flight"] == 0 and g["tidelog_heavy_validations_waiting"] == 0, g
    assert h.log_end_offset(b.port, bombs, 0) == 0


def test_ordinary_compressed_produce_takes_no_heavy_slot(budget_broker: Any) -> None:
    b = budget_broker
    topic = h.new_topic("zstd")
    with h.RawClient(b.port, timeout=60) as admin:
        assert h.create_topic_raw(admin, topic, 1)["error_code"] == h.NONE
    before = gauges(b)["tidelog_heavy_validations_total"]
    p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "zstd", "linger.ms": 20,
                  "batch.size": 1 << 20})
    failed: list[Any] = []
    for i in range(2000):
        p.produce(topic, value=b"value-%d-" % i + b"z" * 500, partition=0,
                  on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(60) == 0 and not failed, failed
    assert gauges(b)["tidelog_heavy_validations_total"] == before
    assert h.log_end_offset(b.port, topic, 0) == 2000
