"""Client quotas on a real ``tidelog serve``: DescribeClientQuotas / AlterClientQuotas (raw protocol, every
version, validate_only, refusals), the file surviving a restart, ``tidelog quotas``, and throttling seen by
real clients (confluent-kafka's producer and consumer settle near their quota and see ``throttle_cb``; a raw
client sees ``throttle_time_ms`` and its connection muted for that long, KIP-219).

The throughput tests run the broker with ``quota.window.num=2`` (Kafka's setting: 2 samples of 1 s): with
Kafka's default of 11, a client may first send ten windows' worth at once, so the rate settles only after
~10 s."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import RawClient, new_topic

pytestmark = pytest.mark.integration

METADATA, API_VERSIONS, DESCRIBE, ALTER = 3, 18, 48, 49
MB = 1_000_000


def entity(**parts: str | None) -> list[dict]:
    return [{"entity_type": k.replace("_", "-"), "entity_name": v} for k, v in parts.items()]


def op(key: str, value: float = 0.0, remove: bool = False) -> dict:
    return {"key": key, "value": value, "remove": remove}


def alter(c: RawClient, entries: list[dict], version: int = 1, validate_only: bool = False) -> list[dict]:
    r = c.request(ALTER, version, {"entries": entries, "validate_only": validate_only})
    assert r["throttle_time_ms"] == 0
    return r["entries"]


def describe(c: RawClient, components: list[dict], strict: bool = False, version: int = 1) -> dict:
    return c.request(DESCRIBE, version, {"components": components, "strict": strict})


def quotas_of(r: dict) -> dict:
    """{((type, name), ...): {key: value}} of a DescribeClientQuotas response."""
    return {tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"])):
            {v["key"]: v["value"] for v in entry["values"]} for entry in r["entries"]}


def clear(c: RawClient) -> None:
    for entry in describe(c, [])["entries"]:
        ops = [op(v["key"], remove=True) for v in entry["values"]]
        assert alter(c, [{"entity": entry["entity"], "ops": ops}])[0]["error_code"] == 0


@pytest.fixture(scope="module")
def qbroker(broker_factory: Any) -> Any:
    return broker_factory({"quota.window.num": "2"})


def test_alter_and_describe_every_version(qbroker: Any) -> None:
    with RawClient(qbroker.port) as c:
        for version in (0, 1):
            results = alter(c, [
                {"entity": entity(user="alice", client_id=None), "ops": [op("producer_byte_rate", 1024)]},
                {"entity": entity(client_id="app"), "ops": [op("request_percentage", 12.5),
                                                            op("consumer_byte_rate", 2048)]},
                {"entity": entity(user=None), "ops": [op("controller_mutation_rate", 3.0)]},
            ], version=version)
            assert [r["error_code"] for r in results] == [0, 0, 0]
            assert results[0]["entity"] == entity(user="alice", client_id=None)
            everything = quotas_of(describe(c, [], version=version))
            assert everything == {
                (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0},
                (("client-id", "app"),): {"request_percentage": 12.5, "consumer_byte_rate": 2048.0},
                (("user", None),): {"controller_mutation_rate": 3.0},
            }
            # user "alice" exactly, strict: not the (alice, <default>) entity
            strict = describe(c, [{"entity_type": "user", "match_type": 0, "match": "alice"}], strict=True)
            assert strict["error_code"] == 0 and strict["entries"] == []
            users = quotas_of(describe(c, [{"entity_type": "user", "match_type": 2, "match": None}], strict=True))
            assert list(users) == [(("user", None),)]
            clear(c)
            assert describe(c, [], version=version)["entries"] == []


def test_refusals_change_nothing(qbroker: Any) -> None:
    with RawClient(qbroker.port) as c:
        results = alter(c, [
            {"entity": entity(client_id="ok"), "ops": [op("producer_byte_rate", 4096)]},
            {"entity": entity(client_id="frac"), "ops": [op("producer_byte_rate", 1.5)]},
            {"entity": entity(client_id="bad-key"), "ops": [op("retention.ms", 1)]},
            {"entity": [], "ops": [op("producer_byte_rate", 1)]},
            {"entity": entity(topic="t"), "ops": [op("producer_byte_rate", 1)]},
            {"entity": entity(client_id=""), "ops": [op("producer_byte_rate", 1)]},
            {"entity": entity(client_id="ok"), "ops": [op("consumer_byte_rate", 1)]},
            {"entity": entity(client_id="dup"), "ops": [op("request_percentage", 1), op("request_percentage", 2)]},
        ])
        assert [(r["error_code"], r["error_message"]) for r in results] == [
            (0, None),
            (42, "Configuration producer_byte_rate must be a Long value"),
            (42, "Invalid configuration key retention.ms"),
            (42, "Invalid empty client quota entity"),
            (42, "Unhandled client quota entity type: topic"),
            (42, "Empty client-id not supported"),
            (42, "Ignoring duplicate entity client-id 'ok'"),
            (42, "Duplicate quota key request_percentage not updating quota for this entity"),
        ]
        assert quotas_of(describe(c, [])) == {(("client-id", "ok"),): {"producer_byte_rate": 4096.0}}
        # validate_only: checked, answered, not applied
        ok = alter(c, [{"entity": entity(client_id="v"), "ops": [op("producer_byte_rate", 1)]}], validate_only=True)
        assert ok[0]["error_code"] == 0
        bad = alter(c, [{"entity": entity(client_id="v"), "ops": [op("nope", 1)]}], validate_only=True)
        assert bad[0]["error_code"] == 42
        assert quotas_of(describe(c, [])) == {(("client-id", "ok"),): {"producer_byte_rate": 4096.0}}
        r = describe(c, [{"entity_type": "user", "match_type": 0, "match": None}])
        assert (r["error_code"], r["error_message"]) == (
            42, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
        assert describe(c, [{"entity_type": "group", "match_type": 2, "match": None}])["error_code"] == 35
        clear(c)


def test_quotas_survive_a_restart_and_the_cli_manages_them(broker_factory: Any) -> None:
    b = broker_factory()
    tidelog = [sys.executable, "-m", "tidelog.cli.main", "quotas"]
    out = subprocess.run([*tidelog, "alter", "-b", b.bootstrap, "--user", "alice", "--client-defaults",
                          "--add-config", "producer_byte_rate=1048576,request_percentage=50"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Completed updating quotas for user 'alice', client-id <default>."
    bad = subprocess.run([*tidelog, "alter", "-b", b.bootstrap, "--client", "x", "--add-config",
                          "producer_byte_rate=0.5"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "Error: INVALID_REQUEST: Configuration producer_byte_rate must be a Long value"
    raw = json.loads((b.data_dir / "tidelog-quotas.json").read_text())
    assert raw["entities"] == [{"entity": {"user": "alice", "client-id": None},
                                "config": {"producer_byte_rate": 1048576.0, "request_percentage": 50.0}}]
    b.restart()
    out = subprocess.run([*tidelog, "describe", "-b", b.bootstrap, "--user", "alice"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [line.split() for line in out.stdout.splitlines()[1:3]] == [
        ["alice", "<default>", "producer_byte_rate", "1048576"], ["alice", "<default>", "request_percentage", "50.0"]]
    out = subprocess.run([*tidelog, "alter", "-b", b.bootstrap, "--user", "alice", "--client-defaults",
                          "--delete-config", "producer_byte_rate,request_percentage"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with RawClient(b.port) as c:
        assert describe(c, [])["entries"] == []


def labeled_metric(broker: Any, metric: str) -> float:
    """The sum of a labeled metric's samples on the broker's ``/metrics`` page."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(metric + "{"))


def _set(b: Any, entries: list[dict]) -> None:
    with RawClient(b.port) as c:
        assert [r["error_code"] for r in alter(c, entries)] == [0] * len(entries)


def test_producer_throughput_settles_near_the_quota(qbroker: Any) -> None:
    quota = 1 * MB
    _set(qbroker, [{"entity": entity(client_id="slow-producer"), "ops": [op("producer_byte_rate", quota)]}])
    topic = new_topic("quota-p")
    throttles: list[float] = []
    acked = [0]

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[0] += len(msg.value())

    p = Producer({"bootstrap.servers": qbroker.bootstrap, "client.id": "slow-producer", "linger.ms": 5,
                  "batch.size": 65536, "queue.buffering.max.kbytes": 1024,  # a full queue: BufferError
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    value = b"q" * 1000
    marks: dict[int, int] = {}
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < 7.0:
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
        marks.setdefault(int(elapsed), acked[0])
    assert p.flush(30) == 0
    steady = (marks[6] - marks[2]) / 4.0  # bytes/s from 2 s to 6 s, after the first windows
    assert 0.5 * quota <= steady <= 1.6 * quota, (steady, marks)
    assert throttles and max(throttles) > 0, throttles  # librdkafka saw throttle_time_ms
    assert labeled_metric(qbroker, "tidelog_quota_throttled_requests_total") > 0
    assert labeled_metric(qbroker, "tidelog_quota_throttle_time_ms_total") > 0


def test_a_client_without_a_quota_fetches_while_others_have_one(qbroker: Any) -> None:
    """Quotas on (some client has one): a consumer with no fetch quota of its own is answered in full (its fetch
    size cap is unlimited; an int() of that infinity once failed every such Fetch)."""
    with RawClient(qbroker.port) as c:
        clear(c)
    _set(qbroker, [{"entity": entity(client_id="someone-else"), "ops": [op("producer_byte_rate", 1024)]}])
    topic = new_topic("quota-free")
    p = Producer({"bootstrap.servers": qbroker.bootstrap})
    for i in range(10):
        p.produce(topic, b"free-%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": qbroker.bootstrap, "group.id": "quota-free", "client.id": "unlimited"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(10, 0.5) if m.error() is None]
    c.close()
    assert got == [b"free-%d" % i for i in range(10)]
    with RawClient(qbroker.port) as c:
        clear(c)


def test_consumer_throughput_settles_near_the_quota(qbroker: Any) -> None:
    quota = 1 * MB
    topic = new_topic("quota-c")
    p = Producer({"bootstrap.servers": qbroker.bootstrap, "client.id": "filler", "linger.ms": 20})
    for _ in range(9000):
        p.produce(topic, b"c" * 1000, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    _set(qbroker, [{"entity": entity(client_id="slow-consumer"), "ops": [op("consumer_byte_rate", quota)]}])
    throttles: list[float] = []
    c = Consumer({"bootstrap.servers": qbroker.bootstrap, "client.id": "slow-consumer", "group.id": new_topic("g"),
                  "enable.auto.commit": False, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        marks: dict[int, int] = {}
        t0 = time.monotonic()
        while (elapsed := time.monotonic() - t0) < 7.0:
            for m in c.consume(100, 0.2):
                if not m.error():
                    got += len(m.value())
            marks.setdefault(int(elapsed), got)
    finally:
        c.close()
    steady = (marks[6] - marks[2]) / 4.0
    assert 0.4 * quota <= steady <= 1.6 * quota, (steady, marks)
    assert throttles and max(throttles) > 0, throttles


def test_request_quota_throttles_and_mutes_the_connection(qbroker: Any) -> None:
    _set(qbroker, [{"entity": entity(client_id="busy"), "ops": [op("request_percentage", 0.01)]}])
    with RawClient(qbroker.port, client_id="busy") as c:
        body = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        throttle = 0
        for _ in range(200):
            throttle = c.request(METADATA, 12, body)["throttle_time_ms"]
            if throttle:
                break
        assert 0 < throttle <= 1000  # the request quota's throttle is capped at one window
        t0 = time.monotonic()
        c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        waited = time.monotonic() - t0
        assert waited >= throttle / 1000 * 0.8, (waited, throttle)  # nothing was read while muted
    with RawClient(qbroker.port, client_id="idle") as other:  # another client id: no quota, no throttle
        assert other.request(METADATA, 12, body)["throttle_time_ms"] == 0


def test_quotas_off_by_default_and_removal_stops_throttling(qbroker: Any) -> None:
    with RawClient(qbroker.port) as c:
        clear(c)
    with RawClient(qbroker.port, client_id="busy") as c:
        body = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        assert all(c.request(METADATA, 12, body)["throttle_time_ms"] == 0 for _ in range(50))


def test_controller_mutation_rate_kip599(qbroker: Any) -> None:
    """1 partition/s with a burst of ``quota.window.num`` (2) seconds: CreateTopics v7 of 3 partitions is accepted
    (2 tokens left, then -1) and throttled 1 s; a strict request while the bucket is below zero is refused
    THROTTLING_QUOTA_EXCEEDED and nothing is created; CreateTopics v5 (not strict) is accepted and throttled."""
    _set(qbroker, [{"entity": entity(client_id="mutator"), "ops": [op("controller_mutation_rate", 1.0)]}])
    create = 19

    def topic(name: str, partitions: int) -> dict:
        return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                "configs": []}

    first, second, third = new_topic("mq"), new_topic("mq"), new_topic("mq")
    with RawClient(qbroker.port, client_id="mutator") as c:
        r = c.request(create, 7, {"topics": [topic(first, 3)], "timeout_ms": 30000, "validate_only": False})
        assert r["topics"][0]["error_code"] == 0
        assert 900 <= r["throttle_time_ms"] <= 1000
    with RawClient(qbroker.port, client_id="mutator") as c2:  # another connection: not muted
        r = c2.request(create, 7, {"topics": [topic(second, 1)], "timeout_ms": 30000, "validate_only": False})
        assert (r["topics"][0]["error_code"], r["topics"][0]["error_message"]) == (
            89, "The throttling quota has been exceeded.")
        assert r["throttle_time_ms"] > 0
        r = c2.request(create, 5, {"topics": [topic(third, 1)], "timeout_ms": 30000, "validate_only": False})
        assert r["topics"][0]["error_code"] == 0 and r["throttle_time_ms"] > 0
    with RawClient(qbroker.port) as c3:
        md = c3.request(METADATA, 12, {"topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in (first, second, third)],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        assert {t["name"]: t["error_code"] for t in md["topics"]} == {first: 0, second: 3, third: 0}
        clear(c3)


def test_clients_before_kip219_get_a_delayed_response(qbroker: Any) -> None:
    """Produce v5 (before KIP-219) over its quota: the broker holds the response back for the throttle time
    instead of answering first; Produce v7 is answered at once (then the connection is muted)."""
    from tidelog.records import build_batch

    topic = new_topic("quota-old")
    records = build_batch([(None, b"o" * 1000)])
    # one request is ~1.1 kB; at 800 B/s over a 1 s window (num=2, first window) the throttle is ~0.4 s
    _set(qbroker, [{"entity": entity(client_id=c), "ops": [op("producer_byte_rate", 800)]}
                   for c in ("old-producer", "new-producer")])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    with RawClient(qbroker.port, client_id="filler") as c:  # create the topic (auto-creation) without a quota
        c.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                 "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    with RawClient(qbroker.port, client_id="old-producer") as c:
        t0 = time.monotonic()
        r = c.request(0, 5, body)
        took = time.monotonic() - t0
        throttle = r["throttle_time_ms"]
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert throttle > 100 and took >= throttle / 1000 * 0.8, (took, throttle)
    with RawClient(qbroker.port, client_id="new-producer") as c:  # its own rate (a client-id level quota)
        t0 = time.monotonic()
        r = c.request(0, 7, body)
        took = time.monotonic() - t0
        assert r["throttle_time_ms"] > 100 and took < r["throttle_time_ms"] / 1000 * 0.8, (took, r)
    with RawClient(qbroker.port) as c:
        clear(c)


def test_kafka_python_admin_alters_and_describes(qbroker: Any) -> None:
    """kafka-python 3 has no client-quota method on its admin client; its own encoders of AlterClientQuotas and
    DescribeClientQuotas (the version negotiated through ApiVersions) are sent through the admin's connection."""
    from kafka import KafkaAdminClient
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

    admin = KafkaAdminClient(bootstrap_servers=qbroker.bootstrap)
    try:
        e = AlterClientQuotasRequest.EntryData
        alter_req = AlterClientQuotasRequest(entries=[e(
            entity=[e.EntityData(entity_type="user", entity_name="kp"),
                    e.EntityData(entity_type="client-id", entity_name=None)],
            ops=[e.OpData(key="consumer_byte_rate", value=4096.0, remove=False),
                 e.OpData(key="request_percentage", value=33.5, remove=False)])], validate_only=False)
        altered = admin._manager.run(admin._manager.send, alter_req)
        assert [x.error_code for x in altered.entries] == [0]
        d = DescribeClientQuotasRequest
        described = admin._manager.run(admin._manager.send, d(
            components=[d.ComponentData(entity_type="user", match_type=0, match="kp")], strict=False))
        assert described.error_code == 0
        assert [[(x.entity_type, x.entity_name) for x in entry.entity] for entry in described.entries] == [
            [("user", "kp"), ("client-id", None)]]
        assert sorted((v.key, v.value) for v in described.entries[0].values) == [
            ("consumer_byte_rate", 4096.0), ("request_percentage", 33.5)]
    finally:
        admin.close()
    with RawClient(qbroker.port) as c:
        clear(c)
