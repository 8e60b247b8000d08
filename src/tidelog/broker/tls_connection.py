"""A connection on an SSL or SASL_SSL listener (docs/decisions/0026-listeners-tls-sasl.md): the same request
loop over a non-blocking ``ssl.SSLSocket`` (handshake first; reads and writes retry on ``SSLWantRead`` /
``SSLWantWrite``); file regions are read with ``os.preadv`` and encrypted (no zero-copy ``sendfile`` under TLS)."""

from __future__ import annotations

import errno
import logging
import os
import ssl

from tidelog.broker.connection import Connection
from tidelog.broker.connection_io import Buffer, ConnectionClosed
from tidelog.broker.security.tls import NoMatchingRule, subject_dn

log = logging.getLogger("tidelog.broker.server")

_TLS_CHUNK = 256 * 1024  # file regions are read and encrypted this much at a time
_TLS_RECV = 64 * 1024


class TlsConnection(Connection):
    """A connection on an SSL or SASL_SSL listener: the TLS handshake first, then the same request loop over the
    ``SSLSocket``. Writes go through ``SSLSocket.send`` (no ``sendmsg``); file regions are read with
    ``os.preadv`` into a reused buffer and encrypted (no ``sendfile`` under TLS)."""

    _plain = False

    async def secure(self) -> bool:
        listener = self.listener
        assert listener is not None and listener.ssl_context is not None
        try:
            self.sock = listener.ssl_context.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
            while True:
                try:
                    self.sock.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._wait(False)
                except ssl.SSLWantWriteError:
                    await self._wait(True)
        except (ssl.SSLError, OSError) as exc:
            # Kafka: "Failed authentication with /<ip> (SSL handshake failed)"
            log.info("Failed authentication (SSL handshake failed)",
                     extra={"kv": {"peer": self.peer, "listener": listener.name, "error": str(exc)}})
            self.broker.metrics.record_close("ssl_handshake_failed")
            return False
        cert = self.sock.getpeercert()
        if cert:
            try:
                assert listener.principal_mapper is not None
                dn = subject_dn(cert)
                self.principal = "User:" + listener.principal_mapper.name(dn)
                log.info("TLS client authenticated", extra={"kv": {"peer": self.peer, "listener": listener.name,
                                                                   "dn": dn, "principal": self.principal}})
            except NoMatchingRule as exc:
                log.info("Failed authentication (no principal mapping rule)",
                         extra={"kv": {"peer": self.peer, "error": str(exc)}})
                self.broker.metrics.record_close("ssl_principal")
                return False
        return await super().secure()

    async def _recv_more(self, want: int) -> None:
        while True:
            if self.closed:
                raise ConnectionClosed()
            try:
                # one TLS record (<= 16 KiB) per call whatever is asked: asking for more only makes ssl allocate
                # (and, past malloc's mmap threshold, map and unmap) a buffer of that size for each record
                data = self.sock.recv(_TLS_RECV)
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                await self._wait(False)
                continue
            except ssl.SSLWantWriteError:
                await self._wait(True)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise ConnectionClosed() from None
            if not data:
                raise ConnectionClosed()
            self._frames.feed(data)
            return

    async def _tls_send(self, data: memoryview) -> None:
        while data:
            try:
                n = self.sock.send(data)
            except (ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                await self._wait(True)
                continue
            except ssl.SSLWantReadError:
                await self._wait(False)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise ConnectionClosed() from None
            data = data[n:]

    async def _send_buffers(self, bufs: list[Buffer], flags: int = 0) -> None:  # flags: plain sockets only
        views = [memoryview(b).cast("B") for b in bufs if len(b)]
        small: list[memoryview] = []
        small_len = 0
        for v in views:
            if len(v) >= _TLS_CHUNK:
                if small:
                    await self._tls_send(memoryview(b"".join(small)))
                    small, small_len = [], 0
                await self._tls_send(v)
            else:
                small.append(v)
                small_len += len(v)
                if small_len >= _TLS_CHUNK:
                    await self._tls_send(memoryview(b"".join(small)))
                    small, small_len = [], 0
        if small:
            await self._tls_send(memoryview(b"".join(small)) if len(small) > 1 else small[0])

    _region_buf: memoryview | None = None

    async def _send_region(self, fd: int, position: int, length: int) -> None:
        buf = self._region_buf
        if buf is None:  # one buffer per connection, reused (each chunk is fully sent before the next read)
            buf = self._region_buf = memoryview(bytearray(_TLS_CHUNK))
        while length > 0:
            n = os.preadv(fd, [buf[: min(length, len(buf))]], position)
            if n == 0:
                raise OSError(errno.EIO, f"file region hit end of file with {length} bytes left")
            await self._tls_send(buf[:n])
            position += n
            length -= n
