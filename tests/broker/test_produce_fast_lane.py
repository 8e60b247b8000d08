"""The Produce fast lane (``Connection.process``: a request of the common shape parsed and answered in C,
``tidelog.protocol._produce``) against the generic path (the codec's decode, the ``produce`` handler, the codec's
encoder): for random Produce requests of every accepted version (v13 naming its topics by id), the two give byte-identical responses, the same
connection decision, the same request and error metrics, and byte-identical logs.

Two brokers run in one process (a thread with its own event loop), each with a connection on a socketpair: one
with the fast lane, one without (``Connection.fast_produce``), both fed the same frames in the same order. Both
have an ACL authorizer (a DENY on one topic), a produce quota on one client id and a topic with a small
``max.message.bytes``, so the shapes cover the errors as well as the appends: unknown topic or partition,
ACL denied, quota throttled, corrupt batch (a flipped byte), oversized batch, internal topic, empty records, and
the fallback shapes (several partitions or topics, a transactional id or batch, acks 0 and invalid acks, header
tagged fields, null records), which the C parser must leave to the generic decoder.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.broker import server as srv
from tidelog.broker.config import BrokerConfig
from tidelog.node import build_broker
from tidelog.protocol import codec
from tidelog.records.batch import build_batch
from tidelog.records.compression import CompressionType

pytestmark = pytest.mark.skipif(srv._parse_produce is None, reason="tidelog.protocol._produce is not built")

PRODUCE, CREATE_ACLS, ALTER_CLIENT_QUOTAS = 0, 30, 49
TOPICS = {"t1": 1, "t3": 3, "small": 1, "denied": 1}
SLOW_CLIENT = "slow"  # producer_byte_rate 100: every produce of it is throttled
NOW_MS = 1_700_000_000_000
#: Produce v13 names topics by id: frames carry these placeholders, swapped for each lane's own topic ids (the two
#: brokers create their topics with different ids); "nope" has no topic, so no lane knows its id
PLACEHOLDER_IDS = {t: uuid.uuid5(uuid.NAMESPACE_URL, f"tidelog-fast-lane/{t}") for t in
                   [*TOPICS, "nope", "__consumer_offsets"]}


async def start_broker(log_dir: Path) -> Any:
    """A started in-process broker with an authorizer (admin a super user) and the ``TOPICS``; shared with
    test_inline_lane.py."""
    cfg = BrokerConfig.from_properties({
        "log.dirs": str(log_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
        "tidelog.metrics.listener": "off", "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "allow.everyone.if.no.acl.found": "true"})
    broker = build_broker(cfg)
    await broker.start()
    for topic, n in TOPICS.items():
        configs = {"max.message.bytes": "200"} if topic == "small" else None
        await asyncio.to_thread(broker.topics.create_topic, topic, n, 1, configs)
    return broker


class Lane:
    def __init__(self, broker: Any, fast: bool) -> None:
        self.broker = broker
        self.a, self.b = socket.socketpair()
        self.a.setblocking(False)
        self.b.setblocking(False)
        self.conn = srv.Connection(broker, self.a, "127.0.0.1:1", None)
        self.conn.fast_produce = fast
        self.fast_calls = 0

    def swap_ids(self, data: bytes, to_lane: bool) -> bytes:
        """Placeholder topic ids to this lane's own (``to_lane``), or back."""
        for name, placeholder in PLACEHOLDER_IDS.items():
            info = self.broker.topics.get(name)
            if info is not None:
                a, b = (placeholder.bytes, info.topic_id) if to_lane else (info.topic_id, placeholder.bytes)
                data = data.replace(a, b)
        return data

    async def send(self, frame: bytes, principal: str) -> tuple[bool, bytes]:
        if int.from_bytes(frame[2:4], "big") >= 13:
            keep, out = await self._send(self.swap_ids(frame, True), principal)
            return keep, self.swap_ids(out, False)
        return await self._send(frame, principal)

    async def _send(self, frame: bytes, principal: str) -> tuple[bool, bytes]:
        self.conn.principal = principal
        keep = await self.conn.process(memoryview(frame))
        self.conn.mute_ms = 0  # process() is driven directly: no request loop to mute
        out = b""
        while True:
            try:
                chunk = self.b.recv(1 << 20)
            except BlockingIOError:
                return keep, out
            out += chunk


