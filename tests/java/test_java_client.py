"""The Apache Kafka Java client (kafka-clients 3.9.0) against a real ``tidelog serve``.

Each test runs one scenario of JavaClientCheck.java in a JVM; the program reports what the client saw as JSON
lines and the assertions are here. Where it helps, what the broker stored is checked on disk too, decoded by
``tidelog.records`` independently of the Java client.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from helpers import metric_value

from tidelog.records import CompressionType, decode_batches

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 20
TS_BASE = 1_700_000_000_000
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


@pytest.fixture(scope="module")
def jbroker(broker_factory: Any) -> Any:
    # short group timers so the two-member group forms within the test's time budget
    return broker_factory({"group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000"})


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def by_event(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The single event of each kind (kinds that repeat are read from the list)."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        out.setdefault(e["event"], e)
    return out


def batches_on_disk(data_dir: Path, topic: str, partition: int = 0) -> list[tuple[Any, list[Any]]]:
    out = []
    for seg in sorted((Path(data_dir) / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        end = 0
        for pos, header, records in decode_batches(data):
            assert pos == end, f"{seg.name}: gap at {pos}"
            end = pos + header.size
            out.append((header, records))
        assert end == len(data), f"{seg.name}: trailing bytes"
    return out


def test_client_version(java_client: Any) -> None:
    ev = by_event(java_client.run("version"))
    assert ev["version"]["version"] == "3.9.0"


# --------------------------------------------------------------------------------------------- 1. admin


def test_admin_topic_lifecycle(java_client: Any, jbroker: Any) -> None:
    topic = name("java-admin")
    events = java_client.run("admin", jbroker.bootstrap, topic, broker=jbroker)
    ev = by_event(events)

    cluster = ev["cluster"]
    assert [(n["host"], n["port"]) for n in cluster["nodes"]] == [("127.0.0.1", jbroker.port)]
    node_id = cluster["nodes"][0]["id"]
    assert cluster["controller"] == node_id
    assert cluster["cluster_id"]

    created = ev["created"]
    assert created["partitions"] == 3 and created["replication_factor"] == 1
    assert created["configs"]["retention.ms"] == "7200000"
    assert created["configs"]["cleanup.policy"] == "delete"
    assert created["topic_id"] != ZERO_UUID
    assert ev["create_again"]["error"] == "TopicExistsException"

    described = ev["described"]
    assert described["name"] == topic and described["internal"] is False
    assert described["topic_id"] == created["topic_id"]
    assert described["partitions"] == [
        {"partition": p, "leader": node_id, "replicas": [node_id], "isr": [node_id]} for p in range(3)
    ]

    entries = ev["configs"]["entries"]
    assert entries["retention.ms"] == {"value": "7200000", "source": "DYNAMIC_TOPIC_CONFIG", "default": False,
                                       "read_only": False, "sensitive": False}
    assert entries["cleanup.policy"]["value"] == "delete"
    assert entries["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    # a config left alone comes from the broker's defaults
    assert entries["segment.bytes"]["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
    assert entries["segment.bytes"]["value"] == "1073741824"
    assert {"max.message.bytes", "compression.type", "min.insync.replicas"} <= entries.keys()

    assert topic in ev["listed"]["names"]

    assert ev["produced"]["ends"] == {"0": 10, "1": 10, "2": 10}
    assert ev["deleted_records"]["low_watermarks"] == {"0": 4, "1": 10}
    assert ev["delete_records_beyond_end"]["error"] == "OffsetOutOfRangeException"
    assert ev["earliest_after_delete"]["offsets"] == {"0": 4, "1": 10, "2": 0}
    assert ev["read_after_delete"]["offsets"] == list(range(4, 10))
    assert ev["read_after_delete"]["values"] == [f"v0-{i}" for i in range(4, 10)]

    assert "topic_deleted" in ev
    assert ev["after_delete"] == {"event": "after_delete", "listed": False,
                                  "describe_error": "UnknownTopicOrPartitionException"}


# ------------------------------------------------------------------------------------ 2. produce / consume


def test_idempotent_produce_every_codec_and_read_back(java_client: Any, jbroker: Any) -> None:
    topic = name("java-roundtrip")
    events = java_client.run("roundtrip", jbroker.bootstrap, topic, broker=jbroker)
    sent = [e for e in events if e["event"] == "sent"]
    read = [e for e in events if e["event"] == "read"]
    n = PER_CODEC * len(CODECS)
    assert [s["codec"] for s in sent] == [c for c in CODECS for _ in range(PER_CODEC)]
    assert [s["offset"] for s in sent] == list(range(n))
    assert by_event(events)["end_offset"]["offset"] == n

    # the data covers what it claims to: null and empty keys/values, null header values, repeated header keys
    assert any(s["key"] is None for s in sent) and any(s["key"] == "" for s in sent)
    assert any(s["value"] is None for s in sent) and any(s["value"] == "" for s in sent)
    assert any(h[1] is None for s in sent for h in s["headers"])
    assert any([h[0] for h in s["headers"]].count("dup") == 2 for s in sent)

    fields = ("partition", "offset", "timestamp", "key", "value", "headers")
    assert len(read) == n
    for s, r in zip(sent, read, strict=True):
        assert {f: r[f] for f in fields} == {f: s[f] for f in fields}, f"offset {s['offset']} ({s['codec']})"
        assert r["timestamp_type"] == "CreateTime"

    # on disk: each producer's records arrived compressed with its codec, in idempotent batches
    want_codec = {s["offset"]: CompressionType[s["codec"].upper()] for s in sent}
    batches = batches_on_disk(jbroker.data_dir, topic)
    pids_by_codec: dict[str, set[int]] = defaultdict(set)
    first_seq: dict[str, int] = {}
    stored = {}
    for header, records in batches:
        codecs = {want_codec[r.offset] for r in records}
        assert codecs == {CompressionType(header.compression)}, f"batch at {header.base_offset}"
        codec = sent[header.base_offset]["codec"]
        assert header.producer_id >= 0 and header.producer_epoch >= 0, "idempotent batches carry a producer id"
        pids_by_codec[codec].add(header.producer_id)
        first_seq.setdefault(codec, header.base_sequence)
        for r in records:
            stored[r.offset] = r
    assert all(len(p) == 1 for p in pids_by_codec.values()), pids_by_codec
    assert len({next(iter(p)) for p in pids_by_codec.values()}) == len(CODECS), "one producer id per producer"
    assert first_seq == dict.fromkeys(CODECS, 0)
    assert sorted(stored) == list(range(n))
    for s in sent:
        r = stored[s["offset"]]
        assert r.timestamp == s["timestamp"]
        assert (None if r.key is None else r.key.hex()) == s["key"]
        assert (None if r.value is None else r.value.hex()) == s["value"]
        assert [[k, None if v is None else v.hex()] for k, v in r.headers] == s["headers"]


# ----------------------------------------------------------------------------------------- 3. offsets


def test_offsets_for_times_beginning_end(java_client: Any, jbroker: Any) -> None:
    topic = name("java-offsets")
    events = java_client.run("offsets", jbroker.bootstrap, topic, broker=jbroker)
    ev = by_event(events)
    assert ev["beginning"]["offsets"] == {"0": 0, "1": 0, "2": 0}
    assert ev["end"]["offsets"] == {"0": 10, "1": 6, "2": 0}

    # p0: TS_BASE + 1000*i (offsets 0..9); p1: TS_BASE + 500 + 2000*i (offsets 0..4), then TS_BASE + 100 (offset 5)
    expected = {
        (0, TS_BASE - 1): (0, TS_BASE),
        (0, TS_BASE): (0, TS_BASE),
        (0, TS_BASE + 1500): (2, TS_BASE + 2000),
        (0, TS_BASE + 9000): (9, TS_BASE + 9000),
        (0, TS_BASE + 9001): (None, None),
        (1, TS_BASE): (0, TS_BASE + 500),
        (1, TS_BASE + 501): (1, TS_BASE + 2500),
        (1, TS_BASE + 8500): (4, TS_BASE + 8500),
        (1, TS_BASE + 8501): (None, None),
        (2, TS_BASE): (None, None),
    }
    got = {(e["partition"], e["target"]): (e["offset"], e["timestamp"]) for e in events if e["event"] == "for_time"}
    assert got == expected

    admin = {e["spec"]: e["result"] for e in events if e["event"] == "admin_list_offsets"}
    assert {p: v["offset"] for p, v in admin["earliest"].items()} == {"0": 0, "1": 0, "2": 0}
    assert {p: v["offset"] for p, v in admin["latest"].items()} == {"0": 10, "1": 6, "2": 0}
    assert admin["max_timestamp"]["0"] == {"offset": 9, "timestamp": TS_BASE + 9000}
    assert admin["max_timestamp"]["1"] == {"offset": 4, "timestamp": TS_BASE + 8500}
    assert admin["max_timestamp"]["2"]["offset"] == -1


# ---------------------------------------------------------------------------------------- 4. groups


def test_consumer_group_split_commit_resume_describe(java_client: Any, jbroker: Any) -> None:
    topic, group = name("java-group"), name("java-g")
    sessions_before = metric_value(jbroker, "tidelog_fetch_sessions_created")
    events = java_client.run("group", jbroker.bootstrap, topic, group, broker=jbroker)
    # the Java consumer fetches through incremental fetch sessions (KIP-227): it opened some here
    assert metric_value(jbroker, "tidelog_fetch_sessions_created") > sessions_before
    ev = by_event(events)
    assert ev["split_empty"]["ok"] is True, "two members never split the partitions"
    assert ev["split"]["ok"] is True, events

    members = {e["name"]: e for e in events if e["event"] == "member"}
    assert set(members) == {"java-member-a", "java-member-b"}
    a, b = members["java-member-a"], members["java-member-b"]
    assert a["assignment"] and b["assignment"]
    assert sorted(a["assignment"] + b["assignment"]) == [0, 1, 2, 3]
    for m in (a, b):
        # each member read exactly its own partitions, every record once
        assert m["consumed"] == {str(p): list(range(10)) for p in m["assignment"]}, m

    groups = ev["list_groups"]["groups"]
    assert groups[group] == {"simple": False, "state": "STABLE"}

    active = ev["describe_active"]
    assert active["group_id"] == group and active["state"] == "STABLE" and active["simple"] is False
    assert active["assignor"] == "range"
    assert active["coordinator"] is not None and active["coordinator"] >= 0
    described = {m["client_id"]: m for m in active["members"]}
    assert set(described) == {"java-member-a", "java-member-b"}
    for client_id, m in members.items():
        d = described[client_id]
        assert d["member_id"] == m["member_id"]
        assert d["host"].lstrip("/") == "127.0.0.1"
        assert d["group_instance_id"] is None
        assert d["assignment"] == [f"{topic}:{p}" for p in m["assignment"]]

    assert ev["committed_active"]["offsets"] == {f"{topic}:{p}": 10 for p in range(4)}
    assert ev["members_closed"] == {"event": "members_closed", "alive": False, "failure": None}
    empty = ev["describe_empty"]
    assert empty["state"] == "EMPTY" and empty["members"] == []

    fresh = ev["fresh_member"]
    assert fresh["assignment"] == [0, 1, 2, 3]
    assert fresh["committed_seen"] == {str(p): 10 for p in range(4)}
    assert fresh["consumed"] == {str(p): list(range(10, 15)) for p in range(4)}, "did not resume at the commits"
    assert ev["committed_final"]["offsets"] == {f"{topic}:{p}": 15 for p in range(4)}


# ----------------------------------------------------------------------------------------- 5. storage admin


def test_describe_log_dirs_and_producers(java_client: Any, jbroker: Any) -> None:
    """Admin.describeLogDirs and Admin.describeProducers (what kafka-log-dirs.sh and kafka-transactions.sh
    describe-producers call) report the partition sizes on disk and the idempotent producer the log holds."""
    topic = name("java-storage")
    events = java_client.run("storage", jbroker.bootstrap, topic, broker=jbroker)
    dirs = [e for e in events if e["event"] == "log_dir"]
    assert [d["path"] for d in dirs] == [str(Path(jbroker.data_dir).resolve())]
    assert dirs[0]["error"] is None and 0 < dirs[0]["usable_bytes"] <= dirs[0]["total_bytes"]
    replicas = {e["partition"]: e for e in events if e["event"] == "replica"}
    on_disk = {p: sum(f.stat().st_size for f in (Path(jbroker.data_dir) / f"{topic}-{p}").glob("*.log"))
               for p in (0, 1)}
    assert {p: r["size"] for p, r in replicas.items()} == on_disk and on_disk[0] > 0 == on_disk[1]
    assert all(r["offset_lag"] == 0 and r["future"] is False for r in replicas.values())
    producers = [e for e in events if e["event"] == "producer"]
    batches = batches_on_disk(jbroker.data_dir, topic)
    pids = {h.producer_id for h, _ in batches}
    assert len(pids) == 1 and [p["partition"] for p in producers] == [0]  # partition 1 has no producer
    p = producers[0]
    assert p["producer_id"] == next(iter(pids)) and p["epoch"] == batches[-1][0].producer_epoch
    assert p["last_sequence"] == PER_CODEC - 1 and p["txn_start"] == -1
    assert p["last_timestamp"] == max(h.max_timestamp for h, _ in batches)


# ------------------------------------------------------------------------------------- 6. transactions


def test_transactional_producer_commit_abort_read_committed(java_client: Any, jbroker: Any) -> None:
    topic = name("java-txn")
    events = java_client.run("txn", jbroker.bootstrap, topic, broker=jbroker)
    ev = by_event(events)
    assert "initialized" in ev

    def recs(prefixes: list[str], part: int) -> list[str]:
        return [f"{x}-{part}-{i}" for x in prefixes for i in range(3)]

    # while the second transaction is open: read_committed stops at its first offset (the LSO, after the
    # first transaction's 3 records and COMMIT marker), read_uncommitted reads it
    open_ = ev["open"]
    assert open_["read_committed"]["end"] == {"0": 4, "1": 4}
    assert open_["read_committed"]["values"] == {str(p): recs(["c1"], p) for p in (0, 1)}
    assert open_["read_uncommitted"]["end"] == {"0": 7, "1": 7}
    assert open_["read_uncommitted"]["values"] == {str(p): recs(["c1", "ab"], p) for p in (0, 1)}

    reads = {e["isolation"]: e for e in events if e["event"] == "read"}
    assert reads["read_committed"]["values"] == {str(p): recs(["c1", "c2"], p) for p in (0, 1)}
    assert reads["read_uncommitted"]["values"] == {str(p): recs(["c1", "ab", "c2"], p) for p in (0, 1)}
    # 3 transactions of 3 records + a marker each: LSO = high watermark = 12
    assert reads["read_committed"]["end"] == reads["read_uncommitted"]["end"] == {"0": 12, "1": 12}

    # on disk: transactional data batches and one control batch per transaction and partition
    for p in (0, 1):
        batches = batches_on_disk(jbroker.data_dir, topic, p)
        assert all(h.is_transactional for h, _ in batches)
        assert [h.base_offset for h, _ in batches if h.is_control] == [3, 7, 11]

        # and as Kafka's own record classes read the segment (FileRecords, ControlRecordType, EndTransactionMarker)
        (seg,) = sorted((Path(jbroker.data_dir) / f"{topic}-{p}").glob("*.log"))
        read = [e for e in java_client.run("dump_log", str(seg), broker=jbroker) if e["event"] == "batch"]
        assert [(b["base_offset"], b["last_offset"]) for b in read] == [
            (h.base_offset, h.base_offset + h.last_offset_delta) for h, _ in batches]
        assert all(b["transactional"] for b in read)
        controls = [b for b in read if b["control"]]
        assert [(b["base_offset"], b["count"], b["base_sequence"]) for b in controls] == [
            (3, 1, -1), (7, 1, -1), (11, 1, -1)]
        assert [[(m["offset"], m["type"], m["marker_type"]) for m in b["markers"]] for b in controls] == [
            [(3, "COMMIT", "COMMIT")], [(7, "ABORT", "ABORT")], [(11, "COMMIT", "COMMIT")]]
        assert len({m["coordinator_epoch"] for b in controls for m in b["markers"]}) == 1
        assert len({(b["producer_id"], b["producer_epoch"]) for b in read}) == 1, "one producer, one epoch"


def test_consume_transform_produce_send_offsets_to_transaction(java_client: Any, jbroker: Any) -> None:
    topic, group = name("java-ctp"), name("java-ctp-g")
    events = java_client.run("txn_ctp", jbroker.bootstrap, topic, group, broker=jbroker)
    ev = by_event(events)
    assert ev["consumed"]["count"] == 20
    gm = ev["group_metadata"]
    assert gm["group_id"] == group and gm["generation_id"] >= 1 and gm["member_id"], gm
    before = {e["commit"]: e["offsets"] for e in events if e["event"] == "committed_before_end"}
    after = {e["commit"]: e["offsets"] for e in events if e["event"] == "committed_after_end"}
    assert before == {False: {}, True: {}}, "offsets of an open transaction must not be visible"
    assert after[False] == {}, "offsets of an aborted transaction must never be visible"
    assert after[True] == {f"{topic}:0": 10, f"{topic}:1": 10}
    out = {e["isolation"]: e for e in events if e["event"] == "output"}
    want = sorted(f"P{p}-{i}" for p in (0, 1) for i in range(10))
    assert sorted(out["read_committed"]["values"]["0"]) == want, "each output record exactly once"
    assert sorted(out["read_uncommitted"]["values"]["0"]) == sorted(want * 2)


def test_zombie_producer_is_fenced(java_client: Any, jbroker: Any) -> None:
    topic = name("java-fence")
    events = java_client.run("txn_fence", jbroker.bootstrap, topic, broker=jbroker)
    ev = by_event(events)
    assert ev["zombie_commit"]["error"] == "ProducerFencedException"
    reads = {e["isolation"]: e for e in events if e["event"] == "read"}
    assert reads["read_committed"]["values"] == {"0": ["fresh"]}
    assert reads["read_uncommitted"]["values"] == {"0": ["zombie", "fresh"]}


# ------------------------------------------------------------------------------------------------------ ACLs

_PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def acl_jbroker(broker_factory: Any) -> Any:
    """A broker with the ACL authorizer and a SASL_PLAINTEXT (PLAIN) listener; ``admin`` is a super user."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in _PLAIN_USERS.items()) + ";")
    b = broker_factory({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
                        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "super.users": "User:admin"})
    b.sasl_port = int(re.findall(r"SASL_PLAINTEXT\(SASL_PLAINTEXT\)://[^:]+:(\d+)", b.log_text())[-1])
    return b


