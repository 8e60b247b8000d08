"""Issue 27 item 6 in the web console: the Consumer groups page lists each group's type (Classic / Consumer, from
ListGroups v5) with Kafka's state names, and a KIP-848 group's detail has its group epoch, target assignment epoch
and members with their epochs and current / target assignments — over real HTTP, against a real ``tidelog serve``
with two confluent-kafka members of ``group.protocol=consumer``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from consolesupport import RunningConsole, start_console
from helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAST = {"group.consumer.min.session.timeout.ms": "2000", "group.consumer.session.timeout.ms": "4000",
        "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "250"}
PARTITIONS = 4


@pytest.fixture(scope="module")
def fast_broker(broker_factory: Any) -> Any:
    return broker_factory(FAST)


@pytest.fixture(scope="module")
def kconsole(fast_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningConsole]:
    rc = start_console(fast_broker.bootstrap, audit=tmp_path_factory.mktemp("audit") / "audit.log")
    yield rc
    rc.stop()


def test_consumer_group_detail_has_epochs_and_assignments(kconsole: Any, fast_broker: Any) -> None:
    bs = fast_broker.bootstrap
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until its future is done
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    classic = Consumer({"bootstrap.servers": bs, "group.id": f"{group}-classic", "enable.auto.commit": False})
    classic.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    classic.close()
    members = [Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                         "client.id": f"web-c{i}"}) for i in range(2)]
    c = httpx.Client(base_url=kconsole.url, timeout=30)
    c.get("/api/session")  # the session cookie (no login on loopback)
    try:
        for m in members:
            m.subscribe([topic])

        def balanced() -> bool:
            for m in members:
                m.poll(0.1)
            sets = [{tp.partition for tp in m.assignment()} for m in members]
            return all(len(s) == PARTITIONS // 2 for s in sets) and set().union(*sets) == set(range(PARTITIONS))

        wait_for(balanced, 60, "both members hold two partitions")

        def stable() -> dict[str, Any] | None:
            for m in members:
                m.poll(0.05)
            d: dict[str, Any] = c.get(f"/api/groups/{group}").json()
            assert "state" in d, d
            return d if d["state"] == "Stable" else None

        d = wait_for(stable, 30, "a Stable consumer group in the console")
        assert d["type"] == "Consumer" and d["assignor"] == "uniform"
        k = d["kip848"]
        assert k["group_epoch"] == k["assignment_epoch"] >= 2
        own = {m.memberid(): (f"web-c{i}", sorted(f"{topic}-{tp.partition}" for tp in m.assignment()))
               for i, m in enumerate(members)}
        got = {m["member"]: (m["client"], m["assignment"]) for m in d["members"]}
        assert got == own
        for m in d["members"]:
            assert m["epoch"] == m["target_epoch"] == k["assignment_epoch"]
            assert m["target_assignment"] == m["assignment"] and m["subscribed"] == [topic]
            assert m["host"] == "/127.0.0.1"

        listed = {g["group"]: g for g in c.get("/api/groups").json()}
        assert listed[group] == {"group": group, "type": "Consumer", "state": "Stable", "simple": False}
        assert listed[f"{group}-classic"] == {"group": f"{group}-classic", "type": "Classic", "state": "Empty",
                                              "simple": True}
        cl = c.get(f"/api/groups/{group}-classic").json()
        assert cl["type"] == "Classic" and cl["kip848"] is None and cl["state"] == "Empty"

        # a member leaves: the group epoch moves on and the other member is given every partition
        before = k["group_epoch"]
        members.pop().close()

        def rebalanced() -> dict[str, Any] | None:
            members[0].poll(0.1)
            d2: dict[str, Any] = c.get(f"/api/groups/{group}").json()
            ok = (d2["state"] == "Stable" and len(d2["members"]) == 1
                  and len(d2["members"][0]["assignment"]) == PARTITIONS)
            return d2 if ok else None

        d2 = wait_for(rebalanced, 30, "the remaining member owns every partition")
        assert d2["kip848"]["group_epoch"] > before
        assert d2["members"][0]["epoch"] == d2["kip848"]["assignment_epoch"]
    finally:
        c.close()
        for m in members:
            m.close()


def test_consumer_group_page_in_a_browser(driver: Any, kconsole: Any, fast_broker: Any) -> None:
    """The Consumer groups page shows the type; a consumer group's page its epochs and each member's epoch and
    current / target assignment (one member: it owns every partition at epoch 1)."""
    from test_browser import css, found, go, wait

    bs = fast_broker.bootstrap
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"gb-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    m = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer", "client.id": "web-b"})
    try:
        m.subscribe([topic])
        wait_for(lambda: m.poll(0.1) is None and len(m.assignment()) == 2, 60, "the member owns both partitions")
        go(driver, kconsole, "groups")
        (row,) = found(driver, f'#groups-table tr[data-group="{group}"]')
        assert row.text.split()[:3] == [group, "Consumer", "Stable"]
        go(driver, kconsole, f"groups/{group}")
        wait(driver, lambda d: found(d, f'#members-table tr[data-member="{m.memberid()}"]'), what="the member row")
        assert css(driver, "#group-epoch").text == "1" and css(driver, "#assignment-epoch").text == "1"
        cells = [td.text for td in found(driver, f'#members-table tr[data-member="{m.memberid()}"] td')]
        both = f"{topic}-0, {topic}-1"
        assert cells == [m.memberid(), "web-b", "/127.0.0.1", "1", both, "1", both]
    finally:
        m.close()
