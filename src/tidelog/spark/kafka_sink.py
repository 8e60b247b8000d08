"""The ``tidelog`` sink: writes a DataFrame to topics over the Kafka protocol (batch and streaming).

Columns, as in Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (string or binary),
``headers`` (``array<struct<key:string,value:binary>>``), ``topic`` (string; the ``topic`` option wins) and
``partition`` (int; null or absent = the producer's partitioner). Every task uses an idempotent
confluent-kafka producer and flushes all of its records before it reports success, so a micro-batch commits
only after the broker acknowledged every record. A failed delivery fails the task with the broker's error.

Delivery is **at-least-once**: a task retried by Spark, or a micro-batch replayed after a failure, writes its
records again. Deduplicate on a unique key downstream if you need exactly-once results.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from tidelog.spark.options import OptionError, client_config

FLUSH_TIMEOUT_S = 120.0


@dataclass
class SinkCommit(WriterCommitMessage):
    records: int


class DeliveryError(RuntimeError):
    """The broker rejected a record (the task fails with the broker's error)."""


def validate_schema(schema: StructType, topic_option: str | None) -> None:
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found")
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a string or binary")
    if topic_option is None:
        if "topic" not in fields:
            raise OptionError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a "
                "topic."
            )
        if not isinstance(fields["topic"], StringType):
            raise OptionError("Topic type must be a string")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("partition attribute type must be an int")
    if "headers" in fields:
        h = fields["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, (BinaryType, StringType))
        )
        if not ok:
            raise OptionError("headers attribute type must be array<struct<key:string,value:binary>>")


def producer_config(options: Mapping[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1024 * 1024,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 512 * 1024,
    }
    conf.update(client_config(options, refuse=False))
    return conf


def write_batches(conf: Mapping[str, Any], topic_option: str | None, batches: Iterator[Any]) -> int:
    """Produce every row of ``batches``; flush; raise on the first delivery error. Returns the row count."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and not errors:
            errors.append(
                f"Failed to send record to {msg.topic()}-{msg.partition()}: {err.str()} ({err.name()})"
            )

    producer = Producer(dict(conf))
    count = 0
    produce = producer.produce
    poll = producer.poll
    try:
        for batch in batches:
            names = {n.lower(): i for i, n in enumerate(batch.schema.names)}
            n = batch.num_rows
            values = batch.column(names["value"]).to_pylist()
            keys = batch.column(names["key"]).to_pylist() if "key" in names else [None] * n
            if topic_option is not None:
                topics = [topic_option] * n
            else:
                topics = batch.column(names["topic"]).to_pylist()
            parts = batch.column(names["partition"]).to_pylist() if "partition" in names else None
            hdrs = batch.column(names["headers"]).to_pylist() if "headers" in names else None
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise OptionError("Topic cannot be null (row has no topic and the topic option is not set)")
                kwargs: dict[str, Any] = {"value": values[i], "key": keys[i], "on_delivery": on_delivery}
                if parts is not None and parts[i] is not None:
                    kwargs["partition"] = parts[i]
                if hdrs is not None and hdrs[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in hdrs[i]]
                while True:
                    try:
                        produce(topic, **kwargs)
                        break
                    except BufferError:
                        poll(0.05)  # local queue full: serve delivery reports, then retry
                count += 1
                if errors:
                    raise DeliveryError(errors[0])
            poll(0)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        if errors:
            raise DeliveryError(errors[0])
        if remaining:
            raise DeliveryError(f"{remaining} records were not delivered within {FLUSH_TIMEOUT_S:.0f}s")
    finally:
        # make sure nothing is left in flight after a failure; delivery reports still reach ``errors``
        producer.purge()
        producer.flush(0)
    return count


class KafkaSinkWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.topic = options.get("topic")
        validate_schema(schema, self.topic)
        self.conf = producer_config(options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return SinkCommit(write_batches(self.conf, self.topic, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class KafkaSinkStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.topic = options.get("topic")
        validate_schema(schema, self.topic)
        self.conf = producer_config(options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return SinkCommit(write_batches(self.conf, self.topic, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
