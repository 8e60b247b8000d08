"""The pieces of listener security without a broker: principal mapping rules and DNs, JAAS parsing, SCRAM
credentials (RFC 5802 test vector arithmetic), the PLAIN and SCRAM servers' refusals, the credentials file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os

import pytest
from secsupport import scram_client_final

from tidelog.broker.config import BrokerConfig, ConfigException
from tidelog.broker.security.listeners import build_listeners
from tidelog.broker.security.sasl import PlainServer, SaslAuthenticationFailed, ScramServer
from tidelog.broker.security.scram import ScramCredential, ScramCredentialStore
from tidelog.broker.security.tls import NoMatchingRule, SslPrincipalMapper, iana_to_openssl, subject_dn
from tidelog.client.jaas import parse_jaas

CERT = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                    (("organizationalUnitName", "eng"),), (("commonName", "alice"),))}


def test_subject_dn_is_rfc2253_most_specific_first() -> None:
    assert subject_dn(CERT) == "CN=alice,OU=eng,O=Acme\\, Inc,C=US"


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        ("DEFAULT", "CN=alice,OU=eng", "CN=alice,OU=eng"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,DEFAULT", "CN=Alice,OU=ENG", "alice@eng"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1/U, DEFAULT", "CN=alice,OU=eng", "ALICE"),
        ("RULE:^CN=([^,]*),.*$/$1/,DEFAULT", "O=x", "O=x"),  # first rule does not match: DEFAULT
        ("RULE:^CN=(.*)$/u\\/$1/", "CN=bob", "u/bob"),  # escaped slash in the replacement
    ],
)
def test_principal_mapping_rules(rules: str, dn: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).name(dn) == expected


def test_no_matching_rule_fails() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to O=x"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")


def test_cipher_names() -> None:
    assert iana_to_openssl("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert iana_to_openssl("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert iana_to_openssl("TLS_AES_128_GCM_SHA256") is None  # TLS 1.3
    assert iana_to_openssl("ECDHE-RSA-AES256-GCM-SHA384") == "ECDHE-RSA-AES256-GCM-SHA384"


def test_parse_jaas() -> None:
    module, opts = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                              'username="admin" password="a \\"q\\" b" user_bob=bob-pw;')
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert opts == {"username": "admin", "password": 'a "q" b', "user_bob": "bob-pw"}
    with pytest.raises(ValueError):
        parse_jaas("PlainLoginModule username=x")  # no flag, no ';'


def test_plain_refusals_use_kafkas_messages() -> None:
    server = PlainServer({"alice": "pw"})
    for token, message in [
        (b"\x00alice\x00bad", "Authentication failed: Invalid username or password"),
        (b"\x00nobody\x00pw", "Authentication failed: Invalid username or password"),
        (b"alice\x00pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\x00\x00pw", "Authentication failed: username not specified"),
        (b"bob\x00alice\x00pw", "Authentication failed: Client requested an authorization id that is different "
                                "from username"),
    ]:
        with pytest.raises(SaslAuthenticationFailed) as info:
            PlainServer({"alice": "pw"}).evaluate(token)
        assert info.value.client_message == message
    assert server.evaluate(b"\x00alice\x00pw") == b"" and server.complete and server.authorization_id == "alice"


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_and_refusals(mech: str) -> None:
    cred = ScramCredential.from_password(mech, "pencil", 4096)
    lookup = {("user", mech): cred}.get

    def start() -> tuple[ScramServer, str, str]:
        s = ScramServer(mech, lambda u, m: lookup((u, m)))
        bare = "n=user,r=fyko+d2lbbFgONRv9qkxdawL"
        return s, bare, s.evaluate(("n,," + bare).encode()).decode()

    s, bare, first = start()
    assert first.startswith("r=fyko+d2lbbFgONRv9qkxdawL") and ",i=4096" in first
    final = s.evaluate(scram_client_final(mech, "pencil", bare, first).encode()).decode()
    alg = "sha256" if mech.endswith("256") else "sha512"
    fields = dict(f.split("=", 1) for f in first.split(","))
    salted = hashlib.pbkdf2_hmac(alg, b"pencil", base64.b64decode(fields["s"]), 4096)
    server_key = hmac.new(salted, b"Server Key", alg).digest()
    cf = scram_client_final(mech, "pencil", bare, first)
    auth = f"{bare},{first},{cf.rsplit(',p=', 1)[0]}".encode()
    assert final == "v=" + base64.b64encode(hmac.new(server_key, auth, alg).digest()).decode()
    assert s.complete and s.authorization_id == "user"
    for kwargs in ({"password": "wrong"}, {"nonce": "fyko+d2lbbFgONRv9qkxdawLforged"}, {"gs2": "y,,"}):
        s, bare, first = start()
        with pytest.raises(SaslAuthenticationFailed) as info:
            s.evaluate(scram_client_final(mech, kwargs.get("password", "pencil"), bare, first,
                                          gs2=kwargs.get("gs2", "n,,"), nonce=kwargs.get("nonce")).encode())
        assert info.value.client_message == (
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mech}")
    with pytest.raises(SaslAuthenticationFailed):  # unknown user
        ScramServer(mech, lambda u, m: None).evaluate(b"n,,n=nobody,r=abc")
    weak = ScramCredential.from_password(mech, "pencil", 1000)
    with pytest.raises(SaslAuthenticationFailed):  # below Kafka's 4096 iterations
        ScramServer(mech, lambda u, m: weak).evaluate(b"n,,n=user,r=abc")


def test_credentials_file_is_kafkas_text_and_atomic(tmp_path: os.PathLike) -> None:
    path = tmp_path / "tidelog-users.json"
    store = ScramCredentialStore(path)
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pw", 8192)
    store.alter([("bob", "SCRAM-SHA-512", cred)], [])
    raw = json.loads(path.read_text())
    text = raw["users"]["bob"]["SCRAM-SHA-512"]
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=8192") and "pw" not in text.split(",")
    assert ScramCredential.from_text(text) == cred
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert not (tmp_path / "tidelog-users.json.tmp").exists()
    # another store (another process) sees the change; deletion removes the user
    other = ScramCredentialStore(path)
    assert other.get("bob", "SCRAM-SHA-512") == cred
    other.alter([], [("bob", "SCRAM-SHA-512")])
    assert store.get("bob", "SCRAM-SHA-512") is None


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI"),  # Kafka's default mechanism
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}, "PlainLoginModule"),
        ({"listeners": "SSL://127.0.0.1:0"}, "JKS"),
        ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM"}, "key store"),
        ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent",
          "ssl.keystore.password": "topsecret"}, "cannot load"),
    ],
)
def test_bad_security_settings_are_clear_errors(props: dict, fragment: str) -> None:
    with pytest.raises(ConfigException) as info:
        build_listeners(BrokerConfig.from_properties({**props, "log.dirs": "/tmp/x"}))
    assert fragment in str(info.value)
    assert "topsecret" not in str(info.value)
