"""The read service (broker/fetch.py): one read path whose max offset depends on who fetches (a consumer up
to the HW, read_committed up to the LSO, a follower up to the LEO), with Kafka's byte limits, KIP-74's first
batch, the follower hooks and the long poll."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tidelog.broker import fetch as fetch_mod
from tidelog.broker.errors import PartitionError
from tidelog.broker.fetch import (
    READ_COMMITTED,
    FetchIsolation,
    FetchParams,
    FetchPartition,
    ReadService,
    last_stable_offset,
    max_offset,
    response_entry,
)
from tidelog.broker.handlers.list_offsets import _list_offset
from tidelog.broker.purgatory import Purgatory
from tidelog.errors import ErrorCode
from tidelog.records.batch import build_batch
from tidelog.records.header import iter_batch_headers
from tidelog.storage.config import LogConfig
from tidelog.storage.log import PartitionLog
from tidelog.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000
BATCHES, PER = 10, 3  # offsets 0..29, batches [0-2], [3-5], ...
HW = 15  # five whole batches committed, five more only on the leader


def _open(path: Path, name: str) -> PartitionLog:
    lg = PartitionLog.open(path / f"{name}-0", LogConfig(), now_ms=NOW)
    for i in range(BATCHES):
        recs = [(b"k%d" % j, b"v" * 20, (), NOW + i) for j in range(PER)]
        lg.append_as_leader(build_batch(recs), now_ms=NOW + i)
    lg.high_watermark = HW
    return lg


class Followers:
    """Stand-in for the cluster's hooks: broker 1 follows; its fetch offset becomes the HW."""

    def __init__(self, logs: dict) -> None:
        self.logs = logs
        self.calls: list[tuple[tuple[str, int], int, int]] = []

    def check_follower(self, tp: tuple[str, int], replica_id: int) -> None:
        if replica_id != 1:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def update_follower_fetch_state(self, tp: tuple[str, int], replica_id: int, fetch_offset: int) -> None:
        self.calls.append((tp, replica_id, fetch_offset))
        self.logs[tp].high_watermark = max(self.logs[tp].high_watermark, fetch_offset)


@pytest.fixture
def logs(tmp_path: Path) -> Any:
    out = {("a", 0): _open(tmp_path, "a"), ("b", 0): _open(tmp_path, "b")}
    yield out
    for lg in out.values():
        lg.close()


def _service(logs: dict, followers: Any = None) -> ReadService:
    def leader_log(name: str, index: int) -> PartitionLog:
        lg = logs.get((name, index))
        if lg is None:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return lg

    return ReadService(leader_log, lambda name, index: 0, Purgatory(), None, followers)


def _part(name: str, offset: int, max_bytes: int = 1 << 20, **kw: int) -> FetchPartition:
    return FetchPartition(name, bytes(16), 0, offset, max_bytes, response_entry(0), **kw)


def _offsets(records: Any) -> list[int]:
    """Last offset of every batch in a response entry's records."""
    data = bytes(records) if isinstance(records, (bytes, bytearray)) else b"".join(
        c.read_bytes() for c in records.chunks)
    return [h.last_offset for _, h in iter_batch_headers(data)]


def test_max_offset_is_chosen_by_who_fetches(logs: dict) -> None:
    lg = logs[("a", 0)]
    assert lg.log_end_offset == BATCHES * PER and lg.high_watermark == HW
    assert FetchParams(replica_id=-1).isolation is FetchIsolation.HIGH_WATERMARK
    assert FetchParams(replica_id=-1, isolation_level=READ_COMMITTED).isolation is FetchIsolation.TXN_COMMITTED
    assert FetchParams(replica_id=2, isolation_level=READ_COMMITTED).isolation is FetchIsolation.LOG_END
    assert max_offset(lg, FetchIsolation.HIGH_WATERMARK) == HW
    assert max_offset(lg, FetchIsolation.TXN_COMMITTED) == last_stable_offset(lg) == HW  # no transactions yet
    assert max_offset(lg, FetchIsolation.LOG_END) == BATCHES * PER


