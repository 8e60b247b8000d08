"""Replication through ZooKeeper: 3 brokers + 1 ZooKeeper on loopback, RF=3, min.insync.replicas=2, acks=all."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _create(cluster: Any, name: str, partitions: int = 1) -> None:
    admin = cluster.admin()
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(30)

    def ready(md: Any) -> bool:
        ps = [cluster.partition(md, name, p) for p in range(partitions)]
        return all(p is not None and p.leader > 0 and len(p.isrs) == 3 for p in ps)

    cluster.wait_for(f"{name} led with a full ISR", ready)


def _leader(cluster: Any, topic: str, p: int = 0, not_in: tuple[int, ...] = ()) -> int:
    def pred(md: Any) -> int | None:
        part = cluster.partition(md, topic, p)
        if part is not None and part.leader > 0 and part.leader not in not_in:
            return part.leader
        return None

    return cluster.wait_for(f"a leader of {topic}-{p} outside {not_in}", pred)


def _segment_bytes(broker: Any, topic: str, p: int = 0) -> bytes:
    d = Path(broker.data_dir) / f"{topic}-{p}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def _consume(bootstrap: str, topic: str, n: int, timeout: float = 60.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while True:  # stop at the HW; a client's metadata may still name a leader that just lost the partition
            try:
                _low, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # retry interval of the watermark query
        last = -1
        while len(out) < n and last < end - 1 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.append(m.value())
            last = m.offset()
    finally:
        c.close()
    return out


def _producer(cluster: Any) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                     "request.timeout.ms": 5000, "socket.timeout.ms": 6000})


def test_acks_all_replicates_byte_identical(cluster: Any) -> None:
    topic = f"rep-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    acked: list[Any] = []
    errors: list[Any] = []
    p = _producer(cluster)
    for i in range(2000):
        p.produce(topic, f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: (errors if err else acked).append(err or msg))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert errors == []
    assert len(acked) == 2000
    # every ack means HW >= that offset + 1, i.e. every ISR member holds it: all replicas hold the same bytes
    leader = _leader(cluster, topic)
    copies = {i: _segment_bytes(b, topic) for i, b in cluster.brokers.items()}
    assert len(copies[leader]) > 0
    for i, data in copies.items():
        assert data == copies[leader], f"broker {i} differs from the leader {leader}"
    values = _consume(cluster.bootstrap, topic, 2000)
    assert values == [f"v{i}".encode() for i in range(2000)]
    # tidelog cluster describe reads the same state from ZooKeeper
    out = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "describe", "-z",
                          cluster.zk.connect, "--json"], capture_output=True, text=True, timeout=60, check=True)
    described = json.loads(out.stdout)
    assert sorted(b["id"] for b in described["brokers"]) == [1, 2, 3]
    assert described["controller"] in (1, 2, 3) and described["controller_epoch"] >= 1
    (part,) = next(t for t in described["topics"] if t["topic"] == topic)["partitions"]
    assert part["leader"] == leader and sorted(part["isr"]) == [1, 2, 3] and sorted(part["replicas"]) == [1, 2, 3]


class _Load:
    """An idempotent acks=all producer writing unique values until stopped; records acks and errors."""

    def __init__(self, cluster: Any, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.acked: dict[bytes, int] = {}
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        p = _producer(self.cluster)
        i = 0

        def cb(err: Any, msg: Any) -> None:
            if err:
                self.errors.append(err)
            else:
                self.acked[msg.value()] = msg.offset()

        while not self._stop.is_set():
            p.produce(self.topic, f"r{i}".encode(), partition=0, on_delivery=cb)
            i += 1
            p.poll(0.002)
        assert p.flush(120) == 0

    def wait_progress(self, n: int = 50) -> None:
        before = len(self.acked)
        self.cluster.wait_for(f"{n} more acks", lambda _md: len(self.acked) >= before + n)

    def finish_and_check(self) -> None:
        self.wait_progress()
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive()
        assert self.errors == []
        values = _consume(self.cluster.bootstrap, self.topic, len(self.acked) + 1000, timeout=30)
        seen: dict[bytes, int] = {}
        for v in values:
            seen[v] = seen.get(v, 0) + 1
        lost = [v for v in self.acked if v not in seen]
        dups = [v for v, n in seen.items() if n > 1]
        assert lost == [], f"{len(lost)} acknowledged records lost"
        assert dups == [], f"{len(dups)} duplicates"
        # offsets are consistent: every acked value sits at the offset it was acked with
        offsets = {v: i for i, v in enumerate(values)}
        assert all(offsets[v] == off for v, off in self.acked.items())


def _in_isr(cluster: Any, topic: str, broker: int) -> None:
    cluster.wait_for(f"broker {broker} back in the ISR of {topic}",
                     lambda md: (p := cluster.partition(md, topic)) is not None and broker in p.isrs)


def test_kill_leader_no_acked_record_lost(cluster: Any) -> None:
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    load = _Load(cluster, topic)
    for _ in range(3):
        load.wait_progress()
        leader = _leader(cluster, topic)
        cluster.brokers[leader].kill()
        _leader(cluster, topic, not_in=(leader,))
        cluster.brokers[leader].start()
        _in_isr(cluster, topic, leader)
    load.finish_and_check()


def test_kill_controller(cluster: Any) -> None:
    from kazoo.client import KazooClient

    from tidelog.cluster import zkdata as zd

    topic = f"ctl-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    load = _Load(cluster, topic)
    load.wait_progress()
    zk = KazooClient(hosts=cluster.zk.connect)
    zk.start(timeout=30)
    try:
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        epoch = int(zk.get(zd.CONTROLLER_EPOCH)[0])
        cluster.brokers[controller].kill()
        cluster.wait_for("a new controller", lambda md: md.controller_id not in (-1, controller))
        assert int(zk.get(zd.CONTROLLER_EPOCH)[0]) > epoch
        _leader(cluster, topic, not_in=(controller,))
        load.wait_progress()
        cluster.brokers[controller].start()
        _in_isr(cluster, topic, controller)
    finally:
        zk.stop()
        zk.close()
    load.finish_and_check()


def test_sigstop_leader_past_session_timeout(cluster: Any) -> None:
    import os
    import signal

    topic = f"stop-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    load = _Load(cluster, topic)
    load.wait_progress()
    leader = _leader(cluster, topic)
    proc = cluster.brokers[leader].proc
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        _leader(cluster, topic, not_in=(leader,))  # its session expired: a new leader from the ISR
        load.wait_progress()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _in_isr(cluster, topic, leader)  # resigned, truncated if needed, caught up
    cluster.wait_for("the resumed broker registered again", lambda md: leader in md.brokers)
    load.finish_and_check()


def test_two_of_three_down_not_enough_replicas(cluster: Any) -> None:
    from confluent_kafka import KafkaError

    topic = f"nerep-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    leader = _leader(cluster, topic)
    victims = [b for b in cluster.brokers if b != leader][:2]
    survivors = [b for b in cluster.brokers if b not in victims]
    for v in victims:
        cluster.brokers[v].kill()
    cluster.wait_for("the ISR shrunk to the survivor",
                     lambda md: (p := cluster.partition(md, topic)) is not None and list(p.isrs) == survivors)
    errors: list[Any] = []
    acked: list[Any] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 5000,
                  "retries": 0})
    for i in range(5):
        p.produce(topic, f"x{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: (errors if err else acked).append(err or msg))
    p.flush(30)
    assert acked == []
    assert errors and all(e.code() == KafkaError.NOT_ENOUGH_REPLICAS for e in errors), errors


def _zk(cluster: Any) -> Any:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk.connect)
    zk.start(timeout=30)
    return zk


def _all_up(cluster: Any) -> None:
    """Start the brokers an earlier test left down, and wait until all three are registered."""
    for b in cluster.brokers.values():
        if not b.running:
            b.start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)


def _describe(cluster: Any, topic: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "describe", "-z",
                          cluster.zk.connect, "--json"], capture_output=True, text=True, timeout=60, check=True)
    return next(t for t in json.loads(out.stdout)["topics"] if t["topic"] == topic)["partitions"]


def test_controlled_shutdown_moves_leadership_before_exit(cluster: Any) -> None:
    """SIGTERM the leader under acks=all idempotent load: the controller moves the leadership and drops it from
    the ISR while its ZooKeeper session is still open; no delivery error, no acked record lost."""
    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    topic = f"cs-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    load = _Load(cluster, topic)
    load.wait_progress()
    leader = _leader(cluster, topic)
    zk = _zk(cluster)
    try:
        assert cluster.brokers[leader].stop() == 0
        ids = zk.exists(zd.BROKER_IDS)  # pzxid: the zxid that removed the stopped broker's registration
        data, stat = zk.get(zd.state_path(topic, 0))
        s = zd.decode_state(data, stat.version)
        assert s.leader not in (leader, zd.NO_LEADER) and leader not in s.isr
        assert stat.mzxid < ids.pzxid, "the leadership moved only after the broker's session ended"
        assert "controlled shutdown complete" in cluster.brokers[leader].log_text()
        load.wait_progress()
        cluster.brokers[leader].start()
        _in_isr(cluster, topic, leader)
    finally:
        zk.stop()
        zk.close()
    load.finish_and_check()


def test_elect_leaders_restores_preferred_leaders(cluster: Any) -> None:
    _all_up(cluster)
    topic = f"pref-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, partitions=3)
    before = _describe(cluster, topic)
    assert all(p["leader"] == p["replicas"][0] for p in before)  # a new topic starts on its preferred leaders
    victim = before[0]["leader"]
    cluster.brokers[victim].kill()
    _leader(cluster, topic, 0, not_in=(victim,))
    cluster.brokers[victim].start()
    cluster.wait_for(f"broker {victim} back in every ISR of {topic}", lambda md: all(
        (p := cluster.partition(md, topic, i)) is not None and victim in p.isrs for i in range(3)))
    moved = [p["partition"] for p in _describe(cluster, topic) if p["leader"] != p["replicas"][0]]
    assert 0 in moved
    cli = [sys.executable, "-m", "tidelog.cli.main", "cluster", "elect-leaders", "-z", cluster.zk.connect]
    # one partition only: the others are left alone
    other = next(i for i in range(3) if i not in moved)
    subprocess.run([*cli, "--topic", topic, "--partition", str(other)], capture_output=True, text=True,
                   timeout=60, check=True)
    assert [p["partition"] for p in _describe(cluster, topic) if p["leader"] != p["replicas"][0]] == moved
    out = subprocess.run([*cli, "--topic", topic], capture_output=True, text=True, timeout=60, check=True)
    after = _describe(cluster, topic)
    assert all(p["leader"] == p["replicas"][0] for p in after), after
    assert out.stdout.count("\tpreferred") == 3
    # clients follow: metadata names the preferred leaders and acks=all produce works on every partition
    cluster.wait_for("metadata with the preferred leaders", lambda md: all(
        (p := cluster.partition(md, topic, i)) is not None and p.leader == after[i]["replicas"][0]
        for i in range(3)))
    errors: list[Any] = []
    prod = _producer(cluster)
    for i in range(3):
        prod.produce(topic, b"x", partition=i, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []


def test_create_partitions_in_zookeeper_mode(cluster: Any) -> None:
    from confluent_kafka.admin import NewPartitions

    _all_up(cluster)
    topic = f"cp-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    first = _describe(cluster, topic)[0]["replicas"]
    admin = cluster.admin()  # kept alive until its futures complete
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    cluster.wait_for(f"{topic} with 4 partitions, each led with a full ISR", lambda md: all(
        (p := cluster.partition(md, topic, i)) is not None and p.leader > 0 and len(p.isrs) == 3 for i in range(4)))
    parts = _describe(cluster, topic)
    assert parts[0]["replicas"] == first  # existing partitions are untouched
    # Kafka's placement: the round robin of first replicas continues after partition 0's, one full replica set each
    ids = sorted(cluster.brokers)
    start = ids.index(first[0])
    assert [p["replicas"][0] for p in parts] == [ids[(start + i) % 3] for i in range(4)]
    assert all(sorted(p["replicas"]) == ids for p in parts)
    assert all(p["leader"] == p["replicas"][0] for p in parts)
    errors: list[Any] = []
    acked: list[Any] = []
    prod = _producer(cluster)
    for i in range(4):
        prod.produce(topic, f"p{i}".encode(), partition=i,
                     on_delivery=lambda err, msg: (errors if err else acked).append(err or msg))
    assert prod.flush(60) == 0 and errors == []
    assert sorted(m.partition() for m in acked) == [0, 1, 2, 3]
    # a second request with a stale count is refused as Kafka does
    with pytest.raises(Exception, match="already has 4 partitions"):
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)


def test_auto_leader_rebalance_controller(cluster: Any) -> None:
    """The controller alone (in its own ZooKeeper chroot, with registered brokers that are only znodes): with
    ``auto.leader.rebalance.enable`` its periodic check gives an imbalanced broker its preferred leaderships back
    when it is in the ISR, and leaves a partition whose preferred replica is out of sync alone."""
    from tidelog.cluster import zkdata as zd
    from tidelog.cluster.controller import Controller

    root = _zk(cluster)
    ns = f"/rebalance-{uuid.uuid4().hex[:8]}"
    root.ensure_path(ns)
    root.stop()
    root.close()
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk.connect + ns)
    zk.start(timeout=30)
    controller = None
    try:
        for b in (1, 2, 3):
            zk.create(zd.broker_path(b), zd.encode_broker(zd.BrokerInfo(b, "127.0.0.1", 1)), ephemeral=True,
                      makepath=True)
        zk.create(zd.topic_path("t"), zd.encode_topic(zd.TopicAssignment({0: [1, 2, 3], 1: [1, 3, 2], 2: [2, 3, 1]})),
                  makepath=True)
        states = {0: zd.LeaderIsr(2, 1, (1, 2, 3), 1), 1: zd.LeaderIsr(3, 1, (2, 3), 1),
                  2: zd.LeaderIsr(2, 0, (1, 2, 3), 1)}
        for p, s in states.items():
            zk.create(zd.state_path("t", p), zd.encode_state(s), makepath=True)
        moved = threading.Event()

        def watch(data: bytes | None, _stat: Any) -> bool | None:
            if data and zd.decode_state(data, 0).leader == 1:
                moved.set()
                return False
            return None

        zk.DataWatch(zd.state_path("t", 0), watch)
        controller = Controller(zk, 99, auto_rebalance=True, rebalance_interval_s=0.2, imbalance_pct=10)
        controller.start()
        assert moved.wait(20), "partition 0 was not given back to its preferred leader"
        after = {p: zd.decode_state(zk.get(zd.state_path("t", p))[0], -1) for p in states}
        assert after[0].leader == 1 and after[0].leader_epoch == 2 and after[0].isr == (1, 2, 3)
        assert after[1] == states[1]  # broker 1 is not in the ISR of partition 1: it stays with broker 3
        assert after[2] == states[2]
    finally:
        if controller is not None:
            controller.stop()
        zk.stop()
        zk.close()


def test_one_cluster_id_from_zookeeper(cluster: Any) -> None:
    """Every broker answers Metadata with the cluster id of ZooKeeper's /cluster/id (Kafka's ClusterIdZNode),
    and keeps it in its meta.properties."""
    from confluent_kafka.admin import AdminClient

    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    zk = _zk(cluster)
    try:
        data = zk.get(zd.CLUSTER_ID)[0]
    finally:
        zk.stop()
        zk.close()
    assert json.loads(data)["version"] == "1"
    cluster_id = zd.decode_cluster_id(data)
    assert len(cluster_id) == 22
    for b in cluster.brokers.values():
        assert AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).cluster_id == cluster_id
        assert f"cluster.id={cluster_id}" in (Path(b.data_dir) / "meta.properties").read_text()


def test_controlled_shutdown_of_the_controller(cluster: Any) -> None:
    """The controller's own broker shuts down: its controller handles the request before the session closes,
    then another broker takes over as controller."""
    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    topic = f"csc-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, partitions=3)
    zk = _zk(cluster)
    try:
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        led = [p["partition"] for p in _describe(cluster, topic) if p["leader"] == controller]
        assert led  # one partition per broker on a new 3-partition topic
        assert cluster.brokers[controller].stop() == 0
        ids = zk.exists(zd.BROKER_IDS)
        for p in led:
            data, stat = zk.get(zd.state_path(topic, p))
            s = zd.decode_state(data, stat.version)
            assert s.leader not in (controller, zd.NO_LEADER) and controller not in s.isr
            assert stat.mzxid < ids.pzxid
        cluster.wait_for("a new controller", lambda md: md.controller_id not in (-1, controller))
        cluster.brokers[controller].start()
        cluster.wait_for(f"broker {controller} back in every ISR of {topic}", lambda md: all(
            (p := cluster.partition(md, topic, i)) is not None and controller in p.isrs for i in range(3)))
    finally:
        zk.stop()
        zk.close()


def _state(cluster: Any, topic: str, p: int = 0) -> Any:
    from tidelog.cluster import zkdata as zd

    zk = _zk(cluster)
    try:
        data, stat = zk.get(zd.state_path(topic, p))
        return zd.decode_state(data, stat.version)
    finally:
        zk.stop()
        zk.close()


def _replica_fetch(broker: Any, replica_id: int, topic: str, leader_epoch: int, fetch_offset: int,
                   last_fetched_epoch: int) -> dict:
    """One follower Fetch v12 (KIP-320 fields) sent the way ClusterBroker's fetcher sends it."""
    import asyncio

    from tidelog.cluster.peer import Peer

    async def go() -> dict:
        peer = Peer("127.0.0.1", broker.port, "test-replica")
        try:
            resp = await peer.request(1, 12, {
                "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{
                    "partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": fetch_offset,
                    "last_fetched_epoch": last_fetched_epoch, "log_start_offset": 0,
                    "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""})
        finally:
            peer.close()
        return resp["responses"][0]["partitions"][0]

    return asyncio.run(go())


def test_fetch_answers_diverging_epoch(cluster: Any) -> None:
    """KIP-320 on the leader: a follower Fetch whose (last_fetched_epoch, fetch_offset) runs past the leader's
    end of that epoch gets ``diverging_epoch`` and no records; one that matches gets records; an epoch the
    leader never had gets OFFSET_OUT_OF_RANGE (re-truncation through OffsetForLeaderEpoch)."""
    _all_up(cluster)
    topic = f"kip320-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    prod = _producer(cluster)
    for i in range(20):
        prod.produce(topic, f"a{i}".encode(), partition=0)
    assert prod.flush(60) == 0
    s = _state(cluster, topic)
    leader, epoch = s.leader, s.leader_epoch
    follower = next(b for b in s.isr if b != leader)
    n = 20  # every record acked by the whole ISR: each follower holds them, so fetch offsets <= 20 are honest
    part = _replica_fetch(cluster.brokers[leader], follower, topic, epoch, n + 7, epoch)
    assert part["error_code"] == 0
    assert part["diverging_epoch"] == {"epoch": epoch, "end_offset": n}
    assert not bytes(part["records"] or b"")
    part = _replica_fetch(cluster.brokers[leader], follower, topic, epoch, 10, epoch)
    assert part["error_code"] == 0 and part["diverging_epoch"]["epoch"] == -1
    assert len(bytes(part["records"])) > 0 and part["high_watermark"] == n
    assert _replica_fetch(cluster.brokers[leader], follower, topic, epoch, n, epoch + 5)["error_code"] == 1
    # a leader change: the new leader's end of the old epoch is where the old epoch stopped
    cluster.brokers[leader].kill()
    new_leader = _leader(cluster, topic, not_in=(leader,))
    for i in range(5):
        prod.produce(topic, f"b{i}".encode(), partition=0)
    assert prod.flush(60) == 0
    s2 = _state(cluster, topic)
    assert s2.leader == new_leader and s2.leader_epoch > epoch
    other = next(b for b in cluster.brokers if b not in (leader, new_leader))
    part = _replica_fetch(cluster.brokers[new_leader], other, topic, s2.leader_epoch, n + 3, epoch)
    assert part["error_code"] == 0 and part["diverging_epoch"]["end_offset"] == n
    assert part["diverging_epoch"]["epoch"] <= epoch
    # an old current_leader_epoch is fenced before anything else
    assert _replica_fetch(cluster.brokers[new_leader], other, topic, epoch, n, epoch)["error_code"] == 74
    cluster.brokers[leader].start()
    _in_isr(cluster, topic, leader)
    assert _consume(cluster.bootstrap, topic, 25) == [f"a{i}".encode() for i in range(20)] + [
        f"b{i}".encode() for i in range(5)]


def test_divergent_tail_truncated_through_fetch(cluster: Any) -> None:
    """A leader appends batches no follower gets (acks=1 while both followers are stopped), is killed -9 and
    comes back: its first Fetch carries its last epoch, the new leader answers diverging_epoch and the old
    leader truncates its tail (KIP-320), ending byte-identical to the others."""
    import os
    import signal

    _all_up(cluster)
    topic = f"tail-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    prod = _producer(cluster)
    for i in range(10):
        prod.produce(topic, f"c{i}".encode(), partition=0)
    assert prod.flush(60) == 0
    leader = _state(cluster, topic).leader
    followers = [b for b in cluster.brokers if b != leader]
    stopped = [cluster.brokers[b].proc.pid for b in followers]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        p1 = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "1", "linger.ms": 0})
        for i in range(20):  # one batch each: a long poll the followers had pending may carry the first few
            p1.produce(topic, f"tail{i}".encode(), partition=0)
            assert p1.flush(30) == 0
        cluster.brokers[leader].kill()
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    new_leader = _leader(cluster, topic, not_in=(leader,))
    cluster.brokers[leader].start()
    _in_isr(cluster, topic, leader)
    text = cluster.brokers[leader].log_text()
    assert "by=diverging_epoch" in text, text[-3000:]

    def same() -> bool:
        copies = {i: _segment_bytes(b, topic) for i, b in cluster.brokers.items()}
        return len(set(copies.values())) == 1

    cluster.wait_for("identical replicas", lambda _md: same())
    values = _consume(cluster.bootstrap, topic, 40)
    assert values[:10] == [f"c{i}".encode() for i in range(10)]
    # what a follower got through a long poll pending when it was stopped survives; the rest is truncated
    assert values[10:] == [f"tail{i}".encode() for i in range(len(values) - 10)] and len(values) < 30
    assert _state(cluster, topic).leader == new_leader


