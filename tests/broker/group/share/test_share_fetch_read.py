"""What a ShareFetch reads and when it answers (broker/group/share_read.py, share_wait.py):

* only the batch headers up to the batch completing ``MaxRecords`` are read, and the answer is file regions of the
  segment files (sendfile, never a copy of ``MaxBytes``), joined per segment, byte-identical to the log;
* a ShareFetch waiting for records is woken by the high watermark moving (the Fetch purgatory) or by records being
  released (the handler's 0.5 s step is only a safety net); on the wire a waiting ShareFetch answers with the record
  produced meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient, new_topic, produce_body

from tidelog.broker.group.share_read import read_batches, regions_of
from tidelog.broker.group.share_wait import wait_for_records
from tidelog.broker.purgatory import DelayedOperationPurgatory
from tidelog.records.batch import build_batch, decode_batches
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog

NOW = 1_700_000_000_000
PER = 10  # records per batch


def _log(path: Path, batches: int, segment_bytes: int = 1 << 30) -> PartitionLog:
    lg = PartitionLog.open(path / "t-0", LogConfig(segment_bytes=segment_bytes), now_ms=NOW)
    for i in range(batches):
        lg.append_as_leader(build_batch([(None, f"v{i}-{j}".encode() * 5, (), NOW) for j in range(PER)]),
                            now_ms=NOW + i)
    lg.high_watermark = lg.log_end_offset
    return lg


def _bytes(regions: list[Any]) -> bytes:
    return b"".join(r.read_bytes() for r in regions)


def _join(c: RawClient, topic: str, prefix: str) -> tuple[Any, str, str]:
    """The topic's id, and a new share group joined by member ``m1`` subscribed to it (ShareGroupHeartbeat)."""
    tid = c.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})["topics"][0]["topic_id"]
    group, member = prefix + "-" + uuid.uuid4().hex[:6], "m1"
    r = c.request(76, 1, {"group_id": group, "rack_id": None, "member_id": member, "member_epoch": 0,
                          "subscribed_topic_names": [topic]})
    assert r["error_code"] == 0, r
    return tid, group, member


def test_reads_headers_up_to_max_records_and_answers_file_regions(tmp_path: Path) -> None:
    lg = _log(tmp_path, 50)
    try:
        hw = lg.high_watermark
        got = read_batches(lg, 0, 1 << 30, hw, 25)  # 25 records: the third batch completes them
        assert [(b.base, b.last) for b in got] == [(0, 9), (10, 19), (20, 29)]
        got = read_batches(lg, 15, 1 << 30, hw, 5)  # counted from the start offset, inside batch 10-19
        assert [(b.base, b.last) for b in got] == [(10, 19)]
        got = read_batches(lg, 15, 1 << 30, hw, 6)
        assert [(b.base, b.last) for b in got] == [(10, 19), (20, 29)]
        assert [(b.base, b.last) for b in read_batches(lg, 480, 1 << 30, hw, 1000)] == [(480, 489), (490, 499)]
        assert read_batches(lg, 0, 1 << 30, 20, 1000)[-1].last == 19  # never beyond the high watermark
        assert len(read_batches(lg, 0, 1, hw, 1000)) == 1  # at least one batch within max bytes
        assert not any(b.control for b in got)
        # one region for consecutive batches of one segment, byte-identical to the log
        regions = regions_of(read_batches(lg, 0, 1 << 30, hw, 25))
        assert len(regions) == 1 and regions[0].first_offset == 0 and regions[0].next_offset == 30
        whole = lg.read(0, 1 << 30, max_offset=hw).read_bytes()
        assert _bytes(regions) == whole[:regions[0].length]
    finally:
        lg.close()


def test_regions_follow_segments(tmp_path: Path) -> None:
    lg = _log(tmp_path, 40, segment_bytes=4096)
    try:
        assert lg.segment_count > 2
        hw = lg.high_watermark
        batches = read_batches(lg, 0, 1 << 30, hw, 10_000)
        assert [b.base for b in batches] == list(range(0, 400, PER))
        regions = regions_of(batches)  # one region per segment file, in order
        assert len(regions) == lg.segment_count
        assert [r.first_offset for r in regions] == [s.base_offset for s in lg.segments]
        assert _bytes(regions) == lg.read(0, 1 << 30, max_offset=hw).read_bytes()
        some = regions_of(read_batches(lg, 105, 1 << 30, hw, 30))  # 100-109 .. 130-139: across a segment end
        assert sum(r.length for r in some) == sum(b.length for b in read_batches(lg, 105, 1 << 30, hw, 30))
        assert len(some) == 2 and some[0].first_offset == 100 and some[-1].next_offset == 140
    finally:
        lg.close()


class _Log:
    def __init__(self, hw: int) -> None:
        self.high_watermark = hw


