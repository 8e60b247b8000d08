"""A handler that raises is answered with the API's error response (UNKNOWN_SERVER_ERROR), as Kafka's
``getErrorResponse`` does, and the connection goes on serving; an acks=0 produce, which has no response, has its
connection closed.

The broker runs in-process (a thread with its own event loop) so one handler can be made to fail; real clients
(confluent-kafka, kafka-python) and raw frames talk to it over TCP.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient

from tidelog.broker.broker import Broker
from tidelog.broker.config import BrokerConfig
from tidelog.protocol import codec
from tidelog.protocol.error_response import UNKNOWN_SERVER_ERROR, error_response
from tidelog.protocol.samples import all_api_versions, message_body

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 1, 2, 3, 18, 19


# ------------------------------------------------------------------------------------------ the builder alone


def _error_codes(x: Any) -> list[int]:
    if isinstance(x, dict):
        return [v for k, v in x.items() if k == "error_code" or k.endswith("_error_code")] + [c for v in x.values() for c in _error_codes(v)]
    if isinstance(x, list):
        return [c for v in x for c in _error_codes(v)]
    return []


def _round_trip(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    data = b"".join(bytes(c) for c in codec.encode_response(api_key, version, 5, body))
    cid, decoded = codec.decode_response(api_key, version, data[4:])
    assert cid == 5
    return decoded


@pytest.mark.parametrize(("api_key", "version"), all_api_versions())
def test_every_api_version_has_an_error_response_that_carries_the_code(api_key: int, version: int) -> None:
    request = message_body(api_key, version, "request", 11)
    decoded = _round_trip(api_key, version, error_response(api_key, version, request, message="boom"))
    codes = _error_codes(decoded)
    assert codes and set(codes) <= {UNKNOWN_SERVER_ERROR, 0}, decoded
    assert UNKNOWN_SERVER_ERROR in codes
    # with null arrays and strings wherever the version allows them, it is still a valid response
    nulls = message_body(api_key, version, "request", 11, nulls=True)
    _round_trip(api_key, version, error_response(api_key, version, nulls))


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_error_response_names_every_partition_asked_about(version: int) -> None:
    request = {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": b""}, {"index": 3, "records": b""}]},
        {"name": "b", "partition_data": [{"index": 1, "records": b""}]}]}
    decoded = _round_trip(PRODUCE, version, error_response(PRODUCE, version, request, message="boom"))
    got = {(t["name"], p["index"]): p["error_code"] for t in decoded["responses"] for p in t["partition_responses"]}
    assert got == {("a", 0): -1, ("a", 3): -1, ("b", 1): -1}


def test_fetch_and_offset_fetch_mirror_differently_named_fields() -> None:
    fetch = {"replica_id": -1, "max_wait_ms": 1, "min_bytes": 1, "max_bytes": 1, "isolation_level": 0,
             "session_id": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
                 {"partition": 2, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                  "partition_max_bytes": 1}]}], "forgotten_topics_data": [], "rack_id": ""}
    decoded = _round_trip(FETCH, 11, error_response(FETCH, 11, fetch))
    assert decoded["error_code"] == -1
    assert [(t["topic"], p["partition_index"], p["error_code"]) for t in decoded["responses"]
            for p in t["partitions"]] == [("t", 2, -1)]
    # OffsetFetch v1: partition numbers come as a list of ints, answered as entries
    offset_fetch = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [4, 5]}]}
    decoded = _round_trip(9, 1, error_response(9, 1, offset_fetch))
    assert [(p["partition_index"], p["error_code"]) for p in decoded["topics"][0]["partitions"]] == [(4, -1), (5, -1)]


# ------------------------------------------------------------------------------------------ a live broker


class _LiveBroker:
    def __init__(self, data: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.broker: Broker | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(data,), daemon=True)
        self._thread.start()
        assert self._started.wait(60), "the broker did not start"
        if self._error is not None:
            raise self._error

    def _run(self, data: Path) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            cfg = BrokerConfig.from_properties({"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0",
                                                "tidelog.metrics.listener": "off", "num.partitions": "1"})
            self.broker = Broker(cfg)
            self._stop = asyncio.Event()
            try:
                await self.broker.start()
            except BaseException as exc:
                self._error = exc
                self._started.set()
                raise
            self._started.set()
            await self._stop.wait()
            await self.broker.shutdown()

        self.loop.run_until_complete(main())

    @property
    def port(self) -> int:
        assert self.broker is not None
        return self.broker.port

    def close(self) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[_LiveBroker]:
    b = _LiveBroker(tmp_path / "data")
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch, live: _LiveBroker) -> Any:
    """``failing(api_key)`` makes that API's handler of the live broker raise until the test ends; returns the
    calls seen."""
    calls: list[int] = []

    def make(api_key: int) -> list[int]:
        async def boom(ctx: Any, body: dict) -> dict:
            calls.append(ctx.correlation_id)
            raise RuntimeError("planted handler failure")

        assert live.broker is not None
        monkeypatch.setitem(live.broker.handlers, api_key, boom)
        return calls

    return make


def test_raw_client_gets_unknown_server_error_and_the_connection_keeps_serving(live: _LiveBroker, failing: Any) -> None:
    calls = failing(LIST_OFFSETS)
    with RawClient(live.port) as c:
        resp = c.request(LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
                                         {"partition_index": 7, "current_leader_epoch": -1, "timestamp": -2}]}]})
        assert [(p["partition_index"], p["error_code"]) for p in resp["topics"][0]["partitions"]] == [
            (0, UNKNOWN_SERVER_ERROR), (7, UNKNOWN_SERVER_ERROR)]
        assert len(calls) == 1
        # the same connection answers the next request
        assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
    assert live.broker is not None
    counted = live.broker.metrics.registry.get_sample_value(
        "tidelog_errors_total", {"api": "LIST_OFFSETS", "error": "UNKNOWN_SERVER_ERROR"})
    assert counted == 1


def test_acks0_produce_that_fails_closes_its_connection(live: _LiveBroker, failing: Any) -> None:
    failing(PRODUCE)
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as s:
        s.sendall(codec.encode_request(PRODUCE, 9, 1, "raw", {
            "transactional_id": None, "acks": 0, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}]}))
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
        assert data == b""  # no response can carry the error: the connection is closed, as Kafka does


def test_kafka_python_producer_sees_unknown_server_error(live: _LiveBroker, failing: Any) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import UnknownError

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{live.port}", request_timeout_ms=10000)
    admin.create_topics([NewTopic("hf", 1, 1)])
    admin.close()
    failing(PRODUCE)
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{live.port}", retries=0, acks=1, request_timeout_ms=10000)
    try:
        with pytest.raises(UnknownError):
            producer.send("hf", b"v").get(timeout=20)
    finally:
        producer.close(5)


def test_confluent_consumer_sees_the_error_and_keeps_its_connection(live: _LiveBroker, failing: Any) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{live.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("hf2", 1, 1)])["hf2"].result(20)
    calls = failing(LIST_OFFSETS)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hf"})
    try:
        with pytest.raises(KafkaException) as info:
            consumer.get_watermark_offsets(TopicPartition("hf2", 0), timeout=10)
        assert info.value.args[0].code() == -1  # librdkafka's ERR_UNKNOWN: the broker's UNKNOWN_SERVER_ERROR
        assert calls
        # the broker still serves this client: metadata comes back on the same connection
        assert "hf2" in consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()


def test_the_error_message_carries_no_exception_text(live: _LiveBroker, failing: Any) -> None:
    """Issue 16: the client gets Kafka's generic UNKNOWN_SERVER_ERROR message; the detail is only logged."""
    failing(CREATE_TOPICS)
    with RawClient(live.port) as c:
        resp = c.request(CREATE_TOPICS, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                        "assignments": [], "configs": []}],
                                            "timeout_ms": 1000, "validate_only": False})
    t = resp["topics"][0]
    assert t["error_code"] == UNKNOWN_SERVER_ERROR
    assert t["error_message"] == "The server experienced an unexpected error when processing the request."
    assert "planted" not in t["error_message"] and "RuntimeError" not in t["error_message"]


def test_error_of_an_unexpected_exception_hides_its_text() -> None:
    from tidelog.broker.errors import error_of

    code, message = error_of(KeyError("secret internal detail"))
    assert code == UNKNOWN_SERVER_ERROR
    assert "secret" not in message and "KeyError" not in message