def test_acls_admin_api_and_enforcement(java_client: Any, acl_jbroker: Any) -> None:
    topic, group = name("jacl"), name("jgrp")
    events = java_client.run("acls", f"127.0.0.1:{acl_jbroker.sasl_port}", topic, group, broker=acl_jbroker)
    ev = by_event(events)
    described = {(a["resource_type"], a["name"], a["pattern_type"], a["operation"]) for a in ev["described"]["acls"]}
    assert described == {("TOPIC", topic, "LITERAL", "WRITE"), ("GROUP", group, "PREFIXED", "READ"),
                         ("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE")}
    assert [(a["name"], a["pattern_type"]) for a in ev["matched"]["acls"]] == [(group, "PREFIXED")]
    assert ev["produce"] == {"event": "produce", "alice": "ok", "bob": "TopicAuthorizationException"}
    as_user = {e["user"]: e for e in events if e["event"] == "as"}
    assert as_user["alice"]["describe_acls"] == "ok:3"
    assert as_user["bob"]["describe_acls"] == "ClusterAuthorizationException"
    assert set(as_user["alice"]["topic_ops"].split(",")) == {"DESCRIBE", "WRITE"}  # WRITE implies DESCRIBE
    assert as_user["bob"]["topic_ops"] == "TopicAuthorizationException"
    assert as_user["alice"]["cluster_ops"] == ["DESCRIBE"]
    assert as_user["bob"]["cluster_ops"] == []
    assert len(ev["deleted"]["acls"]) == 3 and ev["left"]["acls"] == []


