"""Transactions (issue 14) with the pure-Python clients against a real ``tidelog serve``: kafka-python 3
(``KafkaProducer(transactional_id=...)``, ``KafkaConsumer(isolation_level=...)``) and aiokafka
(``AIOKafkaProducer(transactional_id=...)`` with ``async with producer.transaction()``).

Each client's own consumer reads back what its producer wrote; confluent-kafka reads it too, as a second opinion.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kafka.errors as kerrors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition
from txnhelp import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    by_partition,
    committed_offsets,
    create_topics,
    name,
    plain_producer,
    produce_all,
    read_to_end,
    wait_for,
    wait_stable,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE = 30.0


# ---------------------------------------------------------------------------------------------- kafka-python


def kp_producer(bs: str, tid: str) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bs, transactional_id=tid, linger_ms=5, max_block_ms=20000,
                         request_timeout_ms=15000, transaction_timeout_ms=10000)


def kp_read(bs: str, topic: str, partitions: list[int], isolation: str) -> dict[int, list[bytes]]:
    """Everything kafka-python's consumer with ``isolation`` returns from the beginning up to its end offsets
    (ListOffsets with the same isolation level: the LSO for read_committed)."""
    c = KafkaConsumer(bootstrap_servers=bs, isolation_level=isolation, enable_auto_commit=False, group_id=None,
                      request_timeout_ms=15000)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps, timeout_ms=10000)
        out: dict[int, list[bytes]] = {p: [] for p in partitions}
        deadline = time.monotonic() + DEADLINE
        while any(c.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"positions {[c.position(tp) for tp in tps]}, ends {end}"
            for tp, recs in c.poll(timeout_ms=200).items():
                out[tp.partition] += [r.value for r in recs]
        return out
    finally:
        c.close()


def test_kafka_python_commit_and_abort(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic = name("kp-txn")
    create_topics(bs, {topic: 2})
    p = kp_producer(bs, name("kp-tid"))
    try:
        p.init_transactions()
        for prefix, commit in (("c1", True), ("ab", False), ("c2", True)):
            p.begin_transaction()
            for part in (0, 1):
                for i in range(3):
                    p.send(topic, value=f"{prefix}-{part}-{i}".encode(), partition=part)
            p.flush(20)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(timeout=10)
    wait_stable(bs, [(topic, 0), (topic, 1)])  # the last transaction's markers follow the answer to EndTxn

    def recs(prefixes: list[str], part: int) -> list[bytes]:
        return [f"{x}-{part}-{i}".encode() for x in prefixes for i in range(3)]

    assert kp_read(bs, topic, [0, 1], READ_COMMITTED) == {part: recs(["c1", "c2"], part) for part in (0, 1)}
    assert kp_read(bs, topic, [0, 1], READ_UNCOMMITTED) == {part: recs(["c1", "ab", "c2"], part) for part in (0, 1)}
    assert by_partition(read_to_end(bs, [(topic, 0), (topic, 1)], READ_COMMITTED)) == {
        (topic, part): recs(["c1", "c2"], part) for part in (0, 1)}


def test_kafka_python_consume_transform_produce(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    src, dst, group = name("kp-src"), name("kp-dst"), name("kp-group")
    create_topics(bs, {src: 1, dst: 1})
    produce_all(plain_producer(bs), [(src, 0, None, f"in-{i}".encode()) for i in range(10)])
    c = KafkaConsumer(src, bootstrap_servers=bs, group_id=group, isolation_level=READ_COMMITTED,
                      enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                      heartbeat_interval_ms=500, request_timeout_ms=15000)
    p = kp_producer(bs, name("kp-tid"))
    try:
        p.init_transactions()
        got: list[Any] = []
        deadline = time.monotonic() + DEADLINE
        while len(got) < 10:
            assert time.monotonic() < deadline, f"consumed {len(got)} of 10"
            for recs in c.poll(timeout_ms=200).values():
                got += recs
        tp = TopicPartition(src, 0)
        p.begin_transaction()
        for r in got:
            p.send(dst, value=r.value.upper(), partition=0)
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(c.position(tp), "", -1)}, c.group_metadata())
        assert committed_offsets(bs, group, [(src, 0)]) == {(src, 0): -1001}, "offsets visible before the commit"
        p.commit_transaction()
        wait_for(lambda: committed_offsets(bs, group, [(src, 0)]) == {(src, 0): 10}, 15, "the committed offsets")
    finally:
        p.close(timeout=10)
        c.close()
    wait_stable(bs, [(dst, 0)])
    assert kp_read(bs, dst, [0], READ_COMMITTED) == {0: [f"IN-{i}".encode() for i in range(10)]}


def test_kafka_python_zombie_is_fenced(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic, tid = name("kp-zombie"), name("kp-tid")
    create_topics(bs, {topic: 1})
    zombie, fresh = kp_producer(bs, tid), kp_producer(bs, tid)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie", partition=0)
        zombie.flush(20)
        fresh.init_transactions()  # bumps the epoch: the zombie's transaction is aborted
        fresh.begin_transaction()
        fresh.send(topic, value=b"fresh", partition=0)
        fresh.commit_transaction()
        with pytest.raises((kerrors.ProducerFencedError, kerrors.InvalidProducerEpochError)):
            zombie.commit_transaction()
    finally:
        fresh.close(timeout=10)
        zombie.close(timeout=0)
    wait_stable(bs, [(topic, 0)])
    assert kp_read(bs, topic, [0], READ_COMMITTED) == {0: [b"fresh"]}
    assert kp_read(bs, topic, [0], READ_UNCOMMITTED) == {0: [b"zombie", b"fresh"]}


# --------------------------------------------------------------------------------------------------- aiokafka


async def aio_read(bs: str, topic: str, partitions: list[int], isolation: str) -> dict[int, list[bytes]]:
    c = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level=isolation, enable_auto_commit=False,
                         group_id=None, request_timeout_ms=15000)
    await c.start()
    try:
        tps = [AioTopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        end = await c.end_offsets(tps)
        out: dict[int, list[bytes]] = {p: [] for p in partitions}
        deadline = time.monotonic() + DEADLINE
        while True:
            positions = {tp: await c.position(tp) for tp in tps}
            if all(positions[tp] >= end[tp] for tp in tps):
                return out
            assert time.monotonic() < deadline, f"positions {positions}, ends {end}"
            for tp, recs in (await c.getmany(timeout_ms=200)).items():
                out[tp.partition] += [r.value for r in recs]
    finally:
        await c.stop()


def test_aiokafka_transaction_context_commit_and_abort(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    topic = name("aio-txn")
    create_topics(bs, {topic: 2})

    class Rollback(Exception):
        pass

    async def run() -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=name("aio-tid"), request_timeout_ms=15000,
                             transaction_timeout_ms=10000)
        await p.start()
        try:
            async with p.transaction():
                for part in (0, 1):
                    await p.send_and_wait(topic, f"c1-{part}".encode(), partition=part)
            with pytest.raises(Rollback):
                async with p.transaction():  # an exception inside the context aborts the transaction
                    for part in (0, 1):
                        await p.send_and_wait(topic, f"ab-{part}".encode(), partition=part)
                    raise Rollback
            async with p.transaction():
                for part in (0, 1):
                    await p.send_and_wait(topic, f"c2-{part}".encode(), partition=part)
        finally:
            await p.stop()
        await asyncio.to_thread(wait_stable, bs, [(topic, 0), (topic, 1)])
        return (await aio_read(bs, topic, [0, 1], READ_COMMITTED), await aio_read(bs, topic, [0, 1], READ_UNCOMMITTED))

    committed, uncommitted = asyncio.run(asyncio.wait_for(run(), 90))
    assert committed == {part: [f"c1-{part}".encode(), f"c2-{part}".encode()] for part in (0, 1)}
    assert uncommitted == {part: [f"{x}-{part}".encode() for x in ("c1", "ab", "c2")] for part in (0, 1)}


def test_aiokafka_send_offsets_to_transaction(txn_broker: Any) -> None:
    bs = txn_broker.bootstrap
    src, dst, group = name("aio-src"), name("aio-dst"), name("aio-group")
    create_topics(bs, {src: 1, dst: 1})
    produce_all(plain_producer(bs), [(src, 0, None, f"in-{i}".encode()) for i in range(10)])

    async def run() -> None:
        c = AIOKafkaConsumer(src, bootstrap_servers=bs, group_id=group, isolation_level=READ_COMMITTED,
                             enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                             heartbeat_interval_ms=500, request_timeout_ms=15000)
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=name("aio-tid"), request_timeout_ms=15000)
        await c.start()
        await p.start()
        try:
            got: list[Any] = []
            deadline = time.monotonic() + DEADLINE
            while len(got) < 10:
                assert time.monotonic() < deadline, f"consumed {len(got)} of 10"
                for recs in (await c.getmany(timeout_ms=200)).values():
                    got += recs
            tp = AioTopicPartition(src, 0)
            async with p.transaction():
                for r in got:
                    await p.send(dst, r.value.upper(), partition=0)
                await p.send_offsets_to_transaction({tp: AioOffsetAndMetadata(await c.position(tp), "")}, group)
                assert await asyncio.to_thread(committed_offsets, bs, group, [(src, 0)]) == {(src, 0): -1001}
            await asyncio.to_thread(wait_for, lambda: committed_offsets(bs, group, [(src, 0)]) == {(src, 0): 10},
                                    15, "the committed offsets")
        finally:
            await p.stop()
            await c.stop()

    asyncio.run(asyncio.wait_for(run(), 90))
    wait_stable(bs, [(dst, 0)])
    assert asyncio.run(aio_read(bs, dst, [0], READ_COMMITTED)) == {0: [f"IN-{i}".encode() for i in range(10)]}
