"""Kafka's operator scripts under ``tidelog`` (issue 25, item 6) against a real ``tidelog serve``: get-offsets,
delete-records, log-dirs describe, configs, the topics describe filters, the perf tests, and the one-line
failures of leader-election / reassign-partitions on a single node (tests/cluster/test_toolbox_cluster.py runs
those against a real cluster). Each test checks the printed lines and the effect on the broker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    return broker_factory({"group.initial.rebalance.delay.ms": "0"})


def tl(b: Any, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([TIDELOG, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TIDELOG_BOOTSTRAP=b.bootstrap))
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    if code == 1:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one clear line
    elif code == 2:  # a usage error: click's usage, or one line
        assert proc.stderr.strip().splitlines()[-1].startswith("Error: "), proc.stderr
    return proc


def _topic(b: Any, prefix: str, partitions: int = 1, **configs: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(30)
    return name


def _produce(b: Any, topic: str, partition: int, timestamps: list[int]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i, ts in enumerate(timestamps):
        p.produce(topic, f"v{i}".encode(), partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def _values(b: Any, topic: str, partition: int, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "toolbox-reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING: the log start offset
    try:
        out: list[bytes] = []
        while len(out) < n:
            msg = c.poll(30)
            assert msg is not None, f"only {out} of {n} records"
            assert msg.error() is None, msg.error()
            out.append(msg.value())
        return out
    finally:
        c.close()


def test_get_offsets(b: Any) -> None:
    t = _topic(b, "offsets", partitions=2)
    _produce(b, t, 0, [1000, 3000, 2000])
    assert tl(b, "get-offsets", "--topic", t).stdout == f"{t}:0:3\n{t}:1:0\n"
    assert tl(b, "get-offsets", "--topic", t, "--time", "earliest").stdout == f"{t}:0:0\n{t}:1:0\n"
    assert tl(b, "get-offsets", "--topic", t, "--time", "-3").stdout == f"{t}:0:1\n"  # the record with ts 3000
    # the first offset with a timestamp >= 1500; partition 1 has none and is left out, as Kafka's tool does
    assert tl(b, "get-offsets", "--topic", t, "--time", "1500").stdout == f"{t}:0:1\n"
    assert tl(b, "get-offsets", "--topic-partitions", f"{t}:1-").stdout == f"{t}:1:0\n"
    assert tl(b, "get-offsets", "--topic", t, "--partitions", "0", "--time", "-2").stdout == f"{t}:0:0\n"
    assert "Malformed time argument soon" in tl(b, "get-offsets", "--time", "soon", code=2).stderr
    assert "cannot be used with" in tl(b, "get-offsets", "--topic", t, "--topic-partitions", t, code=2).stderr
    assert tl(b, "get-offsets", "--topic", "no-such-.*", code=1).stderr == \
        "Error: Could not match any topic-partitions with the specified filters\n"


def test_delete_records(b: Any, tmp_path: Path) -> None:
    t = _topic(b, "delrec", partitions=2)
    _produce(b, t, 0, [1, 2, 3, 4, 5])
    _produce(b, t, 1, [1, 2])
    out = tl(b, "delete-records", "--topic", t, "--partition", "0", "--offset", "3").stdout
    assert out == f"Executing records delete operation\nRecords delete operation completed:\n" \
                  f"partition: {t}-0\tlow_watermark: 3\n"
    assert _values(b, t, 0, 2) == [b"v3", b"v4"]  # really gone below 3
    assert tl(b, "get-offsets", "--topic", t, "--time", "earliest").stdout == f"{t}:0:3\n{t}:1:0\n"

    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": t, "partition": 1, "offset": -1}], "version": 1}))
    assert f"partition: {t}-1\tlow_watermark: 2\n" in tl(b, "delete-records", "--offset-json-file", str(plan)).stdout
    assert tl(b, "get-offsets", "--topic", t, "--partitions", "1", "--time", "-2").stdout == f"{t}:1:2\n"

    plan.write_text(json.dumps({"partitions": [{"topic": t, "partition": 0, "offset": 4},
                                               {"topic": t, "partition": 9, "offset": 1}], "version": 1}))
    bad = tl(b, "delete-records", "--offset-json-file", str(plan), code=1)
    assert f"partition: {t}-0\tlow_watermark: 4" in bad.stdout
    assert f"partition: {t}-9\terror: " in bad.stdout
    plan.write_text(json.dumps({"partitions": [{"topic": t, "partition": 0, "offset": 4}] * 2, "version": 1}))
    assert "duplicate topic partitions" in tl(b, "delete-records", "--offset-json-file", str(plan), code=1).stderr
    tl(b, "delete-records", "--topic", t, code=2)


def test_log_dirs_describe(b: Any) -> None:
    t = _topic(b, "logdirs", partitions=2)
    _produce(b, t, 1, [1, 2, 3])
    lines = tl(b, "log-dirs", "describe", "--topic-list", t).stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    info = json.loads(lines[2])
    assert info["version"] == 1 and [br["broker"] for br in info["brokers"]] == [0]
    (log_dir,) = info["brokers"][0]["logDirs"]
    assert log_dir["logDir"] == str(b.data_dir) and log_dir["error"] is None
    assert log_dir["totalBytes"] >= log_dir["usableBytes"] > 0
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert set(parts) == {f"{t}-0", f"{t}-1"}  # only the topic asked for
    assert parts[f"{t}-0"]["size"] == 0 and parts[f"{t}-1"]["size"] > 0
    assert parts[f"{t}-1"] | {"size": 0} == {"partition": f"{t}-1", "size": 0, "offsetLag": 0, "isFuture": False}

    table = tl(b, "log-dirs", "describe", "--table", "--topic-list", t).stdout.splitlines()
    rows = [line.split() for line in table]  # space-padded columns
    assert rows[0] == ["broker", "log_dir", "state", "total_bytes", "usable_bytes", "partitions"]
    assert rows[1][:3] == ["0", str(b.data_dir), "online"] and rows[1][-1] == "2"
    assert ["0", str(b.data_dir), f"{t}-1", str(parts[f"{t}-1"]["size"]), "0", "false"] in rows
    assert "do not exist from --broker-list: 7" in tl(b, "log-dirs", "describe", "--broker-list", "7", code=1).stderr


def _topic_config(b: Any, topic: str) -> dict[str, Any]:
    res = ConfigResource("topic", topic)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # alive until the future is done
    return admin.describe_configs([res])[res].result(30)


def test_configs_topics(b: Any) -> None:
    t = _topic(b, "configs")
    out = tl(b, "configs", "alter", "--entity-type", "topics", "--entity-name", t, "--add-config",
             "retention.ms=86400000,cleanup.policy=[compact,delete]").stdout
    assert out == f"Completed updating config for topic {t}.\n"
    entries = _topic_config(b, t)
    assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == ("86400000", "compact,delete")
    assert tl(b, "configs", "describe", "--entity-type", "topics", "--entity-name", t).stdout.splitlines() == [
        f"Dynamic configs for topic {t} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete,"
        " DEFAULT_CONFIG:cleanup.policy=delete}",
        "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000,"
        " DEFAULT_CONFIG:retention.ms=604800000}",
    ]
    every = tl(b, "configs", "describe", "--entity-type", "topics", "--entity-name", t, "--all").stdout
    assert every.startswith(f"All configs for topic {t} are:\n")
    assert re.search(r"^  retention\.ms=86400000 sensitive=false synonyms=\{DYNAMIC_TOPIC_CONFIG:retention\.ms="
                     r"86400000, DEFAULT_CONFIG:", every, re.M)
    assert re.search(r"^  segment\.bytes=\d+ sensitive=false synonyms=\{DEFAULT_CONFIG:", every, re.M)

    tl(b, "configs", "alter", "--entity-type", "topics", "--entity-name", t, "--delete-config", "retention.ms")
    assert _topic_config(b, t)["retention.ms"].value == "604800000"
    assert "retention.ms" not in tl(b, "configs", "describe", "--entity-type", "topics", "--entity-name", t).stdout
    assert tl(b, "configs", "alter", "--entity-type", "topics", "--entity-name", t, "--delete-config", "nope",
              code=1).stderr == "Error: Invalid config(s): nope\n"
    assert "INVALID_CONFIG" in tl(b, "configs", "alter", "--entity-type", "topics", "--entity-name", t,
                                  "--add-config", "retention.ms=soon", code=1).stderr
    tl(b, "configs", "describe", "--entity-type", "topics", "--entity-default", code=2)


def test_configs_brokers(b: Any) -> None:
    out = tl(b, "configs", "describe", "--entity-type", "brokers").stdout
    assert out == "Dynamic configs for broker 0 are:\nDefault configs for brokers in the cluster are:\n"
    every = tl(b, "configs", "describe", "--entity-type", "brokers", "--entity-name", "0", "--all").stdout
    assert every.startswith("All configs for broker 0 are:\n")
    assert re.search(r"^  group\.initial\.rebalance\.delay\.ms=0 sensitive=false synonyms=\{STATIC_BROKER_CONFIG:"
                     r"group\.initial\.rebalance\.delay\.ms=0", every, re.M)  # from --override
    assert re.search(r"^  num\.partitions=1 sensitive=false synonyms=\{DEFAULT_CONFIG:num\.partitions=1\}", every, re.M)
    # dynamic broker configs (per broker and the cluster default), as kafka-configs.sh alters them
    for target, done in ((["--entity-default"], "Completed updating default config for brokers in the cluster.\n"),
                         (["--entity-name", "0"], "Completed updating config for broker 0.\n")):
        assert tl(b, "configs", "alter", "--entity-type", "brokers", *target,
                  "--add-config", "log.cleaner.backoff.ms=16000").stdout == done
        described = tl(b, "configs", "describe", "--entity-type", "brokers", *target).stdout
        assert re.search(r"^  log\.cleaner\.backoff\.ms=16000 sensitive=false synonyms=\{DYNAMIC_", described, re.M), \
            described
        tl(b, "configs", "alter", "--entity-type", "brokers", *target, "--delete-config", "log.cleaner.backoff.ms")
        assert "log.cleaner.backoff.ms" not in tl(b, "configs", "describe", "--entity-type", "brokers",
                                                  *target).stdout
        err = tl(b, "configs", "alter", "--entity-type", "brokers", *target, "--add-config", "num.partitions=5",
                 code=1).stderr
        assert "Cannot update these configs dynamically" in err and "num.partitions" in err, err
    tl(b, "configs", "describe", "--entity-type", "brokers", "--entity-name", "zero", code=2)


def test_configs_client_and_user_quotas(b: Any) -> None:
    user, client = f"u{uuid.uuid4().hex[:6]}", f"c{uuid.uuid4().hex[:6]}"
    entity = ["--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", client]
    out = tl(b, "configs", "alter", *entity, "--add-config", "producer_byte_rate=1048576,request_percentage=50").stdout
    assert out == f"Completed updating config for user {user}.\n"
    line = f"Quota configs for user-principal '{user}', client-id '{client}' are producer_byte_rate=1048576.0, " \
           "request_percentage=50.0\n"
    assert tl(b, "configs", "describe", *entity).stdout == line
    # the same quota through tidelog quotas (one implementation, one store)
    assert [user, client, "producer_byte_rate", "1048576"] in [
        line.split() for line in tl(b, "quotas", "describe", "--user", user, "--client", client).stdout.splitlines()]
    # a user's description also lists its SCRAM credentials (tidelog users, DescribeUserScramCredentials)
    tl(b, "users", "add", user, "--password", "pw-of-the-user", "--iterations", "8192")
    assert tl(b, "configs", "describe", "--entity-type", "users", "--entity-name", user).stdout == line + \
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192, " \
        "SCRAM-SHA-512=iterations=8192\n"
    tl(b, "configs", "alter", *entity, "--delete-config", "producer_byte_rate,request_percentage")
    assert tl(b, "configs", "describe", *entity).stdout == ""

    default = ["--entity-type", "clients", "--entity-default"]
    assert tl(b, "configs", "alter", *default, "--add-config", "consumer_byte_rate=1000000000").stdout == \
        "Completed updating default config for clients in the cluster.\n"
    assert tl(b, "configs", "describe", *default).stdout == \
        "Quota configs for the default client-id are consumer_byte_rate=1.0E9\n"  # Java's Double.toString
    tl(b, "configs", "alter", *default, "--delete-config", "consumer_byte_rate")
    assert tl(b, "configs", "describe", *default).stdout == ""
    assert "needs a number" in tl(b, "configs", "alter", *default, "--add-config", "consumer_byte_rate=x",
                                  code=2).stderr


def test_topics_describe_filters(b: Any) -> None:
    strict = _topic(b, "minisr", partitions=2, **{"min.insync.replicas": "2"})
    loose = _topic(b, "atisr")

    def rows(*args: str) -> list[tuple[str, str]]:
        """The partition lines (kafka-topics.sh's ``\tTopic: t\tPartition: p\t...``) as (topic, partition); with a
        filter there is no ``Topic:`` line per topic, as in Kafka."""
        lines = tl(b, "topics", "describe", *args).stdout.splitlines()
        assert any(a.startswith("--") for a in args) == all(line.startswith("\t") for line in lines), lines
        fields = [dict(f.split(": ", 1) for f in line.strip("\t").split("\t")) for line in lines
                  if line.startswith("\t")]
        return [(f["Topic"], f["Partition"]) for f in fields]

    assert rows(strict, loose, "--under-min-isr-partitions") == [(strict, "0"), (strict, "1")]
    assert rows(strict, loose, "--at-min-isr-partitions") == [(loose, "0")]
    assert rows(strict, loose, "--under-replicated-partitions") == []
    assert rows(strict, loose, "--unavailable-partitions") == []
    assert len(rows(strict, loose)) == 3  # no filter: every partition


def test_producer_and_consumer_perf(b: Any, tmp_path: Path) -> None:
    t = _topic(b, "perf", partitions=2)
    out = tl(b, "producer-perf-test", "--topic", t, "--num-records", "3000", "--record-size", "100",
             "--throughput", "500", "--producer-props", "acks=all", "linger.ms=2").stdout.splitlines()
    window = re.compile(r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
                        r"\d+\.\d ms max latency\.$")
    assert out[:-1] and all(window.match(line) for line in out[:-1]), out  # one line per 5 s window
    assert re.match(r"^3000 records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, "
                    r"\d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$", out[-1])
    offsets = tl(b, "get-offsets", "--topic", t).stdout.splitlines()
    assert sum(int(line.rsplit(":", 1)[1]) for line in offsets) == 3000  # really written

    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\n")
    out = tl(b, "producer-perf-test", "--topic", t, "--num-records", "100", "--payload-file", str(payloads),
             "--throughput", "-1", "--print-metrics").stdout.splitlines()
    assert out[:2] == [f"Reading payloads from: {payloads}", "Number of messages read: 2"]
    assert out[2].startswith("100 records sent, ")
    assert out[3] == "" and re.match(r"^Metric Name +Value$", out[4])  # ToolsUtils.printMetrics' layout
    assert any(re.match(r"^librdkafka:txmsgs:\{client-id=tidelog-cli\} +: 100$", line) for line in out), out
    tl(b, "producer-perf-test", "--topic", t, "--num-records", "1", "--throughput", "-1", code=2)  # no payload
    tl(b, "producer-perf-test", "--topic", t, "--num-records", "1", "--record-size", "1", "--throughput", "-1",
       "--producer-props", "acks", code=2)

    out = tl(b, "consumer-perf-test", "--topic", t, "--messages", "3100").stdout.splitlines()
    assert out[0] == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                      "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    date = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
    row = re.match(rf"^{date}, {date}, (\d+\.\d{{4}}), \d+\.\d{{4}}, (\d+), \d+\.\d{{4}}, \d+, -?\d+, "
                   r"-?\d+\.\d{4}, -?\d+\.\d{4}$", out[1])
    assert row is not None, out
    assert int(row.group(2)) == 3100
    assert abs(float(row.group(1)) - (3000 * 100 + 50 * 5 + 50 * 4) / 1024 / 1024) < 0.0001
    short = tl(b, "consumer-perf-test", "--topic", t, "--messages", "4000", "--timeout", "1500", "--hide-header",
               "--date-format", "HH:mm", "--print-metrics").stdout.splitlines()
    assert short[0].startswith("WARNING: Exiting before consuming the expected number of messages: timeout (1500 ms)")
    assert re.match(r"^\d\d:\d\d, \d\d:\d\d, \d+\.\d{4}, \d+\.\d{4}, 3100, ", short[1]), short
    assert any(re.match(r"^librdkafka:rxmsgs:\{client-id=tidelog-cli\} +: \d+$", line) for line in short), short


def test_elections_and_reassignment_on_one_node(b: Any, tmp_path: Path) -> None:
    # one node answers as a one-broker Kafka: every leader is already the preferred one, nothing is listed for
    # all partitions; a named partition that exists is "already elected", one that does not is an error
    r = tl(b, "leader-election", "--election-type", "preferred", "--all-topic-partitions")
    assert r.stdout == "" and r.stderr == "", r
    t = f"el-{uuid.uuid4().hex[:6]}"
    tl(b, "topics", "create", t, "-p", "1")
    out = tl(b, "leader-election", "--election-type", "preferred", "--topic", t, "--partition", "0").stdout
    assert out == f"Valid replica already elected for partitions {t}-0\n", out
    r = tl(b, "leader-election", "--election-type", "preferred", "--topic", "nope", "--partition", "0", code=1)
    assert r.stdout.startswith("Error completing leader election (PREFERRED) for partition: nope-0: "), r.stdout
    assert r.stderr == "Error: 1 replica(s) could not be elected\n", r.stderr
    tl(b, "leader-election", "--election-type", "preferred", code=2)  # no partitions named
    tl(b, "leader-election", "--election-type", "preferred", "--topic", "t", code=2)  # --partition missing
    tl(b, "leader-election", "--election-type", "sideways", "--all-topic-partitions", code=2)
    # a single node answers ListPartitionReassignments as a one-broker Kafka: nothing in progress
    assert tl(b, "reassign-partitions", "--list").stdout.strip() == "No partition reassignments found."
    tl(b, "reassign-partitions", code=2)
    tl(b, "reassign-partitions", "--generate", code=2)
    moves = tmp_path / "topics.json"
    moves.write_text(json.dumps({"topics": [{"topic": "nope"}], "version": 1}))
    assert tl(b, "reassign-partitions", "--generate", "--topics-to-move-json-file", str(moves), "--broker-list", "0",
              code=1).stderr == "Error: Topic nope not found.\n"
