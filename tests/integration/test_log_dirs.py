"""Log directory failure (Kafka's LogDirFailureChannel) and AlterReplicaLogDirs, with real faults: a small tmpfs
fills up (a real ENOSPC), or is remounted read-only (a real EROFS). Needs root to mount (CI runs as root); skips
with the reason otherwise.

* JBOD (two ``log.dirs``): the full one goes offline alone, its partitions answer KAFKA_STORAGE_ERROR to produce,
  fetch and list-offsets, the other directory keeps serving, DescribeLogDirs reports it, and a restart once space
  is freed brings it back with every acknowledged record.
* One directory: writes are refused with KAFKA_STORAGE_ERROR, what is on disk stays readable, and nothing
  acknowledged (counted from confluent-kafka's delivery reports) is lost after a restart.
* AlterReplicaLogDirs (kafka-python's admin client) moves a replica between the directories; a move left unfinished
  at a restart resumes (as Kafka).
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from helpers import (
    RawClient,
    consume_all,
    fetch_raw,
    list_offset_raw,
    metric_value,
    new_topic,
    produce_raw,
    wait_for,
)
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.records import build_batch

from faultfs import require_mount, tmpfs  # isort: skip

pytestmark = pytest.mark.integration

_path = Path(__file__).resolve().parent / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_test_log_dirs_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
BrokerProcess = _fixtures.BrokerProcess

KAFKA_STORAGE_ERROR = ErrorCode.KAFKA_STORAGE_ERROR
SEGMENT_BYTES = 1048576  # the smallest segment.bytes Kafka allows
JbodBroker = _fixtures.JbodBroker


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs={"segment.bytes": str(SEGMENT_BYTES)})])
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> tuple[list[bytes], list[Any]]:
    """Produce with acks=all and no retries; (acknowledged values in offset order, delivery errors)."""
    acked: list[tuple[int, bytes]] = []
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 5,
                  "enable.idempotence": False, "message.timeout.ms": 20000, "batch.size": 65536})
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=cb)
        p.poll(0)
    assert p.flush(30) == 0, "messages still in flight"
    return [v for _, v in sorted(acked)], errors


def _listening(broker: Any) -> bool:
    try:
        socket.create_connection(("127.0.0.1", broker.port), timeout=2).close()
        return True
    except OSError:
        assert broker.running, f"the broker exited after starting:\n{broker.log_text()[-4000:]}"
        return False


def _values(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    return [m.value() for m in consume_all(bootstrap, topic, partition=partition)]


def _describe_log_dirs(bootstrap: str) -> dict[str, dict]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    return {str(Path(d["log_dir"])): d for d in answer["log_dirs"]}


def _partitions(bootstrap: str, topic: str) -> dict[int, Any]:
    """confluent-kafka's view of a topic's partitions (PartitionMetadata by id), from a Metadata request."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return dict(md.topics[topic].partitions)


def _raw_errors(port: int, topic: str, partition: int) -> tuple[int, int, int]:
    """(produce, fetch, list-offsets) error codes of one partition, from a raw client."""
    with RawClient(port) as c:
        produced = produce_raw(c, topic, partition, build_batch([(None, b"x")]))["error_code"]
        fetched = fetch_raw(c, topic, partition, 0)["error_code"]
        listed = list_offset_raw(c, topic, partition, -1)["error_code"]
    return produced, fetched, listed


