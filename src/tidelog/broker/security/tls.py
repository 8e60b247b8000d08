"""TLS for SSL and SASL_SSL listeners, from Kafka's ``ssl.*`` settings (``SslConfigs``, ``BrokerSecurityConfigs``).

* Key store: ``ssl.keystore.type=PEM`` (``ssl.keystore.location`` a PEM file holding the certificate chain and the
  private key, or ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key`` inline; ``ssl.key.password`` for an
  encrypted key) or ``PKCS12`` (``ssl.keystore.location`` + ``ssl.keystore.password``, read with the
  ``cryptography`` package). Kafka's default type, JKS, cannot be read from Python: a clear error says so.
* Trust store (client certificates): ``ssl.truststore.type`` PEM (file or ``ssl.truststore.certificates``) or
  PKCS12; none given: the system's default CAs (Kafka: the JVM's).
* ``ssl.client.auth=none|requested|required``, ``ssl.enabled.protocols`` (TLSv1.2,TLSv1.3),
  ``ssl.cipher.suites`` (IANA names as Kafka/Java write them, or OpenSSL names; TLS 1.3 suites cannot be
  restricted through Python's ssl module and are always those OpenSSL enables).
* The principal of a client certificate: its subject DN in RFC 2253 form (as Java's ``X500Principal.getName()``)
  mapped by ``ssl.principal.mapping.rules`` (``DEFAULT`` and ``RULE:pattern/replacement/[LU]``, Kafka's
  ``SslPrincipalMapper``).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from typing import Any

from tidelog.client.tls import TlsConfigError, load_keystore, load_truststore

_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def iana_to_openssl(name: str) -> str | None:
    """``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``; a TLS 1.3 suite (no
    ``_WITH_``) -> None; an OpenSSL name is returned unchanged."""
    if not name.startswith("TLS_"):
        return name
    if "_WITH_" not in name:
        return None
    kx, _, enc = name[4:].partition("_WITH_")
    enc = re.sub(r"AES_(\d+)", r"AES\1", enc).replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    enc = enc.replace("_", "-")
    kx = "" if kx == "RSA" else kx.replace("_", "-") + "-"
    if kx.startswith("ECDHE-ECDSA") or kx.startswith("ECDHE-RSA") or kx.startswith("DHE-RSA"):
        return kx + enc
    return kx + enc


def build_server_context(get: Callable[[str], Any]) -> ssl.SSLContext:
    """An SSLContext for a listener. ``get(key)`` gives the effective value of an ``ssl.*`` key for that listener
    (its ``listener.name.<l>.`` override, else the broker's value, else Kafka's default)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # protocols
    enabled = _split(get("ssl.enabled.protocols"))
    versions = []
    for p in enabled:
        if p not in _PROTOCOLS:
            raise TlsConfigError("ssl.enabled.protocols", f"unknown protocol {p!r} (one of {', '.join(_PROTOCOLS)})")
        versions.append(_PROTOCOLS[p])
    if not versions:
        raise TlsConfigError("ssl.enabled.protocols", "no protocol enabled")
    try:
        ctx.minimum_version = min(versions)
        ctx.maximum_version = max(versions)
    except (ValueError, ssl.SSLError) as exc:
        raise TlsConfigError("ssl.enabled.protocols", str(exc)) from None
    # cipher suites (TLS 1.2 and below)
    suites = _split(get("ssl.cipher.suites"))
    if suites:
        names = [n for n in (iana_to_openssl(s) for s in suites) if n]
        if names:
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise TlsConfigError("ssl.cipher.suites", "no cipher suite in the list is supported") from None
    load_keystore(ctx, get)
    # client authentication
    mode = str(get("ssl.client.auth") or "none").strip().lower()
    if mode not in _CLIENT_AUTH:
        raise TlsConfigError("ssl.client.auth", f"{mode!r} is not one of none, requested, required")
    ctx.verify_mode = _CLIENT_AUTH[mode]
    if mode != "none":
        load_truststore(ctx, get)
    return ctx


# ---------------------------------------------------------------------------------------------- principals

# Python's attribute names -> RFC 2253 keywords (the ones Java's X500Principal.getName() writes)
_DN_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def _escape_dn_value(v: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", v)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(cert: dict) -> str:
    """The subject of a certificate (``SSLSocket.getpeercert()``) in RFC 2253 form, most specific RDN first:
    ``CN=client,OU=eng,O=Acme,C=US``. Attributes without an RFC 2253 keyword keep Python's name
    (Java writes their OID)."""
    rdns = []
    for rdn in cert.get("subject", ()):
        rdns.append("+".join(f"{_DN_KEYWORDS.get(k, k)}={_escape_dn_value(str(v))}" for k, v in rdn))
    return ",".join(reversed(rdns))


class NoMatchingRule(ValueError):
    pass


_RULE_RE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|\n|$)")


class SslPrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: the first rule whose pattern matches the whole DN gives the name
    (``DEFAULT``: the DN itself); ``/L`` and ``/U`` lower or upper the result; no rule matching fails."""

    def __init__(self, rules: str | None) -> None:
        text = (rules or "DEFAULT").strip()
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []
        pos = 0
        while pos < len(text):
            m = _RULE_RE.match(text, pos)
            if not m or m.end() == pos:
                raise TlsConfigError("ssl.principal.mapping.rules", f"invalid rule at {text[pos:pos + 40]!r}")
            if m.group(1):
                self.rules.append(None)
            else:
                pattern = m.group(2).replace("\\/", "/")
                repl = re.sub(r"\$(\d+)", r"\\g<\1>", m.group(3).replace("\\/", "/"))
                try:
                    self.rules.append((re.compile(pattern), repl, m.group(4) or ""))
                except re.error as exc:
                    raise TlsConfigError("ssl.principal.mapping.rules", f"bad pattern {pattern!r}: {exc}") from None
            pos = m.end()
        self.text = text

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, repl, case = rule
            if pattern.fullmatch(dn):
                out = pattern.sub(repl, dn, count=1)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.text}")
