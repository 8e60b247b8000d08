"""Client quotas without a broker: Kafka's precedence of the eight entity levels, the rate and throttle-time
arithmetic of ``Rate``/``QuotaUtils``, DescribeClientQuotas filters, AlterClientQuotas validation, the file
store, ZooKeeper path names."""

from __future__ import annotations

import json

import pytest

from tidelog.broker.quota_sensors import OVERFLOW_CLIENT, ResolutionCache, SensorTable
from tidelog.broker.quotas import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    LocalQuotaStore,
    QuotaError,
    RateSensor,
    alteration,
    describe,
    entity_from_protocol,
    entity_to_protocol,
    resolve,
)
from tidelog.cluster.quotas import entity_of_path, entity_path, sanitize

D = DEFAULT


# -- precedence ----------------------------------------------------------------------------------------------

LEVELS = [  # Kafka's order, most specific first, with the sensor tags each level measures on
    (("alice", "app"), ("alice", "app")),
    (("alice", D), ("alice", "app")),
    (("alice", None), ("alice", "")),
    ((D, "app"), ("alice", "app")),
    ((D, D), ("alice", "app")),
    ((D, None), ("alice", "")),
    ((None, "app"), ("", "app")),
    ((None, D), ("", "app")),
]


def test_each_level_wins_over_every_less_specific_one() -> None:
    for i, (entity, tags) in enumerate(LEVELS):
        limits = {e: float(j + 1) for j, (e, _) in enumerate(LEVELS[i:], start=i)}
        assert resolve(limits, "alice", "app") == (float(i + 1), tags), entity


def test_levels_that_name_someone_else_do_not_apply() -> None:
    limits = {("bob", "app"): 1.0, ("alice", "other"): 2.0, ("bob", None): 3.0, (D, "other"): 4.0,
              (None, "other"): 5.0}
    assert resolve(limits, "alice", "app") == (None, ("", ""))
    limits[(None, D)] = 6.0
    assert resolve(limits, "alice", "app") == (6.0, ("", "app"))


def test_user_quota_is_shared_by_the_users_client_ids() -> None:
    m = ClientQuotaManager(window_num=2, window_size_s=1)
    m.set_entities({("alice", None): {PRODUCER_BYTE_RATE: 1000.0}})
    assert m.enabled
    assert m.record(m.produce, "User:alice", "one", 900, now_ms=0) == 0
    # the second client id of the same user is measured on the same sensor: 900 + 1000 over a 1 s window
    assert m.record(m.produce, "User:alice", "two", 1000, now_ms=0) > 0
    assert m.record(m.produce, "User:bob", "one", 10**9, now_ms=0) == 0  # no quota applies to bob
    assert list(m.produce.sensors) == [("alice", "")]


def test_no_quota_means_disabled_and_removal_disables() -> None:
    m = ClientQuotaManager()
    assert not m.enabled
    m.set_entities({(None, D): {REQUEST_PERCENTAGE: 50.0}})
    assert m.enabled
    m.set_entities({(None, D): {"controller_mutation_rate": 5.0}})
    assert m.enabled
    m.set_entities({})
    assert not m.enabled


def test_changed_bound_applies_to_an_existing_sensor() -> None:
    m = ClientQuotaManager(window_num=2, window_size_s=1)
    m.set_entities({(None, "app"): {PRODUCER_BYTE_RATE: 1000.0}})
    assert m.record(m.produce, "User:ANONYMOUS", "app", 900, now_ms=0) == 0
    m.set_entities({(None, "app"): {PRODUCER_BYTE_RATE: 100.0}})
    assert m.record(m.produce, "User:ANONYMOUS", "app", 1, now_ms=0) > 0


# -- rate and throttle time ----------------------------------------------------------------------------------


