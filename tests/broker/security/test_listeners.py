"""TLS and SASL listeners of a real ``tidelog serve`` (see conftest.py for the five listeners), driven by
confluent-kafka, kafka-python, aiokafka and a raw protocol client: round trips, refusals (and the connection closed, as
Kafka does), SCRAM credentials through the admin APIs and the CLI, and their survival across a restart."""

from __future__ import annotations

import base64
import os
import re
import secrets
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from helpers import RawClient, confluent_consume, confluent_produce, new_topic, wait_for
from secsupport import PLAIN_USERS, REAUTH_MS, Certs, listener_ports, scram_client_final, ssl_client_conf

API_VERSIONS, METADATA, PRODUCE, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 0, 17, 36
ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 34, 33, 58


def boot(b: Any, name: str) -> str:
    return f"127.0.0.1:{b.ports[name]}"


def client_ssl_context(certs: Certs, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs.path("ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(certs.path(f"{cert}.pem"), certs.path(f"{cert}.key"))
    return ctx


class SecureRaw(RawClient):
    """The raw protocol client, over TLS when given a context."""

    def __init__(self, port: int, ctx: ssl.SSLContext | None = None) -> None:
        super().__init__(port)
        if ctx is not None:
            self.sock = ctx.wrap_socket(self.sock, server_hostname="localhost")

    def closed_by_server(self, seconds: float = 5.0) -> bool:
        self.sock.settimeout(seconds)
        try:
            return self.sock.recv(65536) == b""
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def handshake(c: RawClient, mechanism: str, version: int = 1) -> dict:
    return c.request(SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(c: RawClient, token: bytes, version: int = 2) -> dict:
    return c.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})


def plain_login(c: RawClient, user: str, password: str, version: int = 2) -> dict:
    assert handshake(c, "PLAIN")["error_code"] == 0
    return authenticate(c, f"\0{user}\0{password}".encode(), version)


def add_scram_user(b: Any, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                   iterations: int = 4096) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    mech = ScramMechanism[mechanism.replace("-", "_")]
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(mech, iterations), password.encode(), secrets.token_bytes(16))])
    for f in futures.values():
        f.result(30)


def scram_conf(user: str, password: str, mechanism: str = "SCRAM-SHA-512", protocol: str = "SASL_SSL",
               certs: Certs | None = None) -> dict:
    conf = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}
    if certs is not None:
        conf["ssl.ca.location"] = certs.path("ca.pem")
    return conf


def round_trip(bootstrap: str, n: int = 20, **conf: Any) -> None:
    topic = new_topic("sec")
    confluent_produce(bootstrap, topic, [{"value": b"v%d" % i + b"x" * 1024} for i in range(n)], **conf)
    got = confluent_consume(bootstrap, topic, n, **conf)
    assert [m.value()[:4].rstrip(b"x") for m in got] == [b"v%d" % i for i in range(n)]


def kafka_python_round_trip(bootstrap: str, **conf: Any) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic("sec-kp")
    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    try:
        for i in range(10):
            producer.send(topic, value=b"kp%d" % i, partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000,
                             **conf)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = []
        for m in consumer:
            values.append(m.value)
            if len(values) == 10:
                break
    finally:
        consumer.close()
    assert values == [b"kp%d" % i for i in range(10)]


# ------------------------------------------------------------------------------------------------ round trips


def test_confluent_round_trips_on_every_secured_listener(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    add_scram_user(b, "carol", "carol-pw")
    round_trip(boot(b, "SSL"), **ssl_client_conf(certs))
    round_trip(boot(b, "MTLS"), **ssl_client_conf(certs), **{"ssl.certificate.location": certs.path("client.pem"),
                                                              "ssl.key.location": certs.path("client.key")})
    round_trip(boot(b, "SASL_PLAINTEXT"), **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                             "sasl.username": "alice", "sasl.password": PLAIN_USERS["alice"]})
    round_trip(boot(b, "SASL_SSL"), **scram_conf("carol", "carol-pw", certs=certs))
    # the principals: the certificate's DN mapped by the rule, the SASL user names
    for line in ("principal=User:ALICE", "principal=User:alice mechanism=PLAIN listener=SASL_PLAINTEXT",
                 "principal=User:carol mechanism=SCRAM-SHA-512 listener=SASL_SSL"):
        wait_for(lambda line=line: line in b.log_text(), 10, line)


