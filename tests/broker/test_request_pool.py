"""AppendSequencer (per-partition append order = arrival order) and RequestHandlerPool."""

from __future__ import annotations

import asyncio
import os
import threading

from tidelog.broker.request_pool import HEAVY_NICE, AppendSequencer, DecompressionBudget, RequestHandlerPool


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


def test_decompression_budget_runs_at_most_its_slots_at_once_in_arrival_order() -> None:
    budget = DecompressionBudget(2, 1 << 20)
    lock = threading.Lock()
    running = [0, 0]  # now, most
    started: list[int] = []
    gate = threading.Event()

    def work(i: int) -> int:
        with lock:
            started.append(i)
            running[0] += 1
            running[1] = max(running[1], running[0])
        gate.wait(5)
        with lock:
            running[0] -= 1
        return i

    async def main() -> list[int]:
        tasks = [asyncio.create_task(budget.run(work, i)) for i in range(6)]
        while len(started) < 2:  # two slots taken; the four others wait on the loop, not on a thread
            await asyncio.sleep(0.01)
        assert budget.in_flight == 2 and budget.waiting == 4
        tasks[4].cancel()  # a waiter whose connection went away gives up its place
        gate.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        return [d for d in done if isinstance(d, int)]

    try:
        assert asyncio.run(main()) == [0, 1, 2, 3, 5]
    finally:
        budget.shutdown()
    assert running[1] == 2 and budget.peak == 2
    assert started[:2] == [0, 1] and sorted(started) == [0, 1, 2, 3, 5]
    assert budget.in_flight == 0 and budget.waiting == 0 and budget.total == 5


def test_decompression_budget_holds_the_slot_until_the_worker_ends_even_if_cancelled() -> None:
    budget = DecompressionBudget(1, 0)
    gate = threading.Event()

    async def main() -> None:
        first = asyncio.create_task(budget.run(gate.wait, 5))
        while budget.in_flight == 0:
            await asyncio.sleep(0.01)
        first.cancel()  # the caller goes away; its worker call still runs
        await asyncio.sleep(0.05)
        assert budget.in_flight == 1  # the slot is still held: the thread is still inflating
        second = asyncio.create_task(budget.run(lambda: "second"))
        await asyncio.sleep(0.05)
        assert not second.done() and budget.waiting == 1
        gate.set()
        assert await second == "second"

    try:
        asyncio.run(main())
    finally:
        budget.shutdown()
    assert budget.peak == 1 and budget.in_flight == 0


def test_heavy_validations_run_at_a_lower_cpu_priority() -> None:
    budget = DecompressionBudget(1, 0)

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    try:
        heavy = asyncio.run(budget.run(nice))
    finally:
        budget.shutdown()
    assert heavy == min(19, nice() + HEAVY_NICE)


def test_resize_from_a_worker_thread_and_the_new_size_runs_at_once() -> None:
    """num.io.threads changed dynamically (issue 27): the resize is called from a pool thread (the AlterConfigs
    runs there), must not wait for itself, and the new pool runs that many tasks at once."""
    async def main() -> int:
        pool = RequestHandlerPool(1)
        await pool.run(pool.resize, 3)  # from the pool's only thread: no deadlock
        assert pool.threads == 3
        started = threading.Barrier(3, timeout=10)
        results = await asyncio.gather(*(pool.run(started.wait) for _ in range(3)))  # all three at once
        pool.shutdown()
        return len(results)

    assert asyncio.run(main()) == 3
