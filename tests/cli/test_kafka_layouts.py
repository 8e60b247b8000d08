"""Issue 25, item 7: the plain output of the describe/list commands is the layout of the Kafka tool each stands
for, and ``--output json`` on every one of them parses and holds the right values, against a real broker.

The expected layouts are written here from Kafka's own format strings (ConsumerGroupCommand's ``%-15s`` columns,
TopicCommand's ``Topic: ...\\t`` fields, GetOffsetShell's ``topic:partition:offset``, AclCommand's and
ConfigCommand's lines), independently of tidelog's table code, so a drift from Kafka's layout fails here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import new_topic, wait_for

from tidelog.cli._tables import aligned_lines, tabbed_lines
from tidelog.cli.topics import kafka_uuid

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


def java_printf(fmt: str, *values: object) -> str:
    """Java's ``String.format`` for the ``%-Ns`` / ``%s`` / ``%n`` a Kafka tool's format string uses."""
    return fmt.replace("%n", "\n") % tuple(str(v) for v in values)


# ------------------------------------------------------------------------------------------------- the layouts


def test_aligned_lines_are_kafka_consumer_groups_printf() -> None:
    """ConsumerGroupCommand.printOffsetFormat: ``%-Gs %-Ts %-10s %-15s %-15s %-15s %-Cs %-Hs %s`` with G, T, C, H
    the widest value (at least 15)."""
    from tidelog.cli._tables import GROUP_OFFSETS_WIDTHS

    headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
               "CLIENT-ID"]
    rows = [["a-rather-long-group-name", "t", "0", "5", "7", "2", "rdkafka-0123456789abcdef-0000", "/127.0.0.1",
             "c1"], ["a-rather-long-group-name", "topic-with-a-long-name", "12", "-", "-", "-", "-", "-", "-"]]
    g, t = len(rows[0][0]), len(rows[1][1])
    c, h = len(rows[0][6]), 15
    fmt = f"%-{g}s %-{t}s %-10s %-15s %-15s %-15s %-{c}s %-{h}s %s"
    expected = [java_printf(fmt, *r).rstrip() for r in [headers, *rows]]
    assert aligned_lines(headers, rows, GROUP_OFFSETS_WIDTHS) == expected


def test_tabbed_lines_are_kafka_transactions_pretty_print_table() -> None:
    """ToolsUtils.prettyPrintTable: each cell padded to its column's widest, then a tab (trailing ones dropped)."""
    rows = [["tx-1", "0", "4000", "Ongoing"], ["a-longer-transactional-id", "2", "7", "Empty"]]
    headers = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert tabbed_lines(headers, rows) == [
        "TransactionalId          \tCoordinator\tProducerId\tTransactionState",
        "tx-1                     \t0          \t4000      \tOngoing",
        "a-longer-transactional-id\t2          \t7         \tEmpty",
    ]


# ------------------------------------------------------------------------------------------ against a broker


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    # an authorizer (for acls list) that lets the anonymous PLAINTEXT client do everything
    return broker_factory({"group.initial.rebalance.delay.ms": "0",
                           "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                           "super.users": "User:ANONYMOUS"})


def tl(b: Any, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([TIDELOG, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TIDELOG_BOOTSTRAP=b.bootstrap))
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def as_json(b: Any, *args: str, code: int = 0) -> Any:
    out = tl(b, *args, "--output", "json", code=code).stdout
    assert len(out.splitlines()) == 1, out  # one line, for scripts
    return json.loads(out)


@pytest.fixture(scope="module")
def topic(b: Any) -> str:
    """Two partitions (3 and 2 records) with a retention.ms override; group ``<topic>-g`` committed 1 and 2."""
    name = new_topic("lay")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1, config={"retention.ms": "3600000"})])[name].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for part, n in ((0, 3), (1, 2)):
        for i in range(n):
            p.produce(name, value=b"v%d" % i, partition=part)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"{name}-g", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(name, 0, 1), TopicPartition(name, 1, 2)], asynchronous=False)
    finally:
        c.close()
    return name