def test_kafka_python_round_trips(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    add_scram_user(b, "dave", "dave-pw")
    kafka_python_round_trip(boot(b, "SSL"), security_protocol="SSL", ssl_cafile=certs.path("ca.pem"))
    kafka_python_round_trip(boot(b, "SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                            sasl_plain_username="alice", sasl_plain_password=PLAIN_USERS["alice"])
    kafka_python_round_trip(boot(b, "SASL_SSL"), security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                            sasl_plain_username="dave", sasl_plain_password="dave-pw", ssl_cafile=certs.path("ca.pem"))


def test_aiokafka_round_trip_over_sasl_ssl_scram(secure_broker: Any, certs: Certs) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    b = secure_broker
    add_scram_user(b, "kim", "kim-pw")
    topic = new_topic("sec-aio")
    conf = {"bootstrap_servers": boot(b, "SASL_SSL"), "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "kim", "sasl_plain_password": "kim-pw",
            "ssl_context": create_ssl_context(cafile=certs.path("ca.pem"))}

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"aio%d" % i, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[bytes] = []
            async with asyncio.timeout(20):
                while len(out) < 5:
                    for msgs in (await consumer.getmany(timeout_ms=500)).values():
                        out += [m.value for m in msgs]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"aio%d" % i for i in range(5)]


def test_metadata_advertises_the_listener_the_client_came_in_on(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    for name, conf in [("PLAINTEXT", {}), ("SSL", ssl_client_conf(certs)),
                       ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                           "sasl.username": "admin", "sasl.password": PLAIN_USERS["admin"]})]:
        md = AdminClient({"bootstrap.servers": boot(b, name), **conf}).list_topics(timeout=20)
        assert [(x.host, x.port) for x in md.brokers.values()] == [("127.0.0.1", b.ports[name])], name


# ------------------------------------------------------------------------------------------------------- TLS


def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    # no certificate; one signed by a CA the broker does not trust; one from the trusted CA that has expired
    for cert in (None, "stranger", "expired"):
        refused = False
        try:
            c = SecureRaw(b.ports["MTLS"], client_ssl_context(certs, cert))
            c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        except (ssl.SSLError, ConnectionError, OSError):
            refused = True
        assert refused, f"a client with certificate {cert} was served"
    wait_for(lambda: "Failed authentication (SSL handshake failed)" in b.log_text(), 10, "the broker's log line")
    wait_for(lambda: "certificate has expired" in b.log_text(), 10, "the expired certificate's refusal")
    # a trusted one is served on the same listener
    with SecureRaw(b.ports["MTLS"], client_ssl_context(certs, "client")) as c:
        assert c.request(API_VERSIONS, 3, {"client_software_name": "t",
                                           "client_software_version": "1"})["error_code"] == 0


def test_plaintext_client_on_a_tls_listener_is_closed(secure_broker: Any) -> None:
    with SecureRaw(secure_broker.ports["SSL"]) as c:
        c.send_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert c.closed_by_server()


def test_fetch_over_tls_copies_file_regions(secure_broker: Any, certs: Certs) -> None:
    """Fetch answers are file regions (sendfile on PLAINTEXT): under TLS they are read and encrypted; a response
    of several MiB crosses many TLS chunks."""
    b = secure_broker
    topic = new_topic("sec-big")
    values = [os.urandom(100_000) for _ in range(40)]
    confluent_produce(b.bootstrap, topic, [{"value": v} for v in values])
    got = confluent_consume(boot(b, "SSL"), topic, len(values), **ssl_client_conf(certs))
    assert [m.value() for m in got] == values


# ------------------------------------------------------------------------------------------------------ SASL


def test_wrong_password_is_refused_and_the_connection_closed(secure_broker: Any) -> None:
    with SecureRaw(secure_broker.ports["SASL_PLAINTEXT"]) as c:
        r = plain_login(c, "alice", "wrong")
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert r["error_message"] == "Authentication failed: Invalid username or password"
        assert c.closed_by_server()
    # librdkafka reports it too
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": boot(secure_broker, "SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong",
                  "error_cb": errors.append})
    wait_for(lambda: p.poll(0.2) is not None and errors, 20, "an authentication error")
    assert any("Invalid username or password" in e.str() for e in errors), errors


