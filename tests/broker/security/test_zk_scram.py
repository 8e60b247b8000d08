"""ZooKeeper mode. SCRAM credentials: stored under ``/config/users/<name>`` in Kafka's format with a change
notification, and seen by every broker of the cluster (two brokers, a real ZooKeeper, SASL_PLAINTEXT listeners
beside the PLAINTEXT inter-broker one). Replication over a SASL_SSL inter-broker listener."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from helpers import RawClient, confluent_consume, confluent_produce, new_topic, wait_for
from secsupport import listener_ports
from zkpair import cluster_support, zk_broker_pair

from tidelog.broker.security.scram import ScramCredential

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def zk_brokers(broker_factory: Any) -> Iterator[tuple[Any, list[Any]]]:
    yield from zk_broker_pair(broker_factory, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }, "tidelog-sec-zk-", ready=lambda b: setattr(b, "ports", listener_ports(b)))


def _scram(user: str, password: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password}


def test_credentials_live_in_zookeeper_and_every_broker_sees_them(zk_brokers: tuple[Any, list[Any]]) -> None:
    from kazoo.client import KazooClient

    zk, (b1, b2) = zk_brokers
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "zoe", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"zoe-pw",
            secrets.token_bytes(16))]).values():
        f.result(30)
    client = KazooClient(hosts=zk.connect)
    client.start(timeout=30)
    try:
        data, _ = client.get("/config/users/zoe")
        config = json.loads(data)
        assert config["version"] == 1
        text = config["config"]["SCRAM-SHA-512"]
        assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
        assert text.endswith(",iterations=4096")
        changes = [json.loads(client.get(f"/config/changes/{c}")[0]) for c in client.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/zoe"} in changes
    finally:
        client.stop()
        client.close()
    # the other broker logs zoe in (its watch delivered the credential)
    topic = new_topic("zk-scram")
    bootstrap2 = f"127.0.0.1:{b2.ports['SASL_PLAINTEXT']}"
    admin2 = AdminClient({"bootstrap.servers": b2.bootstrap})
    admin2.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    wait_for(lambda: admin2.list_topics(topic, timeout=5).topics[topic].error is None, 30, "the topic in metadata")
    # the partition may be led by either broker: Metadata on the SASL listener names every broker's SASL
    # endpoint (registered in /brokers/ids), so the client authenticates wherever the leader is
    confluent_produce(bootstrap2, topic, [{"value": b"z%d" % i} for i in range(5)], **_scram("zoe", "zoe-pw"))
    assert [m.value() for m in confluent_consume(bootstrap2, topic, 5, **_scram("zoe", "zoe-pw"))] == [
        b"z%d" % i for i in range(5)]
    described = admin2.describe_user_scram_credentials(["zoe"])
    assert [i.iterations for i in described["zoe"].result(20).scram_credential_infos] == [4096]
    # deleted through broker 2: broker 1 refuses the login afterwards
    for f in admin2.alter_user_scram_credentials(
            [UserScramCredentialDeletion("zoe", ScramMechanism.SCRAM_SHA_512)]).values():
        f.result(30)

    def forgotten_on_b1() -> bool:
        return not admin.describe_user_scram_credentials().result(10)

    wait_for(forgotten_on_b1, 30, "broker 1 to forget zoe")
    with RawClient(b1.ports["SASL_PLAINTEXT"]) as c:
        assert c.request(17, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        assert c.request(36, 2, {"auth_bytes": b"n,,n=zoe,r=abcdefgh"})["error_code"] == 58  # SASL_AUTHENTICATION_FAILED


def _upsert(bootstrap: str, user: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode(),
            secrets.token_bytes(16))]).values():
        f.result(30)


def _logs_in(broker: Any, user: str, password: str) -> bool:
    """Whether confluent-kafka logs in as ``user`` on the broker's SASL listener (and gets metadata)."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}", **_scram(user, password)})
    try:
        admin.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def test_user_names_are_sanitized_in_zookeeper_as_kafka_does(zk_brokers: tuple[Any, list[Any]]) -> None:
    """``/config/users/<name>`` holds the name as Kafka's ``Sanitizer`` writes it (URL encoding), for SCRAM
    credentials as for quotas, so Kafka's tools find them; an older tidelog's raw-named znode is still read and is
    moved to the sanitized name at the user's next credential change."""
    from kazoo.client import KazooClient

    zk, (b1, b2) = zk_brokers
    client = KazooClient(hosts=zk.connect)
    client.start(timeout=30)
    try:
        _upsert(b1.bootstrap, "ana@example.com", "ana-pw")
        assert client.exists("/config/users/ana%40example.com")
        assert not client.exists("/config/users/ana@example.com")
        changes = [json.loads(client.get(f"/config/changes/{c}")[0]) for c in client.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/ana%40example.com"} in changes
        wait_for(lambda: _logs_in(b2, "ana@example.com", "ana-pw"), 30, "broker 2 to log ana@example.com in")
        admin2 = AdminClient({"bootstrap.servers": b2.bootstrap})
        assert "ana@example.com" in admin2.describe_user_scram_credentials().result(20)
        # a quota of the same user lands on the same znode (one entity for Kafka)
        with RawClient(b1.port) as c:  # AlterClientQuotas v1
            r = c.request(49, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "ana@example.com"}],
                                               "ops": [{"key": "producer_byte_rate", "value": 1048576.0,
                                                        "remove": False}]}], "validate_only": False})
        assert r["entries"][0]["error_code"] == 0, r
        config = json.loads(client.get("/config/users/ana%40example.com")[0])["config"]
        assert config["producer_byte_rate"] == "1048576" and config["SCRAM-SHA-512"].startswith("salt=")

        # an older tidelog's raw znode
        cred = ScramCredential.from_password("SCRAM-SHA-512", "old-pw", 4096)
        client.create("/config/users/old@example.com",
                      json.dumps({"version": 1, "config": {"SCRAM-SHA-512": cred.to_text()}}).encode())
        wait_for(lambda: _logs_in(b1, "old@example.com", "old-pw"), 30, "broker 1 to read the raw znode")
        _upsert(b2.bootstrap, "old@example.com", "new-pw")
        assert not client.exists("/config/users/old@example.com")
        assert "SCRAM-SHA-512" in json.loads(client.get("/config/users/old%40example.com")[0])["config"]
        wait_for(lambda: _logs_in(b1, "old@example.com", "new-pw"), 30, "broker 1 to take the new password")
        assert not _logs_in(b1, "old@example.com", "old-pw")
    finally:
        client.stop()
        client.close()


