"""Issue 28 item 4 in the web console: share groups (KIP-932). The Consumer groups page lists a share group with
type Share; its page (``/api/share-groups/{group}``) has the state, epochs, members with their assigned partitions
and per partition the share-partition start offset and lag — over real HTTP, against a real ``tidelog serve``
with a real confluent-kafka ``ShareConsumer``. And a principal without DESCRIBE on the group sees the broker's
refusal."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from consolesupport import RunningConsole, start_console
from helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SHARE_BROKER = {"share.auto.offset.reset": "earliest", "group.share.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def share_broker(broker_factory: Any) -> Any:
    return broker_factory(SHARE_BROKER)


@pytest.fixture(scope="module")
def sconsole(share_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningConsole]:
    rc = start_console(share_broker.bootstrap, audit=tmp_path_factory.mktemp("audit") / "audit.log")
    yield rc
    rc.stop()


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0


def test_share_group_listed_and_described(sconsole: RunningConsole, share_broker: Any) -> None:
    bs = share_broker.bootstrap
    topic, group = f"st-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    _produce(bs, topic, 5)
    member = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "client.id": "web-share",
                            "share.acknowledgement.mode": "implicit"})
    c = httpx.Client(base_url=sconsole.url, timeout=30)
    c.get("/api/session")
    try:
        member.subscribe([topic])
        got: list[int] = []

        def all_five() -> bool:
            got.extend(m.offset() for m in member.poll(0.5) if not m.error())
            return sorted(got) == [0, 1, 2, 3, 4]

        wait_for(all_five, 60, "the share consumer got the five records")
        member.commit_sync(30)  # accepts them: the share-partition start offset moves to 5
        _produce(bs, topic, 3)  # not consumed: lag 3

        listed = {g["group"]: g for g in c.get("/api/groups").json()}
        assert listed[group]["type"] == "Share" and listed[group]["state"] == "Stable", listed.get(group)

        def described() -> dict[str, Any] | None:
            r = c.get(f"/api/share-groups/{group}")
            assert r.status_code == 200, r.text
            d: dict[str, Any] = r.json()
            rows = {(x["topic"], x["partition"]): x for x in d["offsets"]}
            row = rows.get((topic, 0))
            return d if row is not None and row["start_offset"] == 5 and row["end"] == 8 else None

        d = wait_for(described, 30, "the share partition's start offset at 5")
        assert d["type"] == "Share" and d["state"] == "Stable" and d["group_epoch"] >= 1
        assert d["offsets"] == [{"topic": topic, "partition": 0, "start_offset": 5, "end": 8, "lag": 3,
                                 "error": None}]
        assert d["lag"] == 3 and d["lag_by_topic"] == {topic: 3}
        (m,) = d["members"]
        assert m["client"] == "web-share" and m["assignment"] == [f"{topic}-0"] and m["member"]
        assert m["host"] == "/127.0.0.1" and m["epoch"] >= 1
        assert "read-only" in d["read_only"] and d["lag_history"][-1][1] == 3
        # a group that is not a share group: the broker's GROUP_ID_NOT_FOUND on the page
        missing = c.get("/api/share-groups/no-such-share-group")
        assert missing.status_code == 400 and "GROUP_ID_NOT_FOUND" in missing.json()["error"], missing.text
    finally:
        member.close()
        c.close()


def test_share_group_refused_without_describe(consoles: dict[str, RunningConsole]) -> None:
    c = httpx.Client(base_url=consoles["alice"].url, timeout=30)
    c.get("/api/session")
    r = c.get("/api/share-groups/alice-cannot-see")
    assert r.status_code == 403 and "GROUP_AUTHORIZATION_FAILED" in r.json()["error"], r.text
    c.close()
