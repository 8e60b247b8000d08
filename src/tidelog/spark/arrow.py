"""The record schema shared by the ``tidelog`` and ``tidelog-log`` sources, and its Arrow batches.

The schema is Spark's Kafka source schema: ``key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int`` and, with ``includeHeaders``,
``headers array<struct<key:string,value:binary>>``. Readers yield :class:`pyarrow.RecordBatch` objects whose
schema equals what PySpark derives from that Spark schema (PySpark checks this exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

BASE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

BATCH_ROWS = 8192
"""Rows per Arrow batch a reader yields (amortises the per-batch cost against memory per task)."""


def ddl(include_headers: bool) -> str:
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema PySpark expects from a reader of :func:`ddl` (computed by PySpark itself)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


def spark_schema(include_headers: bool) -> Any:
    """:func:`ddl` as a StructType (built directly: parsing DDL needs a SparkContext, executors have none)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def record_batch(
    topic: str,
    partition: int,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    offsets: Sequence[int],
    timestamps_ms: Sequence[int],
    timestamp_types: Sequence[int] | int,
    headers: Sequence[Any] | None,
) -> pa.RecordBatch:
    """One Arrow batch of records of one partition. ``headers`` is None unless the schema has headers; each
    entry is None (no headers) or a list of ``(key, value)`` pairs."""
    schema = arrow_schema(headers is not None)
    n = len(values)
    ts = pc.multiply(pa.array(timestamps_ms, pa.int64()), 1000).cast(schema.field("timestamp").type)
    if isinstance(timestamp_types, int):
        ts_type = pa.repeat(pa.scalar(timestamp_types, pa.int32()), n)
    else:
        ts_type = pa.array(timestamp_types, pa.int32())
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        ts,
        ts_type,
    ]
    if headers is not None:
        columns.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


COLUMNAR_BATCH_ROWS = 65536
"""Rows per Arrow batch of the columnar readers (``tidelog-log`` without headers, the ``tidelog`` source)."""


def _binary(n: int, validity: bytes | None, nulls: int, offsets: bytes, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(), n, [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
                         pa.py_buffer(data)], null_count=nulls,
    )


def columns_batch(topic: str, partition: int, cols: Sequence[Any]) -> pa.RecordBatch:
    """One Arrow batch (schema without headers) from the buffers of ``ColumnBuilder.finish()``
    (:mod:`tidelog.client.columnar`), zero-copy."""
    n, offsets, stamps_us, types, kvalid, knulls, koffs, kdata, vvalid, vnulls, voffs, vdata = cols
    schema = arrow_schema(False)
    columns = [
        _binary(n, kvalid, knulls, koffs, kdata),
        _binary(n, vvalid, vnulls, voffs, vdata),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(schema.field("timestamp").type, n, [None, pa.py_buffer(stamps_us)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
