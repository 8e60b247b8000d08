"""Client quotas on authenticated principals: a user quota applies to the SCRAM user's connections (the principal
``User:quinn`` is the quota's user ``quinn``) and not to anonymous ones; ``tidelog quotas`` over SASL_SSL with
``--command-config``."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from helpers import RawClient, new_topic
from secsupport import Certs

pytestmark = pytest.mark.integration

USER, PW = "quinn", "quinn-pw"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def _throttles(bootstrap: str, **conf: Any) -> list[int]:
    """Produce 240 x 1 kB (acks=1, small batches) and return the throttle times librdkafka reported."""
    seen: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 16384,
                  "throttle_cb": lambda e: seen.append(int(e.throttle_time * 1000)), **conf})
    topic = new_topic("quota-sec")
    for _ in range(240):
        p.produce(topic, b"s" * 1000, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    p.poll(0.5)
    return seen


def test_user_quota_applies_to_the_authenticated_principal(secure_broker: Any, certs: Certs,
                                                            tmp_path: Path) -> None:
    b = secure_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PW.encode(),
            secrets.token_bytes(16))]).values():
        f.result(30)
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                     f'username="{USER}" password="{PW}";\n'
                     f"ssl.truststore.type=PEM\nssl.truststore.location={certs.path('ca.pem')}\n")
    sasl_ssl = f"127.0.0.1:{b.ports['SASL_SSL']}"
    # set through the SASL_SSL listener, as the user itself (no authorizer yet)
    out = _cli("quotas", "alter", "-b", sasl_ssl, "--command-config", str(props), "--user", USER,
               "--add-config", "producer_byte_rate=20000")
    assert out.returncode == 0, out.stderr
    out = _cli("quotas", "describe", "-b", sasl_ssl, "--command-config", str(props), "--user", USER, "-O", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"USER": USER, "CLIENT-ID": "", "KEY": "producer_byte_rate", "VALUE": 20000}]
    # without --command-config the SASL_SSL listener cannot be spoken to: one error line, no hang
    bad = _cli("quotas", "describe", "-b", sasl_ssl, "--timeout", "3")
    assert bad.returncode == 1 and bad.stderr.startswith("Error:")

    scram = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
             "sasl.password": PW, "ssl.ca.location": certs.path("ca.pem")}
    # 240 kB at 20 kB/s: past the ~200 kB the first ten windows allow, throttled
    assert max(_throttles(sasl_ssl, **scram), default=0) > 0
    # the same load as User:ANONYMOUS on PLAINTEXT: no quota applies
    assert _throttles(b.bootstrap) == []
    with RawClient(b.port) as c:
        r = c.request(49, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": USER}],
                                           "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]}],
                              "validate_only": False})
        assert r["entries"][0]["error_code"] == 0
