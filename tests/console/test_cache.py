"""The console's page cache (console/cache.py): fresh values answered without a fetch, stale ones answered at once
while one refresh runs, the console's own writes invalidating, one fetch shared by concurrent readers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tidelog.console.cache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counter() -> tuple[list[int], Callable[[], int]]:
    calls: list[int] = []

    def fetch() -> int:
        calls.append(1)
        return len(calls)

    return calls, fetch


def test_fresh_within_ttl_then_fetched_again_when_too_old() -> None:
    clock = Clock()
    cache = TtlCache(ttl=5, stale=60, clock=clock)
    calls, fetch = counter()
    assert cache.get("k", fetch) == 1
    clock.now += 4.9
    assert cache.get("k", fetch) == 1 and len(calls) == 1
    clock.now += 60  # beyond stale: the reader waits for a new fetch
    assert cache.get("k", fetch) == 2 and len(calls) == 2
    assert cache.get("other", fetch) == 3  # keys are apart


def test_stale_value_answered_at_once_while_one_refresh_runs() -> None:
    clock = Clock()
    cache = TtlCache(ttl=5, stale=60, clock=clock)
    assert cache.get("k", lambda: "old") == "old"
    clock.now += 10
    release, fetched = threading.Event(), threading.Event()

    def slow() -> str:
        fetched.set()
        assert release.wait(10)
        return "new"

    assert cache.get("k", slow) == "old"  # answered without waiting for the fetch
    assert fetched.wait(10)
    assert cache.get("k", slow) == "old"  # a second reader neither waits nor starts a second refresh
    assert cache.refreshes == 1
    release.set()
    for t in threading.enumerate():  # the refresh thread stores its value and ends
        if t.name == "console-cache-refresh":
            t.join(10)
    assert cache.get("k", slow) == "new"


def test_invalidate_drops_values_and_a_fetch_running_meanwhile() -> None:
    cache = TtlCache(ttl=5, stale=60, clock=Clock())
    _calls, fetch = counter()
    assert cache.get("k", fetch) == 1
    cache.invalidate()
    assert cache.get("k", fetch) == 2
    results: list[str] = []

    def racing() -> str:  # the console writes while this fetch runs: its result may predate the write
        results.append("fetched")
        if len(results) == 1:
            cache.invalidate()
            return "before the write"
        return "after the write"

    assert cache.get("r", racing) == "after the write" and len(results) == 2


def test_concurrent_readers_share_one_fetch_and_errors_reach_them() -> None:
    cache = TtlCache(ttl=5, stale=60, clock=Clock())
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> str:
        calls.append(1)
        started.set()
        assert release.wait(10)
        return "v"

    out: list[str] = []
    first = threading.Thread(target=lambda: out.append(cache.get("k", slow)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: out.append(cache.get("k", slow)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert out == ["v", "v"] and len(calls) == 1

    def broken() -> str:
        raise RuntimeError("broker down")

    with pytest.raises(RuntimeError, match="broker down"):
        cache.get("e", broken)


def test_a_failed_refresh_keeps_the_old_value_and_ttl_zero_is_off() -> None:
    clock = Clock()
    cache = TtlCache(ttl=5, stale=60, clock=clock)
    assert cache.get("k", lambda: "old") == "old"
    clock.now += 10
    failed = threading.Event()

    def broken() -> str:
        failed.set()
        raise RuntimeError("broker down")

    assert cache.get("k", broken) == "old"
    assert failed.wait(10)
    _calls, fetch = counter()
    off = TtlCache(ttl=0)
    assert [off.get("k", fetch) for _ in range(3)] == [1, 2, 3]


def test_rates_read_only_their_two_series() -> None:
    from tidelog.console.rates import parse

    text = "\n".join([
        "# HELP tidelog_consumergroup_committed_offset committed",
        'tidelog_consumergroup_committed_offset{group="g \\"1\\"",topic="t",partition="0"} 42.0',
        'tidelog_consumergroup_committed_offset{group="g",topic="t",partition="1"} 8',
        'tidelog_topic_bytes_out_total{topic="t"} 1024.0',
        'tidelog_topic_bytes_out_total{topic="u"} 1.0',
        'tidelog_topic_bytes_in_total{topic="t"} 99.0',
        'tidelog_consumergroup_committed_offset{group="g",topic="t",partition="2"} not-a-number'])
    committed, out = parse(text)
    assert committed == {('g "1"', "t", "0"): 42.0, ("g", "t", "1"): 8.0}
    assert out == {"t": 1024.0, "u": 1.0}
