"""Shared by the transaction suites: broker properties, confluent-kafka clients, readers of what a consumer sees
(read_committed / read_uncommitted) and of what the broker stored on disk (``.log`` and ``.txnindex``).

Every wait is bounded and polls for an event (end of partition, an offset reached), never a bare sleep.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

# Broker properties of the transaction suites: timed-out transactions are found within half a second (Kafka's
# default checks every 10 s), groups form at once and accept short sessions.
TXN_BROKER = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}

WORKER = Path(__file__).resolve().with_name("txn_worker.py")

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

# .txnindex entry: version int16 | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
assert TXN_INDEX_ENTRY.size == 34


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something true (returned) or ``timeout`` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)  # polling interval of a bounded wait


# --------------------------------------------------------------------------------------------------- clients


def create_topics(bootstrap: str, topics: dict[str, int], **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1, config=dict(configs)) for t, n in topics.items()],
                                  operation_timeout=10, request_timeout=15)
    for f in futures.values():
        f.result(timeout=20)


def txn_producer(bootstrap: str, transactional_id: str, **conf: Any) -> Producer:
    """A confluent-kafka transactional producer, ``init_transactions`` not called yet."""
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                     "transaction.timeout.ms": 10000, "socket.timeout.ms": 10000, **conf})


def plain_producer(bootstrap: str, **conf: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})


def produce_all(p: Producer, items: Iterable[tuple[str, int, bytes | None, bytes]], timeout: float = 20.0) -> None:
    """Produce (topic, partition, key, value) items and wait for every delivery report (errors raise)."""
    errors: list[Any] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for topic, partition, key, value in items:
        p.produce(topic, value=value, key=key, partition=partition, on_delivery=cb)
    assert p.flush(timeout) == 0, "messages still in flight"
    assert errors == [], errors


def consumer(bootstrap: str, isolation: str, **conf: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": name("txn-reader"), "enable.auto.commit": False,
                     "isolation.level": isolation, "fetch.wait.max.ms": 100, "enable.partition.eof": True,
                     "auto.offset.reset": "earliest", **conf})


Rec = tuple[str, int, int, bytes | None, bytes | None]  # topic, partition, offset, key, value


# leadership moving (a broker just killed or restarted in a cluster test): not an answer yet, ask / poll again
_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT,
                     KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})


def read_to_end(bootstrap: str, tps: Iterable[tuple[str, int]], isolation: str, timeout: float = 20.0,
                **conf: Any) -> list[Rec]:
    """Every record a consumer with ``isolation`` reads from the beginning of each partition until it reports the
    end of every one (librdkafka's partition EOF: the high watermark, or the LSO for read_committed)."""
    tps = list(tps)
    c = consumer(bootstrap, isolation, **conf)
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        out: list[Rec] = []
        pending = set(tps)
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"no end of partition within {timeout}s for {sorted(pending)}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard((m.topic(), m.partition()))
                    continue
                if m.error().code() in _MOVING:
                    continue
                raise KafkaException(m.error())
            out.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def read_to_end_in_subprocess(bootstrap: str, tps: Iterable[tuple[str, int]], isolation: str,
                              timeout: float = 20.0) -> list[Rec]:
    """:func:`read_to_end` in a ``txn_worker.py read`` subprocess: a client that crashes (librdkafka aborts the
    process on an inconsistency it asserts) fails the calling test with its stderr instead of killing pytest."""
    args = [sys.executable, str(WORKER), "read", bootstrap, isolation, str(timeout), *(f"{t}:{p}" for t, p in tps)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 30)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"the reader exited with {proc.returncode}: {proc.stderr[-3000:]}")

    def unb64(v: str | None) -> bytes | None:
        return None if v is None else base64.b64decode(v)

    return [(t, p, o, unb64(k), unb64(v)) for t, p, o, k, v in json.loads(lines[-1])["records"]]


def values(recs: Iterable[Rec]) -> list[bytes | None]:
    return [r[4] for r in recs]


