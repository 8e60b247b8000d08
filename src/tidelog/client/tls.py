"""Kafka's key and trust stores (``ssl.keystore.*``, ``ssl.truststore.*``, ``SslConfigs``) loaded into an
``ssl.SSLContext``: the part of TLS the broker's listeners (:mod:`tidelog.broker.security.tls`) and tidelog's
clients (:mod:`tidelog.client.security`) share.

* Key store: ``ssl.keystore.type=PEM`` (``ssl.keystore.location`` a PEM file holding the certificate chain and the
  private key, or ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key`` inline; ``ssl.key.password`` for an
  encrypted key) or ``PKCS12`` (``ssl.keystore.location`` + ``ssl.keystore.password``, read with the
  ``cryptography`` package). Kafka's default type, JKS, cannot be read from Python: a clear error says so.
* Trust store: ``ssl.truststore.type`` PEM (file or ``ssl.truststore.certificates``) or PKCS12; none given: the
  system's default CAs (Kafka: the JVM's).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class TlsConfigError(ValueError):
    """A TLS setting is invalid; ``name`` is the config key (its value is never shown: it may be secret)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"Invalid value for configuration {name}: {reason}")
        self.name = name
        self.reason = reason


def _write_private(data: bytes, directory: str | None = None) -> str:
    fd, path = tempfile.mkstemp(prefix="tidelog-tls-", suffix=".pem", dir=directory)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def _pkcs12_load(path: str, password: str | None, name: str) -> tuple[Any, Any, list[Any]]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(name, f"cannot read {path}: {exc.strerror or exc}") from None
    # cryptography is imported only for a PKCS12 store (PEM needs only ssl): it is ~60 ms of every start-up otherwise
    from cryptography.hazmat.primitives.serialization import pkcs12 as _pkcs12

    try:
        return _pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise TlsConfigError(name, f"cannot open PKCS12 store {path} (wrong password or not PKCS12: {exc})") from None


def load_keystore(ctx: ssl.SSLContext, get: Callable[[str], Any]) -> None:
    kind = str(get("ssl.keystore.type") or "JKS").strip().upper()
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    key_password = get("ssl.key.password")
    if kind == "PEM":
        if location and (chain or key):
            raise TlsConfigError("ssl.keystore.location",
                                 "give either ssl.keystore.location or ssl.keystore.certificate.chain/key, not both")
        if location:
            try:
                ctx.load_cert_chain(location, password=key_password or None)
            except (OSError, ssl.SSLError) as exc:
                raise TlsConfigError("ssl.keystore.location", f"cannot load PEM key store {location}: {exc}") from None
            return
        if not (chain and key):
            raise TlsConfigError("ssl.keystore.location",
                                 "a TLS listener needs a key store (location, or certificate chain and key)")
        path = _write_private((key.strip() + "\n" + chain.strip() + "\n").encode())
        try:
            ctx.load_cert_chain(path, password=key_password or None)
        except ssl.SSLError as exc:
            raise TlsConfigError("ssl.keystore.key", f"cannot load the inline PEM key and chain: {exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return
    if kind == "PKCS12":
        if not location:
            raise TlsConfigError("ssl.keystore.location", "a PKCS12 key store needs ssl.keystore.location")
        from cryptography.hazmat.primitives import serialization as _ser  # (see _pkcs12_load)

        pkey, cert, extra = _pkcs12_load(location, get("ssl.keystore.password"), "ssl.keystore.location")
        if pkey is None or cert is None:
            raise TlsConfigError("ssl.keystore.location", f"{location} holds no private key and certificate")
        pem = pkey.private_bytes(_ser.Encoding.PEM, _ser.PrivateFormat.PKCS8, _ser.NoEncryption())
        pem += cert.public_bytes(_ser.Encoding.PEM)
        for c in extra or ():
            pem += c.public_bytes(_ser.Encoding.PEM)
        path = _write_private(pem)
        try:
            ctx.load_cert_chain(path)
        except ssl.SSLError as exc:
            raise TlsConfigError("ssl.keystore.location", f"cannot use the PKCS12 key store: {exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return
    raise TlsConfigError("ssl.keystore.type",
                         f"{kind} key stores are not supported: use PEM or PKCS12 (keytool -importkeystore "
                         "-deststoretype PKCS12 converts a JKS store)")


def load_truststore(ctx: ssl.SSLContext, get: Callable[[str], Any],
                     purpose: ssl.Purpose = ssl.Purpose.CLIENT_AUTH) -> None:
    kind = str(get("ssl.truststore.type") or "JKS").strip().upper()
    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    if not location and not inline:
        ctx.load_default_certs(purpose)
        return
    if kind == "PEM":
        try:
            if location:
                ctx.load_verify_locations(cafile=location)
            if inline:
                ctx.load_verify_locations(cadata=inline)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError("ssl.truststore.location", f"cannot load PEM trust store: {exc}") from None
        return
    if kind == "PKCS12":
        if not location:
            raise TlsConfigError("ssl.truststore.location", "a PKCS12 trust store needs ssl.truststore.location")
        from cryptography.hazmat.primitives import serialization as _ser  # (see _pkcs12_load)

        _, cert, extra = _pkcs12_load(location, get("ssl.truststore.password"), "ssl.truststore.location")
        certs = ([cert] if cert is not None else []) + list(extra or ())
        if not certs:
            raise TlsConfigError("ssl.truststore.location", f"{location} holds no certificate")
        ctx.load_verify_locations(cadata="".join(c.public_bytes(_ser.Encoding.PEM).decode() for c in certs))
        return
    raise TlsConfigError("ssl.truststore.type",
                         f"{kind} trust stores are not supported: use PEM or PKCS12")
