"""``tidelog.cluster.zk_async.zk_await``: a kazoo asynchronous result awaited on the loop with a deadline (the
controlled shutdown's ZooKeeper requests). kazoo's own ``AsyncResult`` (its threading handler), set from another
thread as kazoo's connection thread does."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler

from tidelog.cluster.zk_async import ZooKeeperGone, zk_await, zk_wait


@pytest.fixture
def handler() -> Any:
    h = SequentialThreadingHandler()
    h.start()  # callbacks then run on its completion thread, as in a connected client
    yield h
    h.stop()


def test_a_value_set_by_another_thread_is_returned(handler: Any) -> None:
    async def go() -> Any:
        r = handler.async_result()
        threading.Thread(target=r.set, args=(["1", "2"],)).start()
        return await zk_await(r, 10)

    assert asyncio.run(go()) == ["1", "2"]


def test_an_exception_is_raised_as_is(handler: Any) -> None:
    async def go() -> Any:
        r = handler.async_result()
        threading.Thread(target=r.set_exception, args=(NoNodeError(),)).start()
        return await zk_await(r, 10)

    with pytest.raises(NoNodeError):
        asyncio.run(go())


def test_no_answer_gives_up_at_the_deadline(handler: Any) -> None:
    async def go() -> float:
        t0 = time.monotonic()
        with pytest.raises(ZooKeeperGone, match=r"no answer from ZooKeeper within 0\.3 s"):
            await zk_await(handler.async_result(), 0.3)
        return time.monotonic() - t0

    assert 0.3 <= asyncio.run(go()) < 5


def test_give_up_ends_the_wait_before_the_deadline_and_a_late_answer_is_dropped(handler: Any) -> None:
    unhandled: list[dict] = []

    async def go() -> float:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
        r = handler.async_result()
        t0 = time.monotonic()
        with pytest.raises(ZooKeeperGone, match="session expired"):
            await zk_await(r, 30, give_up=lambda: "session expired", poll=0.05)
        took = time.monotonic() - t0
        answered = asyncio.Event()
        loop = asyncio.get_running_loop()
        r.rawlink(lambda _r: loop.call_soon_threadsafe(answered.set))  # after zk_await's own callback
        r.set_exception(NoNodeError())  # the late answer (e.g. ConnectionLoss when the session is closed)
        await asyncio.wait_for(answered.wait(), 10)  # zk_await's settle() was posted before, so it ran
        del r  # with it zk_await's callback and future: an exception nobody retrieved would be reported now
        gc.collect()
        return took

    assert asyncio.run(go()) < 5
    assert unhandled == []  # no "Future exception was never retrieved"


def test_zk_wait_returns_the_value_or_raises_the_exception_set_by_another_thread(handler: Any) -> None:
    r = handler.async_result()
    threading.Thread(target=r.set, args=(["1"],)).start()
    assert zk_wait(r, 10) == ["1"]
    r = handler.async_result()
    threading.Thread(target=r.set_exception, args=(NoNodeError(),)).start()
    with pytest.raises(NoNodeError):
        zk_wait(r, 10)


def test_zk_wait_gives_up_at_the_deadline(handler: Any) -> None:
    t0 = time.monotonic()
    with pytest.raises(ZooKeeperGone, match=r"no answer from ZooKeeper within 0\.3 s"):
        zk_wait(handler.async_result(), 0.3)
    assert 0.3 <= time.monotonic() - t0 < 5
