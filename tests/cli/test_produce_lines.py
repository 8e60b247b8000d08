"""``tidelog produce`` with kafka-console-producer's line reader properties (``--property parse.key=true``,
``parse.headers=true``, separators, ``null.marker``): each line's key, value and headers reach the broker as
written (issue 25, item 6). A real broker, the command run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import consume_all, new_topic

from tidelog.cli.line_reader import LineError, LineReader

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


def tidelog(broker: Any, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, TIDELOG_BOOTSTRAP=broker.bootstrap)
    return subprocess.run([TIDELOG, *args], input=input, capture_output=True, env=env, timeout=120)


def test_keys_and_headers_per_line(broker: Any) -> None:
    topic = new_topic("lines")
    lines = b"trace:t1,env:prod\tuser-1\t{\"a\":1}\n\tuser-2\tplain\nenv:NULL\tNULL\tgone\n"
    r = tidelog(broker, "produce", topic, "-p", "0", "-H", "src=cli", "--property", "parse.key=true",
                "--property", "parse.headers=true", "--property", "null.marker=NULL", input=lines)
    assert r.returncode == 0, r.stderr
    got = [(m.key(), m.value(), m.headers()) for m in consume_all(broker.bootstrap, topic)]
    assert got == [
        (b"user-1", b'{"a":1}', [("src", b"cli"), ("trace", b"t1"), ("env", b"prod")]),
        (b"user-2", b"plain", [("src", b"cli")]),
        (None, b"gone", [("src", b"cli"), ("env", None)]),
    ]


def test_custom_separators_and_errors(broker: Any) -> None:
    topic = new_topic("lines")
    r = tidelog(broker, "produce", topic, "-p", "0", "--property", "parse.key=true", "--property",
                "key.separator=::", input=b"k1::v1\nk2::v::2\n")
    assert r.returncode == 0, r.stderr
    assert [(m.key(), m.value()) for m in consume_all(broker.bootstrap, topic)] == [(b"k1", b"v1"), (b"k2", b"v::2")]
    r = tidelog(broker, "produce", topic, "--property", "parse.key=true", input=b"k3\tv3\nno separator\n")
    assert r.returncode == 1
    assert "no key separator found on line number 2" in r.stderr.decode()
    assert [m.key() for m in consume_all(broker.bootstrap, topic)][-1] == b"k3"  # the line before it was sent
    r = tidelog(broker, "produce", topic, "--property", "parse.keys=true", input=b"x\n")  # neither theirs nor ours
    assert r.returncode == 1
    assert 'No such configuration property: "parse.keys"' in r.stderr.decode()


def test_reader_units() -> None:
    r = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert r.read(b"no-sep", 1) == (None, b"no-sep", None)
    h = LineReader.from_properties({"parse.headers": "true", "headers.separator": ";", "headers.key.separator": "="})
    assert h.read(b"a=1;b=\tvalue", 1) == (None, b"value", [("a", b"1"), ("b", b"")])
    with pytest.raises(LineError, match="no header key separator found in pair 'a'"):
        h.read(b"a\tvalue", 3)
    with pytest.raises(ValueError, match="expected true or false"):
        LineReader.from_properties({"parse.key": "yes"})
