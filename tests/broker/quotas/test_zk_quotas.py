"""ZooKeeper mode: client quotas live where Kafka keeps them (``/config/users/<u>``, ``/config/clients/<c>``,
``/config/users/<u>/clients/<c>``, with ``/config/changes`` notifications), a quota set through one broker is
applied by another, and a user's quota and SCRAM credential share the user's znode without clobbering each
other (two brokers, a real ZooKeeper)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from helpers import RawClient, wait_for
from zkpair import zk_broker_pair

pytestmark = pytest.mark.integration

METADATA, DESCRIBE, ALTER = 3, 48, 49


@pytest.fixture(scope="module")
def zk_brokers(broker_factory: Any) -> Iterator[tuple[Any, list[Any]]]:
    yield from zk_broker_pair(broker_factory, {}, "tidelog-quota-zk-")


def _alter(b: Any, entity: list[dict], ops: list[dict]) -> None:
    with RawClient(b.port) as c:
        r = c.request(ALTER, 1, {"entries": [{"entity": entity, "ops": ops}], "validate_only": False})
    assert r["entries"][0]["error_code"] == 0, r


def _described(b: Any) -> dict:
    with RawClient(b.port) as c:
        r = c.request(DESCRIBE, 1, {"components": [], "strict": False})
    return {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]):
            {v["key"]: v["value"] for v in entry["values"]} for entry in r["entries"]}


def test_quota_set_on_one_broker_applies_on_the_other(zk_brokers: tuple[Any, list[Any]]) -> None:
    from kazoo.client import KazooClient

    zk, (b1, b2) = zk_brokers
    _alter(b1, [{"entity_type": "client-id", "entity_name": "zk-busy"}],
           [{"key": "request_percentage", "value": 0.01, "remove": False}])
    _alter(b1, [{"entity_type": "user", "entity_name": "ann"}, {"entity_type": "client-id", "entity_name": None}],
           [{"key": "producer_byte_rate", "value": 2048, "remove": False}])
    client = KazooClient(hosts=zk.connect)
    client.start(timeout=30)
    try:
        assert json.loads(client.get("/config/clients/zk-busy")[0]) == {
            "version": 1, "config": {"request_percentage": "0.01"}}
        assert json.loads(client.get("/config/users/ann/clients/<default>")[0])["config"] == {
            "producer_byte_rate": "2048"}
        changes = [json.loads(client.get(f"/config/changes/{c}")[0]) for c in client.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "clients/zk-busy"} in changes
        assert {"version": 2, "entity_path": "users/ann/clients/<default>"} in changes
    finally:
        client.stop()
        client.close()
    # broker 2 learnt both from the notifications: it describes them and throttles zk-busy
    wait_for(lambda: len(_described(b2)) == 2, 30, "broker 2 to see the quotas")
    assert _described(b2)[(("user", "ann"), ("client-id", None))] == {"producer_byte_rate": 2048.0}
    body = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with RawClient(b2.port, client_id="zk-busy") as c:
        assert any(c.request(METADATA, 12, body)["throttle_time_ms"] > 0 for _ in range(200))
    # removed through broker 2: broker 1 forgets it
    _alter(b2, [{"entity_type": "client-id", "entity_name": "zk-busy"}],
           [{"key": "request_percentage", "value": 0.0, "remove": True}])
    wait_for(lambda: len(_described(b1)) == 1, 30, "broker 1 to forget the removed quota")


def test_user_quota_and_scram_credential_share_the_znode(zk_brokers: tuple[Any, list[Any]]) -> None:
    from kazoo.client import KazooClient

    zk, (b1, b2) = zk_brokers
    admin = AdminClient({"bootstrap.servers": b2.bootstrap})

    def scram(password: bytes) -> None:
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "sam", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password,
                secrets.token_bytes(16))]).values():
            f.result(30)

    scram(b"sam-pw")
    _alter(b1, [{"entity_type": "user", "entity_name": "sam"}],
           [{"key": "consumer_byte_rate", "value": 4096, "remove": False}])
    scram(b"sam-pw-2")  # rewrites the credential: the quota stays
    client = KazooClient(hosts=zk.connect)
    client.start(timeout=30)
    try:
        config = json.loads(client.get("/config/users/sam")[0])["config"]
        assert config["consumer_byte_rate"] == "4096"
        assert config["SCRAM-SHA-512"].startswith("salt=")
    finally:
        client.stop()
        client.close()
    _alter(b2, [{"entity_type": "user", "entity_name": "sam"}],
           [{"key": "consumer_byte_rate", "value": 0.0, "remove": True}])
    assert [i.iterations for i in admin.describe_user_scram_credentials(["sam"])["sam"].result(20)
            .scram_credential_infos] == [4096]
    wait_for(lambda: (("user", "sam"),) not in _described(b1), 30, "broker 1 to drop sam's quota")