def test_consumer_reads_up_to_the_hw_and_a_follower_up_to_the_leo(logs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    followers = Followers(logs)
    svc = _service(logs, followers)
    for isolation in (0, READ_COMMITTED):
        fp = _part("a", 0)
        total, now = svc.read_from_log(FetchParams(isolation_level=isolation), [fp])
        assert not now and fp.entry["error_code"] == 0
        assert _offsets(fp.entry["records"]) == [2, 5, 8, 11, 14]  # nothing at or past the HW
        assert total == fp.size == fp.entry["records"].size
        assert fp.entry["high_watermark"] == fp.entry["last_stable_offset"] == HW
    # at the HW (below the LEO): nothing yet, no error; past the LEO: OFFSET_OUT_OF_RANGE
    fp = _part("a", HW)
    assert svc.read_from_log(FetchParams(), [fp]) == (0, False) and fp.entry["records"] == b""
    fp = _part("a", BATCHES * PER + 1)
    assert svc.read_from_log(FetchParams(), [fp]) == (0, True)
    assert fp.entry["error_code"] == 1 and fp.entry["log_start_offset"] == 0
    assert not followers.calls

    # a follower reads to the LEO; its fetch offset is recorded after the read, and the HW it moved is answered
    fp = _part("a", 3)
    total, now = svc.read_from_log(FetchParams(replica_id=1), [fp])
    assert not now and _offsets(fp.entry["records"]) == [5, 8, 11, 14, 17, 20, 23, 26, 29]
    assert isinstance(fp.entry["records"], bytes)  # small follower answers are copied in, not sendfile regions
    assert followers.calls == [(("a", 0), 1, 3)]
    # larger ones go out as a consumer's do, file regions for sendfile (issue 30)
    monkeypatch.setattr(fetch_mod, "FOLLOWER_INLINE_RECORDS_MAX", fp.size - 1)
    big = _part("a", 3)
    svc.read_from_log(FetchParams(replica_id=1), [big], from_purgatory=True)
    assert not isinstance(big.entry["records"], bytes) and big.entry["records"].size == fp.size
    assert _offsets(big.entry["records"]) == _offsets(fp.entry["records"])
    fp = _part("a", 27)
    svc.read_from_log(FetchParams(replica_id=1), [fp])
    assert followers.calls[-1] == (("a", 0), 1, 27) and fp.entry["high_watermark"] == 27
    # re-read after a long poll: the follower's state is not recorded twice
    svc.read_from_log(FetchParams(replica_id=1), [_part("a", 27)], from_purgatory=True)
    assert len(followers.calls) == 2
    # a broker that is no replica, and a follower fetch where there is no replication at all
    fp = _part("a", 0)
    assert svc.read_from_log(FetchParams(replica_id=2), [fp]) == (0, True) and fp.entry["error_code"] == 6
    fp = _part("a", 0)
    assert _service(logs).read_from_log(FetchParams(replica_id=1), [fp]) == (0, True)
    assert fp.entry["error_code"] == 6 and fp.entry["records"] == b""


def test_byte_limits_and_the_first_batch(logs: dict) -> None:
    svc = _service(logs)
    batch = _part("a", 0)
    svc.read_from_log(FetchParams(), [batch])
    one = batch.size // 5  # every batch has the same size
    # partition_max_bytes below one batch: the first partition with data still gets one whole batch (KIP-74),
    # the next gets nothing; Fetch v0-2 (hard limit) gets nothing at all
    a, b = _part("a", 0, max_bytes=1), _part("b", 0, max_bytes=1)
    assert svc.read_from_log(FetchParams(), [a, b])[0] == one
    assert _offsets(a.entry["records"]) == [2] and b.entry["records"] == b"" and b.entry["error_code"] == 0
    a, b = _part("a", 0, max_bytes=1), _part("b", 0, max_bytes=1)
    assert svc.read_from_log(FetchParams(hard_max_bytes_limit=True), [a, b])[0] == 0
    assert a.entry["records"] == b"" == b.entry["records"]
    # the response's max_bytes: whole batches only, what is left goes to the next partition
    a, b = _part("a", 0), _part("b", 0)
    assert svc.read_from_log(FetchParams(max_bytes=2 * one + one // 2), [a, b])[0] == 2 * one
    assert _offsets(a.entry["records"]) == [2, 5] and b.entry["records"] == b""
    a, b = _part("a", 9), _part("b", 0)
    svc.read_from_log(FetchParams(max_bytes=3 * one), [a, b])
    assert _offsets(a.entry["records"]) == [11, 14] and _offsets(b.entry["records"]) == [2]
    # a follower's partition_max_bytes bounds it the same way, still up to the LEO
    f = _part("a", 15, max_bytes=2 * one)
    _service(logs, Followers(logs)).read_from_log(FetchParams(replica_id=1), [f])
    assert _offsets(f.entry["records"]) == [17, 20]


def test_leader_epoch_and_unknown_partition(logs: dict) -> None:
    svc = _service(logs)
    parts = [_part("a", 0, current_leader_epoch=1), _part("a", 0, current_leader_epoch=0), _part("zz", 0)]
    svc.read_from_log(FetchParams(), parts)
    assert [p.entry["error_code"] for p in parts] == [75, 0, 3]  # UNKNOWN_LEADER_EPOCH, -, UNKNOWN_TOPIC_OR_PARTITION


def test_long_poll_waits_for_the_max_offset_of_the_fetcher(logs: dict) -> None:
    """A consumer waiting at the HW is not woken by an append the HW does not cover; a follower waiting at the
    LEO is."""
    lg = logs[("a", 0)]

    async def main() -> None:
        followers = Followers(logs)
        svc = _service(logs, followers)
        lg.high_watermark = lg.log_end_offset
        end = lg.log_end_offset
        consumer = _part("a", end)
        follower = _part("a", end)
        c = asyncio.ensure_future(svc.fetch_messages(FetchParams(max_wait_ms=5000), [consumer]))
        f = asyncio.ensure_future(svc.fetch_messages(FetchParams(replica_id=1, max_wait_ms=5000), [follower]))
        await asyncio.sleep(0.01)
        assert svc.purgatory.fetch.watched(("a", 0)) == 2
        lg.append_as_leader(build_batch([(b"k", b"v", (), NOW)]), now_ms=NOW)  # LEO moves, HW does not
        svc.purgatory.check_and_complete(("a", 0))
        assert await asyncio.wait_for(f, 1) > 0 and _offsets(follower.entry["records"]) == [end]
        await asyncio.sleep(0.01)
        assert not c.done()
        lg.high_watermark = lg.log_end_offset
        svc.purgatory.check_and_complete(("a", 0))
        assert await asyncio.wait_for(c, 1) > 0 and _offsets(consumer.entry["records"]) == [end]
        assert followers.calls == [(("a", 0), 1, end)]  # once, at the first read

    asyncio.run(main())


def _txn_log(path: Path) -> PartitionLog:
    """Offsets: 0-1 plain; 2-3 pid 1 (aborted at 6); 4-5 pid 2 (committed at 7); 8-9 pid 1 (open)."""
    d = path / "t-0"
    lg = PartitionLog.open(d, LogConfig(), producer_state=ProducerStateManager(d), now_ms=NOW)

    def txn(pid: int, seq: int) -> bytes:
        return build_batch([(b"k", b"v", (), NOW), (b"k", b"w", (), NOW)], producer_id=pid, producer_epoch=0,
                           base_sequence=seq, is_transactional=True)

    lg.append_as_leader(build_batch([(b"a", b"b", (), NOW), (b"c", b"d", (), NOW)]), now_ms=NOW)
    lg.append_as_leader(txn(1, 0), now_ms=NOW)
    lg.append_as_leader(txn(2, 0), now_ms=NOW)
    lg.append_txn_marker(1, 0, 0, commit=False, now_ms=NOW)
    lg.append_txn_marker(2, 0, 0, commit=True, now_ms=NOW)
    lg.append_as_leader(txn(1, 2), now_ms=NOW)
    lg.high_watermark = lg.log_end_offset
    return lg


def test_read_committed_reads_up_to_the_lso_with_the_aborted_transactions(tmp_path: Path) -> None:
    lg = _txn_log(tmp_path)
    try:
        svc = _service({("t", 0): lg})
        assert lg.high_watermark == 10 and last_stable_offset(lg) == 8
        fp = FetchPartition("t", bytes(16), 0, 0, 1 << 20, response_entry(0, READ_COMMITTED))
        svc.read_from_log(FetchParams(isolation_level=READ_COMMITTED), [fp])
        assert _offsets(fp.entry["records"]) == [1, 3, 5, 6, 7]  # nothing of the open transaction
        assert fp.entry["last_stable_offset"] == 8 and fp.entry["high_watermark"] == 10
        assert fp.entry["aborted_transactions"] == [{"producer_id": 1, "first_offset": 2}]
        # a read past the aborted transaction gets none; one at the LSO reads nothing
        fp = FetchPartition("t", bytes(16), 0, 7, 1 << 20, response_entry(0, READ_COMMITTED))
        svc.read_from_log(FetchParams(isolation_level=READ_COMMITTED), [fp])
        assert _offsets(fp.entry["records"]) == [7] and fp.entry["aborted_transactions"] == []
        fp = FetchPartition("t", bytes(16), 0, 8, 1 << 20, response_entry(0, READ_COMMITTED))
        svc.read_from_log(FetchParams(isolation_level=READ_COMMITTED), [fp])
        assert fp.entry["records"] == b"" and fp.entry["aborted_transactions"] == []
        # a read bounded by size: only the aborted transactions overlapping what it returned
        fp = FetchPartition("t", bytes(16), 0, 0, 1, response_entry(0, READ_COMMITTED))
        svc.read_from_log(FetchParams(isolation_level=READ_COMMITTED), [fp])
        assert _offsets(fp.entry["records"]) == [1] and fp.entry["aborted_transactions"] == []
        # read_uncommitted: up to the HW, no aborted list, the LSO still answered
        fp = _part("t", 0)
        svc.read_from_log(FetchParams(), [fp])
        assert _offsets(fp.entry["records"])[-1] == 9 and fp.entry["aborted_transactions"] is None
        assert fp.entry["last_stable_offset"] == 8
        # the long poll's probe counts only what read_committed may read
        status = type("S", (), {"tp": ("t", 0), "fetch_offset": 8, "max_bytes": 1 << 20, "current_leader_epoch": -1})
        assert svc.probe(FetchParams(isolation_level=READ_COMMITTED, min_bytes=1))(status) == 0
        assert svc.probe(FetchParams(min_bytes=1))(status) > 0
        lg.append_txn_marker(1, 0, 0, commit=True, now_ms=NOW)
        lg.high_watermark = lg.log_end_offset
        assert svc.probe(FetchParams(isolation_level=READ_COMMITTED, min_bytes=1))(status) > 0
    finally:
        lg.close()


def test_list_offsets_latest_read_committed_answers_the_lso(tmp_path: Path) -> None:
    lg = _txn_log(tmp_path)
    try:
        broker = type("B", (), {"leader_log": staticmethod(lambda name, index: lg)})()
        assert _list_offset(broker, "t", 0, -1, 1, -1) == (0, 8, -1)
        assert _list_offset(broker, "t", 0, -1, 0, -1) == (0, 10, -1)
    finally:
        lg.close()
