"""A consumer-group member run as a subprocess (so a test can SIGKILL it: no LeaveGroup, no commit).

Usage: ``python member.py CLIENT BOOTSTRAP GROUP TOPIC [options as JSON]``; CLIENT is confluent, kafka-python or
aiokafka. Prints one JSON object per line on stdout:

* ``{"event": "assigned", "partitions": [..]}`` whenever the assignment changes (after a rebalance);
* ``{"event": "msg", "p": partition, "o": offset, "v": value}`` for each record *processed*;
* ``{"event": "committed", "p": partition, "o": next offset}`` after each synchronous commit;
* ``{"event": "commit_failed", ...}`` (consumer protocol only): the commit was refused because the member lost its
  membership (UNKNOWN_MEMBER_ID / STALE / FENCED_MEMBER_EPOCH); the record stays uncommitted, the member goes on.

Options: ``session_ms`` (default 3000), ``strategy`` (range | roundrobin | cooperative-sticky), ``instance_id``,
``protocol``: ``consumer`` for KIP-848 (confluent only; ``assignor``: ``group.remote.assignor``),
``mode``: ``at-least-once`` (process, then commit; default) or ``at-most-once`` (commit, then process),
``crash_after`` N: after N records, exit abruptly (os._exit) between processing and commit (at-least-once) or
between commit and processing (at-most-once).
``graceful`` (confluent only): SIGTERM closes the consumer (LeaveGroup / leave heartbeat) instead of dying;
``survive_commit_errors`` (confluent, classic protocol): a commit refused because of a rebalance
(ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID) is reported as ``commit_failed``, as the consumer
protocol's are.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any


def emit(**kw: Any) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


class CommitFailed(Exception):
    """A commit refused because the member lost its membership (consumer protocol): the record was processed
    and not committed; the member carries on (it rejoins), as an application handling CommitFailed does."""


class Runner:
    def __init__(self, opts: dict[str, Any]) -> None:
        self.mode = opts.get("mode", "at-least-once")
        self.crash_after = opts.get("crash_after")
        self.count = 0
        self.assigned: list[int] = []

    def note_assignment(self, parts: list[int]) -> None:
        parts = sorted(parts)
        if parts != self.assigned:
            self.assigned = parts
            emit(event="assigned", partitions=parts)

    def handle(self, p: int, o: int, v: bytes, commit: Any) -> None:
        """Process one record with the configured delivery semantics; ``commit(p, next_offset)`` commits sync."""
        crash = self.crash_after is not None and self.count + 1 >= self.crash_after
        if self.mode == "at-most-once":
            commit(p, o + 1)
            emit(event="committed", p=p, o=o + 1)
            if crash:
                os._exit(3)  # committed, never processed: a gap
            emit(event="msg", p=p, o=o, v=v.decode())
        else:
            emit(event="msg", p=p, o=o, v=v.decode())
            if crash:
                os._exit(3)  # processed, never committed: a duplicate later
            try:
                commit(p, o + 1)
            except CommitFailed:
                return
            emit(event="committed", p=p, o=o + 1)
        self.count += 1


def run_confluent(bootstrap: str, group: str, topic: str, opts: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    runner = Runner(opts)
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": opts.get("session_ms", 3000),
        "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": opts.get("strategy", "range"),
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if opts.get("protocol") == "consumer":
        # KIP-848: the broker sets heartbeats, session and assignment; librdkafka refuses the classic settings
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            del conf[key]
        conf["group.protocol"] = "consumer"
        if opts.get("assignor"):
            conf["group.remote.assignor"] = opts["assignor"]
    if opts.get("instance_id"):
        conf["group.instance.id"] = opts["instance_id"]
    c = Consumer(conf)
    c.subscribe([topic])

    def commit(p: int, o: int) -> None:
        c.commit(offsets=[TopicPartition(topic, p, o)], asynchronous=False)

    if opts.get("protocol") == "consumer" or opts.get("survive_commit_errors"):
        from confluent_kafka import KafkaError, KafkaException

        lost_codes = {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.STALE_MEMBER_EPOCH, KafkaError.FENCED_MEMBER_EPOCH}
        if opts.get("survive_commit_errors"):
            lost_codes |= {KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS}
        plain_commit = commit

        def commit(p: int, o: int) -> None:  # the consumer protocol's CommitFailed is survivable
            try:
                plain_commit(p, o)
            except KafkaException as exc:
                if exc.args[0].code() not in lost_codes:
                    raise
                emit(event="commit_failed", p=p, o=o, code=exc.args[0].code())
                raise CommitFailed from exc

    stopping: list[int] = []
    if opts.get("graceful"):
        import signal

        signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    while not stopping:
        m = c.poll(0.2)
        runner.note_assignment([tp.partition for tp in c.assignment()])
        if m is None or m.error():
            continue
        runner.handle(m.partition(), m.offset(), m.value(), commit)
    c.close()  # graceful: leaves the group
    emit(event="closed")


def run_kafka_python(bootstrap: str, group: str, topic: str, opts: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener  # noqa: F401
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.structs import OffsetAndMetadata

    runner = Runner(opts)
    assignor = RoundRobinPartitionAssignor if opts.get("strategy") == "roundrobin" else RangePartitionAssignor
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
        session_timeout_ms=opts.get("session_ms", 3000), heartbeat_interval_ms=300,
        partition_assignment_strategy=[assignor], metadata_max_age_ms=1000,
        group_instance_id=opts.get("instance_id"),
    )
    c.subscribe([topic])

    def commit(p: int, o: int) -> None:
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)})

    while True:
        batches = c.poll(timeout_ms=200)
        runner.note_assignment([tp.partition for tp in c.assignment()])
        for _tp, msgs in batches.items():
            for m in msgs:
                runner.handle(m.partition, m.offset, m.value, commit)


async def run_aiokafka(bootstrap: str, group: str, topic: str, opts: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.structs import OffsetAndMetadata

    runner = Runner(opts)
    assignor = RoundRobinPartitionAssignor if opts.get("strategy") == "roundrobin" else RangePartitionAssignor
    c = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
        session_timeout_ms=opts.get("session_ms", 3000), heartbeat_interval_ms=300,
        partition_assignment_strategy=(assignor,), metadata_max_age_ms=1000,
    )
    await c.start()
    pending: list[tuple[int, int]] = []

    def commit(p: int, o: int) -> None:
        pending.append((p, o))

    while True:
        batches = await c.getmany(timeout_ms=200)
        runner.note_assignment([tp.partition for tp in c.assignment()])
        for _tp, msgs in batches.items():
            for m in msgs:
                runner.handle(m.partition, m.offset, m.value, commit)
                # the commit itself is async; do it before the next record so each record is committed in turn
                while pending:
                    p, o = pending.pop(0)
                    await c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "")})


def main() -> None:
    client, bootstrap, group, topic = sys.argv[1:5]
    opts = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    if client == "confluent":
        run_confluent(bootstrap, group, topic, opts)
    elif client == "kafka-python":
        run_kafka_python(bootstrap, group, topic, opts)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, group, topic, opts))
    else:
        raise SystemExit(f"unknown client {client}")


if __name__ == "__main__":
    main()
