"""``tidelog producer-perf-test`` and ``tidelog consumer-perf-test``: kafka-producer-perf-test.sh
(ProducerPerformance) and kafka-consumer-perf-test.sh (ConsumerPerformance) over confluent-kafka, with Kafka's
options and Kafka's output lines, so scripts that parse them keep working.

Producer: a progress line per 5 s window (``N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max
latency.``) and the summary line with the 50th/95th/99th/99.9th latency percentiles, latency being the time from
``produce()`` to the delivery report. Consumer: the CSV header and one row (or a row per reporting interval with
``--show-detailed-stats``). Java producer/consumer property names that librdkafka shares (acks, linger.ms,
batch.size, compression.type, client.id, ...) pass through; Java-only ones (serializers) are dropped.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from tidelog.cli._client import bootstrap_option, client_config, fail, kafka_error_text, safe_echo
from tidelog.storage.checkpoints import parse_properties

MB = 1024.0 * 1024.0
# Java client settings librdkafka has no equivalent of (it would refuse them)
_JAVA_ONLY = ("key.serializer", "value.serializer", "key.deserializer", "value.deserializer", "buffer.memory",
              "max.block.ms")


def _props(pairs: Sequence[str], config_file: str | None, what: str) -> dict[str, str]:
    """``--producer.config`` file, then KEY=VALUE pairs on top (as Kafka's readProps); Java-only keys dropped."""
    out: dict[str, str] = {}
    if config_file is not None:
        try:
            with open(config_file, encoding="utf-8") as f:
                out.update(parse_properties(f.read()))
        except (OSError, ValueError) as exc:
            fail(f"cannot read {config_file}: {exc}", 2)
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key or "=" in value:
            fail(f"{what}: Invalid property: {item}", 2)
        out[key] = value
    return {k: v for k, v in out.items() if k not in _JAVA_ONLY}


def _bootstrap_of(props: dict[str, str], bootstrap: str) -> str:
    return props.pop("bootstrap.servers", None) or bootstrap


@dataclass
class ProducerStats:
    """Kafka's ProducerPerformance.Stats: totals, a reporting window, and a sample of latencies (at most
    500,000) for the percentiles."""

    num_records: int
    reporting_ms: int = 5000
    start: float = field(default_factory=time.monotonic)
    count: int = 0
    bytes: int = 0
    total_latency: int = 0
    max_latency: int = 0
    iteration: int = 0
    latencies: list[int] = field(default_factory=list)
    window_start: float = field(default_factory=time.monotonic)
    window_count: int = 0
    window_bytes: int = 0
    window_total_latency: int = 0
    window_max_latency: int = 0

    @property
    def sampling(self) -> int:
        return max(1, self.num_records // max(1, min(self.num_records, 500000)))

    def record(self, latency_ms: int, size: int, now: float) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        if (now - self.window_start) * 1000 >= self.reporting_ms:
            self.print_window(now)
            self.window_start, self.window_count, self.window_bytes = now, 0, 0
            self.window_total_latency = self.window_max_latency = 0

    def print_window(self, now: float) -> None:
        elapsed_ms = max((now - self.window_start) * 1000, 1e-3)
        safe_echo(f"{self.window_count} records sent, {1000.0 * self.window_count / elapsed_ms:.1f} records/sec "
                  f"({1000.0 * self.window_bytes / elapsed_ms / MB:.2f} MB/sec), "
                  f"{self.window_total_latency / max(self.window_count, 1):.1f} ms avg latency, "
                  f"{float(self.window_max_latency):.1f} ms max latency.")

    def summary(self, now: float) -> str:
        elapsed_ms = max((now - self.start) * 1000, 1e-3)
        lat = sorted(self.latencies) or [0]
        p50, p95, p99, p999 = (lat[min(int(q * len(lat)), len(lat) - 1)] for q in (0.5, 0.95, 0.99, 0.999))
        return (f"{self.count} records sent, {1000.0 * self.count / elapsed_ms:.1f} records/sec "
                f"({1000.0 * self.bytes / elapsed_ms / MB:.2f} MB/sec), "
                f"{self.total_latency / max(self.count, 1):.2f} ms avg latency, {float(self.max_latency):.2f} ms max "
                f"latency, {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.")


def _payloads(record_size: int | None, payload_file: str | None, delimiter: str, monotonic: bool) -> list[bytes]:
    given = sum((record_size is not None, payload_file is not None, monotonic))
    if given != 1:
        fail("give exactly one of --record-size, --payload-file or --payload-monotonic", 2)
    if payload_file is not None:
        try:
            with open(payload_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            fail(f"cannot read {payload_file}: {exc.strerror or exc}")
        items = [p.encode() for p in text.split(delimiter.encode().decode("unicode_escape")) if p]
        if not items:
            fail(f"File is empty: {payload_file}")
        safe_echo(f"Reading payloads from: {os.path.abspath(payload_file)}")
        safe_echo(f"Number of messages read: {len(items)}")
        return items
    return []


@click.command("producer-perf-test")
@click.option("--topic", required=True, help="Produce messages to this topic.")
@click.option("--num-records", type=int, required=True, help="Number of messages to produce.")
@click.option("--record-size", type=int, default=None, help="Message size in bytes.")
@click.option("--payload-file", default=None, help="Messages to pick from at random (UTF-8 text).")
@click.option("--payload-delimiter", default="\\n", show_default=True, help="Delimiter of --payload-file.")
@click.option("--payload-monotonic", is_flag=True, help="Payload is a monotonically increasing integer.")
@click.option("--throughput", type=float, required=True,
              help="Maximum messages/sec (approximately); -1 disables throttling.")
@click.option("--producer-props", "producer_props", multiple=True, metavar="PROP=VALUE",
              help="Producer properties (as Kafka's: --producer-props acks=1 linger.ms=5 ...).")
@click.option("--producer.config", "producer_config", default=None, help="Producer config properties file.")
@click.option("--transactional-id", default=None, help="Produce in transactions with this id.")
@click.option("--transaction-duration-ms", type=int, default=None,
              help="Commit each transaction after this long (default 3000 with a transactional id).")
@click.option("--print-metrics", is_flag=True, help="Print the client's metrics (librdkafka's statistics) at the end.")
@click.argument("more_props", nargs=-1, metavar="[PROP=VALUE]...")
@bootstrap_option
def producer_perf_test(topic: str, num_records: int, record_size: int | None, payload_file: str | None,
                       payload_delimiter: str, payload_monotonic: bool, throughput: float,
                       producer_props: tuple[str, ...], producer_config: str | None, transactional_id: str | None,
                       transaction_duration_ms: int | None, print_metrics: bool, more_props: tuple[str, ...],
                       bootstrap: str, properties: tuple[str, ...]) -> None:
    """Produce NUM-RECORDS records as fast as allowed and report throughput and latency (kafka-producer-perf-test.sh)."""
    from confluent_kafka import KafkaException, Producer

    props = _props([*producer_props, *more_props], producer_config, "--producer-props")
    payloads = _payloads(record_size, payload_file, payload_delimiter, payload_monotonic)
    if transaction_duration_ms is not None and transaction_duration_ms <= 0:
        fail("--transaction-duration-ms should be greater than zero", 2)
    transactional_id = transactional_id or props.pop("transactional.id", None)
    if transaction_duration_ms is not None and transactional_id is None:
        transactional_id = f"performance-producer-{random.getrandbits(64):016x}"
    if transactional_id is not None:
        props["transactional.id"] = transactional_id
        transaction_duration_ms = transaction_duration_ms or 3000
    metrics = ClientMetrics()
    conf = client_config(_bootstrap_of(props, bootstrap), properties, **props,
                         **(metrics.config() if print_metrics else {}))
    try:
        producer = Producer(conf)
    except KafkaException as exc:
        fail(f"cannot create the producer: {kafka_error_text(exc)}", 2)
    stats = ProducerStats(num_records)
    errors: list[str] = []
    rnd = random.Random(0)
    # random upper-case letters as Kafka's payloads, sliced from one buffer at a random offset per record (a
    # fresh random payload per record costs more in Python than sending it)
    letters = bytes(rnd.randrange(26) + 65 for _ in range((record_size or 0) + 4096))

    def report(size: int, sent: float) -> Any:
        def on_delivery(err: Any, _msg: Any) -> None:
            now = time.monotonic()
            if err is not None:
                errors.append(str(err))
            else:
                stats.record(int((now - sent) * 1000), size, now)
        return on_delivery

    try:
        if transactional_id is not None:
            producer.init_transactions(30)
        txn_start: float | None = None
        start = time.monotonic()
        for i in range(num_records):
            if payloads:
                value = payloads[rnd.randrange(len(payloads))]
            elif payload_monotonic:
                value = str(i).encode()
            else:
                offset = rnd.randrange(4096)
                value = letters[offset:offset + (record_size or 0)]
            if transactional_id is not None and txn_start is None:
                producer.begin_transaction()
                txn_start = time.monotonic()
            sent = time.monotonic()
            while True:
                try:
                    producer.produce(topic, value, on_delivery=report(len(value), sent))
                    break
                except BufferError:  # the local queue is full: serve delivery reports, then try again
                    producer.poll(0.05)
            producer.poll(0)
            if txn_start is not None and (sent - txn_start) * 1000 >= (transaction_duration_ms or 0):
                producer.commit_transaction(60)
                txn_start = None
            if throughput > 0:  # Kafka's ThroughputThrottler: hold the rate at about THROUGHPUT records/sec
                ahead = (i + 1) / throughput - (time.monotonic() - start)
                if ahead > 0:
                    producer.poll(ahead)
        if txn_start is not None:
            producer.commit_transaction(60)
        remaining = producer.flush(120)
    except KafkaException as exc:
        fail(f"producing to {topic} failed: {kafka_error_text(exc)}")
    safe_echo(stats.summary(time.monotonic()))
    if print_metrics:
        metrics.refresh(producer.poll)
        metrics.print()
    if errors or remaining:
        fail(f"{len(errors) + remaining} of {num_records} records were not delivered"
             + (f" (first error: {errors[0]})" if errors else ""))


class ClientMetrics:
    """``--print-metrics``: librdkafka's statistics (``statistics.interval.ms``), printed at the end as Kafka's
    ``ToolsUtils.printMetrics`` prints the Java client's metrics (``group:name:{tags} : value`` under a "Metric
    Name / Value" header), with librdkafka's names: the client's totals and each broker connection's."""

    INTERVAL_MS = 500

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.count = 0

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": self.INTERVAL_MS, "stats_cb": self._on_stats}

    def _on_stats(self, text: str) -> None:
        self.last = json.loads(text)
        self.count += 1

    def refresh(self, poll: Callable[[float], Any]) -> None:
        """Serve callbacks until statistics taken from now on arrive (at most a few intervals)."""
        seen, deadline = self.count, time.monotonic() + 4 * self.INTERVAL_MS / 1000
        while self.count == seen and time.monotonic() < deadline:
            poll(0.1)

    def print(self) -> None:
        stats = self.last
        if not stats:
            return
        client = f"client-id={stats.get('client_id', '')}"
        values: dict[str, int | float] = {}
        for group, tags, section in [("librdkafka", client, stats)] + [
                ("librdkafka-broker", f"broker={name}, {client}", b) for name, b in (stats.get("brokers") or {}).items()]:
            for key, value in section.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    values[f"{group}:{key}:{{{tags}}}"] = value
        width = max(map(len, values), default=11)
        safe_echo(f"\n{'Metric Name':<{width}}   Value")
        for name in sorted(values):
            value = values[name]
            safe_echo(f"{name:<{width}} : {value:.3f}" if isinstance(value, float) else f"{name:<{width}} : {value}")


_JAVA_DATE = (("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"))


def format_time(ms: float, java_format: str) -> str:
    """A time in ms in a Java SimpleDateFormat pattern (yyyy MM dd HH mm ss SSS), in local time."""
    text = java_format
    for java, py in _JAVA_DATE:
        text = text.replace(java, py)
    text = text.replace("SSS", f"{int(ms) % 1000:03d}")
    return time.strftime(text, time.localtime(ms / 1000))


@dataclass
class _ConsumerProgress:
    messages: int = 0
    bytes: int = 0
    join_ms: int = 0
    join_round_ms: int = 0


def _csv_row(*cols: Any) -> str:
    return ", ".join(f"{c:.4f}" if isinstance(c, float) else str(c) for c in cols)


@click.command("consumer-perf-test")
@click.option("--topic", required=True, help="The topic to consume from.")
@click.option("--messages", type=int, required=True, help="The number of messages to consume.")
@click.option("--group", default=None, help="The group id (default: perf-consumer-<random>).")
@click.option("--fetch-size", type=int, default=1024 * 1024, show_default=True,
              help="Bytes to fetch per partition per request (max.partition.fetch.bytes).")
@click.option("--from-latest", is_flag=True, help="Start from the end when the group has no committed offset.")
@click.option("--socket-buffer-size", type=int, default=2 * 1024 * 1024, show_default=True,
              help="TCP receive buffer size.")
@click.option("--consumer.config", "consumer_config", default=None, help="Consumer config properties file.")
@click.option("--show-detailed-stats", is_flag=True, help="A row per --reporting-interval instead of the summary.")
@click.option("--timeout", "timeout_ms", type=int, default=10000, show_default=True,
              help="Maximum time in ms between returned records.")
@click.option("--reporting-interval", type=int, default=5000, show_default=True, help="Interval in ms of rows.")
@click.option("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", show_default=True,
              help="Java SimpleDateFormat of the time columns.")
@click.option("--hide-header", is_flag=True, help="Do not print the header line.")
@click.option("--print-metrics", is_flag=True, help="Print the client's metrics (librdkafka's statistics) at the end.")
@bootstrap_option
def consumer_perf_test(topic: str, messages: int, group: str | None, fetch_size: int, from_latest: bool,
                       socket_buffer_size: int, consumer_config: str | None, show_detailed_stats: bool,
                       timeout_ms: int, reporting_interval: int, date_format: str, hide_header: bool,
                       print_metrics: bool, bootstrap: str, properties: tuple[str, ...]) -> None:
    """Consume MESSAGES records and report throughput as CSV (kafka-consumer-perf-test.sh)."""
    from confluent_kafka import Consumer, KafkaException

    props = _props((), consumer_config, "--consumer.config")
    metrics = ClientMetrics()
    conf = client_config(_bootstrap_of(props, bootstrap), properties, **{
        "group.id": group or f"perf-consumer-{random.randrange(100000)}",
        "auto.offset.reset": "latest" if from_latest else "earliest",
        "enable.auto.commit": True, "max.partition.fetch.bytes": fetch_size,
        "socket.receive.buffer.bytes": socket_buffer_size, **props, **(metrics.config() if print_metrics else {})})
    if not hide_header:
        first = "time, threadId" if show_detailed_stats else "start.time, end.time"
        safe_echo(f"{first}, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
                  "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    progress = _ConsumerProgress()
    start_ms = time.time() * 1000
    join_start = time.monotonic()

    def on_assign(_consumer: Any, _partitions: Any) -> None:
        now = time.monotonic()
        progress.join_round_ms = int((now - join_start) * 1000)
        progress.join_ms += progress.join_round_ms

    try:
        consumer = Consumer(conf)
        consumer.subscribe([topic], on_assign=on_assign)
        last_report_ms = last_consumed_ms = now_ms = time.time() * 1000
        last_messages = last_bytes = 0
        while progress.messages < messages and now_ms - last_consumed_ms <= timeout_ms:
            batch = consumer.consume(min(500, messages - progress.messages), 0.1)
            now_ms = time.time() * 1000
            for msg in batch:
                error = msg.error()
                if error is not None:
                    if error.fatal():
                        raise KafkaException(error)
                    continue
                last_consumed_ms = now_ms
                progress.messages += 1
                progress.bytes += len(msg.key() or b"") + len(msg.value() or b"")
            if show_detailed_stats and batch and now_ms - last_report_ms >= reporting_interval:
                elapsed = now_ms - last_report_ms
                fetch_ms = elapsed - progress.join_round_ms
                interval_mb = (progress.bytes - last_bytes) / MB
                interval_n = progress.messages - last_messages
                safe_echo(_csv_row(format_time(now_ms, date_format), 0, progress.bytes / MB,
                                   1000.0 * interval_mb / elapsed, progress.messages, 1000.0 * interval_n / elapsed,
                                   progress.join_round_ms, int(fetch_ms),
                                   1000.0 * interval_mb / fetch_ms if fetch_ms > 0 else 0.0,
                                   1000.0 * interval_n / fetch_ms if fetch_ms > 0 else 0.0))
                progress.join_round_ms = 0
                last_report_ms, last_messages, last_bytes = now_ms, progress.messages, progress.bytes
        end_ms = time.time() * 1000
        if print_metrics:  # statistics from after the last record; paused, the polls hand out no more records
            consumer.pause(consumer.assignment())
            metrics.refresh(consumer.poll)
        consumer.close()
    except KafkaException as exc:
        fail(f"consuming {topic} failed: {kafka_error_text(exc)}")
    if progress.messages < messages:
        safe_echo(f"WARNING: Exiting before consuming the expected number of messages: timeout ({timeout_ms} ms) "
                  "exceeded. You can use the --timeout option to increase the timeout.")
    if not show_detailed_stats:
        elapsed_s = max(end_ms - start_ms, 1e-3) / 1000
        fetch_ms = int(end_ms - start_ms) - progress.join_ms
        total_mb = progress.bytes / MB
        safe_echo(_csv_row(format_time(start_ms, date_format), format_time(end_ms, date_format), total_mb,
                           total_mb / elapsed_s, progress.messages, progress.messages / elapsed_s, progress.join_ms,
                           fetch_ms, total_mb / (fetch_ms / 1000) if fetch_ms > 0 else 0.0,
                           progress.messages / (fetch_ms / 1000) if fetch_ms > 0 else 0.0))
    if print_metrics:
        metrics.print()
