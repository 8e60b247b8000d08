"""KIP-714 client telemetry (issue 27 item 5): GetTelemetrySubscriptions / PushTelemetry answered as a Kafka
broker without a ClientTelemetryReceiver answers them (nothing subscribed, pushes dropped), raw and through
librdkafka, which asks for a subscription when the broker advertises the API."""

from __future__ import annotations

import urllib.request
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers import RawClient, new_topic, wait_for

pytestmark = pytest.mark.integration

API_VERSIONS, GET_SUBSCRIPTIONS, PUSH = 18, 71, 72
INVALID_REQUEST, UNSUPPORTED_COMPRESSION_TYPE, UNKNOWN_SUBSCRIPTION_ID, TELEMETRY_TOO_LARGE = 42, 76, 117, 118


def _push(c: RawClient, instance: uuid.UUID, subscription: int, metrics: bytes = b"x", compression: int = 0) -> int:
    body = {"client_instance_id": instance, "subscription_id": subscription, "terminating": False,
            "compression_type": compression, "metrics": metrics}
    return int(c.request(PUSH, 0, body)["error_code"])


def test_subscription_is_empty_and_pushes_are_checked(broker_factory: Any) -> None:
    b = broker_factory({"telemetry.max.bytes": "1000"})
    with RawClient(b.port) as c:
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in c.request(API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"})["api_keys"]}
        assert keys[GET_SUBSCRIPTIONS] == (0, 0) and keys[PUSH] == (0, 0)
        first = c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": uuid.UUID(int=0)})
        assert first["error_code"] == 0
        instance = first["client_instance_id"]
        assert instance != uuid.UUID(int=0)
        assert first["requested_metrics"] == []  # nothing subscribed: the client pushes nothing
        assert first["push_interval_ms"] == 300000 and first["telemetry_max_bytes"] == 1000
        assert first["accepted_compression_types"] == [4, 3, 1, 2] and first["delta_temporality"] is True
        again = c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance})
        assert again["client_instance_id"] == instance and again["subscription_id"] == first["subscription_id"]
        sub = first["subscription_id"]
        assert _push(c, instance, sub) == 0
        assert _push(c, instance, sub + 1) == UNKNOWN_SUBSCRIPTION_ID
        assert _push(c, uuid.UUID(int=0), sub) == INVALID_REQUEST
        assert _push(c, instance, sub, compression=9) == UNSUPPORTED_COMPRESSION_TYPE
        assert _push(c, instance, sub, metrics=b"x" * 1001) == TELEMETRY_TOO_LARGE
        assert c.request(API_VERSIONS, 0, {})["error_code"] == 0  # the connection keeps serving


def test_librdkafka_asks_and_stays_quiet(broker_factory: Any) -> None:
    b = broker_factory()
    topic = new_topic("telemetry")
    logs: list[str] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.metrics.push": True, "debug": "telemetry",
                  "logger": _Collect(logs)})
    p.produce(topic, b"v")
    assert p.flush(30) == 0

    def asked() -> bool:
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
        return any(line.startswith("tidelog_requests_total") and "GET_TELEMETRY_SUBSCRIPTIONS" in line
                   for line in text.splitlines())

    wait_for(asked, 30, "librdkafka's GetTelemetrySubscriptions")
    p.flush(5)
    del p
    errors = [line for line in logs if "telemetry" in line.lower() and ("error" in line.lower()
                                                                        or "fail" in line.lower())]
    assert not errors, errors


class _Collect:
    """A ``logging.Logger`` stand-in for librdkafka's ``logger`` option."""

    def __init__(self, sink: list[str]) -> None:
        self.sink = sink

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.sink.append(fmt % args if args else fmt)