def test_jbod_full_directory_goes_offline_alone_and_recovers(tmp_path: Path) -> None:
    require_mount()
    a, b = tmp_path / "a", tmp_path / "b"
    with tmpfs(b, 8192) as fs:
        broker = JbodBroker([a, b], {"num.partitions": "1"})
        broker.start()
        try:
            topic = new_topic("jbod")
            _create(broker.bootstrap, topic, 4)
            on_b = sorted(p for p in range(4) if (b / f"{topic}-{p}").is_dir())
            on_a = sorted(p for p in range(4) if (a / f"{topic}-{p}").is_dir())
            assert on_a and on_b and sorted(on_a + on_b) == [0, 1, 2, 3]
            pa, pb = on_a[0], on_b[0]
            acked: dict[int, list[bytes]] = {}
            for p in (pa, pb):
                acked[p], errs = _produce(broker.bootstrap, topic, p, [f"{p}-before-{i}".encode() for i in range(50)])
                assert errs == [] and len(acked[p]) == 50

            filler = fs.fill()
            # past the disk blocks the active segment reserved: the disk is full
            more, errs = _produce(broker.bootstrap, topic, pb, [f"{pb}-full-{i}".encode().ljust(16384, b".")
                                                                for i in range(64)])
            acked[pb] += more
            assert errs, "the full directory took every write"
            assert {e.code() for e in errs} == {KafkaError.KAFKA_STORAGE_ERROR}, errs
            wait_for(lambda: "is offline" in broker.log_text(), 10, "the offline log line")

            # Metadata makes its partitions leaderless (Kafka's LEADER_NOT_AVAILABLE, leader -1, this broker an
            # offline replica), so clients stop sending to them; the other directory's partitions keep their leader
            parts = _partitions(broker.bootstrap, topic)
            for p in on_b:
                assert (parts[p].leader, parts[p].error and parts[p].error.code(), parts[p].isrs) == \
                    (-1, KafkaError.LEADER_NOT_AVAILABLE, [0]), p
            for p in on_a:
                assert (parts[p].leader, parts[p].error) == (0, None), p
            # its partitions answer KAFKA_STORAGE_ERROR to produce, fetch and list-offsets
            assert _raw_errors(broker.port, topic, pb) == (KAFKA_STORAGE_ERROR,) * 3
            # the other directory keeps serving, reads and writes
            assert _raw_errors(broker.port, topic, pa) == (0, 0, 0)
            more, errs = _produce(broker.bootstrap, topic, pa, [f"{pa}-during-{i}".encode() for i in range(50)])
            assert errs == [] and len(more) == 50
            acked[pa] += [b"x"] + more  # the raw client's record, then these
            assert _values(broker.bootstrap, topic, pa) == acked[pa]

            assert metric_value(broker, "tidelog_offline_log_directories") == 1
            dirs = _describe_log_dirs(broker.bootstrap)
            assert dirs[str(b)]["error_code"] == KAFKA_STORAGE_ERROR and dirs[str(b)]["topics"] == []
            assert dirs[str(a)]["error_code"] == 0
            assert {p["partition_index"] for t in dirs[str(a)]["topics"] if t["name"] == topic
                    for p in t["partitions"]} == set(on_a)
            # kafka-log-dirs.sh's view (tidelog log-dirs describe): the offline directory named by its error
            table = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "log-dirs", "describe", "--table",
                                    "-b", broker.bootstrap], capture_output=True, text=True, timeout=60, check=True)
            states = {line.split()[1]: line.split()[2] for line in table.stdout.split("\n\n")[0].splitlines()[1:]}
            assert states == {str(a): "online", str(b): "org.apache.kafka.common.errors.KafkaStorageException"}

            # new topics go to the online directory (the topic registry copy in the failed one is skipped)
            later = new_topic("later")
            _create(broker.bootstrap, later, 2)
            assert (a / f"{later}-0").is_dir() and (a / f"{later}-1").is_dir()
            assert not list(b.glob(f"{later}-*"))

            broker.stop()
            filler.unlink()
            broker.start()
            # CI once saw the restarted broker refuse the next connection: if it died after starting, say why
            wait_for(lambda: _listening(broker), 30, "the restarted broker accepting connections")
            assert _values(broker.bootstrap, later, 0) == []
            assert {p: (m.leader, m.error) for p, m in _partitions(broker.bootstrap, topic).items()} == \
                {p: (0, None) for p in range(4)}
            # the directory is back (recovered from its last recovery point), with every acknowledged record
            assert _describe_log_dirs(broker.bootstrap)[str(b)]["error_code"] == 0
            assert metric_value(broker, "tidelog_offline_log_directories") == 0
            for p in (pa, pb):
                read = _values(broker.bootstrap, topic, p)
                assert read[: len(acked[p])] == acked[p], f"partition {p}: acknowledged records lost"
            more, errs = _produce(broker.bootstrap, topic, pb, [b"after"])
            assert errs == [] and more == [b"after"]
        finally:
            broker.stop()


def test_single_directory_full_refuses_writes_keeps_reads_loses_nothing(tmp_path: Path) -> None:
    require_mount()
    data = tmp_path / "data"
    with tmpfs(data, 4096) as fs:
        broker = BrokerProcess(data, {"num.partitions": "1"})
        broker.start()
        try:
            topic = new_topic("full")
            _create(broker.bootstrap, topic, 1)
            acked: list[bytes] = []
            errs: list[Any] = []
            for round_ in range(40):  # 40 x 32 x 4 KiB = 5 MiB > 4 MiB: the disk fills on the way
                more, errs = _produce(broker.bootstrap, topic, 0, [f"r{round_}-{i}".encode().ljust(4096, b".")
                                                                   for i in range(32)])
                acked += more
                if errs:
                    break
            assert errs, "the disk never filled"
            assert {e.code() for e in errs} == {KafkaError.KAFKA_STORAGE_ERROR}, errs
            assert len(acked) > 100
            wait_for(lambda: "last online log directory" in broker.log_text(), 10, "the read-only log line")

            # writes refused (also once space is there: only a restart brings the directory back), reads work
            fs.resize(16384)
            produced, fetched, listed = _raw_errors(broker.port, topic, 0)
            assert produced == KAFKA_STORAGE_ERROR and fetched == 0 and listed == 0
            assert _values(broker.bootstrap, topic, 0) == acked
            assert _describe_log_dirs(broker.bootstrap)[str(data)]["error_code"] == KAFKA_STORAGE_ERROR

            broker.stop()
            broker.start()
            read = _values(broker.bootstrap, topic, 0)
            assert read == acked, "acknowledged records lost (or unacknowledged ones kept) across the restart"
            more, errs = _produce(broker.bootstrap, topic, 0, [b"after"])
            assert errs == [] and more == [b"after"]
        finally:
            broker.stop()


