"""The ``tidelog`` sink: writes a DataFrame to topics over the Kafka protocol (batch and streaming).

Columns, as in Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (string or binary),
``headers`` (``array<struct<key:string,value:binary>>``), ``topic`` (string; the ``topic`` option wins) and
``partition`` (int; null or absent = the producer's partitioner). A failed delivery fails the task with the
broker's error.

Default, **at-least-once**: every task uses an idempotent producer (``acks=all``) and flushes all of its records
before it reports success, so a micro-batch commits only after the broker acknowledged every record; a task
retried by Spark, or a micro-batch replayed after a failure, writes its records again.

Two producers (option ``produceClient``): ``raw`` (default) encodes the task's Arrow batches into record
batches in C and sends them as Produce requests itself (:mod:`tidelog.spark.producer`), several times faster
than one ``produce()`` call per row; ``librdkafka`` uses confluent-kafka. The raw path is used only when it can
honour the configuration (:func:`tidelog.spark.producer.raw_produce_unsupported`: its security, the murmur2
partitioner, acks, compression); otherwise the task uses confluent-kafka. Both partition as Kafka's default
partitioner does (murmur2 of the key; librdkafka's ``murmur2_random``).

``exactlyOnce=true``: every task writes its partition of a (micro-)batch in one Kafka transaction with the
transactional id ``<prefix>-<partition id>`` and commits, in the same transaction, the batch id as the offset of
the consumer group of that same name on ``<markerTopic>``-0 (AddOffsetsToTxn + TxnOffsetCommit). A new attempt
fences the earlier ones (``init_transactions``), then reads that offset (stable offsets only) and writes
nothing when its partition of this batch id is already committed. The driver cannot commit a transaction a task
opened (only the producer holding the epoch can, and librdkafka cannot resume another process's transaction), so
the task commits it itself at the end of ``write``; the driver's ``abort`` fences the ids of failed tasks. The
guarantee, its conditions and the failure windows are in docs/SPARK.md.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from tidelog.spark.atomic import (
    DEFAULT_ATOMIC_TXN_TIMEOUT_MS,
    AtomicCommit,
    abort_batch,
    commit_batch,
    write_atomic,
)
from tidelog.spark.options import OptionError, client_config, parse_bool
from tidelog.spark.producer import DeliveryError, RawProducer, raw_produce_unsupported
from tidelog.spark.producer_control import ProducerControl

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = ["DeliveryError", "KafkaSinkStreamWriter", "KafkaSinkWriter"]

log = logging.getLogger("tidelog.spark.sink")

FLUSH_TIMEOUT_S = 120.0
ABORT_TIMEOUT_S = 10.0


@dataclass
class SinkCommit(WriterCommitMessage):
    records: int


def parse_produce_client(options: Mapping[str, str], conf: Mapping[str, Any]) -> bool:
    """Whether tasks use the raw producer: option ``produceClient`` (``raw``, the default, or ``librdkafka``),
    and a configuration the raw path honours (else confluent-kafka, with a log line saying why)."""
    value = (options.get("produceClient") or "raw").strip().lower()
    if value not in ("raw", "librdkafka"):
        raise OptionError(f"Option 'produceClient' must be raw or librdkafka, got {value!r}")
    if value == "librdkafka":
        return False
    why = raw_produce_unsupported(conf)
    if why is not None:
        log.info("tidelog sink: using confluent-kafka (the raw producer does not support %s)", why)
        return False
    return True


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
        "partitioner": "murmur2_random",  # Kafka's default partitioner (the Java client's, Spark's Kafka sink's)
        "linger.ms": 5,
        "batch.size": 1024 * 1024,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 512 * 1024,
    }
    conf.update(client_config(options, refuse=False))
    return conf


def _on_delivery(errors: list[str]) -> Any:
    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and not errors:
            errors.append(
                f"Failed to send record to {msg.topic()}-{msg.partition()}: {err.str()} ({err.name()})"
            )

    return on_delivery


def produce_rows(
    producer: Producer, topic_option: str | None, batches: Iterator[Any], errors: list[str]
) -> int:
    """Hand every row of ``batches`` to ``producer`` (no flush); raise on the first delivery error seen."""
    on_delivery = _on_delivery(errors)
    count = 0
    produce = producer.produce
    poll = producer.poll
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
    return count


def flush_or_raise(producer: Producer, errors: list[str]) -> None:
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise DeliveryError(errors[0])
    if remaining:
        raise DeliveryError(f"{remaining} records were not delivered within {FLUSH_TIMEOUT_S:.0f}s")


def write_batches(conf: Mapping[str, Any], topic_option: str | None, batches: Iterator[Any], raw: bool = False) -> int:
    """At-least-once: produce every row of ``batches``; flush; raise on the first delivery error."""
    if raw:
        # RawProducer.flush() waits for every batch and raises DeliveryError itself (no timeout argument,
        # no purge: close() drops whatever is left); confluent-kafka's Producer below needs flush(timeout)
        # and purge().
        raw_producer = RawProducer(conf)
        try:
            count = raw_producer.produce_arrow(batches, topic_option)
            raw_producer.flush()
        finally:
            raw_producer.close()
        return count
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer(dict(conf))
    try:
        count = produce_rows(producer, topic_option, batches, errors)
        flush_or_raise(producer, errors)
    finally:
        # make sure nothing is left in flight after a failure; delivery reports still reach ``errors``
        producer.purge()
        producer.flush(0)
    return count


# -- exactly-once: one Kafka transaction per task, the batch id committed inside it -----------------------------

DEFAULT_PREFIX = "tidelog-spark-"
MARKER_PARTITION = 0
TXN_TIMEOUT_S = 60.0
FENCE_TIMEOUT_S = 10.0
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's StreamExecution.BATCH_ID_KEY (a task's local property)
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY: the id kept in the checkpoint


@dataclass
class EosCommit(WriterCommitMessage):
    """What an exactly-once task did: ``skipped`` = its partition of this batch id was already committed."""

    transactional_id: str
    batch_id: int
    records: int
    skipped: bool


class ReusedPrefixError(RuntimeError):
    """The marker of a transactional id is ahead of the batch being written (another query's prefix)."""


@dataclass(frozen=True)
class EosOptions:
    prefix: str | None
    """``transactionalIdPrefix``; None = ``tidelog-spark-<query id>`` (streaming) or one random id per write."""
    marker_topic: str
    checkpoint: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> EosOptions | None:
        if not parse_bool(options, "exactlyOnce", False):
            return None
        raw_prefix = options.get("transactionalIdPrefix")
        prefix = raw_prefix.strip() if raw_prefix is not None else None
        if raw_prefix is not None and not prefix:
            raise OptionError("Option 'transactionalIdPrefix' must not be empty")
        if prefix is None and not streaming:
            prefix = f"{DEFAULT_PREFIX}batch-{uuid.uuid4().hex}"  # one write job; its task retries share it
        marker = options.get("markerTopic") or options.get("topic")
        if not marker:
            raise OptionError(
                "exactlyOnce needs the option 'topic' or 'markerTopic': an existing topic under whose partition 0 "
                "each task's transaction commits the batch id (as a consumer group offset)"
            )
        if options.get("kafka.transactional.id") is not None:
            raise OptionError(
                "Kafka option 'transactional.id' is not supported with exactlyOnce: every task sets its own "
                "(<transactionalIdPrefix>-<partition>); use 'transactionalIdPrefix'"
            )
        return cls(prefix=prefix, marker_topic=str(marker), checkpoint=options.get("checkpointLocation"))


def task_identity(eos: EosOptions) -> tuple[str, int, int]:
    """(transactional id, partition id, batch id) of the running task, from its TaskContext."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("the exactly-once sink must run inside a Spark task")
    batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
    prefix = eos.prefix
    if prefix is None:
        query = tc.getLocalProperty(QUERY_ID_PROPERTY)
        if not query:
            raise RuntimeError("no streaming query id in the task's properties; set 'transactionalIdPrefix'")
        prefix = DEFAULT_PREFIX + query
    return f"{prefix}-{tc.partitionId()}", tc.partitionId(), int(batch) if batch is not None else 0


def _group_offsets_client(conf: Mapping[str, Any]) -> dict[str, Any]:
    keep = {k: v for k, v in conf.items() if not k.startswith(("transaction", "enable.idempotence", "acks",
                                                               "linger", "batch.", "queue.buffering",
                                                               "compression", "retries", "delivery", "partitioner"))}
    return keep


def read_marker(conf: Mapping[str, Any], group: str, topic: str) -> tuple[int, dict[str, Any]] | None:
    """The batch id the group ``group`` committed for ``topic``-0 (stable offsets only, waiting out a transaction
    that is completing), or None. Read with the project's own OffsetFetch, not confluent-kafka's AdminClient:
    confluent-kafka 2.16's ``TopicPartition`` ``strdup()``s librdkafka's metadata buffer, which has no terminating
    NUL, so its ``metadata`` sometimes carries heap bytes past the marker's end."""
    client = ProducerControl(_group_offsets_client(conf))
    try:
        found = client.committed_offset(group, topic, 0)
    finally:
        client.close()
    if found is None:
        return None
    try:
        meta = json.loads(found[1] or "{}")
    except ValueError:
        meta = {}
    return found[0], meta if isinstance(meta, dict) else {}


def write_transactional(
    conf: Mapping[str, Any], topic_option: str | None, eos: EosOptions, batches: Iterator[Any]
) -> EosCommit:
    """One task's partition of one (micro-)batch, in one Kafka transaction that also commits the batch id.

    1. ``init_transactions`` with ``<prefix>-<partition>``: bumps the epoch, so any earlier attempt of this
       partition (failed, speculative, on a lost executor, of an earlier batch) is fenced, and its open
       transaction is aborted (or, if it was already committing, completed) before this returns;
    2. read the batch id the group ``<prefix>-<partition>`` committed (stable offsets only): equal to this
       batch id = this partition of this batch is already in the topic: write nothing;
    3. otherwise produce every row, flush, commit the batch id as that group's offset of ``<markerTopic>``-0
       inside the transaction (AddOffsetsToTxn + TxnOffsetCommit) and commit the transaction.
    """
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    tid, partition, batch = task_identity(eos)
    errors: list[str] = []
    producer = Producer({**conf, "transactional.id": tid})
    producer.init_transactions(TXN_TIMEOUT_S)
    committed = read_marker(conf, tid, eos.marker_topic)
    if committed is not None and committed[0] >= batch:
        if committed[0] > batch:
            # a zombie attempt of an older batch gets here too; for it the failure is harmless
            raise ReusedPrefixError(
                f"transactional id {tid!r} already committed batch {committed[0]} but this query is writing batch "
                f"{batch}: the prefix belongs to another query (or the checkpoint was reset). Use a new "
                "'transactionalIdPrefix'."
            )
        for _ in batches:  # already written by an earlier attempt: consume the input, write nothing
            pass
        return EosCommit(tid, batch, int(committed[1].get("records", 0)), skipped=True)
    group = Consumer({**_group_offsets_client(conf), "group.id": tid, "enable.auto.commit": False})
    try:
        producer.begin_transaction()
        try:
            count = produce_rows(producer, topic_option, batches, errors)
            flush_or_raise(producer, errors)
            marker = json.dumps({"batch": batch, "records": count, "partition": partition})
            producer.send_offsets_to_transaction(
                [TopicPartition(eos.marker_topic, MARKER_PARTITION, batch, metadata=marker)],
                group.consumer_group_metadata(), TXN_TIMEOUT_S,
            )
            producer.commit_transaction(TXN_TIMEOUT_S)
        except BaseException:
            try:
                producer.purge()
                producer.abort_transaction(10)
            except KafkaException:
                pass  # fenced or fatal: the next attempt's init_transactions (or the timeout) aborts it
            raise
    finally:
        group.close()
    return EosCommit(tid, batch, count, skipped=False)


def write_transactional_raw(
    conf: Mapping[str, Any], topic_option: str | None, eos: EosOptions, batches: Iterator[Any]
) -> EosCommit:
    """:func:`write_transactional` with the raw producer: the same steps and markers, as Kafka requests
    (InitProducerId, OffsetFetch ``require_stable``, AddPartitionsToTxn, Produce, AddOffsetsToTxn,
    TxnOffsetCommit, EndTxn)."""
    tid, partition, batch = task_identity(eos)
    producer = RawProducer(conf, transactional_id=tid)
    try:
        producer.init_producer_id()
        found = producer.committed_offset(tid, eos.marker_topic, MARKER_PARTITION)
        if found is not None and found[0] >= batch:
            if found[0] > batch:
                raise ReusedPrefixError(
                    f"transactional id {tid!r} already committed batch {found[0]} but this query is writing batch "
                    f"{batch}: the prefix belongs to another query (or the checkpoint was reset). Use a new "
                    "'transactionalIdPrefix'."
                )
            for _ in batches:  # already written by an earlier attempt: consume the input, write nothing
                pass
            try:
                meta = json.loads(found[1] or "{}")
            except ValueError:
                meta = {}
            records = int(meta.get("records", 0)) if isinstance(meta, dict) else 0
            return EosCommit(tid, batch, records, skipped=True)
        producer.begin()
        try:
            count = producer.produce_arrow(batches, topic_option)
            producer.flush()
            marker = json.dumps({"batch": batch, "records": count, "partition": partition})
            producer.send_offsets(tid, eos.marker_topic, MARKER_PARTITION, batch, marker)
            producer.end_transaction(True)
        except BaseException:
            if producer.in_txn:
                try:
                    producer.end_transaction(False, timeout_s=ABORT_TIMEOUT_S)
                except Exception:  # fenced or unreachable: the next attempt's InitProducerId (or the timeout) aborts it
                    pass
            raise
    finally:
        producer.close()
    return EosCommit(tid, batch, count, skipped=False)


def fence(conf: Mapping[str, Any], transactional_ids: list[str]) -> None:
    """Abort whatever transaction these ids left open (init_transactions bumps the epoch and aborts it).

    Best effort and bounded (``abort`` runs on the driver while Spark waits): when the broker does not answer,
    the transactions are aborted by the next attempt's ``init_transactions`` or by ``transaction.timeout.ms``."""
    from confluent_kafka import KafkaException, Producer

    for tid in transactional_ids:
        try:
            Producer({**conf, "transactional.id": tid}).init_transactions(FENCE_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("could not fence transactional id %s (%s); left to the next attempt or the transaction "
                        "timeout", tid, exc)
            return


def _checkpoint_query_id(checkpoint: str | None) -> str | None:
    """Spark's query id from ``<checkpoint>/metadata`` when the checkpoint is a local path."""
    if not checkpoint:
        return None
    path = checkpoint[len("file:"):] if checkpoint.startswith("file:") else checkpoint
    if "://" in path:
        return None
    try:
        with open(os.path.join(path, "metadata"), encoding="utf-8") as f:
            return str(json.loads(f.readline())["id"])
    except (OSError, ValueError, KeyError):
        return None


def abort_open_transactions(
    conf: Mapping[str, Any], eos: EosOptions, messages: list[WriterCommitMessage | None]
) -> None:
    """Driver side of ``abort``: fence the transactional ids of the tasks that did not report success."""
    missing = [i for i, m in enumerate(messages) if m is None]
    if not missing:
        return
    prefix = eos.prefix
    if prefix is None:
        for m in messages:
            if isinstance(m, (EosCommit, AtomicCommit)):
                prefix = m.transactional_id.rsplit("-", 1)[0]
                break
    if prefix is None:
        query = _checkpoint_query_id(eos.checkpoint)
        prefix = DEFAULT_PREFIX + query if query else None
    if prefix is None:
        log.warning("exactly-once sink: cannot name the transactions to abort; they time out "
                    "(transaction.timeout.ms) or are fenced by the next attempt")
        return
    fence(conf, [f"{prefix}-{i}" for i in missing])


def eos_producer_config(options: Mapping[str, str]) -> dict[str, Any]:
    conf = producer_config(options)
    conf.pop("enable.idempotence", None)  # implied by transactional.id
    return conf


def parse_atomic(options: Mapping[str, str], eos: EosOptions | None, raw: bool) -> bool:
    """Option ``atomicBatches`` (with ``exactlyOnce``): default true when tasks use the raw producer (the driver
    ends their transactions with it); librdkafka cannot leave a transaction to another process."""
    if eos is None:
        return False
    given = options.get("atomicBatches")
    atomic = parse_bool(options, "atomicBatches", raw)
    if atomic and not raw:
        if given is not None:
            raise OptionError("Option 'atomicBatches' needs the raw producer (produceClient=raw and a configuration "
                              "it supports): librdkafka cannot leave a transaction for the driver to end")
        return False
    return atomic


class _SinkWriterBase:
    """What the batch and the streaming writer share: options, and the exactly-once task and driver sides."""

    def __init__(self, options: Mapping[str, str], schema: StructType, streaming: bool) -> None:
        self.topic = options.get("topic")
        validate_schema(schema, self.topic)
        self.eos = EosOptions.parse(options, streaming=streaming)
        self.conf = producer_config(options) if self.eos is None else eos_producer_config(options)
        self.raw = parse_produce_client(options, self.conf)
        self.atomic = parse_atomic(options, self.eos, self.raw)
        if self.atomic:
            self.conf.setdefault("transaction.timeout.ms", DEFAULT_ATOMIC_TXN_TIMEOUT_MS)

    def _write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        if self.eos is None:
            return SinkCommit(write_batches(self.conf, self.topic, iterator, self.raw))
        if self.atomic:
            tid, partition, batch = task_identity(self.eos)

            def reused(done: int) -> Exception:
                return ReusedPrefixError(
                    f"transactional id {tid!r} already committed batch {done} but this query is writing batch "
                    f"{batch}: the prefix belongs to another query (or the checkpoint was reset). Use a new "
                    "'transactionalIdPrefix'.")

            return write_atomic(self.conf, self.topic, tid, partition, batch, self.eos.marker_topic, iterator,
                                reused)
        if self.raw:
            return write_transactional_raw(self.conf, self.topic, self.eos, iterator)
        return write_transactional(self.conf, self.topic, self.eos, iterator)

    def after_end_txn(self, index: int, batch: int) -> None:
        """Called by the driver's commit after each EndTxn (a hook for fault-injection tests)."""

    def _commit(self, messages: list[WriterCommitMessage | None], batch: int | None) -> None:
        if self.eos is None:
            return
        if batch is None:
            batch = next((int(m.batch_id) for m in messages if isinstance(m, (EosCommit, AtomicCommit))), 0)
        if self.atomic:
            assert self.eos is not None
            ended = commit_batch(self.conf, self.eos.marker_topic, batch, messages,
                                 lambda i: self.after_end_txn(i, batch))
            log.info("exactly-once sink: batch %d committed atomically (%d transactions ended, %d records)", batch,
                     len(ended), sum(m.records for m in ended))
            return
        written = sum(m.records for m in messages if isinstance(m, EosCommit) and not m.skipped)
        skipped = [m.transactional_id for m in messages if isinstance(m, EosCommit) and m.skipped]
        log.info("exactly-once sink: batch %d committed (%d records; already committed by an earlier "
                 "attempt: %s)", batch, written, skipped or "none")

    def _abort(self, messages: list[WriterCommitMessage | None], batch: int | None) -> None:
        if self.eos is None:
            return
        if self.atomic:
            if batch is None:
                batch = next((int(m.batch_id) for m in messages if isinstance(m, AtomicCommit)), 0)
            abort_batch(self.conf, self.eos.marker_topic, batch, list(messages))
        abort_open_transactions(self.conf, self.eos, messages)


class KafkaSinkWriter(_SinkWriterBase, DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._commit(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages, None)


class KafkaSinkStreamWriter(_SinkWriterBase, DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(messages, batchId)
