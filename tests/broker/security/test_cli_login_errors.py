"""The console tools on a listener they cannot use (issue 25 item 4): a wrong password, a PLAINTEXT client on a
SASL_SSL port and a broker certificate the client does not trust each end at once in one line that says what
failed (before: 30 s, then ``cannot fetch metadata: _TRANSPORT: ... Broker transport failure``), and
``consume --timeout-ms 5000`` does not wait 30 s either. A real broker with TLS and SASL listeners."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from secsupport import PLAIN_USERS, Certs

pytestmark = pytest.mark.integration


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - t0


def _props(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _sasl_ssl(b: Any) -> str:
    return f"127.0.0.1:{b.ports['SASL_SSL']}"


def _plain(user: str, password: str) -> str:
    return ('sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{user}" password="{password}";\n')


def _one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_wrong_password_is_a_refused_login_at_once(secure_broker: Any, certs: Certs, tmp_path: Path) -> None:
    props = _props(tmp_path, "wrong.properties", "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                   + _plain("alice", "not-her-password")
                   + f"ssl.truststore.type=PEM\nssl.truststore.location={certs.path('ca.pem')}\n")
    for args in (("topics", "list"), ("consume", "anything", "--timeout-ms", "5000"), ("groups", "list")):
        r, took = _cli(*args, "-b", _sasl_ssl(secure_broker), "--command-config", props)
        assert r.returncode == 1, r.stderr
        line = _one_error_line(r)
        assert line.startswith(f"Error: login to {_sasl_ssl(secure_broker)} failed: SASL authentication failed"), line
        assert took < 10, (args, took)
    good = _props(tmp_path, "good.properties", "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                  + _plain("alice", PLAIN_USERS["alice"])
                  + f"ssl.truststore.type=PEM\nssl.truststore.location={certs.path('ca.pem')}\n")
    r, _ = _cli("topics", "list", "-b", _sasl_ssl(secure_broker), "--command-config", good)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_plaintext_client_on_a_sasl_ssl_port(secure_broker: Any) -> None:
    r, took = _cli("topics", "list", "-b", _sasl_ssl(secure_broker))
    assert r.returncode == 1, r.stderr
    line = _one_error_line(r)
    assert f"{_sasl_ssl(secure_broker)}" in line and "security.protocol is PLAINTEXT" in line, line
    assert took < 10


def test_broker_certificate_not_trusted(secure_broker: Any, tmp_path: Path) -> None:
    """No trust store: the system's CAs do not know the test CA that signed the broker's certificate."""
    props = _props(tmp_path, "notrust.properties", "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                   + _plain("alice", PLAIN_USERS["alice"]))
    r, took = _cli("topics", "list", "-b", _sasl_ssl(secure_broker), "--command-config", props)
    assert r.returncode == 1, r.stderr
    line = _one_error_line(r)
    assert line.startswith(f"Error: TLS handshake with {_sasl_ssl(secure_broker)} failed: the broker's certificate "
                           "is not trusted"), line
    assert "ssl.truststore.location" in line
    assert took < 10
