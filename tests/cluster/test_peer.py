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
            assert not peer.connected  # closed
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
            assert not peer.connected
        finally:
            peer.close()
            server.close()

    _run(main())


# -- FrameReader: the PLAINTEXT read path, fed as the event loop feeds it ------------------------------------------


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _feed(reader: Any, data: bytes, step: int) -> None:
    """Deliver ``data`` in reads of at most ``step`` bytes, each into the buffer the reader hands out."""
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        n = min(step, len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        reader.buffer_updated(n)
        pos += n


@pytest.mark.parametrize("step", [1, 3, 5, 4096, 1 << 20])
def test_frame_reader_splits_frames_however_the_bytes_arrive(step: int) -> None:
    from tidelog.cluster import peer as peer_mod

    async def main() -> None:
        reader = peer_mod.FrameReader()
        payloads = [b"", b"a", bytes(range(256)) * 300, b"xyz" * 10, bytes(70_000)]
        _feed(reader, b"".join(_frame(p) for p in payloads), step)
        got = [bytes(await reader.next_frame()) for _ in payloads]
        assert got == payloads
        assert not reader._frames and reader._frame is None and reader._head_filled == 0

    asyncio.run(main())


def test_frame_reader_large_frame_grows_and_lying_prefix_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidelog.cluster import peer as peer_mod
    from tidelog.protocol.exceptions import FrameTooLargeError

    monkeypatch.setattr(peer_mod, "_DIRECT_MAX", 100)  # frames above it are assembled as they arrive

    async def main() -> None:
        reader = peer_mod.FrameReader(max_frame_size=1000)
        big = bytes(range(250)) * 4
        _feed(reader, _frame(big) + _frame(b"after"), 77)
        assert bytes(await reader.next_frame()) == big
        assert bytes(await reader.next_frame()) == b"after"
        assert reader._frame is None and reader._scratch is None
        # a prefix above the maximum fails the waiting request before anything is allocated for it
        _feed(reader, (1001).to_bytes(4, "big"), 4)
        with pytest.raises(FrameTooLargeError):
            await reader.next_frame()

    asyncio.run(main())


def test_frame_reader_eof_mid_frame_fails_the_waiter() -> None:
    from tidelog.cluster import peer as peer_mod

    async def main() -> None:
        reader = peer_mod.FrameReader()
        _feed(reader, _frame(b"0123456789")[:-2], 4)
        waiter = asyncio.ensure_future(reader.next_frame())
        await asyncio.sleep(0)
        assert not waiter.done()
        reader.eof_received()
        with pytest.raises(asyncio.IncompleteReadError):
            await waiter

    asyncio.run(main())


def test_frame_reader_reuses_a_buffer_only_when_nothing_refers_to_it() -> None:
    from tidelog.cluster import peer as peer_mod

    async def main() -> None:
        reader = peer_mod.FrameReader()
        first = bytes(range(200)) * 500
        _feed(reader, _frame(first), 1 << 20)
        held = await reader.next_frame()
        records = held[10:20]  # a view into it, as a decoded answer's records are
        del held
        _feed(reader, _frame(b"x" * 90_000), 1 << 20)
        second = await reader.next_frame()
        assert bytes(second) == b"x" * 90_000
        assert bytes(records) == first[10:20]  # still referred to: not overwritten
        assert second.obj is not records.obj
        buf = id(second.obj)  # (the reader keeps the object alive: the id stays its own)
        del records, second
        _feed(reader, _frame(b"y" * 80_000), 1 << 20)
        third = await reader.next_frame()
        assert bytes(third) == b"y" * 80_000
        assert id(third.obj) == buf  # dropped: its buffer was used again

    asyncio.run(main())
