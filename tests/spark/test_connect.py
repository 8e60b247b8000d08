"""The data sources through **Spark Connect** (issue 29 item 3): a Spark Connect server started from the pyspark
install (``org.apache.spark.sql.connect.service.SparkConnectServer``, whose jar ships in pyspark 4's ``jars/``; no
separate download), a client session ``SparkSession.builder.remote("sc://127.0.0.1:PORT")`` that registers
``tidelog`` and ``tidelog-log`` (the classes travel to the server by cloudpickle; the server's Python workers import
tidelog from this virtualenv) and runs a batch read through the broker, a read of the log directory, and the
exactly-once pipeline (streaming read → transform → ``exactlyOnce`` sink, atomic batches), checked with a
read_committed consumer. Skipped, with the reason, when the Connect client's dependencies (``pyspark[connect]``)
are missing or the server cannot start here."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect] (grpcio)")
pytest.importorskip("pandas", reason="the Spark Connect client needs pyspark[connect] (pandas)")

from helpers import read_to_end

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: Any) -> Iterator[str]:
    import pyspark

    home = Path(pyspark.__file__).parent
    if not list((home / "jars").glob("spark-connect_*.jar")):
        pytest.skip(f"no spark-connect jar in {home / 'jars'}")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    log_path = tmp_path_factory.mktemp("connect") / "server.log"
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]",
           "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", "spark.sql.streaming.pollingDelay=10ms"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip(f"the Spark Connect server did not start (exit {proc.poll()}): "
                                f"{log_path.read_text()[-1500:]}")
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[Any]:
    # the Connect client's own builder: pyspark.sql.SparkSession.builder.remote() refuses to start while this
    # process holds a classic session (SESSION_ALREADY_EXIST), which other test modules of the run create
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from tidelog.spark import TidelogDataSource, TidelogLogDataSource

    session = RemoteSparkSession.builder.remote(connect_url).getOrCreate()
    assert type(session).__module__.startswith("pyspark.sql.connect"), type(session)  # a Connect client session
    session.dataSource.register(TidelogDataSource)
    session.dataSource.register(TidelogLogDataSource)
    try:
        yield session
    finally:
        session.stop()


def test_batch_reads_through_connect(remote: Any, kt: Any, spark_broker: Any) -> None:
    topic = kt.new_topic(2)
    kt.produce(topic, [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(300)])
    df = remote.read.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", topic).load()
    rows = df.selectExpr("CAST(value AS STRING) AS v", "partition").collect()
    assert sorted(r.v for r in rows) == sorted(f"v{i}" for i in range(300))
    assert {r.partition for r in rows} == {0, 1}
    spark_broker_data = str(spark_broker.data_dir)
    log = remote.read.format("tidelog-log").option("subscribe", topic).load(spark_broker_data)
    assert log.count() == 300


def test_exactly_once_pipeline_through_connect(remote: Any, kt: Any, tmp_path: Path) -> None:
    src, dst = kt.new_topic(2), kt.new_topic(2)
    n = 200
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(n)])
    q = (remote.readStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "80").load()
         .selectExpr("key", "concat('out-', CAST(value AS STRING)) AS value")
         .writeStream.format("tidelog").option("kafka.bootstrap.servers", kt.bootstrap).option("topic", dst)
         .option("exactlyOnce", "true").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300), "query did not finish"
    assert q.exception() is None, q.exception()
    commits = [f for f in (tmp_path / "ck" / "commits").iterdir() if f.name.isdigit()]
    assert len(commits) >= 3  # several micro-batches (80 records each), each committed by the driver
    got = sorted(m.value() for m in read_to_end(kt.bootstrap, dst))
    assert got == sorted(f"out-{i}".encode() for i in range(n))
