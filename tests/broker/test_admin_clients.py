"""Admin APIs through real clients (confluent-kafka AdminClient, kafka-python KafkaAdminClient) against a real
``tidelog serve``: topics, partitions, configs applied live and persisted, DeleteRecords, DescribeCluster."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.integration
TIMEOUT = 30


def _admin(broker: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)])
    fut[name].result(TIMEOUT)


def _error_name(exc: BaseException) -> str:
    return exc.args[0].name()


def _topic_configs(admin: AdminClient, name: str) -> dict[str, Any]:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([res])[res].result(TIMEOUT)


def test_create_list_describe_delete_topics(broker: Any) -> None:
    admin = _admin(broker)
    futs = admin.create_topics(
        [
            NewTopic("adm-a", num_partitions=3, replication_factor=1),
            NewTopic("adm-b", num_partitions=1, replication_factor=1, config={"retention.ms": "3600000"}),
            NewTopic("adm-bad", num_partitions=1, replication_factor=3),
            NewTopic("bad/name", num_partitions=1, replication_factor=1),
        ]
    )
    futs["adm-a"].result(TIMEOUT)
    futs["adm-b"].result(TIMEOUT)
    with pytest.raises(KafkaException) as ei:
        futs["adm-bad"].result(TIMEOUT)
    assert _error_name(ei.value) == "INVALID_REPLICATION_FACTOR"
    with pytest.raises(KafkaException) as ei:
        futs["bad/name"].result(TIMEOUT)
    assert _error_name(ei.value) == "TOPIC_EXCEPTION"  # librdkafka's name for INVALID_TOPIC_EXCEPTION (17)
    assert ei.value.args[0].code() == 17

    again = admin.create_topics([NewTopic("adm-a", num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException) as ei:
        again["adm-a"].result(TIMEOUT)
    assert _error_name(ei.value) == "TOPIC_ALREADY_EXISTS"

    # validate_only creates nothing
    admin.create_topics([NewTopic("adm-v", 1, 1)], validate_only=True)["adm-v"].result(TIMEOUT)

    md = admin.list_topics(timeout=TIMEOUT)
    assert {"adm-a", "adm-b"} <= set(md.topics)
    assert "adm-v" not in md.topics
    assert len(md.topics["adm-a"].partitions) == 3
    assert md.topics["adm-a"].partitions[0].leader == 0

    # describe_topics goes through Metadata (or DescribeTopicPartitions where the broker has it)
    admin.delete_topics(["adm-a", "adm-b"], operation_timeout=TIMEOUT)["adm-a"].result(TIMEOUT)
    md = admin.list_topics(timeout=TIMEOUT)
    assert "adm-a" not in md.topics and "adm-b" not in md.topics
    with pytest.raises(KafkaException) as ei:
        admin.delete_topics(["adm-a"])["adm-a"].result(TIMEOUT)
    assert _error_name(ei.value) == "UNKNOWN_TOPIC_OR_PART"


def test_create_partitions(broker: Any) -> None:
    admin = _admin(broker)
    _create(admin, "adm-parts", 1)
    admin.create_partitions([NewPartitions("adm-parts", 4)])["adm-parts"].result(TIMEOUT)
    assert len(admin.list_topics("adm-parts", timeout=TIMEOUT).topics["adm-parts"].partitions) == 4
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions("adm-parts", 2)])["adm-parts"].result(TIMEOUT)
    assert _error_name(ei.value) == "INVALID_PARTITIONS"
    # the new partitions take writes
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("adm-parts", b"x", partition=3)
    assert p.flush(TIMEOUT) == 0


def test_describe_alter_configs_live_and_persisted(broker_factory: Any) -> None:
    b = broker_factory()
    admin = _admin(b)
    _create(admin, "adm-cfg", 1, **{"retention.ms": "7200000"})
    cfg = _topic_configs(admin, "adm-cfg")
    assert cfg["retention.ms"].value == "7200000"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # incremental: set max.message.bytes small, then a produce of a bigger record is refused
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        "adm-cfg",
        incremental_configs=[ConfigEntry("max.message.bytes", "1024", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert _topic_configs(admin, "adm-cfg")["max.message.bytes"].value == "1024"

    def produce(value: bytes) -> KafkaError | None:
        p = Producer({"bootstrap.servers": b.bootstrap, "message.max.bytes": 1_000_000, "retries": 0})
        errs: list[Any] = []
        p.produce("adm-cfg", value, partition=0, on_delivery=lambda e, m: errs.append(e))
        assert p.flush(TIMEOUT) == 0
        return errs[0]

    assert produce(b"small") is None
    big = produce(b"x" * 5000)
    assert big is not None and big.code() == KafkaError.MSG_SIZE_TOO_LARGE

    # the override survives a restart (and is still enforced)
    b.restart()
    admin = _admin(b)
    assert _topic_configs(admin, "adm-cfg")["max.message.bytes"].value == "1024"
    big = produce(b"x" * 5000)
    assert big is not None and big.code() == KafkaError.MSG_SIZE_TOO_LARGE

    # incremental DELETE restores the default
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        "adm-cfg",
        incremental_configs=[ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert produce(b"x" * 5000) is None

    # legacy AlterConfigs replaces the whole set of overrides
    res = ConfigResource(ConfigResource.Type.TOPIC, "adm-cfg", set_config={"segment.ms": "600000"})
    admin.alter_configs([res])[res].result(TIMEOUT)
    cfg = _topic_configs(admin, "adm-cfg")
    assert cfg["segment.ms"].value == "600000"
    assert cfg["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # invalid values are refused with INVALID_CONFIG
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        "adm-cfg",
        incremental_configs=[ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert _error_name(ei.value) == "INVALID_CONFIG"

    # broker configs: readable; num.partitions is not dynamic (tests/broker/test_dynamic_broker_configs.py)
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")
    bcfg = admin.describe_configs([bres])[bres].result(TIMEOUT)
    assert bcfg["num.partitions"].value == "1"
    assert bcfg["num.partitions"].is_read_only
    bres = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"num.partitions": "3"})
    with pytest.raises(KafkaException) as ei:
        admin.alter_configs([bres])[bres].result(TIMEOUT)
    assert _error_name(ei.value) == "INVALID_REQUEST"


def test_delete_records_then_consume_from_zero(broker: Any) -> None:
    admin = _admin(broker)
    topic = "adm-delrec"
    _create(admin, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(topic, str(i).encode(), partition=0)
        p.flush(TIMEOUT)  # one batch per record, so offsets inside batches stay simple
    res = admin.delete_records([TopicPartition(topic, 0, 6)])
    [(_tp, fut)] = res.items()
    low = fut.result(TIMEOUT)
    assert low.low_watermark == 6

    with pytest.raises(KafkaException) as ei:
        [(_tp, fut)] = admin.delete_records([TopicPartition(topic, 0, 99)]).items()
        fut.result(TIMEOUT)
    assert _error_name(ei.value) == "OFFSET_OUT_OF_RANGE"

    # fetching offset 0 is now out of range: with auto.offset.reset=error the consumer reports it ...
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "delrec-1",
            "auto.offset.reset": "error",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    msg = c.poll(TIMEOUT)
    assert msg is not None and msg.error() is not None
    assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET
    c.close()
    # ... and with earliest it resets to the new log start offset
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "delrec-2",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    msg = c.poll(TIMEOUT)
    assert msg is not None and msg.error() is None
    assert (msg.offset(), msg.value()) == (6, b"6")
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
    assert (lo, hi) == (6, 10)
    c.close()

    # the new log start offset survives a clean restart (log-start-offset-checkpoint)
    broker.restart()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "delrec-3", "enable.auto.commit": False})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT) == (6, 10)
    c.close()


def test_describe_cluster(broker: Any) -> None:
    admin = _admin(broker)
    desc = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert desc.cluster_id
    assert desc.controller.id == 0
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(0, "127.0.0.1", broker.port)]
    assert desc.authorized_operations  # no authorizer: everything the cluster resource supports
    assert admin.list_topics(timeout=TIMEOUT).cluster_id == desc.cluster_id


def test_kafka_python_admin(broker: Any) -> None:
    from kafka.admin import ConfigResource as KPConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KPNewPartitions
    from kafka.admin import NewTopic as KPNewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        admin.create_topics([KPNewTopic("kp-topic", 2, 1, topic_configs={"retention.ms": "86400000"})])
        assert "kp-topic" in admin.list_topics()
        admin.create_partitions({"kp-topic": KPNewPartitions(total_count=3)})
        described = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, "kp-topic")])
        text = repr(described)
        assert "retention.ms" in text and "86400000" in text
        admin.delete_topics(["kp-topic"])
        assert "kp-topic" not in admin.list_topics()
    finally:
        admin.close()


def test_secrets_given_to_serve_are_neither_logged_nor_described(broker_factory: Any) -> None:
    """Kafka's PASSWORD configs (and unknown keys that look like secrets): DescribeConfigs answers them with a
    null value and isSensitive, including their synonyms, and the startup warnings do not print them."""
    secrets = {
        "ssl.keystore.password": "s3cret-keystore",
        "listener.name.internal.plain.sasl.jaas.config": "PlainLoginModule required password=s3cret-jaas;",
        "my.plugin.api.secret": "s3cret-plugin",
    }
    b = broker_factory(secrets)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")
    described = admin.describe_configs([bres])[bres].result(TIMEOUT)
    for name in secrets:
        entry = described[name]
        assert entry.is_sensitive and entry.value is None, (name, entry.value)
        assert entry.synonyms and all(s.value is None for s in entry.synonyms.values()), name
    assert described["num.partitions"].value == "1" and not described["num.partitions"].is_sensitive
    log_text = b.log_path.read_text()
    assert "unknown broker config my.plugin.api.secret=[hidden]" in log_text
    assert "s3cret" not in log_text
