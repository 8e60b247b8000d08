"""Cluster admin operations in ZooKeeper mode against a real ZooKeeper and 3 real brokers: partition
reassignment (AlterPartitionReassignments / ListPartitionReassignments, ``/admin/reassign_partitions``,
``tidelog cluster reassign``), DeleteTopics across brokers (``/admin/delete_topics``) and manual replica
assignments in CreateTopics / CreatePartitions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLI = [sys.executable, "-m", "tidelog.cli.main", "cluster"]


def _until(what: str, fn: Any, timeout: float = 90.0, interval: float = 0.2) -> Any:
    """Poll ``fn()`` until it returns something truthy (a condition with a deadline, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as exc:  # brokers coming and going
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def _zk(cluster: Any) -> Any:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk.connect)
    zk.start(timeout=30)
    return zk


def _assignment(zk: Any, topic: str) -> Any:
    from tidelog.cluster import zkdata as zd

    return zd.decode_topic(zk.get(zd.topic_path(topic))[0])


def _state(zk: Any, topic: str, p: int = 0) -> Any:
    from tidelog.cluster import zkdata as zd

    data, stat = zk.get(zd.state_path(topic, p))
    return zd.decode_state(data, stat.version)


def _create(cluster: Any, topic: str, assignment: list[list[int]]) -> None:
    admin = cluster.admin()  # kept alive until its future completes
    admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)])[topic].result(30)

    def ready(md: Any) -> bool:
        ps = [cluster.partition(md, topic, p) for p in range(len(assignment))]
        return all(p is not None and p.leader > 0 and len(p.isrs) == len(assignment[i]) for i, p in enumerate(ps))

    cluster.wait_for(f"{topic} led with a full ISR", ready)


def _all_up(cluster: Any) -> None:
    for b in cluster.brokers.values():
        if not b.running:
            b.start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)


def _dirs(broker: Any, topic: str) -> list[str]:
    """Every directory of ``topic`` in a broker's log dir, ``-delete`` ones included."""
    return sorted(d.name for d in Path(broker.data_dir).iterdir() if d.is_dir() and d.name.startswith(f"{topic}-"))


def _segment_bytes(broker: Any, topic: str, p: int = 0) -> bytes:
    d = Path(broker.data_dir) / f"{topic}-{p}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def _consume(bootstrap: str, topic: str, p: int = 0, timeout: float = 60.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        _low, end = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        deadline = time.monotonic() + timeout
        last = -1
        while last < end - 1 and time.monotonic() < deadline:
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


class _Load:
    """An idempotent acks=all producer writing unique values to partition 0 until stopped."""

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

    def wait_progress(self, n: int = 200) -> None:
        before = len(self.acked)
        _until(f"{n} more acks", lambda: len(self.acked) >= before + n)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive()
        assert self.errors == []


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=check)


def _request(broker: Any, api_key: int, version: int, body: dict) -> dict:
    from tidelog.cluster.peer import Peer

    async def go() -> dict:
        peer = Peer("127.0.0.1", broker.port, "test-admin-ops")
        try:
            return await peer.request(api_key, version, body, timeout=60)
        finally:
            peer.close()

    return asyncio.run(go())


def _controller(cluster: Any) -> int:
    return cluster.wait_for("a controller", lambda md: md.controller_id if md.controller_id > 0 else None)


def _alter(cluster: Any, parts: dict[tuple[str, int], list[int] | None], broker: int | None = None,
           version: int = 0, **extra: Any) -> dict:
    topics: dict[str, list[dict]] = {}
    for (t, p), r in parts.items():
        topics.setdefault(t, []).append({"partition_index": p, "replicas": r})
    body = {"timeout_ms": 30000, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], **extra}
    return _request(cluster.brokers[broker or _controller(cluster)], 45, version, body)


def _errors(resp: dict) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {(t["name"], p["partition_index"]): (p["error_code"], p["error_message"])
            for t in resp["responses"] for p in t["partitions"]}


# ---------------------------------------------------------------------------------------------------------------
# reassignment


