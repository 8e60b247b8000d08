"""Atomic micro-batches of the exactly-once ``tidelog`` sink (``exactlyOnce=true``, ``atomicBatches``: the tasks
leave their transactions open, the driver ends them all; issue 29 item 2), against a real local Spark and a real
``tidelog serve``:

* a batch that fails after one task flushed is never visible to read_committed readers (and its records are
  aborted, the LSO released);
* a successful batch is visible only once every task succeeded (probed from the last task while the first is done,
  against the per-task mode where it is already visible);
* a driver killed between two EndTxn calls, restarted from its checkpoint, finishes the half-committed batch:
  the output is exactly the input, and nothing was written twice, not even aborted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from helpers import read_to_end
from pyspark import cloudpickle as spark_cloudpickle

from tidelog.spark.atomic import AtomicCommit, decision_group, decision_metadata
from tidelog.spark.kafka_sink import parse_atomic
from tidelog.spark.options import OptionError
from tidelog.spark.producer import RawProducer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tidelog_spark_atomic_faults", HERE / "atomic_faults.py")
assert _spec is not None and _spec.loader is not None
faults = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = faults
_spec.loader.exec_module(faults)
spark_cloudpickle.register_pickle_by_value(faults)

ROWS = 500  # per Spark partition


def committed(bootstrap: str, group: str, topic: str) -> tuple[int, str]:
    """(offset, metadata) the group committed on ``topic``-0 (stable offsets only); offset -1 = none.

    The offset through confluent-kafka's AdminClient; the metadata through the project's own OffsetFetch
    (``RawProducer.committed_offset``): confluent-kafka 2.16's ``TopicPartition`` copies librdkafka's metadata
    with ``strdup``, but that buffer is ``metadata_size`` bytes without a terminating NUL, so ``tp.metadata``
    sometimes carries heap bytes past the end (seen twice: a UnicodeDecodeError at position 43 of a 43-byte
    marker)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])], require_stable=True)[group].result(30)
    (tp,) = res.topic_partitions
    raw = RawProducer({"bootstrap.servers": bootstrap})
    try:
        found = raw.committed_offset(group, topic, 0)
    finally:
        raw.close()
    assert (found[0] if found is not None else -1) == int(tp.offset), (found, tp.offset)
    return int(tp.offset), (found[1] or "") if found is not None else ""


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[int]:
    """The values of ``topic`` as integers (``out-`` stripped), sorted."""
    return sorted(int(m.value().removeprefix(b"out-")) for m in read_to_end(bootstrap, topic, isolation))


def wait_for(cond: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.05)


def test_atomic_option() -> None:
    eos = object()
    assert parse_atomic({}, None, raw=True) is False  # at-least-once: nothing to make atomic
    assert parse_atomic({}, eos, raw=True) is True  # the default with exactlyOnce and the raw producer
    assert parse_atomic({"atomicBatches": "false"}, eos, raw=True) is False
    assert parse_atomic({}, eos, raw=False) is False  # librdkafka: per-task transactions
    with pytest.raises(OptionError, match="needs the raw producer"):
        parse_atomic({"atomicBatches": "true"}, eos, raw=False)
    small = [AtomicCommit(f"p-{i}", 3, 1, False, 1000 + i, 2) for i in range(4)]
    assert json.loads(decision_metadata(3, small)) == {"b": 3, "n": 4, "t": {str(i): [1000 + i, 2] for i in range(4)}}
    many = [AtomicCommit(f"p-{i}", 3, 1, False, 10**12 + i, 2) for i in range(500)]
    assert json.loads(decision_metadata(3, many)) == {"b": 3, "n": 500}  # too big for offset.metadata.max.bytes


def _write(spark: Any, kt: Any, topic: str, tmp: Path, mode: str, atomic: bool) -> None:
    df = spark.range(0, 2 * ROWS, 1, 2).selectExpr("CAST(id AS STRING) AS value")
    (df.write.mode("append").format("tidelog-after-partition-0").option("kafka.bootstrap.servers", kt.bootstrap)
     .option("topic", topic).option("exactlyOnce", "true").option("atomicBatches", str(atomic).lower())
     .option("faultMode", mode).option("faultDir", str(tmp)).save())


