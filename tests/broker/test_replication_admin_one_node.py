"""OffsetForLeaderEpoch, ElectLeaders and List/AlterPartitionReassignments on one node (issue 27 item 5), as a
Kafka cluster of one broker answers them, through kafka-python's and confluent-kafka's AdminClients (raw requests
for OffsetForLeaderEpoch, which no Python client exposes)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import RawClient, confluent_produce, new_topic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition

pytestmark = pytest.mark.integration

API_VERSIONS, OFFSET_FOR_LEADER_EPOCH = 18, 23
TIMEOUT = 30


def _topic(b: Any, partitions: int = 2) -> str:
    name = new_topic("repl-admin")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    return name


def _code(err: Any) -> int:
    """confluent-kafka's per-partition result: a KafkaError (or a KafkaException wrapping one)."""
    return int((err.args[0] if isinstance(err, KafkaException) else err).code())


def test_offset_for_leader_epoch_advertised_and_answered(broker: Any) -> None:
    topic = _topic(broker, 1)
    confluent_produce(broker.bootstrap, topic, [{"value": b"v%d" % i} for i in range(5)], acks="all")
    with RawClient(broker.port) as c:
        keys = {k["api_key"]: k["max_version"] for k in c.request(API_VERSIONS, 0, {})["api_keys"]}
        assert keys[OFFSET_FOR_LEADER_EPOCH] == 4 and keys[43] == 2 and keys[45] == 1 and keys[46] == 0

        def ask(epoch: int, current: int = -1, partition: int = 0) -> dict:
            body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
            return c.request(OFFSET_FOR_LEADER_EPOCH, 4, body)["topics"][0]["partitions"][0]  # type: ignore[no-any-return]

        r = ask(0)
        assert (r["error_code"], r["leader_epoch"], r["end_offset"]) == (0, 0, 5)
        assert ask(0, current=0)["error_code"] == 0
        assert ask(0, current=1)["error_code"] == 75  # UNKNOWN_LEADER_EPOCH
        assert ask(0, partition=3)["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_elect_leaders_not_needed_on_one_broker(broker: Any) -> None:
    topic = _topic(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    got = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0), TopicPartition(topic, 1)]
                              ).result(TIMEOUT)
    for tp, err in got.items():
        assert _code(err) == KafkaError.ELECTION_NOT_NEEDED, (tp, err)
    got = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 9)]).result(TIMEOUT)
    [err] = got.values()
    assert _code(err) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # all partitions: those whose election is not needed are left out
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(TIMEOUT) == {}

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        r = kp.elect_leaders(0, {topic: [0]}, raise_errors=False)
        [res] = r.replica_election_results
        assert res.partition_result[0].error_code == 84  # ELECTION_NOT_NEEDED
    finally:
        kp.close()


def test_partition_reassignments_on_one_broker(broker: Any) -> None:
    topic = _topic(broker)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert kp.list_partition_reassignments() == {}
        assert kp.list_partition_reassignments({topic: [0, 1]}) == {}
        tp0, tp1, gone = KpTopicPartition(topic, 0), KpTopicPartition(topic, 1), KpTopicPartition("no-such", 0)
        res = kp.alter_partition_reassignments({tp0: [0], tp1: [0, 7], gone: [0]})
        assert res[tp0] is None  # the current assignment: accepted, nothing moves
        assert res[tp1].errno == 39  # INVALID_REPLICA_ASSIGNMENT
        assert res[gone].errno == 3  # UNKNOWN_TOPIC_OR_PARTITION
        res = kp.alter_partition_reassignments({tp0: None})  # cancel: none in progress
        assert res[tp0].errno == 85  # NO_REASSIGNMENT_IN_PROGRESS
        assert kp.list_partition_reassignments() == {}
    finally:
        kp.close()