def test_reassign_to_a_new_broker_under_load(cluster: Any, tmp_path: Path) -> None:
    """[1,2] -> [3,2] while an acks=all producer runs: broker 3 catches up, leads, broker 1's replica is deleted;
    every acknowledged record is readable and the replicas hold the same bytes."""
    _all_up(cluster)
    topic = f"mv-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2]])
    assert _dirs(cluster.brokers[3], topic) == []
    load = _Load(cluster, topic)
    load.wait_progress()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 2]}]}))
    out = _cli("reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert f"Successfully started partition reassignments for {topic}-0" in out.stdout
    assert f'"topic":"{topic}","partition":0,"replicas":[1,2]' in out.stdout  # the rollback JSON
    done = _until("the reassignment to complete", lambda: _cli(
        "reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--verify", check=False))
    assert f"Reassignment of partition {topic}-0 is completed." in done.stdout
    load.wait_progress()  # the producer keeps going after the move
    zk = _zk(cluster)
    try:
        a = _assignment(zk, topic)
        assert a.partitions[0] == [3, 2] and a.adding == {} and a.removing == {}
        s = _state(zk, topic)
        assert s.leader == 3 and sorted(s.isr) == [2, 3]  # leadership moved into the target
    finally:
        zk.stop()
        zk.close()
    # the removed replica's directory is gone (renamed -delete, then removed)
    _until("broker 1's replica deleted", lambda: _dirs(cluster.brokers[1], topic) == [])
    load.stop()
    values = _consume(cluster.bootstrap, topic)
    seen = set(values)
    assert len(values) == len(seen), "duplicates"
    lost = [v for v in load.acked if v not in seen]
    assert lost == [], f"{len(lost)} acknowledged records lost"
    offsets = {v: i for i, v in enumerate(values)}
    assert all(offsets[v] == off for v, off in load.acked.items())
    # all the data is on the new replica, byte for byte as on the other one
    _until("broker 3 holding the same bytes as broker 2",
           lambda: _segment_bytes(cluster.brokers[3], topic) == _segment_bytes(cluster.brokers[2], topic))
    assert len(_segment_bytes(cluster.brokers[3], topic)) > 0
    out = _cli("reassign", "-b", cluster.bootstrap, "--list")
    assert topic not in out.stdout


def test_reassignment_list_and_cancel(cluster: Any, tmp_path: Path) -> None:
    """A reassignment that cannot finish (the adding broker is down) is listed, then cancelled: RS goes back to
    the origin, nothing is listed, and a second cancel answers NO_REASSIGNMENT_IN_PROGRESS."""
    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    topic = f"cx-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2]])
    cluster.brokers[3].kill()
    cluster.wait_for("broker 3 unregistered", lambda md: 3 not in md.brokers)
    zk = _zk(cluster)
    try:
        # an ongoing reassignment [1,2] -> [3,2] as the controller writes it (AR=[3], RR=[1])
        data, stat = zk.get(zd.topic_path(topic))
        a = zd.decode_topic(data)
        a.reassign_to(0, [3, 2])
        zk.set(zd.topic_path(topic), zd.encode_topic(a), version=stat.version)
        resp = _request(cluster.brokers[1], 46, 0, {"timeout_ms": 30000, "topics": None})
        mine = [t for t in resp["topics"] if t["name"] == topic]
        assert mine == [{"name": topic, "partitions": [{"partition_index": 0, "replicas": [3, 2, 1],
                                                        "adding_replicas": [3], "removing_replicas": [1]}]}]
        out = _cli("reassign", "-b", cluster.bootstrap, "--list")
        assert f"{topic}-0: replicas: 3,2,1. adding: 3. removing: 1." in out.stdout
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                                  "replicas": [3, 2]}]}))
        verify = _cli("reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--verify",
                      check=False)
        assert verify.returncode == 1 and "is still in progress" in verify.stdout
        out = _cli("reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--cancel")
        assert f"Successfully cancelled partition reassignments for: {topic}-0" in out.stdout
        a = _assignment(zk, topic)
        # Kafka's originReplicas = RS minus AR, in RS's order ([3,2,1] -> [2,1])
        assert a.partitions[0] == [2, 1] and a.adding == {} and a.removing == {}
        assert "No partition reassignments found." in _cli("reassign", "-b", cluster.bootstrap, "--list").stdout
        resp = _alter(cluster, {(topic, 0): None})
        code, msg = _errors(resp)[(topic, 0)]
        assert code == 85 and "No reassignment in progress" in msg  # NO_REASSIGNMENT_IN_PROGRESS
    finally:
        zk.stop()
        zk.close()
    cluster.brokers[3].start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    errors: list[Any] = []
    prod = _producer(cluster)
    prod.produce(topic, b"after-cancel", partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []
    assert _dirs(cluster.brokers[3], topic) == []


def test_reassignment_resumed_by_a_new_controller(cluster: Any) -> None:
    """A reassignment waiting for a down broker survives a controller kill: when the broker is back, the new
    controller completes it; a removed replica whose broker was down is deleted when that broker starts."""
    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    topic = f"rf-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2]])
    cluster.brokers[3].kill()
    cluster.wait_for("broker 3 unregistered", lambda md: 3 not in md.brokers)
    zk = _zk(cluster)
    try:
        data, stat = zk.get(zd.topic_path(topic))
        a = zd.decode_topic(data)
        a.reassign_to(0, [3, 2])
        zk.set(zd.topic_path(topic), zd.encode_topic(a), version=stat.version)
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        cluster.brokers[controller].kill()
        cluster.wait_for("a new controller", lambda md: md.controller_id not in (-1, controller))
        cluster.brokers[3].start()
        if controller == 2:  # a target replica: the reassignment needs it back in the ISR
            cluster.brokers[2].start()

        def done() -> bool:
            a = _assignment(zk, topic)
            return a.partitions[0] == [3, 2] and not a.reassigning(0)

        _until("the reassignment completed by the new controller", done)
        s = _state(zk, topic)
        # broker 1 led: killed, 2 took over and, being in the target, keeps it; else 1 leaves for the first
        # in-sync target replica, 3
        assert s.leader == (2 if controller == 1 else 3) and sorted(s.isr) == [2, 3]
    finally:
        zk.stop()
        zk.close()
    _all_up(cluster)  # broker 1, when it was the controller, was down all along: its replica is a stray
    _until("broker 1 without a replica of the topic", lambda: _dirs(cluster.brokers[1], topic) == [])
    assert _dirs(cluster.brokers[3], topic) == [f"{topic}-0"]


def test_reassignment_through_the_zookeeper_znode(cluster: Any) -> None:
    """Kafka's /admin/reassign_partitions: the controller runs it, drops finished partitions from it and deletes
    the znode; a replication factor change (2 -> 3) works too."""
    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    topic = f"zr-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2], [2, 3]])
    zk = _zk(cluster)
    try:
        zk.create(zd.REASSIGN_PARTITIONS, zd.encode_reassignment({(topic, 0): [2, 3, 1], (topic, 1): [1, 3]}),
                  makepath=True)
        _until("the znode deleted by the controller", lambda: zk.exists(zd.REASSIGN_PARTITIONS) is None)
        a = _assignment(zk, topic)
        assert a.partitions == {0: [2, 3, 1], 1: [1, 3]} and a.adding == {} and a.removing == {}
        assert sorted(_state(zk, topic, 0).isr) == [1, 2, 3]
        s1 = _state(zk, topic, 1)
        assert sorted(s1.isr) == [1, 3] and s1.leader in (1, 3)
    finally:
        zk.stop()
        zk.close()
    _until("broker 2's replica of partition 1 deleted", lambda: f"{topic}-1" not in _dirs(cluster.brokers[2], topic))
    assert f"{topic}-0" in _dirs(cluster.brokers[3], topic)


def test_alter_partition_reassignments_errors(cluster: Any) -> None:
    _all_up(cluster)
    topic = f"ae-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2]])
    ctl = _controller(cluster)
    other = next(b for b in cluster.brokers if b != ctl)
    resp = _alter(cluster, {(topic, 0): [3, 2]}, broker=other)
    assert resp["error_code"] == 41  # NOT_CONTROLLER: clients send it to the controller
    resp = _alter(cluster, {(topic, 0): [9, 2], (topic, 5): [1, 2], ("no-such-topic", 0): [1, 2]})
    errs = _errors(resp)
    assert errs[(topic, 0)][0] == 39 and "not alive" in errs[(topic, 0)][1]  # INVALID_REPLICA_ASSIGNMENT
    assert errs[(topic, 5)][0] == 3 and errs[("no-such-topic", 0)][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    errs = _errors(_alter(cluster, {(topic, 0): [2, 2]}))
    assert errs[(topic, 0)][0] == 39 and "Duplicate replica ids" in errs[(topic, 0)][1]
    errs = _errors(_alter(cluster, {(topic, 0): []}))
    assert errs[(topic, 0)][0] == 39 and "Empty replica list" in errs[(topic, 0)][1]
    # v1 (KIP-860): a replication factor change refused when not allowed
    errs = _errors(_alter(cluster, {(topic, 0): [1, 2, 3]}, version=1, allow_replication_factor_change=False))
    assert errs[(topic, 0)][0] == 38  # INVALID_REPLICATION_FACTOR
    zk = _zk(cluster)
    try:
        assert _assignment(zk, topic).partitions == {0: [1, 2]}  # nothing of the refused requests was written
    finally:
        zk.stop()
        zk.close()
    versions = _request(cluster.brokers[other], 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
    assert keys[45] == (0, 1) and keys[46] == (0, 0)


# ---------------------------------------------------------------------------------------------------------------
# DeleteTopics


def test_delete_topic_across_brokers_and_recreate(cluster: Any) -> None:
    from tidelog.cluster import zkdata as zd

    _all_up(cluster)
    topic = f"del-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2, 3], [2, 3, 1]])
    errors: list[Any] = []
    prod = _producer(cluster)
    for i in range(100):
        prod.produce(topic, f"old{i}".encode(), partition=i % 2,
                     on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []
    zk = _zk(cluster)
    try:
        old_id = _assignment(zk, topic).topic_id
        admin = cluster.admin()
        admin.delete_topics([topic])[topic].result(60)
        for path in (zd.topic_path(topic), zd.topic_config_path(topic), zd.delete_topic_path(topic)):
            assert zk.exists(path) is None, path
        for b in cluster.brokers.values():
            _until(f"broker {b} without replicas of {topic}", lambda b=b: _dirs(b, topic) == [])
            from confluent_kafka.admin import AdminClient

            md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
            assert topic not in md.topics
        with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
            admin.delete_topics([topic])[topic].result(30)
        # the same name again: a new topic with a new id, none of the old records
        _create(cluster, topic, [[3, 1, 2]])
        assert _assignment(zk, topic).topic_id not in (None, old_id)
    finally:
        zk.stop()
        zk.close()
    prod.produce(topic, b"new", partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []
    assert _consume(cluster.bootstrap, topic) == [b"new"]


def test_delete_topic_while_a_replica_is_down(cluster: Any) -> None:
    """A broker down during the deletion deletes its replica when it starts again and does not list the topic."""
    from confluent_kafka.admin import AdminClient

    _all_up(cluster)
    topic = f"deld-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2, 3]])
    cluster.brokers[3].kill()
    cluster.wait_for("broker 3 unregistered", lambda md: 3 not in md.brokers)
    assert _dirs(cluster.brokers[3], topic) == [f"{topic}-0"]
    admin = cluster.admin()
    admin.delete_topics([topic])[topic].result(60)
    cluster.brokers[3].start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    _until("broker 3's stray replica deleted", lambda: _dirs(cluster.brokers[3], topic) == [])
    assert topic not in AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap}).list_topics(timeout=10).topics


# ---------------------------------------------------------------------------------------------------------------
# manual assignments


def test_manual_assignments_create_topics_and_partitions(cluster: Any) -> None:
    _all_up(cluster)
    topic = f"man-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, [[1, 2], [2, 3], [3, 1]])
    zk = _zk(cluster)
    try:
        assert _assignment(zk, topic).partitions == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
        assert [_state(zk, topic, p).leader for p in range(3)] == [1, 2, 3]  # the first replica leads
        admin = cluster.admin()
        bad = {
            "unregistered": ([[1, 7]], "includes broker 7, but no such broker is registered"),
            "dup": ([[2, 2]], "includes the broker 2 more than once"),
            "mixed-rf": ([[1, 2], [3]], "not consistent with previous partitions"),
        }
        for name, (assignment, message) in bad.items():
            with pytest.raises(KafkaException) as info:
                admin.create_topics([NewTopic(f"{topic}-{name}", len(assignment), replica_assignment=assignment)])[
                    f"{topic}-{name}"].result(30)
            err = info.value.args[0]
            assert err.name() == "INVALID_REPLICA_ASSIGNMENT" and message in err.str(), err
        admin.create_partitions([NewPartitions(topic, 4, replica_assignment=[[3, 2]])])[topic].result(30)
        _until("partition 3 assigned as asked", lambda: _assignment(zk, topic).partitions.get(3) == [3, 2])
        cluster.wait_for("partition 3 led by broker 3", lambda md: (p := cluster.partition(md, topic, 3)) is not None
                         and p.leader == 3 and sorted(p.isrs) == [2, 3])
        bad_parts = {  # (new total, assignments of the added partitions); the topic has 4
            "Unknown broker(s) in replica assignment: 9.": (5, [[9, 1]]),
            "Increasing the number of partitions by 2 but 1 assignments provided.": (6, [[1, 2]]),
            "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 4.": (6, [[1, 1], [2, 3]]),
            "partition 0 has 2 while partitions [4] have replication factors [3]": (6, [[1, 2, 3], [2, 3]]),
        }
        for message, (total, assignment) in bad_parts.items():
            with pytest.raises(KafkaException) as info:
                admin.create_partitions([NewPartitions(topic, total, replica_assignment=assignment)])[topic].result(30)
            err = info.value.args[0]
            assert err.name() == "INVALID_REPLICA_ASSIGNMENT" and message in err.str(), err
        assert len(_assignment(zk, topic).partitions) == 4
    finally:
        zk.stop()
        zk.close()
