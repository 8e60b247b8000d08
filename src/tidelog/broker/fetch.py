"""The read service: the one Fetch read path, for consumers and followers alike.

After Kafka's ``ReplicaManager.fetchMessages`` / ``readFromLog`` with ``FetchParams``. The Fetch handler
(:mod:`tidelog.broker.handlers.fetch_handler`) parses the request (and the consumer's incremental fetch session) into
:class:`FetchParams` and one :class:`FetchPartition` per partition, each with its response entry built by
:func:`response_entry`, and awaits :meth:`ReadService.fetch_messages`; nothing else reads a log for a Fetch.

Who is fetching decides one thing, how far the read may go (:func:`max_offset`, Kafka's ``FetchIsolation``):

* a follower (``replica_id`` >= 0): the log end offset (LEO);
* a consumer with ``read_uncommitted``: the high watermark (HW);
* a consumer with ``read_committed``: the last stable offset, :func:`last_stable_offset` (the first offset of the
  oldest open transaction, or the HW), and the response's ``aborted_transactions`` for the range it returned
  (from the ``.txnindex`` files, Kafka's ``addAbortedTransactions``).

For every partition :meth:`ReadService.read_from_log` checks leadership and ``current_leader_epoch``, for a
follower that it is a replica (hook ``check_follower``) and, with ``last_fetched_epoch``, that its log does not
diverge (KIP-320: ``diverging_epoch`` instead of records), then the range (OFFSET_OUT_OF_RANGE), then reads whole
batches up to the max offset, bounded by ``partition_max_bytes`` and by what is left of the response's
``max_bytes``, the first batch of the response whole even when larger (KIP-74; not for Fetch v0-2). Records
stay file regions, sent with ``sendfile`` by the server, for consumers; a follower answer of at most
:data:`FOLLOWER_INLINE_RECORDS_MAX` (``replica.fetch.max.bytes``' default, so in practice every one) carries its
records copied in: one ``sendmsg`` and one push through the socket instead of header, ``sendfile`` and a
separate push of the few trailing bytes, which woke the follower a second time per answer (issue 30).
A follower's fetch then updates its fetch state on the leader (hook ``update_follower_fetch_state``: its LEO,
ISR expansion, the HW), once per request, after its read and before the entry's HW is filled in, so the
follower learns the HW its own fetch moved.

:meth:`ReadService.fetch_messages` answers at once when ``max_wait_ms`` <= 0, when ``min_bytes`` are read,
on any partition error or diverging epoch, or with no partitions (Kafka's rule); otherwise it waits in the
fetch purgatory (:class:`DelayedFetch`) with :meth:`ReadService.probe` as its check, then reads again with the
same validation (a leader epoch that moved meanwhile answers FENCED_LEADER_EPOCH, lost leadership
NOT_LEADER_OR_FOLLOWER) and without the follower hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from tidelog.broker.errors import PartitionError, error_of
from tidelog.broker.purgatory import DelayedFetch, FetchPartitionStatus, Purgatory
from tidelog.errors import ErrorCode
from tidelog.protocol.compiler import RecordsChunks
from tidelog.records.header import RECORD_BATCH_OVERHEAD
from tidelog.storage.log.partition_log import PartitionLog

if TYPE_CHECKING:
    from tidelog.broker.metrics import BrokerMetrics

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
MAX_INT32 = 0x7FFFFFFF
MIN_BATCH = RECORD_BATCH_OVERHEAD  # a v2 batch header: for the long poll, any available batch satisfies a min_bytes up to this
# a follower's records up to this size go out copied (one send), larger ones by sendfile like a consumer's. Was
# 16 KiB for a while (a loaded-machine A/B had the copy dearer); on a quiet machine the sendfile answer's 3-byte
# trailer, pushed as a segment of its own, woke each follower twice per answer: 1 MiB again halves the followers'
# wake-ups and lowers both sides' CPU per record (bench/README.md, "the leader's cost per follower round")
FOLLOWER_INLINE_RECORDS_MAX = 1 << 20


class FetchIsolation(Enum):
    """How far a fetch may read (Kafka's ``FetchIsolation``)."""

    LOG_END = "log_end"  # followers
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumers, read_committed


HIGH_WATERMARK = FetchIsolation.HIGH_WATERMARK
TXN_COMMITTED = FetchIsolation.TXN_COMMITTED


class FetchParams:
    """What a Fetch request asks for as a whole (Kafka's ``FetchParams``)."""

    __slots__ = ("hard_max_bytes_limit", "isolation", "isolation_level", "max_bytes", "max_wait_ms", "min_bytes",
                 "replica_id")

    def __init__(self, replica_id: int = -1, max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = MAX_INT32,
                 isolation_level: int = READ_UNCOMMITTED, hard_max_bytes_limit: bool = False) -> None:
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.hard_max_bytes_limit = hard_max_bytes_limit  # Fetch v0-2: no first batch beyond the limits (KIP-74)
        if replica_id >= 0:
            self.isolation = FetchIsolation.LOG_END
        elif isolation_level == READ_COMMITTED:
            self.isolation = FetchIsolation.TXN_COMMITTED
        else:
            self.isolation = FetchIsolation.HIGH_WATERMARK

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    def __repr__(self) -> str:
        return (f"FetchParams(replica_id={self.replica_id}, isolation={self.isolation.value}, "
                f"max_wait_ms={self.max_wait_ms}, min_bytes={self.min_bytes}, max_bytes={self.max_bytes})")


def response_entry(index: int, isolation_level: int = READ_UNCOMMITTED) -> dict:
    """A partition's Fetch response entry before it is read (the one builder, for every fetcher)."""
    return {
        "partition_index": index,
        "error_code": NONE,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": [] if isolation_level == READ_COMMITTED else None,
        "preferred_read_replica": -1,
        "records": b"",
    }


class FetchPartition:
    """One partition of a Fetch: what is asked (Kafka's ``FetchRequest.PartitionData``) and, once read, the
    answer: ``entry`` (the response entry) and ``size`` (record bytes read). ``error`` set before the read
    (e.g. UNKNOWN_TOPIC_ID while parsing) is answered as is."""

    __slots__ = ("current_leader_epoch", "entry", "error", "fetch_offset", "index", "last_fetched_epoch",
                 "max_bytes", "name", "size", "topic_id", "tp")

    def __init__(self, name: str | None, topic_id: bytes, index: int, fetch_offset: int, max_bytes: int,
                 entry: dict, current_leader_epoch: int = -1, last_fetched_epoch: int = -1) -> None:
        self.name = name
        self.topic_id = topic_id
        self.index = index
        self.tp = (name, index)
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        self.entry = entry
        self.error: int = NONE
        self.size = 0


class FollowerFetchHooks(Protocol):
    """What the leader side of replication does around a follower's read (cluster mode)."""

    def check_follower(self, tp: tuple[str, int], replica_id: int) -> None:
        """Raise PartitionError(NOT_LEADER_OR_FOLLOWER) unless ``replica_id`` is a replica of ``tp``."""

    def update_follower_fetch_state(self, tp: tuple[str, int], replica_id: int, fetch_offset: int) -> None:
        """The follower fetched from ``fetch_offset``: its LEO; may expand the ISR and move the HW."""


# ------------------------------------------------------------------------------------------------------------
# offsets


def last_stable_offset(plog: PartitionLog) -> int:
    """The partition's last stable offset, the one place the read path takes it from: min(first unstable offset,
    HW) (``PartitionLog.last_stable_offset``; the HW when the partition has no open transaction)."""
    return plog.last_stable_offset


def aborted_transactions(plog: PartitionLog, fetch_offset: int, upper_bound_offset: int) -> list[dict]:
    """The response's ``aborted_transactions`` for a read_committed read of [fetch_offset, upper_bound_offset)."""
    return [
        {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
        for txn in plog.collect_aborted_transactions(fetch_offset, upper_bound_offset)
    ]


def max_offset(plog: PartitionLog, isolation: FetchIsolation) -> int:
    """How far ``isolation`` may read in ``plog`` (exclusive): LEO, HW or LSO."""
    if isolation is FetchIsolation.HIGH_WATERMARK:
        return plog.high_watermark
    if isolation is FetchIsolation.LOG_END:
        return plog.log_end_offset
    return last_stable_offset(plog)


def diverging_epoch(plog: PartitionLog, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
    """KIP-320 on the leader: ``(epoch, end offset)`` of this log when a fetcher whose last batch has epoch
    ``last_fetched_epoch`` diverges from it at ``fetch_offset`` (the leader's end of that epoch is below the
    fetch offset, or the leader only knows an older epoch), else None. An epoch of -1: no epoch of ours at or
    below the fetcher's."""
    cache = plog.epoch_cache
    if last_fetched_epoch < 0 or cache is None:
        return None
    epoch, end = cache.end_offset_for(last_fetched_epoch, plog.log_end_offset)
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None


# ------------------------------------------------------------------------------------------------------------
# the service


class ReadService:
    """Reads partitions for a Fetch (consumer or follower) and long-polls in the fetch purgatory.

    ``leader_log(topic, partition)`` is the leadership check (raises PartitionError), ``leader_epoch(topic,
    partition)`` the current epoch; ``followers`` is set in cluster mode (without it a follower fetch is
    answered NOT_LEADER_OR_FOLLOWER)."""

    def __init__(self, leader_log: Callable[[str, int], PartitionLog], leader_epoch: Callable[[str, int], int],
                 purgatory: Purgatory, metrics: BrokerMetrics | None = None, followers: FollowerFetchHooks | None = None) -> None:
        self.leader_log = leader_log
        self.leader_epoch = leader_epoch
        self.purgatory = purgatory
        self.metrics = metrics
        self.followers = followers

    def _check_epoch(self, name: str, index: int, requested: int) -> None:
        """Kafka's check of ``current_leader_epoch`` (-1: not given) against the partition's epoch."""
        if requested >= 0:
            current = self.leader_epoch(name, index)
            if requested < current:
                raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH)
            if requested > current:
                raise PartitionError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def read_from_log(self, params: FetchParams, partitions: Iterable[FetchPartition], *,
                      from_purgatory: bool = False) -> tuple[int, bool]:
        """Fill every partition's ``entry`` with what it may read now. Returns (record bytes read, whether the
        answer must go out at once: a partition error or a diverging epoch)."""
        total = 0
        respond_now = False
        min_one = not params.hard_max_bytes_limit
        budget = params.max_bytes
        isolation = params.isolation
        follower = params.replica_id >= 0
        followers = self.followers
        leader_log = self.leader_log
        for fp in partitions:
            entry = fp.entry
            fp.size = 0
            if fp.error:
                entry["error_code"] = fp.error
                respond_now = True
                continue
            name = fp.name
            assert name is not None  # a partition named by an unknown topic id carries its error (fp.error)
            offset = fp.fetch_offset
            try:
                if follower and followers is None:
                    raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no replication on this broker")
                plog = leader_log(name, fp.index)
                if fp.current_leader_epoch >= 0:
                    self._check_epoch(name, fp.index, fp.current_leader_epoch)
                if follower:
                    followers.check_follower(fp.tp, params.replica_id)  # type: ignore[union-attr,arg-type]
                hw = plog.high_watermark
                log_start = plog.log_start_offset
                entry["high_watermark"] = hw
                entry["last_stable_offset"] = last_stable_offset(plog)
                entry["log_start_offset"] = log_start
                if fp.last_fetched_epoch >= 0:  # before the range check: a tail past our end learns where to cut
                    diverging = diverging_epoch(plog, fp.last_fetched_epoch, offset)
                    if diverging is not None:
                        if diverging[0] < 0:  # nothing to agree on: truncate through OffsetForLeaderEpoch
                            raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE, "no leader epoch at or below the fetcher's")
                        entry["error_code"] = NONE
                        entry["diverging_epoch"] = {"epoch": diverging[0], "end_offset": diverging[1]}
                        entry["records"] = b""
                        respond_now = True
                        continue
                leo = plog.log_end_offset
                if offset < log_start or offset > leo:
                    raise PartitionError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {offset} is out of range for {name}-{fp.index}: log start offset "
                        f"{log_start}, log end offset {leo}")
                # max_offset(plog, isolation), its two common cases inline
                end = hw if isolation is HIGH_WATERMARK else leo if follower else max_offset(plog, isolation)
                limit = min(fp.max_bytes, budget - total)
                if end <= offset or (limit <= 0 and not min_one):
                    entry["records"] = b""
                    if isolation is TXN_COMMITTED:
                        entry["aborted_transactions"] = []
                else:
                    info = plog.read(offset, max(limit, 0), max_offset=end, min_one_batch=min_one)
                    size = info.size
                    if isolation is TXN_COMMITTED:  # the aborted transactions of the range returned (Kafka: none
                        # when nothing was read)
                        entry["aborted_transactions"] = (
                            aborted_transactions(plog, offset, info.next_offset) if size else [])
                    if not size:
                        entry["records"] = b""
                    elif follower and size <= FOLLOWER_INLINE_RECORDS_MAX:
                        entry["records"] = info.read_bytes()
                    else:
                        entry["records"] = RecordsChunks(list(info.regions), size)
                    if size:
                        fp.size = size
                        total += size
                        min_one = False
                        if not follower and self.metrics is not None:
                            self.metrics.record_fetch(name, size)
                entry["error_code"] = NONE
            except Exception as exc:
                entry["error_code"], _ = error_of(exc)
                entry["records"] = b""
                fp.size = 0
                respond_now = True
                continue
            if follower and not from_purgatory:
                followers.update_follower_fetch_state(fp.tp, params.replica_id, offset)  # type: ignore[union-attr,arg-type]
                entry["high_watermark"] = plog.high_watermark  # what the follower's own fetch moved
                entry["last_stable_offset"] = last_stable_offset(plog)
        return total, respond_now

    def probe(self, params: FetchParams) -> Callable[[FetchPartitionStatus], int]:
        """The purgatory's check for one partition of a waiting fetch: the bytes readable now (any batch counts
        as ``MIN_BATCH`` when that satisfies ``min_bytes``), or an exception when the partition is in error
        (leadership or leader epoch changed, offset out of range), which completes the fetch."""
        leader_log = self.leader_log
        isolation = params.isolation
        min_bytes = params.min_bytes

        def probe(status: FetchPartitionStatus) -> int:
            name, index = status.tp
            plog = leader_log(name, index)
            if status.current_leader_epoch >= 0:
                self._check_epoch(name, index, status.current_leader_epoch)
            offset = status.fetch_offset
            if offset < plog.log_start_offset or offset > plog.log_end_offset:
                raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
            end = max_offset(plog, isolation)
            if end <= offset:
                return 0
            if min_bytes <= MIN_BATCH:
                return MIN_BATCH
            return plog.read(offset, status.max_bytes, max_offset=end, min_one_batch=False).size

        return probe

    async def fetch_messages(self, params: FetchParams, partitions: list[FetchPartition]) -> int:
        """Read ``partitions``; when the answer may wait, long-poll until ``min_bytes`` are readable (or
        ``max_wait_ms``), then read again. Returns the record bytes of the answer."""
        total, respond_now = self.read_from_log(params, partitions)
        if respond_now or total >= params.min_bytes or params.max_wait_ms <= 0 or not partitions:
            return total
        statuses = [FetchPartitionStatus(fp.tp, fp.fetch_offset, fp.max_bytes, fp.current_leader_epoch)  # type: ignore[arg-type]
                    for fp in partitions]
        op = DelayedFetch(statuses, params.min_bytes, params.max_wait_ms, self.probe(params))
        if not self.purgatory.fetch.try_complete_else_watch(op, [s.tp for s in statuses]):
            await op.wait()
        total, _ = self.read_from_log(params, partitions, from_purgatory=True)
        return total
