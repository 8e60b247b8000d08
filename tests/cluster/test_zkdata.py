"""ZooKeeper values as Kafka's ZK mode writes them, the replica assignment, and the controller's decisions
(pure functions: no ZooKeeper needed)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from tidelog.cluster import zkdata as zd
from tidelog.cluster.controller import Controller
from tidelog.errors import ErrorCode


def test_broker_registration_json() -> None:
    v = json.loads(zd.encode_broker(zd.BrokerInfo(2, "127.0.0.1", 9093)))
    assert v["version"] == 5 and v["host"] == "127.0.0.1" and v["port"] == 9093 and v["jmx_port"] == -1
    assert v["endpoints"] == ["PLAINTEXT://127.0.0.1:9093"]
    assert v["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"} and v["features"] == {}
    assert v["timestamp"].isdigit() and "rack" not in v
    assert zd.decode_broker(2, zd.encode_broker(zd.BrokerInfo(2, "h", 1, "r1"))) == zd.BrokerInfo(2, "h", 1, "r1")


def test_controller_topic_and_state_json() -> None:
    c = json.loads(zd.encode_controller(3))
    assert c["version"] == 1 and c["brokerid"] == 3 and c["timestamp"].isdigit()
    assert zd.decode_controller(zd.encode_controller(3)) == 3 and zd.decode_controller(None) == -1
    tid = bytes(range(16))
    raw = zd.encode_topic(zd.TopicAssignment({1: [2, 3], 0: [1, 2]}, tid))
    assert json.loads(raw) == {"version": 3, "partitions": {"0": [1, 2], "1": [2, 3]}, "adding_replicas": {},
                               "removing_replicas": {}, "topic_id": "AAECAwQFBgcICQoLDA0ODw"}
    assert zd.decode_topic(raw).topic_id == tid
    s = zd.LeaderIsr(1, 4, (1, 3), 7)
    assert json.loads(zd.encode_state(s)) == {"controller_epoch": 7, "leader": 1, "version": 1,
                                              "leader_epoch": 4, "isr": [1, 3]}
    assert zd.decode_state(zd.encode_state(s), 9) == s.with_zk_version(9)
    assert json.loads(zd.encode_topic_config({"min.insync.replicas": "2"})) == {
        "version": 1, "config": {"min.insync.replicas": "2"}}
    assert zd.state_path("t", 0) == "/brokers/topics/t/partitions/0/state"


def test_config_change_notification_json() -> None:
    assert zd.config_change_path() == "/config/changes/config_change_"
    assert zd.config_change_path("config_change_0000000007") == "/config/changes/config_change_0000000007"
    raw = zd.encode_config_change(zd.topic_entity_path("orders.v1"))
    assert raw == b'{"version":2,"entity_path":"topics/orders.v1"}'
    assert zd.decode_config_change(raw) == "orders.v1"
    assert zd.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"t"}') == "t"
    for other in (b'{"version":2,"entity_path":"clients/c1"}', b'{"version":2,"entity_path":"topics/"}', b"{",
                  b"[]"):
        assert zd.decode_config_change(other) is None, other
    assert zd.config_change_sequence("config_change_0000000012") == 12
    assert zd.config_change_sequence("config_change_") is None and zd.config_change_sequence("isr_change_1") is None
    assert zd.CONFIG_CHANGES in zd.PERSISTENT_PATHS


def test_assignment_spreads_leaders_and_replicas() -> None:
    a = zd.assign_replicas([1, 2, 3], 6, 3, rng=random.Random(5))
    assert all(len(set(r)) == 3 for r in a.values())
    assert Counter(r[0] for r in a.values()) == {1: 2, 2: 2, 3: 2}  # leaders evenly spread
    # Kafka's example: 5 brokers, start index 0, shift 0
    a = zd.assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, next_shift=0)
    assert a[0] == [0, 1, 2] and a[4] == [4, 0, 1] and a[5] == [0, 2, 3] and a[9] == [4, 1, 2]
    with pytest.raises(ValueError):
        zd.assign_replicas([1, 2], 1, 3)


def _decide(state: zd.LeaderIsr, replicas: list[int], live: set[int], unclean: bool = False) -> zd.LeaderIsr | None:
    c = Controller.__new__(Controller)
    c.epoch, c.unclean_election, c.shutting_down = 5, unclean, set()
    return c._decide(state, replicas, live)


def test_controlled_shutdown_and_preferred_decisions() -> None:
    c = Controller.__new__(Controller)
    c.epoch, c.unclean_election, c.shutting_down = 5, False, {1}
    live = {1, 2, 3}
    # the leader shutting down: the next live ISR member in assignment order leads, it leaves the ISR
    s = zd.LeaderIsr(1, 3, (1, 2, 3), 4)
    assert c.decide_controlled_shutdown(s, [1, 3, 2], live, {1}) == zd.LeaderIsr(3, 4, (2, 3), 5)
    # a follower shutting down: it leaves the ISR, the leader stays (epoch bump fences its fetches)
    assert c.decide_controlled_shutdown(zd.LeaderIsr(2, 3, (1, 2), 4), [2, 1, 3], live, {1}) == \
        zd.LeaderIsr(2, 4, (2,), 5)
    # no other in-sync replica: nothing moves; not involved: nothing changes
    assert c.decide_controlled_shutdown(zd.LeaderIsr(1, 3, (1,), 4), [1, 2, 3], live, {1}) is None
    assert c.decide_controlled_shutdown(zd.LeaderIsr(2, 3, (2, 3), 4), [2, 3, 1], live, {1}) is None
    # a broker shutting down is never elected after a failure
    assert c._decide(zd.LeaderIsr(2, 3, (1, 2, 3), 4), [2, 1, 3], {1, 3}) == zd.LeaderIsr(3, 4, (1, 3), 5)
    # preferred: the first assigned replica, only when alive, in the ISR and not shutting down
    assert c.decide_preferred(zd.LeaderIsr(3, 3, (1, 2, 3), 4), [2, 3, 1], live, set()) == \
        zd.LeaderIsr(2, 4, (1, 2, 3), 5)
    assert c.decide_preferred(zd.LeaderIsr(2, 3, (1, 2, 3), 4), [2, 3, 1], live, set()) is None
    assert c.decide_preferred(zd.LeaderIsr(3, 3, (1, 3), 4), [2, 3, 1], live, set()) is None
    assert c.decide_preferred(zd.LeaderIsr(3, 3, (1, 2, 3), 4), [2, 3, 1], {1, 3}, set()) is None
    assert c.decide_preferred(zd.LeaderIsr(3, 3, (1, 2, 3), 4), [2, 3, 1], live, {2}) is None
    assert zd.decode_preferred_election(zd.encode_preferred_election([("t", 0), ("u", 2)])) == [("t", 0), ("u", 2)]
    assert json.loads(zd.encode_preferred_election([("t", 0)])) == \
        {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}


def test_controller_decisions() -> None:
    s = zd.LeaderIsr(1, 3, (1, 2, 3), 4, 10)
    assert _decide(s, [1, 2, 3], {1, 2, 3}) is None
    # leader died: first live ISR replica in assignment order, epoch + 1, ISR without the dead
    assert _decide(s, [1, 2, 3], {2, 3}) == zd.LeaderIsr(2, 4, (2, 3), 5)
    # follower died: it leaves the ISR
    assert _decide(s, [1, 2, 3], {1, 2}) == zd.LeaderIsr(1, 4, (1, 2), 5)
    # no live ISR member: leaderless (unclean disabled), the last leader stays the ISR
    s2 = zd.LeaderIsr(1, 3, (1,), 4, 10)
    assert _decide(s2, [1, 2, 3], {2, 3}) == zd.LeaderIsr(-1, 4, (1,), 5)
    assert _decide(s2, [1, 2, 3], {2, 3}, unclean=True) == zd.LeaderIsr(2, 4, (2,), 5)
    # the sole ISR member returns: elected again
    assert _decide(zd.LeaderIsr(-1, 4, (1,), 5), [1, 2, 3], {1, 2, 3}) == zd.LeaderIsr(1, 5, (1,), 5)
    # a returning replica outside the ISR is not elected
    assert _decide(zd.LeaderIsr(-1, 4, (1,), 5), [1, 2, 3], {2, 3}) is None


def test_reassignment_assignment_arithmetic() -> None:
    """KIP-455's RS/AR/RR in the topic znode (Kafka's ``ReplicaAssignment.reassignTo``)."""
    a = zd.TopicAssignment({0: [1, 2], 1: [2, 3]}, bytes(range(16)))
    a.reassign_to(0, [3, 2])
    assert a.partitions[0] == [3, 2, 1] and a.adding == {0: [3]} and a.removing == {0: [1]}
    assert a.origin(0) == [2, 1] and a.target(0) == [3, 2] and a.reassigning(0) and not a.reassigning(1)
    raw = json.loads(zd.encode_topic(a))
    assert raw["partitions"]["0"] == [3, 2, 1] and raw["adding_replicas"] == {"0": [3]}
    assert raw["removing_replicas"] == {"0": [1]} and zd.decode_topic(zd.encode_topic(a)) == a
    # a new target replaces the ongoing one, computed from the origin (3 is dropped again)
    b = zd.decode_topic(zd.encode_topic(a))
    b.reassign_to(0, [1, 4])
    assert b.partitions[0] == [1, 4, 2] and b.adding == {0: [4]} and b.removing == {0: [2]}
    # cancelling = reassigning to the origin: no reassignment is left
    a.reassign_to(0, a.origin(0))
    assert a.partitions[0] == [2, 1] and a.adding == {} and a.removing == {} and not a.reassigning(0)
    # completion: RS = target
    c = zd.TopicAssignment({0: [1, 2, 3]})
    c.reassign_to(0, [4, 5, 6])
    assert c.partitions[0] == [4, 5, 6, 1, 2, 3] and c.removing == {0: [1, 2, 3]}
    c.complete(0)
    assert c == zd.TopicAssignment({0: [4, 5, 6]})
    # /admin/reassign_partitions (ReassignPartitionsZNode)
    value = {("t", 1): [3, 1], ("t", 0): [1, 2]}
    assert json.loads(zd.encode_reassignment(value)) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2]}, {"topic": "t", "partition": 1, "replicas": [3, 1]}]}
    assert zd.decode_reassignment(zd.encode_reassignment(value)) == value
    with pytest.raises(ValueError):
        zd.decode_reassignment(b'{"version":1,"partitions":[{"topic":"t"}]}')
    with pytest.raises(ValueError):
        zd.decode_reassignment(b"not json")


def test_reassignment_decisions() -> None:
    c = Controller.__new__(Controller)
    c.epoch, c.unclean_election, c.shutting_down = 5, False, set()
    live = {1, 2, 3}
    # not all target replicas in sync yet: wait
    assert c.decide_reassignment_done(zd.LeaderIsr(1, 2, (1, 2), 4), [3, 2], live, set()) is None
    # all in sync, leader outside the target: the first live in-sync target replica leads, ISR = target
    assert c.decide_reassignment_done(zd.LeaderIsr(1, 2, (1, 2, 3), 4), [3, 2], live, set()) == \
        zd.LeaderIsr(3, 3, (2, 3), 5)
    assert c.decide_reassignment_done(zd.LeaderIsr(1, 2, (1, 2, 3), 4), [3, 2], live, {3}) == \
        zd.LeaderIsr(2, 3, (2, 3), 5)
    # leader in the target: it stays, the removed replica leaves the ISR; nothing to do when already so
    assert c.decide_reassignment_done(zd.LeaderIsr(2, 2, (1, 2, 3), 4), [3, 2], live, set()) == \
        zd.LeaderIsr(2, 3, (2, 3), 5)
    assert c.decide_reassignment_done(zd.LeaderIsr(2, 3, (2, 3), 5), [3, 2], live, set()) is None
    # replicas no longer assigned (a cancelled reassignment) leave the ISR and the leadership
    assert c.decide_unneeded(zd.LeaderIsr(1, 2, (1, 2, 3), 4), [1, 2], [1, 2], live, set()) == \
        zd.LeaderIsr(1, 3, (1, 2), 5)
    assert c.decide_unneeded(zd.LeaderIsr(3, 2, (1, 2, 3), 4), [1, 2], [1, 2], live, set()) == \
        zd.LeaderIsr(1, 3, (1, 2), 5)
    assert c.decide_unneeded(zd.LeaderIsr(3, 2, (1, 2), 4), [3, 2, 1], [3, 2], live, set()) is None
    # Kafka's validateReplicas
    a = zd.TopicAssignment({0: [1, 2]})
    assert c.validate_replicas(a, 0, [], live)[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "Duplicate replica ids" in c.validate_replicas(a, 0, [2, 2], live)[1]
    assert "Invalid broker id" in c.validate_replicas(a, 0, [2, -1], live)[1]
    assert "not alive" in c.validate_replicas(a, 0, [2, 4], live)[1]
    assert c.validate_replicas(a, 0, [3, 2], live) is None


def test_log_dir_event_and_offline_replicas_json() -> None:
    # Kafka's LogDirEventNotificationSequenceZNode: {"version":1,"broker":<id>,"event":1}
    assert json.loads(zd.encode_log_dir_event(3)) == {"version": 1, "broker": 3, "event": 1}
    assert zd.decode_log_dir_event(zd.encode_log_dir_event(3)) == 3
    assert zd.decode_log_dir_event(b"not json") == -1 and zd.decode_log_dir_event(None) == -1
    assert zd.LOG_DIR_EVENT_NOTIFICATION == "/log_dir_event_notification"
    assert zd.LOG_DIR_EVENT_PREFIX == "log_dir_event_"
    tps = [("b", 1), ("a", 0)]
    assert json.loads(zd.encode_offline_replicas(tps)) == {
        "version": 1, "partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 1}]}
    assert zd.decode_offline_replicas(zd.encode_offline_replicas(tps)) == set(tps)
    assert zd.decode_offline_replicas(b"{") == set()