def test_rate_window_is_at_least_num_minus_one_windows() -> None:
    s = RateSensor(bound=1000.0, num=11, window_ms=1000)
    s.add(5000, 0)
    assert s.window_size(0) == 10_000  # elapsed 0, counted as 10 full windows
    assert s.rate(0) == pytest.approx(500.0)
    assert s.window_size(3500) == 10_500  # 3 full windows elapsed + 7 more, plus the half
    s.add(0, 15_000)  # a later sample; the first one (started at 0) is older than 11 windows: purged
    assert s.window_size(15_000) == 10_000
    assert s.rate(15_000) == 0.0


def test_throttle_time_is_kafkas_formula() -> None:
    # Q = 1000 B/s, window 10 s at t=0: recording 15000 B makes the rate 1500 B/s;
    # throttle = (1500 - 1000) / 1000 * 10000 ms = 5000 ms (the time for the rate to fall back to Q)
    s = RateSensor(bound=1000.0, num=11, window_ms=1000)
    assert s.record(9000, 0) == 0
    assert s.record(6000, 0) == 5000
    # the request quota's throttle is capped at one window
    r = RateSensor(bound=1.0, num=11, window_ms=1000)
    assert r.record(1000.0, 0, max_throttle_ms=1000) == 1000


def test_controller_mutations_use_a_token_bucket() -> None:
    from tidelog.broker.quotas import TokenBucket

    b = TokenBucket(bound=2.0, num=11, window_ms=1000)  # 2 partitions/s, a burst of 22
    assert b.throttle_ms(0) == 0
    b.add(20, 0)
    assert b.throttle_ms(0) == 0  # 2 tokens left
    b.add(5, 0)  # -3 tokens: exceeded; (3 / 2) s to refill
    assert b.throttle_ms(0) == 1500
    assert b.throttle_ms(1500) == 0
    assert b.throttle_ms(100_000) == 0 and b.tokens == 22.0  # never more than the burst


def test_request_percentage_records_thread_time() -> None:
    m = ClientQuotaManager(window_num=2, window_size_s=1)
    m.set_entities({(None, D): {REQUEST_PERCENTAGE: 10.0}})  # 10 % of a thread: 100 ms of work per second
    assert m.record_request("User:ANONYMOUS", "c", 0.05) == 0
    assert m.record_request("User:ANONYMOUS", "c", 0.2) > 0


def test_fetch_cap_is_quota_times_window_num_minus_one() -> None:
    m = ClientQuotaManager(window_num=11, window_size_s=1)
    assert m.max_value_in_window(m.fetch, "User:x", "c") == float("inf")
    m.set_entities({(None, D): {"consumer_byte_rate": 2048.0}})
    assert m.max_value_in_window(m.fetch, "User:x", "c") == 2048.0 * 10


# -- DescribeClientQuotas filters ----------------------------------------------------------------------------

ENTITIES = {
    ("alice", None): {PRODUCER_BYTE_RATE: 1.0},
    (D, None): {PRODUCER_BYTE_RATE: 2.0},
    ("alice", "app"): {PRODUCER_BYTE_RATE: 3.0},
    (None, "app"): {PRODUCER_BYTE_RATE: 4.0},
    (None, D): {PRODUCER_BYTE_RATE: 5.0},
}


def comp(etype: str, match_type: int, match: str | None = None) -> dict:
    return {"entity_type": etype, "match_type": match_type, "match": match}


@pytest.mark.parametrize(("components", "strict", "expected"), [
    ([], False, set(ENTITIES)),
    ([], True, set()),
    ([comp("user", 0, "alice")], False, {("alice", None), ("alice", "app")}),
    ([comp("user", 0, "alice")], True, {("alice", None)}),
    ([comp("user", 1)], False, {(D, None)}),
    ([comp("user", 2)], True, {("alice", None), (D, None)}),
    ([comp("client-id", 2)], False, {("alice", "app"), (None, "app"), (None, D)}),
    ([comp("user", 0, "alice"), comp("client-id", 2)], False, {("alice", "app")}),
    ([comp("client-id", 1)], True, {(None, D)}),
])
def test_describe_filters(components: list[dict], strict: bool, expected: set) -> None:
    assert set(describe(ENTITIES, components, strict)) == expected