class Lanes:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.fast, self.generic = self.call(self._start())
        self.seen = {"fast": 0, "fallback": 0}

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _start(self) -> tuple[Lane, Lane]:
        lanes = []
        for name, fast in (("fast", True), ("generic", False)):
            lane = Lane(await start_broker(self.root / name), fast)
            acls = {"creations": [{"resource_type": 2, "resource_name": "denied", "resource_pattern_type": 3,
                                   "principal": "User:mallory", "host": "*", "operation": 4, "permission_type": 2}]}
            quotas = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": SLOW_CLIENT}],
                                   "ops": [{"key": "producer_byte_rate", "value": 100.0, "remove": False}]}],
                      "validate_only": False}
            for key, version, body in ((CREATE_ACLS, 2, acls), (ALTER_CLIENT_QUOTAS, 1, quotas)):
                keep, raw = await lane.send(codec.encode_request(key, version, 1, "admin", body)[4:], "User:admin")
                assert keep and raw
            lanes.append(lane)
        return lanes[0], lanes[1]

    def close(self) -> None:
        for lane in (self.fast, self.generic):
            self.call(lane.broker.shutdown())
            lane.a.close()
            lane.b.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lanes]:
    pair = Lanes(tmp_path_factory.mktemp("fast-lane"))
    try:
        yield pair
    finally:
        pair.close()


def _logs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.log")) if p.is_file()}


@st.composite
def produce_requests(draw: Any) -> tuple[bytes, str, str]:
    version = draw(st.integers(3, 13))
    shape = draw(st.sampled_from(["one", "one", "one", "two_partitions", "two_topics", "txn_id", "txn_batch",
                                  "tagged", "null_records", "empty_records", "gzip"]))
    acks = draw(st.sampled_from([1, -1, 1, -1, 0, 2]))
    topic = draw(st.sampled_from(["t1", "t3", "small", "denied", "nope", "__consumer_offsets"]))
    partition = draw(st.integers(0, 3))
    client_id = draw(st.sampled_from(["rdkafka", None, "ünïcode", SLOW_CLIENT]))
    if client_id == SLOW_CLIENT:
        version = max(version, 6)  # older clients have the response itself delayed by the throttle (KIP-219)
    principal = draw(st.sampled_from(["User:ANONYMOUS", "User:mallory", "User:admin"]))
    values = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=3))
    txn = shape == "txn_batch"
    # "gzip": a compressed batch, whose worst case is validated on a worker before the append (produce_one's
    # _append_all branch; an uncompressed one is appended inline)
    batch = build_batch([(None, v) for v in values], now_ms=NOW_MS, is_transactional=txn,
                        producer_id=1000 if txn else -1, producer_epoch=0 if txn else -1, base_sequence=0 if txn else -1,
                        compression=CompressionType.GZIP if shape == "gzip" else CompressionType.NONE)
    corrupt = draw(st.one_of(st.none(), st.integers(0, len(batch) - 1)))
    if corrupt is not None:
        flipped = bytearray(batch)
        flipped[corrupt] ^= 0x5A
        batch = bytes(flipped)
    records: Any = batch
    if shape == "null_records":
        records = None
    elif shape == "empty_records":
        records = b""
    parts = [{"index": partition, "records": records}]
    if shape == "two_partitions":
        parts.append({"index": (partition + 1) % 4, "records": batch})

    def named(name: str) -> dict:
        return {"topic_id": PLACEHOLDER_IDS[name]} if version >= 13 else {"name": name}

    topic_data = [{**named(topic), "partition_data": parts}]
    if shape == "two_topics":
        topic_data.append({**named("t1"), "partition_data": [{"index": 0, "records": batch}]})
    body = {"transactional_id": "tx" if shape == "txn_id" else None, "acks": acks, "timeout_ms": 5000,
            "topic_data": topic_data}
    frame = codec.encode_request(PRODUCE, version, draw(st.integers(0, 2**31 - 1)), client_id, body)[4:]
    if shape == "tagged" and version >= 9:  # one unknown tagged field in the request header
        at = 8 + 2 + (len(client_id.encode()) if client_id is not None else 0)
        assert frame[at] == 0
        frame = frame[:at] + b"\x01\x07\x02ab" + frame[at + 1:]
    return frame, principal, client_id or ""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(produce_requests())
