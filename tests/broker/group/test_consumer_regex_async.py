"""regexloop: a KIP-848 regex is resolved off the broker's network loop, as Kafka resolves it in its coordinator's
background executor (``GroupMetadataManager.refreshRegularExpressions``): the heartbeat that brings a regex is
answered at once (the regex matches nothing yet), another client is served while the resolution runs, and the
member gets its topics on a later heartbeat; a member changing its regex on every heartbeat gets at most one
resolution in flight for its group, the later requests coalescing into one more.

Against ``tidelog serve`` with raw ConsumerGroupHeartbeat frames (v1). The topics: TOPICS random 249-character a/b
names (the longest Kafka allows) and two that match; the regex (32 alternatives of ``[ab]*a[ab]{30}c``) makes RE2's
DFA explode: ~2-4 ms a name, so one resolution takes ~1-2 s of CPU (bench/kip848_regex_re2.py). On the code before,
that ran inside the heartbeat on the loop: the heartbeat and a concurrent ApiVersions waited for all of it, and the
first test fails.
"""

from __future__ import annotations

import random
import re
import time
import urllib.request
import uuid
from typing import Any

import pytest
from helpers import RawClient

from .conftest import wait_until

HEARTBEAT, CREATE_TOPICS, API_VERSIONS = 68, 19, 18
TOPICS = 500  # created in batches of 300 (~17 ms a topic here)
NAME_LEN = 249
_rnd = random.Random(848)


def _ab(n: int) -> str:
    return "".join(_rnd.choice("ab") for _ in range(n))


MATCHING = [_ab(NAME_LEN - 32) + "a" + _ab(30) + "c" for _ in range(2)]
# 32 alternatives, each a DFA that explodes on long a/b names (RE2 keeps it linear, but slow per character)
HEAVY = "|".join(f"[ab]*{'ab'[i % 2]}[ab]{{{30 - i // 2}}}c" for i in range(32))
PROBE_LIMIT_S = 0.2  # an ApiVersions round trip while a resolution runs


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({"group.consumer.min.heartbeat.interval.ms": "100",
                         "group.consumer.heartbeat.interval.ms": "300",
                         "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1"})
    names = [_ab(NAME_LEN) for _ in range(TOPICS)] + MATCHING
    with RawClient(br.port, timeout=120.0) as c:
        for i in range(0, len(names), 300):
            batch = names[i:i + 300]
            r = c.request(CREATE_TOPICS, 7, {
                "topics": [{"name": n, "num_partitions": 1, "replication_factor": 1} for n in batch],
                "timeout_ms": 60000})
            assert [t["error_code"] for t in r["topics"]] == [0] * len(batch), r
    return br


def _hb(c: RawClient, group: str, member: str, epoch: int, regex: str | None) -> dict[str, Any]:
    return c.request(HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 5000 if epoch == 0 else -1, "subscribed_topic_names": None,
        "subscribed_topic_regex": regex, "server_assignor": None, "topic_partitions": []})


def _metric(b: Any, name: str, missing: float | None = None) -> float:
    """A series of the broker's /metrics; ``missing`` if given and the broker has no such series (code before)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    if m is None and missing is not None:
        return missing
    assert m is not None, name
    return float(m.group(1))


def _probe(port: int) -> float:
    """Seconds an ApiVersions round trip takes on a connection already open."""
    with RawClient(port, timeout=10.0) as c:
        t0 = time.monotonic()
        assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
        return time.monotonic() - t0


def _partitions(r: dict[str, Any]) -> int | None:
    a = r.get("assignment")
    return None if a is None else sum(len(t["partitions"]) for t in a["topic_partitions"])


def _until_assigned(c: RawClient, group: str, member: str, epoch: int, regex: str | None = None) -> int:
    """Heartbeat until the member is assigned the two matching topics' partitions; its epoch then."""
    def assigned() -> bool:
        nonlocal epoch
        r = _hb(c, group, member, epoch, regex)
        assert r["error_code"] == 0, r
        epoch = r["member_epoch"]
        return _partitions(r) == len(MATCHING)

    wait_until(assigned, 60, "the regex's topics assigned")
    return epoch


def test_long_resolution_leaves_the_loop_free(b: Any) -> None:
    group, member = "rxloop-" + uuid.uuid4().hex[:6], uuid.uuid4().hex
    seconds0 = _metric(b, "tidelog_consumer_regex_resolution_seconds_total", 0.0)
    with RawClient(b.port, timeout=30.0) as c:
        t0 = time.monotonic()
        c.send_request(HEARTBEAT, 1, {
            "group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 5000, "subscribed_topic_names": None, "subscribed_topic_regex": HEAVY,
            "server_assignor": None, "topic_partitions": []})
        # another client meanwhile: served at once, while the resolution is seen running
        probes, running = [], 0
        for _ in range(5):
            probes.append(_probe(b.port))
            running += int(_metric(b, "tidelog_consumer_regex_resolutions_in_flight", -1.0) == 1)
        r = c.response()
        answered = time.monotonic() - t0
        assert max(probes) < PROBE_LIMIT_S, probes
        # (~0.2-0.45 s under a loaded 2-core machine, the heartbeat's write included; the resolution took 1-6 s)
        assert answered < 1.5, f"the heartbeat was answered after {answered:.2f} s"
        assert r["error_code"] == 0, r
        assert _partitions(r) == 0, r  # answered before the resolution lands: the regex matches nothing yet
        assert running >= 1, "the resolution had ended before the probes: the case is too light to show anything"
        _until_assigned(c, group, member, r["member_epoch"])
    # the worker really spent over a second on it (the case is heavy enough to have stalled the loop before)
    assert _metric(b, "tidelog_consumer_regex_resolution_seconds_total") - seconds0 > 1.0
    assert _metric(b, "tidelog_consumer_regex_resolutions_in_flight") == 0