@pytest.mark.parametrize(("components", "code", "message"), [
    ([comp("user", 0)], 42, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([comp("user", 1, "x")], 42, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([comp("user", 2), comp("user", 2)], 42, "Entity type user cannot appear more than once in the filter."),
    ([comp("group", 2)], 35, "Unsupported entity type group"),
    ([comp("", 2)], 42, "Invalid empty entity type."),
    ([comp("user", 7)], 42, "Unknown match type 7"),
])
def test_describe_refusals(components: list[dict], code: int, message: str) -> None:
    with pytest.raises(QuotaError) as e:
        describe(ENTITIES, components, False)
    assert (e.value.code, e.value.message) == (code, message)


# -- AlterClientQuotas validation ----------------------------------------------------------------------------


def test_entities_round_trip_the_protocol() -> None:
    for entity in ENTITIES:
        assert entity_from_protocol(entity_to_protocol(entity)) == entity


@pytest.mark.parametrize(("parts", "message"), [
    ([], "Invalid empty client quota entity"),
    ([{"entity_type": "user", "entity_name": "a"}, {"entity_type": "user", "entity_name": "b"}],
     "Invalid empty client quota entity, duplicate entity entry user"),
    ([{"entity_type": "topic", "entity_name": "a"}], "Unhandled client quota entity type: topic"),
    ([{"entity_type": "client-id", "entity_name": ""}], "Empty client-id not supported"),
])
def test_bad_entities(parts: list[dict], message: str) -> None:
    with pytest.raises(QuotaError) as e:
        entity_from_protocol(parts)
    assert (e.value.code, e.value.message) == (42, message)


def test_alteration_validation() -> None:
    assert alteration([{"key": PRODUCER_BYTE_RATE, "value": 1024.0, "remove": False},
                       {"key": REQUEST_PERCENTAGE, "value": 0.0, "remove": True}]) == {
        PRODUCER_BYTE_RATE: 1024.0, REQUEST_PERCENTAGE: None}
    for ops, message in (
        ([{"key": "nope", "value": 1.0, "remove": False}], "Invalid configuration key nope"),
        ([{"key": PRODUCER_BYTE_RATE, "value": 1.5, "remove": False}],
         "Configuration producer_byte_rate must be a Long value"),
        ([{"key": PRODUCER_BYTE_RATE, "value": 1.0, "remove": False}] * 2,
         "Duplicate quota key producer_byte_rate not updating quota for this entity"),
    ):
        with pytest.raises(QuotaError) as e:
            alteration(ops)
        assert e.value.message == message
    assert alteration([{"key": REQUEST_PERCENTAGE, "value": 12.5, "remove": False}]) == {REQUEST_PERCENTAGE: 12.5}


def test_local_store_is_atomic_and_reloads(tmp_path) -> None:
    path = tmp_path / "tidelog-quotas.json"
    seen: list = []
    store = LocalQuotaStore(path, seen.append)
    store.alter([(("alice", D), {PRODUCER_BYTE_RATE: 1024.0}), ((None, "app"), {REQUEST_PERCENTAGE: 50.0})])
    assert not (tmp_path / "tidelog-quotas.json.tmp").exists()
    raw = json.loads(path.read_text())
    assert {"entity": {"user": "alice", "client-id": None}, "config": {PRODUCER_BYTE_RATE: 1024.0}} in raw["entities"]
    assert seen and seen[-1][("alice", D)] == {PRODUCER_BYTE_RATE: 1024.0}
    again = LocalQuotaStore(path)
    assert again.entities() == store.entities()
    again.alter([((None, "app"), {REQUEST_PERCENTAGE: None})])  # the last key removed: the entity is gone
    assert LocalQuotaStore(path).entities() == {("alice", D): {PRODUCER_BYTE_RATE: 1024.0}}


def test_zookeeper_paths_are_sanitized_as_kafka() -> None:
    assert entity_path(("alice", None)) == "users/alice"
    assert entity_path((D, D)) == "users/<default>/clients/<default>"
    assert entity_path((None, "my app*")) == "clients/my%20app%2A"
    assert sanitize("a/b@c") == "a%2Fb%40c"
    for entity in [("a/b", "c d"), (D, None), (None, D), ("x", D)]:
        assert entity_of_path(entity_path(entity)) == entity
    assert entity_of_path("topics/t") is None


# -- bounded sensor tables (issue 24) ------------------------------------------------------------------------


def _table(max_sensors: int = 3, expire_ms: float = 10_000, idle_ms: float = 2_000) -> SensorTable:
    return SensorTable(lambda bound: RateSensor(bound, 2, 1000), max_sensors, expire_ms, idle_ms)


def test_sensor_table_expires_idle_sensors_from_the_front() -> None:
    t = _table(max_sensors=100)
    for i in range(5):
        t.get(("", f"c{i}"), 10.0, now=i * 1000.0)
    t.get(("", "c0"), 10.0, now=5000.0)  # used again: moves to the end
    assert list(t) == [("", "c1"), ("", "c2"), ("", "c3"), ("", "c4"), ("", "c0")]
    t.get(("", "c4"), 10.0, now=12_500.0)  # c1 (1000) and c2 (2000) are past 10 s idle; c3 (3000) is not
    assert list(t) == [("", "c3"), ("", "c0"), ("", "c4")]
    assert t.expire(100_000.0) == 3 and len(t) == 0


def test_sensor_table_full_evicts_only_a_sensor_idle_past_the_rate_window() -> None:
    t = _table(max_sensors=3, idle_ms=2_000)
    for i in range(3):
        t.get(("", f"c{i}"), 10.0, now=float(i))
    # full, the oldest used 3 ms ago: the new id is measured on the shared overflow sensor
    s1 = t.get(("", "new1"), 10.0, now=3.0)
    s2 = t.get(("", "new2"), 10.0, now=4.0)
    assert s1 is s2 and list(t) == [("", "c0"), ("", "c1"), ("", "c2")] and t.overflowed == 2
    assert ("", OVERFLOW_CLIENT) in dict(t.items())
    # the overflow sensor keeps the flood's bytes: one quota for all of them
    s1.add(25.0, 3.0)
    assert s2.record(1.0, 4.0) > 0
    # 2 s later c0 has no sample left in the window: evicted to make room, the new id gets its own sensor
    own = t.get(("", "new3"), 10.0, now=2_001.0)
    assert own is not s1 and ("", "c0") not in list(t) and ("", "new3") in list(t) and t.evicted == 1


def test_resolution_cache_is_bounded_oldest_first() -> None:
    c: ResolutionCache[str, int] = ResolutionCache(3)
    for i in range(10):
        c.put(f"k{i}", i)
    assert len(c) == 3 and c.get("k9") == 9 and c.get("k6") is None


def test_many_client_ids_keep_the_manager_bounded() -> None:
    m = ClientQuotaManager(window_num=2, window_size_s=1, max_sensors=50, sensor_expiration_ms=60_000)
    m.set_entities({(None, D): {PRODUCER_BYTE_RATE: 1000.0}})
    for i in range(5000):
        m.record(m.produce, "User:ANONYMOUS", f"id-{i}", 10, now_ms=float(i))
    assert len(m.produce.sensors) <= 51 and len(m.produce.resolved) <= 50
    # the flood's ids share the overflow sensor, so their bytes count: a burst from a new id is throttled
    assert m.record(m.produce, "User:ANONYMOUS", "id-new", 500, now_ms=5000.0) > 0  # alone: 500 B/s, not throttled
