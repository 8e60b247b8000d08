"""A deleted topic's committed offsets leave every group (issue 25 item 1; Kafka's ``onPartitionsDeleted``), on one
node: a topic created again under the same name is read from its start by the group that read the old one, the
removal is written to ``__consumer_offsets`` (tombstones) so it survives a restart, and ``tidelog groups describe``
answers for a group whose offsets name a topic that is not there (instead of failing on ``_UNKNOWN_PARTITION``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient
from helpers import committed_offsets, consume_and_commit

from tidelog.cli.groups import groups

from .conftest import FAST_GROUPS, create_topic, produce_values

pytestmark = pytest.mark.integration


def _delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until its future completes
    admin.delete_topics([name])[name].result(30)


def _describe(bootstrap: str, group: str) -> Any:
    return CliRunner().invoke(groups, ["describe", group, "-b", bootstrap], catch_exceptions=False)


def test_deleted_topic_offsets_leave_every_group_and_stay_gone_after_restart(broker_factory: Any) -> None:
    b = broker_factory(FAST_GROUPS)
    bs = b.bootstrap
    create_topic(bs, "t1", 1)
    create_topic(bs, "t2", 1)
    produce_values(bs, "t1", [str(i) for i in range(100)], 1)
    produce_values(bs, "t2", [str(i) for i in range(10)], 1)
    assert consume_and_commit(bs, "app", "t1", 100) == [str(i).encode() for i in range(100)]
    consume_and_commit(bs, "both", "t1", 100)
    consume_and_commit(bs, "both", "t2", 10)
    assert committed_offsets(bs, "app") == {("t1", 0): 100}
    assert committed_offsets(bs, "both") == {("t1", 0): 100, ("t2", 0): 10}

    _delete_topic(bs, "t1")
    # gone from every group at once; a group left with nothing is gone too, as in Kafka
    assert committed_offsets(bs, "app") == {}
    assert committed_offsets(bs, "both") == {("t2", 0): 10}
    r = _describe(bs, "app")
    assert r.exit_code == 1 and "consumer group 'app' does not exist" in r.output, r.output
    r = _describe(bs, "both")
    assert r.exit_code == 0, r.output
    assert [line.split()[1:6] for line in r.output.splitlines() if line.startswith("both ")] == [
        ["t2", "0", "10", "10", "0"]]

    b.restart()  # the tombstones are in __consumer_offsets: the load does not bring the offsets back
    assert committed_offsets(bs, "app") == {}
    assert committed_offsets(bs, "both") == {("t2", 0): 10}

    # the same name again: the group reads the new topic from its start (it skipped the first 100 records before)
    create_topic(bs, "t1", 1)
    produce_values(bs, "t1", [f"new{i}" for i in range(160)], 1)
    assert consume_and_commit(bs, "app", "t1", 160) == [f"new{i}".encode() for i in range(160)]
    assert committed_offsets(bs, "app") == {("t1", 0): 160}
    b.restart()  # and the new commit is not undone by the old tombstones
    assert committed_offsets(bs, "app") == {("t1", 0): 160}


def test_describe_a_group_whose_offsets_name_a_missing_topic(broker_factory: Any) -> None:
    """Offsets of a topic the cluster does not have (here: removed behind the broker's back while it was stopped;
    also what an older broker, or another Kafka-compatible one, may keep): describe shows them with no log end
    offset and no lag, and the other partitions as usual."""
    b = broker_factory(FAST_GROUPS)
    bs = b.bootstrap
    create_topic(bs, "kept", 1)
    create_topic(bs, "vanished", 2)
    produce_values(bs, "kept", ["a", "b", "c"], 1)
    produce_values(bs, "vanished", ["x", "y"], 2)
    consume_and_commit(bs, "g", "kept", 3)
    consume_and_commit(bs, "g", "vanished", 2)
    b.stop()
    registry = b.data_dir / "tidelog-topics.json"
    data = json.loads(registry.read_text())
    del data["topics"]["vanished"]
    registry.write_text(json.dumps(data))
    for d in Path(b.data_dir).glob("vanished-*"):
        shutil.rmtree(d)
    b.start()
    assert committed_offsets(bs, "g") == {("kept", 0): 3, ("vanished", 0): 1, ("vanished", 1): 1}
    r = _describe(bs, "g")
    assert r.exit_code == 0, r.output
    rows = [line.split()[1:6] for line in r.output.splitlines() if line.startswith("g ")]
    assert rows == [["kept", "0", "3", "3", "0"], ["vanished", "0", "1", "-", "-"], ["vanished", "1", "1", "-", "-"]]
