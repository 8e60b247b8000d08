"""``tidelog produce`` and ``tidelog consume``: pipe-friendly console clients over the Kafka protocol.

``produce`` sends one record per stdin line; ``consume`` prints one record per line. Both are confluent-kafka
clients and work against any Kafka-compatible broker. Bytes are passed through unchanged (no decoding), except
``--format json`` which prints UTF-8 text (or base64 for bytes that are not UTF-8).

Without ``--group`` the consumer assigns partitions itself and commits nothing (librdkafka insists on a
``group.id`` anyway, so a per-process one is set and never used for commits).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, BinaryIO, TypedDict, cast

import click

from tidelog.cli._client import (
    bootstrap_option,
    client_config,
    exit_quietly_on_broken_pipe,
    kafka_error_name,
    kafka_error_text,
    parse_key_values,
)
from tidelog.cli.line_reader import KNOWN as READER_PROPERTIES
from tidelog.cli.line_reader import Header, LineError, LineReader, unescape

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer


class _RecordOptions(TypedDict, total=False):
    """The keyword arguments every record is produced with (``Producer.produce``)."""

    partition: int
    headers: list[tuple[str, str | bytes | None]]  # the list form of confluent-kafka's HeadersType

#: a librdkafka configuration value (``client_config``'s keyword arguments)
ConfigValue = str | int | float | bool

ACKS = ("all", "-1", "0", "1")
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


# ---------------------------------------------------------------------------------------------------------------
# produce


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


@click.command()
@click.argument("topic")
@click.option("--key-separator", "-K", default=None, help="Split each line at the first SEP into key and value.")
@click.option("--partition", "-p", type=int, default=None, help="Send every record to this partition.")
@click.option("--acks", type=click.Choice(ACKS), default="all", show_default=True)
@click.option("--compression", "-z", type=click.Choice(COMPRESSION), default="none", show_default=True)
@click.option("--header", "-H", "headers", multiple=True, metavar="KEY=VALUE", help="Header for every record.")
@click.option("--idempotent", is_flag=True, help="Idempotent producer (enable.idempotence=true, acks=all).")
@click.option("--batch-size", type=int, default=None, help="Max bytes per batch (librdkafka batch.size).")
@click.option("--linger-ms", "--linger", type=float, default=None, help="Wait this long to fill a batch.")
@click.option(
    "--delivery-timeout-ms",
    type=int,
    default=30000,
    show_default=True,
    help="Give up on a record after this long (message.timeout.ms).",
)
@click.option("--verbose", "-v", is_flag=True, help="Print topic/partition/offset of each record to stderr.")
@bootstrap_option
def produce(
    topic: str,
    key_separator: str | None,
    partition: int | None,
    acks: str,
    compression: str,
    headers: tuple[str, ...],
    idempotent: bool,
    batch_size: int | None,
    linger_ms: float | None,
    delivery_timeout_ms: int,
    verbose: bool,
    bootstrap: str,
    properties: tuple[str, ...],
) -> None:
    """Send each line of stdin to TOPIC as one record. Exits non-zero if any record was not delivered.
    kafka-console-producer's line reader properties split each line into headers, key and value:
    ``-X parse.key=true`` (``key.separator``, default a tab), ``-X parse.headers=true`` (``h1:v1,h2:v2<TAB>...``;
    ``headers.delimiter``, ``headers.separator``, ``headers.key.separator``), ``null.marker``, ``ignore.error``."""
    from confluent_kafka import KafkaException, Producer

    client_props = tuple(p for p in properties if p.partition("=")[0].strip() not in READER_PROPERTIES)

    extra: dict[str, ConfigValue] = {
        "acks": acks,
        "compression.type": compression,
        "message.timeout.ms": delivery_timeout_ms,
    }
    if idempotent:
        if acks not in ("all", "-1"):
            raise click.UsageError("--idempotent needs --acks all")
        extra["enable.idempotence"] = True
    if batch_size is not None:
        extra["batch.size"] = batch_size
    if linger_ms is not None:
        extra["linger.ms"] = linger_ms
    try:
        producer = Producer(client_config(bootstrap, client_props, **extra))
    except KafkaException as exc:
        raise click.ClickException(kafka_error_text(exc)) from None
    header_list: list[tuple[str, str | bytes | None]] | None = [(k, v.encode("utf-8")) for k, v in parse_key_values(headers, "--header")] or None
    # kafka-console-producer's --property names go to the line reader, the others (-X) to librdkafka
    reader_props = {k: v for k, v in parse_key_values(properties, "--property") if k in READER_PROPERTIES}
    if key_separator is not None:  # -K SEP: parse.key with that separator
        reader_props.update({"parse.key": "true", "key.separator": key_separator})
    try:
        reader = LineReader.from_properties(reader_props)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    kwargs: _RecordOptions = {}
    if partition is not None:
        kwargs["partition"] = partition
    if header_list:
        kwargs["headers"] = header_list
    sender = _Sender(producer, topic, kwargs, verbose)

    def alone() -> Producer:
        return Producer(client_config(bootstrap, client_props, **{**extra, **_ALONE}))

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    # also SIGINT, even when the shell that started us ignores it (a background job of a script: Python then
    # installs no KeyboardInterrupt handler of its own, and Ctrl-C sent to the process would do nothing)
    signal.signal(signal.SIGINT, on_sigterm)
    stdin = sys.stdin.buffer  # what click.get_binary_stream("stdin") returned (deprecated in click 8.2)
    lineno = 0
    try:
        for lineno, line in enumerate(_lines(stdin), start=1):
            try:
                key, value, line_headers = reader.read(line, lineno)
            except LineError as exc:
                sender.finish(delivery_timeout_ms / 1000 + 5, alone)
                raise click.ClickException(str(exc)) from None
            sender.send(lineno, key, value, headers=line_headers)
        sender.finish(delivery_timeout_ms / 1000 + 5, alone)
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM): what was read is still delivered (briefly), then one line with the counts
        sender.finish(5.0, None)
        click.echo(f"tidelog: interrupted after {lineno} line(s): {sender.summary()}", err=True)
        sys.exit(130)
    if verbose or sender.failed or sender.unsent:
        click.echo(f"tidelog: {sender.summary()}", err=True)
    if sender.failed or sender.unsent:
        sys.exit(1)


# a producer that sends every record in a batch of its own: the records of a batch the broker refused as too large
# are sent again through it, as Kafka's Java producer splits such a batch
_ALONE = {"batch.num.messages": 1, "linger.ms": 0}
_MSG_SIZE_TOO_LARGE = 10  # the broker's MESSAGE_TOO_LARGE, and librdkafka's local check of message.max.bytes
_LISTED_FAILURES = 100


class _Sender:
    """Sends lines as records and keeps count. A batch refused as too large (MESSAGE_TOO_LARGE: the topic's
    ``max.message.bytes`` applies to a whole batch) is not a failure of its records: they are sent again one per
    batch, after the others, and only a record too large alone fails, reported by its line number and size."""

    def __init__(self, producer: Producer, topic: str, kwargs: _RecordOptions, verbose: bool) -> None:
        self.producer = producer
        self.topic = topic
        self.kwargs = kwargs
        self.verbose = verbose
        self.delivered = 0
        self.failed = 0
        self.unsent = 0
        self.retry: list[tuple[int, bytes | None, bytes | None, list[Header] | None]] = []

    def send(self, lineno: int, key: bytes | None, value: bytes | None, producer: Producer | None = None,
             alone: bool = False,
             headers: list[Header] | None = None) -> None:
        from confluent_kafka import KafkaException

        producer = producer or self.producer
        kwargs = self.kwargs
        if headers is not None:  # the line's own headers after those of --header
            kwargs = {**kwargs, "headers": [*kwargs.get("headers", []), *headers]}

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.delivered += 1
                if self.verbose:
                    click.echo(f"{msg.topic()}\t{msg.partition()}\t{msg.offset()}", err=True)
            elif err.code() == _MSG_SIZE_TOO_LARGE and not alone:
                self.retry.append((lineno, key, value, headers))
            else:
                self.fail(lineno, key, value, f"{err.name()}: {err.str()}")

        while True:
            try:
                producer.produce(self.topic, value=value, key=key, on_delivery=on_delivery, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: serve delivery reports, then retry
            except KafkaException as exc:
                if kafka_error_name(exc) == "MSG_SIZE_TOO_LARGE":  # over the client's message.max.bytes
                    self.fail(lineno, key, value, kafka_error_text(exc))
                    return
                raise click.ClickException(kafka_error_text(exc)) from None
        producer.poll(0)

    def fail(self, lineno: int, key: bytes | None, value: bytes | None, reason: str) -> None:
        self.failed += 1
        if self.failed <= _LISTED_FAILURES:
            size = len(value or b"") + (len(key) if key is not None else 0)
            click.echo(f"tidelog: line {lineno} ({size} bytes) not written: {reason}", err=True)
        elif self.failed == _LISTED_FAILURES + 1:
            click.echo("tidelog: more records not written (not listed)", err=True)

    def finish(self, timeout_s: float, alone_producer: Callable[[], Producer] | None) -> None:
        """Deliver what is queued; then the records of refused batches, one per batch (``alone_producer()``
        makes that producer; None: they count as not sent)."""
        self.unsent += self.producer.flush(timeout_s)
        if not self.retry:
            return
        retry, self.retry = sorted(self.retry), []
        if alone_producer is None:
            self.unsent += len(retry)
            return
        single = alone_producer()
        for lineno, key, value, headers in retry:
            self.send(lineno, key, value, producer=single, alone=True, headers=headers)
        self.unsent += single.flush(timeout_s)

    def summary(self) -> str:
        text = f"{self.delivered} record(s) delivered, {self.failed} failed"
        if self.unsent:
            text += f", {self.unsent} not delivered before the timeout"
        return text


# ---------------------------------------------------------------------------------------------------------------
# consume


def _text(b: bytes | None) -> str:
    return "null" if b is None else b.decode("utf-8", errors="replace")


def _json_field(out: dict[str, object], name: str, b: bytes | None) -> None:
    if b is None:
        out[name] = None
        return
    try:
        out[name] = b.decode("utf-8")
    except UnicodeDecodeError:
        out[name + "_base64"] = base64.b64encode(b).decode("ascii")


def _headers(msg: Message) -> list[Header]:
    """A consumed record's headers: librdkafka gives a consumer a list of (name, bytes or None), never the dict or
    str values a producer may pass (which the stub's ``HeadersType`` also allows)."""
    return cast("list[Header]", msg.headers() or [])


def format_record(
    msg: Message,
    fmt: str,
    print_key: bool,
    print_offset: bool,
    print_headers: bool,
    key_separator: bytes,
) -> bytes:
    """One output line (without the newline) for a consumed message."""
    if fmt == "json":
        obj: dict[str, object] = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()}
        ts_type, ts = msg.timestamp()
        obj["timestamp"] = ts if ts_type else None
        _json_field(obj, "key", msg.key())
        _json_field(obj, "value", msg.value())
        hdrs = []
        for hk, hv in _headers(msg):
            h: dict[str, object] = {"key": hk}
            _json_field(h, "value", hv)
            hdrs.append(h)
        obj["headers"] = hdrs
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")
    fields: list[bytes] = []
    if print_offset:
        fields.append(f"Partition:{msg.partition()}\tOffset:{msg.offset()}".encode())
    if print_headers:
        hdrs_b = [hk.encode("utf-8") + b":" + (b"null" if hv is None else hv) for hk, hv in _headers(msg)]
        fields.append(b",".join(hdrs_b) if hdrs_b else b"NO_HEADERS")
    value = msg.value()
    record = b"null" if value is None else value
    if print_key:
        key = msg.key()
        record = (b"null" if key is None else key) + key_separator + record
    fields.append(record)
    return b"\t".join(fields)


