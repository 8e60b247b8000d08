"""Delayed operations: completion on state change, on timeout, on min_bytes, exactly once."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.broker.purgatory import (
    DelayedFetch,
    DelayedOperationPurgatory,
    DelayedProduce,
    FetchPartitionStatus,
    Purgatory,
)
from tidelog.errors import ApiError, ErrorCode

TP = ("t", 0)
TP1 = ("t", 1)


def run(coro):
    return asyncio.run(coro)


def test_fetch_completes_when_min_bytes_accumulate_across_partitions() -> None:
    async def main() -> None:
        available = {TP: 0, TP1: 0}
        p = Purgatory()
        op = DelayedFetch(
            [FetchPartitionStatus(TP, 0, 1000), FetchPartitionStatus(TP1, 0, 1000)],
            min_bytes=100,
            max_wait_ms=10_000,
            probe=lambda s: available[s.tp],
        )
        assert not p.fetch.try_complete_else_watch(op, [TP, TP1])
        assert p.fetch.watched(TP) == 1 and p.fetch.watched(TP1) == 1
        available[TP] = 60
        assert p.check_and_complete(TP) == 0
        assert not op.completed
        available[TP1] = 40
        assert p.check_and_complete(TP1) == 1
        await asyncio.wait_for(op.wait(), 1)
        assert op.completed and not op.timed_out
        assert p.fetch.watched() == 0  # unwatched from both keys

    run(main())


def test_fetch_partition_max_bytes_caps_contribution() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("Fetch")
        op = DelayedFetch([FetchPartitionStatus(TP, 0, 10)], 100, 10_000, probe=lambda s: 1_000_000)
        assert not p.try_complete_else_watch(op, [TP])
        p.complete_all()
        await op.wait()

    run(main())


def test_fetch_times_out() -> None:
    async def main() -> None:
        p = Purgatory()
        op = DelayedFetch([FetchPartitionStatus(TP, 0, 1000)], 1, 30, probe=lambda s: 0)
        assert not p.fetch.try_complete_else_watch(op, [TP])
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.wait_for(op.wait(), 2)
        assert op.timed_out
        assert loop.time() - t0 >= 0.025
        assert p.fetch.watched() == 0

    run(main())


def test_fetch_completes_immediately_when_data_is_there() -> None:
    async def main() -> None:
        p = Purgatory()
        op = DelayedFetch([FetchPartitionStatus(TP, 0, 1000)], 1, 10_000, probe=lambda s: 5)
        assert p.fetch.try_complete_else_watch(op, [TP])
        assert p.fetch.watched() == 0
        await op.wait()

    run(main())


def test_fetch_completes_on_partition_error() -> None:
    async def main() -> None:
        state = {"gone": False}

        def probe(s: FetchPartitionStatus) -> int:
            if state["gone"]:
                raise KeyError("deleted")
            return 0

        p = Purgatory()
        op = DelayedFetch([FetchPartitionStatus(TP, 0, 1000)], 1, 10_000, probe=probe)
        assert not p.fetch.try_complete_else_watch(op, [TP])
        state["gone"] = True
        assert p.check_and_complete(TP) == 1
        await op.wait()
        assert not op.timed_out

    run(main())


def test_produce_completes_when_high_watermark_reaches_required_offset() -> None:
    async def main() -> None:
        hw = {TP: 5, TP1: 9}
        p = Purgatory()
        op = DelayedProduce({TP: 10, TP1: 10}, 10_000, high_watermark=lambda tp: hw[tp])
        assert not p.produce.try_complete_else_watch(op, [TP, TP1])
        hw[TP] = 10
        assert p.check_and_complete(TP) == 0
        hw[TP1] = 12
        assert p.check_and_complete(TP1) == 1
        assert await op.wait() == {TP: None, TP1: None}

    run(main())


def test_produce_times_out_with_request_timed_out_for_laggards() -> None:
    async def main() -> None:
        hw = {TP: 10, TP1: 0}
        p = Purgatory()
        op = DelayedProduce({TP: 10, TP1: 10}, 20, high_watermark=lambda tp: hw[tp])
        assert not p.produce.try_complete_else_watch(op, [TP, TP1])
        result = await asyncio.wait_for(op.wait(), 2)
        assert result == {TP: None, TP1: ErrorCode.REQUEST_TIMED_OUT}
        assert op.timed_out

    run(main())


def test_produce_error_from_partition_completes_with_that_error() -> None:
    class NotLeader(ApiError):  # an error meant for a client derives from ApiError (decision 0066)
        kafka_error = ErrorCode.NOT_LEADER_OR_FOLLOWER

    async def main() -> None:
        def hw(tp):
            raise NotLeader()

        p = Purgatory()
        op = DelayedProduce({TP: 1}, 10_000, high_watermark=hw)
        assert p.produce.try_complete_else_watch(op, [TP])
        assert await op.wait() == {TP: ErrorCode.NOT_LEADER_OR_FOLLOWER}

    run(main())


def test_complete_exactly_once_and_shutdown() -> None:
    async def main() -> None:
        p = Purgatory()
        ops = [DelayedFetch([FetchPartitionStatus(TP, 0, 10)], 1, 10_000, probe=lambda s: 0) for _ in range(3)]
        for op in ops:
            p.fetch.try_complete_else_watch(op, [TP])
        assert p.fetch.watched(TP) == 3
        assert ops[0].force_complete()
        assert not ops[0].force_complete()
        p.shutdown()
        await asyncio.gather(*(op.wait() for op in ops))
        assert p.fetch.watched() == 0

    run(main())


def test_on_complete_failure_reaches_the_waiter() -> None:
    class Boom(DelayedFetch):
        def on_complete(self):
            raise RuntimeError("boom")

    async def main() -> None:
        p = Purgatory()
        op = Boom([FetchPartitionStatus(TP, 0, 10)], 1, 10_000, probe=lambda s: 0)
        p.fetch.try_complete_else_watch(op, [TP])
        p.shutdown()
        with pytest.raises(RuntimeError):
            await op.wait()

    run(main())
