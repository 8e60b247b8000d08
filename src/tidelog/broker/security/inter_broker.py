"""The security of a broker's own connections to other brokers (replica fetchers): TLS with the inter-broker
listener's trust store (and key store, for mutual TLS), then SASL with ``sasl.mechanism.inter.broker.protocol``
and the ``username``/``password`` of that mechanism's JAAS config on the inter-broker listener
(``listener.name.<l>.<mechanism>.sasl.jaas.config``), as Kafka's inter-broker clients do. The connection itself
is tidelog's client's (:func:`tidelog.client.security.open_connection`)."""

from __future__ import annotations

import ssl
from typing import Any

from tidelog.broker.config import BrokerConfig, ConfigException
from tidelog.broker.security.listeners import listener_value
from tidelog.client.jaas import parse_jaas
from tidelog.client.security import SUPPORTED_MECHANISMS, ClientSecurity
from tidelog.client.tls import TlsConfigError, load_keystore, load_truststore


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
            load_truststore(ctx, get, ssl.Purpose.SERVER_AUTH)
            if get("ssl.keystore.location") or get("ssl.keystore.key"):
                load_keystore(ctx, get)
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
