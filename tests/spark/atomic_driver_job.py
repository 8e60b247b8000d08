"""A streaming exactly-once pipeline run as its own driver process by tests/spark/test_sink_atomic.py:
``python atomic_driver_job.py BOOTSTRAP SRC DST CHECKPOINT KILL_BATCH``. ``src`` → ``dst`` (each source partition to
the same destination partition), ``availableNow``, 40 records per micro-batch. With ``KILL_BATCH`` >= 0 the driver
dies in the ``commit`` of that batch right after its first EndTxn: between two EndTxn calls, the decision written
and one task's transaction committed, the others still open. PySpark runs a streaming writer's ``commit`` in a
Python worker of the driver's JVM, so the hook SIGKILLs that JVM (the driver: no ``abort``, no cleanup, as a lost
driver host) and writes ``<CHECKPOINT>.killed`` first."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from tidelog.spark import TidelogDataSource, register
from tidelog.spark.kafka_sink import KafkaSinkStreamWriter


def _jvm_ancestor() -> int:
    """The pid of the nearest ancestor process running java (the driver JVM that started this worker)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"java" in f.read().split(b"\0")[0]:
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no java ancestor")


class _KillingWriter(KafkaSinkStreamWriter):
    def __init__(self, options: Any, schema: Any) -> None:
        super().__init__(options, schema)
        self.kill_batch = int(options.get("killBatch", "-1"))
        self.kill_file = str(options.get("checkpointLocation")) + ".killed"

    def after_end_txn(self, index: int, batch: int) -> None:
        if batch == self.kill_batch and index == 0:
            with open(self.kill_file, "w") as f:
                f.write(f"killed after the first EndTxn of batch {batch}")
            os.kill(_jvm_ancestor(), signal.SIGKILL)
            os._exit(1)


class KillingSource(TidelogDataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog-killing-driver"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return _KillingWriter(self.options, schema)


def main() -> None:
    bootstrap, src, dst, ck, kill_batch = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("tidelog-atomic-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.pollingDelay", "10ms").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(KillingSource)
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
         .selectExpr("key", "concat('out-', CAST(value AS STRING)) AS value", "partition")
         .writeStream.format("tidelog-killing-driver").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", dst).option("exactlyOnce", "true").option("killBatch", kill_batch)
         .option("checkpointLocation", ck).trigger(availableNow=True).start())
    q.awaitTermination()
    print(f"DONE {q.id}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
