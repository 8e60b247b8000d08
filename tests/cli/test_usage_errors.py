"""Bad use of the console tools (issue 25 item 5): one clear line and the exit codes the README promises (1 for a
failure, 2 for a usage error), run as a user runs them, against a real broker where one is needed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import consume_and_commit

pytestmark = pytest.mark.integration

TIDELOG = str(Path(sys.executable).with_name("tidelog"))


def tidelog(*args: str, broker: Any = None, input: bytes | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if broker is not None:
        env["TIDELOG_BOOTSTRAP"] = broker.bootstrap
    return subprocess.run([TIDELOG, *args], input=None if input is None else input.decode(), capture_output=True,
                          text=True, env=env, timeout=120, cwd=cwd)


def _error_lines(r: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith(("Error", "tidelog", "Warning"))
            or " ERROR " in line]


@pytest.fixture(scope="module")
def topic(broker: Any) -> str:
    assert tidelog("topics", "create", "ten", "-p", "1", broker=broker).returncode == 0
    assert tidelog("produce", "ten", broker=broker, input=b"".join(b"%d\n" % i for i in range(10))).returncode == 0
    return "ten"


@pytest.mark.parametrize(("offset", "expected"), [
    ("-3", ["7", "8", "9"]),  # 3 before the end, as kcat's -o -3
    ("-30", [str(i) for i in range(10)]),  # more than there are: from the start
    ("earliest", [str(i) for i in range(10)]),
    ("beginning", [str(i) for i in range(10)]),
    ("latest", []),
    ("end", []),
    ("7", ["7", "8", "9"]),
])
def test_consume_offset_forms(broker: Any, topic: str, offset: str, expected: list[str]) -> None:
    r = tidelog("consume", topic, "-o", offset, "--timeout-ms", "1500", broker=broker)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == expected
    assert r.stderr == ""


def test_consume_offset_not_understood_is_a_usage_error(broker: Any, topic: str) -> None:
    r = tidelog("consume", topic, "-o", "soon", broker=broker)
    assert r.returncode == 2
    assert _error_lines(r) == ["Error: Invalid value for --offset: expected N, -N, earliest or latest, got 'soon'"]


def test_serve_unknown_log_level_is_a_usage_error(tmp_path: Path) -> None:
    r = tidelog("serve", "--log-level", "LOUD", "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2, r.stderr
    assert "Invalid value for '--log-level': 'LOUD' is not one of" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "d").exists()


def test_serve_on_a_port_in_use_names_it_and_leaves_no_data_directory(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = tidelog("serve", "--port", str(port), "--data-dir", str(tmp_path / "new" / "data"),
                    "-o", "tidelog.metrics.listener=off")
    assert r.returncode == 1, r.stderr
    assert len(_error_lines(r)) == 1, r.stderr
    assert f"cannot listen on 127.0.0.1:{port} (listener PLAINTEXT): Address already in use" in r.stderr
    assert not (tmp_path / "new").exists()


def test_serve_data_dir_on_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory\n")
    for data_dir in ("afile", "afile/data"):
        r = tidelog("serve", "--port", "0", "--data-dir", data_dir, "-o", "tidelog.metrics.listener=off",
                    cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert _error_lines(r) == [f"tidelog serve: Invalid value {data_dir!r} for configuration log.dirs: afile is "
                                   "a file, not a directory"], r.stderr


def test_topics_create_refuses_counts_below_one(broker: Any) -> None:
    for option, value in (("-p", "-1"), ("-p", "0"), ("-r", "-1")):
        r = tidelog("topics", "create", "neg", option, value, broker=broker)
        assert r.returncode == 2, r.stderr
        assert f"must be at least 1, got {value}" in r.stderr
    assert "neg" not in tidelog("topics", "list", broker=broker).stdout.split()


def test_reset_offsets_modes_are_exclusive_and_clamping_is_said(broker: Any, topic: str) -> None:
    consume_and_commit(broker.bootstrap, "resetting", topic, 10)
    r = tidelog("groups", "reset-offsets", "resetting", "--topic", topic, "--to-latest", "--to-earliest",
                broker=broker)
    assert r.returncode == 2
    assert _error_lines(r) == ["Error: give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
                               "--shift-by, --to-datetime, --by-duration, --from-file "
                               "(got --to-earliest, --to-latest)"]
    r = tidelog("groups", "reset-offsets", "resetting", "--topic", topic, "--to-offset", "1000", "--execute",
                broker=broker)
    assert r.returncode == 0, r.stderr
    assert _error_lines(r) == [f"Warning: new offset (1000) is higher than latest offset for topic partition "
                               f"{topic}-0. Value will be set to 10"]
    r = tidelog("groups", "reset-offsets", "resetting", "--topic", topic, "--shift-by", "-25", "--execute",
                broker=broker)
    assert r.returncode == 0, r.stderr
    assert _error_lines(r) == [f"Warning: new offset (-15) is lower than earliest offset for topic partition "
                               f"{topic}-0. Value will be set to 0"]