def test_failed_batch_is_never_visible(spark: Any, kt: Any, tmp_path: Path) -> None:
    spark.dataSource.register(faults.AfterPartition0Source)
    topic = kt.new_topic(1)
    with pytest.raises(Exception, match="injected failure after partition 0 flushed"):
        _write(spark, kt, topic, tmp_path, "fail", atomic=True)
    # partition 0's rows were flushed into the log inside its transaction ...
    assert values(kt.bootstrap, topic, "read_uncommitted") == list(range(ROWS))
    # ... and the driver's abort ended it: the LSO passes the aborted records, read_committed sees nothing
    wait_for(lambda: faults.end_offset(kt.bootstrap, topic, True) == faults.end_offset(kt.bootstrap, topic, False),
             "the LSO reaching the high watermark (the transaction aborted)")
    assert values(kt.bootstrap, topic) == []


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "per-task"])
def test_batch_visible_only_when_every_task_succeeded(spark: Any, kt: Any, tmp_path: Path, atomic: bool) -> None:
    spark.dataSource.register(faults.AfterPartition0Source)
    topic = kt.new_topic(1)
    _write(spark, kt, topic, tmp_path, "probe", atomic=atomic)
    probe = json.loads((tmp_path / "probe").read_text())
    if atomic:
        # task 0 had flushed all its rows and returned: none readable, its transaction open for the driver
        assert probe == {"stable": 0, "state": "Ongoing"}
    else:
        # per task: task 0's rows and commit marker readable while task 1 had not written a row
        assert probe == {"stable": ROWS + 1, "state": None}
    assert values(kt.bootstrap, topic) == list(range(2 * ROWS))
    assert values(kt.bootstrap, topic, "read_uncommitted") == list(range(2 * ROWS))


def _job(bootstrap: str, src: str, dst: str, ck: Path, kill_batch: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run([sys.executable, str(HERE / "atomic_driver_job.py"), bootstrap, src, dst, str(ck),
                           str(kill_batch)], capture_output=True, text=True, timeout=300, env=env)


def test_driver_killed_between_end_txns_then_restarted(spark: Any, kt: Any, tmp_path: Path) -> None:
    src, dst = kt.new_topic(2), kt.new_topic(2)
    n = 120  # 60 per partition, 40 per micro-batch: batches 0, 1, 2
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(n)])
    ck = tmp_path / "ck"
    first = _job(kt.bootstrap, src, dst, ck, kill_batch=1)
    killed = Path(f"{ck}.killed")
    assert killed.exists(), (first.returncode, first.stdout[-2000:], first.stderr[-4000:])
    assert killed.read_text() == "killed after the first EndTxn of batch 1" and first.returncode != 0
    meta = json.loads((ck / "metadata").read_text().splitlines()[0])
    prefix = f"tidelog-spark-{meta['id']}"
    decided, how = committed(kt.bootstrap, decision_group(prefix), dst)
    assert decided == 1 and len(json.loads(how)["t"]) == 2, how  # the decision names both open transactions
    assert not (ck / "commits" / "1").exists()
    # half committed: batch 0 (40) and one task of batch 1 (20) readable; the other task's 20 held by its open
    # transaction (its partition's LSO stops before them)
    assert len(values(kt.bootstrap, dst, "read_uncommitted")) == 80
    wait_for(lambda: len(values(kt.bootstrap, dst)) == 60, "the first EndTxn's markers")
    # the restart: the same query (same checkpoint, so the same query id and transactional ids) in this session
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
         .selectExpr("key", "concat('out-', CAST(value AS STRING)) AS value", "partition")
         .writeStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("topic", dst)
         .option("exactlyOnce", "true").option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    assert q.awaitTermination(300), "query did not finish"
    assert q.exception() is None, q.exception()
    assert str(q.id) == meta["id"]
    assert (ck / "commits" / "1").exists() and (ck / "commits" / "2").exists()
    expected = sorted(range(n))
    assert values(kt.bootstrap, dst) == expected  # exactly once: the ledger of the whole output
    # the replay finished the open transaction instead of writing it again: not even an aborted copy in the log
    assert values(kt.bootstrap, dst, "read_uncommitted") == expected
    assert [committed(kt.bootstrap, f"{prefix}-{p}", dst)[0] for p in (0, 1)] == [2, 2]
