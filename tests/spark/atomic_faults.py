"""Fault injection for tests/spark/test_sink_atomic.py (shipped to the Python workers by value): a ``tidelog`` sink
whose task of partition 1 waits until the task of partition 0 has written and flushed (its ``write`` returned),
then either fails (``faultMode=fail``) or records what a read_committed reader can see at that moment
(``faultMode=probe``: the topic's last stable offset and, atomic, the state of task 0's transaction, written to
``faultDir``/probe)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from pyspark import TaskContext

from tidelog.protocol.api_keys import ApiKey
from tidelog.spark import TidelogDataSource
from tidelog.spark.atomic import TxnClient
from tidelog.spark.fetcher import Connection
from tidelog.spark.kafka_sink import KafkaSinkWriter


def end_offset(bootstrap: str, topic: str, read_committed: bool) -> int:
    """ListOffsets latest of ``topic``-0: the high watermark, or (read_committed) the last stable offset."""
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 10.0)
    try:
        body = {"replica_id": -1, "isolation_level": 1 if read_committed else 0, "topics": [{"name": topic,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1,
                                "max_num_offsets": 1}]}]}
        res = conn.request(ApiKey.LIST_OFFSETS, conn.version(ApiKey.LIST_OFFSETS, 7), body)
        p = res["topics"][0]["partitions"][0]
        assert p["error_code"] == 0, p
        return int(p["offset"])
    finally:
        conn.close()


class _FaultWriter(KafkaSinkWriter):
    def __init__(self, options: Any, schema: Any) -> None:
        super().__init__(options, schema)
        self.mode = options.get("faultMode")
        self.dir = str(options.get("faultDir"))

    def write(self, iterator: Any) -> Any:
        tc = TaskContext.get()
        assert tc is not None
        if tc.partitionId() == 1:
            iterator = self._after_partition_0(iterator)
        msg = super().write(iterator)
        if tc.partitionId() == 0:
            with open(os.path.join(self.dir, "p0-done"), "w") as f:  # its rows are flushed (its txn open or not)
                f.write(str(tc.attemptNumber()))
        return msg

    def _after_partition_0(self, iterator: Any) -> Any:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.dir, "p0-done")):
            if time.monotonic() > deadline:
                raise TimeoutError("partition 0 did not finish within 60 s")
            time.sleep(0.02)
        if self.mode == "fail":
            raise RuntimeError("injected failure after partition 0 flushed")
        bootstrap = self.conf["bootstrap.servers"]
        stable = end_offset(bootstrap, str(self.topic), read_committed=True)
        state = None
        if self.atomic:  # what keeps task 0's rows from readers: its transaction, still open
            assert self.eos is not None and self.eos.prefix is not None
            client = TxnClient(self.conf)
            try:
                state = client.describe(f"{self.eos.prefix}-0")["transaction_state"]
            finally:
                client.close()
        else:  # task 0 committed before its write returned; its markers follow EndTxn's answer: await them
            while stable == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
                stable = end_offset(bootstrap, str(self.topic), read_committed=True)
        with open(os.path.join(self.dir, "probe"), "w") as f:
            json.dump({"stable": stable, "state": state}, f)
        yield from iterator


class AfterPartition0Source(TidelogDataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog-after-partition-0"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return _FaultWriter(self.options, schema)
