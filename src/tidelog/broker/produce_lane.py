"""The Produce fast lane and pipelined produce on a connection (docs/decisions/0022-pipelined-produce.md).

The fast lane: a Produce request of the common shape (``tidelog.protocol._produce.parse_produce``: one topic, one
partition, no transactional id, acks 1 or -1, no tagged fields; v13 names the topic by id, resolved to the name at
the entry of :meth:`ProduceLane._produce_fast`) is not decoded into dicts but handed to
:func:`~tidelog.broker.handlers.produce.produce_one` and its response encoded in C (:meth:`ProduceLane._produce_fast`).

Pipelining: an acks=all Produce on a plain connection whose appends are done answers with a
:class:`~tidelog.broker.handlers.DeferredResponse`; it is queued and the request loop reads the next request while
it waits for the replicas; one writer task writes the queued answers in request order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from tidelog.broker.api_names import PRODUCE_KEY, error_name
from tidelog.broker.authenticator import SaslAuthenticator
from tidelog.broker.connection_io import ConnectionClosed
from tidelog.broker.handlers import DeferredResponse, RequestContext
from tidelog.broker.handlers.produce import produce_one, produce_one_body
from tidelog.protocol import codec

log = logging.getLogger("tidelog.broker.server")

_PRODUCE_NAME = "PRODUCE"

def _load_produce_lane() -> tuple[Any, Any]:
    """``tidelog.protocol._produce``'s (parse_produce, encode_produce_response) for the fast lane of a Produce of
    the common shape (:meth:`Connection.process`), or (None, None): not built, or ``TIDELOG_PURE_PYTHON`` set."""
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return None, None
    try:
        from tidelog.protocol._produce import encode_produce_response, parse_produce
    except ImportError:
        return None, None
    return parse_produce, encode_produce_response


_parse_produce, _encode_produce = _load_produce_lane()


class ProduceLane(SaslAuthenticator):
    """Pipelined acks=all produces and the C fast lane of a connection (both reached from
    :meth:`tidelog.broker.connection.Connection.process`)."""

    if TYPE_CHECKING:
        def _record_errors(self, api_key: int, version: int, name: str, response: object) -> None: ...

        async def _throttle(self, ctx: RequestContext, response: object, t0: float) -> None: ...

        async def _handler_failed(self, api_key: int, header: codec.RequestHeader, body: dict, name: str,
                                  exc: Exception) -> bool: ...

    # -- pipelined produce -------------------------------------------------------------------------------------
    # An acks=all Produce on a plain connection whose appends are done answers with a DeferredResponse: it is
    # queued here and the loop reads the next request while it waits for the replicas. A single writer task
    # writes the queued answers strictly in request order; any other request (and any produce answered at once)
    # first waits until the queue is empty, so only produces overlap, and only their replication waits: every
    # append still happens before the next request is decoded. docs/decisions/0022-pipelined-produce.md.

    def _pipelining(self) -> bool:
        """May a Produce be answered later, with the next request read meanwhile? A plain connection with
        ``tidelog.produce.pipeline.max.requests`` > 1, and client quotas off (their throttle time and mute are applied
        on the request path, which a deferred answer's writer does not take)."""
        return self._pipeline_max > 1 and not self.broker.client_quotas.enabled

    async def _defer(self, deferred: DeferredResponse, api_key: int, version: int, correlation_id: int, name: str,
                     t0: float) -> bool:
        """Queue a deferred answer for the writer task; with pipeline_max answers pending, read nothing more
        until one is written. True: the connection goes on."""
        self._pending.append((deferred, api_key, version, correlation_id, name, t0))
        if self._writer is None:
            self._writer = self._loop.create_task(self._write_deferred(), name=f"deferred-writer-{self.peer}")
        while len(self._pending) >= self._pipeline_max:
            await self._wait_progress()
        return True

    async def _wait_progress(self) -> None:
        if self.closed:
            raise ConnectionClosed()
        fut = self._progress
        if fut is None:
            fut = self._progress = self._loop.create_future()
        await fut

    def _wake_progress(self) -> None:
        fut, self._progress = self._progress, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _drain(self) -> None:
        """Wait until every pending pipelined answer is written (raises ConnectionClosed if it cannot be)."""
        while self._pending:
            await self._wait_progress()
        if self.closed:
            raise ConnectionClosed()

    async def _write_deferred(self) -> None:
        pending = self._pending
        metrics = self.broker.metrics
        try:
            while pending:
                deferred, _, _, _, name, _ = pending[0]
                try:
                    await deferred.op.wait()
                except Exception:
                    pass  # read again below, with the answers completed with it
                # every answer at the head of the queue whose operation is complete goes out in one send: a high
                # watermark move completes the produces it covers together (issue 30: one send, one wake-up of
                # the client, instead of one per answer)
                chunks: list[object] = []
                done: list[tuple[str, dict, float, int, int]] = []
                for deferred, api_key, version, correlation_id, name, t0 in pending:
                    fut = deferred.op.future
                    if not fut.done() or fut.cancelled():
                        break  # (a cancelled one ends the writer at the next await, as it always did)
                    failure = fut.exception()
                    result: object = failure
                    if failure is not None:  # the operation failed: finish answers UNKNOWN_SERVER_ERROR for it
                        log.error("delayed operation failed", exc_info=failure,
                                  extra={"kv": {"peer": self.peer, "api": name}})
                    else:
                        result = fut.result()
                    response = deferred.finish(result)
                    chunks.extend(codec.encode_response(api_key, version, correlation_id, response))
                    done.append((name, response, t0, api_key, version))
                await self.write_chunks(chunks)
                now = time.perf_counter()
                for name, response, t0, api_key, version in done:
                    pending.popleft()
                    self._record_errors(api_key, version, name, response)
                    metrics.record_request(name, now - t0)
                self.last_active = self._loop.time()
                if not pending and not self._in_request:
                    self.busy = False  # idle again: connections.max.idle.ms counts from here
                self._wake_progress()
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError, ConnectionClosed) as exc:
            if not self.closed:
                log.info("connection error", extra={"kv": {"peer": self.peer, "error": repr(exc)}})
                metrics.record_close("io_error")
        except Exception:  # e.g. a response that cannot be encoded: this connection only
            log.exception("connection failed", extra={"kv": {"peer": self.peer}})
            metrics.record_close("internal_error")
        finally:
            self._writer = None
            if pending:  # not all written: the connection cannot go on (the request loop sees it closed)
                pending.clear()
                self.abort()
            self._wake_progress()

    async def _produce_fast(self, frame: memoryview | bytes, parsed: tuple, t0: float) -> bool:
        """The fast lane of :meth:`process`: a Produce request ``parse_produce`` recognised, run through
        :func:`~tidelog.broker.handlers.produce.produce_one` (the Produce handler's own steps for one partition) and
        answered with ``encode_produce_response`` (the generic encoder's bytes). The session check, the handler
        failure answer, quotas and metrics are the generic path's."""
        broker = self.broker
        if self.session_expires is not None and self._session_expired():
            return False
        version, correlation_id, client_id, acks, timeout_ms, topic, index, records = parsed
        topic_id: bytes | None = None
        if version >= 13:  # KIP-516: the topic by id, resolved to its name here (None: no topic has the id)
            topic_id = topic
            info = broker.topics.by_id(topic)
            topic = info.name if info is not None else None
        pipelined = self._pipelining()
        if self._pending and not pipelined:
            await self._drain()
        ctx = RequestContext(broker, PRODUCE_KEY, version, correlation_id, client_id, self.client_host, None,
                             self.principal, self.listener_name, len(frame), defer=pipelined)
        try:
            pr = await produce_one(ctx, acks, timeout_ms, topic, index, records, topic_id)
        except Exception as exc:
            header = codec.RequestHeader(PRODUCE_KEY, version, correlation_id, client_id, 2 if version >= 9 else 1)
            body = {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
                    "topic_data": [{**({"name": topic} if topic_id is None else {"topic_id": topic_id}),
                                    "partition_data": [{"index": index, "records": records}]}]}
            return await self._handler_failed(PRODUCE_KEY, header, body, _PRODUCE_NAME, exc)
        if isinstance(pr, DeferredResponse):  # acks=-1 waiting for its replicas: pipelined, as in process
            return await self._defer(pr, PRODUCE_KEY, version, correlation_id, _PRODUCE_NAME, t0)
        if self._pending:
            await self._drain()  # answered now, but after the pipelined answers before it
        throttle = 0
        if broker.client_quotas.enabled:
            holder = {"throttle_time_ms": 0}
            await self._throttle(ctx, holder, t0)
            throttle = holder["throttle_time_ms"]
        data = _encode_produce(version, correlation_id, topic if topic_id is None else topic_id, pr, throttle)
        if data is not None:
            await self.write_chunks([data])
        else:  # something the C encoder does not write (e.g. record errors): the generic encoder
            response = produce_one_body(topic or "", pr, throttle, topic_id)
            await self.write_chunks(codec.encode_response(PRODUCE_KEY, version, correlation_id, response))
        code = pr["error_code"]
        if code:
            broker.metrics.record_error(_PRODUCE_NAME, error_name(code))
        broker.metrics.record_request(_PRODUCE_NAME, time.perf_counter() - t0)
        return True
