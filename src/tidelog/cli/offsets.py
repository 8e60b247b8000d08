"""``tidelog get-offsets``: kafka-get-offsets.sh (GetOffsetShell) through the bootstrap server (ListOffsets).

Prints ``topic:partition:offset`` per partition, sorted as Kafka's tool sorts them (by ``topic-partition`` as a
string); a partition without an offset for the time asked (a timestamp after its last record) is left out, a
partition that fails is reported on stderr and skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from tidelog.cli._client import (
    bootstrap_option,
    echo_json,
    fail,
    kafka_error_text,
    output_is_json,
    output_option,
    safe_echo,
)
from tidelog.cli.topics import _admin, _metadata, timeout_option

# Kafka's GetOffsetShell.TOPIC_PARTITION_PATTERN: topic regex, then an optional partition, range or open range
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_NAMED_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}
_TIME_HELP = "-1 or latest / -2 or earliest / -3 or max-timestamp, or a timestamp in ms"


@dataclass(frozen=True)
class PartitionRule:
    """One ``TopicPattern(:PartitionPattern)?`` of ``--topic-partitions`` (a range's upper bound is exclusive)."""

    topic: re.Pattern[str]
    low: int = 0
    high: int = 2**31 - 1
    only: int | None = None

    def allows_topic(self, topic: str) -> bool:
        return self.topic.fullmatch(topic) is not None

    def allows(self, topic: str, partition: int) -> bool:
        if not self.allows_topic(topic):
            return False
        if self.only is not None:
            return partition == self.only
        return self.low <= partition < self.high


def _topic_pattern(text: str | None) -> re.Pattern[str]:
    """Kafka's IncludeList: a regex (``,`` also separates alternatives; quotes are dropped)."""
    text = ".*" if not text else text.replace(",", "|").strip().strip("\"'")
    try:
        return re.compile(text)
    except re.error as exc:
        fail(f"invalid topic pattern {text!r}: {exc}", 2)


def parse_topic_partitions(spec: str) -> list[PartitionRule]:
    """``topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3`` as GetOffsetShell reads it."""
    rules = []
    for item in spec.split(","):
        m = _RULE.fullmatch(item)
        if m is None:
            fail(f"Invalid rule specification: {item}", 2)
        topic = _topic_pattern(m.group(1) or None)
        if m.group(2):
            rules.append(PartitionRule(topic, only=int(m.group(2))))
        else:
            rules.append(PartitionRule(topic, int(m.group(3) or 0), int(m.group(4) or 2**31 - 1)))
    return rules


def parse_time(value: str) -> int:
    """``--time``: a name or a number (-1 latest, -2 earliest, -3 max-timestamp, else a timestamp in ms)."""
    if value in _NAMED_TIMES:
        return _NAMED_TIMES[value]
    try:
        ms = int(value)
    except ValueError:
        fail(f"Malformed time argument {value}. Please use {_TIME_HELP}", 2)
    if ms < -3:
        fail(f"unsupported time {ms}: tidelog has no tiered storage (use {_TIME_HELP})", 2)
    return ms


def offset_spec(ms: int) -> Any:
    from confluent_kafka.admin import OffsetSpec

    return {-1: OffsetSpec.latest, -2: OffsetSpec.earliest, -3: OffsetSpec.max_timestamp}.get(
        ms, lambda: OffsetSpec.for_timestamp(ms))()


def matching_partitions(md: Any, allows_topic: Callable[[str], bool], allows: Callable[[str, int], bool],
                        exclude_internal: bool) -> list[tuple[str, int]]:
    out = []
    for name, tmd in md.topics.items():
        if tmd.error is not None or (exclude_internal and name.startswith("__")) or not allows_topic(name):
            continue
        out += [(name, p) for p in tmd.partitions if allows(name, p)]
    return out


def list_offsets(admin: Any, partitions: list[tuple[str, int]], ms: int,
                 timeout: float) -> dict[tuple[str, int], int | BaseException]:
    """The offset (or the failure) of each partition for ``--time ms``; -1 when the broker has none."""
    from confluent_kafka import TopicPartition

    spec = offset_spec(ms)
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions}, request_timeout=timeout)
    out: dict[tuple[str, int], int | BaseException] = {}
    for tp, fut in futures.items():
        try:
            out[(tp.topic, tp.partition)] = fut.result(timeout=timeout + 5).offset
        except Exception as exc:
            out[(tp.topic, tp.partition)] = exc
    return out


@click.command("get-offsets")
@click.option("--topic", default=None, help="The topic (a regular expression); default: every topic.")
@click.option("--partitions", default=None, metavar="P[,P...]", help="Partition ids (default: all).")
@click.option("--topic-partitions", default=None, metavar="PATTERNS",
              help="topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3 (not with --topic/--partitions).")
@click.option("--time", "time_", default="-1", show_default=True, help=_TIME_HELP + ".")
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics (__consumer_offsets ...).")
@output_option
@bootstrap_option
@timeout_option
def get_offsets(topic: str | None, partitions: str | None, topic_partitions: str | None, time_: str,
                exclude_internal_topics: bool, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Offsets of partitions at a time, one ``topic:partition:offset`` line each (kafka-get-offsets.sh)."""
    if topic_partitions is not None and (topic is not None or partitions is not None):
        fail("--topic-partitions cannot be used with --topic or --partitions", 2)
    ms = parse_time(time_)
    if topic_partitions is not None:
        rules = parse_topic_partitions(topic_partitions)
    else:
        try:
            ids = {int(p) for p in partitions.split(",")} if partitions else set()
        except ValueError:
            fail(f"--partitions expects a comma separated list of numeric partition ids, but received: {partitions}", 2)
        pattern = _topic_pattern(topic)
        rules = [PartitionRule(pattern, only=p) for p in sorted(ids)] or [PartitionRule(pattern)]
    admin = _admin(bootstrap, properties)
    md = _metadata(admin, timeout)
    wanted = matching_partitions(md, lambda t: any(r.allows_topic(t) for r in rules),
                                 lambda t, p: any(r.allows(t, p) for r in rules), exclude_internal_topics)
    if not wanted:
        fail("Could not match any topic-partitions with the specified filters")
    results = list_offsets(admin, wanted, ms, timeout)
    found = []
    # Kafka's order: by the partition's "topic-partition" name
    for (t, p), result in sorted(results.items(), key=lambda kv: f"{kv[0][0]}-{kv[0][1]}"):
        if isinstance(result, BaseException):
            click.echo(f"Skip getting offsets for topic-partition {t}-{p} due to error: {kafka_error_text(result)}",
                       err=True)
        elif result >= 0:
            found.append({"topic": t, "partition": p, "offset": result})
    if output_is_json():
        echo_json(found)
        return
    for f in found:
        safe_echo(f"{f['topic']}:{f['partition']}:{f['offset']}")