def test_dynamic_broker_config_default_and_telemetry(java_client: Any, broker_factory: Any) -> None:
    """Issue 27 item 5: the Java Admin alters the cluster-default broker config (an empty resource name), an
    existing topic without an override follows it, a read-only config is refused with Kafka's exception; and its
    ``clientInstanceId`` (KIP-714) is answered through GetTelemetrySubscriptions."""
    b = broker_factory()
    events = java_client.run("dynconf", b.bootstrap, f"java-dynconf-{uuid.uuid4().hex[:6]}", broker=b)
    ev = {e["event"]: e for e in events}
    assert (ev["topic"]["value"], ev["topic"]["source"]) == ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert ev["default"]["configs"] == {"log.retention.ms": "3600000/DYNAMIC_DEFAULT_BROKER_CONFIG"}
    assert ev["read_only"]["error"] == "InvalidRequestException"
    assert "Cannot update these configs dynamically: Set(num.partitions)" in ev["read_only"]["message"]
    instance = ev["telemetry"]["client_instance_id"]
    assert instance and instance != "null" and instance != "AAAAAAAAAAAAAAAAAAAAAA"


# ------------------------------------------------------------------- DescribeTopicPartitions, features (issue 27)


def _requests_of(broker: Any, api: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("tidelog_requests_total{") and f'api="{api}"' in line)


