"""``tidelog topics|produce|consume`` as a user runs them: subprocesses, shell pipes, exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


def _env(broker: Any) -> dict[str, str]:
    return dict(os.environ, TIDELOG_BOOTSTRAP=broker.bootstrap, PATH=f"{Path(TIDELOG).parent}:{os.environ['PATH']}")


def tl(broker: Any, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([TIDELOG, *args], input=input, capture_output=True, env=_env(broker), timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"tidelog {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}")
    return proc


def sh(broker: Any, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], capture_output=True, env=_env(broker), timeout=120
    )


def test_pipe_round_trip(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-rt", "--partitions", "1")
    proc = sh(broker, "printf 'a\\nb\\n' | tidelog produce cli-rt && tidelog consume cli-rt --from-beginning --max-messages 2")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"a\nb\n"
    assert proc.stderr == b""


def test_keys_headers_offsets_and_json(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-kv", "--partitions", "1")
    tl(
        broker,
        "produce",
        "cli-kv",
        "--key-separator",
        ":",
        "--header",
        "h1=v1",
        "--compression",
        "gzip",
        "--acks",
        "1",
        input=b"k1:hello\nk2:world: with colon\n",
    )
    out = tl(
        broker,
        "consume",
        "cli-kv",
        "--from-beginning",
        "--max-messages",
        "2",
        "--print-key",
        "--print-offset",
        "--print-headers",
    ).stdout
    assert out.decode().splitlines() == [
        "Partition:0\tOffset:0\th1:v1\tk1\thello",
        "Partition:0\tOffset:1\th1:v1\tk2\tworld: with colon",
    ]
    out = tl(broker, "consume", "cli-kv", "--offset", "1", "--partition", "0", "-n", "1", "--format", "json").stdout
    rec = json.loads(out)
    assert rec["offset"] == 1 and rec["key"] == "k2" and rec["value"] == "world: with colon"
    assert rec["headers"] == [{"key": "h1", "value": "v1"}]
    # a line without the separator is an error (non-zero exit)
    bad = tl(broker, "produce", "cli-kv", "--key-separator", ":", input=b"nokey\n", check=False)
    assert bad.returncode != 0 and b"separator" in bad.stderr


def test_idempotent_produce_and_partition_option(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-idem", "--partitions", "3")
    lines = b"".join(f"{i}\n".encode() for i in range(500))
    proc = tl(broker, "produce", "cli-idem", "--idempotent", "--partition", "2", "--linger-ms", "5", "-v", input=lines)
    assert b"500 record(s) delivered, 0 failed" in proc.stderr
    out = tl(broker, "consume", "cli-idem", "--partition", "2", "--from-beginning", "--max-messages", "500").stdout
    assert out == lines
    # nothing went to the other partitions
    empty = tl(broker, "consume", "cli-idem", "--partition", "0", "--from-beginning", "--timeout-ms", "1500").stdout
    assert empty == b""


def test_produce_failure_exits_non_zero(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-small", "--config", "max.message.bytes=1000")
    big = b"x" * 5000 + b"\n"
    proc = tl(broker, "produce", "cli-small", "--delivery-timeout-ms", "5000", input=big, check=False)
    assert proc.returncode == 1
    assert b"MSG_SIZE_TOO_LARGE" in proc.stderr
    proc = tl(broker, "produce", "cli-small", "--partition", "7", "--delivery-timeout-ms", "3000", input=b"a\n", check=False)
    assert proc.returncode == 1


@pytest.mark.parametrize("lines", [5, 2000])
def test_consume_broken_pipe_exits_quietly(broker: Any, lines: int) -> None:
    """``| head`` exits: the consumer stops quietly, whether it hits EPIPE on a write (2000 lines) or has
    written everything into the pipe and is idle, waiting for records (5 lines: it must notice the reader is
    gone without writing)."""
    topic = f"cli-pipe-{lines}"
    tl(broker, "topics", "create", topic)
    tl(broker, "produce", topic, input=b"".join(f"line {i}\n".encode() for i in range(lines)))
    proc = sh(broker, f"tidelog consume {topic} --from-beginning | head -n 3")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"line 0\nline 1\nline 2\n"
    assert b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr


def test_consume_timeout_exits_when_idle(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-idle")
    tl(broker, "produce", "cli-idle", input=b"only\n")
    proc = tl(broker, "consume", "cli-idle", "--from-beginning", "--timeout-ms", "2000")
    assert proc.stdout == b"only\n"


def test_topics_commands(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-t1", "--partitions", "2", "--config", "retention.ms=3600000")
    again = tl(broker, "topics", "create", "cli-t1", check=False)
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in again.stderr
    tl(broker, "topics", "create", "cli-t1", "--if-not-exists")
    bad = tl(broker, "topics", "create", "cli-rf", "--replication-factor", "3", check=False)
    assert bad.returncode == 1 and b"INVALID_REPLICATION_FACTOR" in bad.stderr
    assert "cli-t1" in tl(broker, "topics", "list").stdout.decode().splitlines()

    tl(broker, "produce", "cli-t1", "--partition", "1", input=b"a\nb\nc\n")
    out = tl(broker, "topics", "describe", "cli-t1").stdout.decode()
    lines = out.splitlines()  # kafka-topics.sh --describe's lines, tidelog's offsets appended to each partition's
    assert re.fullmatch(r"Topic: cli-t1\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 2\tReplicationFactor: 1\t"
                        r"Configs: (\S+,)?retention.ms=3600000(,\S+)?", lines[0]), lines[0]
    # the id as Kafka prints it (URL-safe base64, as in the partition's own partition.metadata), whatever its bytes
    stored = (broker.data_dir / "cli-t1-0" / "partition.metadata").read_text().split("topic_id: ")[1].strip()
    assert lines[0].split("\t")[1] == f"TopicId: {stored}"
    assert lines[1] == ("\tTopic: cli-t1\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A"
                        "\tLogStartOffset: 0\tLogEndOffset: 0")
    assert lines[2] == ("\tTopic: cli-t1\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A"
                        "\tLogStartOffset: 0\tLogEndOffset: 3")

    tl(broker, "topics", "alter-config", "cli-t1", "--set", "segment.ms=100000", "--delete", "retention.ms")
    lines = tl(broker, "topics", "describe", "cli-t1").stdout.decode().splitlines()
    assert "segment.ms=100000" in lines[0].split("Configs: ")[1].split(",")
    assert "retention.ms=" not in lines[0]
    bad = tl(broker, "topics", "alter-config", "cli-t1", "--set", "segment.ms=never", check=False)
    assert bad.returncode == 1 and b"INVALID_CONFIG" in bad.stderr

    tl(broker, "topics", "add-partitions", "cli-t1", "--partitions", "3")
    lines = tl(broker, "topics", "describe", "cli-t1").stdout.decode().splitlines()
    assert "\tPartitionCount: 3\t" in lines[0]
    assert sum(1 for line in lines if line.startswith("\tTopic: cli-t1\tPartition: 2\t")) == 1

    missing = tl(broker, "topics", "describe", "cli-nope", check=False)
    assert missing.returncode == 1
    tl(broker, "topics", "delete", "cli-t1")
    assert "cli-t1" not in tl(broker, "topics", "list").stdout.decode().splitlines()
    gone = tl(broker, "topics", "delete", "cli-t1", check=False)
    assert gone.returncode == 1
    tl(broker, "topics", "delete", "cli-t1", "--if-exists")


class _Nowhere:
    bootstrap = "127.0.0.1:1"  # nothing listens on port 1


def _one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == code, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("Error: "), err
    if code != 2:  # a usage error has click's "Usage:" and "Try --help" lines before its one error line
        assert len(lines) == 1, err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize(
    "args",
    [("topics", "list"), ("topics", "describe", "x"), ("topics", "create", "x"), ("groups", "list"),
     ("groups", "describe", "g"), ("consume", "x", "--max-messages", "1"), ("produce", "x")],
)
def test_unreachable_broker_is_one_line_and_exit_1(args: tuple[str, ...]) -> None:
    """Before: librdkafka retried until the command's 30 s timeout (or forever for consume)."""
    proc = tl(_Nowhere(), *args, input=b"a\n", check=False)
    _one_line_error(proc, 1, "no broker reachable at 127.0.0.1:1", "Connection refused")