_NAMED_OFFSETS = {"earliest": -2, "beginning": -2, "latest": -1, "end": -1}  # librdkafka's BEGINNING / END
_OFFSET_TAIL_BASE = -2000  # librdkafka's RD_KAFKA_OFFSET_TAIL(n) = -2000 - n: n before the end


def _start_offset(text: str) -> int:
    """``--offset``: N, -N (N before the end), earliest/beginning, latest/end; a usage error otherwise."""
    named = _NAMED_OFFSETS.get(text.strip().lower())
    if named is not None:
        return named
    try:
        n = int(text)
    except ValueError:
        raise click.BadParameter(f"expected N, -N, earliest or latest, got {text!r}", param_hint="--offset") from None
    return n if n >= 0 else _OFFSET_TAIL_BASE + n


def _reader_gone(out: BinaryIO) -> bool:
    """True when stdout is a pipe whose reading end has closed (POLLERR on the write end), so an idle
    ``tidelog consume ... | head`` exits instead of waiting for a record it could never write."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR/POLLHUP are always reported
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset (default: the end).")
@click.option("--offset", "-o", "start_offset", default=None, metavar="OFFSET",
              help="Start at OFFSET: N (from the partition's start), -N (N before its end, as kcat), "
                   "earliest (or beginning), latest (or end).")
@click.option("--partition", "-p", type=int, default=None, help="Read only this partition.")
@click.option("--group", "-g", default=None, help="Join this consumer group (subscribe and commit).")
@click.option("--max-messages", "-n", type=int, default=None, help="Exit after this many records.")
@click.option("--timeout-ms", type=int, default=None, help="Exit when no record arrives for this long.")
@click.option("--print-key", is_flag=True, help="Print KEY<sep>VALUE.")
@click.option("--print-offset", is_flag=True, help="Prefix Partition:P<tab>Offset:O.")
@click.option("--print-headers", is_flag=True, help="Print headers as k:v,k:v (NO_HEADERS when none).")
@click.option("--key-separator", default="\\t", show_default=True, help="Separator after the key.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]), default=None)
@click.option("--verbose", "-v", is_flag=True, help="Report the number of records to stderr at exit.")
@bootstrap_option
def consume(
    topic: str,
    from_beginning: bool,
    start_offset: str | None,
    partition: int | None,
    group: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    print_headers: bool,
    key_separator: str,
    fmt: str,
    isolation_level: str | None,
    verbose: bool,
    bootstrap: str,
    properties: tuple[str, ...],
) -> None:
    """Print records of TOPIC to stdout, one per line."""
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    if from_beginning and start_offset is not None:
        raise click.UsageError("--from-beginning and --offset are exclusive")
    start = _start_offset(start_offset) if start_offset is not None else None
    if group is not None and (start_offset is not None or partition is not None):
        raise click.UsageError("--offset/--partition assign partitions themselves; they cannot be used with --group")
    if max_messages is not None and max_messages <= 0:
        return

    reset = "earliest" if from_beginning else "latest"
    if start is not None and start >= 0:
        reset = "error"  # an explicit offset out of range is reported, not silently moved
    elif start is not None:
        reset = "earliest"  # -N with fewer than N records: from the start, as kcat
    extra: dict[str, ConfigValue] = {
        "auto.offset.reset": reset,
        "enable.partition.eof": False,
    }
    if isolation_level:
        extra["isolation.level"] = isolation_level
    if group is not None:
        extra["group.id"] = group
    else:
        # librdkafka requires a group.id; with assign() and no commits the group is never joined
        extra["group.id"] = f"tidelog-console-{os.getpid()}-{int(time.time() * 1000)}"
        extra["enable.auto.commit"] = False
        extra["enable.auto.offset.store"] = False
    try:
        consumer = Consumer(client_config(bootstrap, properties, **extra))
    except KafkaException as exc:
        raise click.ClickException(kafka_error_text(exc)) from None

    out = sys.stdout.buffer
    sep_b = unescape(key_separator).encode("utf-8")
    count = 0
    interrupted = False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if group is not None:
            consumer.subscribe([topic])
        else:
            # --timeout-ms bounds the wait for metadata too
            try:
                md = consumer.list_topics(topic, timeout=30 if timeout_ms is None else min(30.0, timeout_ms / 1000))
            except KafkaException as exc:
                raise click.ClickException(f"cannot fetch metadata: {kafka_error_text(exc)}") from None
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                err = tmd.error if tmd is not None else None
                raise click.ClickException(f"topic {topic!r} is not available ({err.name() if err else 'unknown'})")
            parts = sorted(tmd.partitions) if partition is None else [partition]
            if partition is not None and partition not in tmd.partitions:
                raise click.ClickException(f"topic {topic!r} has no partition {partition}")
            if start is None:
                start = OFFSET_BEGINNING if from_beginning else OFFSET_END
            try:
                consumer.assign([TopicPartition(topic, p, start) for p in parts])
            except KafkaException as exc:
                raise click.ClickException(kafka_error_text(exc)) from None

        idle_s = None if timeout_ms is None else timeout_ms / 1000
        idle_deadline = None if idle_s is None else time.monotonic() + idle_s
        while max_messages is None or count < max_messages:
            wait = 0.5
            if idle_deadline is not None:
                wait = max(0.0, min(wait, idle_deadline - time.monotonic()))
            msg = consumer.poll(wait)
            if msg is None:
                if idle_deadline is not None and time.monotonic() >= idle_deadline:
                    break
                if _reader_gone(out):
                    raise BrokenPipeError  # `| head` has exited while we wait for more records
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or not err.retriable():
                    raise click.ClickException(f"{err.name()}: {err.str()}")
                click.echo(f"tidelog: {err.name()}: {err.str()}", err=True)
                continue
            out.write(format_record(msg, fmt, print_key, print_offset, print_headers, sep_b) + b"\n")
            out.flush()
            count += 1
            if idle_s is not None:
                idle_deadline = time.monotonic() + idle_s
    except BrokenPipeError:
        consumer.close()
        exit_quietly_on_broken_pipe()
    except KeyboardInterrupt:
        interrupted = True
    consumer.close()
    if verbose or interrupted:
        click.echo(f"Processed a total of {count} messages", err=True)
