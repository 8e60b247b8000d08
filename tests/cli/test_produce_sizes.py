"""``tidelog produce`` into a topic with a small ``max.message.bytes`` (issue 25 item 3): a line too large for the
topic fails alone, named by its line number and size, and the lines around it are written (before, the whole
batch was refused and nothing was written, with the same error three times and no line named). Kafka's Java
producer splits a batch the broker refused as too large; librdkafka does not, so ``tidelog produce`` sends the
records of such a batch again one per batch. A real broker, the command run as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import consume_all, log_end_offset, wait_for

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


def tidelog(broker: Any, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, TIDELOG_BOOTSTRAP=broker.bootstrap)
    return subprocess.run([TIDELOG, *args], input=input, capture_output=True, env=env, timeout=120)


def _values(broker: Any, topic: str, partition: int) -> list[bytes]:
    return [m.value() for m in consume_all(broker.bootstrap, topic, partition=partition)]


def test_an_oversized_line_fails_alone_and_its_neighbours_are_written(broker: Any) -> None:
    r = tidelog(broker, "topics", "create", "logs", "-p", "2", "--config", "max.message.bytes=2048")
    assert r.returncode == 0, r.stderr
    big = b"x" * 3000
    r = tidelog(broker, "produce", "logs", "-p", "1", input=b"small1\n" + big + b"\nsmall2\n")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert _values(broker, "logs", 1) == [b"small1", b"small2"]
    failures = [line for line in err.splitlines() if "not written" in line]
    assert len(failures) == 1 and "line 2 (3000 bytes)" in failures[0] and "MSG_SIZE_TOO_LARGE" in failures[0], err
    assert err.splitlines()[-1] == "tidelog: 2 record(s) delivered, 1 failed", err


def test_small_lines_whose_batches_exceed_the_topic_limit_are_all_written(broker: Any) -> None:
    """max.message.bytes bounds a whole batch: 300 lines of 60 bytes fit one by one but not together."""
    r = tidelog(broker, "topics", "create", "small-batches", "-p", "1", "--config", "max.message.bytes=2048")
    assert r.returncode == 0, r.stderr
    lines = [f"{i:05d}".encode() + b"." * 55 for i in range(300)]
    r = tidelog(broker, "produce", "small-batches", "--linger-ms", "50", input=b"\n".join(lines) + b"\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    assert sorted(_values(broker, "small-batches", 0)) == lines


def test_ctrl_c_reports_what_was_written(broker: Any) -> None:
    """Ctrl-C while ``produce`` waits for more input: the lines read are delivered, one line says how many,
    exit 130 (was: ``Aborted!``, exit 1, no count)."""
    assert tidelog(broker, "topics", "create", "interrupted", "-p", "1").returncode == 0
    env = dict(os.environ, TIDELOG_BOOTSTRAP=broker.bootstrap)
    proc = subprocess.Popen([TIDELOG, "produce", "interrupted"], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"one\ntwo\n")
    proc.stdin.flush()
    # both lines read and sent: they are in the log (their delivery reports wait for the next poll)
    wait_for(lambda: log_end_offset(broker.port, "interrupted", 0) == 2, what="both records written")
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read().decode()
    assert proc.wait(30) == 130, rest
    assert rest.strip().splitlines() == ["tidelog: interrupted after 2 line(s): 2 record(s) delivered, 0 failed"]
    assert _values(broker, "interrupted", 0) == [b"one", b"two"]
