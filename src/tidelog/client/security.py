"""The client side of listener security, shared by every tidelog connection that speaks the protocol itself:

* a broker's own connections to other brokers (replica fetchers), whose settings come from the broker's
  configuration (:func:`tidelog.broker.security.inter_broker.inter_broker_security`);
* the CLI commands that use :class:`tidelog.cluster.peer.Peer` and the Spark source's raw-fetch path: a Kafka
  client configuration, in the Java client's names (``security.protocol``, ``sasl.mechanism``,
  ``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``) or librdkafka's (``sasl.username``/
  ``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``/``ssl.key.location``)
  (:func:`client_security`).

SASL is SaslHandshake v1 then SaslAuthenticate, PLAIN or SCRAM-SHA-256/512 (the SCRAM formulas are shared with
the broker's server side, :mod:`tidelog.client.scram`); :func:`sasl_tokens` is the exchange, driven by an
asyncio (:func:`open_connection`) or a blocking (:func:`authenticate_blocking`) connection.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import secrets
import ssl
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.client.jaas import parse_jaas
from tidelog.client.scram import MECHANISMS, MIN_ITERATIONS, hmac_, salted_password
from tidelog.client.tls import TlsConfigError, load_keystore, load_truststore
from tidelog.protocol.framing import ClientConnection

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms tidelog speaks, as client and as broker."""
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class SaslClientError(ConnectionError):
    """The broker refused the SASL handshake or the credentials (the message is the broker's, or says which
    check failed)."""


class ClientConfigError(ValueError):
    """A client security setting is missing or invalid; ``name`` is the key (its value is never shown)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"Invalid value for configuration {name}: {reason}")
        self.name = name


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach the inter-broker listener of another broker."""

    listener: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


# Java client settings librdkafka does not take under the same name (or at all)
_JAVA_ONLY = frozenset({"ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "ssl.protocol",
                        "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
                        "sasl.login.class", "sasl.client.callback.handler.class"})
_JAAS_USER = re.compile(r'\busername\s*=\s*"((?:\\.|[^"\\])*)"')
_JAAS_PASSWORD = re.compile(r'\bpassword\s*=\s*"((?:\\.|[^"\\])*)"')


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """A Kafka (Java) client configuration turned into librdkafka settings: ``sasl.jaas.config``'s username
    and password become ``sasl.username``/``sasl.password``; PEM stores become ``ssl.ca.location`` /
    ``ssl.certificate.location`` + ``ssl.key.location``; a PKCS12 key store stays ``ssl.keystore.*``;
    ``ssl.endpoint.identification.algorithm=`` (empty) becomes ``none``; Java-only settings are dropped.
    librdkafka's own names pass unchanged. Raises :class:`ClientConfigError` for a trust store librdkafka
    cannot read (it reads PEM only)."""
    lower = {k.lower(): v for k, v in props.items()}
    out: dict[str, str] = {}
    truststore_type = str(lower.get("ssl.truststore.type") or "JKS").upper()
    keystore_type = str(lower.get("ssl.keystore.type") or "JKS").upper()
    for key, value in props.items():
        low = key.lower()
        if low in _JAVA_ONLY:
            continue
        if low == "sasl.jaas.config":
            user, password = _JAAS_USER.search(value), _JAAS_PASSWORD.search(value)
            if user and "sasl.username" not in lower:
                out["sasl.username"] = user.group(1)
            if password and "sasl.password" not in lower:
                out["sasl.password"] = password.group(1)
        elif low == "ssl.truststore.location":
            if truststore_type != "PEM":
                raise ClientConfigError("ssl.truststore.type", f"{truststore_type}: librdkafka reads PEM trust "
                                        "stores only (ssl.truststore.type=PEM)")
            out["ssl.ca.location"] = value
        elif low == "ssl.keystore.location" and keystore_type == "PEM":
            out["ssl.certificate.location"] = value
            out["ssl.key.location"] = value
        elif low == "ssl.key.password" and keystore_type == "PEM":
            out["ssl.key.password"] = value
        elif low == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        else:
            out[key] = value
    return out


