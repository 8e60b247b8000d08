"""Transactional offsets at the group coordinator (KIP-98, KIP-447): TxnOffsetCommit over the wire (raw frames
through ``tidelog.protocol.codec``) against ``tidelog serve``, pending offsets invisible to OffsetFetch and
UNSTABLE_OFFSET_COMMIT with ``require_stable``, the member checks of TxnOffsetCommit v3+, deletion and expiry
with pending offsets, and what a restart loads. The COMMIT/ABORT markers are written in-process (a Broker on
the test's event loop): the control batch appended to the group's ``__consumer_offsets`` partition, then
``GroupCoordinator.on_txn_marker``, the path the transaction coordinator's WriteTxnMarkers takes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient

from tidelog.broker.config import BrokerConfig
from tidelog.broker.group import records as rec
from tidelog.broker.group.coordinator import _read_partitions
from tidelog.broker.group.records import OFFSETS_TOPIC, OffsetValue
from tidelog.errors import ErrorCode
from tidelog.protocol import codec
from tidelog.records.batch import ControlRecordType, build_batch, build_control_batch, decode_batches
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog

from .conftest import FAST_GROUPS, create_topic, wait_until

COMMIT, FETCH, FIND_COORDINATOR, JOIN, SYNC, DELETE, OFFSET_DELETE = 8, 9, 10, 11, 14, 42, 47
INIT_PRODUCER_ID, ADD_OFFSETS, END_TXN, TXN_COMMIT = 22, 25, 26, 28
NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, ILLEGAL_GENERATION = 0, 3, 12, 22
UNKNOWN_MEMBER_ID, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 25, 47, 48, 49
TRANSACTION_ABORTABLE = ErrorCode.TRANSACTION_ABORTABLE
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, UNSTABLE_OFFSET_COMMIT = 79, 82, 88

TOPIC = "txn-t"


@pytest.fixture(scope="module")
def b(broker_factory: Any) -> Any:
    br = broker_factory({**FAST_GROUPS, "offsets.retention.check.interval.ms": "100"})
    create_topic(br.bootstrap, TOPIC, 2)
    return br


def subscription(*topics: str) -> bytes:
    return b"\x00\x00" + codec.encode_data("ConsumerProtocolSubscription", 0, {"topics": list(topics), "user_data": None})


@dataclass
class Txn:
    tid: str
    pid: int
    epoch: int


RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def _retry(call: Callable[[], int], what: str) -> None:
    """Bounded retries of a transaction request while the coordinator answers a retriable error, as clients do."""
    codes: list[int] = []
    wait_until(lambda: codes.append(call()) or codes[-1] not in RETRIABLE, 20, what)
    assert codes[-1] == NONE, (what, codes[-1])


def begin(c: RawClient, tid: str, *groups: str) -> Txn:
    """InitProducerId for ``tid`` (the transaction coordinator on this broker), then AddOffsetsToTxn per group."""
    r = c.request(FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
    assert r["error_code"] == NONE
    got: dict[str, Any] = {}

    def init() -> int:
        got.update(c.request(INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                                    "producer_id": -1, "producer_epoch": -1}))
        return int(got["error_code"])

    _retry(init, f"InitProducerId({tid})")
    t = Txn(tid, got["producer_id"], got["producer_epoch"])
    add_offsets(c, t, *groups)
    return t


def add_offsets(c: RawClient, t: Txn, *groups: str) -> None:
    for g in groups:
        _retry(lambda g=g: c.request(ADD_OFFSETS, 3, {"transactional_id": t.tid, "producer_id": t.pid,
                                                      "producer_epoch": t.epoch, "group_id": g})["error_code"],
               f"AddOffsetsToTxn({t.tid}, {g})")


def end(c: RawClient, t: Txn, commit: bool) -> None:
    _retry(lambda: c.request(END_TXN, 3, {"transactional_id": t.tid, "producer_id": t.pid, "producer_epoch": t.epoch,
                                          "committed": commit})["error_code"], f"EndTxn({t.tid}, {commit})")


def txn_commit(c: RawClient, group: str, t: Txn, parts: dict[int, int], *, version: int = 3, epoch: int | None = None,
               gen: int = -1, member: str = "", instance: str | None = None, topic: str = TOPIC,
               metadata: str = "txn", pid: int | None = None) -> dict[int, int]:
    body: dict[str, Any] = {
        "transactional_id": t.tid, "group_id": group, "producer_id": t.pid if pid is None else pid,
        "producer_epoch": t.epoch if epoch is None else epoch,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": metadata}
            for p, o in parts.items()]}],
    }
    if version >= 3:
        body.update(generation_id=gen, member_id=member, group_instance_id=instance)
    r = c.request(TXN_COMMIT, version, body)
    return {p["partition_index"]: p["error_code"] for t in r["topics"] for p in t["partitions"]}


def settled(c: RawClient, group: str, parts: list[int]) -> dict[int, tuple[int, int]]:
    """OffsetFetch(require_stable) once no partition is UNSTABLE_OFFSET_COMMIT (the markers are written after
    EndTxn is answered)."""
    return wait_until(lambda: (r := fetch(c, group, parts, stable=True)) and all(
        code != UNSTABLE_OFFSET_COMMIT for _, code in r.values()) and r, 20, f"the offsets of {group} to settle")


def plain_commit(c: RawClient, group: str, parts: dict[int, int], retention_ms: int | None = None) -> None:
    body: dict[str, Any] = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                                       for p, o in parts.items()]}]}
    if retention_ms is not None:
        body["retention_time_ms"] = retention_ms
    r = c.request(COMMIT, 2 if retention_ms is not None else 7, body)
    assert all(p["error_code"] == NONE for t in r["topics"] for p in t["partitions"]), r


def fetch(c: RawClient, group: str, parts: list[int] | None = None, *, version: int = 7,
          stable: bool = False) -> dict[int, tuple[int, int]]:
    """{partition: (committed offset, partition error)}; ``parts`` None = every committed partition."""
    topics = None if parts is None else [{"name": TOPIC, "partition_indexes": parts}]
    if version >= 8:
        r = c.request(FETCH, version, {"groups": [{"group_id": group, "topics": topics}], "require_stable": stable})
        assert r["groups"][0]["error_code"] == NONE
        topics_out = r["groups"][0]["topics"]
    else:
        body: dict[str, Any] = {"group_id": group, "topics": topics}
        if version >= 7:
            body["require_stable"] = stable
        r = c.request(FETCH, version, body)
        assert r.get("error_code", NONE) == NONE  # v0-1 have no group error
        topics_out = r["topics"]
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for t in topics_out for p in t["partitions"]}


def join_stable(c: RawClient, group: str, instance: str | None = None) -> tuple[str, int]:
    body: dict[str, Any] = {"group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 10000,
                            "member_id": "", "group_instance_id": instance, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": subscription(TOPIC)}]}
    r = c.request(JOIN, 5, body)
    if r["error_code"] == MEMBER_ID_REQUIRED:
        r = c.request(JOIN, 5, {**body, "member_id": r["member_id"]})
    assert r["error_code"] == NONE, r
    mid, gen = r["member_id"], r["generation_id"]
    s = c.request(SYNC, 3, {"group_id": group, "generation_id": gen, "member_id": mid, "group_instance_id": instance,
                            "assignments": [{"member_id": mid, "assignment": b""}]})
    assert s["error_code"] == NONE
    return mid, gen


# ------------------------------------------------------------------------------------------ over the wire


def test_pending_offsets_are_invisible_until_the_commit_marker(b: Any) -> None:
    with RawClient(b.port) as c:
        plain_commit(c, "g-pend", {0: 5})
        t = begin(c, "tx-pend", "g-pend")
        assert txn_commit(c, "g-pend", t, {0: 10, 1: 20}) == {0: NONE, 1: NONE}
        # not committed yet: OffsetFetch answers the last committed offsets
        for v in (1, 6, 7, 8):
            assert fetch(c, "g-pend", [0, 1], version=v) == {0: (5, NONE), 1: (-1, NONE)}
        assert fetch(c, "g-pend", version=7) == {0: (5, NONE)}
        # require_stable (v7+): UNSTABLE_OFFSET_COMMIT per partition, no offset
        for v in (7, 8):
            assert fetch(c, "g-pend", [0, 1], version=v, stable=True) == {
                0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        # all partitions: the committed ones, the unstable one flagged (Kafka's fetchAllOffsets)
        assert fetch(c, "g-pend", version=8, stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT)}
        # another group is not affected
        plain_commit(c, "g-pend-other", {1: 3})
        assert fetch(c, "g-pend-other", [0, 1], stable=True) == {0: (-1, NONE), 1: (3, NONE)}
        # EndTxn(commit): the coordinator's COMMIT marker reaches __consumer_offsets and the offsets are committed
        end(c, t, commit=True)
        assert settled(c, "g-pend", [0, 1]) == {0: (10, NONE), 1: (20, NONE)}
        # the next transaction of the producer is aborted: its offsets vanish, the committed ones stay
        add_offsets(c, t, "g-pend")
        assert txn_commit(c, "g-pend", t, {0: 99}) == {0: NONE}
        assert fetch(c, "g-pend", [0], stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT)}
        end(c, t, commit=False)
        assert settled(c, "g-pend", [0, 1]) == {0: (10, NONE), 1: (20, NONE)}


def test_bad_input_is_answered_per_partition_and_changes_nothing(b: Any) -> None:
    with RawClient(b.port) as c:
        t = begin(c, "tx-bad", "g-bad")
        r = c.request(TXN_COMMIT, 3, {
            "transactional_id": t.tid, "group_id": "g-bad", "producer_id": t.pid, "producer_epoch": t.epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                {"name": TOPIC, "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": "x" * 5000},
                    {"partition_index": 1, "committed_offset": 2, "committed_metadata": ""},
                    {"partition_index": 7, "committed_offset": 3, "committed_metadata": ""}]},
                {"name": "no-such-topic", "partitions": [{"partition_index": 0, "committed_offset": 4}]}]})
        got = {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}
        assert got == {(TOPIC, 0): OFFSET_METADATA_TOO_LARGE, (TOPIC, 1): NONE, (TOPIC, 7): UNKNOWN_TOPIC_OR_PARTITION,
                       ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert fetch(c, "g-bad", [0, 1], stable=True) == {0: (-1, NONE), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        # no producer id: nothing is written (it would read back as a plain commit)
        assert txn_commit(c, "g-bad", t, {0: 1}, pid=-1) == {0: INVALID_PRODUCER_ID_MAPPING}
        # KIP-890: a stale epoch, or a group whose offsets partition the transaction never added
        assert txn_commit(c, "g-bad", t, {0: 8}, epoch=t.epoch + 1) == {0: INVALID_PRODUCER_EPOCH}
        other = next(g for g in (f"g-bad-{i}" for i in range(100))
                     if rec.partition_for(g, 5) != rec.partition_for("g-bad", 5))
        assert txn_commit(c, other, t, {0: 8}, version=3) == {0: INVALID_TXN_STATE}
        assert txn_commit(c, other, t, {0: 8}, version=4) == {0: INVALID_TXN_STATE}
        assert fetch(c, other, [0], stable=True) == {0: (-1, NONE)}
        # transactions v2 (transaction.version 2 finalized, D0063): v5 adds the offsets partition itself (at level
        # 0 it answers TRANSACTION_ABORTABLE, as Produce v12 does: tests/broker/txn/test_tv2.py)
        assert txn_commit(c, other, t, {0: 8}, version=5) == {0: NONE}
        assert fetch(c, other, [0], stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert fetch(c, "g-bad", [0, 1], stable=True) == {0: (-1, NONE), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        end(c, t, commit=False)
        assert settled(c, "g-bad", [0, 1]) == {0: (-1, NONE), 1: (-1, NONE)}
        assert settled(c, other, [0]) == {0: (-1, NONE)}


def test_member_generation_and_instance_checks(b: Any) -> None:
    with RawClient(b.port) as c:
        mid, gen = join_stable(c, "g-mem")
        t = begin(c, "tx-mem", "g-mem", "g-mem-none")
        for version in (3, 5):
            assert txn_commit(c, "g-mem", t, {0: 1}, version=version, gen=gen + 1, member=mid) == {0: ILLEGAL_GENERATION}
            assert txn_commit(c, "g-mem", t, {0: 1}, version=version, gen=gen, member="nobody") == {0: UNKNOWN_MEMBER_ID}
            assert txn_commit(c, "g-mem", t, {0: 1}, version=version, gen=gen, member=mid,
                              instance="unknown-instance") == {0: UNKNOWN_MEMBER_ID}
        # an unknown group with a generation: ILLEGAL_GENERATION (Kafka 4.x), and the group is not created
        assert txn_commit(c, "g-mem-none", t, {0: 1}, gen=3, member="m") == {0: ILLEGAL_GENERATION}
        assert fetch(c, "g-mem-none", [0], stable=True) == {0: (-1, NONE)}
        assert fetch(c, "g-mem", [0], stable=True) == {0: (-1, NONE)}  # nothing was written
        # the member at its generation; no member id / generation -1 (or v0-2, which carry neither) skip the check
        assert txn_commit(c, "g-mem", t, {0: 11}, gen=gen, member=mid) == {0: NONE}
        assert txn_commit(c, "g-mem", t, {1: 12}) == {1: NONE}
        assert txn_commit(c, "g-mem", t, {1: 13}, version=0) == {1: NONE}
        assert fetch(c, "g-mem", [0, 1], stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        end(c, t, commit=True)
        assert settled(c, "g-mem", [0, 1]) == {0: (11, NONE), 1: (13, NONE)}
        # static membership: the instance must name this member id
        smid, sgen = join_stable(c, "g-static", instance="inst-1")
        ts = begin(c, "tx-static", "g-static")
        assert txn_commit(c, "g-static", ts, {0: 1}, gen=sgen, member="old-id", instance="inst-1") == {
            0: FENCED_INSTANCE_ID}
        assert txn_commit(c, "g-static", ts, {0: 1}, gen=sgen, member=smid, instance="inst-1") == {0: NONE}
        end(c, ts, commit=False)


def test_delete_group_and_offset_delete_remove_pending_offsets(b: Any) -> None:
    with RawClient(b.port) as c:
        t = begin(c, "tx-del", "g-del", "g-odel")
        assert txn_commit(c, "g-del", t, {0: 7}) == {0: NONE}
        r = c.request(DELETE, 2, {"groups_names": ["g-del"]})
        assert r["results"][0]["error_code"] == NONE
        assert fetch(c, "g-del", [0], stable=True) == {0: (-1, NONE)}
        plain_commit(c, "g-odel", {1: 4})
        assert txn_commit(c, "g-odel", t, {0: 8, 1: 9}) == {0: NONE, 1: NONE}
        r = c.request(OFFSET_DELETE, 0, {"group_id": "g-odel", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
        assert r["error_code"] == NONE and r["topics"][0]["partitions"][0]["error_code"] == NONE
        assert fetch(c, "g-odel", [0, 1], stable=True) == {0: (-1, NONE), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert fetch(c, "g-odel", [0, 1]) == {0: (-1, NONE), 1: (4, NONE)}
        # the transaction commits: what the tombstones removed does not come back
        end(c, t, commit=True)
        assert settled(c, "g-odel", [0, 1]) == {0: (-1, NONE), 1: (9, NONE)}
        assert fetch(c, "g-del", [0], stable=True) == {0: (-1, NONE)}


def test_expiry_keeps_offsets_with_a_pending_transaction(b: Any) -> None:
    with RawClient(b.port) as c:
        plain_commit(c, "g-exp", {0: 1, 1: 2}, retention_ms=200)
        t = begin(c, "tx-exp", "g-exp")
        assert txn_commit(c, "g-exp", t, {1: 20}) == {1: NONE}
        # partition 0 expires; partition 1 has a pending transactional offset and stays, and so does the group
        wait_until(lambda: 0 not in fetch(c, "g-exp"), 10, "the offset of partition 0 to expire")
        assert fetch(c, "g-exp") == {1: (2, NONE)}
        assert fetch(c, "g-exp", [1], stable=True) == {1: (-1, UNSTABLE_OFFSET_COMMIT)}
        end(c, t, commit=True)
        assert settled(c, "g-exp", [1]) == {1: (20, NONE)}


def test_restart_keeps_pending_offsets_pending(b: Any) -> None:
    with RawClient(b.port) as c:
        plain_commit(c, "g-rs", {0: 3})
        t = begin(c, "tx-rs", "g-rs")
        assert txn_commit(c, "g-rs", t, {0: 30, 1: 31}) == {0: NONE, 1: NONE}
    b.stop()
    b.start()
    with RawClient(b.port) as c:
        wait_until(lambda: fetch_or_none(c, "g-rs"), 30, "the coordinator to load")
        assert fetch(c, "g-rs", [0, 1]) == {0: (3, NONE), 1: (-1, NONE)}
        assert fetch(c, "g-rs", [0, 1], stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        # the transaction, loaded by its coordinator, commits after the restart: the loaded pending offsets too
        end(c, t, commit=True)
        assert settled(c, "g-rs", [0, 1]) == {0: (30, NONE), 1: (31, NONE)}
    b.stop()
    b.start()
    with RawClient(b.port) as c:
        wait_until(lambda: fetch_or_none(c, "g-rs"), 30, "the coordinator to load")
        assert fetch(c, "g-rs", [0, 1], stable=True) == {0: (30, NONE), 1: (31, NONE)}


def fetch_or_none(c: RawClient, group: str) -> dict[int, tuple[int, int]] | None:
    r = c.request(FETCH, 7, {"group_id": group, "topics": None, "require_stable": False})
    return None if r["error_code"] else {p["partition_index"]: p["committed_offset"]
                                         for t in r["topics"] for p in t["partitions"]} or {-1: -1}


# ------------------------------------------------------------------------------------------ markers (in-process)


def _in_process(data_dir: Path, scenario: Callable[[Any], Awaitable[None]]) -> None:
    """A Broker in this process on ``data_dir`` (free port), ``scenario(broker)`` once the groups are loaded. The
    producers are made up (no InitProducerId), so the transaction coordinator's verification is off."""
    from tidelog.broker.broker import Broker

    async def main() -> None:
        cfg = BrokerConfig.from_properties({
            "log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0", "tidelog.metrics.listener": "off",
            "offsets.topic.num.partitions": "5", "transaction.partition.verification.enable": "false"})
        broker = Broker(cfg)
        await broker.start()
        try:
            await asyncio.wait_for(broker.group_coordinator.loaded.wait(), 30)
            await scenario(broker)
        finally:
            await broker.shutdown()

    asyncio.run(main())