def test_fast_lane_answers_and_appends_as_the_generic_path(lanes: Lanes, request_: tuple[bytes, str, str]) -> None:
    frame, principal, client_id = request_
    lanes.seen["fast" if srv._parse_produce(frame, codec.ACCEPTED_VERSIONS) is not None else "fallback"] += 1
    keep_f, out_f = lanes.call(lanes.fast.send(frame, principal))
    keep_g, out_g = lanes.call(lanes.generic.send(frame, principal))
    assert keep_f == keep_g
    if client_id == SLOW_CLIENT and out_g:
        # the throttle time depends on the moment the quota is measured: equal apart from it, and set in both
        version = int.from_bytes(frame[2:4], "big")
        cid_f, body_f = codec.decode_response(PRODUCE, version, out_f[4:])
        cid_g, body_g = codec.decode_response(PRODUCE, version, out_g[4:])
        assert (body_f.pop("throttle_time_ms") > 0) == (body_g.pop("throttle_time_ms") > 0)
        assert (cid_f, body_f) == (cid_g, body_g)
        assert len(out_f) == len(out_g)
    else:
        assert out_f == out_g
    mf, mg = lanes.fast.broker.metrics, lanes.generic.broker.metrics
    assert mf.requests["PRODUCE"][0] == mg.requests["PRODUCE"][0]
    assert {k: v for k, v in mf.errors.items() if k[0] == "PRODUCE"} == {
        k: v for k, v in mg.errors.items() if k[0] == "PRODUCE"}
    assert _logs(lanes.root / "fast") == _logs(lanes.root / "generic")


def test_the_property_run_took_both_lanes(lanes: Lanes) -> None:
    """(runs after the property test in this module) Both the fast lane and the fallback were exercised, and
    something was appended."""
    assert lanes.seen["fast"] >= 50 and lanes.seen["fallback"] >= 50, lanes.seen
    logs = _logs(lanes.root / "fast")
    assert sum(map(len, logs.values())) > 0


@settings(max_examples=2000, deadline=None)
@given(produce_requests(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.one_of(st.none(), st.integers(0, 10_000)))
def test_the_parser_reads_what_the_generic_decoder_reads(request_: tuple[bytes, str, str],
                                                         changes: list[tuple[int, int]], cut: int | None) -> None:
    """Any frame (valid ones, bytes changed, truncated): the C parser never fails, and a frame it accepts is read
    by the generic decoder the same way (and has the shape it claims)."""
    frame = bytearray(request_[0])
    for at, value in changes:
        frame[at % len(frame)] = value
    if cut is not None:
        del frame[cut % len(frame):]
    parsed = srv._parse_produce(bytes(frame), codec.ACCEPTED_VERSIONS)
    if parsed is None:
        return
    version, correlation_id, client_id, acks, timeout_ms, topic, index, records = parsed
    header, body = codec.decode_request(memoryview(bytes(frame)))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        PRODUCE, version, correlation_id, client_id)
    assert body["transactional_id"] is None and acks in (1, -1)
    assert (body["acks"], body["timeout_ms"]) == (acks, timeout_ms)
    [t] = body["topic_data"]
    [p] = t["partition_data"]
    if version >= 13:
        assert isinstance(topic, bytes) and uuid.UUID(bytes=topic) == t["topic_id"]
    else:
        assert t["name"] == topic and topic
    assert (p["index"], bytes(p["records"])) == (index, bytes(records))
    assert not (len(records) > 22 and records[22] & 0x10)
