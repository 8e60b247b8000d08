"""``tidelog groups list|describe|reset-offsets|delete`` against ``tidelog serve``."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from tidelog.cli.groups import groups

from .conftest import FAST_GROUPS, MemberProcess, create_topic, produce_values, wait_until


def _run(*args: str) -> Any:
    return CliRunner().invoke(groups, list(args), catch_exceptions=False)


def _rows(output: str) -> list[list[str]]:
    """The data rows of a kafka-consumer-groups table (space-padded columns; the notes it prints are skipped)."""
    return [line.split() for line in output.splitlines()
            if line.strip() and not line.startswith(("GROUP", "Consumer group", "Warning", "("))]


def test_groups_cli(broker_factory: Any) -> None:
    b = broker_factory(FAST_GROUPS)
    bs = b.bootstrap
    create_topic(bs, "cli-t", 2)
    produce_values(bs, "cli-t", [f"x{i}" for i in range(10)], 2)  # 5 per partition
    member = MemberProcess("confluent", bs, "cli-g", "cli-t", session_ms=3000)
    try:
        wait_until(lambda: len(member.values()) == 10, 30, "all records consumed and committed")
        wait_until(lambda: sum(e["event"] == "committed" for e in member.snapshot()) == 10, 10, "commits")
        produce_values(bs, "cli-t", ["late0"], 2)  # lag 1 on partition 0 if the member does not consume in time
        r = _run("list", "-b", bs)
        assert ["cli-g", "Stable", "consumer"] in _rows(r.output)
        r = _run("describe", "cli-g", "-b", bs)
        rows = _rows(r.output)
        assert [(row[1], row[2]) for row in rows] == [("cli-t", "0"), ("cli-t", "1")]
        for row in rows:
            current, end, lag = int(row[3]), int(row[4]), int(row[5])
            assert lag == end - current and 0 <= lag <= 1
            assert row[6].startswith("rdkafka-")  # the owning member
        r = CliRunner().invoke(groups, ["reset-offsets", "cli-g", "--topic", "cli-t", "--to-earliest", "--execute",
                                        "-b", bs])
        assert r.exit_code != 0  # the group is active
        r = _run("delete", "cli-g", "-b", bs)
        assert r.exit_code != 0
    finally:
        member.kill()
    # the killed member expires after its session timeout; then the group is Empty
    wait_until(lambda: ["cli-g", "Empty", "consumer"] in _rows(_run("list", "-b", bs).output), 20, "empty group")
    r = _run("reset-offsets", "cli-g", "--topic", "cli-t:0", "--to-offset", "2", "-b", bs)
    assert "dry run" in r.output
    assert _rows(_run("describe", "cli-g", "-b", bs).output)[0][3] != "2"
    r = _run("reset-offsets", "cli-g", "--topic", "cli-t:0", "--to-offset", "2", "--execute", "-b", bs)
    assert r.exit_code == 0
    rows = _rows(_run("describe", "cli-g", "-b", bs).output)
    assert rows[0][3] == "2" and int(rows[0][5]) == int(rows[0][4]) - 2
    r = _run("reset-offsets", "cli-g", "--topic", "cli-t", "--shift-by", "-1", "--execute", "-b", bs)
    assert r.exit_code == 0
    assert [row[3] for row in _rows(_run("describe", "cli-g", "-b", bs).output)] == ["1", "4"]
    assert _run("delete", "cli-g", "-b", bs).exit_code == 0
    assert "cli-g" not in _run("list", "-b", bs).output