def _marker(broker: Any, group: str, pid: int, commit: bool, epoch: int = 0) -> None:
    """What WriteTxnMarkers does at a __consumer_offsets partition: the control batch, then the coordinator."""
    partition = rec.partition_for(group, 5)
    plog = broker.leader_log(OFFSETS_TOPIC, partition)
    append_marker = getattr(plog, "append_txn_marker", None)  # the partition side's (branch txn-storage)
    if append_marker is not None:
        append_marker(pid, epoch, 0, commit, leader_epoch=0)
    else:  # the same control batch (records.batch.build_control_batch), appended as the leader
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        plog.append_as_leader(build_control_batch(kind, pid, epoch, 0, 0, int(time.time() * 1000)), leader_epoch=0)
    broker.on_append((OFFSETS_TOPIC, partition), plog)
    broker.group_coordinator.on_txn_marker(partition, pid, commit)


def test_markers_commit_and_abort_and_a_restart_loads_them(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def first(broker: Any) -> None:
        broker.topics.create_topic(TOPIC, 2, 1, {})

        def wire(fn: Callable[[RawClient], Any]) -> Any:
            def run() -> Any:
                with RawClient(broker.port) as c:
                    return fn(c)
            return asyncio.to_thread(run)

        # committed: becomes visible
        assert await wire(lambda c: txn_commit(c, "g-c", Txn("made-up", 2000, 0), {0: 10, 1: 11})) == {0: NONE, 1: NONE}
        assert await wire(lambda c: fetch(c, "g-c", [0, 1], stable=True)) == {
            0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        _marker(broker, "g-c", 2000, commit=True)
        assert await wire(lambda c: fetch(c, "g-c", [0, 1], stable=True)) == {0: (10, NONE), 1: (11, NONE)}
        # aborted: dropped, the committed offset stays
        await wire(lambda c: plain_commit(c, "g-a", {0: 4}))
        assert await wire(lambda c: txn_commit(c, "g-a", Txn("made-up", 2001, 0), {0: 40})) == {0: NONE}
        _marker(broker, "g-a", 2001, commit=False)
        assert await wire(lambda c: fetch(c, "g-a", [0], stable=True)) == {0: (4, NONE)}
        # a plain commit written after the transactional one wins when the transaction commits (log order)
        assert await wire(lambda c: txn_commit(c, "g-o", Txn("made-up", 2002, 0), {0: 50, 1: 51})) == {0: NONE, 1: NONE}
        await wire(lambda c: plain_commit(c, "g-o", {0: 60}))
        _marker(broker, "g-o", 2002, commit=True)
        assert await wire(lambda c: fetch(c, "g-o", [0, 1], stable=True)) == {0: (60, NONE), 1: (51, NONE)}
        # a transaction still open at shutdown, and one producer's marker that does not touch another's offsets
        assert await wire(lambda c: txn_commit(c, "g-open", Txn("made-up", 2003, 0), {0: 70})) == {0: NONE}
        assert await wire(lambda c: txn_commit(c, "g-open", Txn("made-up", 2004, 0), {1: 71})) == {1: NONE}
        _marker(broker, "g-open", 2004, commit=True)
        assert await wire(lambda c: fetch(c, "g-open", [0, 1], stable=True)) == {
            0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (71, NONE)}
        # the batch is written as Kafka's coordinator writes it: one transactional batch, producer id/epoch, no seq
        plog = broker.leader_log(OFFSETS_TOPIC, rec.partition_for("g-open", 5))
        info = plog.read(0, 1 << 20, max_offset=plog.log_end_offset, min_one_batch=True)
        headers = [h for _, h, _ in decode_batches(info.read_bytes())]
        txn = [h for h in headers if h.producer_id == 2003]
        assert len(txn) == 1 and txn[0].is_transactional and not txn[0].is_control
        assert (txn[0].producer_epoch, txn[0].base_sequence) == (0, -1)

    async def second(broker: Any) -> None:
        def run() -> dict[str, Any]:
            with RawClient(broker.port) as c:
                return {g: fetch(c, g, [0, 1], stable=True) for g in ("g-c", "g-a", "g-o", "g-open")}

        got = await asyncio.to_thread(run)
        assert got == {
            "g-c": {0: (10, NONE), 1: (11, NONE)},
            "g-a": {0: (4, NONE), 1: (-1, NONE)},
            "g-o": {0: (60, NONE), 1: (51, NONE)},
            "g-open": {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (71, NONE)},
        }
        # the open transaction's marker arrives after the restart: its offset becomes the committed one
        _marker(broker, "g-open", 2003, commit=True)
        assert await asyncio.to_thread(lambda: _fetch_now(broker.port, "g-open")) == {0: (70, NONE), 1: (71, NONE)}

    _in_process(data, first)
    _in_process(data, second)


def _fetch_now(port: int, group: str) -> dict[int, tuple[int, int]]:
    with RawClient(port) as c:
        return fetch(c, group, [0, 1], stable=True)


# ------------------------------------------------------------------------------------------ the replay


def test_replay_of_transactional_offsets(tmp_path: Path) -> None:
    """``_read_partitions`` as Kafka's loader: transactional records pending per producer, markers complete them
    (higher record offset wins on commit), tombstones remove pending offsets too, open transactions stay pending,
    and a transactional record outside its group's partition is not adopted."""
    n = 5
    group = "g-replay"
    home = rec.partition_for(group, n)
    now = int(time.time() * 1000)
    logs = {p: PartitionLog.open(tmp_path / f"{OFFSETS_TOPIC}-{p}", LogConfig()) for p in range(n)}

    def value(offset: int) -> bytes:
        return rec.encode_offset_value(OffsetValue(offset, -1, "", now))

    def key(part: int, grp: str = group) -> bytes:
        return rec.encode_offset_key(grp, TOPIC, part)

    def txn(p: int, pid: int, *entries: tuple[bytes, bytes | None]) -> None:
        logs[p].append_as_leader(build_batch(list(entries), producer_id=pid, producer_epoch=0, is_transactional=True),
                                 coordinator_origin=True)

    def plain(p: int, *entries: tuple[bytes, bytes | None]) -> None:
        logs[p].append_as_leader(build_batch(list(entries)))

    def marker(p: int, pid: int, commit: bool) -> None:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        logs[p].append_as_leader(build_control_batch(kind, pid, 0, 0, 0, now))

    try:
        plain(home, (key(0), value(1)))
        txn(home, 10, (key(0), value(100)), (key(1), value(101)))   # committed below
        txn(home, 11, (key(2), value(200)))                         # aborted below
        txn(home, 12, (key(3), value(300)))                         # a plain commit comes after it
        plain(home, (key(3), value(3)))
        txn(home, 13, (key(4), value(400)), (key(5), value(401)))  # still open; 4 tombstoned
        plain(home, (key(4), None))
        marker(home, 10, True)
        marker(home, 11, False)
        marker(home, 12, True)
        other = (home + 1) % n
        txn(other, 14, (key(6), value(600)))                        # not the group's partition
        marker(other, 14, True)
        _, offsets, _, _, pending = _read_partitions(list(logs.values()), n, adopt_misplaced=True)
        got = {k[2]: ov.offset for k, ov in offsets.items() if k[0] == group}
        assert got == {0: 100, 1: 101, 3: 3}
        assert {pid: {k[2]: ov.offset for k, ov in offs.items()} for pid, offs in pending.get(home, {}).items()} == {
            13: {5: 401}}
        assert other not in pending
    finally:
        for lg in logs.values():
            lg.close()


# ------------------------------------------------------------------------------------------ a real client


def test_confluent_send_offsets_to_transaction(b: Any) -> None:
    """confluent-kafka's consume-transform-produce step: ``send_offsets_to_transaction`` with the consumer's group
    metadata (TxnOffsetCommit v3: member id and generation checked), invisible to a stable OffsetFetch until
    ``commit_transaction``; an aborted transaction's offsets never show."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    group, topic = "g-confluent", TOPIC
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    tp = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-confluent"})
    tp.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        assert seen >= 10
        positions = consumer.position([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        want = {p.partition: p.offset for p in positions}
        assert want == {0: 5, 1: 5}
        tp.begin_transaction()
        tp.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        with RawClient(b.port) as c:
            assert fetch(c, group, [0, 1], stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
            assert fetch(c, group, [0, 1]) == {0: (-1, NONE), 1: (-1, NONE)}
            tp.commit_transaction(30)
            assert settled(c, group, [0, 1]) == {0: (5, NONE), 1: (5, NONE)}
            # the next transaction is aborted: its offsets never become the committed ones
            tp.begin_transaction()
            tp.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], consumer.consumer_group_metadata(), 30)
            tp.abort_transaction(30)
            assert settled(c, group, [0, 1]) == {0: (5, NONE), 1: (5, NONE)}
        got = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
        assert {p.partition: p.offset for p in got} == {0: 5, 1: 5}
    finally:
        consumer.close()