def client_security(props: Mapping[str, Any]) -> ClientSecurity | None:
    """The security of a client configuration (Java client or librdkafka names, case-insensitive keys); None
    for PLAINTEXT. Raises :class:`ClientConfigError` naming the key of a bad setting."""
    low = {str(k).lower(): v for k, v in props.items()}

    def get(key: str) -> Any:
        value = low.get(key)
        return None if value is None or str(value) == "" else str(value)

    protocol = str(get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ClientConfigError("security.protocol", f"unknown protocol {protocol}")
    if protocol == "PLAINTEXT":
        return None
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = _client_ssl_context(get, low)
    mechanism, username, password = None, "", ""
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        key = "sasl.mechanism" if get("sasl.mechanism") else "sasl.mechanisms"
        mechanism = str(get(key) or "GSSAPI").upper()  # Kafka's default; not implemented here
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ClientConfigError("sasl.mechanism", f"{mechanism} is not supported; use one of "
                                    f"{', '.join(SUPPORTED_MECHANISMS)}")
        username, password = get("sasl.username") or "", get("sasl.password") or ""
        jaas = get("sasl.jaas.config")
        if jaas and not username:
            try:
                opts = parse_jaas(jaas)[1]
            except ValueError as exc:
                raise ClientConfigError("sasl.jaas.config", str(exc)) from None
            username, password = opts.get("username", ""), opts.get("password", "")
        if not username:
            raise ClientConfigError("sasl.jaas.config", f"{mechanism} needs a username and password "
                                    "(sasl.jaas.config, or sasl.username/sasl.password)")
    return ClientSecurity("client", protocol, ctx, mechanism, username, password)


def _client_ssl_context(get: Callable[[str], Any], low: Mapping[str, Any]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if get("ssl.truststore.location") or get("ssl.truststore.certificates"):
            load_truststore(ctx, get, ssl.Purpose.SERVER_AUTH)
        elif get("ssl.ca.location") or get("ssl.ca.pem"):  # librdkafka's names (PEM)
            try:
                ctx.load_verify_locations(cafile=get("ssl.ca.location"), cadata=get("ssl.ca.pem"))
            except (OSError, ssl.SSLError) as exc:
                raise TlsConfigError("ssl.ca.location", f"cannot load the CA certificates: {exc}") from None
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if get("ssl.keystore.location") or get("ssl.keystore.key"):
            # librdkafka's ssl.keystore.location is always PKCS12; Java's default type (JKS) is unreadable here
            load_keystore(ctx, lambda k: get(k) or ("PKCS12" if k == "ssl.keystore.type" and
                                                      not get("ssl.keystore.key") else None))
        elif get("ssl.certificate.location"):
            try:
                ctx.load_cert_chain(get("ssl.certificate.location"), get("ssl.key.location"),
                                    password=get("ssl.key.password"))
            except (OSError, ssl.SSLError) as exc:
                raise TlsConfigError("ssl.certificate.location", f"cannot load the client certificate: {exc}") \
                    from None
    except TlsConfigError as exc:
        raise ClientConfigError(exc.name, exc.reason) from None
    # both clients check the host name by default (Kafka: ssl.endpoint.identification.algorithm=https,
    # librdkafka >= 2.0 too); an empty value (Java) or "none" (librdkafka) turns it off
    algorithm = low.get("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = str("https" if algorithm is None else algorithm).strip().lower() == "https"
    if str(get("enable.ssl.certificate.verification") or "true").lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def open_connection(host: str, port: int, security: ClientSecurity | None,
                          client_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """Connect (TLS if the listener needs it) and authenticate (SASL if it needs it). Returns the streams and
    the next correlation id to use."""
    ctx = security.ssl_context if security is not None else None
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host if ctx else None)
    if security is None or security.mechanism is None:
        return reader, writer, 1
    conn = ClientConnection(client_id)

    async def call(api_key: int, version: int, body: dict) -> dict:
        _, data = conn.send(api_key, version, body)
        writer.write(data)
        await writer.drain()
        while (response := conn.next_response()) is None:
            conn.feed(await reader.readexactly(conn.missing))
        return response.body

    try:
        _handshake_result(await call(SASL_HANDSHAKE, 1, {"mechanism": security.mechanism}))
        tokens = sasl_tokens(security)
        token = next(tokens)
        while True:
            answer = _authenticate_result(await call(SASL_AUTHENTICATE, 2, {"auth_bytes": token}))
            try:
                token = tokens.send(answer)
            except StopIteration:
                break
    except BaseException:
        writer.close()
        raise
    return reader, writer, conn.next_correlation_id


def authenticate_blocking(request: Callable[[int, int, dict], dict], security: ClientSecurity) -> None:
    """SASL over a blocking connection: ``request(api_key, version, body)`` sends one request and returns its
    response body."""
    if security.mechanism is None:
        return
    _handshake_result(request(SASL_HANDSHAKE, 1, {"mechanism": security.mechanism}))
    tokens = sasl_tokens(security)
    token = next(tokens)
    while True:
        answer = _authenticate_result(request(SASL_AUTHENTICATE, 2, {"auth_bytes": token}))
        try:
            token = tokens.send(answer)
        except StopIteration:
            return


def _handshake_result(r: dict) -> None:
    if r["error_code"]:
        raise SaslClientError(f"SASL handshake refused (error code {r['error_code']}); the broker's mechanisms: "
                              f"{', '.join(r['mechanisms'] or []) or 'none'}")


def _authenticate_result(r: dict) -> bytes:
    if r["error_code"]:
        raise SaslClientError(f"SASL authentication failed: {r.get('error_message') or r['error_code']}")
    return bytes(r["auth_bytes"] or b"")


def sasl_tokens(security: ClientSecurity) -> Generator[bytes, bytes, None]:
    """The client's side of the SASL exchange: yields each token to send and is sent the broker's answer."""
    if security.mechanism == "PLAIN":
        yield f"\0{security.username}\0{security.password}".encode()
        return
    assert security.mechanism is not None
    alg = MECHANISMS[security.mechanism][0]
    name = security.username.replace("=", "=3D").replace(",", "=2C")
    nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    bare = f"n={name},r={nonce}"
    first = (yield ("n,," + bare).encode()).decode()
    fields = dict(f.split("=", 1) for f in first.split(",") if "=" in f)
    if not fields.get("r", "").startswith(nonce) or int(fields.get("i", 0)) < MIN_ITERATIONS:
        raise SaslClientError("invalid SCRAM server-first message")
    salted = salted_password(alg, security.password, base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac_(alg, salted, b"Client Key")
    without_proof = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
    auth = f"{bare},{first},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac_(alg, hashlib.new(alg, client_key).digest(), auth)))
    final = (yield f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    expected = "v=" + base64.b64encode(hmac_(alg, hmac_(alg, salted, b"Server Key"), auth)).decode()
    if not hmac.compare_digest(final, expected):
        raise SaslClientError("SCRAM server signature does not verify")
