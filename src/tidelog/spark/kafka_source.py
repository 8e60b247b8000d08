"""The ``tidelog`` source: reads topics over the Kafka protocol (any Kafka-compatible broker).

The driver plans offset ranges (one :class:`OffsetRange` per Spark partition) from partition metadata and
watermarks; executors read each range with confluent-kafka (``assign`` + start offset, no group
membership, no commits) and yield Arrow record batches in Spark's Kafka schema. Streaming offsets are Spark's
Kafka offsets: ``{"topic": {"partition": nextOffset}}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import is_not
from typing import Any, TypeGuard

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, Filter, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from tidelog.spark.arrow import COLUMNAR_BATCH_ROWS, record_batch
from tidelog.spark.fetcher import ConnectionPool, raw_fetch_allowed, read_range_raw
from tidelog.spark.options import (
    EARLIEST,
    LATEST,
    PACK_RECORDS,
    OffsetSpec,
    OptionError,
    SourceOptions,
    TopicPartition,
    map_to_stream_offset,
    report_data_loss,
    stream_offset_to_map,
)
from tidelog.spark.packing import members, pack
from tidelog.spark.pushdown import PushedFilters, push_filters
from tidelog.spark.trace import trace

log = logging.getLogger("tidelog.spark")

METADATA_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records [start, end) of one topic partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


# ------------------------------------------------------------------------------------------ driver metadata


def driver_consumer_config(opts: SourceOptions) -> dict[str, Any]:
    """The driver's confluent-kafka consumer: never joins its group; its ListOffsets (watermarks) carry the
    source's isolation level, so the latest offset is the high watermark (read_uncommitted) or the last stable
    offset (read_committed), as Spark's driver consumer gets them."""
    conf: dict[str, Any] = dict(opts.client)
    conf.update({"group.id": opts.driver_group_id, "isolation.level": opts.isolation_level,
                 "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    return conf


def executor_consumer_config(opts: SourceOptions) -> dict[str, Any]:
    """An executor's confluent-kafka consumer (``fetchClient=librdkafka``, headers, non-PLAINTEXT): assign +
    start offset, no group membership, no commits, the source's isolation level."""
    conf: dict[str, Any] = dict(opts.client)
    conf.update({
        "group.id": opts.executor_group_id,
        "isolation.level": opts.isolation_level,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    for k, v in CONSUMER_DEFAULTS.items():
        conf.setdefault(k, v)
    return conf


class KafkaMetadata:
    """Partition lists, watermarks and timestamp lookups on the driver (one confluent-kafka consumer that
    never joins a group). With read_committed the high mark of :meth:`watermarks` is the last stable offset."""

    def __init__(self, opts: SourceOptions) -> None:
        from confluent_kafka import Consumer

        self._consumer = Consumer(driver_consumer_config(opts))

    def close(self) -> None:
        self._consumer.close()

    def topic_partitions(self, opts: SourceOptions) -> list[TopicPartition]:
        sub = opts.subscription
        if sub.partitions:
            return sorted(set(sub.partitions))
        md = self._consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        out: list[TopicPartition] = []
        for name, topic in md.topics.items():
            if topic.error is not None or not sub.matches_topic(name):
                continue
            if sub.pattern is not None and name.startswith("__"):
                continue  # internal topics only when named explicitly
            out.extend((name, p) for p in topic.partitions)
        return sorted(out)

    def watermarks(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        from confluent_kafka import TopicPartition as KTP

        out: dict[TopicPartition, tuple[int, int]] = {}
        for t, p in tps:
            lo, hi = self._consumer.get_watermark_offsets(KTP(t, p), timeout=METADATA_TIMEOUT_S, cached=False)
            out[(t, p)] = (int(lo), int(hi))
        return out

    def offsets_for_times(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Earliest offset whose timestamp is >= the given one; None when there is none."""
        from confluent_kafka import TopicPartition as KTP

        if not wanted:
            return {}
        res = self._consumer.offsets_for_times([KTP(t, p, ts) for (t, p), ts in wanted.items()],
                                               timeout=METADATA_TIMEOUT_S)
        out: dict[TopicPartition, int | None] = {}
        for ktp in res:
            if ktp.error is not None:
                raise RuntimeError(f"ListOffsets by timestamp failed for {ktp.topic}-{ktp.partition}: {ktp.error}")
            out[(ktp.topic, ktp.partition)] = None if ktp.offset < 0 else int(ktp.offset)
        return out

    def resolve(
        self,
        spec: OffsetSpec,
        tps: Sequence[TopicPartition],
        marks: Mapping[TopicPartition, tuple[int, int]],
        *,
        starting: bool,
        strategy: str = "error",
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for ``spec`` on ``tps`` (watermarks ``marks`` already fetched)."""
        if spec.kind == "earliest":
            return {tp: marks[tp][0] for tp in tps}
        if spec.kind == "latest":
            return {tp: marks[tp][1] for tp in tps}
        if spec.kind == "offsets":
            missing = sorted(set(tps) - set(spec.offsets))
            if missing:
                raise OptionError(
                    f"{'startingOffsets' if starting else 'endingOffsets'} for {missing} are not specified; "
                    "specific offsets must name every assigned partition"
                )
            out = {}
            for tp in tps:
                v = spec.offsets[tp]
                out[tp] = marks[tp][0] if v == EARLIEST else marks[tp][1] if v == LATEST else v
            return out
        if spec.kind == "timestamp":
            wanted = {tp: int(spec.timestamp or 0) for tp in tps}
        else:
            missing = sorted(set(tps) - set(spec.offsets))
            if missing:
                raise OptionError(f"Offsets by timestamp are not specified for {missing}")
            wanted = {tp: spec.offsets[tp] for tp in tps}
        found = self.offsets_for_times(wanted)
        out = {}
        for tp in tps:
            off = found.get(tp)
            if off is None:
                if starting and strategy == "error":
                    raise OptionError(
                        f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp "
                        f"{wanted[tp]}. Set 'startingOffsetsByTimestampStrategy' to 'latest' to start from the "
                        "latest offset instead."
                    )
                off = marks[tp][1]
            out[tp] = off
        return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: cap each range at ``max_records`` and, when there are fewer ranges
    than ``min_partitions``, split the large ones in proportion to their size."""
    ranges = [r for r in ranges if r.size > 0]
    out: list[OffsetRange] = []

    def split(r: OffsetRange, parts: int) -> None:
        parts = max(1, min(parts, r.size))
        step, extra = divmod(r.size, parts)
        s = r.start
        for i in range(parts):
            e = s + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, s, e))
            s = e

    total = sum(r.size for r in ranges)
    for r in ranges:
        parts = 1
        if max_records is not None:
            parts = -(-r.size // max_records)
        if min_partitions is not None and len(ranges) < min_partitions and total > 0:
            parts = max(parts, round(r.size / total * min_partitions))
        split(r, parts)
    return out


# --------------------------------------------------------------------------------------------- executors


CONSUME_MESSAGES = 10_000
"""Messages per ``Consumer.consume`` call of an executor."""

CONSUMER_DEFAULTS: dict[str, Any] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    # prefetch far ahead, and never sleep the default second when the local queue is above its threshold
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 5,
    "fetch.wait.max.ms": 10,
}
"""Throughput settings of the executors' consumers; ``kafka.*`` options override each of them."""


def _batch(r: OffsetRange, keys: list[Any], values: list[Any], offsets: list[int], stamps: list[int],
           kinds: list[int], headers: list[Any] | None) -> Any:
    """The Arrow batch of the collected columns; ``kinds`` are confluent-kafka's timestamp types (1 =
    CreateTime, 2 = LogAppendTime), one constant when all are equal (the usual case)."""
    first = kinds[0]
    types: list[int] | int = first - 1 if kinds.count(first) == len(kinds) else [k - 1 for k in kinds]
    return record_batch(r.topic, r.partition, keys, values, offsets, stamps, types, headers)


def _all_offsets(offsets: list[int | None]) -> TypeGuard[list[int]]:
    """Whether every message has an offset (confluent-kafka's ``Message.offset()`` is None only below 0,
    which a consumed record never has; the fast path checks rather than assumes it)."""
    return None not in offsets


def read_range(
    conf: Mapping[str, Any],
    r: OffsetRange,
    *,
    fail_on_data_loss: bool,
    include_headers: bool,
    poll_timeout_ms: int,
) -> Iterator[Any]:
    """Yield Arrow batches with the records [r.start, r.end) of one partition (runs on an executor) with a
    confluent-kafka consumer of config ``conf`` (:func:`executor_consumer_config`). With read_committed,
    librdkafka drops aborted records and control records, so offsets jump: gaps, not data loss."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message
    from confluent_kafka import TopicPartition as KTP

    if r.size <= 0:
        return
    consumer = Consumer(dict(conf))
    key_of, value_of, offset_of, error_of, ts_of, headers_of = (
        Message.key, Message.value, Message.offset, Message.error, Message.timestamp, Message.headers)
    tp_name = f"{r.topic}-{r.partition}"
    try:
        consumer.assign([KTP(r.topic, r.partition, r.start)])
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        offsets: list[int] = []
        stamps: list[int] = []
        types: list[int] = []
        headers: list[Any] | None = [] if include_headers else None
        expected = r.start
        deadline = time.monotonic() + poll_timeout_ms / 1000.0
        done = False
        while not done and expected < r.end:
            msgs = consumer.consume(num_messages=CONSUME_MESSAGES, timeout=0.5)
            if not msgs:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"Cannot fetch record for offset {expected} in {poll_timeout_ms} milliseconds "
                        f"(TopicPartition: {tp_name})"
                    )
                continue
            deadline = time.monotonic() + poll_timeout_ms / 1000.0
            # fast path: no errors and exactly the next offsets (column extraction in C-level map/zip calls)
            offs = list(map(offset_of, msgs))
            if offs[0] == expected and _all_offsets(offs) and offs[-1] - expected == len(offs) - 1 and (
                    not any(map(is_not, map(error_of, msgs), repeat(None)))):
                cut = min(len(msgs), r.end - expected)
                if cut < len(msgs):
                    msgs, done = msgs[:cut], True
                    del offs[cut:]
                keys.extend(map(key_of, msgs))
                values.extend(map(value_of, msgs))
                offsets.extend(offs)
                kinds, times = zip(*map(ts_of, msgs))
                stamps.extend(times)
                types.extend(kinds)
                if headers is not None:
                    headers.extend(list(h) if h else None for h in map(headers_of, msgs))
                expected = offs[-1] + 1
                msgs = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        eof = m.offset()
                        if eof is not None and eof >= r.end:
                            done = True
                            break
                        continue  # the high watermark may still move up to r.end
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        lo, hi = consumer.get_watermark_offsets(KTP(r.topic, r.partition), timeout=30, cached=False)
                        report_data_loss(
                            fail_on_data_loss,
                            f"Cannot fetch offset {expected} (TopicPartition: {tp_name}); the partition holds "
                            f"offsets [{lo}, {hi}).",
                        )
                        if lo >= r.end or lo <= expected:
                            done = True
                            break
                        expected = lo
                        consumer.assign([KTP(r.topic, r.partition, lo)])
                        break
                    raise KafkaException(err)
                off = m.offset()
                if off is None:  # librdkafka gives every record its offset; fail clearly, never misplace one
                    raise RuntimeError(
                        f"A record without an offset after {expected} (TopicPartition: {tp_name})")
                if off >= r.end:
                    done = True
                    break
                if off > expected:
                    # A gap: compaction or transaction markers (fine) or records deleted under us (data loss).
                    lo, _ = consumer.get_watermark_offsets(KTP(r.topic, r.partition), timeout=30, cached=True)
                    if lo > expected:
                        report_data_loss(
                            fail_on_data_loss,
                            f"Cannot fetch offset {expected} (TopicPartition: {tp_name}); the earliest available "
                            f"offset is now {lo}.",
                        )
                elif off < expected:
                    continue
                keys.append(m.key())
                values.append(m.value())
                offsets.append(off)
                ts_type, ts = m.timestamp()
                stamps.append(ts)
                types.append(ts_type)
                if headers is not None:
                    h = m.headers()
                    headers.append(list(h) if h else None)
                expected = off + 1
            if len(values) >= COLUMNAR_BATCH_ROWS or (values and (done or expected >= r.end)):
                yield _batch(r, keys, values, offsets, stamps, types, headers)
                keys, values, offsets, stamps, types = [], [], [], [], []
                headers = [] if include_headers else None
        if values:
            yield _batch(r, keys, values, offsets, stamps, types, headers)
    finally:
        consumer.close()


def read_partition(o: SourceOptions, r: OffsetRange, pool: ConnectionPool | None = None) -> Iterator[Any]:
    """An executor's read of one range: raw Fetch requests into Arrow columns (:mod:`tidelog.spark.fetcher`)
    when that is safe and ``fetchClient`` is ``raw`` (the default), else confluent-kafka. ``pool``: the task's
    broker connections, shared by the ranges of a packed partition."""
    if raw_fetch_allowed(o.client, o.include_headers, o.fetch_client):
        yield from read_range_raw(o.client, r.topic, r.partition, r.start, r.end,
                                  fail_on_data_loss=o.fail_on_data_loss, poll_timeout_ms=o.poll_timeout_ms,
                                  read_committed=o.read_committed, pool=pool)
        return
    yield from read_range(executor_consumer_config(o), r, fail_on_data_loss=o.fail_on_data_loss,
                          include_headers=o.include_headers, poll_timeout_ms=o.poll_timeout_ms)


# ------------------------------------------------------------------------------------------------ batch


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = SourceOptions.parse(options, streaming=False)
        self.pushed = PushedFilters()

    def partitions(self) -> Sequence[InputPartition]:
        trace("partitions() start")
        o = self.opts
        pushed = self.pushed
        meta = KafkaMetadata(o)
        try:
            tps = [tp for tp in meta.topic_partitions(o) if pushed.wants(*tp)]
            marks = meta.watermarks(tps)
            start = meta.resolve(o.starting, tps, marks, starting=True, strategy=o.starting_by_ts_strategy)
            end = meta.resolve(o.ending, tps, marks, starting=False)
            # a pushed lower bound on timestamp: every record before the first offset at or after it is older
            by_time = (meta.offsets_for_times({tp: pushed.timestamp_lo_ms for tp in tps})
                       if pushed.timestamp_lo_ms is not None and tps else {})
        finally:
            meta.close()
        ranges = []
        for tp in tps:
            s, e = start[tp], end[tp]
            lo, _ = marks[tp]
            if s < lo:
                report_data_loss(o.fail_on_data_loss,
                                 f"Cannot fetch offset {s} (TopicPartition: {tp[0]}-{tp[1]}); the earliest "
                                 f"available offset is {lo}.")
                s = lo
            if e < s:
                if o.ending.kind == "offsets" or o.starting.kind == "offsets":
                    raise OptionError(
                        f"The specified ending offset {e} is less than the starting offset {s} for partition "
                        f"{tp[0]}-{tp[1]}"
                    )
                continue
            s, e = pushed.clamp(s, e)
            if tp in by_time:
                found = by_time[tp]
                s = max(s, e if found is None else found)
            if e <= s:
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        planned = split_ranges(ranges, o.min_partitions, o.max_records_per_partition)
        if (not pushed.empty and o.pack_partitions and o.min_partitions is None
                and o.max_records_per_partition is None):
            # the filters left small ranges: fewer tasks (tidelog.spark.packing)
            planned = pack(planned, lambda r: r.size, PACK_RECORDS)
        if not pushed.empty:
            log.info("tidelog source: pushed filters [%s], %d ranges in %d partitions", pushed.describe(),
                     len(ranges), len(planned))
        trace(f"partitions() end: {len(planned)} partitions")
        return planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        trace("read() start")
        pool = ConnectionPool()  # one Metadata lookup and one connection per leader for all the task's ranges
        try:
            for r in members(partition):
                if isinstance(r, OffsetRange):  # else no ranges planned: PySpark hands a placeholder partition
                    trace(f"range {r.topic}-{r.partition} [{r.start}, {r.end}) start")
                    yield from read_partition(self.opts, r, pool)
        finally:
            pool.close()
        trace("read() end")


class KafkaPushdownReader(KafkaBatchReader):
    """:class:`KafkaBatchReader` taking Spark's filters (:mod:`tidelog.spark.pushdown`); only handed to Spark when
    ``spark.sql.python.filterPushdown.enabled`` is set (PySpark refuses it otherwise)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return list(push_filters(self.pushed, filters))


# -------------------------------------------------------------------------------------------- streaming


def limit_offsets(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> dict[TopicPartition, int]:
    """Spread ``max_rows`` over the partitions in proportion to what each has available (Spark's rateLimit)."""
    avail = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(avail.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    given = 0
    tps = sorted(latest)
    for tp in tps:
        share = int(max_rows * avail[tp] / total)
        out[tp] = start.get(tp, latest[tp]) + share
        given += share
    # hand the rounding remainder out in order so that a trigger always makes progress
    for tp in tps:
        if given >= max_rows:
            break
        extra = min(latest[tp] - out[tp], max_rows - given)
        out[tp] += extra
        given += extra
    return out


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.opts = SourceOptions.parse(options, streaming=True)
        self._meta: KafkaMetadata | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._committer: Any = None
        self._last_committed: dict[TopicPartition, int] = {}
        self._last_trigger_ms = 0.0  # Spark's lastTriggerMillis (minOffsetsPerTrigger / maxTriggerDelay)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_meta"] = None
        state["_committer"] = None
        return state

    @property
    def meta(self) -> KafkaMetadata:
        if self._meta is None:
            self._meta = KafkaMetadata(self.opts)
        return self._meta

    def _current(self) -> tuple[list[TopicPartition], dict[TopicPartition, tuple[int, int]]]:
        tps = self.meta.topic_partitions(self.opts)
        return tps, self.meta.watermarks(tps)

    def initialOffset(self) -> dict:
        o = self.opts
        tps, marks = self._current()
        start = self.meta.resolve(o.starting, tps, marks, starting=True, strategy=o.starting_by_ts_strategy)
        return map_to_stream_offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: with both minOffsetsPerTrigger and maxOffsetsPerTrigger the engine gets
        # ReadMinRows, and latestOffset applies maxOffsetsPerTrigger from the options (Spark's composite limit)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _delay_batch(self, min_rows: int, begin: Mapping[TopicPartition, int],
                     latest: Mapping[TopicPartition, int]) -> bool:
        """Spark's ``delayBatch``: skip this trigger while fewer than ``minOffsetsPerTrigger`` offsets are available,
        until ``maxTriggerDelay`` has passed since the last trigger that ran (the first trigger always runs)."""
        now = time.time() * 1000.0
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        if sum(latest[tp] - begin.get(tp, 0) for tp in latest) < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def prepareForTriggerAvailableNow(self) -> None:
        tps, marks = self._current()
        self._available_now = {tp: marks[tp][1] for tp in tps}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start:
            self._commit_group(start)
        begin = stream_offset_to_map(start or {})
        if self._available_now is not None:
            latest = dict(self._available_now)
            new = [tp for tp in latest if tp not in begin]
            marks = self.meta.watermarks(new) if new else {}
        else:
            tps, marks = self._current()
            latest = {tp: marks[tp][1] for tp in tps}
        # partitions that appeared since ``start`` begin at their earliest offset
        for tp in latest:
            if tp not in begin:
                begin[tp] = marks[tp][0] if tp in marks else 0
        max_rows = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None
        if isinstance(limit, ReadMinRows):
            max_rows = self.opts.max_offsets_per_trigger
            # Trigger.AvailableNow ends at offsets fixed when it started: waiting for more would only hold it up
            if self._available_now is None and self._delay_batch(int(limit.min_rows), begin, latest):
                return start if start else map_to_stream_offset(begin)  # Spark: the start offsets, unchanged
        if max_rows is not None:
            latest = limit_offsets(begin, latest, max_rows)
        # never move backwards (a shrinking watermark is reported as data loss when planning)
        for tp in latest:
            if tp in begin and latest[tp] < begin[tp]:
                latest[tp] = begin[tp]
        return map_to_stream_offset(latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        o = self.opts
        begin = stream_offset_to_map(start)
        until = stream_offset_to_map(end)
        gone = sorted(set(begin) - set(until))
        if gone:
            report_data_loss(o.fail_on_data_loss, f"{gone} are gone")
        tps = sorted(until)
        marks = self.meta.watermarks(tps) if tps else {}
        ranges = []
        for tp in tps:
            s = begin.get(tp, marks[tp][0])
            e = until[tp]
            lo = marks[tp][0]
            if s < lo:
                report_data_loss(
                    o.fail_on_data_loss,
                    f"Cannot fetch offset {s} (TopicPartition: {tp[0]}-{tp[1]}); the earliest available offset "
                    f"is {lo}.",
                )
                s = min(lo, e)
            if e < s:
                report_data_loss(o.fail_on_data_loss,
                                 f"Partition {tp[0]}-{tp[1]}'s offset was changed from {s} to {e}")
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return split_ranges(ranges, o.min_partitions, o.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):
            return  # no ranges planned: PySpark hands a placeholder partition
        yield from read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        self._commit_group(end)

    def _commit_group(self, processed: dict) -> None:
        """``commitOffsetsToGroup``: store the next offsets to read, so that lag tools see the progress.

        Called from :meth:`commit` and from :meth:`latestOffset` with its ``start``: the engine plans a new
        micro-batch only after the previous one completed, and it commits a batch's source offsets only when the
        next batch is planned, so ``start`` is the earliest moment the last batch is known to be done."""
        group = self.opts.commit_group
        if not group or not processed:
            return
        offsets_map = stream_offset_to_map(processed)
        if offsets_map == self._last_committed:
            return
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as KTP

        if self._committer is None:
            conf: dict[str, Any] = dict(self.opts.client)
            conf.update({"group.id": group, "enable.auto.commit": False})
            self._committer = Consumer(conf)
        offsets = [KTP(t, p, o) for (t, p), o in sorted(offsets_map.items())]
        try:
            self._committer.commit(offsets=offsets, asynchronous=False)
            self._last_committed = offsets_map
        except Exception as exc:  # progress reporting must not fail the query
            log.warning("could not commit offsets to group %s: %s", group, exc)

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None
        if self._committer is not None:
            self._committer.close()
            self._committer = None
