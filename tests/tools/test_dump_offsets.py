"""``tidelog dump-log --offsets-decoder``: ``__consumer_offsets`` records decoded as Kafka's ``OffsetsMessageParser``.

Unit tests write segments of records made with the group coordinator's own encoders (``encode_offset_key`` ...)
and ``build_batch``; one test runs a real broker, lets a real client (confluent-kafka) join a group and commit,
stops the broker and dumps the ``__consumer_offsets`` segment the broker wrote.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import wait_for

from tidelog.broker.group.records import (
    GroupValue,
    MemberValue,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from tidelog.cli.dump_log import dump_log
from tidelog.protocol import codec
from tidelog.records.batch import RecordSpec, build_batch, build_control_batch

NOW = 1_700_000_000_000
SEG = "00000000000000000000"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(dump_log, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def write_offsets_segment(directory: Path, records: list[tuple[bytes | None, bytes | None]]) -> Path:
    """One batch per record (offsets 0..n-1), as the coordinator appends them, in ``__consumer_offsets-0``."""
    part = directory / "__consumer_offsets-0"
    part.mkdir(parents=True, exist_ok=True)
    batches = [
        build_batch([RecordSpec(key, value, (), NOW + i)], base_offset=i) for i, (key, value) in enumerate(records)
    ]
    path = part / f"{SEG}.log"
    path.write_bytes(b"".join(batches))
    return path


def record_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("|")]


def dump_records(path: Path, *extra: str) -> list[str]:
    code, out, err = run("--files", str(path), "--offsets-decoder", *extra)
    assert code == 0, err
    assert "Traceback" not in out + err
    return record_lines(out)


def subscription(version: int, body: dict[str, Any]) -> bytes:
    return struct.pack(">h", version) + codec.encode_data("ConsumerProtocolSubscription", version, body)


def assignment(version: int, body: dict[str, Any]) -> bytes:
    return struct.pack(">h", version) + codec.encode_data("ConsumerProtocolAssignment", version, body)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------------------------- offset commits


def test_offset_commit_values_v3_and_v1(tmp_path: Path) -> None:
    path = write_offsets_segment(
        tmp_path,
        [
            (encode_offset_key("g1", "events", 2), encode_offset_value(OffsetValue(42, 7, "meta", NOW))),
            (encode_offset_key("g1", "events", 3), encode_offset_value(OffsetValue(9, -1, "", NOW, NOW + 5000))),
        ],
    )
    lines = dump_records(path)  # no --deep-iteration / --print-data-log: the decoder implies both
    assert len(lines) == 2
    assert lines[0].startswith(f"| offset: 0 CreateTime: {NOW} keySize: ")
    assert lines[0].endswith(
        ' key: {"type":"1","data":{"group":"g1","topic":"events","partition":2}} '
        'payload: {"version":"3","data":{"offset":42,"leaderEpoch":7,"metadata":"meta",'
        f'"commitTimestamp":{NOW}}}}}'
    )
    # v1 (explicit retention): expireTimestamp and no leaderEpoch
    assert lines[1].endswith(
        ' key: {"type":"1","data":{"group":"g1","topic":"events","partition":3}} '
        'payload: {"version":"1","data":{"offset":9,"metadata":"",'
        f'"commitTimestamp":{NOW},"expireTimestamp":{NOW + 5000}}}}}'
    )


def test_skip_record_metadata_and_non_ascii_names(tmp_path: Path) -> None:
    path = write_offsets_segment(
        tmp_path, [(encode_offset_key("grüppe", "tópic", 0), encode_offset_value(OffsetValue(1, 0, "", NOW)))]
    )
    (line,) = dump_records(path, "--skip-record-metadata")
    # Jackson writes non-ASCII characters as they are, with no spaces
    assert line == (
        '| key: {"type":"1","data":{"group":"grüppe","topic":"tópic","partition":0}} '
        f'payload: {{"version":"3","data":{{"offset":1,"leaderEpoch":0,"metadata":"","commitTimestamp":{NOW}}}}}'
    )


# --------------------------------------------------------------------------------------------- group metadata


def _member(member_id: str, sub: bytes, assign: bytes, instance: str | None = None) -> MemberValue:
    return MemberValue(member_id, instance, "client-1", "/10.0.0.1", 60000, 10000, sub, assign)


def test_group_metadata_v3_consumer_protocol_decoded(tmp_path: Path) -> None:
    sub_v3 = subscription(
        3,
        {
            "topics": ["events", "audit"],
            "user_data": b"\x01\x02",
            "owned_partitions": [{"topic": "events", "partitions": [0, 1]}],
            "generation_id": 4,
            "rack_id": "rack-a",
        },
    )
    assign_v0 = assignment(0, {"assigned_partitions": [{"topic": "events", "partitions": [0, 1]}], "user_data": None})
    sub_v0 = subscription(0, {"topics": ["events"], "user_data": None})
    garbage = b"\x00\x00\xff\xff\xff\xff"  # v0 with a negative topic count... then nothing: does not decode
    value = GroupValue(
        "consumer",
        5,
        "range",
        "m1",
        NOW,
        [_member("m1", sub_v3, assign_v0, instance="inst-1"), _member("m2", sub_v0, garbage)],
    )
    path = write_offsets_segment(tmp_path, [(encode_group_key("g1"), encode_group_value(value))])
    (line,) = dump_records(path)
    key_text, payload_text = line.split(" key: ", 1)[1].split(" payload: ")
    assert key_text == '{"type":"2","data":{"group":"g1"}}'
    payload = json.loads(payload_text)
    assert payload_text == json.dumps(payload, separators=(",", ":"))  # compact
    assert payload["version"] == "3"
    data = payload["data"]
    assert list(data) == ["protocolType", "generation", "protocol", "leader", "currentStateTimestamp", "members"]
    assert (data["protocolType"], data["generation"], data["protocol"], data["leader"]) == ("consumer", 5, "range", "m1")
    assert data["currentStateTimestamp"] == NOW
    m1, m2 = data["members"]
    assert m1 == {
        "memberId": "m1",
        "groupInstanceId": "inst-1",
        "clientId": "client-1",
        "clientHost": "/10.0.0.1",
        "rebalanceTimeout": 60000,
        "sessionTimeout": 10000,
        "subscription": {
            "topics": ["events", "audit"],
            "userData": b64(b"\x01\x02"),
            "ownedPartitions": [{"topic": "events", "partitions": [0, 1]}],
            "generationId": 4,
            "rackId": "rack-a",
        },
        "assignment": {"assignedPartitions": [{"topic": "events", "partitions": [0, 1]}], "userData": None},
    }
    # a v0 subscription has only the v0 fields; an assignment that does not decode stays base64
    assert m2["groupInstanceId"] is None
    assert m2["subscription"] == {"topics": ["events"], "userData": None}
    assert m2["assignment"] == b64(garbage)


def test_group_metadata_other_protocol_type_keeps_bytes(tmp_path: Path) -> None:
    # the same decodable bytes are left alone when the protocol type is not "consumer" (e.g. Connect)
    sub = subscription(0, {"topics": ["events"], "user_data": None})
    assign = b"\x00\x01opaque"
    value = GroupValue("connect", 2, "sessioned", "w1", NOW, [_member("w1", sub, assign)])
    empty = GroupValue("consumer", 3, None, None, NOW, [])  # an Empty group: null protocol and leader
    path = write_offsets_segment(
        tmp_path,
        [(encode_group_key("cg"), encode_group_value(value)), (encode_group_key("cg"), encode_group_value(empty))],
    )
    first, second = dump_records(path)
    payload = json.loads(first.split(" payload: ", 1)[1])
    member = payload["data"]["members"][0]
    assert member["subscription"] == b64(sub) and member["assignment"] == b64(assign)
    assert payload["data"]["protocolType"] == "connect"
    assert second.endswith(
        ' payload: {"version":"3","data":{"protocolType":"consumer","generation":3,"protocol":null,'
        f'"leader":null,"currentStateTimestamp":{NOW},"members":[]}}}}'
    )


# ---------------------------------------------------------------------------------- tombstones and bad records


def test_tombstones_print_delete(tmp_path: Path) -> None:
    path = write_offsets_segment(
        tmp_path, [(encode_offset_key("g", "t", 1), None), (encode_group_key("g"), None)]
    )
    lines = dump_records(path)
    assert lines[0].endswith(' key: {"type":"1","data":{"group":"g","topic":"t","partition":1}} payload: <DELETE>')
    assert lines[1].endswith(' key: {"type":"2","data":{"group":"g"}} payload: <DELETE>')
    assert "valueSize: -1" in lines[0]


def test_undecodable_records_are_reported_and_the_dump_goes_on(tmp_path: Path) -> None:
    good = (encode_offset_key("g", "t", 0), encode_offset_value(OffsetValue(5, 0, "", NOW)))
    records: list[tuple[bytes | None, bytes | None]] = [
        (struct.pack(">h", 99) + b"\x00\x01x", b"\x00\x00"),  # 0: unknown key type (3-8 are KIP-848 records)
        (None, encode_offset_value(OffsetValue(1, 0, "", NOW))),  # 1: no key
        (encode_offset_key("g", "t", 0), b"\x00\x03\x00\x00"),  # 2: value truncated
        (encode_offset_key("g", "t", 0), struct.pack(">hq", 9, 1)),  # 3: unknown value version
        (encode_group_key("g"), b"\xde\xad\xbe\xef\x00"),  # 4: garbage group value
        (b"\x00", b"x"),  # 5: a key too short for its version
        (encode_offset_key("g", "t", 0)[:-2], None),  # 6: key cut in its partition field
        (b"\x00\x01\x00\x02\xff\xfe", None),  # 7: group name that is not UTF-8
        good,  # 8: decoded as usual after all that
    ]
    path = write_offsets_segment(tmp_path, records)
    code, out, err = run("--files", str(path), "--offsets-decoder")
    assert code == 0 and err == ""  # the segment is intact: nothing to report as a problem
    lines = record_lines(out)
    assert len(lines) == len(records)
    rest = [line.split(" headerKeys: [] ", 1)[1] for line in lines]
    assert rest[0] == "key: Unknown record type 99 at offset 0, skipping."
    assert rest[1] == (
        "key: Failed to decode message at offset 1 using offset topic decoder (message had a missing key)"
    )
    assert rest[2] == "key: Error at offset 2, skipping. truncated record"
    assert rest[3] == "key: Error at offset 3, skipping. unknown OffsetCommitValue version 9"
    assert rest[4].startswith("key: Error at offset 4, skipping. unknown GroupMetadataValue version -8531")
    assert rest[5] == "key: Error at offset 5, skipping. truncated record"
    assert rest[6] == "key: Error at offset 6, skipping. truncated record"
    assert rest[7].startswith("key: Error at offset 7, skipping. ") and "utf-8" in rest[7]
    assert all("payload:" not in r for r in rest[:8])
    assert rest[8].startswith('key: {"type":"1"') and '"offset":5' in rest[8]


def test_control_records_are_not_decoded(tmp_path: Path) -> None:
    # transactional offset commits end with a marker; Kafka prints no key/payload for control batches
    offsets = build_batch(
        [RecordSpec(encode_offset_key("g", "t", 0), encode_offset_value(OffsetValue(3, 0, "", NOW)), (), NOW)],
        producer_id=77,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    marker = build_control_batch(1, 77, 0, 2, 1, NOW + 1)
    path = tmp_path / "__consumer_offsets-0" / f"{SEG}.log"
    path.parent.mkdir()
    path.write_bytes(offsets + marker)
    lines = dump_records(path)
    assert len(lines) == 2
    assert '"offset":3' in lines[0]
    assert lines[1].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 2") and "key:" not in lines[1]


# ------------------------------------------------------------------------------------------------------ --json


def test_json_mode_carries_decoded_objects(tmp_path: Path) -> None:
    sub = subscription(1, {"topics": ["events"], "user_data": None, "owned_partitions": []})
    group = GroupValue("consumer", 1, "range", "m1", NOW, [_member("m1", sub, b"")])
    records: list[tuple[bytes | None, bytes | None]] = [
        (encode_offset_key("g", "events", 0), encode_offset_value(OffsetValue(11, 2, "md", NOW))),
        (encode_group_key("g"), encode_group_value(group)),
        (encode_offset_key("g", "events", 0), None),
        (encode_offset_key("g", "events", 0), b"\x00"),
    ]
    path = write_offsets_segment(tmp_path, records)
    code, out, err = run("--files", str(path), "--offsets-decoder", "--json")
    assert code == 0 and err == ""
    recs = [e for e in map(json.loads, out.splitlines()) if e["type"] == "record"]
    assert len(recs) == 4
    offset_rec, group_rec, tombstone, broken = recs
    assert offset_rec["key_decoded"] == {"type": "1", "data": {"group": "g", "topic": "events", "partition": 0}}
    assert offset_rec["payload_decoded"] == {
        "version": "3",
        "data": {"offset": 11, "leaderEpoch": 2, "metadata": "md", "commitTimestamp": NOW},
    }
    # the text fields are the texts of the text mode; the raw bytes stay available
    assert json.loads(offset_rec["payload"]) == offset_rec["payload_decoded"]
    assert base64.b64decode(offset_rec["key_b64"]) == records[0][0]
    assert base64.b64decode(offset_rec["payload_b64"]) == records[0][1]
    assert offset_rec["headers"] == []
    member = group_rec["payload_decoded"]["data"]["members"][0]
    assert member["subscription"] == {"topics": ["events"], "userData": None, "ownedPartitions": []}
    assert member["assignment"] == ""  # empty bytes do not decode: base64 of nothing
    assert group_rec["key_decoded"] == {"type": "2", "data": {"group": "g"}}
    assert tombstone["payload"] == "<DELETE>" and tombstone["payload_decoded"] is None
    assert "payload_b64" not in tombstone and tombstone["key_decoded"]["data"]["partition"] == 0
    assert broken["key_decoded"] is None and broken["payload_decoded"] is None
    assert broken["key"] == "Error at offset 3, skipping. truncated record"
    assert "payload" not in broken


def test_help_lists_offsets_decoder() -> None:
    result = CliRunner().invoke(dump_log, ["--help"])
    assert result.exit_code == 0
    assert "--offsets-decoder" in result.output


# ----------------------------------------------------------------------------------- real broker, real client


@pytest.mark.integration
def test_segment_written_by_the_broker_for_a_real_consumer_group(broker_factory: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    partitions = 5
    broker = broker_factory(
        {"group.initial.rebalance.delay.ms": "100", "offsets.topic.num.partitions": str(partitions)}
    )
    topic, group = "dump-offsets-events", "dump-offsets-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": "dump-offsets-client",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        # poll (which drives the join and the sync) until the member owns partitions and read a record
        wait_for(lambda: consumer.poll(0.2) is not None and consumer.assignment(), 30, "a record consumed")
        committed = consumer.commit(
            offsets=[TopicPartition(topic, 1, 3, "from-the-test")], asynchronous=False
        )
        assert committed is not None and committed[0].error is None
    finally:
        consumer.close()
    assert broker.stop() == 0

    seg = broker.data_dir / f"__consumer_offsets-{partition_for(group, partitions)}" / f"{SEG}.log"
    assert seg.exists(), sorted(p.name for p in broker.data_dir.iterdir())
    # the real command line, as an operator runs it
    proc = subprocess.run(
        [sys.executable, "-m", "tidelog.cli.main", "dump-log", "--files", str(seg), "--offsets-decoder"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = record_lines(proc.stdout)
    decoded = [
        (json.loads(k), None if p == "<DELETE>" else json.loads(p))
        for k, p in (line.split(" key: ", 1)[1].split(" payload: ", 1) for line in lines)
    ]
    commits = [(k, v) for k, v in decoded if k["type"] == "1"]
    # confluent-kafka-python sends the metadata string with its C terminator: the broker stores what it got
    assert ({"group": group, "topic": topic, "partition": 1}, 3, "from-the-test") in [
        (k["data"], v["data"]["offset"], v["data"]["metadata"].rstrip("\x00")) for k, v in commits if v is not None
    ]
    groups = [v["data"] for k, v in decoded if k == {"type": "2", "data": {"group": group}} and v is not None]
    assert groups, lines
    with_members = [g for g in groups if g["members"]]
    assert with_members, groups  # the Stable group was stored with its member before the member left
    member = with_members[0]["members"][0]
    assert with_members[0]["protocolType"] == "consumer"
    assert member["clientId"] == "dump-offsets-client"
    assert topic in member["subscription"]["topics"]  # decoded ConsumerProtocolSubscription, not base64
    assigned = {(tp["topic"], p) for tp in member["assignment"]["assignedPartitions"] for p in tp["partitions"]}
    assert assigned == {(topic, 0), (topic, 1)}
