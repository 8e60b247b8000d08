"""The broker's listeners as Kafka configures them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, and per-listener security settings (``listener.name.<l>.<key>`` over the
broker's ``<key>``; SASL's JAAS settings per mechanism: ``listener.name.<l>.<mechanism>.sasl.jaas.config``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from tidelog.broker.config import BROKER_KEYS, BrokerConfig, ConfigException, Listener
from tidelog.broker.security.sasl import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE
from tidelog.broker.security.tls import SslPrincipalMapper, build_server_context
from tidelog.client.jaas import parse_jaas
from tidelog.client.security import SUPPORTED_MECHANISMS
from tidelog.client.tls import TlsConfigError


@dataclass(slots=True)
class ListenerSettings:
    """One listener: where it binds, what it advertises, its security protocol and, for TLS/SASL, what that
    needs (an SSLContext, a principal mapper, the enabled mechanisms and PLAIN's users)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised: Listener | None = None
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    sasl_max_receive_size: int = 524288
    reauth_ms: int = 0

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def listener_value(config: BrokerConfig, listener: str, key: str, mechanism: str | None = None) -> Any:
    """The effective value of ``key`` for ``listener``: ``listener.name.<l>.[<mech>.]<key>``, else the broker's
    value, else Kafka's default (raw strings; numbers are parsed by the caller)."""
    props = config.props
    prefix = f"listener.name.{listener.lower()}."
    if mechanism is not None and (prefix + mechanism.lower() + "." + key) in props:
        return props[prefix + mechanism.lower() + "." + key]
    if prefix + key in props:
        return props[prefix + key]
    if key in props:
        return props[key]
    k = BROKER_KEYS.get(key)
    return k.default if k is not None else None


def build_listeners(config: BrokerConfig) -> list[ListenerSettings]:
    """Every listener with its security settings; a bad setting raises ConfigException naming the key."""
    pmap = config.security_protocol_map
    out: list[ListenerSettings] = []
    for li in config.listeners:
        protocol = pmap[li.name]
        s = ListenerSettings(li.name, protocol, li.host, li.port, advertised=config.advertised_for(li.name))

        def get(key: str, _l: str = li.name) -> Any:
            return listener_value(config, _l, key)

        if s.tls:
            try:
                s.ssl_context = build_server_context(get)
                s.principal_mapper = SslPrincipalMapper(get("ssl.principal.mapping.rules"))
            except TlsConfigError as exc:
                prefixed = f"listener.name.{li.name.lower()}.{exc.name}"
                key = prefixed if prefixed in config.props else exc.name
                raise ConfigException(key, get(exc.name), exc.reason) from None
        if s.sasl:
            _sasl_settings(config, s)
        out.append(s)
    return out


def _sasl_settings(config: BrokerConfig, s: ListenerSettings) -> None:
    raw = listener_value(config, s.name, "sasl.enabled.mechanisms") or ""
    mechs = tuple(m.strip().upper() for m in str(raw).split(",") if m.strip())
    key = f"listener.name.{s.name.lower()}.sasl.enabled.mechanisms"
    if not mechs:
        raise ConfigException(key, raw, "a SASL listener needs at least one mechanism")
    for m in mechs:
        if m not in SUPPORTED_MECHANISMS:
            raise ConfigException(key, raw, f"mechanism {m} is not supported by tidelog (supported: "
                                  f"{', '.join(SUPPORTED_MECHANISMS)}); note Kafka's default is GSSAPI")
    s.sasl_mechanisms = mechs
    for m in mechs:
        jaas_key = f"listener.name.{s.name.lower()}.{m.lower()}.sasl.jaas.config"
        jaas = config.props.get(jaas_key)
        if jaas is None:
            if m == "PLAIN":
                raise ConfigException(jaas_key, None, "PLAIN needs a PlainLoginModule with user_<name>=\"<password>\" "
                                      "entries")
            continue
        try:
            module, opts = parse_jaas(jaas)
        except ValueError as exc:
            raise ConfigException(jaas_key, jaas, str(exc)) from None
        expected = PLAIN_LOGIN_MODULE if m == "PLAIN" else SCRAM_LOGIN_MODULE
        if module != expected:
            raise ConfigException(jaas_key, jaas, f"{m} needs {expected}, not {module}")
        if m == "PLAIN":
            s.plain_users = {k[5:]: v for k, v in opts.items() if k.startswith("user_") and len(k) > 5}
    try:
        s.sasl_max_receive_size = int(listener_value(config, s.name, "sasl.server.max.receive.size"))
        s.reauth_ms = int(listener_value(config, s.name, "connections.max.reauth.ms"))
    except (TypeError, ValueError) as exc:
        raise ConfigException("sasl.server.max.receive.size / connections.max.reauth.ms", "", str(exc)) from None
