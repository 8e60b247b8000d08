"""Producer ids in ZooKeeper mode: blocks reserved in Kafka's ``/latest_producer_id_block`` (a real ZooKeeper),
unique across brokers and restarts; InitProducerId against a real 3-broker cluster."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from helpers import RawClient  # tests/integration and tests/cluster are on sys.path (tests/conftest.py)
from support import kazoo, start_zookeeper, until

from tidelog.broker.producer_ids import PRODUCER_ID_BLOCK_FILE, ProducerIdManager
from tidelog.cluster.producer_ids import (
    PRODUCER_ID_BLOCK_PATH,
    ProducerIdBlockError,
    ZkBlockSource,
    decode_block,
    zk_producer_id_manager,
)
from tidelog.protocol.api_keys import ApiKey

INIT_PRODUCER_ID = ApiKey.INIT_PRODUCER_ID


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    zk = start_zookeeper(tmp_path_factory.mktemp("zk"))
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def chroot(zookeeper: Any) -> Iterator[Any]:
    """A fresh chroot per test (so each starts without the znode), and a factory of kazoo clients inside it."""
    root = f"/pids-{uuid.uuid4().hex[:8]}"
    with kazoo(zookeeper.connect) as admin:
        admin.ensure_path(root)
    with ExitStack() as clients:  # every client made is stopped and closed at the end
        yield lambda: clients.enter_context(kazoo(zookeeper.connect + root))


def _znode(zk: Any) -> dict:
    return json.loads(zk.get(PRODUCER_ID_BLOCK_PATH)[0])


def test_znode_has_kafkas_format(chroot: Any, tmp_path: Path) -> None:
    zk = chroot()
    assert zk.exists(PRODUCER_ID_BLOCK_PATH) is None
    m7 = zk_producer_id_manager(zk, 7, [tmp_path / "b7"])
    assert m7.allocate() == 0
    raw = zk.get(PRODUCER_ID_BLOCK_PATH)[0]
    value = json.loads(raw)
    # Kafka's ProducerIdBlockZNode: version and broker are numbers, the (inclusive) bounds decimal strings
    assert value == {"version": 1, "broker": 7, "block_start": "0", "block_end": "999"}
    assert b" " not in raw
    assert [m7.allocate() for _ in range(999)] == list(range(1, 1000))
    m8 = zk_producer_id_manager(chroot(), 8)
    assert m8.allocate() == 1000
    assert _znode(zk) == {"version": 1, "broker": 8, "block_start": "1000", "block_end": "1999"}
    # m7's block is used up: its next block follows m8's
    assert m7.allocate() == 2000
    assert _znode(zk) == {"version": 1, "broker": 7, "block_start": "2000", "block_end": "2999"}
    # the single-node file is not written in ZooKeeper mode
    assert not (tmp_path / "b7" / PRODUCER_ID_BLOCK_FILE).exists()


def test_block_written_by_kafka_or_empty_znode(chroot: Any) -> None:
    zk = chroot()
    zk.create(PRODUCER_ID_BLOCK_PATH, b"")  # Kafka creates the path empty at start-up
    assert zk_producer_id_manager(zk, 1).allocate() == 0
    zk.set(PRODUCER_ID_BLOCK_PATH, b'{"version":1,"broker":0,"block_start":"41000","block_end":"41999"}')
    m = zk_producer_id_manager(zk, 1)
    assert m.allocate() == 42000
    assert decode_block(zk.get(PRODUCER_ID_BLOCK_PATH)[0]).block_end == 42999
    zk.set(PRODUCER_ID_BLOCK_PATH, b"not json")
    with pytest.raises(ProducerIdBlockError):
        zk_producer_id_manager(zk, 1).allocate()
    # the manager that failed to reserve hands out nothing; a good znode makes it work again
    zk.set(PRODUCER_ID_BLOCK_PATH, b'{"version":1,"broker":0,"block_start":"0","block_end":"99"}')
    assert zk_producer_id_manager(zk, 1).allocate() == 100


def test_concurrent_managers_never_overlap(chroot: Any) -> None:
    """Four "brokers", each with its own ZooKeeper session, allocate at once with small blocks (so that
    reservations race and conditional writes fail with BadVersion): no id is handed out twice."""
    n_brokers, per_broker, block = 4, 1500, 7
    managers = [ProducerIdManager(source=ZkBlockSource(chroot(), b), block_size=block) for b in range(n_brokers)]
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    go = threading.Barrier(n_brokers)

    def run(b: int) -> None:
        try:
            go.wait(timeout=60)
            results[b] = [managers[b].allocate() for _ in range(per_broker)]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,)) for b in range(n_brokers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    all_ids = [pid for ids in results.values() for pid in ids]
    assert len(all_ids) == n_brokers * per_broker
    assert len(set(all_ids)) == len(all_ids), "a producer id was handed out twice"
    for ids in results.values():
        assert ids == sorted(ids)  # each broker's ids increase
    # the blocks interleaved (the brokers really raced) and the znode covers every id handed out
    owners = {pid // block: b for b, ids in results.items() for pid in ids}
    assert len({owners[k] for k in sorted(owners)[: len(owners) // 2]}) > 1
    assert int(_znode(chroot())["block_end"]) >= max(all_ids)


def test_restart_and_single_node_floor(chroot: Any, tmp_path: Path) -> None:
    zk = chroot()
    seen = {zk_producer_id_manager(zk, 1).allocate() for _ in range(1)}
    for _ in range(3):  # "restarts": every new manager starts from the next block in ZooKeeper
        m = zk_producer_id_manager(chroot(), 1)
        got = [m.allocate() for _ in range(5)]
        assert not seen & set(got) and min(got) > max(seen)
        seen |= set(got)
    # a data dir used by an earlier single-node-style run: its file is a floor for this broker's blocks
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text("version: 0\nnext_block_start: 9000\n")
    assert zk_producer_id_manager(zk, 2, [tmp_path]).allocate() == 9000
    # epoch bumps: ids this manager handed out bump, others (another broker's, an earlier run's) get fresh ids
    m = zk_producer_id_manager(zk, 3)
    mine = m.allocate()
    assert m.bump_epoch(mine, 0) == (mine, 1)
    fresh, epoch = m.bump_epoch(9000, 0)
    assert fresh not in seen | {9000, mine} and epoch == 0


def test_unreachable_zookeeper_fails_instead_of_hanging(zookeeper: Any) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper.connect)
    zk.start(timeout=30)
    zk.stop()  # a client that lost its connection
    m = ProducerIdManager(source=ZkBlockSource(zk, 1, timeout_s=2.0))
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 (kazoo's connection error or timeout)
        m.allocate()
    assert time.monotonic() - t0 < 30
    assert m.allocate_nowait() is None
    zk.close()


# ------------------------------------------------------------------------------------------------ 3 brokers


def _init_producer_id(port: int, version: int = 4) -> tuple[int, int, int]:
    body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
    with RawClient(port, timeout=30) as c:
        r = c.request(INIT_PRODUCER_ID, version, body)
    return r["error_code"], r["producer_id"], r["producer_epoch"]


@pytest.mark.integration
@pytest.mark.slow
def test_init_producer_id_distinct_across_brokers_and_restarts(cluster: Any) -> None:
    seen: dict[int, int] = {}  # producer id -> broker that answered

    def ask_all() -> None:
        for b, proc in cluster.brokers.items():
            for _ in range(3):
                err, pid, epoch = _init_producer_id(proc.port)
                assert err == 0 and epoch == 0 and pid >= 0
                assert pid not in seen, f"producer id {pid} from broker {b} was already given by {seen.get(pid)}"
                seen[pid] = b

    ask_all()
    # each broker hands out ids from its own block of 1000
    blocks = {b: {pid // 1000 for pid, bb in seen.items() if bb == b} for b in cluster.brokers}
    assert all(len(v) == 1 for v in blocks.values()) and len(set().union(*blocks.values())) == 3
    with kazoo(cluster.zk.connect) as zk:
        value = json.loads(zk.get(PRODUCER_ID_BLOCK_PATH)[0])
        assert value["version"] == 1 and value["broker"] in cluster.brokers
        assert int(value["block_end"]) == max(seen) // 1000 * 1000 + 999
        # a broker restarts (kill -9): its new ids come from a new block, distinct from every earlier id
        cluster.brokers[2].kill()
        cluster.brokers[2].start()
        before = max(seen)
        _err, probe, _epoch = until("broker 2 answers InitProducerId", lambda: (
            r if (r := _init_producer_id(cluster.brokers[2].port))[0] == 0 else None))
        assert probe not in seen and probe > before
        seen[probe] = 2
        seen_before = set(seen)
        ask_all()
        assert len(seen) == len(seen_before) + 9
        new_from_2 = [pid for pid, b in seen.items() if b == 2 and pid not in seen_before]
        assert min(new_from_2) > max(seen_before)
        assert int(json.loads(zk.get(PRODUCER_ID_BLOCK_PATH)[0])["block_end"]) >= max(seen)
