"""Request handlers, one module per API family.

A handler is an ``async def handle(ctx: RequestContext, request: dict) -> dict`` registered with
``@handles(api_key)``. ``request`` is the decoded body (snake_case keys, see ``tidelog.protocol``); the returned
dict is the response body, encoded by the server at ``ctx.api_version``. Handlers never raise for client
errors: they answer with the Kafka error code. An exception escaping a handler is logged and the server answers
with the API's generic error (UNKNOWN_SERVER_ERROR) where the schema allows, else closes the connection.

``REGISTRY`` holds the APIs every broker serves; it is filled when the handler modules are imported (the broker
module imports them). A part of the broker that serves more APIs (cluster mode's OffsetForLeaderEpoch and
reassignments) registers them in a table of its own (``handles(key, table)``), which the broker adds to its
``handlers`` only when that part is in use.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.purgatory import DelayedOperation
    from tidelog.broker.request_pool import RequestHandlerPool
    from tidelog.broker.security.acls import AclOperation, ResourceType

#: a handler's answer: the response body, a DeferredResponse (pipelined produce), or None (acks=0 produce)
Handler = Callable[["RequestContext", dict], Awaitable["dict | DeferredResponse | None"]]
_P = ParamSpec("_P")
_R = TypeVar("_R")

REGISTRY: dict[int, Handler] = {}


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""
    extra: object = None  # unused; kept so the positional constructor (the produce fast lane) stays as it is
    # the authenticated principal ("User:<name>", the mapped TLS subject, or "User:ANONYMOUS") and the listener
    # the request arrived on: what an authorizer checks, and which endpoints Metadata advertises
    principal: str = "User:ANONYMOUS"
    listener: str = ""
    # client quotas (broker/quotas.py): the request's frame size; the throttle time a handler computed for a
    # bandwidth quota (-1: exempt from quotas, e.g. a follower's fetch); seconds it waited in the purgatory
    # (not counted as handler time by request_percentage)
    request_size: int = 0
    throttle_ms: int = 0
    wait_s: float = 0.0
    # the connection answers a DeferredResponse later, in request order, and reads the next request meanwhile
    # (an acks=all Produce whose appends are done: broker/server.py, "pipelined produce")
    defer: bool = False

    def authorize(self, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May this request's principal, from its host, do ``op`` on the resource? Always True without an
        authorizer (``authorizer.class.name`` empty). Kafka's AclOperation / ResourceType codes
        (``tidelog.broker.security.acls``)."""
        auth = self.broker.authorizer
        return auth is None or auth.authorize(self.principal, self.client_host, op, resource_type, name)


class DeferredResponse:
    """A handler's answer that is not ready yet: ``finish(await op.wait())`` is the response body. Returned only
    when ``ctx.defer`` is set; the handler has done everything that must happen in request order already."""

    __slots__ = ("finish", "op")

    def __init__(self, op: DelayedOperation, finish: Callable[[object], dict]) -> None:
        self.op = op
        self.finish = finish


def handles(api_key: int, table: dict[int, Handler] = REGISTRY) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        key = int(api_key)  # an ApiKey member or a plain int: the registry holds plain ints
        if key in table:
            raise RuntimeError(f"api key {key} registered twice")
        table[key] = fn
        return fn

    return register


async def topic_change(pool: RequestHandlerPool, fn: Callable[_P, Awaitable[_R]] | Callable[_P, _R],
                       *args: _P.args,
                       **kwargs: _P.kwargs) -> _R:
    """A TopicManager method that changes topics (create, delete, add partitions, alter configs, Metadata's
    auto-creation). A coroutine function (cluster mode's delete, which waits for ZooKeeper) is awaited; anything
    else runs on the broker's request handler threads (``broker.request_pool``), never on the event loop:
    creating or deleting a topic of 1000 partitions means thousands of files and fsyncs (it stalled every client
    for 1.4 s and 5.5 s when it ran on the loop), and in cluster mode a change is a ZooKeeper round trip."""
    if inspect.iscoroutinefunction(fn):
        return await cast("Callable[_P, Awaitable[_R]]", fn)(*args, **kwargs)
    result: _R = await pool.run(cast("Callable[_P, _R]", fn), *args, **kwargs)
    return result