def _metrics(broker: Any) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _metric(text: str, name: str, **labels: str) -> float | None:
    import re

    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            return float(m.group(2))
    return None


def test_replication_metrics(cluster: Any) -> None:
    """/metrics of the leader: follower lag per follower, under-replicated partitions while a follower is down,
    an ISR expansion counted when it comes back."""
    _all_up(cluster)
    topic = f"met-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    leader = _state(cluster, topic).leader
    lb = cluster.brokers[leader]
    follower = next(b for b in cluster.brokers if b != leader)
    text = _metrics(lb)
    for b in cluster.brokers:
        if b != leader:
            assert _metric(text, "tidelog_replica_follower_lag_messages", topic=topic, follower=str(b)) == 0
    assert _metric(text, "tidelog_replicamanager_leader_count") >= 1
    expands = _metric(text, "tidelog_replicamanager_isr_expands_total")
    assert expands is not None and _metric(text, "tidelog_replicamanager_isr_shrinks_total") is not None
    cluster.brokers[follower].kill()
    cluster.wait_for("the ISR without the killed follower",
                     lambda _md: follower not in _state(cluster, topic).isr)
    prod = _producer(cluster)
    for i in range(10):
        prod.produce(topic, f"m{i}".encode(), partition=0)
    assert prod.flush(60) == 0
    text = _metrics(lb)
    assert _metric(text, "tidelog_replicamanager_under_replicated_partitions") >= 1
    assert _metric(text, "tidelog_replica_follower_lag_messages", topic=topic, follower=str(follower)) == 10
    cluster.brokers[follower].start()
    _in_isr(cluster, topic, follower)
    cluster.wait_for("the expansion counted", lambda _md: _metric(
        _metrics(lb), "tidelog_replicamanager_isr_expands_total") >= expands + 1)
    assert _metric(_metrics(lb), "tidelog_replica_follower_lag_messages", topic=topic, follower=str(follower)) == 0


