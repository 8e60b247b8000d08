"""Dynamic broker configs in ZooKeeper mode (issue 27 item 5), as Kafka's ZooKeeper mode keeps them: the broker
receiving the change writes ``/config/brokers/<default>`` or ``/config/brokers/<id>`` (``{"version":1,"config":
{...}}``) and a ``/config/changes/config_change_<seq>`` notification (``{"version":2,"entity_path":
"brokers/<..>"}``); every broker concerned applies it, and a broker that starts reads it before its storage."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from support import all_up, kazoo, request, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
BROKER = 4
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


def _alter(broker: Any, name: str, configs: dict[str, str]) -> dict:
    body = {"resources": [{"resource_type": BROKER, "resource_name": name,
                           "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}],
            "validate_only": False}
    return request(broker, INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]  # type: ignore[no-any-return]


def _described(broker: Any, name: str, key: str) -> tuple[str | None, int] | None:
    body = {"resources": [{"resource_type": BROKER, "resource_name": name, "configuration_keys": [key]}],
            "include_synonyms": False}
    [res] = request(broker, DESCRIBE_CONFIGS, 1, body)["results"]
    assert res["error_code"] == 0, res
    return next(((c["value"], c["config_source"]) for c in res["configs"]), None)


def test_broker_configs_in_zookeeper_reach_every_broker(cluster: Any) -> None:
    all_up(cluster)
    b1, b2, b3 = (cluster.brokers[i] for i in (1, 2, 3))
    with kazoo(cluster.zk.connect) as zk:
        # the cluster default, through broker 1: every broker applies it
        assert _alter(b1, "", {"log.retention.ms": "3600000"})["error_code"] == 0
        assert json.loads(zk.get("/config/brokers/<default>")[0]) == {"version": 1,
                                                                      "config": {"log.retention.ms": "3600000"}}
        changes = sorted(zk.get_children("/config/changes"))
        assert json.loads(zk.get(f"/config/changes/{changes[-1]}")[0]) == {"version": 2,
                                                                            "entity_path": "brokers/<default>"}
        for i, b in cluster.brokers.items():
            until(f"broker {i} applying the default",
                  lambda b=b, i=i: _described(b, str(i), "log.retention.ms") == ("3600000",
                                                                                 DYNAMIC_DEFAULT_BROKER_CONFIG),
                  timeout=30)
        # broker 3's own value, sent to broker 3, stored in /config/brokers/3 and applied by broker 3 only
        assert _alter(b3, "3", {"log.retention.ms": "7200000"})["error_code"] == 0
        assert json.loads(zk.get("/config/brokers/3")[0])["config"] == {"log.retention.ms": "7200000"}
        assert _described(b3, "3", "log.retention.ms") == ("7200000", DYNAMIC_BROKER_CONFIG)
        assert _described(b2, "2", "log.retention.ms") == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)
        # a read-only config is refused and nothing is written
        bad = _alter(b2, "2", {"broker.id": "9"})
        assert bad["error_code"] == 42 and "Cannot update these configs dynamically" in bad["error_message"]
        assert zk.exists("/config/brokers/2") is None

    # a broker that starts reads its layers from ZooKeeper
    b3.kill()
    b3.start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    assert _described(b3, "3", "log.retention.ms") == ("7200000", DYNAMIC_BROKER_CONFIG)


def test_password_configs_in_zookeeper_only_encoded(cluster: Any) -> None:
    """Kafka's ZooKeeper mode keeps no password in ZooKeeper in clear: without ``password.encoder.secret`` the
    change is refused (INVALID_CONFIG, "Password encoder secret not configured"); with it ``/config/brokers/<id>``
    holds the EncryptingPasswordEncoder map, which the broker decodes when it starts again."""
    from tidelog.broker import password_encoder as pw

    name, secret = "listener.name.plaintext.ssl.key.password", "zk-secret"
    all_up(cluster)
    b2, b3 = cluster.brokers[2], cluster.brokers[3]
    refused = _alter(b2, "2", {name: "changeit"})
    assert refused["error_code"] == 40
    assert refused["error_message"].endswith("Password encoder secret not configured"), refused
    with kazoo(cluster.zk.connect) as zk:
        stored = zk.exists("/config/brokers/2") and json.loads(zk.get("/config/brokers/2")[0])["config"]
        assert not stored or name not in stored

    b3.kill()
    b3.overrides[pw.SECRET] = secret
    b3.start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    assert _alter(b3, "3", {name: "changeit"})["error_code"] == 0
    with kazoo(cluster.zk.connect) as zk:
        encoded = json.loads(zk.get("/config/brokers/3")[0])["config"][name]
    assert pw.looks_encoded(encoded) and pw.PasswordEncoder(secret).decode(encoded) == "changeit"
    assert _described(b3, "3", name) == (None, DYNAMIC_BROKER_CONFIG)
    b3.kill()
    b3.start()
    cluster.wait_for("3 registered brokers", lambda md: len(md.brokers) == 3)
    assert _described(b3, "3", name) == (None, DYNAMIC_BROKER_CONFIG)
    assert "could not be decoded" not in b3.log_text()