# ------------------------------------------------------------------------------ TLS and SASL between brokers


def test_replication_over_a_sasl_ssl_inter_broker_listener(broker_factory: Any, certs: Any) -> None:
    """Two brokers whose inter-broker listener is SASL_SSL with SCRAM-SHA-512: the follower's fetcher
    authenticates (with the ScramLoginModule username/password) over TLS, and acks=all needs it."""
    pytest.importorskip("kazoo")
    support = cluster_support()
    if not support.ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip("ZooKeeper is not installed")
    root = Path(tempfile.mkdtemp(prefix="tidelog-sec-ib-"))
    zk = support.ZooKeeper(root)
    zk.start()
    brokers = []
    try:
        for i in (1, 2):
            b = broker_factory({
                "broker.id": str(i), "zookeeper.connect": zk.connect, "default.replication.factor": "2",
                "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1", "replica.fetch.backoff.ms": "200",
                "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config":
                    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                    'password="broker-pw";',
                "listener.name.internal.ssl.keystore.type": "PEM",
                "listener.name.internal.ssl.keystore.location": certs.path("server-bundle.pem"),
                "listener.name.internal.ssl.truststore.type": "PEM",
                "listener.name.internal.ssl.truststore.location": certs.path("ca.pem"),
            })
            brokers.append(b)
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"broker-pw",
                secrets.token_bytes(16))]).values():
            f.result(30)
        topic = new_topic("ib")
        admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])[topic].result(30)

        def both_in_isr() -> bool:
            p = admin.list_topics(topic, timeout=5).topics[topic].partitions.get(0)
            return p is not None and len(p.isrs) == 2

        wait_for(both_in_isr, 60, "both replicas in the ISR")
        bootstrap = ",".join(b.bootstrap for b in brokers)
        confluent_produce(bootstrap, topic, [{"value": b"ib%d" % i} for i in range(10)], **{"acks": "all"})
        assert [m.value() for m in confluent_consume(bootstrap, topic, 10)] == [b"ib%d" % i for i in range(10)]
        wait_for(lambda: re.search(r"authenticated peer=\S+ principal=User:broker mechanism=SCRAM-SHA-512 "
                                   r"listener=INTERNAL", brokers[0].log_text() + brokers[1].log_text()),
                 10, "a follower's fetcher authenticated on the inter-broker listener")
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)
