"""Share group APIs on the wire (a raw client): Kafka's error codes for share sessions, acknowledgements and group
types; ShareGroupDescribe and ListGroups show share groups."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from helpers import RawClient, new_topic, produce_body

from tidelog.cli.main import cli
from tidelog.records.batch import build_batch

pytestmark = pytest.mark.integration

HB, DESCRIBE, FETCH, ACK, OFFSETS = 76, 77, 78, 79, 90
CREATE_TOPICS, PRODUCE, LIST_GROUPS, METADATA = 19, 0, 16, 3
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND = 42, 25, 110, 69
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 121, 122, 123


@pytest.fixture(scope="module")
def share_broker(broker_factory: Any) -> Any:
    return broker_factory({"share.auto.offset.reset": "earliest", "offsets.topic.num.partitions": "3"})


def _setup(c: RawClient, records: int) -> tuple[str, uuid.UUID]:
    topic = new_topic("share-raw")
    r = c.request(CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                     "timeout_ms": 10000})
    assert r["topics"][0]["error_code"] == 0, r
    for i in range(records):  # one batch per record: acquisition takes whole batches
        r = c.request(PRODUCE, 9, produce_body(topic, 0, build_batch([(None, f"v{i}".encode(), [])])))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r
    md = c.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
    return topic, md["topics"][0]["topic_id"]


def _fetch(c: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, acks: list[dict] | None = None,
           max_records: int = 100) -> dict:
    return c.request(FETCH, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
                                "batch_size": max_records,
                                "topics": [{"topic_id": tid, "partitions": [
                                    {"partition_index": 0, "acknowledgement_batches": acks or []}]}],
                                "forgotten_topics_data": []})


def test_heartbeat_describe_and_list(share_broker: Any) -> None:
    with RawClient(share_broker.port) as c:
        topic, tid = _setup(c, 1)
        group = "sraw-" + uuid.uuid4().hex[:6]
        base = {"group_id": group, "rack_id": None}
        r = c.request(HB, 1, {**base, "member_id": "m1", "member_epoch": 0, "subscribed_topic_names": None})
        assert r["error_code"] == INVALID_REQUEST  # a join names its topics
        r = c.request(HB, 1, {**base, "member_id": "m1", "member_epoch": 0, "subscribed_topic_names": [topic]})
        # epoch 1 at the join, 2 once the partition's share state is initialized and assigned (Kafka's handshake)
        assert r["error_code"] == 0 and r["member_epoch"] == 2
        assert r["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}]
        r2 = c.request(HB, 1, {**base, "member_id": "m2", "member_epoch": 0, "subscribed_topic_names": [topic]})
        assert r2["member_epoch"] == 3  # one partition, two members: both get it
        assert r2["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}]
        r = c.request(HB, 1, {**base, "member_id": "m1", "member_epoch": 5, "subscribed_topic_names": None})
        assert r["error_code"] == FENCED_MEMBER_EPOCH
        r = c.request(HB, 1, {**base, "member_id": "nobody", "member_epoch": 3, "subscribed_topic_names": None})
        assert r["error_code"] == UNKNOWN_MEMBER_ID
        d = c.request(DESCRIBE, 1, {"group_ids": [group, "no-such-share-group"],
                                    "include_authorized_operations": False})
        g, missing = d["groups"]
        assert g["error_code"] == 0 and g["group_state"] == "Stable" and g["assignor_name"] == "simple"
        assert sorted(m["member_id"] for m in g["members"]) == ["m1", "m2"]
        assert g["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == topic
        assert missing["error_code"] == GROUP_ID_NOT_FOUND
        lg = c.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert {"group_id": group, "protocol_type": "share", "group_state": "Stable", "group_type": "share"} in \
            lg["groups"]
        assert all(x["group_type"] == "share" for x in lg["groups"])
        r = c.request(HB, 1, {**base, "member_id": "m2", "member_epoch": -1, "subscribed_topic_names": None})
        assert r["error_code"] == 0 and r["member_epoch"] == -1


def test_share_sessions_and_acknowledgements(share_broker: Any) -> None:
    with RawClient(share_broker.port) as c:
        _topic, tid = _setup(c, 5)
        group = "sraw-" + uuid.uuid4().hex[:6]
        assert _fetch(c, group, "m1", 3, tid)["error_code"] == SHARE_SESSION_NOT_FOUND
        acks = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
        assert _fetch(c, group, "m1", 0, tid, acks)["error_code"] == INVALID_REQUEST  # acks on an opening fetch
        r = _fetch(c, group, "m1", 0, tid, max_records=3)
        assert r["error_code"] == 0 and r["acquisition_lock_timeout_ms"] == 30000
        p = r["responses"][0]["partitions"][0]
        assert p["acquired_records"] == [{"first_offset": 0, "last_offset": 2, "delivery_count": 1}]
        assert p["records"]  # the batch holding them
        assert _fetch(c, group, "m1", 5, tid)["error_code"] == INVALID_SHARE_SESSION_EPOCH
        # m2 may not acknowledge m1's records; its own opening fetch gets the rest
        r = _fetch(c, group, "m2", 0, tid)
        assert r["responses"][0]["partitions"][0]["acquired_records"] == [
            {"first_offset": 3, "last_offset": 4, "delivery_count": 1}]
        bad = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
        r = c.request(ACK, 1, {"group_id": group, "member_id": "m2", "share_session_epoch": 1,
                               "topics": [{"topic_id": tid, "partitions": [
                                   {"partition_index": 0, "acknowledgement_batches": bad}]}]})
        assert r["responses"][0]["partitions"][0]["error_code"] == INVALID_RECORD_STATE
        # m1 releases offset 1 (piggy-backed on its next fetch, which acquires it again: delivery count 2)
        acks = [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1, 2, 1]}]
        r = _fetch(c, group, "m1", 1, tid, acks)
        p = r["responses"][0]["partitions"][0]
        assert p["acknowledge_error_code"] == 0
        assert p["acquired_records"] == [{"first_offset": 1, "last_offset": 1, "delivery_count": 2}]
        # closing m1's session (epoch -1) releases what it holds: m2 gets offset 1 with count 3
        r = c.request(ACK, 1, {"group_id": group, "member_id": "m1", "share_session_epoch": -1, "topics": []})
        assert r["error_code"] == 0
        r = _fetch(c, group, "m2", 2, tid)
        assert r["responses"][0]["partitions"][0]["acquired_records"] == [
            {"first_offset": 1, "last_offset": 1, "delivery_count": 3}]


def test_share_groups_cli_list_and_describe(share_broker: Any) -> None:
    from click.testing import CliRunner

    with RawClient(share_broker.port) as c:
        topic, _tid = _setup(c, 1)
        group = "scli-" + uuid.uuid4().hex[:6]
        r = c.request(HB, 1, {"group_id": group, "rack_id": None, "member_id": "member-one", "member_epoch": 0,
                              "subscribed_topic_names": [topic]})
        assert r["error_code"] == 0
        runner = CliRunner()
        bs = ["--bootstrap-server", share_broker.bootstrap]
        out = runner.invoke(cli, ["share-groups", "list", *bs], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert group in out.stdout.split()
        out = runner.invoke(cli, ["share-groups", "list", "--state", *bs], catch_exceptions=False)
        assert [group, "Stable"] in [line.split() for line in out.stdout.splitlines()]
        out = runner.invoke(cli, ["share-groups", "describe", group, "--state", "--verbose", *bs],
                            catch_exceptions=False)
        lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
        assert lines[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert lines[1][0] == group and lines[1][-4:] == ["Stable", "2", "2", "1"]
        out = runner.invoke(cli, ["share-groups", "describe", group, "--members", *bs], catch_exceptions=False)
        lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
        assert lines[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert lines[1][0] == group and lines[1][1] == "member-one" and lines[1][-2:] == ["1", f"{topic}:0"]
        out = runner.invoke(cli, ["share-groups", "describe", "no-such-share-group", *bs])
        assert out.exit_code != 0 and "GROUP_ID_NOT_FOUND" in out.output


def test_describe_share_group_offsets(share_broker: Any) -> None:
    with RawClient(share_broker.port) as c:
        topic, tid = _setup(c, 4)
        group = "soff-" + uuid.uuid4().hex[:6]
        r = c.request(HB, 1, {"group_id": group, "rack_id": None, "member_id": "m1", "member_epoch": 0,
                              "subscribed_topic_names": [topic]})
        assert r["error_code"] == 0
        r = _fetch(c, group, "m1", 0, tid, max_records=2)
        assert r["responses"][0]["partitions"][0]["acquired_records"] == [
            {"first_offset": 0, "last_offset": 1, "delivery_count": 1}]
        _fetch(c, group, "m1", 1, tid, [{"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}],
               max_records=0)

        def offsets(topics: list[dict] | None) -> dict:
            return c.request(OFFSETS, 0, {"groups": [{"group_id": group, "topics": topics},
                                                      {"group_id": "no-such-share-group", "topics": None}]})

        g, missing = offsets(None)["groups"]
        assert g["error_code"] == 0 and missing["error_code"] == GROUP_ID_NOT_FOUND
        assert g["topics"] == [{"topic_name": topic, "topic_id": tid, "partitions": [
            {"partition_index": 0, "start_offset": 2, "leader_epoch": 0, "error_code": 0, "error_message": None}]}]
        g, _ = offsets([{"topic_name": topic, "partitions": [0, 5]}])["groups"]
        parts = g["topics"][0]["partitions"]
        assert [(p["partition_index"], p["start_offset"], p["error_code"]) for p in parts] == [(0, 2, 0), (5, -1, 3)]
