"""The inline lane (``tidelog.broker.inline_lane``: Produce requests answered in the reader callback while the
connection's task waits) against the task's path, through the real request loop (``Connection.run``).

Two brokers run in one process (a thread with its own event loop), each with a connection on a socketpair served by
``Connection.run``: one with the inline lane, one without (``Connection.inline_lane``). A client in the test thread
sends the same requests to both, one at a time (what a paced producer does), several in one write, or a frame split
across two writes, and reads the answers. The two must give byte-identical answers and segment files, and the inline
broker must have answered the common requests in its callback (``inline_answered``) while the other answered none
there. The shapes are the fast lane's test's (every version, errors, compressed batches that are validated on a
worker, i.e. a request the callback starts and the task finishes), mixed with requests of other APIs (ApiVersions;
Metadata in the paced test) that the callback leaves to the task.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.broker.test_produce_fast_lane import PLACEHOLDER_IDS, produce_requests, start_broker

from tidelog.broker import server as srv
from tidelog.protocol import codec
from tidelog.protocol.framing import FrameDecoder

pytestmark = pytest.mark.skipif(srv._parse_produce is None, reason="tidelog.protocol._produce is not built")

API_VERSIONS, METADATA = 18, 3


class Side:
    """One broker, one connection served by its request loop, the client's end of the socketpair."""

    def __init__(self, broker: Any, inline: bool) -> None:
        self.broker = broker
        a, self.client = socket.socketpair()
        a.setblocking(False)
        self.client.settimeout(30)
        self.conn = srv.Connection(broker, a, "127.0.0.1:1", None)
        self.conn.inline_lane = inline
        self.task = asyncio.get_running_loop().create_task(self.conn.run())
        self.frames = FrameDecoder()

    def swap_ids(self, data: bytes, to_broker: bool) -> bytes:
        for name, placeholder in PLACEHOLDER_IDS.items():
            info = self.broker.topics.get(name)
            if info is not None:
                a, b = (placeholder.bytes, info.topic_id) if to_broker else (info.topic_id, placeholder.bytes)
                data = data.replace(a, b)
        return data

    def exchange(self, frames: list[bytes], split: bool, answers: int) -> list[bytes]:
        """Send the frames (size-prefixed, in one write; ``split``: the first frame in two writes), read
        ``answers`` response frames."""
        data = b"".join(len(f).to_bytes(4, "big") + self.swap_ids(f, True) for f in frames)
        if split:
            cut = max(1, len(data) // 2)
            self.client.sendall(data[:cut])
            time.sleep(0.002)  # the callback meets a partial frame (the test is the same if it does not)
            self.client.sendall(data[cut:])
        else:
            self.client.sendall(data)
        out: list[bytes] = []
        while len(out) < answers:
            got = self.frames.next_frame()
            if got is not None:
                out.append(self.swap_ids(bytes(got), False))
                continue
            chunk = self.client.recv(1 << 20)
            assert chunk, "the broker closed the connection"
            self.frames.feed(chunk)
        return out


class Pair:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.inline, self.task = self.call(self._start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _start(self) -> tuple[Side, Side]:
        sides = []
        for name, inline in (("inline", True), ("task", False)):
            sides.append(Side(await start_broker(self.root / name), inline))
        return sides[0], sides[1]

    def close(self) -> None:
        for side in (self.inline, self.task):
            side.client.close()
            self.call(asyncio.wait_for(side.task, 10))
            self.call(side.broker.shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("inline-lane"))
    try:
        yield p
    finally:
        p.close()


def _logs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.log")) if p.is_file()}


def _other(kind: str, cid: int) -> bytes:
    if kind == "api_versions":
        return codec.encode_request(API_VERSIONS, 3, cid, "c", {"client_software_name": "t",
                                                                 "client_software_version": "1"})[4:]
    return codec.encode_request(METADATA, 12, cid, "c", {"topics": [{"topic_id": b"\0" * 16, "name": "t1"}],
                                                          "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False})[4:]


@st.composite
def rounds(draw: Any) -> tuple[list[bytes], bool]:
    """One client write: 1-3 requests (each a Produce of the fast lane's shapes, or now and then another API),
    maybe split in two writes."""
    frames = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["produce"] * 6 + ["api_versions"]))
        if kind == "produce":
            frame, _principal, _client = draw(produce_requests())
            frames.append(frame)
        else:
            frames.append(_other(kind, draw(st.integers(0, 2**31 - 1))))
    return frames, draw(st.booleans())


def _answers(frames: list[bytes]) -> int:
    """Requests that get an answer (a Produce with acks=0 gets none)."""
    n = 0
    for f in frames:
        if int.from_bytes(f[0:2], "big") == 0:
            body = codec.decode_request(f, codec.ACCEPTED_VERSIONS)[1]
            if body.get("acks") == 0:
                continue
        n += 1
    return n


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(rounds())
def test_inline_lane_answers_and_appends_as_the_task(pair: Pair, round_: tuple[list[bytes], bool]) -> None:
    frames, split = round_
    if any(f[0:2] == b"\0\0" and codec.decode_request(f, codec.ACCEPTED_VERSIONS)[1].get("acks") not in (1, -1)
           for f in frames):
        # acks 0 gets no answer and an invalid acks closes nothing but 0 may close on error: one at a time only
        frames = frames[:1]
    n = _answers(frames)
    if n == 0:
        return  # nothing to read back: the appends are compared by the next rounds' segment files
    got_inline = pair.inline.exchange(frames, split, n)
    got_task = pair.task.exchange(frames, split, n)
    assert got_inline == got_task
    assert _logs(pair.root / "inline") == _logs(pair.root / "task")
    assert not pair.inline.task.done() and not pair.task.task.done()


def test_paced_produces_are_answered_in_the_callback(pair: Pair) -> None:
    """One request at a time, each answered before the next: the inline broker answers every one of them in its
    reader callback, the other none; a frame the callback leaves to the task is answered all the same."""
    before = pair.inline.conn.inline_answered
    from tidelog.records.batch import build_batch

    for i in range(20):
        batch = build_batch([(None, b"v%d" % i)], now_ms=1_700_000_000_000)
        body = {"transactional_id": None, "acks": -1 if i % 2 else 1, "timeout_ms": 5000,
                "topic_data": [{"name": "t1", "partition_data": [{"index": 0, "records": batch}]}]}
        frame = codec.encode_request(0, 9, 1000 + i, "paced", body)[4:]
        assert pair.inline.exchange([frame], False, 1) == pair.task.exchange([frame], False, 1)
        if i == 10:  # another API between them: left to the task (answers differ by broker: not compared)
            assert pair.inline.exchange([_other("metadata", 7)], False, 1)
            assert pair.task.exchange([_other("metadata", 7)], False, 1)
    assert pair.inline.conn.inline_answered - before == 20
    assert pair.task.conn.inline_answered == 0
    assert _logs(pair.root / "inline") == _logs(pair.root / "task")


def test_a_request_that_waits_is_finished_by_the_task(pair: Pair) -> None:
    """A gzip batch is validated on a worker before its append: the callback starts the request, it suspends, and
    the task finishes it (``_Continuation``); the answers and the appends are the task path's."""
    from tidelog.records.batch import build_batch
    from tidelog.records.compression import CompressionType

    before = pair.inline.conn.inline_answered
    for i in range(5):
        batch = build_batch([(None, b"z%d" % i)], now_ms=1_700_000_000_000, compression=CompressionType.GZIP)
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": "t1", "partition_data": [{"index": 0, "records": batch}]}]}
        frame = codec.encode_request(0, 9, 2000 + i, "paced", body)[4:]
        got = pair.inline.exchange([frame], False, 1)
        assert got == pair.task.exchange([frame], False, 1)
        assert codec.decode_response(0, 9, got[0])[1]["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert pair.inline.conn.inline_answered == before  # each one suspended: finished by the task
    assert _logs(pair.root / "inline") == _logs(pair.root / "task")


def test_a_failure_in_the_callback_ends_the_connection_not_the_loop(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Something the callback does raises (here the C parser, patched): the connection's task gets the error and
    closes the connection, as when its own process() raises; the broker's other connections go on."""
    import tidelog.broker.inline_lane as inline_lane
    from tidelog.records.batch import build_batch

    async def side() -> Side:
        return Side(pair.inline.broker, True)

    extra = pair.call(side())
    assert extra.exchange([_other("api_versions", 1)], False, 1)  # the task answers; it then waits inline

    def broken(frame: Any, versions: Any) -> Any:
        raise RuntimeError("parser failure")

    monkeypatch.setattr(inline_lane, "_parse_produce", broken)
    batch = build_batch([(None, b"x")], now_ms=1_700_000_000_000)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "t1", "partition_data": [{"index": 0, "records": batch}]}]}
    frame = codec.encode_request(0, 9, 1, "c", body)[4:]
    extra.client.sendall(len(frame).to_bytes(4, "big") + frame)
    assert extra.client.recv(1 << 16) == b""  # closed by the broker, no answer
    pair.call(asyncio.wait_for(extra.task, 10))
    monkeypatch.undo()
    extra.client.close()
    assert pair.inline.exchange([frame], False, 1) == pair.task.exchange([frame], False, 1)
