"""Requests from this broker to another one (Kafka's inter-broker ``NetworkClient`` of the ZooKeeper mode, as the
transaction marker channel and the KIP-890 verification use it).

:class:`BrokerChannel` keeps one pooled :class:`~tidelog.cluster.peer.Peer` per target broker, connected to the
endpoint that broker registered in ZooKeeper (``/brokers/ids/<id>``, the replica manager's ``live`` view).
A ``Peer`` carries one request at a time, so requests to the same broker take turns (a lock per target);
requests to different brokers run side by side. A failed request closes its connection (``Peer`` does) and the
next one reconnects; a broker that leaves ``/brokers/ids`` or re-registers on another endpoint gets a new
connection; everything is closed when the broker shuts down.

Failures are raised as :class:`BrokerRequestError` (a ``BrokerError``, so the broker layer can catch it without
importing this package), naming the Kafka error that says what happened: BROKER_NOT_AVAILABLE (not registered,
refused, connection lost, or this broker is shutting down) or REQUEST_TIMED_OUT. Whether the request was
processed is unknown after either, so callers retry only what is idempotent (WriteTxnMarkers, a verification).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from tidelog.broker.errors import BrokerError
from tidelog.cluster.peer import Peer
from tidelog.errors import ErrorCode

log = logging.getLogger("tidelog.cluster.broker_channel")


class BrokerRequestError(BrokerError):
    """An inter-broker request that got no answer: ``kafka_error`` is BROKER_NOT_AVAILABLE or REQUEST_TIMED_OUT."""

    def __init__(self, kafka_error: ErrorCode, node_id: int, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error
        self.node_id = node_id


class _Target:
    __slots__ = ("lock", "peer")

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.lock = asyncio.Lock()


class BrokerChannel:
    """One pooled connection per target broker. ``endpoint(node_id)`` answers the registered ``(host, port)`` or
    None when the broker is not live; it is read at every request, so a new registration is followed."""

    def __init__(self, node_id: int, endpoint: Callable[[int], tuple[str, int] | None]) -> None:
        self.client_id = f"tidelog-broker-{node_id}"
        self._endpoint = endpoint
        self._targets: dict[int, _Target] = {}
        self.closed = False

    async def request(self, node_id: int, api_key: int, version: int, body: dict,
                      timeout: float = 30.0) -> dict[str, Any]:
        """Send one request to broker ``node_id`` and return the decoded response body (whatever error codes it
        holds are the caller's to read). Raises :class:`BrokerRequestError` when no answer came."""
        deadline = time.monotonic() + timeout
        target = self._target(node_id)
        try:
            async with asyncio.timeout(timeout):
                async with target.lock:
                    if self._targets.get(node_id) is not target:  # replaced meanwhile (moved, left, shut down)
                        target = self._target(node_id)
                    return await target.peer.request(api_key, version, body, max(0.001, deadline - time.monotonic()))
        except TimeoutError:
            raise BrokerRequestError(ErrorCode.REQUEST_TIMED_OUT, node_id,
                                     f"broker {node_id} did not answer api {api_key} within {timeout:.1f}s") from None
        except (OSError, EOFError, asyncio.IncompleteReadError) as exc:
            raise BrokerRequestError(ErrorCode.BROKER_NOT_AVAILABLE, node_id,
                                     f"broker {node_id} unreachable: {exc!r}") from exc

    def _target(self, node_id: int) -> _Target:
        if self.closed:
            raise BrokerRequestError(ErrorCode.BROKER_NOT_AVAILABLE, node_id, "this broker is shutting down")
        ep = self._endpoint(node_id)
        if ep is None:
            self.forget(node_id)
            raise BrokerRequestError(ErrorCode.BROKER_NOT_AVAILABLE, node_id, f"broker {node_id} is not live")
        t = self._targets.get(node_id)
        if t is not None and (t.peer.host, t.peer.port) == ep:
            return t
        if t is not None:
            t.peer.close()  # re-registered elsewhere: a request still on the old connection fails and is retried
        t = self._targets[node_id] = _Target(Peer(ep[0], ep[1], self.client_id))
        return t

    def forget(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (it left ``/brokers/ids``); a later request connects again."""
        t = self._targets.pop(node_id, None)
        if t is not None:
            t.peer.close()

    def close(self) -> None:
        """Close every connection; later requests fail with BROKER_NOT_AVAILABLE (the broker is shutting down)."""
        self.closed = True
        for node_id in list(self._targets):
            self.forget(node_id)
