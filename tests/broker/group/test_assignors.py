"""The KIP-848 server-side assignors (``uniform``, ``range``): balance, exclusivity, stickiness."""

from __future__ import annotations

import random

import pytest

from tidelog.broker.group.assignors import MemberSubscription, range_assignor, uniform


def _members(n: int, topics: set[str], current: dict[str, set] | None = None) -> dict[str, MemberSubscription]:
    return {f"m{i}": MemberSubscription(frozenset(topics), set((current or {}).get(f"m{i}", set())))
            for i in range(n)}


def _check_exclusive_cover(out: dict[str, set], partitions: dict[str, int], subs: dict[str, MemberSubscription]) -> None:
    owned = [tp for tps in out.values() for tp in tps]
    assert len(owned) == len(set(owned)), "a partition assigned twice"
    want = {(t, p) for t, n in partitions.items() if any(t in s.topics for s in subs.values()) for p in range(n)}
    assert set(owned) == want
    for mid, tps in out.items():
        assert all(t in subs[mid].topics for t, _ in tps), "a partition of a topic the member does not subscribe"


@pytest.mark.parametrize("members,parts", [(1, 6), (3, 6), (4, 10), (7, 100), (10, 100), (12, 5)])
def test_uniform_balanced(members: int, parts: int) -> None:
    subs = _members(members, {"a", "b"})
    partitions = {"a": parts, "b": parts // 2}
    out = uniform(subs, partitions)
    _check_exclusive_cover(out, partitions, subs)
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1


def test_uniform_sticky_on_join_and_leave() -> None:
    partitions = {"t": 100}
    subs = _members(10, {"t"})
    first = uniform(subs, partitions)
    # an 11th member joins: members keep what they own up to their share; only what balance needs moves
    subs2 = _members(11, {"t"}, first)
    second = uniform(subs2, partitions)
    _check_exclusive_cover(second, partitions, subs2)
    moved = sum(len(first[m] - second[m]) for m in first)
    assert moved <= 10, moved  # the joiner's 9 (or 10) partitions, no more
    assert len(second["m10"]) in (9, 10)
    # a member leaves: only its partitions move
    subs3 = {m: MemberSubscription(frozenset({"t"}), set(second[m])) for m in second if m != "m3"}
    third = uniform(subs3, partitions)
    _check_exclusive_cover(third, partitions, subs3)
    for m in subs3:
        assert second[m] <= third[m], f"{m} lost partitions although a member left"


def test_uniform_heterogeneous_subscriptions() -> None:
    subs = {"m0": MemberSubscription(frozenset({"a"})), "m1": MemberSubscription(frozenset({"a", "b"})),
            "m2": MemberSubscription(frozenset({"b"}))}
    partitions = {"a": 6, "b": 6, "c": 3}
    out = uniform(subs, partitions)
    _check_exclusive_cover(out, partitions, subs)
    assert sorted(len(v) for v in out.values()) == [4, 4, 4]


def test_uniform_random_invariants() -> None:
    rnd = random.Random(848)
    for _ in range(200):
        topics = [f"t{i}" for i in range(rnd.randint(1, 4))]
        partitions = {t: rnd.randint(1, 12) for t in topics}
        subs = {f"m{i}": MemberSubscription(frozenset(rnd.sample(topics, rnd.randint(1, len(topics)))),
                                            {(t, rnd.randrange(partitions[t])) for t in topics if rnd.random() < 0.3})
                for i in range(rnd.randint(1, 6))}
        out = uniform(subs, partitions)
        _check_exclusive_cover(out, partitions, subs)
        if len({s.topics for s in subs.values()}) == 1:
            sizes = [len(v) for v in out.values()]
            assert max(sizes) - min(sizes) <= 1


def test_range_co_partitions() -> None:
    subs = _members(3, {"a", "b"})
    partitions = {"a": 7, "b": 7}
    out = range_assignor(subs, partitions)
    _check_exclusive_cover(out, partitions, subs)
    assert out["m0"] == {("a", p) for p in (0, 1, 2)} | {("b", p) for p in (0, 1, 2)}
    assert out["m1"] == {("a", p) for p in (3, 4)} | {("b", p) for p in (3, 4)}
    assert out["m2"] == {("a", p) for p in (5, 6)} | {("b", p) for p in (5, 6)}


def test_empty_inputs() -> None:
    assert uniform({}, {"t": 3}) == {}
    assert uniform(_members(2, {"gone"}), {"t": 3}) == {"m0": set(), "m1": set()}
    assert range_assignor(_members(2, {"gone"}), {}) == {"m0": set(), "m1": set()}