def test_regex_changes_coalesce_into_one_more_resolution(b: Any) -> None:
    """A member changing its regex on every heartbeat: each heartbeat answered at once, one resolution in flight,
    the changes made meanwhile resolved together once more after it; the member ends with its last regex's
    topics."""
    group, member = "rxloop-c-" + uuid.uuid4().hex[:6], uuid.uuid4().hex
    runs0 = _metric(b, "tidelog_consumer_regex_resolutions_total")
    regexes = [f"{HEAVY}|z{i}" for i in range(5)]  # distinct, each as heavy, each matching the two topics
    with RawClient(b.port, timeout=30.0) as c:
        epoch = 0
        for rx in regexes:
            t0 = time.monotonic()
            r = _hb(c, group, member, epoch, rx)
            assert r["error_code"] == 0, r
            assert time.monotonic() - t0 < 1.0, rx
            epoch = r["member_epoch"]
            assert _metric(b, "tidelog_consumer_regex_resolutions_in_flight") <= 1
        assert _partitions(r) in (0, None), r  # none resolved yet
        _until_assigned(c, group, member, epoch)
    # the first regex's resolution and one more for the changes made while it ran (not one per change)
    assert _metric(b, "tidelog_consumer_regex_resolutions_total") - runs0 == 2


def test_a_result_is_applied_only_if_still_current() -> None:
    """In process (the timing cannot be steered through a server): the resolver thread held busy, (1) the topic set
    changes during a resolution: its result is not applied, the group resolved again with the new topic; (2) the
    group is deleted during one: nothing is applied nor written."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from tidelog.broker.group.consumer_group import ConsumerGroupManager
    from tidelog.broker.metrics import BrokerMetrics

    topics = {n: SimpleNamespace(name=n, num_partitions=1, topic_id=uuid.uuid4()) for n in ("rx-a", "rx-b", "other")}
    broker = SimpleNamespace(config=SimpleNamespace(props={}), group_configs=None, authorizer=None, metrics=BrokerMetrics(),
                             topics=SimpleNamespace(all_topics=lambda: list(topics.values()), get=topics.get,
                                                    by_id=lambda tid: next((t for t in topics.values()
                                                                            if t.topic_id == tid), None)))
    written: list[str] = []

    async def append(group_id: str, entries: Any, offsets: bool) -> int:  # the coordinator's append, recorded
        written.append(group_id)
        return 0

    mgr = ConsumerGroupManager(SimpleNamespace(broker=broker, groups={}, _append=append))  # type: ignore[arg-type]
    res = mgr.regex_resolver

    def join(group: str) -> dict[str, Any]:
        return mgr.heartbeat(1, {"group_id": group, "member_id": uuid.uuid4().hex, "member_epoch": 0,
                                 "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 5000,
                                 "subscribed_topic_names": None, "subscribed_topic_regex": "rx-.*",
                                 "server_assignor": None, "topic_partitions": []}, "c", "/h")

    async def queued() -> None:
        for _ in range(1000):  # the task's first step: its match job queued behind the held thread
            if res._pool()._work_queue.qsize():
                return
            await asyncio.sleep(0)
        raise AssertionError("no resolution queued")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        gate = threading.Event()
        busy = loop.run_in_executor(res._pool(), gate.wait)  # the resolver thread held
        r = join("g1")
        assert r["error_code"] == 0 and r["assignment"] == {"topic_partitions": []}, r  # nothing matched yet
        g = mgr.groups["g1"]
        epoch = g.group_epoch
        assert res.in_flight("g1") and not g.resolved
        task = res._running["g1"]
        assert join("g1")["error_code"] == 0 and res.coalesced == 1  # a second member: coalesced, not a 2nd task
        await queued()  # the resolution is waiting for the thread, its topic set read
        topics["rx-c"] = SimpleNamespace(name="rx-c", num_partitions=1, topic_id=uuid.uuid4())
        mgr._topics_at = 0.0  # the topic list read again now (its cache)
        mgr._existing_topics()
        gate.set()
        await busy
        await task
        assert res.stale == 1  # resolved against the old topic set: resolved again
        assert g.resolved["rx-.*"].topics == ("rx-a", "rx-b", "rx-c")
        assert g.group_epoch == epoch + 2 and written[-1] == "g1"  # the 2nd member's join, then the resolution
        assert {t for tps in g.target.values() for t, _ in tps} == {"rx-a", "rx-b", "rx-c"}

        gate.clear()
        busy = loop.run_in_executor(res._pool(), gate.wait)
        join("g2")
        task = res._running["g2"]
        await queued()
        before = len(written)
        mgr.drop("g2")
        gate.set()
        await busy
        await task
        assert "g2" not in mgr.groups and len(written) == before and not res.in_flight("g2")
        mgr.shutdown()

    asyncio.run(run())
