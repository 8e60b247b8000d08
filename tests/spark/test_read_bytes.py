"""What a read costs in bytes (issue 29): the broker's ``tidelog_topic_bytes_out`` for a ``tidelog`` read, and the
bytes ``tidelog-log`` reads from the segment files, against the bytes of the log.

The bound, 1.25x the log's bytes: a read can never cost less than the log (every batch holding a wanted offset is
sent whole); splitting a partition into several Spark partitions adds one batch per boundary (the batch holding
the boundary goes to both neighbours: 16 KiB batches here, under 3 % of the log for the 12 ranges below); the
fetcher sizes each Fetch from the bytes per offset it has seen, so a range's last Fetch asks for at most about
one batch more than the range holds (another 3 %). 1.25 leaves room for uneven batches and a loaded machine's
retries, and is far below what the fetcher cost before: each range read up to 16 MiB past its end, 2.5x here
(4 ranges per partition, each read to the partition's end), 83x for the issue's 200,000 records in 500 ranges.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tidelog.records.header import RECORD_BATCH_OVERHEAD, BatchHeader
from tidelog.spark.kafka_source import KafkaBatchReader, OffsetRange
from tidelog.spark.log_source import LogDirReader

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
RECORDS = 20_000 * PARTITIONS
BOUND = 1.25
PRODUCER = {"batch.size": 16384, "linger.ms": 20}


def _metric(broker: Any, name: str, topic: str) -> float:
    """A per-topic gauge's or counter's (``<name>_total``) value on the broker's ``/metrics`` page."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + "_total{")) and f'topic="{topic}"' in line)


def _batches(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """``(base offset, last offset, bytes)`` of every batch of the partition's segment files."""
    out = []
    for seg in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + RECORD_BATCH_OVERHEAD <= len(data):
            h = BatchHeader.parse(data[pos:pos + RECORD_BATCH_OVERHEAD])
            if h.batch_length <= 0:
                break
            out.append((h.base_offset, h.last_offset, h.size))
            pos += h.size
    return out


def _needed(data_dir: Path, ranges: list[OffsetRange]) -> tuple[int, int]:
    """The bytes of the batches that overlap each range, summed over the ranges (the least any Kafka-protocol
    read of these ranges can cost), and the largest batch."""
    batches = {p: _batches(data_dir, r.topic, p) for r in ranges for p in [r.partition]}
    needed = sum(size for r in ranges for base, last, size in batches[r.partition] if last >= r.start and base < r.end)
    return needed, max(size for bs in batches.values() for _, _, size in bs)


@pytest.fixture(scope="module")
def fresh(kt: Any, spark_broker: Any) -> tuple[str, float]:
    """A topic of 3 partitions in one segment each (no producer snapshot yet: a freshly produced log), 16 KiB
    batches of 100-byte values; returns (topic, bytes of its log)."""
    topic = kt.new_topic(PARTITIONS, {"segment.bytes": str(256 * 1024 * 1024)}, prefix="bytes")
    kt.produce(topic, [(f"k{i % 1000}".encode(), b"%012d" % i + b"x" * 88, i % PARTITIONS)
                       for i in range(RECORDS)], PRODUCER)
    size = _metric(spark_broker, "tidelog_log_size_bytes", topic)
    assert size > RECORDS * 100
    return topic, size


def _read_cost(spark: Any, broker: Any, topic: str, **opts: str) -> float:
    before = _metric(broker, "tidelog_topic_bytes_out", topic)
    n = (spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", topic).options(**opts).load().count())
    assert n == RECORDS
    return _metric(broker, "tidelog_topic_bytes_out", topic) - before


def test_tidelog_read_of_a_fresh_topic_costs_its_bytes(spark: Any, spark_broker: Any,
                                                       fresh: tuple[str, float]) -> None:
    topic, size = fresh
    session = spark  # (spark.newSession() does not see Python data sources registered in the parent session)
    first = _read_cost(session, spark_broker, topic)
    assert size <= first <= BOUND * size, (first, size)
    # twelve ranges (four per partition): each range's Fetches stop near its end instead of 16 MiB past it
    opts = {"minPartitions": "12"}
    ranges = KafkaBatchReader({"kafka.bootstrap.servers": spark_broker.bootstrap, "subscribe": topic,
                               **opts}).partitions()
    assert len(ranges) == 12
    needed, largest = _needed(spark_broker.data_dir, list(ranges))  # type: ignore[arg-type]
    split = _read_cost(session, spark_broker, topic, **opts)
    assert needed <= split <= BOUND * size, (split, needed, size)
    # per range at most about one batch more than the batches it must read
    assert split <= needed + 2 * len(ranges) * largest, (split, needed, largest)
    assert _read_cost(session, spark_broker, topic) == first  # the next read costs what the first did


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/<pid>/io")
def test_tidelog_log_reads_its_bytes(spark: Any, spark_broker: Any, fresh: tuple[str, float]) -> None:
    """The bytes the source's planning and reading take from the files (this process's read syscalls, the
    reader's own code run here; the Spark read checks the rows), at read_committed (the default, which scans the
    batch headers for open transactions) and read_uncommitted."""
    topic, size = fresh
    path = str(spark_broker.data_dir)
    for iso in ("read_committed", "read_uncommitted"):
        opts = {"path": path, "subscribe": topic, "isolationLevel": iso}
        assert spark.read.format("tidelog-log").options(**opts).load().count() == RECORDS
        before = _rchar()
        reader = LogDirReader(opts)
        rows = sum(b.num_rows for part in reader.partitions() for b in reader.read(part))
        read = _rchar() - before
        assert rows == RECORDS
        assert size <= read <= 1.1 * size, (iso, read, size)
