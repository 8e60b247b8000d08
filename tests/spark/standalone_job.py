"""The pipeline run by ``spark-submit --master spark://...`` in tests/spark/test_standalone_cluster.py.

    spark-submit --master spark://HOST:PORT standalone_job.py BOOTSTRAP SRC DST CHECKPOINT RESULT.json

A Structured Streaming query (``Trigger.AvailableNow``, 100 offsets per micro-batch) reads SRC with the
``tidelog`` source, transforms each record (value -> ``out-<value>``, plus a header ``proc`` naming the processes
the row went through: the Python worker, the executor JVM and the Spark worker JVM above it, found in /proc by a
Python UDF, with where that worker imported tidelog from) and writes DST with the exactly-once ``tidelog`` sink; then a batch query reads DST back with the
``tidelog`` source at ``read_committed``. RESULT.json gets what the test checks: the driver's pid, the
application id, the query's progress and the rows of the batch read. Runs on the executors only what Spark ships
there: tidelog is imported by the interpreter ``PYSPARK_PYTHON`` names (installed in it, or from ``--py-files``), the
UDF by value.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

import tidelog
from tidelog.client.columnar import CColumnBuilder
from tidelog.spark import register


def _process_chain() -> str:
    """``pyworker=<pid>;executor=<pid>:<id>;worker=<pid>;tidelog=<path>;c=<0|1>``: this Python worker, the
    executor JVM (CoarseGrainedExecutorBackend, with its executor id) and the standalone Worker JVM above it, from
    /proc; where this Python worker imported tidelog from, and whether its C accelerators loaded."""
    found = {"pyworker": str(os.getpid()), "executor": "", "worker": "", "tidelog": os.path.dirname(tidelog.__file__),
             "c": "1" if CColumnBuilder is not None else "0"}
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode("utf-8", "replace").split("\0")
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
            exec_id = args[args.index("--executor-id") + 1] if "--executor-id" in args else "?"
            found["executor"] = f"{pid}:{exec_id}"
        elif "org.apache.spark.deploy.worker.Worker" in args:
            found["worker"] = str(pid)
            break
        pid = ppid
    return ";".join(f"{k}={v}" for k, v in found.items())


_CHAIN: list[str] = []


def process_chain(_value: object) -> str:
    if not _CHAIN:  # once per Python worker process
        _CHAIN.append(_process_chain())
    return _CHAIN[0]


def main(bootstrap: str, src: str, dst: str, checkpoint: str, result_path: str) -> None:
    spark = SparkSession.builder.appName("tidelog-standalone-exactly-once").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    spark.udf.register("process_chain", udf(process_chain, "string"))
    q = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100")
         .load()
         .selectExpr("key", "concat('out-', CAST(value AS STRING)) AS value",
                     "array(named_struct('key', 'proc', 'value', CAST(process_chain(value) AS BINARY))) AS headers")
         .writeStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("exactlyOnce", "true").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    rows = (spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", dst)
            .option("kafka.isolation.level", "read_committed").load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value").collect())
    result = {
        "driver_pid": os.getpid(),
        "driver_tidelog": os.path.dirname(tidelog.__file__),
        "master": spark.sparkContext.master,
        "app_id": spark.sparkContext.applicationId,
        "query_id": q.id,
        "batches": [{"batchId": p["batchId"], "numInputRows": p["numInputRows"]} for p in q.recentProgress],
        "batch_read": [[r.key, r.value] for r in rows],
    }
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