def test_unreachable_zookeeper_is_one_line() -> None:
    proc = tl(_Nowhere(), "cluster", "describe", "-z", "127.0.0.1:1", check=False)
    _one_line_error(proc, 1, "cannot reach ZooKeeper at 127.0.0.1:1")


def test_bad_use_is_one_line(broker: Any, tmp_path: Path) -> None:
    _one_line_error(tl(broker, "topics", "create", "bad-cfg", "--config", "retention.ms", check=False), 2,
                    "expected KEY=VALUE")  # a usage error: click's exit code 2, with its "Try --help" lines
    _one_line_error(tl(broker, "topics", "create", "bad-cfg", "--config", "retention.ms=soon", check=False), 1,
                    "INVALID_CONFIG", "retention.ms")
    _one_line_error(tl(broker, "topics", "describe", "no-such-topic", check=False), 1, "does not exist")
    _one_line_error(tl(broker, "groups", "describe", "no-such-group", check=False), 1,
                    "consumer group 'no-such-group' does not exist")
    _one_line_error(tl(broker, "consume", "no-such-topic", "--max-messages", "1", check=False), 1,
                    "UNKNOWN_TOPIC_OR_PART")
    _one_line_error(tl(broker, "groups", "reset-offsets", "g", "--to-earliest", "--topic", "no-such-topic",
                       check=False), 1, "unknown topic no-such-topic")
    _one_line_error(tl(broker, "cluster", "reassign", "--reassignment-json-file", str(tmp_path / "none.json"),
                       "--execute", check=False), 1, "No such file or directory")
    # the failed commands created nothing (reset-offsets used to auto-create the topic it was given)
    assert "no-such-topic" not in tl(broker, "topics", "list").stdout.decode().split()


def test_consume_with_group_commits(broker: Any) -> None:
    tl(broker, "topics", "create", "cli-group")
    tl(broker, "produce", "cli-group", input=b"1\n2\n3\n")
    first = tl(broker, "consume", "cli-group", "--group", "g1", "--from-beginning", "--max-messages", "2").stdout
    assert first == b"1\n2\n"
    tl(broker, "produce", "cli-group", input=b"4\n")
    # the group resumes after what it consumed (offsets committed on close), whatever --from-beginning says
    rest = tl(broker, "consume", "cli-group", "--group", "g1", "--from-beginning", "--timeout-ms", "5000").stdout
    assert rest == b"3\n4\n"
