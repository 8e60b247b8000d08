"""A minimal broker-to-broker client: one connection, one request in flight, the codec's request/response."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from tidelog.protocol import codec

_I32 = struct.Struct(">i")


class Peer:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    async def request(self, api_key: int, version: int, body: dict, timeout: float = 30.0) -> dict[str, Any]:
        """Send one request and read its response, all within ``timeout`` seconds (one timer, no extra task)."""
        self._correlation += 1
        cid = self._correlation
        try:
            async with asyncio.timeout(timeout):
                if self._writer is None:
                    self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
                self._writer.write(codec.encode_request(api_key, version, cid, self.client_id, body))
                await self._writer.drain()
                assert self._reader is not None
                (size,) = _I32.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
        except BaseException:
            self.close()
            raise
        got, response = codec.decode_response(api_key, version, frame)
        if got != cid:
            self.close()
            raise ConnectionError(f"correlation id {got} != {cid}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
