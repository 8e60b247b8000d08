"""The inter-broker request channel (``tidelog.cluster.broker_channel.BrokerChannel``, behind
``ZkReplicaManager.broker_request``) against scripted servers: pooling, reconnects, endpoints, clear errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tidelog.broker.errors import BrokerError, error_of
from tidelog.cluster.broker_channel import BrokerChannel, BrokerRequestError
from tidelog.errors import ErrorCode
from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.framing import FrameDecoder


class Server:
    """Answers every ApiVersions request with ``max_version`` = its own tag; counts connections; ``mute`` makes
    it read requests without answering, ``cut`` closes each connection after reading a request."""

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.connections = 0
        self.mute = False
        self.cut = False
        self.server: asyncio.Server | None = None

    async def start(self) -> Server:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def endpoint(self) -> tuple[str, int]:
        assert self.server is not None
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        frames = FrameDecoder()
        try:
            while data := await reader.read(65536):
                frames.feed(data)
                for f in frames:
                    header, _ = codec.decode_request(f)
                    if self.cut:
                        return
                    if self.mute:
                        continue
                    body = {"error_code": 0, "throttle_time_ms": 0,
                            "api_keys": [{"api_key": 18, "min_version": 0, "max_version": self.tag}]}
                    writer.write(b"".join(bytes(c) for c in codec.encode_response(
                        ApiKey.API_VERSIONS, 1, header.correlation_id, body)))
                    await writer.drain()
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _ask(ch: BrokerChannel, node: int, timeout: float = 5.0) -> int:
    body = await ch.request(node, ApiKey.API_VERSIONS, 1, {}, timeout)
    return int(body["api_keys"][0]["max_version"])


def test_one_pooled_connection_per_broker_and_concurrent_requests_take_turns() -> None:
    async def main() -> None:
        a, b = await Server(1).start(), await Server(2).start()
        live = {1: a.endpoint, 2: b.endpoint}
        ch = BrokerChannel(0, live.get)
        try:
            answers = await asyncio.gather(*(_ask(ch, n) for n in (1, 2, 1, 2, 1, 1)))
            assert answers == [1, 2, 1, 2, 1, 1]
            assert (a.connections, b.connections) == (1, 1)
            assert ch.client_id == "tidelog-broker-0"
        finally:
            ch.close()
            a.close()
            b.close()

    _run(main())


def test_a_broker_not_live_is_a_clear_error() -> None:
    async def main() -> None:
        ch = BrokerChannel(0, {}.get)
        with pytest.raises(BrokerRequestError) as e:
            await _ask(ch, 7)
        assert e.value.kafka_error == ErrorCode.BROKER_NOT_AVAILABLE and e.value.node_id == 7
        assert "broker 7 is not live" in str(e.value)
        assert isinstance(e.value, BrokerError)  # what the broker layer catches
        assert error_of(e.value)[0] == 8  # BROKER_NOT_AVAILABLE

    _run(main())


def test_a_lost_connection_fails_the_request_and_the_next_one_reconnects() -> None:
    async def main() -> None:
        a = await Server(1).start()
        ch = BrokerChannel(0, {1: a.endpoint}.get)
        try:
            assert await _ask(ch, 1) == 1
            a.cut = True
            with pytest.raises(BrokerRequestError) as e:
                await _ask(ch, 1)
            assert e.value.kafka_error == ErrorCode.BROKER_NOT_AVAILABLE
            a.cut = False
            assert await _ask(ch, 1) == 1
            assert a.connections == 2
        finally:
            ch.close()
            a.close()

    _run(main())


def test_refused_connection_and_timeout() -> None:
    async def main() -> None:
        a = await Server(1).start()
        host, port = a.endpoint
        a.close()
        await a.server.wait_closed()  # type: ignore[union-attr]
        ch = BrokerChannel(0, {1: (host, port)}.get)
        with pytest.raises(BrokerRequestError) as e:
            await _ask(ch, 1)
        assert e.value.kafka_error == ErrorCode.BROKER_NOT_AVAILABLE

        m = await Server(2).start()
        m.mute = True
        ch2 = BrokerChannel(0, {2: m.endpoint}.get)
        try:
            with pytest.raises(BrokerRequestError) as e:
                await _ask(ch2, 2, timeout=0.3)
            assert e.value.kafka_error == ErrorCode.REQUEST_TIMED_OUT
            m.mute = False
            assert await _ask(ch2, 2) == 2  # the timed-out connection was dropped: its late answer cannot confuse
            assert m.connections == 2
        finally:
            ch2.close()
            m.close()

    _run(main())


def test_a_new_registration_is_followed_and_close_refuses_further_requests() -> None:
    async def main() -> None:
        a, b = await Server(1).start(), await Server(2).start()
        live = {5: a.endpoint}
        ch = BrokerChannel(0, live.get)
        try:
            assert await _ask(ch, 5) == 1
            live[5] = b.endpoint  # broker 5 restarted on another port
            assert await _ask(ch, 5) == 2
            ch.forget(5)
            assert await _ask(ch, 5) == 2
            assert b.connections == 2
            ch.close()
            with pytest.raises(BrokerRequestError, match="shutting down"):
                await _ask(ch, 5)
        finally:
            ch.close()
            a.close()
            b.close()

    _run(main())
