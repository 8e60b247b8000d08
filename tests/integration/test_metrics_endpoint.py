"""The broker's HTTP endpoint: /metrics with process and group-lag series, /healthz, /readyz, and a metrics port
that is taken failing the start with the address named (issue 25, item 11)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from helpers import confluent_produce, consume_all, new_topic, wait_for

pytestmark = pytest.mark.integration


def _get(broker: Any, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_health_and_readiness(broker: Any) -> None:
    assert _get(broker, "/healthz") == (200, "ok\n")
    assert _get(broker, "/readyz") == (200, "ready\n")
    assert _get(broker, "/nope")[0] == 404


def test_process_metrics(broker: Any) -> None:
    status, text = _get(broker, "/metrics")
    assert status == 200
    rss = _sample(text, "process_resident_memory_bytes")
    fds = _sample(text, "process_open_fds")
    assert rss is not None and rss > 10 * 2**20  # a Python broker holds more than 10 MiB
    assert fds is not None and fds >= 3
    assert (_sample(text, "process_max_fds") or 0) >= fds
    assert _sample(text, "process_cpu_seconds_total") is not None
    assert _sample(text, "python_gc_collections_total", generation="0") is not None


def test_group_lag_per_partition(broker: Any) -> None:
    topic, group = new_topic("lag"), new_topic("lag-g")
    confluent_produce(broker.bootstrap, topic, [{"value": b"v%d" % i} for i in range(10)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        c.close()

    def lag() -> float | None:
        return _sample(_get(broker, "/metrics")[1], "tidelog_consumergroup_lag", group=group, topic=topic,
                       partition="0")

    wait_for(lambda: lag() is not None, what="the lag series")
    assert lag() == 6.0
    text = _get(broker, "/metrics")[1]
    assert _sample(text, "tidelog_consumergroup_committed_offset", group=group, topic=topic, partition="0") == 4.0
    confluent_produce(broker.bootstrap, topic, [{"value": b"w"}] * 5)
    assert wait_for(lambda: lag() == 11.0, what="lag after 5 more records")


def test_taken_metrics_port_fails_the_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "tidelog.cli.main", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
             "-o", f"tidelog.metrics.listener=127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )
    assert proc.returncode == 1, proc.stderr
    assert f"metrics listener 127.0.0.1:{port} cannot be bound" in proc.stderr
    assert "broker started" not in proc.stderr


_ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"\b((?:tidelog|process|python)_[a-z_]+)\b")
# series a single standalone broker without quotas exports only in cluster mode or with quotas configured
_CLUSTER_OR_QUOTA = {
    "tidelog_replicamanager_partition_count", "tidelog_replicamanager_leader_count",
    "tidelog_replicamanager_under_replicated_partitions", "tidelog_replicamanager_under_min_isr_partitions",
    "tidelog_replica_follower_lag_messages", "tidelog_quota_throttle_time_ms_total", "tidelog_quota_rate",
    "tidelog_quota_bound",
    "tidelog_fd_exhausted_total",
    "tidelog_quota_sensors", "tidelog_quota_resolutions_cached", "tidelog_quota_sensors_evicted_total",
    "tidelog_quota_sensors_overflowed_total",  # only once a descriptor ran out (tests/broker/security/test_descriptor_limits.py)
    # a follower's replica fetchers (ZooKeeper mode; tests/cluster/test_replication.py reads them)
    "tidelog_replica_fetcher_requests", "tidelog_replica_fetcher_partitions", "tidelog_replica_fetcher_empty_responses",
    # once a share group exists on the broker (tests/broker/group/share/test_share_group_init.py reads them)
    "tidelog_share_fetch_requests_total", "tidelog_share_acknowledgement_requests_total",
    "tidelog_share_records_acquired_total", "tidelog_share_record_acknowledgements_total",
    "tidelog_share_group_rebalances_total", "tidelog_share_groups", "tidelog_share_group_members",
    "tidelog_share_state_initializations_total", "tidelog_share_state_partitions",
    "tidelog_share_partition_in_flight_records", "tidelog_share_partition_in_flight_batches",
}


def _exported(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            names.add(name)
            names.add(re.sub(r"_(bucket|count|sum|created)$", "", name))
    return names


def test_dashboard_and_docs_name_exported_series(broker: Any) -> None:
    """Every series the Grafana dashboard queries and docs/METRICS.md lists is one a broker exports (after some
    traffic), so the dashboard works on a real broker; cluster- and quota-only series are checked against the
    sources that make them."""
    topic, group = new_topic("dash"), new_topic("dash-g")
    confluent_produce(broker.bootstrap, topic, [{"value": b"x"}] * 3)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        with pytest.raises(KafkaException):  # an error answer: tidelog_errors_total
            c.commit(offsets=[TopicPartition(topic, 7, 1)], asynchronous=False)
    finally:
        c.close()
    assert len(consume_all(broker.bootstrap, topic)) == 3  # bytes out
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:  # a frame the broker refuses
        s.sendall(b"\xff\xff\xff\xff")
        assert s.recv(1) == b""  # closed by the broker: tidelog_connections_closed_total{reason}
    dashboard = json.loads((_ROOT / "examples/grafana/tidelog-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    in_dashboard = {n for e in exprs for n in _NAME.findall(e)}
    in_docs = set(_NAME.findall((_ROOT / "docs/METRICS.md").read_text()))
    assert len(in_dashboard) >= 15 and len(in_docs) >= 30
    sources = "\n".join(p.read_text() for p in (_ROOT / "src/tidelog").rglob("*.py"))
    for name in sorted((in_dashboard | in_docs) & _CLUSTER_OR_QUOTA):
        assert f'"{name}"' in sources or f'"{name.removesuffix("_total")}"' in sources, name
    wanted = (in_dashboard | in_docs) - _CLUSTER_OR_QUOTA

    def missing() -> set[str]:
        return wanted - _exported(_get(broker, "/metrics")[1])

    try:  # counters of events (a closed connection) appear once the broker has seen one
        wait_for(lambda: not missing(), timeout=10, what="every named series")
    except AssertionError:
        pass
    assert missing() == set()