def test_replica_fetcher_counts_rounds_and_empty_answers(cluster: Any) -> None:
    """/metrics of a follower (issue 30): its fetcher's requests to the leader and, of their answers, those that
    carried no records. A long poll that expires (``replica.fetch.wait.max.ms``, 500 ms) is an empty answer; an
    answer with the produced records is not one."""
    _all_up(cluster)
    topic = f"rounds-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    leader = _state(cluster, topic).leader
    fb = cluster.brokers[next(b for b in cluster.brokers if b != leader)]

    def counts() -> tuple[float, float]:
        text = _metrics(fb)
        sent = _metric(text, "tidelog_replica_fetcher_requests", source=str(leader))
        empty = _metric(text, "tidelog_replica_fetcher_empty_responses", source=str(leader))
        assert sent is not None and empty is not None
        assert 0 <= empty <= sent
        return sent, empty

    _sent0, empty0 = counts()
    # idle: the follower's long polls expire empty, one every replica.fetch.wait.max.ms
    cluster.wait_for("two expired long polls counted", lambda _md: counts()[1] >= empty0 + 2)
    sent1, empty1 = counts()
    prod = _producer(cluster)
    for i in range(20):
        prod.produce(topic, f"r{i}".encode(), partition=0)
    assert prod.flush(60) == 0  # acks=all: the follower (in the ISR) fetched the records before the answer
    sent2, empty2 = counts()
    assert sent2 - sent1 >= 1
    assert (sent2 - empty2) - (sent1 - empty1) >= 1  # at least one answer with records, not counted empty


