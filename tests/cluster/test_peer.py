"""The inter-broker client (``tidelog.cluster.peer.Peer``) against a scripted server: framing and correlation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.cluster.peer import Peer
from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.exceptions import CorrelationIdMismatchError
from tidelog.protocol.framing import FrameDecoder

_AV = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}], "throttle_time_ms": 0}


def _response(cid: int) -> bytes:
    return b"".join(bytes(c) for c in codec.encode_response(ApiKey.API_VERSIONS, 1, cid, _AV))


async def _serve(answer: Callable[[int], bytes], seen: list[int], trickle: bool = False) -> asyncio.Server:
    """A server answering every ApiVersions request with ``answer(correlation id)``, byte by byte if ``trickle``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameDecoder()
        try:
            while data := await reader.read(65536):
                frames.feed(data)
                for f in frames:
                    header, _ = codec.decode_request(f)
                    seen.append(header.correlation_id)
                    out = answer(header.correlation_id)
                    for i in range(len(out)) if trickle else [None]:
                        writer.write(out if i is None else out[i : i + 1])
                        await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


@pytest.mark.parametrize("trickle", [False, True])
def test_requests_and_responses(trickle: bool) -> None:
    async def main() -> None:
        seen: list[int] = []
        server = await _serve(_response, seen, trickle)
        peer = Peer("127.0.0.1", server.sockets[0].getsockname()[1], "t")
        try:
            for _ in range(3):
                body = await peer.request(ApiKey.API_VERSIONS, 1, {})
                assert body["api_keys"][0]["max_version"] == 3
        finally:
            peer.close()
            server.close()
        assert seen == [1, 2, 3]

    _run(main())


def test_mismatched_correlation_id_closes_and_the_next_request_reconnects() -> None:
    async def main() -> None:
        seen: list[int] = []
        server = await _serve(lambda cid: _response(cid + 1 if cid == 2 else cid), seen)
        peer = Peer("127.0.0.1", server.sockets[0].getsockname()[1], "t")
        try:
            await peer.request(ApiKey.API_VERSIONS, 1, {})
            with pytest.raises(CorrelationIdMismatchError) as e:
                await peer.request(ApiKey.API_VERSIONS, 1, {})
            assert (e.value.expected, e.value.got) == (2, 3)
            assert peer._writer is None  # closed
            assert (await peer.request(ApiKey.API_VERSIONS, 1, {}))["error_code"] == 0
        finally:
            peer.close()
            server.close()
        assert seen == [1, 2, 3]  # correlation ids keep counting on the new connection

    _run(main())


def test_connection_closed_mid_response() -> None:
    async def main() -> None:
        async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(65536)
            writer.write(_response(1)[:-3])
            writer.close()

        server = await asyncio.start_server(cut, "127.0.0.1", 0)
        peer = Peer("127.0.0.1", server.sockets[0].getsockname()[1], "t")
        try:
            with pytest.raises(asyncio.IncompleteReadError):
                await peer.request(ApiKey.API_VERSIONS, 1, {}, timeout=5)
            assert peer._writer is None
        finally:
            peer.close()
            server.close()

    _run(main())
