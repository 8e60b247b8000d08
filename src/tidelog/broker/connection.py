"""A client connection's request loop: Kafka's network thread for one connection (see :mod:`tidelog.broker.server`).

:class:`Connection` reads a frame, decodes it, dispatches it to its handler (``broker.handlers``), applies client
quotas (KIP-219 throttling and muting) and writes the answer, one request at a time and in order; a handler's
failure is answered with the API's error response. Its bases hold the socket (:mod:`tidelog.broker.connection_io`),
SASL (:mod:`tidelog.broker.authenticator`), the Produce fast lane and pipelining
(:mod:`tidelog.broker.produce_lane`) and the inline lane, Produce requests answered in the reader callback
(:mod:`tidelog.broker.inline_lane`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from tidelog.broker.api_names import (
    API_VERSIONS_KEY,
    PRODUCE_KEY,
    SASL_HANDSHAKE_KEY,
    api_name,
    api_versions_unsupported_body,
    error_name,
)
from tidelog.broker.connection_io import ConnectionClosed
from tidelog.broker.errors import UNKNOWN_SERVER_ERROR_MESSAGE, error_of, is_client_error
from tidelog.broker.handlers import DeferredResponse, RequestContext
from tidelog.broker.handlers.produce import produce
from tidelog.broker.inline_lane import InlineLane
from tidelog.broker.produce_lane import _encode_produce, _parse_produce
from tidelog.broker.quotas import after_handler, client_throttles
from tidelog.protocol import codec
from tidelog.protocol.error_response import UNKNOWN_SERVER_ERROR, error_counter, error_response
from tidelog.protocol.exceptions import InvalidRequestError, UnknownApiKeyError, UnsupportedVersionError

log = logging.getLogger("tidelog.broker.server")

# responses not scanned for error codes (big lists, errors rare): ApiVersions, Metadata
_NO_ERROR_SCAN = frozenset({18, 3})

__all__ = ["Connection", "_encode_produce", "_parse_produce"]


def _count_errors(body: object, out: dict[int, int], depth: int = 0) -> None:
    """Non-zero ``error_code`` fields of a response body (for the errors metric)."""
    if depth > 6:
        return
    if isinstance(body, dict):
        code = body.get("error_code")
        if code:
            out[code] = out.get(code, 0) + 1
        for v in body.values():
            if isinstance(v, list) and v and isinstance(v[0], dict):
                for item in v:
                    _count_errors(item, out, depth + 1)
            elif isinstance(v, dict):
                _count_errors(v, out, depth + 1)


class Connection(InlineLane):
    """One client connection: reads frames, runs handlers one at a time, writes responses (zero-copy regions
    with ``os.sendfile``)."""

    # a Produce of the common shape (one topic, one partition, non-transactional, acks 1/-1) is parsed and answered
    # in C around the same handler steps (process, _produce_fast); False: every request takes the generic codec
    fast_produce = _parse_produce is not None

    # -- the request loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        broker = self.broker
        broker.metrics.connections.inc()
        try:
            if not await self.secure():
                return
            self._serving = True  # the reader callback may answer Produce requests (inline lane)
            while not self.closed:
                frame = await self.read_frame()
                if frame is None:
                    break
                self.busy = self._in_request = True
                self.last_active = self._loop.time()
                keep = await self.process(frame)
                del frame
                self.release_memory()
                self._in_request = False
                self.busy = bool(self._pending)
                self.last_active = self._loop.time()
                if not keep or broker.stopping:
                    break
                if self.mute_ms:
                    await self._mute()
            if self._pending and not self.closed:
                await self._drain()  # the answers of pipelined produces still waiting go out before the close
        except ConnectionClosed:
            pass
        except (ConnectionError, OSError) as exc:
            log.info("connection error", extra={"kv": {"peer": self.peer, "error": repr(exc)}})
            broker.metrics.record_close("io_error")
        except asyncio.CancelledError:
            pass
        except Exception:  # e.g. a response that cannot be encoded: this connection only
            log.exception("connection failed", extra={"kv": {"peer": self.peer}})
            broker.metrics.record_close("internal_error")
        finally:
            if self._writer is not None:
                self._writer.cancel()
            self.close()
            self.release_memory()
            broker.metrics.connections.dec()
            broker.connections.discard(self)

    async def process(self, frame: bytes | memoryview) -> bool:
        """Decode, dispatch, answer. Returns False when the connection must be closed.

        The fast lane: a Produce request of the common shape (``tidelog.protocol._produce.parse_produce``: one
        topic, one partition, no transactional id or batch, acks 1 or -1, no tagged fields) is not decoded into
        dicts but handed to :func:`~tidelog.broker.handlers.produce.produce_one` and its response encoded in C
        (:meth:`_produce_fast`); every other request, and every frame that parser does not recognise, takes the
        generic codec below. Both lanes run the same checks, handler steps, quotas and metrics."""
        broker = self.broker
        t0 = time.perf_counter()
        if self.fast_produce:  # any other request costs one C call that looks at its api key
            parsed = _parse_produce(frame, broker.accepted_versions)
            if parsed is not None and broker.handlers.get(PRODUCE_KEY) is produce:
                return await self._produce_fast(frame, parsed, t0)
        try:
            header, body = codec.decode_request(frame, broker.accepted_versions)
        except UnsupportedVersionError as exc:
            if exc.api_key == API_VERSIONS_KEY:
                # KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client retries lower.
                unsupported = api_versions_unsupported_body(broker)
                chunks = codec.encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, unsupported)
                if self._pending:
                    await self._drain()
                await self.write_chunks(chunks)
                broker.metrics.record_error("API_VERSIONS", "UNSUPPORTED_VERSION")
                return True
            log.info(
                "closing connection: unsupported API version",
                extra={"kv": {"peer": self.peer, "api": api_name(exc.api_key), "version": exc.version,
                              "client_id": exc.client_id}},
            )
            broker.metrics.record_close("unsupported_version")
            return False
        except UnknownApiKeyError as exc:
            log.info(
                "closing connection: unknown API key",
                extra={"kv": {"peer": self.peer, "api_key": exc.api_key, "version": exc.version}},
            )
            broker.metrics.record_close("unknown_api_key")
            return False
        except InvalidRequestError as exc:
            log.info("closing connection: invalid request", extra={"kv": {"peer": self.peer, "error": str(exc)}})
            broker.metrics.record_close("invalid_request")
            return False

        api_key = header.api_key
        pipelined = api_key == PRODUCE_KEY and self._pipelining()
        if self._pending and not pipelined:
            await self._drain()  # every other request waits for the pipelined produces before it: one at a time
        if (api_key == SASL_HANDSHAKE_KEY and self.sasl_authenticate_version >= 1 and self.listener is not None
                and self.listener.sasl):
            # KIP-368: a client (SaslAuthenticate v1+) re-authenticates on its connection with a new handshake
            return await self.authenticate(frame)
        if self.session_expires is not None and self._session_expired():
            return False
        handler = broker.handlers.get(api_key)
        name = api_name(api_key)
        if handler is None:
            log.info(
                "closing connection: no handler for API",
                extra={"kv": {"peer": self.peer, "api": name, "version": header.api_version}},
            )
            broker.metrics.record_close("unknown_api_key")
            return False
        ctx = RequestContext(
            broker=broker,
            api_key=api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            client_host=self.client_host,
            principal=self.principal,
            listener=self.listener_name,
            request_size=len(frame),
            defer=pipelined,
        )
        try:
            response = await handler(ctx, body)
        except Exception as exc:
            return await self._handler_failed(api_key, header, body, name, exc)
        if isinstance(response, DeferredResponse):
            return await self._defer(response, api_key, header.api_version, header.correlation_id, name, t0)
        if self._pending:
            await self._drain()  # answered now, but after the pipelined answers before it
        if broker.client_quotas.enabled:
            await self._throttle(ctx, response, t0)
        if response is not None:
            chunks = codec.encode_response(api_key, header.api_version, header.correlation_id, response)
            await self.write_chunks(chunks)
            if api_key not in _NO_ERROR_SCAN:
                self._record_errors(api_key, header.api_version, name, response)
        broker.metrics.record_request(name, time.perf_counter() - t0)
        return True

    def _record_errors(self, api_key: int, version: int, name: str, response: object) -> None:
        errors: dict[int, int] = {}
        count = error_counter(api_key, version)
        if count is not None and isinstance(response, dict):  # (anything else holds no error code to count)
            try:
                count(response, errors)
            except (AttributeError, TypeError):  # a body not made of dicts: walk whatever it holds
                errors.clear()
                _count_errors(response, errors)
        for code, n in errors.items():
            self.broker.metrics.record_error(name, error_name(code), n)

    async def _throttle(self, ctx: RequestContext, response: object, t0: float) -> None:
        """Client quotas (broker/quotas.py, enabled): the throttle time goes into the response's
        ``throttle_time_ms``; the connection is muted after the response, or, for a client from before KIP-219,
        the response itself waits."""
        throttle = after_handler(self.broker.client_quotas, ctx, response, time.perf_counter() - t0)
        if throttle:
            self.mute_ms = throttle
            if not client_throttles(ctx.api_key, ctx.api_version):
                await self._mute()

    async def _handler_failed(self, api_key: int, header: codec.RequestHeader, body: dict, name: str, exc: Exception) -> bool:
        if getattr(exc, "quiet", False):  # a handler's deliberate close (e.g. failed acks=0 produce)
            log.info("closing connection", extra={"kv": {"peer": self.peer, "api": name, "reason": str(exc)}})
            self.broker.metrics.record_close("handler_close")
            return False
        return await self._answer_failure(api_key, header, body, name, exc)

    async def _answer_failure(self, api_key: int, header: codec.RequestHeader, body: dict, name: str, exc: Exception) -> bool:
        """A handler raised: answer the API's error response (Kafka's getErrorResponse, ``Errors.forException``):
        an exception naming its Kafka error (e.g. ZooKeeper not answering in time: REQUEST_TIMED_OUT) in every error
        code with its message, anything else UNKNOWN_SERVER_ERROR, and keep the connection; an acks=0 produce has
        no response, so that connection is closed, as Kafka does."""
        broker = self.broker
        if is_client_error(exc):
            code, message = error_of(exc)
        else:  # no exception text to the client (it is in the log below): Kafka's generic message
            code, message = UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR_MESSAGE
        broker.metrics.record_error(name, error_name(code))
        kv = {"peer": self.peer, "api": name, "version": header.api_version, "client_id": header.client_id}
        if api_key == PRODUCE_KEY and body.get("acks") == 0:
            log.exception("handler failed; closing connection (acks=0 produce)", extra={"kv": kv})
            broker.metrics.record_close("handler_error")
            return False
        if code == UNKNOWN_SERVER_ERROR:
            log.exception("handler failed; answering UNKNOWN_SERVER_ERROR", extra={"kv": kv})
        else:
            log.warning("request failed; answering %s: %s", error_name(code), message, extra={"kv": kv})
        if self._pending:
            await self._drain()
        try:
            response = error_response(api_key, header.api_version, body, code, message)
            chunks = codec.encode_response(api_key, header.api_version, header.correlation_id, response)
        except Exception:
            log.exception("no error response could be built; closing connection", extra={"kv": kv})
            broker.metrics.record_close("handler_error")
            return False
        await self.write_chunks(chunks)
        return True