def test_new_leader_deduplicates_retried_idempotent_batches(cluster: Any) -> None:
    """A new leader knows the producers' last sequences from the log it replicated (follower appends rebuild
    producer state): a batch retried after the failover gets its original offset instead of a second copy, a
    sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, the next sequence is appended."""
    from helpers import RawClient, produce_raw

    from tidelog.records.batch import build_batch

    _all_up(cluster)
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic)
    leader = _state(cluster, topic).leader
    with RawClient(cluster.brokers[leader].port) as c:
        init = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
                                 "producer_epoch": -1})
        assert init["error_code"] == 0
        pid, pepoch = init["producer_id"], init["producer_epoch"]

        def batch(seq: int) -> bytes:
            return build_batch([(None, f"x{seq + i}".encode()) for i in range(3)], producer_id=pid,
                               producer_epoch=pepoch, base_sequence=seq)

        first = produce_raw(c, topic, 0, batch(0))
        second = produce_raw(c, topic, 0, batch(3))
    assert first["error_code"] == 0 and second["error_code"] == 0
    assert (first["base_offset"], second["base_offset"]) == (0, 3)
    cluster.brokers[leader].kill()
    new_leader = _leader(cluster, topic, not_in=(leader,))
    try:
        with RawClient(cluster.brokers[new_leader].port) as c:
            def produce(seq: int) -> dict:  # NOT_LEADER / NOT_ENOUGH_REPLICAS while the new term settles
                deadline = time.monotonic() + 60
                while True:
                    out = produce_raw(c, topic, 0, batch(seq))
                    if out["error_code"] not in (6, 19, 20) or time.monotonic() > deadline:
                        return out
                    time.sleep(0.1)  # retry interval, as a client's retry.backoff.ms

            retried = produce(3)
            assert retried["error_code"] == 0 and retried["base_offset"] == 3, retried  # the original offset
            assert produce(0)["base_offset"] == 0
            assert produce(9)["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: 6..8 missing
            third = produce(6)
            assert third["error_code"] == 0 and third["base_offset"] == 6
    finally:
        cluster.brokers[leader].start()
    _in_isr(cluster, topic, leader)
    assert _consume(cluster.bootstrap, topic, 9) == [f"x{i}".encode() for i in range(9)]


def _fetcher_rows(broker: Any) -> dict[tuple[str, str], tuple[float, float]]:
    """``(source, fetcher) -> (partitions, requests)`` from a broker's replica fetcher metrics."""
    import re

    rows: dict[tuple[str, str], list[float]] = {}
    for line in _metrics(broker).splitlines():
        m = re.match(r'^tidelog_replica_fetcher_(partitions|requests)\{([^}]*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            row = rows.setdefault((labels["source"], labels["fetcher"]), [0.0, 0.0])
            row[0 if m.group(1) == "partitions" else 1] = float(m.group(3))
    return {k: (v[0], v[1]) for k, v in rows.items()}


def _followed_from(cluster: Any, broker: int) -> dict[str, int]:
    """From ZooKeeper: how many partitions ``broker`` hosts as a follower, by their leader."""
    from tidelog.cluster import zkdata as zd

    zk = _zk(cluster)
    try:
        out: dict[str, int] = {}
        for topic in zk.get_children(zd.BROKER_TOPICS):
            a = zd.decode_topic(zk.get(zd.topic_path(topic))[0])
            for p, reps in a.partitions.items():
                if broker not in reps:
                    continue
                s = zd.decode_state(*zk.get(zd.state_path(topic, p)))
                if s.leader not in (broker, zd.NO_LEADER):
                    out[str(s.leader)] = out.get(str(s.leader), 0) + 1
        return out
    finally:
        zk.stop()
        zk.close()


def test_one_fetcher_per_source_broker(cluster: Any) -> None:
    """Each broker runs one replica fetcher per leader it follows (num.replica.fetchers=1), carrying every
    partition it follows from that leader in the same Fetch; 6 partitions spread over 3 leaders replicate
    byte-identically through them."""
    _all_up(cluster)
    topic = f"fetchers-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, partitions=6)
    prod = _producer(cluster)
    for i in range(60):
        prod.produce(topic, f"f{i}".encode(), partition=i % 6)
    assert prod.flush(60) == 0
    leaders = {_state(cluster, topic, p).leader for p in range(6)}
    assert len(leaders) > 1  # Kafka's placement spreads the leaders: several fetchers per broker

    for b, broker in cluster.brokers.items():
        def matches(_md: Any, b: int = b, broker: Any = broker) -> bool:
            expected = _followed_from(cluster, b)
            rows = _fetcher_rows(broker)
            return {src: int(n) for (src, _fid), (n, _req) in rows.items()} == expected

        cluster.wait_for(f"broker {b}: one fetcher per leader, with all partitions it follows there", matches)
        rows = _fetcher_rows(broker)
        assert {fid for _src, fid in rows} == {"0"}, rows  # one fetcher per source broker
        assert str(b) not in {src for src, _fid in rows}
        assert all(req >= 1 for _n, req in rows.values()), rows

    def same() -> bool:
        return all(len({_segment_bytes(br, topic, p) for br in cluster.brokers.values()}) == 1 for p in range(6))

    cluster.wait_for("identical replicas of the 6 partitions", lambda _md: same())
    # the followers fetch in incremental fetch sessions (KIP-227, issue 30): each leader holds sessions with at
    # least the partitions the others follow from it (librdkafka's consumers open none)
    for b, broker in cluster.brokers.items():
        followed_here = sum(_followed_from(cluster, other).get(str(b), 0) for other in cluster.brokers if other != b)
        if followed_here:
            text = _metrics(broker)
            assert (_metric(text, "tidelog_fetch_sessions") or 0) >= 1
            assert (_metric(text, "tidelog_fetch_session_partitions") or 0) >= followed_here


def test_one_partition_truncates_while_another_keeps_fetching(cluster: Any) -> None:
    """Two partitions led by the same broker, so followed by one fetcher: the old leader comes back with a
    divergent tail on partition 0 only; it truncates partition 0 (diverging_epoch) while partition 1, in
    the same Fetch requests, keeps replicating; both end byte-identical on all brokers."""
    import os
    import signal

    _all_up(cluster)
    topic = f"hold-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 2, replica_assignment=[[1, 2, 3], [1, 2, 3]])])[topic].result(30)
    cluster.wait_for(f"{topic} led by 1 with a full ISR", lambda md: all(
        (p := cluster.partition(md, topic, i)) is not None and p.leader == 1 and len(p.isrs) == 3 for i in (0, 1)))
    prod = _producer(cluster)
    for i in range(10):
        prod.produce(topic, f"a{i}".encode(), partition=0)
        prod.produce(topic, f"b{i}".encode(), partition=1)
    assert prod.flush(60) == 0
    followers = [cluster.brokers[b].proc.pid for b in (2, 3)]
    for pid in followers:
        os.kill(pid, signal.SIGSTOP)
    try:
        p1 = Producer({"bootstrap.servers": cluster.brokers[1].bootstrap, "acks": "1", "linger.ms": 0})
        for i in range(20):
            p1.produce(topic, f"tail{i}".encode(), partition=0)
            assert p1.flush(30) == 0
        cluster.brokers[1].kill()
    finally:
        for pid in followers:
            os.kill(pid, signal.SIGCONT)
    new_leader = _leader(cluster, topic, 0, not_in=(1,))
    assert _leader(cluster, topic, 1, not_in=(1,)) == new_leader  # the same next replica in both assignments
    cluster.brokers[1].start()
    for i in range(10, 200):  # partition 1 written while broker 1 catches up and truncates partition 0
        prod.produce(topic, f"b{i}".encode(), partition=1)
    assert prod.flush(60) == 0
    cluster.wait_for("broker 1 back in both ISRs", lambda md: all(
        (p := cluster.partition(md, topic, i)) is not None and 1 in p.isrs for i in (0, 1)))
    text = cluster.brokers[1].log_text()
    assert any(f"topic={topic} partition=0" in line and "by=diverging_epoch" in line
               for line in text.splitlines() if "truncating" in line), text[-3000:]
    assert not any(f"topic={topic} partition=1" in line and "truncating" in line for line in text.splitlines())

    def one_fetcher(_md: Any) -> bool:
        rows = _fetcher_rows(cluster.brokers[1])
        if not _state(cluster, topic, 0).leader == _state(cluster, topic, 1).leader == new_leader:
            return True  # a preferred-leader rebalance gave broker 1 its partitions back: nothing to check
        return rows.get((str(new_leader), "0"), (0, 0))[0] >= 2

    cluster.wait_for("both partitions in broker 1's one fetcher of the new leader", one_fetcher)

    def same() -> bool:
        return all(len({_segment_bytes(br, topic, p) for br in cluster.brokers.values()}) == 1 for p in (0, 1))

    cluster.wait_for("identical replicas", lambda _md: same())
