"""A ZooKeeper request awaited on the event loop with a deadline (kazoo's ``*_async`` calls).

kazoo's blocking calls (``zk.delete(...)``) wait without a bound while the connection is down: the request stays
queued until the client reconnects, which with ZooKeeper gone for good is never. Run in a worker thread
(``asyncio.to_thread``) such a call also pins that thread, and the interpreter joins the default executor's threads
at exit, so one of them on the shutdown path kept a broker alive after SIGTERM. Here the request is sent with
kazoo's asynchronous API and its result handed to the loop from kazoo's callback thread: no thread waits for it,
and the caller gives up at its deadline (the request may still be sent if the connection comes back; closing the
session afterwards fails it or makes it moot).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from tidelog.errors import ApiError, ErrorCode


class ZooKeeperGone(ApiError):
    """The request was not answered in time, or the session it needs is gone (the message says which). A client
    whose request needed it is answered REQUEST_TIMED_OUT (Kafka's ZooKeeperClientTimeoutException ends the same
    requests with a timeout)."""

    kafka_error = ErrorCode.REQUEST_TIMED_OUT


async def zk_await(result: Any, timeout: float, give_up: Callable[[], str | None] | None = None,
                   poll: float = 0.25) -> Any:
    """The value of kazoo's ``IAsyncResult`` ``result`` (its exception raised as is: ``ConnectionLoss``,
    ``NoNodeError``...), waited for at most ``timeout`` seconds; then :class:`ZooKeeperGone`. ``give_up()``, asked
    every ``poll`` seconds, returns a reason to stop waiting early (ZooKeeper unreachable for longer than the
    session timeout), or None."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(r: Any) -> None:  # on the loop
        if fut.done():
            return
        if r.successful():
            fut.set_result(r.value)
        else:
            fut.set_exception(r.exception)

    def done(r: Any) -> None:  # kazoo's callback thread (or the caller's, when already answered)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(settle, r)

    result.rawlink(done)
    deadline = time.monotonic() + max(0.0, timeout)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.wait({fut}, timeout=min(poll, remaining))
            if fut.done():
                return fut.result()
            reason = give_up() if give_up is not None else None
            if reason:
                raise ZooKeeperGone(reason)
        if fut.done():
            return fut.result()
        raise ZooKeeperGone(f"no answer from ZooKeeper within {timeout:.1f} s")
    finally:
        fut.cancel()  # given up: a late answer is dropped (settle sees it done), never an unretrieved exception


def zk_wait(result: Any, timeout: float) -> Any:
    """For code that already runs on a worker thread (the request handler threads: CreateTopics,
    CreatePartitions, AlterConfigs in ZooKeeper mode): the value of kazoo's ``IAsyncResult`` ``result`` (its
    exception raised as is), waited for at most ``timeout`` seconds; then :class:`ZooKeeperGone`. kazoo's blocking
    calls wait for a reconnect without a bound; this holds the thread at most ``timeout``."""
    if not result.wait(max(0.0, timeout)):
        raise ZooKeeperGone(f"no answer from ZooKeeper within {timeout:.1f} s")
    return result.get(block=False)
