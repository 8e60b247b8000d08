"""Replica fetchers: one per source broker (Kafka's ``ReplicaFetcherThread``/``AbstractFetcherThread``).

A follower partition is handed to the fetcher of its leader (``ReplicaFetcherManager.add``) for one leader
term and taken away on the next role change (``remove``). Each fetcher is one task on the event loop with one
connection to its leader; a round is

1. **truncation** of every partition marked *truncating*, all in one OffsetForLeaderEpoch request (KIP-101 /
   KIP-279: ask again with the epoch below until both logs agree). Only logs without any leader epoch, or
   every log with ``tidelog.replica.truncate.on.fetch=false``, start a term truncating; a partition whose
   append failed starts its term over this way;
2. **one Fetch** for every partition that is neither truncating nor backing off, in an incremental fetch
   session (KIP-227, as Kafka's replica fetchers use them): the first request of a connection is a full one
   (session epoch 0) and opens the session; later ones list only the partitions whose fetch state changed
   (offset, leader epoch, last fetched epoch, log start offset) and forget those not fetched now, and the
   leader answers only the partitions with news (records, an error, a diverging epoch, a new HW, LSO or log
   start offset). A session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) starts over with a
   full request at once; a leader that opens no session (id 0) gets full requests. Each partition has its own
   fetch offset, ``last_fetched_epoch`` (KIP-320) and ``replica.fetch.max.bytes``; ``replica.fetch.response.max.bytes``
   bounds the response, ``replica.fetch.wait.max.ms`` / ``replica.fetch.min.bytes`` the leader's long poll;
3. each partition of the answer is handled on its own: records appended (``append_as_follower``), the HW
   moved, a ``diverging_epoch`` truncated; a partition error only backs that partition off
   (``replica.fetch.backoff.ms``) while the others keep fetching. A connection failure backs the whole fetcher
   off and reconnects. Records that fail their check (a CRC mismatch, a malformed batch: e.g. a bit flipped on
   the way) are not appended at all, since every batch of the answer is checked before the first is written;
   as Kafka's ``AbstractFetcherThread`` does with ``CorruptRecordException``, the partition is only backed off
   and fetched again from the same offset (no truncation), and the fetcher counts it
   (``tidelog_replica_fetcher_invalid_records_total``).

A partition added while a Fetch is long-polling (a new leader after a failover) does not wait out
``replica.fetch.wait.max.ms``: the fetch in flight is abandoned (its connection closed, the answer would only
be late) and the next round includes the new partition at once. Kafka's fetcher waits here; abandoning the
poll keeps a failover's first acknowledged ``acks=all`` produce from waiting for it.

``num.replica.fetchers`` fetchers per source broker; a partition goes to ``hash(topic, partition) % n``.
A fetcher left without partitions stops and closes its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from dataclasses import dataclass
from typing import Any

from tidelog.broker.fetch_session import FollowerSessionState
from tidelog.cluster.peer import Peer
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.records.errors import RecordError

log = logging.getLogger("tidelog.cluster.fetcher")

FETCH, OFFSET_FOR_LEADER_EPOCH = int(ApiKey.FETCH), int(ApiKey.OFFSET_FOR_LEADER_EPOCH)
FETCH_VERSION, OFFSET_FOR_LEADER_EPOCH_VERSION = 12, 4
OFFSET_OUT_OF_RANGE = ErrorCode.OFFSET_OUT_OF_RANGE
NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER
_SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})
UNKNOWN_LEADER_EPOCH = ErrorCode.UNKNOWN_LEADER_EPOCH  # 75 (this was 76, UNSUPPORTED_COMPRESSION_TYPE)
# the leader has not seen the new term in ZooKeeper yet (its watch is a few ms behind ours): retry soon, doubling
# from this up to replica.fetch.backoff.ms, instead of waiting the full backoff after every failover
_LEADER_BEHIND = frozenset({NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH})
_FIRST_RETRY_S = 0.01
_MAX_TRUNCATION_ROUNDS = 1000


@dataclass(slots=True, eq=False)
class FetchState:
    """One partition in a fetcher, for one leader term (``epoch``)."""

    replica: Any  # ZkReplicaManager's Replica
    epoch: int
    truncating: bool
    ask_epoch: int | None = None  # OffsetForLeaderEpoch: the epoch to ask about next (None: our latest)
    truncation_rounds: int = 0
    retry_at: float = 0.0  # monotonic time before which the partition is not fetched (after an error)
    leader_behind: int = 0  # answers in a row saying the leader does not know this term yet


def latest_epoch(plog: Any) -> int:
    cache = plog.epoch_cache
    latest = cache.latest_epoch() if cache is not None else None
    return -1 if latest is None else latest


class ReplicaFetcher:
    """Fetches every partition this broker follows from one source broker (one ``fetcher_id`` of them)."""

    def __init__(self, replica_manager: Any, source: int, fetcher_id: int) -> None:
        self.replica_manager = replica_manager
        self.source = source
        self.fetcher_id = fetcher_id
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._wake = asyncio.Event()  # partitions added (or the fetcher stopped)
        self._added = False
        self._polling = False  # a Fetch is in flight (a new partition interrupts it)
        self._interrupted = False
        self._peer: Any = None
        self._stopped = False
        self.task: asyncio.Task | None = None
        self.rounds = 0  # Fetch requests sent (tests and metrics)
        self.empty_rounds = 0  # answers that carried no records for any partition (issue 30: is the fetcher spinning?)
        self.session = FollowerSessionState()  # KIP-227 (reset with the connection)

    # -- membership (called on the loop by ReplicaFetcherManager) --------------------------------------------

    def add(self, r: Any, epoch: int, truncating: bool) -> None:
        self.partitions[r.tp] = FetchState(r, epoch, truncating)
        self._added = True
        self._wake.set()
        if self._polling and not self._interrupted and self.task is not None:
            self._interrupted = True  # give up the long poll in flight: the next Fetch carries this partition
            self.task.cancel()
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source}")

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)

    def stop(self) -> None:
        self._stopped = True
        if self.task is not None:
            self.task.cancel()
        self._close()

    # -- the loop --------------------------------------------------------------------------------------------

    def _close(self) -> None:
        self.session.reset()
        if self._peer is not None:
            self._peer.close()
            self._peer = None

    async def _connect(self) -> Any:
        if self._peer is None:
            info = await self.replica_manager.leader_endpoint(self.source)
            security = self.replica_manager.peer_security  # the inter-broker listener's TLS/SASL, if any
            host, port = info.endpoint(security.listener) if security.protocol != "PLAINTEXT" else (info.host, info.port)
            self._peer = Peer(host, port, f"tidelog-replica-{self.replica_manager.node_id}",
                              security if security.protocol != "PLAINTEXT" else None)
        return self._peer

    async def _run(self) -> None:
        backoff = self.replica_manager.fetch_backoff_s
        try:
            while not self._stopped and not self.replica_manager.stopping:
                if not self.partitions:
                    return  # the manager drops idle fetchers; a later add starts a new task
                self._added = False
                self._wake.clear()
                now = time.monotonic()
                try:
                    peer = await self._connect()
                    if any(st.truncating and st.retry_at <= now for st in self.partitions.values()):
                        await self._truncate(peer)
                        if self._added:
                            continue  # include what was added meanwhile (truncating it first if needed)
                    ready = [st for st in self.partitions.values() if not st.truncating and st.retry_at <= now]
                    if ready:
                        await self._fetch(peer, ready)
                    else:
                        await self._idle(now)
                except asyncio.CancelledError:
                    if not self._interrupted or self._stopped:
                        raise
                    self._interrupted = False
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()  # only the Fetch was cancelled, not the fetcher
                    self._close()  # the answer to the abandoned request would arrive on this connection
                    continue
                except (TimeoutError, OSError, ConnectionError, asyncio.IncompleteReadError, _FetchError) as exc:
                    log.info("replica fetch failed; backing off", extra={"kv": {
                        "leader": self.source, "partitions": len(self.partitions), "error": repr(exc)}})
                    self._close()
                    await self._sleep(backoff)
        finally:
            self._close()
            if self.task is asyncio.current_task():
                self.task = None  # the next add starts a new task

    async def _idle(self, now: float) -> None:
        """Nothing to fetch now: wait for the first backoff to end or for a partition to be added."""
        waits = [st.retry_at - now for st in self.partitions.values()]
        await self._sleep(max(0.0, min(waits, default=self.replica_manager.fetch_backoff_s)))

    async def _sleep(self, seconds: float) -> None:
        """``replica.fetch.backoff.ms``-style waits, cut short when partitions are added."""
        if self._added:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    # -- truncation ------------------------------------------------------------------------------------------

    async def _truncate(self, peer: Any) -> None:
        """One OffsetForLeaderEpoch round for every partition marked truncating (KIP-101/KIP-279)."""
        b = self.replica_manager
        asked: dict[tuple[str, int], tuple[FetchState, int]] = {}
        topics: dict[str, list[dict]] = {}
        now = time.monotonic()
        for tp, st in self.partitions.items():
            if not st.truncating or st.retry_at > now:
                continue
            plog = st.replica.log
            if plog.failed is not None:  # its log directory failed: nothing to truncate (the replica is removed)
                st.truncating = False
                self._back_off(st, "log directory failed")
                continue
            latest = latest_epoch(plog)
            if plog.log_end_offset == 0 or latest < 0:
                # empty, or no epochs at all (the pre-KIP-101 rule is all there is): no request needed
                if plog.log_end_offset:
                    b.truncate_log(st.replica, min(plog.high_watermark, plog.log_end_offset), "high_watermark", -1)
                st.truncating = False
                continue
            requested = latest if st.ask_epoch is None else st.ask_epoch
            asked[tp] = (st, requested)
            topics.setdefault(tp[0], []).append(
                {"partition": tp[1], "current_leader_epoch": st.epoch, "leader_epoch": requested})
        if not asked:
            return
        body = {"replica_id": b.node_id,
                "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()]}
        resp = await peer.request(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, body, timeout=30.0)
        for t in resp.get("topics") or ():
            for part in t.get("partitions") or ():
                tp = (t.get("topic"), part.get("partition"))
                entry = asked.get(tp)
                if entry is None or self.partitions.get(tp) is not entry[0]:
                    continue  # removed or re-added meanwhile: the new term decides
                st = entry[0]
                r = st.replica
                if r.is_leader or r.leader_epoch != st.epoch:
                    continue
                if part.get("error_code"):
                    self._back_off(st, f"OffsetForLeaderEpoch error {part['error_code']}", part["error_code"])
                    continue
                st.leader_behind = 0
                target, ask_next = b.truncation_point(r.log, part["leader_epoch"], part["end_offset"])
                b.truncate_log(r, target, "offset_for_leader_epoch", part["leader_epoch"])
                st.truncation_rounds += 1
                if ask_next is None:
                    st.truncating, st.ask_epoch, st.truncation_rounds = False, None, 0
                elif st.truncation_rounds >= _MAX_TRUNCATION_ROUNDS:
                    st.ask_epoch, st.truncation_rounds = None, 0
                    self._back_off(st, "OffsetForLeaderEpoch did not converge")
                else:
                    st.ask_epoch = ask_next

    # -- fetch -----------------------------------------------------------------------------------------------

    async def _fetch(self, peer: Any, ready: list[FetchState]) -> None:
        b = self.replica_manager
        sent: dict[tuple[str, int], tuple[FetchState, int]] = {}
        wanted: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
        max_bytes = b.fetch_max_bytes
        truncate_on_fetch = b.truncate_on_fetch
        for st in ready:
            plog = st.replica.log
            offset = plog.log_end_offset
            tp = st.replica.tp
            sent[tp] = (st, offset)
            wanted[tp] = (offset, st.epoch, latest_epoch(plog) if truncate_on_fetch else -1, plog.log_start_offset,
                          max_bytes)
        # KIP-227: a full request opens a session; then only the partitions whose fetch state changed are listed
        session = self.session
        session_id, session_epoch, listed, forgotten = session.build(wanted)
        topics: dict[str, list[dict]] = {}
        for tp in listed:
            offset, epoch, last_fetched, log_start, part_max = wanted[tp]
            topics.setdefault(tp[0], []).append({
                "partition": tp[1], "current_leader_epoch": epoch, "fetch_offset": offset,
                "last_fetched_epoch": last_fetched, "log_start_offset": log_start, "partition_max_bytes": part_max})
        gone: dict[str, list[int]] = {}
        for tp in forgotten:
            gone.setdefault(tp[0], []).append(tp[1])
        body = {
            "replica_id": b.node_id, "max_wait_ms": b.fetch_wait_ms, "min_bytes": b.fetch_min_bytes,
            "max_bytes": b.fetch_response_max_bytes, "isolation_level": 0, "session_id": session_id,
            "session_epoch": session_epoch,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in gone.items()], "rack_id": "",
        }
        self.rounds += 1
        self._polling = True
        try:
            resp = await peer.request(FETCH, FETCH_VERSION, body, timeout=30 + b.fetch_wait_ms / 1000)
        except BaseException:
            session.reset()  # the answer is lost (or will arrive on a closed connection): start over
            raise
        finally:
            self._polling = False
        code = resp.get("error_code") or 0
        session.answered(code, resp.get("session_id") or 0)
        if code in _SESSION_ERRORS:  # the leader lost or refused the session: a full request at once
            log.info("fetch session reset by the leader", extra={"kv": {"leader": self.source, "error": code}})
            return
        if code:
            raise _FetchError(f"fetch error {code}")
        carried = False
        for t in resp.get("responses") or ():
            name = t.get("topic")
            for part in t.get("partitions") or ():
                tp = (name, part.get("partition_index"))
                sent_entry = sent.get(tp)
                if sent_entry is None or self.partitions.get(tp) is not sent_entry[0]:
                    continue  # removed (or a new term) while the answer was on its way
                st, offset = sent_entry
                if part.get("records"):
                    carried = True
                try:
                    self._process(st, offset, part)
                except RecordError as exc:
                    # Kafka: "Found invalid messages during fetch"; nothing of the answer was appended (every batch
                    # is checked first): fetch the same offset again after the backoff, no truncation
                    self.replica_manager.broker.metrics.replica_fetch_invalid_records.inc()
                    log.error("found invalid records during fetch; fetching them again", extra={"kv": {
                        "topic": tp[0], "partition": tp[1], "leader": self.source, "offset": offset,
                        "error": str(exc)}})
                    self._back_off(st, repr(exc))
                except Exception as exc:  # e.g. a batch that does not fit the log: start this term over
                    log.warning("replica fetch of a partition failed; truncating and fetching again",
                                exc_info=True, extra={"kv": {"topic": tp[0], "partition": tp[1],
                                                             "leader": self.source, "error": repr(exc)}})
                    st.truncating, st.ask_epoch = True, None
                    self._back_off(st, repr(exc))
        if not carried:
            self.empty_rounds += 1

    def _process(self, st: FetchState, fetch_offset: int, part: dict) -> None:
        """One partition of a Fetch answer."""
        b = self.replica_manager
        r = st.replica
        plog = r.log
        if r.is_leader or r.leader_epoch != st.epoch:
            self._back_off(st, "stale term")  # the role changed: the next state delivery moves it
            return
        if plog.failed is not None:  # its log directory failed: the controller takes it out of the ISR
            self._back_off(st, "log directory failed")
            return
        if plog.log_end_offset != fetch_offset:
            return  # a stale answer: the log changed while it was on its way
        code = part.get("error_code", 0)
        if code:
            if code == OFFSET_OUT_OF_RANGE:
                leader_start = part.get("log_start_offset", -1)
                if 0 <= plog.log_end_offset < leader_start:
                    # the leader deleted what we would fetch next (retention): start at its log start
                    log.info("fetch offset below the leader's log start; starting over there", extra={"kv": {
                        "topic": r.tp[0], "partition": r.tp[1], "leo": plog.log_end_offset,
                        "log_start_offset": leader_start}})
                    plog.truncate_fully_and_start_at(leader_start)
                else:  # our log ran past the leader's: agree on it again
                    st.truncating, st.ask_epoch = True, None
            self._back_off(st, f"fetch partition error {code}", code)
            return
        st.leader_behind = 0
        diverging = part.get("diverging_epoch") or {}
        if diverging.get("epoch", -1) >= 0:  # KIP-320: the leader says our log diverges from its own
            target, _ask_next = b.truncation_point(plog, diverging["epoch"], diverging.get("end_offset", -1))
            # when more remains to find (_ask_next), the next Fetch carries our new latest epoch and the leader
            # answers again: the fetch loop is the KIP-279 loop
            b.truncate_log(r, target, "diverging_epoch", diverging["epoch"])
        else:
            records = part.get("records")
            if records:
                plog.append_as_follower(records, infos=False)
        hw = min(part.get("high_watermark", -1), plog.log_end_offset)
        if hw > plog.high_watermark:
            plog.high_watermark = hw

    def _back_off(self, st: FetchState, reason: str, code: int = 0) -> None:
        delay = self.replica_manager.fetch_backoff_s  # replica.fetch.backoff.ms
        if code in _LEADER_BEHIND:
            delay = min(delay, _FIRST_RETRY_S * (1 << min(st.leader_behind, 20)))
            st.leader_behind += 1
        st.retry_at = time.monotonic() + delay
        log.debug("replica fetch error", extra={"kv": {"topic": st.replica.tp[0], "partition": st.replica.tp[1],
                                                       "leader": self.source, "error": reason}})


class ReplicaFetcherManager:
    """Which fetcher follows which partition (Kafka's ``AbstractFetcherManager``)."""

    def __init__(self, replica_manager: Any, num_fetchers: int) -> None:
        self.replica_manager = replica_manager
        self.num_fetchers = max(1, num_fetchers)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._fetching: dict[tuple[str, int], tuple[int, int]] = {}

    def fetcher_id(self, tp: tuple[str, int]) -> int:
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.num_fetchers

    def add(self, r: Any, leader: int, epoch: int) -> None:
        """Follow ``r`` from ``leader`` for the term ``epoch`` (a previous term of it is dropped)."""
        self.remove(r.tp)
        key = (leader, self.fetcher_id(r.tp))
        fetcher = self.fetchers.get(key)
        if fetcher is None or fetcher._stopped:
            fetcher = self.fetchers[key] = ReplicaFetcher(self.replica_manager, leader, key[1])
        truncating = not self.replica_manager.truncate_on_fetch or latest_epoch(r.log) < 0
        fetcher.add(r, epoch, truncating)
        self._fetching[r.tp] = key

    def remove(self, tp: tuple[str, int]) -> None:
        key = self._fetching.pop(tp, None)
        if key is None:
            return
        fetcher = self.fetchers.get(key)
        if fetcher is not None:
            fetcher.remove(tp)
            if not fetcher.partitions:
                fetcher.stop()
                del self.fetchers[key]

    def is_fetching(self, tp: tuple[str, int]) -> bool:
        return tp in self._fetching

    def shutdown(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        self._fetching.clear()


class _FetchError(Exception):
    """The whole request failed (a top-level error code): back the fetcher off."""
