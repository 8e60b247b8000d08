"""Names for the connection's logs and metrics: an API key's name, an error code's name, and the ApiVersions answer
to a version the broker does not serve (KIP-511), shared by the request loop and the SASL authenticator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.broker.handlers.api_versions import api_versions_list
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

API_VERSIONS_KEY = ApiKey.API_VERSIONS
PRODUCE_KEY = ApiKey.PRODUCE
SASL_HANDSHAKE_KEY = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE_KEY = ApiKey.SASL_AUTHENTICATE


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


_API_NAMES: dict[int, str] = {}


def api_name(api_key: int) -> str:
    name = _API_NAMES.get(api_key)
    if name is None:
        name = _API_NAMES[api_key] = _api_name(api_key)
    return name


def error_name(code: int) -> str:
    try:
        return error_for_code(code).name
    except Exception:
        return str(code)


def api_versions_unsupported_body(broker: Broker) -> dict:
    return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": api_versions_list(broker.handlers), "throttle_time_ms": 0}
