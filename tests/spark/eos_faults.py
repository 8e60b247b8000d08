"""Fault injection for tests/spark/test_kafka_sink_eos.py: a ``tidelog`` sink whose first attempt of partition 0
dies (the Python worker exits) in the middle of its Kafka transaction. Shipped to the Python workers by value."""

from __future__ import annotations

import os
import time
from typing import Any

from pyspark import TaskContext

from tidelog.spark import TidelogDataSource
from tidelog.spark.kafka_sink import KafkaSinkWriter


def high_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition  # by reference, in the worker

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def _die_when_in_log(batches: Any, bootstrap: str, topic: str) -> Any:
    """Yield the first Arrow batch; when the writer asks for more, wait until its rows are in the topic's log
    (inside the still open transaction), then kill the Python worker: the transaction stays open."""
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        yield batch
    deadline = time.monotonic() + 30
    while high_watermark(bootstrap, topic) < rows and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(17)


class _KillFirstAttemptWriter(KafkaSinkWriter):
    def write(self, iterator: Any) -> Any:
        tc = TaskContext.get()
        if tc is not None and tc.partitionId() == 0 and tc.attemptNumber() == 0:
            iterator = _die_when_in_log(iterator, self.conf["bootstrap.servers"], str(self.topic))
        return super().write(iterator)


class KillFirstAttemptSource(TidelogDataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog-kill-first-attempt"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return _KillFirstAttemptWriter(self.options, schema)