def test_requests_before_authentication_close_the_connection(secure_broker: Any) -> None:
    port = secure_broker.ports["SASL_PLAINTEXT"]
    with SecureRaw(port) as c:  # ApiVersions is allowed, Produce is not
        assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
        c.send_request(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": []})
        assert c.closed_by_server()
    with SecureRaw(port) as c:  # after the handshake, only SaslAuthenticate
        assert handshake(c, "PLAIN")["error_code"] == 0
        c.send_request(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        assert c.closed_by_server()
    wait_for(lambda: "Unexpected Kafka request of type PRODUCE during SASL handshake." in secure_broker.log_text(),
             10, "the broker's log line")


def test_an_oversized_frame_before_authentication_closes_the_connection(secure_broker: Any,
                                                                        certs: Certs) -> None:
    b = secure_broker
    with SecureRaw(b.ports["SASL_PLAINTEXT"]) as c:
        c.send(struct.pack(">i", 524288 + 1) + b"\0" * 4096)  # sasl.server.max.receive.size + 1
        assert c.closed_by_server()
    # once authenticated, socket.request.max.bytes applies: a 700 KB record goes through
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
            "sasl.password": PLAIN_USERS["alice"]}
    topic = new_topic("sec-large")
    confluent_produce(boot(b, "SASL_PLAINTEXT"), topic, [{"value": b"y" * 700_000}], **conf)
    assert confluent_consume(boot(b, "SASL_PLAINTEXT"), topic, 1, **conf)[0].value() == b"y" * 700_000


def test_a_mechanism_not_enabled_is_refused(secure_broker: Any) -> None:
    with SecureRaw(secure_broker.ports["SASL_PLAINTEXT"]) as c:
        r = handshake(c, "SCRAM-SHA-512")
        assert r["error_code"] == UNSUPPORTED_SASL_MECHANISM
        assert r["mechanisms"] == ["PLAIN", "SCRAM-SHA-256"]
        assert c.closed_by_server()


def test_handshake_v0_carries_raw_tokens(secure_broker: Any) -> None:
    with SecureRaw(secure_broker.ports["SASL_PLAINTEXT"]) as c:
        assert handshake(c, "PLAIN", version=0)["error_code"] == 0
        token = b"\0alice\0" + PLAIN_USERS["alice"].encode()
        c.send(struct.pack(">i", len(token)) + token)
        c.sock.settimeout(5)
        assert c.sock.recv(4) == struct.pack(">i", 0)  # PLAIN's empty challenge, size-prefixed, no header
        md = c.request(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        assert md["brokers"][0]["port"] == secure_broker.ports["SASL_PLAINTEXT"]
    with SecureRaw(secure_broker.ports["SASL_PLAINTEXT"]) as c:  # v0 and a wrong password: closed, no answer
        assert handshake(c, "PLAIN", version=0)["error_code"] == 0
        token = b"\0alice\0nope"
        c.send(struct.pack(">i", len(token)) + token)
        assert c.closed_by_server()


def test_sasl_requests_after_authentication_are_illegal_state(secure_broker: Any) -> None:
    with SecureRaw(secure_broker.ports["SASL_PLAINTEXT"]) as c:  # SaslAuthenticate v0: no re-authentication
        assert plain_login(c, "alice", PLAIN_USERS["alice"], version=0)["error_code"] == 0
        assert handshake(c, "PLAIN")["error_code"] == ILLEGAL_SASL_STATE
        r = authenticate(c, b"\0alice\0x")
        assert r["error_code"] == ILLEGAL_SASL_STATE
        assert r["error_message"] == "SaslAuthenticate request received after successful authentication"
    with SecureRaw(secure_broker.port) as c:  # a listener without SASL
        assert handshake(c, "PLAIN")["error_code"] == ILLEGAL_SASL_STATE


def test_reauthentication_kip368(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    ctx = client_ssl_context(certs)
    with SecureRaw(b.ports["SASL_SSL"], ctx) as c:  # same principal again: fine; the lifetime is announced
        r = plain_login(c, "alice", PLAIN_USERS["alice"])
        assert r["error_code"] == 0 and r["session_lifetime_ms"] == REAUTH_MS
        r = plain_login(c, "alice", PLAIN_USERS["alice"])
        assert r["error_code"] == 0 and r["session_lifetime_ms"] == REAUTH_MS
        r = plain_login(c, "admin", PLAIN_USERS["admin"])  # another principal: refused, closed
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert r["error_message"] == "Cannot change principals during re-authentication from User:alice: User:admin"
        assert c.closed_by_server()
    with SecureRaw(b.ports["SASL_SSL"], ctx) as c:  # a request after the session expired closes the connection
        assert plain_login(c, "alice", PLAIN_USERS["alice"])["error_code"] == 0
        t_expired = time.monotonic() + REAUTH_MS / 1000 + 0.2
        while time.monotonic() < t_expired:  # the session's lifetime passing is the event awaited here
            time.sleep(t_expired - time.monotonic())
        c.send_request(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        assert c.closed_by_server()
    # librdkafka re-authenticates on its own (KIP-368) while it keeps producing past two session lifetimes
    add_scram_user(b, "judy", "judy-pw")
    conf = scram_conf("judy", "judy-pw", certs=certs)
    topic = new_topic("sec-reauth")
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": boot(b, "SASL_SSL"), "linger.ms": 5, **conf})
    deadline, n = time.monotonic() + 2.5 * REAUTH_MS / 1000, 0
    while time.monotonic() < deadline:
        p.produce(topic, value=b"r%d" % n, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        n += 1
        p.poll(0.05)
    assert p.flush(30) == 0 and errors == []
    assert len(confluent_consume(boot(b, "SASL_SSL"), topic, n, **conf)) == n
    wait_for(lambda: re.search(r"re-authenticated peer=\S+ principal=User:judy mechanism=SCRAM-SHA-512",
                               b.log_text()), 10, "the broker's re-authentication log line")


def _scram_first(c: RawClient, mech: str, user: str, client_nonce: str) -> tuple[str, str]:
    assert handshake(c, mech)["error_code"] == 0
    bare = f"n={user},r={client_nonce}"
    r = authenticate(c, ("n,," + bare).encode())
    assert r["error_code"] == 0, r
    return bare, bytes(r["auth_bytes"]).decode()


def test_scram_forged_and_replayed_nonces_are_refused(secure_broker: Any) -> None:
    b = secure_broker
    add_scram_user(b, "erin", "erin-pw", mechanism="SCRAM-SHA-256")
    port, mech, nonce = b.ports["SASL_PLAINTEXT"], "SCRAM-SHA-256", base64.b64encode(os.urandom(18)).decode()
    with SecureRaw(port) as c:  # a good exchange, whose client-final is kept
        bare, first = _scram_first(c, mech, "erin", nonce)
        final = scram_client_final(mech, "erin-pw", bare, first)
        r = authenticate(c, final.encode())
        assert r["error_code"] == 0 and bytes(r["auth_bytes"]).startswith(b"v=")
    with SecureRaw(port) as c:  # replayed: the server's nonce differs this time
        bare, first2 = _scram_first(c, mech, "erin", nonce)
        assert first2 != first
        r = authenticate(c, final.encode())
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert r["error_message"] == ("Authentication failed during authentication due to invalid credentials "
                                      "with SASL mechanism SCRAM-SHA-256")
        assert c.closed_by_server()
    with SecureRaw(port) as c:  # a nonce that is not the server's, with a proof computed for it
        bare, first = _scram_first(c, mech, "erin", nonce)
        r = authenticate(c, scram_client_final(mech, "erin-pw", bare, first, nonce=nonce + "forged").encode())
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert c.closed_by_server()


def test_failed_logins_do_not_log_the_user_name(secure_broker: Any) -> None:
    """A password typed into the user field must not reach the broker's log (issue 24): failed PLAIN and SCRAM
    logins are logged without the user name they sent, and the client still gets Kafka's answer."""
    b = secure_broker
    port = b.ports["SASL_PLAINTEXT"]
    secret_plain = "Hunter2-" + secrets.token_hex(8)
    secret_scram = "Tr0ub4dor-" + secrets.token_hex(8)
    before = len(b.log_text())
    with SecureRaw(port) as c:  # PLAIN: no such user (its "name" is a password)
        r = plain_login(c, secret_plain, "whatever")
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert r["error_message"] == "Authentication failed: Invalid username or password"
        assert c.closed_by_server()
    with SecureRaw(port) as c:  # PLAIN: a known user, the wrong password
        r = plain_login(c, "alice", secret_plain + "-pw")
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
    with SecureRaw(port) as c:  # SCRAM: an unknown user in the client-first message
        assert handshake(c, "SCRAM-SHA-256")["error_code"] == 0
        r = authenticate(c, f"n,,n={secret_scram},r=abcdefgh".encode())
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED
        assert r["error_message"] == ("Authentication failed during authentication due to invalid credentials "
                                      "with SASL mechanism SCRAM-SHA-256")
        assert c.closed_by_server()
    wait_for(lambda: b.log_text()[before:].count("Failed authentication") >= 3, 10,
             "the three failed logins in the broker's log")
    text = b.log_text()[before:]
    assert secret_plain not in text and secret_scram not in text, text


# ------------------------------------------------------------------------------------------ SCRAM admin APIs


def test_alter_and_describe_scram_credentials(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    add_scram_user(b, "frank", "frank-pw", iterations=8192)
    desc = admin.describe_user_scram_credentials(["frank"])["frank"].result(20)
    assert [(i.mechanism, i.iterations) for i in desc.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512,
                                                                                    8192)]
    round_trip(boot(b, "SASL_SSL"), n=2, **scram_conf("frank", "frank-pw", certs=certs))
    # Kafka's refusals
    futs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "weak", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1024), b"pw", b"salt")])
    with pytest.raises(KafkaException, match="Too few iterations"):
        futs["weak"].result(20)
    futs = admin.alter_user_scram_credentials([UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(KafkaException, match="does not exist"):
        futs["nobody"].result(20)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(20)
    # deleted: the login fails
    for f in admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            "frank", ScramMechanism.SCRAM_SHA_512)]).values():
        f.result(20)
    with SecureRaw(b.ports["SASL_SSL"], client_ssl_context(certs)) as c:
        assert handshake(c, "SCRAM-SHA-512")["error_code"] == 0
        r = authenticate(c, b"n,,n=frank,r=abcdefgh")
        assert r["error_code"] == SASL_AUTHENTICATION_FAILED


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_users_and_command_config(secure_broker: Any, certs: Certs, tmp_path: Path) -> None:
    b = secure_broker
    admin_props = tmp_path / "admin.properties"
    admin_props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="{PLAIN_USERS["admin"]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.path('ca.pem')}\n")
    r = _cli("users", "add", "grace", "--password", "grace-pw", "-m", "SCRAM-SHA-512", "--iterations", "4096",
             "-b", boot(b, "SASL_SSL"), "--command-config", str(admin_props))
    assert r.returncode == 0, r.stderr
    r = _cli("users", "list", "-b", boot(b, "SASL_SSL"), "--command-config", str(admin_props))
    assert r.returncode == 0, r.stderr
    assert any(line.split()[:3] == ["grace", "SCRAM-SHA-512", "4096"] for line in r.stdout.splitlines()), r.stdout
    grace_props = tmp_path / "grace.properties"
    grace_props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="grace" '
        'password="grace-pw";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.path('ca.pem')}\n")
    topic = new_topic("sec-cli")
    r = _cli("topics", "create", topic, "-b", boot(b, "SASL_SSL"), "--command-config", str(grace_props))
    assert r.returncode == 0, r.stderr
    r = _cli("topics", "list", "-b", boot(b, "SASL_SSL"), "--command-config", str(grace_props))
    assert r.returncode == 0 and topic in r.stdout, r.stderr
    r = _cli("users", "remove", "grace", "-b", boot(b, "SASL_SSL"), "--command-config", str(admin_props))
    assert r.returncode == 0, r.stderr
    r = _cli("topics", "list", "-b", boot(b, "SASL_SSL"), "--command-config", str(grace_props), "--timeout", "5")
    assert r.returncode != 0


def test_credentials_survive_a_restart_and_offline_changes(secure_broker: Any, certs: Certs) -> None:
    b = secure_broker
    add_scram_user(b, "heidi", "heidi-pw")
    b.restart()
    b.ports = listener_ports(b)
    round_trip(boot(b, "SASL_SSL"), n=2, **scram_conf("heidi", "heidi-pw", certs=certs))
    # tidelog users --data-dir changes the file of a running broker: picked up at the next login
    r = _cli("users", "add", "ivan", "--password", "ivan-pw", "-m", "SCRAM-SHA-512", "--data-dir", str(b.data_dir))
    assert r.returncode == 0, r.stderr
    round_trip(boot(b, "SASL_SSL"), n=2, **scram_conf("ivan", "ivan-pw", certs=certs))