def test_a_waiting_share_fetch_wakes_on_the_high_watermark_and_on_releases() -> None:
    async def main() -> None:
        purgatory = DelayedOperationPurgatory("Fetch")
        plog = _Log(5)
        changed = asyncio.Event()
        t0 = time.monotonic()
        await wait_for_records(purgatory, {("t", 0): (plog, 5)}, changed, 0.05)  # nothing: the timeout
        assert time.monotonic() - t0 >= 0.04 and purgatory.watched() == 0
        waiter = asyncio.ensure_future(wait_for_records(purgatory, {("t", 0): (plog, 5)}, changed, 30.0))
        await asyncio.sleep(0)
        assert purgatory.watched(("t", 0)) == 1
        assert purgatory.check_and_complete(("t", 0)) == 0 and not waiter.done()  # the HW did not move
        plog.high_watermark = 6
        assert purgatory.check_and_complete(("t", 0)) == 1
        await asyncio.wait_for(waiter, 5)
        assert purgatory.watched() == 0
        waiter = asyncio.ensure_future(wait_for_records(purgatory, {("t", 0): (plog, 6)}, changed, 30.0))
        await asyncio.sleep(0)
        changed.set()  # records released or acknowledged
        await asyncio.wait_for(waiter, 5)
        assert purgatory.watched() == 0  # unwatched when woken by the event
        # the HW moved before the wait began (during the acquisition pass): no wait at all
        await asyncio.wait_for(wait_for_records(purgatory, {("t", 0): (plog, 5)}, asyncio.Event(), 30.0), 5)

    asyncio.run(main())


@pytest.mark.integration
def test_a_waiting_share_fetch_answers_the_record_produced_meanwhile(broker_factory: Any) -> None:
    broker = broker_factory({"share.auto.offset.reset": "earliest"})
    with RawClient(broker.port, timeout=30) as c:
        topic = new_topic("share-wait")
        r = c.request(19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                              "timeout_ms": 10000})
        assert r["topics"][0]["error_code"] == 0, r
        tid, group, member = _join(c, topic, "swait")

        def fetch(epoch: int, wait_ms: int) -> dict:
            return c.request(78, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                     "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                                     "max_records": 100, "batch_size": 100,
                                     "topics": [{"topic_id": tid, "partitions": [
                                         {"partition_index": 0, "acknowledgement_batches": []}]}],
                                     "forgotten_topics_data": []})

        assert fetch(0, 0)["error_code"] == 0  # opens the session (the partition's state is loaded)
        produced = threading.Event()

        def produce() -> None:
            with RawClient(broker.port) as p:
                time.sleep(0.5)  # the fetch below is waiting by then (a late produce only makes it not wait)
                resp = p.request(0, 9, produce_body(topic, 0, build_batch([(None, b"late", [])])))
                assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
                produced.set()

        th = threading.Thread(target=produce)
        th.start()
        t0 = time.monotonic()
        r = fetch(1, 20_000)
        took = time.monotonic() - t0
        th.join(30)
        assert produced.is_set()
        part = r["responses"][0]["partitions"][0]
        assert part["acquired_records"] == [{"first_offset": 0, "last_offset": 0, "delivery_count": 1}], r
        assert took < 10, took  # answered when the record came, long before MaxWaitMs


@pytest.mark.integration
def test_share_fetch_answers_batches_across_segments_by_sendfile(broker_factory: Any) -> None:
    """A ShareFetch whose acquired batches lie in three 1 MiB segments answers them whole, in order, CRCs intact
    (the file regions of each segment sent one after the other), with the values produced."""
    broker = broker_factory({"share.auto.offset.reset": "earliest"})  # (max.record.locks 2000: the window)
    with RawClient(broker.port, timeout=30) as c:
        topic = new_topic("share-segs")
        r = c.request(19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                          "configs": [{"name": "segment.bytes", "value": str(1 << 20)}]}],
                              "timeout_ms": 10000})
        assert r["topics"][0]["error_code"] == 0, r
        per, batches = 100, 20  # 2000 records of 1400 B (~2.7 MiB): three segments
        for i in range(batches):
            body = build_batch([(None, f"{i * per + j:08d}".encode() + b"x" * 1392, []) for j in range(per)])
            resp = c.request(0, 9, produce_body(topic, 0, body))
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        tid, group, member = _join(c, topic, "ssegs")
        r = c.request(78, 1, {"group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait_ms": 0,
                              "min_bytes": 1, "max_bytes": 50 << 20, "max_records": per * batches,
                              "batch_size": per * batches,
                              "topics": [{"topic_id": tid, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": []}]}],
                              "forgotten_topics_data": []})
        part = r["responses"][0]["partitions"][0]
        assert part["error_code"] == 0, part
        assert part["acquired_records"] == [{"first_offset": 0, "last_offset": per * batches - 1,
                                             "delivery_count": 1}]
        values = [rec.value for _, _, recs in decode_batches(part["records"]) for rec in recs]  # (CRCs checked)
        assert values == [f"{k:08d}".encode() + b"x" * 1392 for k in range(per * batches)]
