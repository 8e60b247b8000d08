"""The client side of listener security, for a broker's own connections to other brokers (replica fetchers):
TLS with the inter-broker listener's trust store (and key store, for mutual TLS), then SASL with
``sasl.mechanism.inter.broker.protocol`` and the ``username``/``password`` of that mechanism's JAAS config on the
inter-broker listener (``listener.name.<l>.<mechanism>.sasl.jaas.config``), as Kafka's inter-broker clients do.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import ssl
from dataclasses import dataclass
from typing import Any

from tidelog.broker.config import BrokerConfig, ConfigException
from tidelog.broker.security.listeners import listener_value
from tidelog.broker.security.sasl import SUPPORTED_MECHANISMS, parse_jaas
from tidelog.broker.security.scram import MECHANISMS, MIN_ITERATIONS, hmac_, salted_password
from tidelog.broker.security.tls import TlsConfigError, _load_keystore, _load_truststore
from tidelog.protocol.framing import ClientConnection

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class SaslClientError(ConnectionError):
    pass


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach the inter-broker listener of another broker."""

    listener: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    li = config.listener
    protocol = config.security_protocol_map[li.name]

    def get(key: str) -> Any:
        return listener_value(config, li.name, key)

    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            ctx.verify_mode = ssl.CERT_REQUIRED
            _load_truststore(ctx, get, ssl.Purpose.SERVER_AUTH)
            if get("ssl.keystore.location") or get("ssl.keystore.key"):
                _load_keystore(ctx, get)
        except TlsConfigError as exc:
            raise ConfigException(exc.name, get(exc.name), exc.reason) from None
        ctx.check_hostname = str(get("ssl.endpoint.identification.algorithm") or "").lower() == "https"
    mechanism, username, password = None, "", ""
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigException("sasl.mechanism.inter.broker.protocol", mechanism,
                                  f"a SASL inter-broker listener needs one of {', '.join(SUPPORTED_MECHANISMS)}")
        key = f"listener.name.{li.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        jaas = config.props.get(key)
        opts = parse_jaas(jaas)[1] if jaas else {}
        username, password = opts.get("username", ""), opts.get("password", "")
        if not username:
            raise ConfigException(key, jaas, "the inter-broker client needs username=\"...\" password=\"...\"")
    return ClientSecurity(li.name, protocol, ctx, mechanism, username, password)


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
        r = await call(SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
        if r["error_code"]:
            raise SaslClientError(f"SASL handshake refused ({r['error_code']}), mechanisms {r['mechanisms']}")
        if security.mechanism == "PLAIN":
            await _authenticate(call, f"\0{security.username}\0{security.password}".encode())
        else:
            await _scram(call, security)
    except BaseException:
        writer.close()
        raise
    return reader, writer, conn.next_correlation_id


async def _authenticate(call: Any, token: bytes) -> bytes:
    r = await call(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
    if r["error_code"]:
        raise SaslClientError(f"SASL authentication failed: {r.get('error_message')}")
    return bytes(r["auth_bytes"] or b"")


async def _scram(call: Any, security: ClientSecurity) -> None:
    assert security.mechanism is not None
    alg = MECHANISMS[security.mechanism][0]
    name = security.username.replace("=", "=3D").replace(",", "=2C")
    nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    bare = f"n={name},r={nonce}"
    first = (await _authenticate(call, ("n,," + bare).encode())).decode()
    fields = dict(f.split("=", 1) for f in first.split(",") if "=" in f)
    if not fields.get("r", "").startswith(nonce) or int(fields.get("i", 0)) < MIN_ITERATIONS:
        raise SaslClientError("invalid SCRAM server-first message")
    salted = salted_password(alg, security.password, base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac_(alg, salted, b"Client Key")
    without_proof = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
    auth = f"{bare},{first},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac_(alg, hashlib.new(alg, client_key).digest(), auth)))
    final = (await _authenticate(call, f"{without_proof},p={base64.b64encode(proof).decode()}".encode())).decode()
    expected = "v=" + base64.b64encode(hmac_(alg, hmac_(alg, salted, b"Server Key"), auth)).decode()
    if not hmac.compare_digest(final, expected):
        raise SaslClientError("SCRAM server signature does not verify")