def test_describe_topics_through_describe_topic_partitions_in_pages(java_client: Any, jbroker: Any) -> None:
    topic = name("java-dtp")
    from helpers import RawClient

    with RawClient(jbroker.port) as c:
        r = c.request(19, 7, {"topics": [{"name": topic, "num_partitions": 7, "replication_factor": 1}],
                              "timeout_ms": 10000})
        assert r["topics"][0]["error_code"] == 0
    before = _requests_of(jbroker, "DESCRIBE_TOPIC_PARTITIONS")
    ev = by_event(java_client.run("describe_topics", jbroker.bootstrap, topic, "3", broker=jbroker))
    # 7 partitions in pages of 3: the Admin followed the cursor through three DescribeTopicPartitions requests
    assert [p["partition"] for p in ev["described"]["partitions"]] == list(range(7))
    assert all(p["leader"] is not None and p["elr"] == 0 for p in ev["described"]["partitions"])
    assert _requests_of(jbroker, "DESCRIBE_TOPIC_PARTITIONS") - before >= 3
    feats = ev["features"]
    assert feats["finalized"]["metadata.version"] == 29 and feats["epoch"] == 0
    assert feats["supported"]["metadata.version"] == [29, 29]


def test_versions_the_java_client_negotiates(java_client: Any, broker_factory: Any) -> None:
    """The Java 3.9 client through a recording proxy the broker advertises: it produces, consumes (fetch sessions,
    topics by id) and describes with the newest versions both sides have, and the data reads back whole."""
    from recording_proxy import RecordingProxy

    proxy = RecordingProxy()
    try:
        b = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target = ("127.0.0.1", b.port)
        bootstrap = f"127.0.0.1:{proxy.port}"
        topic = name("java-versions")
        events = java_client.run("roundtrip", bootstrap, topic, broker=b)
        n = PER_CODEC * len(CODECS)
        assert len([e for e in events if e["event"] == "read"]) == n
        from helpers import RawClient

        with RawClient(b.port) as c:
            r = c.request(19, 7, {"topics": [{"name": topic + "-d", "num_partitions": 4, "replication_factor": 1}],
                                  "timeout_ms": 10000})
            assert r["topics"][0]["error_code"] == 0
        ev = by_event(java_client.run("describe_topics", bootstrap, topic + "-d", "3", broker=b))
        assert [p["partition"] for p in ev["described"]["partitions"]] == [0, 1, 2, 3]
        # kafka-clients 3.9's maxima: Fetch 17 (topic ids), Produce 11, Metadata 12, ApiVersions 4
        assert max(proxy.versions(1)) == 17 and max(proxy.versions(0)) == 11
        assert max(proxy.versions(18)) == 4 and proxy.versions(75) == {0}
    finally:
        proxy.close()


