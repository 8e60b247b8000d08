"""Incremental fetch sessions (KIP-227) on a real ``tidelog serve``: raw Fetch v12 requests for each rule, and
the Java consumer (which always asks for a session) reading through one."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import RawClient, confluent_produce, create_topic_raw, metric_value

from tidelog.protocol.api_keys import ApiKey

pytestmark = pytest.mark.integration

FETCH = ApiKey.FETCH
NONE, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 0, 70, 71


def _fetch(c: RawClient, session_id: int, epoch: int, parts: dict[tuple[str, int], int],
           forgotten: dict[str, list[int]] | None = None) -> dict:
    topics: dict[str, list[dict]] = {}
    for (t, p), offset in parts.items():
        topics.setdefault(t, []).append({"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                                         "last_fetched_epoch": -1, "log_start_offset": -1,
                                         "partition_max_bytes": 1 << 20})
    return c.request(FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch, "rack_id": "",
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()],
    })


def _answered(r: dict) -> dict[tuple[str, int], dict]:
    return {(t["topic"], p["partition_index"]): p for t in r["responses"] for p in t["partitions"]}


def _produce(broker: Any, topic: str, partition: int, n: int) -> None:
    confluent_produce(broker.bootstrap, topic, [{"value": b"v", "partition": partition} for _ in range(n)])


def test_session_lifecycle(broker: Any) -> None:
    topic = "fsess"
    with RawClient(broker.port) as c:
        assert create_topic_raw(c, topic, 3)["error_code"] == NONE
        _produce(broker, topic, 0, 5)
        # epoch 0: a full request opens a session and gets every partition
        full = _fetch(c, 0, 0, {(topic, 0): 0, (topic, 1): 0, (topic, 2): 0})
        sid = full["session_id"]
        assert full["error_code"] == NONE and sid > 0
        assert set(_answered(full)) == {(topic, 0), (topic, 1), (topic, 2)}
        # epoch 1, nothing new, the client moved partition 0 to its end: nothing to say
        quiet = _fetch(c, sid, 1, {(topic, 0): 5})
        assert quiet["error_code"] == NONE and quiet["session_id"] == sid and _answered(quiet) == {}
        # new data on partition 1 (not named in the request): only it comes back, from the cached offset 0
        _produce(broker, topic, 1, 3)
        news = _answered(_fetch(c, sid, 2, {}))
        assert list(news) == [(topic, 1)]
        assert news[(topic, 1)]["high_watermark"] == 3 and len(news[(topic, 1)]["records"]) > 0
        # a partition the client forgets is no longer fetched
        _produce(broker, topic, 2, 2)
        assert _answered(_fetch(c, sid, 3, {(topic, 1): 3}, forgotten={topic: [2]})) == {}
        # wrong epochs and unknown ids are errors without partitions; the session survives a wrong epoch
        assert _fetch(c, sid, 3, {})["error_code"] == INVALID_FETCH_SESSION_EPOCH
        assert _fetch(c, sid + 1 if sid < 2**31 - 1 else 1, 1, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        _produce(broker, topic, 0, 1)
        after = _answered(_fetch(c, sid, 4, {}))
        assert list(after) == [(topic, 0)] and after[(topic, 0)]["high_watermark"] == 6
        # epoch -1 closes the session: served as a sessionless full fetch, then the id is gone
        final = _fetch(c, sid, -1, {(topic, 0): 0})
        assert final["session_id"] == 0 and set(_answered(final)) == {(topic, 0)}
        assert _fetch(c, sid, 5, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        # an unknown topic in a session is answered with its error each time
        full2 = _fetch(c, 0, 0, {(topic, 0): 6})
        sid2 = full2["session_id"]
        errs = _answered(_fetch(c, sid2, 1, {("no-such-topic", 0): 0}))
        assert [k for k, p in errs.items() if p["error_code"] != NONE] == [("no-such-topic", 0)]


def test_cache_limit_gives_no_session_and_metrics_count_sessions(broker_factory: Any) -> None:
    b = broker_factory({"max.incremental.fetch.session.cache.slots": "1"})
    with RawClient(b.port) as c:
        assert create_topic_raw(c, "fcap", 1)["error_code"] == NONE
        first = _fetch(c, 0, 0, {("fcap", 0): 0})
        assert first["session_id"] > 0
        # the only slot is taken by a session used just now: no session, a plain full answer
        second = _fetch(c, 0, 0, {("fcap", 0): 0})
        assert second["session_id"] == 0 and set(_answered(second)) == {("fcap", 0)}
    assert metric_value(b, "tidelog_fetch_sessions") == 1
    assert metric_value(b, "tidelog_fetch_session_partitions") == 1


def test_cache_evicts_only_an_idle_session() -> None:
    from collections import OrderedDict

    from tidelog.broker.fetch_session import CachedPartition, FetchSessionCache

    now = [1000.0]
    cache = FetchSessionCache(max_slots=2, eviction_ms=120_000, clock=lambda: now[0])
    parts = lambda: OrderedDict({("t", 0): CachedPartition(b"\0" * 16, 0, 1, -1)})  # noqa: E731
    a, b = cache.create(parts()), cache.create(parts())
    assert a is not None and b is not None and a.session_id != b.session_id
    now[0] += 60
    assert cache.get(a.session_id) is a  # a is used again: b is now the least recently used
    assert cache.create(parts()) is None  # b idle for 60 s only
    now[0] += 61
    c = cache.create(parts())
    assert c is not None and cache.get(b.session_id) is None and cache.get(a.session_id) is a
    assert (len(cache), cache.evictions, cache.created) == (2, 1, 3)
