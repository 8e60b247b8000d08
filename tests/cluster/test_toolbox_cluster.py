"""``tidelog reassign-partitions`` and ``tidelog leader-election`` through the bootstrap server against a real
ZooKeeper and 3 real brokers: a plan generated, executed and verified (the replicas really move), the preferred
replica really elected afterwards (ElectLeaders), and an unclean election of a leaderless partition. Every wait
is on cluster state (metadata or ZooKeeper), never a fixed time."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import create_topic, kazoo, state, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _tl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=120, check=check)


def _leader(cluster: Any, topic: str) -> int:
    return cluster.partition(cluster.admin().list_topics(topic, timeout=10), topic).leader


def _filtered(cluster: Any, topic: str, option: str) -> list[list[str]]:
    """``tidelog topics describe TOPIC OPTION``: its partition lines (topic, partition, leader, replicas, isr), as
    kafka-topics.sh prints them with a filter (no topic line, ``\tTopic: t\tPartition: p\tLeader: ...``)."""
    lines = _tl("topics", "describe", topic, option, "-b", cluster.bootstrap).stdout.splitlines()
    assert all(line.startswith("\tTopic: ") for line in lines), lines
    fields = [dict(f.split(": ", 1) for f in line.strip("\t").split("\t")) for line in lines]
    return [[f["Topic"], f["Partition"], f["Leader"], f["Replicas"], f["Isr"]] for f in fields]


def test_generate_execute_verify_then_preferred_election(cluster: Any, tmp_path: Path) -> None:
    topic = f"move-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, assignment=[[1, 2, 3], [1, 2, 3]])
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    gen = _tl("reassign-partitions", "-b", cluster.bootstrap, "--generate", "--topics-to-move-json-file", str(move),
              "--broker-list", "3,1,2")
    lines = gen.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"][0] == {"topic": topic, "partition": 0, "replicas": [1, 2, 3],
                                                     "log_dirs": ["any", "any", "any"]}
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])["partitions"]
    assert [(p["partition"], sorted(p["replicas"])) for p in proposed] == [(0, [1, 2, 3]), (1, [1, 2, 3])]
    assert proposed[0]["replicas"][0] != proposed[1]["replicas"][0]  # leaders spread round-robin
    too_few = _tl("reassign-partitions", "-b", cluster.bootstrap, "--generate", "--topics-to-move-json-file",
                  str(move), "--broker-list", "1,2", check=False)
    assert (too_few.returncode, too_few.stderr) == (1, "Error: Replication factor: 3 larger than available brokers: 2.\n")

    # the leader (1) stays in the new replica set, so it keeps leading; the preferred replica becomes 2
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 1, 3]}]}))
    out = _tl("reassign-partitions", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert f"Successfully started partition reassignment for {topic}-0" in out.stdout
    until("the reassignment verified", lambda: _tl("reassign-partitions", "-b", cluster.bootstrap,
                                                  "--reassignment-json-file", str(plan), "--verify",
                                                  check=False).returncode == 0)
    done = _tl("reassign-partitions", "-b", cluster.bootstrap, "--reassignment-json-file", str(plan), "--verify")
    assert done.stdout.splitlines() == ["Status of partition reassignment:",
                                        f"Reassignment of partition {topic}-0 is completed."]
    md = cluster.admin().list_topics(topic, timeout=10)
    assert list(cluster.partition(md, topic).replicas) == [2, 1, 3]
    assert _leader(cluster, topic) == 1

    elect = _tl("leader-election", "-b", cluster.bootstrap, "--election-type", "preferred", "--topic", topic,
                "--partition", "0")
    assert elect.stdout.strip() == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0"
    with kazoo(cluster.zk.connect) as zk:
        assert state(zk, topic, 0).leader == 2  # the controller wrote it
    cluster.wait_for("broker 2 leading", lambda md: cluster.partition(md, topic).leader == 2)

    # again, and for every partition: nothing to do for partition 0 nor 1 (already led by its first replica)
    elections = tmp_path / "elect.json"
    elections.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0},
                                                    {"topic": topic, "partition": 1}]}))
    again = _tl("leader-election", "-b", cluster.bootstrap, "--election-type", "PREFERRED", "--path-to-json-file",
                str(elections), check=False)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert again.stdout.strip() == f"Valid replica already elected for partitions {topic}-0, {topic}-1"
    missing = _tl("leader-election", "-b", cluster.bootstrap, "--election-type", "preferred", "--topic", topic,
                  "--partition", "7", check=False)
    assert missing.returncode == 1
    assert f"Error completing leader election (PREFERRED) for partition: {topic}-7: UNKNOWN_TOPIC_OR_PART" \
        in missing.stdout
    assert missing.stderr.strip() == "Error: 1 replica(s) could not be elected"


def test_unclean_election_of_a_leaderless_partition(cluster: Any) -> None:
    topic = f"unclean-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, assignment=[[2, 3]])
    healthy = _tl("leader-election", "-b", cluster.bootstrap, "--election-type", "unclean", "--topic", topic,
                  "--partition", "0")
    assert healthy.stdout.strip() == f"Valid replica already elected for partitions {topic}-0"
    b2, b3 = cluster.brokers[2], cluster.brokers[3]
    try:
        with kazoo(cluster.zk.connect) as zk:
            b3.kill()  # the follower leaves the ISR once its session is gone
            until("ISR [2]", lambda: state(zk, topic, 0).isr == (2,))
            cluster.wait_for("ISR [2] in metadata", lambda md: list(cluster.partition(md, topic).isrs) == [2])
            assert _filtered(cluster, topic, "--under-replicated-partitions") == [[topic, "0", "2", "2,3", "2"]]
            b2.kill()  # the last ISR member: no leader
            until("no leader", lambda: state(zk, topic, 0).leader == -1)
            cluster.wait_for("no leader in metadata", lambda md: cluster.partition(md, topic).leader == -1)
            assert _filtered(cluster, topic, "--unavailable-partitions") == [[topic, "0", "none", "2,3", "2"]]
            b3.start()
            cluster.wait_for("broker 3 registered", lambda md: 3 in md.brokers)
            assert state(zk, topic, 0).leader == -1  # out of sync, unclean election off: still leaderless
            out = _tl("leader-election", "-b", cluster.bootstrap, "--election-type", "unclean", "--topic", topic,
                      "--partition", "0")
            assert out.stdout.strip() == f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0"
            s = state(zk, topic, 0)
            assert (s.leader, s.isr) == (3, (3,))
    finally:
        for b in (b2, b3):
            if not b.running:
                b.start()
        cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
