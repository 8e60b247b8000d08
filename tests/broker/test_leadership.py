"""The coordinators follow partition leadership in both modes (D0065, issue 26 item 2): one node's replica manager
announces leadership of every hosted partition at start and of every partition created later, resignation of
deleted ones; the coordinators own exactly what they were told they lead, and no broker module reads the mode."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tidelog.broker.config import BrokerConfig
from tidelog.broker.group.records import OFFSETS_TOPIC
from tidelog.broker.txn.records import TRANSACTION_STATE_TOPIC
from tidelog.node import build_broker

SRC = Path(__file__).resolve().parents[2] / "src" / "tidelog"


class Recorder:
    """A leadership listener that keeps every announcement."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, bool, int]] = []

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        self.seen.append((topic, partition, is_leader, leader_epoch))


def _run(data: Path, scenario: Callable[[Any], Awaitable[None]], **props: str) -> None:
    async def main() -> None:
        cfg = BrokerConfig.from_properties({"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0",
                                            "tidelog.metrics.listener": "off", **props})
        broker = build_broker(cfg)
        await broker.start()
        try:
            await asyncio.wait_for(broker.group_coordinator.loaded.wait(), 30)
            await asyncio.wait_for(broker.txn_coordinator.loaded.wait(), 30)
            await scenario(broker)
        finally:
            await broker.shutdown()

    asyncio.run(main())


def test_one_node_leads_what_it_creates_and_what_it_finds_at_start(tmp_path: Path) -> None:
    props = {"offsets.topic.num.partitions": "5", "transaction.state.log.num.partitions": "3"}

    async def first(broker: Any) -> None:
        gc, tc = broker.group_coordinator, broker.txn_coordinator
        assert gc.owned == {} and tc.owned == {}  # no internal topic yet: nothing led, nothing coordinated
        err, _msg, node = await gc.find_coordinator("g")  # creates __consumer_offsets: led here at once
        assert err == 0 and node is not None and node[0] == broker.node_id
        assert gc.owned == dict.fromkeys(range(5), 0) and not gc.loading_partitions  # empty: no load needed
        err2, node2 = await tc.find_coordinator("tx")
        assert err2 is None and node2 is not None and node2[0] == broker.node_id
        assert tc.owned == dict.fromkeys(range(3), 0)
        assert gc.check("g") == 0
        # a user topic created and deleted: the listeners hear both (resignation with epoch -1)
        rec = Recorder()
        broker.replica_manager.leadership.listen((gc, tc, rec))
        await broker.request_pool.run(broker.topics.create_topic, "t", 2, 1)
        assert sorted(rec.seen) == [("t", 0, True, 0), ("t", 1, True, 0)]
        await broker.request_pool.run(broker.topics.delete_topic, "t")
        assert sorted(rec.seen)[:2] == [("t", 0, False, -1), ("t", 0, True, 0)]
        assert len(rec.seen) == 4
        # a commit, so that the next start has something to load
        assert await gc._append("g", [(b"k", b"v")]) == 0

    async def again(broker: Any) -> None:
        gc, tc = broker.group_coordinator, broker.txn_coordinator
        # start_leadership announced every hosted partition; the loads are done (loaded was awaited)
        assert gc.owned == dict.fromkeys(range(5), 0) and not gc.loading_partitions
        assert tc.owned == dict.fromkeys(range(3), 0) and not tc.loading_partitions
        # a resignation unloads: the group's partition is no longer coordinated here
        p = next(iter(gc.owned))
        broker.replica_manager.leadership.changed(OFFSETS_TOPIC, p, False, -1)
        assert p not in gc.owned
        broker.replica_manager.leadership.changed(TRANSACTION_STATE_TOPIC, 0, False, -1)
        assert 0 not in tc.owned
        broker.replica_manager.leadership.changed(OFFSETS_TOPIC, p, True, 1)  # elected again: owned once more
        assert gc.owned[p] == 1

    _run(tmp_path, first, **props)
    _run(tmp_path, again, **props)


def test_no_broker_module_reads_the_mode() -> None:
    """The mode is chosen once, by the composition root: nothing under broker/ reads ``zookeeper.connect`` but the
    config that declares it, and no part is handed the broker through ``attach`` by the broker for the replica
    manager."""
    readers = []
    for path in sorted((SRC / "broker").rglob("*.py")):
        if path.name == "config.py":
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"[\"']zookeeper\.connect[\"']", text):
            readers.append(str(path.relative_to(SRC)))
    assert readers == []
    assert "rm.attach(" not in (SRC / "broker" / "broker.py").read_text(encoding="utf-8")


def test_a_batch_whose_leadership_moved_meanwhile_still_loads_the_rest(tmp_path: Path) -> None:
    """Partitions elected together load as one batch; if one of them changed hands while the batch was read, the
    others are still installed (not left answering COORDINATOR_LOAD_IN_PROGRESS) and the moved one waits for its
    new election."""
    from tidelog.broker.group import loading

    async def scenario(broker: Any) -> None:
        gc = broker.group_coordinator
        await gc.find_coordinator("g")  # __consumer_offsets, 4 partitions, led here
        n = gc.num_partitions
        batch = {p: gc._load_generation[p] for p in range(n)}
        gc.loading_partitions |= set(batch)  # as if just elected together
        gc._load_generation[0] += 1  # partition 0 changed hands while the batch was read
        await loading._load_partitions(gc, batch)
        assert gc.loading_partitions == {0}

    _run(tmp_path, scenario, **{"offsets.topic.num.partitions": "4"})