def test_alter_replica_log_dirs_moves_a_replica(tmp_path: Path) -> None:
    """AlterReplicaLogDirs with kafka-python's admin client: the replica moves, DescribeLogDirs shows it, its
    records and appends survive, and a restart finds it in its new directory."""
    a, b = tmp_path / "a", tmp_path / "b"
    broker = JbodBroker([a, b], {"num.partitions": "1"})
    broker.start()
    try:
        topic = new_topic("move")
        _create(broker.bootstrap, topic, 1)
        src = a if (a / f"{topic}-0").is_dir() else b
        dst = b if src == a else a
        values = [f"v{i}".encode().ljust(2000, b".") for i in range(400)]  # several segments
        acked, errs = _produce(broker.bootstrap, topic, 0, values)
        assert errs == [] and acked == values
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            result = admin.alter_replica_log_dirs({(topic, 0, 0): str(dst)})
            assert [e.errno for e in result.values()] == [0], result
            bad = admin.alter_replica_log_dirs({(topic, 0, 0): str(tmp_path / "nowhere")})
            assert [e.errno for e in bad.values()] == [57], bad  # LOG_DIR_NOT_FOUND
        finally:
            admin.close()
        # answered at once, as Kafka: the future log is copied and swapped in the background
        wait_for(lambda: not [p for t in _describe_log_dirs(broker.bootstrap)[str(dst)]["topics"]
                              for p in t["partitions"] if p["is_future_key"]], 30, "the move finished")
        assert (dst / f"{topic}-0").is_dir() and not (src / f"{topic}-0").exists()
        dirs = _describe_log_dirs(broker.bootstrap)
        assert [p["partition_index"] for t in dirs[str(dst)]["topics"] if t["name"] == topic
                for p in t["partitions"]] == [0]
        assert not [t for t in dirs[str(src)]["topics"] if t["name"] == topic]
        _more, errs = _produce(broker.bootstrap, topic, 0, [b"after-move"])
        assert errs == []
        assert _values(broker.bootstrap, topic, 0) == values + [b"after-move"]
        broker.stop()
        broker.start()
        assert (dst / f"{topic}-0").is_dir()
        assert _values(broker.bootstrap, topic, 0) == values + [b"after-move"]
        wait_for(lambda: not any(p.name.endswith("-delete") for p in src.iterdir()), 10, "the old copy removed")
    finally:
        broker.stop()


def test_unfinished_move_is_resolved_at_start(tmp_path: Path) -> None:
    """A ``-future`` copy beside its live log (a crash during the copy) is resumed, as Kafka does: the move
    finishes after the start; one without (a crash between the renames) is the only copy and is renamed into
    place."""
    a, b = tmp_path / "a", tmp_path / "b"
    broker = JbodBroker([a, b], {"num.partitions": "1"})
    broker.start()
    try:
        topic = new_topic("future")
        _create(broker.bootstrap, topic, 2)
        acked = {p: _produce(broker.bootstrap, topic, p, [f"{p}-{i}".encode() for i in range(20)])[0]
                 for p in range(2)}
        broker.stop()
        home = {p: (a if (a / f"{topic}-{p}").is_dir() else b) for p in range(2)}
        other = {p: (b if home[p] == a else a) for p in range(2)}
        # partition 0: the copy was interrupted (live log still there)
        shutil.copytree(home[0] / f"{topic}-0", other[0] / f"{topic}-0.{'1' * 32}-future")
        # partition 1: crashed after the live log was renamed away
        shutil.copytree(home[1] / f"{topic}-1", other[1] / f"{topic}-1.{'2' * 32}-future")
        (home[1] / f"{topic}-1").rename(home[1] / f"{topic}-1.{'3' * 32}-delete")
        broker.start()
        wait_for(lambda: not list(other[0].glob("*-future")), 30, "the resumed move finished")
        assert not list(other[1].glob("*-future"))
        assert (other[0] / f"{topic}-0").is_dir() and (other[1] / f"{topic}-1").is_dir()
        assert not (home[0] / f"{topic}-0").exists()
        for p in range(2):
            assert _values(broker.bootstrap, topic, p) == acked[p]
    finally:
        broker.stop()


def test_alter_replica_log_dirs_is_advertised(broker: Any) -> None:
    with RawClient(broker.port) as c:
        versions = {k["api_key"]: (k["min_version"], k["max_version"])
                    for k in c.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                                 "client_software_version": "1"})["api_keys"]}
    assert versions[ApiKey.ALTER_REPLICA_LOG_DIRS] == (1, 2)
