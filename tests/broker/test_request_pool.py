"""AppendSequencer (per-partition append order = arrival order) and RequestHandlerPool."""

from __future__ import annotations

import asyncio
import threading

from tidelog.broker.request_pool import AppendSequencer, RequestHandlerPool


def test_appends_run_in_ticket_order_whatever_order_validation_finishes() -> None:
    async def main() -> list[str]:
        seq = AppendSequencer()
        order: list[str] = []
        gates = {name: asyncio.Event() for name in "abc"}

        async def request(name: str) -> None:
            ticket = seq.ticket("tp")  # at dispatch, before any await
            try:
                await gates[name].wait()  # validation, finishing in any order
                await ticket.turn()
                order.append(name)
            finally:
                ticket.release()

        tasks = [asyncio.create_task(request(n)) for n in "abc"]
        await asyncio.sleep(0)
        assert seq.busy("tp") and not seq.busy("other")
        for n in "cba":  # the last one validated first
            gates[n].set()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert not seq.busy("tp") and len(seq) == 0
        return order

    assert asyncio.run(main()) == ["a", "b", "c"]


def test_a_ticket_given_up_early_still_holds_back_the_next_until_the_earlier_one_is_done() -> None:
    async def main() -> list[str]:
        seq = AppendSequencer()
        order: list[str] = []
        first = seq.ticket("tp")
        second = seq.ticket("tp")  # gives up (e.g. cancelled) before its turn
        third = seq.ticket("tp")
        second.release()

        async def append_third() -> None:
            await third.turn()
            order.append("third")
            third.release()

        task = asyncio.create_task(append_third())
        await asyncio.sleep(0.01)
        assert order == []  # still behind the first
        order.append("first")
        first.release()
        await task
        assert len(seq) == 0
        return order

    assert asyncio.run(main()) == ["first", "third"]


def test_pool_runs_on_worker_threads_while_the_loop_keeps_running() -> None:
    async def main() -> tuple[str, int]:
        pool = RequestHandlerPool(2)
        release = threading.Event()
        ticks = 0

        def work(x: int, *, y: int) -> str:
            release.wait(10)
            return f"{threading.current_thread().name}:{x + y}"

        fut = asyncio.ensure_future(pool.run(work, 1, y=2))
        while ticks < 5:  # the loop is free while the worker blocks
            await asyncio.sleep(0)
            ticks += 1
        release.set()
        result = await fut
        pool.shutdown()
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result.startswith("tidelog-request-handler") and result.endswith(":3") and ticks == 5
