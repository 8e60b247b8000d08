"""The Java client (kafka-clients 3.9.0) over TLS and SASL, and its client-quota admin API.

* The round-trip scenario (every codec produced, then read back) over SASL_SSL with SCRAM-SHA-512 and over
  mutual TLS (a PEM trust store and a PEM key store with the client certificate), certificates made at test
  time (``tests/broker/security/secsupport.py``); the broker's log names the principal each connection authenticated as.
* ``Admin.alterClientQuotas`` / ``describeClientQuotas``: entities with a default, filters (contains, strict),
  validateOnly, a refused value, removal.
"""

from __future__ import annotations

import re
import secrets
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from helpers import wait_for

_SECURITY = Path(__file__).resolve().parents[1] / "broker" / "security"
if str(_SECURITY) not in sys.path:
    sys.path.insert(0, str(_SECURITY))

from secsupport import Certs, listener_ports, make_certs, secure_overrides  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("java-certs"))


@pytest.fixture(scope="module")
def secure_broker(broker_factory: Any, certs: Certs) -> Any:
    b = broker_factory(secure_overrides(certs))
    b.ports = listener_ports(b)
    return b


def _round_trip(java_client: Any, b: Any, listener: str, props: str, tmp_path: Path) -> list[dict]:
    conf = tmp_path / f"{listener}.properties"
    conf.write_text(props)
    topic = f"java-{listener.lower()}-{uuid.uuid4().hex[:8]}"
    events = java_client.run("roundtrip", f"127.0.0.1:{b.ports[listener]}", topic, broker=b, client_config=conf,
                             timeout=150)
    sent = [(e["codec"], e["offset"], e["value"]) for e in events if e["event"] == "sent"]
    read = [(e["offset"], e["value"]) for e in events if e["event"] == "read"]
    assert len(sent) == 100
    assert read == sorted((o, v) for _, o, v in sent)
    return events


def test_round_trip_over_sasl_ssl_scram_sha_512(java_client: Any, secure_broker: Any, certs: Certs,
                                                 tmp_path: Path) -> None:
    b = secure_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "jill", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"jill-pw",
            secrets.token_bytes(16))]).values():
        f.result(30)
    _round_trip(java_client, b, "SASL_SSL", "\n".join([
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="jill" '
        'password="jill-pw";',
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs.path('ca.pem')}",
    ]) + "\n", tmp_path)
    wait_for(lambda: re.search(r"authenticated peer=\S+ principal=User:jill mechanism=SCRAM-SHA-512 "
                               r"listener=SASL_SSL", b.log_text()), 10, "the SCRAM login in the broker log")


def test_round_trip_over_mutual_tls(java_client: Any, secure_broker: Any, certs: Certs, tmp_path: Path) -> None:
    b = secure_broker
    _round_trip(java_client, b, "MTLS", "\n".join([
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs.path('ca.pem')}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs.path('client-bundle.pem')}",
    ]) + "\n", tmp_path)
    # the client certificate's subject went through the MTLS listener's mapping rule (CN upper-cased)
    assert re.search(r'TLS client authenticated peer=\S+ listener=MTLS dn="CN=alice,OU=eng,O=Acme,C=US" '
                     r"principal=User:ALICE", b.log_text())


def test_admin_client_quotas(java_client: Any, broker_factory: Any) -> None:
    b = broker_factory()
    events = java_client.run("quotas", b.bootstrap, broker=b)
    ev = {e["event"]: e for e in events}
    alice = "{client-id=null, user=alice}"
    app = "{client-id=java-app}"
    # (the harness writes doubles as Java prints them)
    everything = {alice: {"producer_byte_rate": "1048576.0", "request_percentage": "25.0"},
                  app: {"consumer_byte_rate": "2048.0"}}
    assert ev["all"]["quotas"] == everything
    assert ev["alice"]["quotas"] == {alice: everything[alice]}
    assert ev["strict_default_client"]["quotas"] == {}  # (alice, <default>) also has a user: not strict
    assert ev["after_validate_only"]["quotas"] == everything
    assert ev["fractional"]["error"] == "InvalidRequestException"
    assert ev["fractional"]["message"] == "Configuration producer_byte_rate must be a Long value"
    assert ev["after_remove"]["quotas"] == {}