# ------------------------------------------------------------------------------- 8. KIP-848 consumer protocol


@pytest.fixture(scope="module")
def kip848_jbroker(broker_factory: Any) -> Any:
    return broker_factory({"group.consumer.min.heartbeat.interval.ms": "100",
                           "group.consumer.heartbeat.interval.ms": "500"})


def test_consumer_protocol_two_members(java_client: Any, kip848_jbroker: Any) -> None:
    """kafka-clients 3.9's early-access ``group.protocol=consumer``: two members split 4 partitions (broker-side
    uniform assignor), read every record once between them and commit with OffsetCommit v9."""
    topic, group = name("java-848"), name("java-g848")
    events = java_client.run("group848", kip848_jbroker.bootstrap, topic, group, broker=kip848_jbroker)
    ev = by_event(events)
    g = ev["group848"]
    assert g["split"] is True, events
    a, b = g["assignments"]
    assert a and b and sorted(a + b) == [0, 1, 2, 3]
    seen: dict[str, list[int]] = {}
    for per in g["consumed"].values():
        for p, offs in per.items():
            seen.setdefault(p, []).extend(offs)
    assert {p: sorted(o) for p, o in seen.items()} == {str(p): list(range(10)) for p in range(4)}, g
    assert ev["committed848"]["offsets"] == {str(p): 10 for p in range(4)}


