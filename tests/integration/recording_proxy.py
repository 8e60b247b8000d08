"""A TCP relay that records the (api_key, api_version) of every Kafka request passing through it.

Advertise it (``advertised.listeners=PLAINTEXT://127.0.0.1:<proxy.port>``) and set ``target`` to the broker's
port: every connection of a client then goes through it, so a test sees which API versions a real client
negotiated (the broker's metrics count requests per API, not per version)."""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter


class RecordingProxy:
    """A TCP relay to ``target`` that counts the (api_key, api_version) of every request frame passing through."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.seen: Counter[tuple[int, int]] = Counter()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            assert self.target is not None
            upstream = socket.create_connection(self.target, timeout=30)
            self._conns += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._copy, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _exact(s: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                size = self._exact(src, 4)
                frame = self._exact(src, struct.unpack(">i", size)[0])
                with self._lock:
                    self.seen[struct.unpack_from(">hh", frame)] += 1
                dst.sendall(size + frame)
        except OSError:
            pass
        finally:
            dst.close()

    @staticmethod
    def _copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            dst.close()

    def versions(self, api_key: int) -> set[int]:
        with self._lock:
            return {v for (k, v) in self.seen if k == api_key}

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            c.close()
