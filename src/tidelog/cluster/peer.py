"""A minimal broker-to-broker client: one connection, one request in flight, over asyncio streams.

Framing, correlation ids and response decoding are :class:`tidelog.protocol.framing.ClientConnection`'s; this
class only connects, writes and reads exactly the bytes the framing asks for."""

from __future__ import annotations

import asyncio
from typing import Any

from tidelog.client.security import ClientSecurity, open_connection
from tidelog.protocol.framing import ClientConnection


class Peer:
    """``security``: TLS and SASL for the inter-broker listener (``tidelog.client.security``); None:
    PLAINTEXT."""

    def __init__(self, host: str, port: int, client_id: str, security: ClientSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn: ClientConnection | None = None
        self._next_cid = 1  # correlation ids keep counting across reconnects

    async def request(self, api_key: int, version: int, body: dict, timeout: float = 30.0) -> dict[str, Any]:
        """Send one request and read its response, all within ``timeout`` seconds (one timer, no extra task).

        Any failure (timeout, I/O, a response out of step: CorrelationIdMismatchError) closes the connection."""
        try:
            async with asyncio.timeout(timeout):
                if self._writer is None:
                    self._reader, self._writer, first = await open_connection(self.host, self.port, self.security,
                                                                              self.client_id)
                    self._next_cid = max(self._next_cid, first)
                    self._conn = ClientConnection(self.client_id, first_correlation_id=self._next_cid)
                conn, reader = self._conn, self._reader
                assert conn is not None and reader is not None
                _, data = conn.send(api_key, version, body)
                self._next_cid = conn.next_correlation_id
                self._writer.write(data)
                await self._writer.drain()
                # read the size prefix, then exactly the payload it announced (no copy beyond the stream's)
                while (response := conn.next_response()) is None:
                    conn.feed(await reader.readexactly(conn.missing))
        except BaseException:
            self.close()
            raise
        return response.body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._conn = None
