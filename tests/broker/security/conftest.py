"""Fixtures for the listener security suites: certificates made at test time (``openssl`` CLI: a CA, a server
certificate for 127.0.0.1/localhost, client certificates; PEM and PKCS12 forms) and a real ``tidelog serve``
with one listener of each kind (``secsupport.secure_overrides``):

* ``PLAINTEXT`` (the harness's port; the admin's way in),
* ``SSL`` (PEM key store given inline, no client authentication),
* ``MTLS`` (a custom name mapped to SSL; PKCS12 key and trust stores, ``ssl.client.auth=required``, a principal
  mapping rule),
* ``SASL_PLAINTEXT`` (PLAIN, users from the JAAS config; SCRAM-SHA-256 too),
* ``SASL_SSL`` (SCRAM-SHA-512 and PLAIN over TLS, PEM key store file).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from secsupport import Certs, listener_ports, make_certs, secure_overrides


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(broker_factory: Any, certs: Certs) -> Iterator[Any]:
    b = broker_factory(secure_overrides(certs))
    b.ports = listener_ports(b)
    yield b


