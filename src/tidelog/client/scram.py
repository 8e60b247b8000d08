"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) formulas both sides of the exchange use: Kafka's
``ScramMechanism`` (the mechanisms, their hash and minimum iteration count) and ``ScramFormatter`` (HMAC, the
salted password). The client's exchange is :func:`tidelog.client.security.sasl_tokens`; the broker's server side
and credential store are :mod:`tidelog.broker.security.sasl` and :mod:`tidelog.broker.security.scram`.
"""

from __future__ import annotations

import hashlib
import hmac

# Kafka's ScramMechanism: name -> (hash, type byte in Describe/AlterUserScramCredentials)
MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MIN_ITERATIONS = 4096  # ScramMechanism.minIterations()


def hmac_(alg: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, alg).digest()


def salted_password(alg: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) = PBKDF2 with HMAC-<alg> (RFC 5802 section 2.2; SASLprep is not applied,
    as Kafka's ScramFormatter, which uses the UTF-8 bytes)."""
    return hashlib.pbkdf2_hmac(alg, password.encode(), salt, iterations)
