"""KIP-714 client telemetry: GetTelemetrySubscriptions (71) and PushTelemetry (72), issue 27 item 5.

tidelog has no ``ClientTelemetryReceiver`` (Kafka's plugin that exports what clients push), so it answers as a
Kafka broker's ``ClientMetricsManager`` does for a client no ``client-metrics`` subscription matches:

* GetTelemetrySubscriptions: no error, a client instance id (a new random one when the request's is zero, else
  the client's), a subscription id, no requested metrics (an empty list means "no metrics subscribed", so the
  client never pushes), the accepted compression types (zstd, lz4, gzip, snappy, Kafka's order), the default push
  interval (``ClientMetricsConfigs.DEFAULT_INTERVAL_MS``, 5 minutes: the client asks again after it) and
  ``telemetry.max.bytes`` (default 1 MiB);
* PushTelemetry: INVALID_REQUEST for a zero or reserved client instance id, UNKNOWN_SUBSCRIPTION_ID for a
  subscription id this broker did not hand out to that instance, UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE
  for a payload over ``telemetry.max.bytes``; otherwise no error and the metrics are dropped (there is no
  receiver to export them to).

Differences from Kafka: Kafka does not advertise 71/72 in ApiVersions when no receiver plugin is configured
(``ClientMetricsManager.isTelemetryReceiverConfigured``); tidelog advertises them and answers as above, so a client
that asks gets a definite "nothing subscribed" rather than an unsupported API. tidelog keeps no per-client state
(Kafka caches client instances and throttles a GetTelemetrySubscriptions sent before the push interval): the
subscription id is derived from the client instance id, so nothing a client sends makes the broker hold memory.
Neither API needs an ACL (KafkaApis checks none).
"""

from __future__ import annotations

import uuid
import zlib

from tidelog.broker.handlers import RequestContext, handles
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

DEFAULT_INTERVAL_MS = 5 * 60 * 1000  # ClientMetricsConfigs.DEFAULT_INTERVAL_MS
TELEMETRY_MAX_BYTES_DEFAULT = 1024 * 1024  # telemetry.max.bytes
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]  # zstd, lz4, gzip, snappy (ClientMetricsManager's order)
_NONE_COMPRESSION = 0
# Kafka's Uuid.RESERVED: the zero id and the metadata topic's id (0x...01)
_RESERVED = {uuid.UUID(int=0), uuid.UUID(int=1)}


def _uuid(value: object) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | bytearray) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(int=0)


def subscription_id(instance: uuid.UUID) -> int:
    """The (empty) subscription's id for a client instance: stable, derived, nothing stored."""
    v = zlib.crc32(instance.bytes + DEFAULT_INTERVAL_MS.to_bytes(4, "big"))
    return v - (1 << 32) if v >= (1 << 31) else v


def _max_bytes(ctx: RequestContext) -> int:
    raw = ctx.broker.config.props.get("telemetry.max.bytes")
    try:
        return max(1, int(raw)) if raw is not None else TELEMETRY_MAX_BYTES_DEFAULT
    except ValueError:
        return TELEMETRY_MAX_BYTES_DEFAULT


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
async def get_telemetry_subscriptions(ctx: RequestContext, request: dict) -> dict:
    instance = _uuid(request.get("client_instance_id"))
    if instance in _RESERVED:
        instance = uuid.uuid4()
        while instance in _RESERVED:  # pragma: no cover - 2^-122
            instance = uuid.uuid4()
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "client_instance_id": instance,
        "subscription_id": subscription_id(instance),
        "accepted_compression_types": list(ACCEPTED_COMPRESSION_TYPES),
        "push_interval_ms": DEFAULT_INTERVAL_MS,
        "telemetry_max_bytes": _max_bytes(ctx),
        "delta_temporality": True,
        "requested_metrics": [],
    }


@handles(ApiKey.PUSH_TELEMETRY)
async def push_telemetry(ctx: RequestContext, request: dict) -> dict:
    instance = _uuid(request.get("client_instance_id"))
    metrics = request.get("metrics") or b""
    compression = int(request.get("compression_type", 0))
    if instance in _RESERVED:
        code: int = ErrorCode.INVALID_REQUEST
    elif int(request.get("subscription_id", 0)) != subscription_id(instance):
        code = ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    elif compression != _NONE_COMPRESSION and compression not in ACCEPTED_COMPRESSION_TYPES:
        code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    elif len(metrics) > _max_bytes(ctx):
        code = ErrorCode.TELEMETRY_TOO_LARGE
    else:
        code = 0  # no receiver plugin: nothing to export the metrics to
    return {"throttle_time_ms": 0, "error_code": code}
