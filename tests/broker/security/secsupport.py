"""Helpers of the listener security suites (certificates made with the ``openssl`` CLI, the broker's listener
overrides, a SCRAM client's arithmetic); the fixtures are in conftest.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import subprocess
from pathlib import Path
from typing import Any

PASSWORD = "store-pass"
REAUTH_MS = 2000  # KIP-368 session lifetime on the SASL_SSL listener
PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}

_LISTENERS = re.compile(r"listeners=(\S+)")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key_and_csr(d: Path, name: str, subject: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", subject, cwd=d)


def _sign(d: Path, name: str, ca: str = "ca", ext: str | None = None) -> None:
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2"]
    if ext:
        (d / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=d)


class Certs:
    def __init__(self, d: Path) -> None:
        self.dir = d

    def path(self, name: str) -> str:
        return str(self.dir / name)


def _expired_client(d: Path) -> None:
    """``expired.pem``/``.key``: a client certificate from the trusted CA whose validity ended yesterday (made
    with ``cryptography``: openssl's ``x509 -req`` cannot date a certificate in the past)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alice")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=3)).not_valid_after(now - datetime.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))
    (d / "expired.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "expired.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))


def make_certs(d: Path) -> Certs:
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=tidelog-test-{ca}", cwd=d)
    _key_and_csr(d, "server", "/CN=localhost")
    _sign(d, "server", ext="subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _key_and_csr(d, "client", "/C=US/O=Acme/OU=eng/CN=alice")
    _sign(d, "client")
    _key_and_csr(d, "stranger", "/CN=mallory")
    _sign(d, "stranger", ca="other-ca")
    _expired_client(d)
    for name in ("server", "client", "stranger", "expired"):
        (d / f"{name}-bundle.pem").write_text((d / f"{name}.pem").read_text() + (d / f"{name}.key").read_text())
    _openssl("pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-out", "server.p12",
             "-passout", f"pass:{PASSWORD}", cwd=d)
    _openssl("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", "trust.p12", "-passout", f"pass:{PASSWORD}",
             cwd=d)
    return Certs(d)


def plain_jaas(users: dict[str, str]) -> str:
    entries = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return f'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" ' \
           f'password="admin-secret" {entries};'


def secure_overrides(certs: Certs) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        # SSL: PEM, inline (newlines escaped as a properties file would carry them)
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.certificate.chain": (certs.dir / "server.pem").read_text().strip(),
        "listener.name.ssl.ssl.keystore.key": (certs.dir / "server.key").read_text().strip(),
        # MTLS: PKCS12 stores, client certificates required, CN upper-cased by a rule
        "listener.name.mtls.ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.keystore.location": certs.path("server.p12"),
        "listener.name.mtls.ssl.keystore.password": PASSWORD,
        "listener.name.mtls.ssl.truststore.type": "PKCS12",
        "listener.name.mtls.ssl.truststore.location": certs.path("trust.p12"),
        "listener.name.mtls.ssl.truststore.password": PASSWORD,
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=.*$/$1/U,DEFAULT",
        # SASL
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": certs.path("server-bundle.pem"),
        "listener.name.sasl_ssl.connections.max.reauth.ms": str(REAUTH_MS),
    }


def listener_ports(broker: Any) -> dict[str, int]:
    """The bound port of each listener, from the broker's "broker started" log line (the last start)."""
    found = _LISTENERS.findall(broker.log_text())
    assert found, "no listeners in the broker log"
    out = {}
    for item in found[-1].split(","):
        m = re.match(r"([A-Z_]+)\([A-Z_]+\)://[^:]+:(\d+)", item)
        assert m, item
        out[m.group(1)] = int(m.group(2))
    return out


def ssl_client_conf(certs: Certs) -> dict[str, Any]:
    return {"security.protocol": "SSL", "ssl.ca.location": certs.path("ca.pem")}


def scram_client_final(mech: str, password: str, client_first_bare: str, server_first: str,
                       gs2: str = "n,,", nonce: str | None = None) -> str:
    alg = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech]
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(alg, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", alg).digest()
    stored = hashlib.new(alg, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={nonce or fields['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    sig = hmac.new(stored, auth, alg).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"
