"""Dynamic broker configs (issue 27 item 5) against a real ``tidelog serve``, driven by confluent-kafka's and
kafka-python's AdminClients: per-broker and cluster-default layers, sources and synonyms, live effects (a topic
default on an existing topic, the cleaner's threads, a connection limit), refusals with Kafka's messages,
``validate_only``, and survival across a restart.

Neither Python client can name the cluster default (confluent-kafka refuses an empty resource name, kafka-python
wants an integer broker id), so the default layer is altered with raw IncrementalAlterConfigs requests, as the
Java Admin sends them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from helpers import RawClient, metric_value, new_topic, wait_for
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType

from tidelog.broker.dynamic_config import STORE_FILE, DynamicConfigError, validate_names
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration

TIMEOUT = 30
API_VERSIONS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 18, 32, 44
BROKER = 4


def _raw_inc(b: Any, name: str, ops: dict[str, str | None], validate_only: bool = False) -> tuple[int, str | None]:
    """IncrementalAlterConfigs on BROKER ``name`` (SET, or DELETE for None): (error code, message)."""
    body = {"resources": [{"resource_type": BROKER, "resource_name": name,
                           "configs": [{"name": k, "config_operation": 0 if v is not None else 1, "value": v}
                                       for k, v in ops.items()]}],
            "validate_only": validate_only}
    with RawClient(b.port) as c:
        r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]
    return r["error_code"], r["error_message"]


def _admin(b: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _inc(admin: AdminClient, name: str, ops: dict[str, str | None], validate_only: bool = False) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in ops.items()]
    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(TIMEOUT)


def _raw_describe(b: Any, name: str) -> dict[str, Any]:
    with RawClient(b.port) as c:
        body = {"resources": [{"resource_type": BROKER, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": True}
        return c.request(DESCRIBE_CONFIGS, 4, body)["results"][0]  # type: ignore[no-any-return]


def _describe(admin: AdminClient, rtype: Any, name: str) -> dict[str, Any]:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(TIMEOUT)  # type: ignore[no-any-return]


def _error(exc: KafkaException) -> tuple[str, str]:
    e = exc.args[0]
    return e.name(), e.str()


def test_topic_default_per_broker_and_default_layers_survive_restart(broker_factory: Any) -> None:
    b = broker_factory()
    admin = _admin(b)
    plain, pinned = new_topic("dyn-plain"), new_topic("dyn-pinned")
    fs = admin.create_topics([NewTopic(plain, 1, 1),
                              NewTopic(pinned, 1, 1, config={"retention.ms": "60000"})])
    for f in fs.values():
        f.result(TIMEOUT)

    # the cluster default (empty name) changes the topic default live: the topic without an override follows
    assert _raw_inc(b, "", {"log.retention.ms": "3600000"}) == (0, None)
    t = _describe(admin, ConfigResource.Type.TOPIC, plain)["retention.ms"]
    assert t.value == "3600000"
    assert t.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert next((s.name, s.source) for s in t.synonyms.values()) == (
        "log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert _describe(admin, ConfigResource.Type.TOPIC, pinned)["retention.ms"].value == "60000"
    default = _raw_describe(b, "")
    assert [(e["name"], e["value"], e["config_source"]) for e in default["configs"]] == [
        ("log.retention.ms", "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]

    # this broker's own value wins over the default; synonyms in Kafka's order
    _inc(admin, "0", {"log.retention.ms": "7200000"})
    mine = _describe(admin, ConfigResource.Type.BROKER, "0")
    e = mine["log.retention.ms"]
    assert e.value == "7200000" and e.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value and not e.is_read_only
    # (confluent-kafka keys synonyms by name, so the same name at two levels is read from the raw answer)
    raw = {c["name"]: c for c in _raw_describe(b, "0")["configs"]}["log.retention.ms"]
    assert [(x["value"], x["source"]) for x in raw["synonyms"]][:2] == [
        ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
    assert mine["num.partitions"].is_read_only
    assert _describe(admin, ConfigResource.Type.TOPIC, plain)["retention.ms"].value == "7200000"

    # validate_only changes nothing
    _inc(admin, "0", {"log.segment.bytes": "2097152"}, validate_only=True)
    assert _describe(admin, ConfigResource.Type.BROKER, "0")["log.segment.bytes"].value == "1073741824"

    # a read-only config: INVALID_REQUEST with Kafka's message, and nothing changes
    with pytest.raises(KafkaException) as ei:
        _inc(admin, "0", {"num.partitions": "3", "log.segment.bytes": "2097152"})
    name, msg = _error(ei.value)
    assert name == "INVALID_REQUEST" and "Cannot update these configs dynamically: Set(num.partitions)" in msg
    assert _describe(admin, ConfigResource.Type.BROKER, "0")["log.segment.bytes"].value == "1073741824"
    # a bad value
    with pytest.raises(KafkaException) as ei:
        _inc(admin, "0", {"log.retention.ms": "soon"})
    assert _error(ei.value)[0] == "INVALID_REQUEST"
    # a per-broker-only config at the cluster default; accepted per broker (issue 27's example)
    code, msg = _raw_inc(b, "", {"sasl.kerberos.min.time.before.relogin": "120000"})
    assert code == 42 and msg is not None and "broker id must be specified" in msg
    _inc(admin, "0", {"sasl.kerberos.min.time.before.relogin": "120000"})
    # a null value for SET (only DELETE takes one)
    with RawClient(b.port) as c:
        r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{"resource_type": BROKER, "resource_name": "0",
                      "configs": [{"name": "log.cleaner.threads", "config_operation": 0, "value": None}]}],
                      "validate_only": False})["responses"][0]
    assert r["error_code"] == 42 and "Null value not supported" in r["error_message"]
    # thread pools: Kafka's half/double bounds; num.io.threads resizes the request handler pool live
    code, msg = _raw_inc(b, "0", {"num.io.threads": "17"})
    assert code == 42 and msg is not None and "should not be greater than double the current value 8" in msg
    assert _raw_inc(b, "0", {"num.io.threads": "4"}) == (0, None)
    assert _raw_inc(b, "0", {"num.io.threads": None}) == (0, None)
    # another broker id (sent here: confluent-kafka would route it to broker 7)
    assert _raw_inc(b, "7", {"log.retention.ms": "1"}) == (42, "Unexpected broker id, expected 0 but received 7")

    stored = json.loads((b.data_dir / STORE_FILE).read_text())
    assert stored["default"] == {"log.retention.ms": "3600000"}
    assert stored["brokers"]["0"] == {"log.retention.ms": "7200000", "sasl.kerberos.min.time.before.relogin": "120000"}

    b.restart()
    admin = _admin(b)
    mine = _describe(admin, ConfigResource.Type.BROKER, "0")
    assert mine["log.retention.ms"].value == "7200000"
    assert mine["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert mine["sasl.kerberos.min.time.before.relogin"].value == "120000"
    assert _describe(admin, ConfigResource.Type.TOPIC, plain)["retention.ms"].value == "7200000"

    # deleting the per-broker value falls back to the cluster default, live
    _inc(admin, "0", {"log.retention.ms": None})
    t = _describe(admin, ConfigResource.Type.TOPIC, plain)["retention.ms"]
    assert t.value == "3600000" and t.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def test_kafka_python_alter_configs_cleaner_threads(broker_factory: Any) -> None:
    b = broker_factory()
    assert metric_value(b, "tidelog_cleaner_threads") == 1
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        # legacy AlterConfigs replaces the broker's layer
        def alter(configs: dict[str, str]) -> str:
            r = admin.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0", configs=configs)],
                                    incremental=False, raise_on_unknown=False)
            return str(r["broker"]["0"])

        bad = alter({"log.cleaner.threads": "3"})  # Kafka's bound: at most double the current count
        assert "Error 42" in bad and "more than double the current value 1" in bad
        assert alter({"log.cleaner.threads": "2"}) == "OK"
        wait_for(lambda: metric_value(b, "tidelog_cleaner_threads") == 2, what="two cleaner threads")
        d = admin.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")], include_synonyms=True)
        e = d["broker"]["0"]["log.cleaner.threads"]
        assert e["value"] == "2" and e["config_source"] == "DYNAMIC_BROKER_CONFIG" and not e["read_only"]
        bad = alter({"log.cleaner.threads": "0"})
        assert "Error 42" in bad and "should be at least 1" in bad
        assert metric_value(b, "tidelog_cleaner_threads") == 2
        # a reset through AlterConfigs (kafka-python sends the layer without the key): back to the static value
        r = admin.reset_configs([KpConfigResource(ConfigResourceType.BROKER, "0", configs=["log.cleaner.threads"])],
                                incremental=False, raise_on_unknown=False)
        assert str(r["broker"]["0"]) == "OK"
        wait_for(lambda: metric_value(b, "tidelog_cleaner_threads") == 1, what="back to one cleaner thread")
    finally:
        admin.close()


def test_max_connections_per_ip_enforced_live(broker_factory: Any) -> None:
    b = broker_factory()
    admin = _admin(b)
    admin.list_topics(timeout=TIMEOUT)  # the admin's connection(s) are open
    assert _raw_inc(b, "", {"max.connections.per.ip": "2"}) == (0, None)
    opened: list[RawClient] = []
    try:
        closed = False
        for _ in range(2):  # the admin holds at least one of the two
            c = RawClient(b.port)
            opened.append(c)
            try:
                c.assert_closed_within(1.0)
                closed = True
                break
            except AssertionError:
                continue
        assert closed, "a third connection from 127.0.0.1 was not refused"
    finally:
        for c in opened:
            c.close()
    _inc(admin, "0", {"max.connections.per.ip": "1000"})  # the admin's connection is still open
    clients = [RawClient(b.port) for _ in range(4)]
    try:
        for c in clients:
            assert c.request(API_VERSIONS, 0, {})["error_code"] == 0
    finally:
        for c in clients:
            c.close()


def test_names_checked_as_kafka_does() -> None:
    validate_names({"log.cleaner.threads": "2", "my.custom.config": "x"}, per_broker=False)
    validate_names({"listener.name.external.ssl.keystore.location": "/k"}, per_broker=True)
    for props, per_broker, words in [
        ({"broker.id": "1"}, True, "Cannot update these configs dynamically: Set(broker.id)"),
        ({"ssl.keystore.location": "/k"}, True, "only per-listener"),
        ({"listener.name.external.ssl.keystore.location": "/k"}, False, "broker id must be specified"),
        ({"tidelog.log.tick.interval.ms": "5"}, True, "dynamically"),
    ]:
        with pytest.raises(DynamicConfigError) as ei:
            validate_names(props, per_broker)
        assert words in ei.value.message and ei.value.kafka_error == ErrorCode.INVALID_REQUEST


def test_max_connections_enforced_live(broker_factory: Any) -> None:
    """A dynamic ``max.connections`` stops the listener accepting at once; deleting it resumes (the waiting
    connection is then served)."""
    b = broker_factory()

    def inc(c: RawClient, ops: list[dict]) -> int:
        body = {"resources": [{"resource_type": BROKER, "resource_name": "0", "configs": ops}], "validate_only": False}
        return int(c.request(INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]["error_code"])

    with RawClient(b.port) as admin:
        assert inc(admin, [{"name": "max.connections", "config_operation": 0, "value": "1"}]) == 0
        # the accept the listener was already waiting in when the limit fell completes, but the connection is
        # held unserved until a slot frees (as Kafka's ConnectionQuotas.inc blocks after the accept)
        with RawClient(b.port, timeout=1.0) as waiting:  # the kernel completes the handshake; the broker waits
            waiting.send_request(API_VERSIONS, 0, {})
            with pytest.raises(TimeoutError):
                waiting.response()
            assert inc(admin, [{"name": "max.connections", "config_operation": 1, "value": None}]) == 0
            waiting.sock.settimeout(10.0)
            assert waiting.response()["error_code"] == 0


def test_layer_size_is_bounded(broker: Any) -> None:
    """Names nobody knows are kept as custom configs (as Kafka), so their total size is bounded."""
    code, msg = _raw_inc(broker, "0", {"my.custom.config": "x" * 1_100_000})
    assert code == 42 and msg is not None and "more than the 1000000 allowed" in msg
    assert _raw_inc(broker, "0", {"my.custom.config": "small"}) == (0, None)
    assert {c["name"]: c["value"] for c in _raw_describe(broker, "0")["configs"]}["my.custom.config"] == "small"


def test_message_max_bytes_default_applies_to_existing_topic(broker_factory: Any) -> None:
    """A dynamic ``message.max.bytes`` (the broker default of ``max.message.bytes``) refuses a producer's record
    on an existing topic without an override at once; a topic with its own override keeps it."""
    b = broker_factory()
    admin = _admin(b)
    plain, pinned = new_topic("dyn-mmb"), new_topic("dyn-mmb-pinned")
    for f in admin.create_topics([NewTopic(plain, 1, 1),
                                  NewTopic(pinned, 1, 1, config={"max.message.bytes": "1000000"})]).values():
        f.result(TIMEOUT)

    def produce(topic: str) -> int | None:
        errors: list[Any] = []
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "compression.type": "none"})
        p.produce(topic, b"x" * 5000, on_delivery=lambda err, _m: errors.append(err))
        assert p.flush(TIMEOUT) == 0
        [err] = errors
        return None if err is None else int(err.code())

    assert produce(plain) is None
    _inc(admin, "0", {"message.max.bytes": "2000"})
    assert produce(plain) == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce(pinned) is None
    _inc(admin, "0", {"message.max.bytes": None})
    assert produce(plain) is None


def test_synonyms_in_kafkas_order(broker: Any) -> None:
    """ConfigHelper.configSynonyms: by source first, then by synonym name (ms, minutes, hours), the leading
    synonyms of other names dropped; the entry's source is its first synonym's."""
    assert _raw_inc(broker, "", {"log.retention.hours": "100"}) == (0, None)
    assert _raw_inc(broker, "0", {"log.retention.ms": "5000"}) == (0, None)
    try:
        configs = {c["name"]: c for c in _raw_describe(broker, "0")["configs"]}
        ms, hours = configs["log.retention.ms"], configs["log.retention.hours"]
        assert [(s["name"], s["value"], s["source"]) for s in ms["synonyms"]] == [
            ("log.retention.ms", "5000", 2), ("log.retention.hours", "100", 3), ("log.retention.hours", "168", 5)]
        assert ms["config_source"] == 2
        assert [(s["name"], s["value"], s["source"]) for s in hours["synonyms"]] == [
            ("log.retention.hours", "100", 3), ("log.retention.hours", "168", 5)]
        assert hours["config_source"] == 3 and hours["value"] == "100"
    finally:
        assert _raw_inc(broker, "", {"log.retention.hours": None})[0] == 0
        assert _raw_inc(broker, "0", {"log.retention.ms": None})[0] == 0
