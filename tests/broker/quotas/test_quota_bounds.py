"""Quota state stays bounded whatever the number of client ids (issue 24, item 2), on a real ``tidelog serve``.

With a ``<default>`` client-id quota every client id has its own rate (Kafka's ``/config/clients/<default>``),
so each new id used to add a sensor and a cached resolution for an hour. Here one raw client sends 20,000
produce requests, each with a new client id, to a broker whose tables hold at most 500 entries
(``tidelog.quota.sensors.max``): the counts read from ``/metrics`` stay within the bound, a client id over its
quota is still throttled after the flood, and the idle sensors expire (``tidelog.quota.sensor.expiration.ms``
set short, the gauge awaited)."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
from helpers import RawClient, create_topic_raw, new_topic, produce_body, wait_for

from tidelog.records.batch import RecordSpec, build_batch

pytestmark = pytest.mark.integration

PRODUCE, ALTER_CLIENT_QUOTAS = 0, 49
CAP = 500
EXPIRE_MS = 4000
QUOTA = 2_000_000  # bytes/s per client id


def gauges(b: Any, quota_type: str = "Produce") -> dict[str, float]:
    """The quota table gauges of one quota type, by metric name."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tidelog_quota_") and f'quota_type="{quota_type}"' in line and "user=" not in line:
            out[line.split("{", 1)[0]] = float(line.split()[-1])
    return out


@pytest.fixture(scope="module")
def bounded(broker_factory: Any) -> Any:
    return broker_factory({"quota.window.num": "2", "tidelog.quota.sensors.max": str(CAP),
                           "tidelog.quota.sensor.expiration.ms": str(EXPIRE_MS)})


def test_twenty_thousand_client_ids_keep_quota_state_bounded(bounded: Any) -> None:
    b = bounded
    topic = new_topic("qbound")
    with RawClient(b.port) as admin:
        assert create_topic_raw(admin, topic)["error_code"] == 0
        r = admin.request(ALTER_CLIENT_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": None}],
            "ops": [{"key": "producer_byte_rate", "value": float(QUOTA), "remove": False}]}],
            "validate_only": False})
        assert r["entries"][0]["error_code"] == 0
    small = build_batch([RecordSpec(None, b"x")])
    body = produce_body(topic, 0, small, acks=1)
    peak: dict[str, float] = {}
    with RawClient(b.port, timeout=60) as c:
        for chunk in range(100):  # 20,000 ids, 200 requests in flight at a time
            for i in range(200):
                c.conn.client_id = f"flood-{chunk * 200 + i}"
                c.send_request(PRODUCE, 9, body)
            for _ in range(200):
                part = c.response()["responses"][0]["partition_responses"][0]
                assert part["error_code"] == 0
            if chunk % 20 == 19:
                for name, value in gauges(b).items():
                    peak[name] = max(peak.get(name, 0.0), value)
    after = gauges(b)
    for name, value in after.items():
        peak[name] = max(peak.get(name, 0.0), value)
    # one table of at most CAP sensors (plus the overflow sensors, one per user and quota value: here one)
    assert 0 < peak["tidelog_quota_sensors"] <= CAP + 1, peak
    assert 0 < peak["tidelog_quota_resolutions_cached"] <= CAP, peak

    # a client id over its quota is still throttled after the flood
    big = build_batch([RecordSpec(None, b"y" * 500_000)])
    with RawClient(b.port, client_id="hog") as hog:
        throttles = []
        for _ in range(12):
            r = hog.request(PRODUCE, 9, produce_body(topic, 0, big, acks=1))
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
            throttles.append(r["throttle_time_ms"])
            if throttles[-1]:
                break
        assert throttles[-1] > 0, throttles
    # and the idle sensors expire (the gauge is read at scrape time, which also drops expired sensors)
    t0 = time.monotonic()
    wait_for(lambda: gauges(b).get("tidelog_quota_sensors") == 0, 30, "the idle quota sensors to expire")
    assert time.monotonic() - t0 < 30