def test_classic_group_migrated_online_to_consumer_protocol(java_client: Any, kip848_jbroker: Any) -> None:
    """kafka-clients 3.9: two ``group.protocol=classic`` members replaced one at a time by ``group.protocol=consumer``
    ones while the other runs (``group.consumer.migration.policy`` at Kafka 4's default, bidirectional): the first
    replacement's heartbeat upgrades the group, the remaining classic member is a member using the classic protocol
    until it is replaced. Every offset read (twice only after a commit a rebalance refused), the committed offsets at
    the log end, and the group's type as the Admin describes it at each step."""
    topic, group = name("java-migr"), name("java-gmigr")
    events = java_client.run("migrate", kip848_jbroker.bootstrap, topic, group, broker=kip848_jbroker)
    m = by_event(events)["migrate"]
    assert [s["done"] for s in m["steps"]] == [True, True, True], m["steps"]
    assert [s["type"] for s in m["steps"]] == ["Classic", "Consumer", "Consumer"], m["steps"]
    assert sorted(m["steps"][1]["assignments"]) == ["a2", "b"] and all(m["steps"][1]["assignments"].values())
    for p in range(4):
        offs = m["consumed"][str(p)]
        assert set(offs) == set(range(30)), (p, offs)
        assert len(offs) == 30 or m["commits_refused"] > 0, m  # a duplicate only after a refused commit
    assert m["committed"] == {str(p): 30 for p in range(4)}, m
