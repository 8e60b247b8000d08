"""kcat (librdkafka's command-line client) over the secured listeners: SSL, SASL_SSL with PLAIN and with
SCRAM-SHA-512 (certificates made at test time, see conftest.py). Each run produces with ``kcat -P`` and reads
back with ``kcat -C``; the broker's log names the principal of the SASL logins."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from helpers import new_topic, wait_for
from secsupport import PLAIN_USERS, Certs

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat")


def _kcat_round_trip(bootstrap: str, conf: dict[str, str], broker: Any = None) -> None:
    assert KCAT is not None
    topic = new_topic("kcat-sec")
    opts = [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]
    lines = [f"kcat line {i}" for i in range(10)]
    put = subprocess.run([KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", "0", *opts],
                         input="\n".join(lines) + "\n", text=True, timeout=60, capture_output=True)
    assert put.returncode == 0, (put.stderr, broker.log_text()[-3000:] if broker is not None else "")
    out = subprocess.run([KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-c", "10", "-e",
                          *opts], text=True, timeout=60, capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == lines


@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_over_ssl(secure_broker: Any, certs: Certs) -> None:
    _kcat_round_trip(f"127.0.0.1:{secure_broker.ports['SSL']}",
                     {"security.protocol": "SSL", "ssl.ca.location": certs.path("ca.pem")})


@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_over_sasl_ssl_plain(secure_broker: Any, certs: Certs) -> None:
    _kcat_round_trip(f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",
                     {"security.protocol": "SASL_SSL", "ssl.ca.location": certs.path("ca.pem"),
                      "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": PLAIN_USERS["alice"]})
    wait_for(lambda: re.search(r"authenticated peer=\S+ principal=User:alice mechanism=PLAIN listener=SASL_SSL",
                               secure_broker.log_text()), 10, "the PLAIN login in the broker log")


@pytest.mark.skipif(KCAT is None, reason="kcat not installed")
def test_kcat_over_sasl_ssl_scram_sha_512(secure_broker: Any, certs: Certs) -> None:
    admin = AdminClient({"bootstrap.servers": secure_broker.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "kit", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"kit-pw",
            secrets.token_bytes(16))]).values():
        f.result(30)
    conf = {"security.protocol": "SASL_SSL", "ssl.ca.location": certs.path("ca.pem"),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kit", "sasl.password": "kit-pw"}
    _kcat_round_trip(f"127.0.0.1:{secure_broker.ports['SASL_SSL']}", conf, secure_broker)
    wait_for(lambda: re.search(r"authenticated peer=\S+ principal=User:kit mechanism=SCRAM-SHA-512 "
                               r"listener=SASL_SSL", secure_broker.log_text()), 10, "the SCRAM login in the broker log")
    # a wrong password: kcat gets nothing and fails
    bad = subprocess.run([KCAT, "-L", "-b", f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",  # type: ignore[list-item]
                          *[a for k, v in {**conf, "sasl.password": "nope"}.items() for a in ("-X", f"{k}={v}")],
                          "-m", "5"], text=True, timeout=60, capture_output=True)
    assert bad.returncode != 0
    assert "Authentication failed" in bad.stderr
