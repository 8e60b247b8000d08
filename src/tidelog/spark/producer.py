"""The ``tidelog`` sink's raw-produce executor path: Arrow columns straight into v2 batches and Produce requests.

The mirror of :mod:`tidelog.spark.fetcher`. A task's Arrow batches are partitioned and encoded by the C
accumulator (:mod:`tidelog.client.columnar`: ``assign_partitions`` + ``RecordAccumulator``) into the records
area of one open batch per topic partition; a full batch (``batch.size``, at most ``message.max.bytes``), and at
the end of each Arrow batch of the input (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows) every
open batch, gets its 61-byte header (producer id, epoch, base
sequence, CRC-32C) and is sent in a Produce request to the partition leader over the same blocking connections
the raw fetch uses (TLS and SASL PLAIN/SCRAM from the ``kafka.*`` options, versions negotiated by ApiVersions).
No Python object per record.

Kafka's producer semantics, as the Java client (and librdkafka) give them:

* **Partitioning**: an explicit ``partition`` column wins; otherwise a non-null key goes to
  ``(murmur2(key) & 0x7fffffff) % partitions`` (Kafka's default partitioner, librdkafka's ``murmur2_random``),
  and null keys stick to one partition per topic for one Arrow batch (about 1 MB at 100 B values), the next
  batch moving to the next partition (Kafka's sticky partitioner, KIP-480/794, batch-sized).
* **Idempotence** (``enable.idempotence``, default true, with ``acks=all``): one InitProducerId per task, a
  sequence number per partition, at most 5 requests in flight per connection. A retried batch keeps its
  sequence number, so the broker appends it once (DUPLICATE_SEQUENCE_NUMBER counts as delivered) and in order.
* **Retries**: a retriable error (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION,
  NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a broken connection, ...) drains what is in flight, refreshes the
  metadata after ``retry.backoff.ms`` (doubling, at most 1 s) and resends the undelivered batches of each
  partition in sequence order, one per partition at a time, until ``delivery.timeout.ms`` (librdkafka's
  ``message.timeout.ms``; default 120 s). Any other error fails the task with the broker's error name.
* **Lost sequence** (OUT_OF_ORDER_SEQUENCE_NUMBER for the oldest undelivered batch of a partition, or
  UNKNOWN_PRODUCER_ID: the broker's producer state lost records this producer had sent): idempotent, the producer
  does what the Java client does since KIP-360 (librdkafka: an "epoch bump") instead of failing: it waits for every
  request in flight, takes a new producer id (InitProducerId; a non-transactional one is always new), numbers
  every undelivered batch again from sequence 0 and resends it, so nothing handed over is lost (``epoch_bumps``
  counts them). Transactional, the error fails the transaction, as in both clients (an abortable error): the
  task aborts it and fails, Spark retries the task, and its InitProducerId bumps the epoch.
* **Transactions** (the exactly-once sink): FindCoordinator + InitProducerId with the transactional id (fences
  earlier producers of the id and completes their transaction), AddPartitionsToTxn before the first batch of a
  partition, transactional batches, AddOffsetsToTxn + TxnOffsetCommit, EndTxn. Transactions version 1 (the
  request versions are capped below KIP-890 part 2's), so any broker with transactions (Kafka 0.11+) works.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidelog.client.columnar import assign_partitions, new_accumulator
from tidelog.client.security import ClientConfigError, client_security
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code
from tidelog.records.compression import CompressionType, compress
from tidelog.records.header import (
    BATCH_HEADER,
    PRODUCER_FIELDS,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
    restamp_crc,
)
from tidelog.spark.options import OptionError
from tidelog.spark.producer_control import (
    DEFAULT_BATCH_BYTES,
    DUPLICATE_SEQUENCE_NUMBER,
    FATAL_CONNECTION_ERRORS,
    LEADER_NOT_AVAILABLE,
    MAX_IN_FLIGHT,
    MAX_PRODUCE_VERSION,
    MIN_PRODUCE_VERSION,
    NETWORK_EXCEPTION,
    NONE,
    REQUEST_MAX_BYTES,
    SEQUENCE_LOST,
    UNKNOWN_PRODUCER_ID,
    DeliveryError,
    ProducerControl,
    _lower,
    _name,
    _retriable,
)

CODECS = {"none": CompressionType.NONE, "gzip": CompressionType.GZIP, "snappy": CompressionType.SNAPPY,
          "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
PARTITIONERS = ("murmur2_random", "murmur2")
"""The librdkafka partitioners the raw path implements (Kafka's default); any other goes through librdkafka."""


def raw_produce_unsupported(conf: Mapping[str, Any]) -> str | None:
    """Why the raw path cannot honour the producer configuration ``conf`` (librdkafka names), or None."""
    low = _lower(conf)
    try:
        client_security(conf)
    except ClientConfigError as exc:
        return f"security: {exc}"
    partitioner = low.get("partitioner", "murmur2_random").strip().lower()
    if partitioner not in PARTITIONERS:
        return f"partitioner {partitioner}"
    codec = low.get("compression.type", low.get("compression.codec", "none")).strip().lower()
    if codec not in CODECS:
        return f"compression.type {codec}"
    acks = low.get("acks", low.get("request.required.acks", "all")).strip().lower()
    idempotent = low.get("enable.idempotence", "true").strip().lower() == "true"
    if acks in ("0",):
        return "acks=0"
    if idempotent and acks not in ("all", "-1"):
        return f"acks={acks} with enable.idempotence"
    if acks not in ("all", "-1", "1"):
        return f"acks={acks}"
    return None


@dataclass(slots=True)
class _Batch:
    slot: int
    topic: str
    partition: int
    data: bytearray
    count: int
    order: int


def _binary(arr: Any, what: str) -> tuple[Any, Any, Any, int]:
    """A binary or string Arrow array as the accumulator's (validity or None, offsets, data, offset)."""
    t = arr.type
    if pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        arr = arr.cast(pa.binary())
    elif not (pa.types.is_binary(t) or pa.types.is_string(t)):
        raise OptionError(f"{what} attribute type must be a string or binary")
    validity, offsets, data = arr.buffers()[:3]
    return (validity if arr.null_count else None, offsets, data if data is not None else b"", arr.offset)


def _i32_column(arr: Any) -> tuple[Any, Any, int]:
    validity, values = arr.buffers()[:2]
    return (validity if arr.null_count else None, values, arr.offset)


class RawProducer(ProducerControl):
    """One task's producer (see the module docstring); ``transactional_id`` makes it transactional."""

    def __init__(self, conf: Mapping[str, Any], transactional_id: str | None = None) -> None:
        super().__init__(conf, transactional_id)
        low = _lower(conf)
        acks = low.get("acks", low.get("request.required.acks", "all")).strip().lower()
        self.acks = -1 if acks in ("all", "-1") else int(acks)
        self.idempotent = transactional_id is not None or low.get("enable.idempotence", "true").lower() == "true"
        self.codec = CODECS[low.get("compression.type", low.get("compression.codec", "none")).strip().lower()]
        batch_bytes = int(low.get("batch.size", DEFAULT_BATCH_BYTES))
        max_message = int(low.get("message.max.bytes", DEFAULT_BATCH_BYTES))
        self.limit = max(1, min(batch_bytes, max_message) - RECORD_BATCH_OVERHEAD)
        self.max_in_flight = max(1, min(MAX_IN_FLIGHT, int(low.get("max.in.flight.requests.per.connection",
                                                                   low.get("max.in.flight", MAX_IN_FLIGHT)))))
        self.inflight: dict[int, deque[tuple[int, int, list[_Batch]]]] = {}
        self.ready: dict[int, deque[_Batch]] = {}
        self.failed: list[tuple[_Batch, int]] = []
        self.delivered = 0
        self.resent = 0
        """Batches sent again by :meth:`_recover` (a retriable error or a broken connection)."""
        self.retriable_errors: dict[int, int] = {}
        """How often each retriable error code (or NETWORK_EXCEPTION for a broken connection) was met."""
        self.epoch_bumps = 0
        """How often a lost sequence made this idempotent producer take a new producer id (:meth:`_bump`)."""
        self.order = 0

    # -- transactions (the requests are ProducerControl's) ----------------------------------------------

    def end_transaction(self, commit: bool, timeout_s: float | None = None) -> None:
        """EndTxn: a commit after every batch is delivered; an abort after every request in flight is answered
        (or its connection closed), so that no batch of this transaction reaches a partition after its abort
        marker."""
        if commit:
            self.flush()
        else:
            self.discard_inflight()
        self._end_txn(commit, timeout_s)

    def discard_inflight(self) -> None:
        """Wait for the answers to the Produce requests in flight, ignoring them; forget the queued batches."""
        for node, inflight in list(self.inflight.items()):
            conn = self.conns.get(node)
            try:
                while inflight and conn is not None:
                    cid, v, _ = inflight.popleft()
                    conn.receive(ApiKey.PRODUCE, v, cid)
            except Exception:  # a broken connection: nothing more will arrive from it
                self._drop(node)
            inflight.clear()
        self.ready = {}
        self.failed = []

    # -- writing ------------------------------------------------------------------------------------------

    def produce_arrow(self, batches: Iterator[Any], topic_option: str | None) -> int:
        """Partition, encode and send every row of the Arrow ``batches`` (no flush); returns the row count."""
        if self.idempotent and self.producer_id < 0:
            self.init_producer_id()
        acc = new_accumulator(self.limit)
        rows = 0
        for rb in batches:
            n = rb.num_rows
            if n == 0:
                continue
            names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
            value = _binary(rb.column(names["value"]), "value")
            key = _binary(rb.column(names["key"]), "key") if "key" in names else None
            if topic_option is not None:
                topics = [self.topic(topic_option)]
                tix = None
            else:
                col = rb.column(names["topic"])
                if col.null_count:
                    raise OptionError("Topic cannot be null (row has no topic and the topic option is not set)")
                enc = pc.dictionary_encode(col)
                topics = [self.topic(str(name)) for name in enc.dictionary.to_pylist()]
                indices = enc.indices.cast(pa.int32())
                tix = memoryview(indices.buffers()[1]).cast("B")[indices.offset * 4:(indices.offset + n) * 4]
            counts = array("i", [t.count for t in topics])
            sticky = array("i", [t.next_sticky() for t in topics])
            base = array("i", [t.base for t in topics])
            explicit = None
            if "partition" in names:
                pcol = rb.column(names["partition"])
                if pcol.null_count < n:
                    explicit = _i32_column(pcol.cast(pa.int32()))
            headers = None
            if "headers" in names:
                lst = rb.column(names["headers"])
                if lst.null_count < n:
                    hk, hv = lst.values.flatten()
                    if hk.null_count:
                        raise OptionError("A header key cannot be null")
                    lv, lo = lst.buffers()[:2]
                    headers = (lv if lst.null_count else None, lo, lst.offset, _binary(hk, "header key"),
                               _binary(hv, "header value"))
            slots, bad = assign_partitions(n, key, counts, tix, explicit, sticky, base)
            if bad >= 0:
                t = topics[enc.indices[bad].as_py()] if tix is not None else topics[0]
                p = rb.column(names["partition"])[bad].as_py()
                raise DeliveryError(f"Failed to send record to {t.name}-{p}: Local: Unknown partition "
                                    f"(_UNKNOWN_PARTITION): the topic has {t.count} partitions")
            sealed = acc.add(n, slots, key, value, headers, int(time.time() * 1000))
            rows += n
            sealed += acc.finish()  # nothing waits for the next input batch (librdkafka's linger, batch-sized)
            if sealed:
                self._enqueue(sealed)
                self._pump()
        self._enqueue(acc.finish())
        self._pump()
        return rows

    def _enqueue(self, sealed: list[Any]) -> None:
        attrs = int(self.codec) | (TRANSACTIONAL_MASK if self.tid is not None else 0)
        new = []
        batches = []
        for slot, buf, count, base_ts, max_ts in sealed:
            if self.codec:
                buf = bytearray(RECORD_BATCH_OVERHEAD) + compress(self.codec, memoryview(buf)[RECORD_BATCH_OVERHEAD:])
            seq = -1
            if self.idempotent:
                seq = self.seq[slot]
                self.seq[slot] = (seq + count) & 0x7FFFFFFF
            BATCH_HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, attrs, count - 1, base_ts, max_ts,
                                   self.producer_id, self.epoch, seq, count)
            restamp_crc(buf)
            t, p = self.slot_tp[slot]
            self.order += 1
            batches.append(_Batch(slot, t.name, p, buf, count, self.order))
            if self.in_txn and slot not in self.txn_slots:
                new.append(slot)
        if new:
            self._add_partitions(set(new))
        for b in batches:
            leader = self.slot_tp[b.slot][0].leaders[b.partition]
            if leader < 0:
                self.failed.append((b, LEADER_NOT_AVAILABLE))
            else:
                self.ready.setdefault(leader, deque()).append(b)

    def _pump(self) -> None:
        """Send what is ready, at most ``max_in_flight`` requests per connection (waiting for the oldest
        response when the window is full); on a retriable failure, recover."""
        for node in list(self.ready):
            while self.ready.get(node) and not self.failed:  # (_send replaces the queue)
                inflight = self.inflight.setdefault(node, deque())
                if len(inflight) >= self.max_in_flight:
                    self._receive(node)
                    continue
                self._send(node)
        if self.failed:
            self._recover()

    def _send(self, node: int, only: list[_Batch] | None = None) -> None:
        q = self.ready.get(node, deque())
        take: list[_Batch] = []
        if only is not None:
            take = only
        else:
            seen: set[int] = set()
            size = 0
            keep: deque[_Batch] = deque()
            while q:
                b = q.popleft()
                if b.slot in seen or (take and size + len(b.data) > REQUEST_MAX_BYTES):
                    keep.append(b)
                    if size + len(b.data) > REQUEST_MAX_BYTES:
                        break
                    continue
                seen.add(b.slot)
                take.append(b)
                size += len(b.data)
            keep.extend(q)
            self.ready[node] = keep
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for b in take:
            by_topic.setdefault(b.topic, []).append({"index": b.partition, "records": b.data})
        body = {"transactional_id": self.tid, "acks": self.acks, "timeout_ms": self.request_timeout_ms,
                "topic_data": [{"name": n, "partition_data": ps} for n, ps in by_topic.items()]}
        try:
            conn = self._conn(node)
            v = conn.version(ApiKey.PRODUCE, MAX_PRODUCE_VERSION)
            if v < MIN_PRODUCE_VERSION:
                raise DeliveryError(f"the broker's Produce versions are below v{MIN_PRODUCE_VERSION}")
            cid = conn.send(ApiKey.PRODUCE, v, body)
        except FATAL_CONNECTION_ERRORS:
            raise
        except OSError:
            self._broken(node, take)
            return
        self.inflight.setdefault(node, deque()).append((cid, v, take))

    def _broken(self, node: int, batches: list[_Batch]) -> None:
        """A connection failed: everything sent on it and not answered is undelivered (resent later; the
        sequence numbers make a resend of a batch the broker did append a duplicate it drops)."""
        self._drop(node)
        for _, _, bs in self.inflight.pop(node, deque()):
            self.failed.extend((b, NETWORK_EXCEPTION) for b in bs)
        self.failed.extend((b, NETWORK_EXCEPTION) for b in batches)

    def _receive(self, node: int) -> None:
        inflight = self.inflight[node]
        cid, v, batches = inflight.popleft()
        try:
            body = self.conns[node].receive(ApiKey.PRODUCE, v, cid)
        except FATAL_CONNECTION_ERRORS:
            raise
        except (OSError, KeyError):
            self._broken(node, batches)
            return
        codes: dict[tuple[str, int], tuple[int, str | None]] = {}
        for t in body["responses"]:
            for p in t["partition_responses"]:
                codes[(t["name"], p["index"])] = (p["error_code"], p.get("error_message"))
        for b in batches:
            code, message = codes.get((b.topic, b.partition), (NETWORK_EXCEPTION, None))
            if code in (NONE, DUPLICATE_SEQUENCE_NUMBER):
                self.delivered += b.count
            elif _retriable(code) or (code == UNKNOWN_PRODUCER_ID and self._may_bump()):
                self.failed.append((b, code))
                self.retriable_errors[code] = self.retriable_errors.get(code, 0) + 1
            else:
                raise DeliveryError(f"Failed to send record to {b.topic}-{b.partition}: {_name(code)} (error code "
                                    f"{code}): {message or error_for_code(code).message}")

    def _recover(self) -> None:
        """Resend every undelivered batch: in-flight requests drained first, then per partition in sequence
        order, one batch per partition per round, the metadata refreshed before each round."""
        for node in list(self.inflight):
            while self.inflight.get(node):
                self._receive(node)
        pending: dict[int, list[_Batch]] = {}
        last: dict[int, int] = {}
        for b, code in self.failed:
            pending.setdefault(b.slot, []).append(b)
            last[b.slot] = code
        self.failed = []
        for q in self.ready.values():
            for b in q:
                pending.setdefault(b.slot, []).append(b)
        self.ready = {}
        for bs in pending.values():
            bs.sort(key=lambda b: b.order)
        deadline = time.monotonic() + self.delivery_timeout_s
        attempt = 0
        while pending:
            if time.monotonic() > deadline:
                slot = next(iter(pending))
                t, p = self.slot_tp[slot]
                code = last.get(slot, NETWORK_EXCEPTION)
                raise DeliveryError(f"Failed to send record to {t.name}-{p}: {_name(code)} (error code {code}; "
                                    f"retried for {self.delivery_timeout_s:.0f}s)")
            attempt += 1
            time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 1.0))
            try:
                self.refresh_metadata()
            except FATAL_CONNECTION_ERRORS:
                raise
            except OSError:
                continue
            by_node: dict[int, list[_Batch]] = {}
            for slot, bs in pending.items():
                t, p = self.slot_tp[slot]
                leader = t.leaders[p]
                if leader >= 0:
                    by_node.setdefault(leader, []).append(bs[0])
                else:
                    last[slot] = LEADER_NOT_AVAILABLE
            for node, bs in by_node.items():
                self.resent += len(bs)
                self._send(node, only=bs)
            for node in list(self.inflight):
                while self.inflight.get(node):
                    self._receive(node)
            failed = {id(b): code for b, code in self.failed}
            self.failed = []
            lost: _Batch | None = None
            for bs in by_node.values():
                for b in bs:
                    failed_code = failed.get(id(b))
                    if failed_code is None:
                        pending[b.slot].pop(0)
                        if not pending[b.slot]:
                            del pending[b.slot]
                    elif failed_code in SEQUENCE_LOST:  # the oldest undelivered batch: its predecessors lost
                        lost = b
                        last[b.slot] = failed_code
                    else:
                        last[b.slot] = failed_code
            if lost is not None:
                code = last[lost.slot]
                if not self._may_bump():
                    raise DeliveryError(f"Failed to send record to {lost.topic}-{lost.partition}: {_name(code)} "
                                        f"(error code {code})")
                self._bump(pending)

    def _may_bump(self) -> bool:
        """Whether a lost sequence is recovered by a new producer id (idempotent, not transactional)."""
        return self.idempotent and self.tid is None

    def _bump(self, pending: dict[int, list[_Batch]]) -> None:
        """A new producer id, and every undelivered batch (``pending``, per slot in order; nothing is in flight)
        numbered again from sequence 0 under it; the next batches of every partition follow them."""
        self.init_producer_id()
        self.epoch_bumps += 1
        self.seq = [0] * len(self.seq)
        for slot, bs in pending.items():
            seq = 0
            for b in bs:
                PRODUCER_FIELDS.pack_into(b.data, PRODUCER_ID_OFFSET, self.producer_id, self.epoch, seq)
                restamp_crc(b.data)
                seq = (seq + b.count) & 0x7FFFFFFF
            self.seq[slot] = seq

    def flush(self) -> None:
        """Wait until every batch handed over is delivered (or raise)."""
        self._pump()
        for node in list(self.inflight):
            while self.inflight.get(node):
                self._receive(node)
        if self.failed:
            self._recover()
        assert not any(self.ready.values()) and not any(self.inflight.values()) and not self.failed
