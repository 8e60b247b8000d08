"""Fixtures for the PySpark data source tests: ONE local[2] SparkSession and ONE ``tidelog serve`` for the
whole package (session scope), plus small client helpers. Tests use unique topic names, so they share both."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_spark_broker_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
BrokerProcess = _fixtures.BrokerProcess


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[Any]:
    root = Path(tempfile.mkdtemp(prefix="tidelog-spark-"))
    # small segments and index interval: several segments per partition and real .index entries
    b = BrokerProcess(root / "data", {"log.segment.bytes": str(1024 * 1024), "log.index.interval.bytes": "4096"})
    b.start()
    try:
        yield b
    finally:
        try:
            b.stop()
        except Exception:
            b.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    session = (
        SparkSession.builder.master("local[2,2]")  # a failed task is retried once
        .appName("tidelog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


def new_topic(bootstrap: str, partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    fut.result(30)
    return name


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[Any, ...]],
    conf: dict[str, Any] | None = None,
) -> None:
    """``records``: (key, value) or (key, value, partition) or (key, value, partition, headers, timestamp_ms)."""
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(conf or {})})
    for rec in records:
        kw: dict[str, Any] = {"key": rec[0], "value": rec[1]}
        if len(rec) > 2 and rec[2] is not None:
            kw["partition"] = rec[2]
        if len(rec) > 3 and rec[3] is not None:
            kw["headers"] = rec[3]
        if len(rec) > 4 and rec[4] is not None:
            kw["timestamp"] = rec[4]
        p.produce(topic, on_delivery=lambda err, _m: errors.append(err) if err else None, **kw)
    assert p.flush(30) == 0
    assert not errors, errors


@pytest.fixture()
def bootstrap(spark_broker: Any) -> str:
    return str(spark_broker.bootstrap)


class KafkaHelpers:
    """``new_topic`` / ``produce`` bound to the session broker (tests import nothing from conftest)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def new_topic(self, partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        return new_topic(self.bootstrap, partitions, config, prefix)

    def produce(self, topic: str, records: Sequence[tuple[Any, ...]], conf: dict[str, Any] | None = None) -> None:
        produce(self.bootstrap, topic, records, conf)


@pytest.fixture(scope="session")
def kt(spark_broker: Any) -> KafkaHelpers:
    return KafkaHelpers(str(spark_broker.bootstrap))


@pytest.fixture()
def own_broker(tmp_path: Path) -> Iterator[Any]:
    """A ``tidelog serve`` of the test's own (a test that kills and restarts its broker uses this one)."""
    b = BrokerProcess(tmp_path / "own-data")
    b.start()
    try:
        yield b
    finally:
        try:
            b.stop()
        except Exception:
            b.kill()
