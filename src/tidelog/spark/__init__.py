"""PySpark data sources for tidelog (and any Kafka-compatible broker), on PySpark's Python Data Source API.

Usage::

    from tidelog.spark import register
    register(spark)
    df = (spark.read.format("tidelog")                 # was: format("kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())
    hist = spark.read.format("tidelog-log").load("/var/lib/tidelog/data")   # log directories, no broker

Formats:

* ``tidelog``: source and sink over the Kafka protocol (batch and Structured Streaming); the options and the
  schema of Spark's ``kafka`` format, plus ``commitOffsetsToGroup``; the sink is at-least-once, or exactly-once
  with ``exactlyOnce=true`` (see :mod:`tidelog.spark.kafka_sink`).
* ``tidelog-log``: batch source reading the segment files of tidelog or Apache Kafka data directories.

The Python workers must run an interpreter that has tidelog installed (``spark.pyspark.python`` or the
``PYSPARK_PYTHON`` environment variable). When neither is set, importing this module sets ``PYSPARK_PYTHON`` to
the importing interpreter, which has tidelog: a script run as ``.venv/bin/python job.py`` then works without an
activated venv (PySpark would start the workers with whatever ``python3`` is on PATH). Set it yourself on a
cluster whose executors have tidelog elsewhere.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType
except ImportError as exc:  # one clear line instead of a bare ModuleNotFoundError
    raise ImportError(f"tidelog.spark needs the spark extra: pip install 'tidelog[spark]' ({exc})") from exc

from tidelog.spark.arrow import ddl
from tidelog.spark.kafka_sink import KafkaSinkStreamWriter, KafkaSinkWriter
from tidelog.spark.kafka_source import KafkaBatchReader, KafkaPushdownReader, KafkaStreamReader
from tidelog.spark.log_source import LogDirPushdownReader, LogDirReader
from tidelog.spark.options import OptionError, overwrite_refused_message, parse_bool
from tidelog.spark.pushdown import pushdown_enabled

__all__ = ["TidelogDataSource", "TidelogLogDataSource", "register"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


class TidelogDataSource(DataSource):
    """``format("tidelog")``: Kafka-protocol source and sink."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> str:
        return ddl(parse_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        # with spark.sql.python.filterPushdown.enabled, a reader that takes WHERE filters (PySpark refuses it without)
        return KafkaPushdownReader(self.options) if pushdown_enabled() else KafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # Spark's Kafka sink refuses Overwrite too; ErrorIfExists/Ignore PySpark refuses itself
            raise OptionError(overwrite_refused_message())
        return KafkaSinkWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaSinkStreamWriter(self.options, schema)


class TidelogLogDataSource(DataSource):
    """``format("tidelog-log")``: reads log directories (tidelog's or Apache Kafka's) without a broker."""

    @classmethod
    def name(cls) -> str:
        return "tidelog-log"

    def schema(self) -> str:
        return ddl(parse_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogDirPushdownReader(self.options) if pushdown_enabled() else LogDirReader(self.options)


def register(spark: Any) -> None:
    """Register ``tidelog`` and ``tidelog-log`` with a SparkSession."""
    spark.dataSource.register(TidelogDataSource)
    spark.dataSource.register(TidelogLogDataSource)