def test_groups_describe_is_kafka_consumer_groups(b: Any, topic: str) -> None:
    group = f"{topic}-g"
    r = tl(b, "groups", "describe", group)
    rows = [[group, topic, "0", "1", "3", "2", "-", "-", "-"], [group, topic, "1", "2", "2", "0", "-", "-", "-"]]
    fmt = f"%-{max(15, len(group))}s %-{max(15, len(topic))}s %-10s %-15s %-15s %-15s %-15s %-15s %s"
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
              "CLIENT-ID"]
    # Kafka: printf("\n" + format) per line, then println
    assert r.stdout == "".join("\n" + java_printf(fmt, *row).rstrip() for row in [header, *rows]) + "\n"
    assert r.stderr == f"\nConsumer group '{group}' has no active members.\n"  # Kafka prints it on stderr

    r = tl(b, "groups", "describe", group, "--state")
    coordinator = f"127.0.0.1:{b.port}  (0)"
    fmt = f"%-{max(25, len(coordinator))}s %-25s %-20s %-15s %s"
    assert r.stdout == ("\n" + java_printf(fmt, "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
                        + "\n" + java_printf(fmt, group, coordinator, "", "Empty", 0).rstrip() + "\n")

    (offsets,) = [as_json(b, "groups", "describe", group)]
    assert [(o["TOPIC"], o["PARTITION"], o["CURRENT-OFFSET"], o["LOG-END-OFFSET"], o["LAG"]) for o in offsets] == [
        (topic, 0, 1, 3, 2), (topic, 1, 2, 2, 0)]
    (state,) = as_json(b, "groups", "describe", group, "--state")
    assert (state["GROUP"], state["STATE"], state["#MEMBERS"], state["COORDINATOR (ID)"]) == (
        group, "Empty", 0, coordinator)
    assert {"GROUP": group, "STATE": "Empty", "TYPE": "simple"} in as_json(b, "groups", "list")  # offsets only
    assert as_json(b, "groups", "describe", group, "--members") == []


def test_groups_members_view_is_kafka_layout(b: Any, topic: str) -> None:
    group = new_topic("lay-m")
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": "layout-member",
                  "enable.auto.commit": False})
    try:
        assigned: list[Any] = []
        c.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))
        wait_for(lambda: c.poll(0.2) is not None or assigned, what="the assignment")
        (member,) = as_json(b, "groups", "describe", group, "--members", "--verbose")
        assert (member["CLIENT-ID"], member["#PARTITIONS"], member["ASSIGNMENT"]) == (
            "layout-member", 2, f"{topic}(0,1)")
        r = tl(b, "groups", "describe", group, "--members", "--verbose")
        # format1 of ConsumerGroupCommand.printMembers, then the assignment
        cid, host = member["CONSUMER-ID"], member["HOST"]
        fmt = f"%-{max(15, len(group))}s %-{max(15, len(cid))}s %-{max(15, len(host))}s %-15s %-15s "
        assert r.stdout == ("\n" + java_printf(fmt, "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
                            + "ASSIGNMENT\n" + java_printf(fmt, group, cid, host, "layout-member", 2)
                            + f"{topic}(0,1)\n")
    finally:
        c.close()


def test_reset_and_delete_offsets_are_kafka_layout(b: Any, topic: str) -> None:
    group = f"{topic}-g"
    r = tl(b, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    fmt = "%-30s %-30s %-10s %-15s"  # ConsumerGroupCommand.printOffsetsToReset
    assert r.stdout.splitlines()[:4] == ["", java_printf(fmt, "GROUP", "TOPIC", "PARTITION", "NEW-OFFSET").rstrip(),
                                         java_printf(fmt, group, topic, 0, 0).rstrip(),
                                         java_printf(fmt, group, topic, 1, 0).rstrip()]
    plan = as_json(b, "groups", "reset-offsets", group, "--topic", topic, "--to-latest")
    assert plan == [{"GROUP": group, "TOPIC": topic, "PARTITION": 0, "NEW-OFFSET": 3},
                    {"GROUP": group, "TOPIC": topic, "PARTITION": 1, "NEW-OFFSET": 2}]
    assert [o["CURRENT-OFFSET"] for o in as_json(b, "groups", "describe", group)] == [1, 2]  # a dry run

    other = new_topic("lay-del")
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": other, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()
    assert as_json(b, "groups", "delete-offsets", other, "--topic", topic) == [  # every partition of the topic
        {"TOPIC": topic, "PARTITION": 0, "STATUS": "Successful"}, {"TOPIC": topic, "PARTITION": 1, "STATUS": "Successful"}]
    r = tl(b, "groups", "delete-offsets", other, "--topic", f"{topic}:0")
    fmt = "%-30s %-15s %-15s"  # ConsumerGroupCommand.deleteOffsets
    assert r.stdout == ("\n" + java_printf(fmt, "TOPIC", "PARTITION", "STATUS").rstrip() + "\n"
                        + java_printf(fmt, topic, 0, "Successful").rstrip() + "\n")


def test_topics_describe_is_kafka_topics(b: Any, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    uuid = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    # str(uuid) is librdkafka's standard base64 ('/', '+'); Kafka prints the URL-safe alphabet ('_', '-')
    topic_id = kafka_uuid(uuid.get_most_significant_bits(), uuid.get_least_significant_bits())
    lines = tl(b, "topics", "describe", topic).stdout.splitlines()
    assert lines[0] == (f"Topic: {topic}\tTopicId: {topic_id}\tPartitionCount: 2\tReplicationFactor: 1\t"
                        "Configs: retention.ms=3600000")
    # Kafka's partition fields, then tidelog's offsets as more "Name: value" fields
    assert lines[1:] == [
        f"\tTopic: {topic}\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A"
        "\tLogStartOffset: 0\tLogEndOffset: 3",
        f"\tTopic: {topic}\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A"
        "\tLogStartOffset: 0\tLogEndOffset: 2"]
    assert tl(b, "topics", "describe", topic, "--under-replicated-partitions").stdout == ""
    parts, configs = [json.loads(line) for line in tl(b, "topics", "describe", topic, "-O", "json").stdout.splitlines()]
    assert [(p["partition"], p["leader"], p["log_end_offset"]) for p in parts] == [(0, 0, 3), (1, 0, 2)]
    assert {"topic": topic, "config": "retention.ms", "value": "3600000"} in configs
    assert topic in as_json(b, "topics", "list")


def test_get_offsets_is_kafka_get_offsets(b: Any, topic: str) -> None:
    assert tl(b, "get-offsets", "--topic", topic).stdout == f"{topic}:0:3\n{topic}:1:2\n"
    assert as_json(b, "get-offsets", "--topic", topic, "--time", "earliest") == [
        {"topic": topic, "partition": 0, "offset": 0}, {"topic": topic, "partition": 1, "offset": 0}]


def test_acls_list_is_kafka_acls(b: Any, topic: str) -> None:
    tl(b, "acls", "add", "--allow-principal", "User:layout", "--operation", "Read", "--operation", "Describe",
       "--topic", topic)
    r = tl(b, "acls", "list", "--topic", topic)
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    entries = [f"(principal=User:layout, host=*, operation={op}, permissionType=ALLOW)" for op in ("READ", "DESCRIBE")]
    # AclCommand: println(s"Current ACLs for resource `$resource`: $nl ${acls.map("\t" + _).mkString(nl)} $nl");
    # Kafka's order is a Set's, tidelog's the operation codes' (READ 3, DESCRIBE 8)
    expected_one = f"Current ACLs for resource `{pattern}`: \n " + "\n".join("\t" + e for e in entries) + " \n\n"
    assert r.stdout == expected_one
    r = tl(b, "acls", "list", "--topic", topic, "--principal", "User:layout")
    assert r.stdout == "ACLs for principal `User:layout`\n" + expected_one
    found = as_json(b, "acls", "list", "--topic", topic)
    assert sorted(found, key=lambda a: a["operation"]) == [
        {"resourceType": "TOPIC", "name": topic, "patternType": "LITERAL", "principal": "User:layout", "host": "*",
         "operation": op, "permissionType": "ALLOW"} for op in ("DESCRIBE", "READ")]


def test_configs_describe_is_kafka_configs(b: Any, topic: str) -> None:
    entity = ["--entity-type", "topics", "--entity-name", topic]
    assert tl(b, "configs", "describe", *entity).stdout == (
        f"Dynamic configs for topic {topic} are:\n"
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, "
        "DEFAULT_CONFIG:retention.ms=604800000}\n")
    (described,) = as_json(b, "configs", "describe", *entity)
    assert described == {"entityType": "topics", "entityName": topic, "configs": [
        {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False,
         "readOnly": False, "synonyms": [
             {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"},
             {"name": "retention.ms", "value": "604800000", "source": "DEFAULT_CONFIG"}]}]}
    (everything,) = as_json(b, "configs", "describe", *entity, "--all")
    by_name = {c["name"]: c for c in everything["configs"]}
    assert by_name["cleanup.policy"]["value"] == "delete" and by_name["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    (broker,) = [d for d in as_json(b, "configs", "describe", "--entity-type", "brokers") if d["entityName"] == "0"]
    assert broker["entityType"] == "brokers" and isinstance(broker["configs"], list)
    user = new_topic("u")
    tl(b, "configs", "alter", "--entity-type", "users", "--entity-name", user, "--add-config",
       "producer_byte_rate=1024")
    tl(b, "users", "add", user, "--password", "pw-of-the-user", "--iterations", "8192", "-m", "SCRAM-SHA-256")
    assert as_json(b, "configs", "describe", "--entity-type", "users", "--entity-name", user) == [
        {"entity": {"user": user}, "quotas": {"producer_byte_rate": 1024.0}},
        {"entity": {"user": user}, "scram": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]}]
    assert {"USER": user, "MECHANISM": "SCRAM-SHA-256", "ITERATIONS": 8192} in as_json(b, "users", "list")
    assert as_json(b, "quotas", "describe", "--user", user) == [
        {"USER": user, "CLIENT-ID": "", "KEY": "producer_byte_rate", "VALUE": 1024}]


def test_log_dirs_and_delete_records_as_json(b: Any) -> None:
    name = new_topic("lay-rec")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(4):
        p.produce(name, value=b"x%d" % i, partition=0)
    assert p.flush(30) == 0
    info = as_json(b, "log-dirs", "describe", "--topic-list", name)  # Kafka's JSON alone, no lines around it
    (log_dir,) = info["brokers"][0]["logDirs"]
    (part,) = log_dir["partitions"]
    assert info["version"] == 1 and log_dir["logDir"] == str(b.data_dir) and part["partition"] == f"{name}-0"
    assert part["size"] > 0 and part["offsetLag"] == 0 and part["isFuture"] is False
    assert as_json(b, "delete-records", "--topic", name, "--partition", "0", "--offset", "3") == [
        {"topic": name, "partition": 0, "lowWatermark": 3}]
    failed = tl(b, "delete-records", "--topic", name, "--partition", "7", "--offset", "1", "-O", "json", code=1)
    (res,) = json.loads(failed.stdout)
    assert (res["topic"], res["partition"]) == (name, 7) and res["error"] and "lowWatermark" not in res


def test_transactions_list_and_describe_as_json(b: Any) -> None:
    name = new_topic("lay-tx")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    tid = new_topic("lay-tid")
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(name, value=b"t", partition=0)
    assert p.flush(30) == 0
    try:
        listed = as_json(b, "transactions", "list")
        (mine,) = [t for t in listed if t["TransactionalId"] == tid]
        assert (mine["Coordinator"], mine["TransactionState"]) == (0, "Ongoing")
        (described,) = as_json(b, "transactions", "describe", "--transactional-id", tid)
        assert (described["TransactionState"], described["TopicPartitions"]) == ("Ongoing", f"{name}-0")
        r = tl(b, "transactions", "list")
        header, *rows = r.stdout.splitlines()
        assert header.split("\t")[:4] == [h.ljust(len(h)) for h in header.split("\t")[:4]]  # padded cells
        assert [tid, "0", str(mine["ProducerId"]), "Ongoing"] in [row.split() for row in rows]
        assert as_json(b, "transactions", "find-hanging", "--topic", name) == []
    finally:
        p.abort_transaction(30)
