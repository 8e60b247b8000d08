"""Cluster admin operations in ZooKeeper mode against a real ZooKeeper and 3 real brokers: partition
reassignment (AlterPartitionReassignments / ListPartitionReassignments, ``/admin/reassign_partitions``,
``tidelog cluster reassign``), DeleteTopics across brokers (``/admin/delete_topics``) and manual replica
assignments in CreateTopics / CreatePartitions."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewPartitions, NewTopic
from support import (
    Load,
    all_up,
    create_topic,
    kazoo,
    log_bytes,
    read_all,
    replica_dirs,
    request,
    state,
    topic_assignment,
    until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLI = [sys.executable, "-m", "tidelog.cli.main", "cluster"]
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000,
            "retry.backoff.ms": 100, "request.timeout.ms": 5000, "socket.timeout.ms": 6000}


def _producer(cluster: Any) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, **PRODUCER})


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=check)


def _controller(cluster: Any) -> int:
    return cluster.wait_for("a controller", lambda md: md.controller_id if md.controller_id > 0 else None)


def _alter(cluster: Any, parts: dict[tuple[str, int], list[int] | None], broker: int | None = None,
           version: int = 0, **extra: Any) -> dict:
    topics: dict[str, list[dict]] = {}
    for (t, p), r in parts.items():
        topics.setdefault(t, []).append({"partition_index": p, "replicas": r})
    body = {"timeout_ms": 30000, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], **extra}
    return request(cluster.brokers[broker or _controller(cluster)], 45, version, body)


def _errors(resp: dict) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {(t["name"], p["partition_index"]): (p["error_code"], p["error_message"])
            for t in resp["responses"] for p in t["partitions"]}


# ---------------------------------------------------------------------------------------------------------------
# reassignment


def _stuck_reassignment(cluster: Any, prefix: str) -> str:
    """A new topic ``[[1, 2]]``, broker 3 down, and an ongoing reassignment to ``[3, 2]`` written in ZooKeeper as
    the controller writes it (AR=[3], RR=[1]): it cannot finish while broker 3 is down. Returns the topic."""
    from tidelog.cluster import zkdata as zd

    all_up(cluster)
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
    cluster.brokers[3].kill()
    cluster.wait_for("broker 3 unregistered", lambda md: 3 not in md.brokers)
    with kazoo(cluster.zk.connect) as zk:
        data, stat = zk.get(zd.topic_path(topic))
        a = zd.decode_topic(data)
        a.reassign_to(0, [3, 2])
        zk.set(zd.topic_path(topic), zd.encode_topic(a), version=stat.version)
    return topic


def test_reassign_to_a_new_broker_under_load(cluster: Any, tmp_path: Path) -> None:
    """[1,2] -> [3,2] while an acks=all producer runs: broker 3 catches up, leads, broker 1's replica is deleted;
    every acknowledged record is readable and the replicas hold the same bytes."""
    all_up(cluster)
    topic = f"mv-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
    assert replica_dirs(cluster.brokers[3].data_dir, topic) == []
    load = Load(cluster.bootstrap, topic, 1, PRODUCER, batch=1, pause=0.002, flush_timeout=120)
    load.wait_progress()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 2]}]}))
    out = _cli("reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert f"Successfully started partition reassignment for {topic}-0" in out.stdout
    assert f'"topic":"{topic}","partition":0,"replicas":[1,2]' in out.stdout  # the rollback JSON
    done = until("the reassignment to complete", lambda: (r := _cli(
        "reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--verify", check=False)
    ).returncode == 0 and r)  # --verify exits 1 while it is still in progress
    assert f"Reassignment of partition {topic}-0 is completed." in done.stdout
    load.wait_progress()  # the producer keeps going after the move
    with kazoo(cluster.zk.connect) as zk:
        a = topic_assignment(zk, topic)
        assert a.partitions[0] == [3, 2] and a.adding == {} and a.removing == {}
        s = state(zk, topic)
        assert s.leader == 3 and sorted(s.isr) == [2, 3]  # leadership moved into the target
    # the removed replica's directory is gone (renamed -delete, then removed)
    until("broker 1's replica deleted", lambda: replica_dirs(cluster.brokers[1].data_dir, topic) == [])
    load.stop()
    records = read_all(cluster.bootstrap, topic, 1, timeout=60)
    load.check(records, exact=False)  # 0 duplicates, 0 lost, every acked offset holds its value
    assert [o for o, _v in records[0]] == list(range(len(records[0])))  # offsets 0, 1, 2, ... without a gap
    # all the data is on the new replica, byte for byte as on the other one
    until("broker 3 holding the same bytes as broker 2",
          lambda: log_bytes(cluster.brokers[3].data_dir, topic) == log_bytes(cluster.brokers[2].data_dir, topic))
    assert len(log_bytes(cluster.brokers[3].data_dir, topic)) > 0
    out = _cli("reassign", "-b", cluster.bootstrap, "--list")
    assert topic not in out.stdout


def test_reassignment_list_and_cancel(cluster: Any, tmp_path: Path) -> None:
    """A reassignment that cannot finish (the adding broker is down) is listed, then cancelled: RS goes back to
    the origin, nothing is listed, and a second cancel answers NO_REASSIGNMENT_IN_PROGRESS."""
    topic = _stuck_reassignment(cluster, "cx")
    with kazoo(cluster.zk.connect) as zk:
        resp = request(cluster.brokers[1], 46, 0, {"timeout_ms": 30000, "topics": None})
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
        # the same two views for scripts (issue 25 item 7)
        listed = json.loads(_cli("reassign", "-b", cluster.bootstrap, "--list", "--output", "json").stdout)
        assert {"topic": topic, "partition": 0, "replicas": [3, 2, 1], "addingReplicas": [3],
                "removingReplicas": [1]} in listed
        verify = _cli("reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--verify",
                      "--output", "json", check=False)
        assert verify.returncode == 1 and json.loads(verify.stdout) == [
            {"topic": topic, "partition": 0, "status": "in progress", "replicas": [3, 2, 1], "targetReplicas": [3, 2]}]
        out = _cli("reassign", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--cancel")
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in out.stdout
        a = topic_assignment(zk, topic)
        # Kafka's originReplicas = RS minus AR, in RS's order ([3,2,1] -> [2,1])
        assert a.partitions[0] == [2, 1] and a.adding == {} and a.removing == {}
        assert "No partition reassignments found." in _cli("reassign", "-b", cluster.bootstrap, "--list").stdout
        resp = _alter(cluster, {(topic, 0): None})
        code, msg = _errors(resp)[(topic, 0)]
        assert code == 85 and "No reassignment in progress" in msg  # NO_REASSIGNMENT_IN_PROGRESS
    cluster.brokers[3].start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    errors: list[Any] = []
    prod = _producer(cluster)
    prod.produce(topic, b"after-cancel", partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []
    assert replica_dirs(cluster.brokers[3].data_dir, topic) == []


def test_reassignment_resumed_by_a_new_controller(cluster: Any) -> None:
    """A reassignment waiting for a down broker survives a controller kill: when the broker is back, the new
    controller completes it; a removed replica whose broker was down is deleted when that broker starts."""
    from tidelog.cluster import zkdata as zd

    topic = _stuck_reassignment(cluster, "rf")
    with kazoo(cluster.zk.connect) as zk:
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        cluster.brokers[controller].kill()
        cluster.wait_for("a new controller", lambda md: md.controller_id not in (-1, controller))
        cluster.brokers[3].start()
        if controller == 2:  # a target replica: the reassignment needs it back in the ISR
            cluster.brokers[2].start()

        def done() -> bool:
            a = topic_assignment(zk, topic)
            return a.partitions[0] == [3, 2] and not a.reassigning(0)

        until("the reassignment completed by the new controller", done)
        s = state(zk, topic)
        # broker 1 led: killed, 2 took over and, being in the target, keeps it; else 1 leaves for the first
        # in-sync target replica, 3
        assert s.leader == (2 if controller == 1 else 3) and sorted(s.isr) == [2, 3]
    all_up(cluster)  # broker 1, when it was the controller, was down all along: its replica is a stray
    until("broker 1 without a replica of the topic", lambda: replica_dirs(cluster.brokers[1].data_dir, topic) == [])
    assert replica_dirs(cluster.brokers[3].data_dir, topic) == [f"{topic}-0"]


def test_reassignment_through_the_zookeeper_znode(cluster: Any) -> None:
    """Kafka's /admin/reassign_partitions: the controller runs it, drops finished partitions from it and deletes
    the znode; a replication factor change (2 -> 3) works too."""
    from tidelog.cluster import zkdata as zd

    all_up(cluster)
    topic = f"zr-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2], [2, 3]])
    with kazoo(cluster.zk.connect) as zk:
        zk.create(zd.REASSIGN_PARTITIONS, zd.encode_reassignment({(topic, 0): [2, 3, 1], (topic, 1): [1, 3]}),
                  makepath=True)
        until("the znode deleted by the controller", lambda: zk.exists(zd.REASSIGN_PARTITIONS) is None)
        a = topic_assignment(zk, topic)
        assert a.partitions == {0: [2, 3, 1], 1: [1, 3]} and a.adding == {} and a.removing == {}
        assert sorted(state(zk, topic, 0).isr) == [1, 2, 3]
        s1 = state(zk, topic, 1)
        assert sorted(s1.isr) == [1, 3] and s1.leader in (1, 3)
    until("broker 2's replica of partition 1 deleted", lambda: f"{topic}-1" not in replica_dirs(cluster.brokers[2].data_dir, topic))
    assert f"{topic}-0" in replica_dirs(cluster.brokers[3].data_dir, topic)


def test_alter_partition_reassignments_errors(cluster: Any) -> None:
    all_up(cluster)
    topic = f"ae-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2]])
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
    with kazoo(cluster.zk.connect) as zk:
        assert topic_assignment(zk, topic).partitions == {0: [1, 2]}  # nothing of the refused requests was written
    versions = request(cluster.brokers[other], 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
    assert keys[45] == (0, 1) and keys[46] == (0, 0)


# ---------------------------------------------------------------------------------------------------------------
# DeleteTopics


def test_delete_topic_across_brokers_and_recreate(cluster: Any) -> None:
    from tidelog.cluster import zkdata as zd

    all_up(cluster)
    topic = f"del-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3], [2, 3, 1]])
    errors: list[Any] = []
    prod = _producer(cluster)
    for i in range(100):
        prod.produce(topic, f"old{i}".encode(), partition=i % 2,
                     on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []
    with kazoo(cluster.zk.connect) as zk:
        old_id = topic_assignment(zk, topic).topic_id
        admin = cluster.admin()
        # operation_timeout: the broker answers once the deletion is done (librdkafka's default 0 returns at once)
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
        for path in (zd.topic_path(topic), zd.topic_config_path(topic), zd.delete_topic_path(topic)):
            assert zk.exists(path) is None, path
        for b in cluster.brokers.values():
            until(f"broker {b} without replicas of {topic}", lambda b=b: replica_dirs(b.data_dir, topic) == [])
            from confluent_kafka.admin import AdminClient

            md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
            assert topic not in md.topics
        with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
            admin.delete_topics([topic])[topic].result(30)
        # the same name again: a new topic with a new id, none of the old records
        create_topic(cluster.bootstrap, topic, assignment=[[3, 1, 2]])
        assert topic_assignment(zk, topic).topic_id not in (None, old_id)
    prod.produce(topic, b"new", partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert prod.flush(60) == 0 and errors == []
    assert [v for _o, v in read_all(cluster.bootstrap, topic, 1, timeout=60)[0]] == [b"new"]


def test_delete_topic_while_a_replica_is_down(cluster: Any) -> None:
    """A broker down during the deletion deletes its replica when it starts again and does not list the topic."""
    from confluent_kafka.admin import AdminClient

    all_up(cluster)
    topic = f"deld-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3]])
    cluster.brokers[3].kill()
    cluster.wait_for("broker 3 unregistered", lambda md: 3 not in md.brokers)
    assert replica_dirs(cluster.brokers[3].data_dir, topic) == [f"{topic}-0"]
    admin = cluster.admin()
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    cluster.brokers[3].start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    until("broker 3's stray replica deleted", lambda: replica_dirs(cluster.brokers[3].data_dir, topic) == [])
    assert topic not in AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap}).list_topics(timeout=10).topics


def test_delete_topics_timeout_ms_zero_answers_at_once_and_the_deletion_goes_on(cluster: Any) -> None:
    """Kafka's DeleteTopics with ``timeout_ms`` <= 0 queues the deletion and answers REQUEST_TIMED_OUT at once
    (``ZkAdminManager.deleteTopics``); librdkafka, whose default ``operation_timeout`` is 0, shows that as
    success. The topic is deleted all the same."""
    from confluent_kafka.admin import AdminClient

    all_up(cluster)
    names = [f"delz-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        create_topic(cluster.bootstrap, name, assignment=[[1, 2, 3]])
    b = cluster.brokers[1]
    r = request(b, 20, 6, {"topics": [{"name": names[0], "topic_id": uuid.UUID(int=0)}], "timeout_ms": 0}, timeout=20)
    assert r["responses"][0]["error_code"] == 7, r  # REQUEST_TIMED_OUT: queued, not waited for
    admin = cluster.admin()
    admin.delete_topics([names[1]])[names[1]].result(20)  # operation_timeout 0: librdkafka hides REQUEST_TIMED_OUT
    for name in names:
        until(f"{name} gone from every broker", lambda name=name: all(
            name not in AdminClient({"bootstrap.servers": x.bootstrap}).list_topics(timeout=10).topics
            for x in cluster.brokers.values()))
    with kazoo(cluster.zk.connect) as zk:
        until("the deletion znodes gone", lambda: all(zk.exists(f"/admin/delete_topics/{n}") is None for n in names))


# ---------------------------------------------------------------------------------------------------------------
# manual assignments


def test_manual_assignments_create_topics_and_partitions(cluster: Any) -> None:
    all_up(cluster)
    topic = f"man-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2], [2, 3], [3, 1]])
    with kazoo(cluster.zk.connect) as zk:
        assert topic_assignment(zk, topic).partitions == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
        assert [state(zk, topic, p).leader for p in range(3)] == [1, 2, 3]  # the first replica leads
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
        until("partition 3 assigned as asked", lambda: topic_assignment(zk, topic).partitions.get(3) == [3, 2])
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
        assert len(topic_assignment(zk, topic).partitions) == 4



def test_describe_cluster_lists_every_registered_broker(cluster: Any) -> None:
    """DescribeCluster (API 60, what Java's ``Admin.describeCluster`` sends; librdkafka asks Metadata instead)
    answers with the same brokers and controller as Metadata: every registered broker, whichever one is asked."""
    controller = _controller(cluster)
    ports = {i: b.port for i, b in cluster.brokers.items()}
    for b in cluster.brokers.values():
        resp = request(b, 60, 0, {"include_cluster_authorized_operations": False})
        assert resp["error_code"] == 0
        assert {x["broker_id"]: x["port"] for x in resp["brokers"]} == ports
        assert resp["controller_id"] == controller