def by_partition(recs: Iterable[Rec]) -> dict[tuple[str, int], list[bytes | None]]:
    out: dict[tuple[str, int], list[bytes | None]] = {}
    for t, p, _, _, v in sorted(recs, key=lambda r: (r[0], r[1], r[2])):
        out.setdefault((t, p), []).append(v)
    return out


def watermarks(bootstrap: str, topic: str, partition: int, isolation: str) -> tuple[int, int]:
    """(low, high) from a ListOffsets request of a consumer with ``isolation``: for read_committed the high
    watermark librdkafka asks for is the last stable offset."""
    c = consumer(bootstrap, isolation)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def offset_for_time(bootstrap: str, topic: str, partition: int, ts: int, isolation: str) -> int:
    c = consumer(bootstrap, isolation)
    try:
        (tp,) = c.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=10)
        if tp.error is not None:
            raise KafkaException(tp.error)
        return tp.offset
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The group's committed offsets as OffsetFetch without require_stable answers them (what is visible now;
    -1001 = none). Pending transactional offsets are not visible."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])
    res = admin.list_consumer_group_offsets([req], require_stable=False, request_timeout=10)[group].result(15)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}


# --------------------------------------------------------------------------------------------------- on disk


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def txn_index_entries(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int, int, int, int]]:
    """Every entry of every ``.txnindex`` of the partition, in segment order, unpacked with Kafka's layout."""
    out = []
    for path in sorted(partition_dir(data_dir, topic, partition).glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % TXN_INDEX_ENTRY.size == 0, f"{path.name}: {len(data)} bytes is not whole entries"
        out.extend(TXN_INDEX_ENTRY.iter_unpack(data))
    return out


def wait_stable(bootstrap: str, tps: Iterable[tuple[str, int]], timeout: float = 15.0) -> None:
    """Wait until no transaction is open on any of ``tps``: the LSO (read_committed high watermark) equals the
    high watermark. A committed or aborted transaction's markers are written after EndTxn has been answered (as
    Kafka's coordinator does: the client is answered once PrepareCommit/PrepareAbort is in the log), so a reader
    right after ``commit_transaction`` may still find the LSO before the transaction."""
    for t, p in tps:
        wait_for(lambda t=t, p=p: _stable(bootstrap, t, p), timeout, f"{t}-{p} to become stable")


def _stable(bootstrap: str, topic: str, partition: int) -> bool:
    try:
        return (watermarks(bootstrap, topic, partition, READ_COMMITTED)[1]
                == watermarks(bootstrap, topic, partition, READ_UNCOMMITTED)[1])
    except KafkaException as exc:
        if exc.args[0].code() in _MOVING:
            return False
        raise


# ------------------------------------------------------------------------------------------------ subprocesses


class Worker:
    """A ``txn_worker.py`` subprocess; its stdout JSON lines are read with a deadline."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.events: list[dict[str, Any]] = []
        self.stderr = ""  # what it wrote to stderr, once killed

    def read_event(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None if none came within ``timeout`` (fails if the worker died)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait(10)  # EOF: it is exiting
            raise AssertionError(f"worker exited ({rc}): {self.proc.stderr.read()[-3000:]}")
        ev = json.loads(line)
        self.events.append(ev)
        return ev

    def wait_event(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ev = self.read_event(max(0.0, deadline - time.monotonic()))
            if ev is not None and ev["event"] == kind:
                return ev
        raise AssertionError(f"no {kind!r} event from the worker within {timeout}s; events: {self.events[-5:]}")

    def drain(self) -> None:
        while self.read_event(0) is not None:
            pass

    def stop(self) -> None:
        """SIGSTOP: the process hangs (as a client stuck in a long GC pause) until :meth:`resume`."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.stdout.closed:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        # what it printed before it died
        for line in self.proc.stdout.read().splitlines():
            if line.startswith("{"):
                self.events.append(json.loads(line))
        self.stderr = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
