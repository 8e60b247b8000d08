"""Transactional offsets (KIP-98, KIP-447): TxnOffsetCommit writes a producer's offsets as one transactional batch
to the group's ``__consumer_offsets`` partition and keeps them pending until the COMMIT/ABORT marker reaches that
partition (Kafka's ``OffsetMetadataManager`` replay of transactional records and markers). ``self`` is the group
coordinator, seen through :class:`TxnOffsetsHost`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group import records as rec
from tidelog.broker.group.records import OFFSETS_TOPIC, OffsetValue
from tidelog.broker.group.replay import _materialize
from tidelog.broker.group.state import Group, GroupState
from tidelog.broker.group.state import now_ms as _now_ms
from tidelog.broker.txn import tv2
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.group.consumer_group import ConsumerGroupManager

log = logging.getLogger("tidelog.broker.group")

NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INVALID_GROUP_ID = ErrorCode.INVALID_GROUP_ID
INVALID_PRODUCER_EPOCH = ErrorCode.INVALID_PRODUCER_EPOCH
INVALID_PRODUCER_ID_MAPPING = ErrorCode.INVALID_PRODUCER_ID_MAPPING
INVALID_TXN_STATE = ErrorCode.INVALID_TXN_STATE
NETWORK_EXCEPTION = ErrorCode.NETWORK_EXCEPTION
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
OFFSET_METADATA_TOO_LARGE = ErrorCode.OFFSET_METADATA_TOO_LARGE
PRODUCER_FENCED = ErrorCode.PRODUCER_FENCED
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
STALE_MEMBER_EPOCH = ErrorCode.STALE_MEMBER_EPOCH
TRANSACTION_ABORTABLE = ErrorCode.TRANSACTION_ABORTABLE
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class TxnOffsetsHost(Protocol):
    """What transactional offsets read and call of the group coordinator."""

    broker: Broker
    groups: dict[str, Group]
    consumer: ConsumerGroupManager
    loading_partitions: set[int]
    metadata_max_bytes: int
    # (__consumer_offsets partition, producer id) -> groups with pending offsets of that producer
    _open_txns: dict[tuple[int, int], set[str]]
    # markers reported while their partition was loading
    _deferred_markers: dict[int, list[tuple[int, bool]]]

    @property
    def num_partitions(self) -> int: ...

    def check(self, group_id: str | None) -> int: ...

    def _group(self, group_id: str, create: bool = False) -> Group | None: ...

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...


async def commit_txn_offsets(
    self: TxnOffsetsHost, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
    generation_id: int, group_instance_id: str | None, offsets: Mapping[tuple[str, int], OffsetValue | tuple[int, int, str | None]], *,
    api_version: int = 5,
) -> dict[tuple[str, int], int]:
    """TxnOffsetCommit: write ``offsets`` ({(topic, partition): OffsetValue or (offset, leader epoch,
    metadata)}) as ONE transactional batch of the producer to the group's ``__consumer_offsets`` partition
    (acks=all) and keep them pending for ``producer_id`` until its COMMIT/ABORT marker reaches that
    partition (:meth:`on_txn_marker`). Returns the error code per partition.

    Order of checks, as Kafka 4.x (KafkaApis, GroupCoordinatorService, OffsetMetadataManager): unknown topic
    partitions (UNKNOWN_TOPIC_OR_PARTITION, the rest goes on); the coordinator (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID); the transaction coordinator's verification that the
    offsets partition is in the producer's transaction (KIP-890, when a transaction coordinator runs here);
    the member (:meth:`_validate_txn_commit`); per partition the metadata size (OFFSET_METADATA_TOO_LARGE).
    A failed write fails every partition written, mapped as for OffsetCommit (INVALID_PRODUCER_EPOCH from
    the partition's producer state passes through)."""
    results: dict[tuple[str, int], int] = {}
    known: list[tuple[tuple[str, int], OffsetValue | tuple[int, int, str | None]]] = []
    topics = self.broker.topics
    for tp, value in offsets.items():
        info = topics.get(tp[0])
        if info is None or not 0 <= tp[1] < info.num_partitions:
            results[tp] = UNKNOWN_TOPIC_OR_PARTITION
        else:
            known.append((tp, value))
    if not known:
        return results
    err = self.check(group_id)
    if not err and not group_id:
        err = INVALID_GROUP_ID
    if not err and producer_id < 0:
        # a batch without producer id would be read back as a plain commit: never written
        err = INVALID_PRODUCER_ID_MAPPING
    if not err:
        err = await _verify_txn(self, transactional_id, group_id, producer_id, producer_epoch, api_version)
    if not err and self.consumer.is_consumer_group(group_id):  # KIP-848 member id and epoch
        err = self.consumer.validate_commit(group_id, member_id, generation_id, api_version, transactional=True)
    elif not err:
        err = _validate_txn_commit(self, group_id, generation_id, member_id, group_instance_id)
    if err:
        results.update((tp, err) for tp, _ in known)
        return results
    if self.consumer.is_consumer_group(group_id):  # KIP-1251: an older member epoch, partition by partition
        stale = self.consumer.stale_commit_partitions(group_id, member_id, generation_id, [tp for tp, _ in known])
        results.update(dict.fromkeys(stale, STALE_MEMBER_EPOCH))
        known = [(tp, v) for tp, v in known if tp not in stale]
    now = _now_ms()
    entries: list[tuple[bytes, bytes | None]] = []
    accepted: list[tuple[tuple[str, int], OffsetValue]] = []
    for tp, value in known:
        metadata: str | None
        if isinstance(value, OffsetValue):
            offset, epoch, metadata = value.offset, value.leader_epoch, value.metadata
        else:
            offset, epoch, metadata = value
        meta = metadata or ""
        if len(meta.encode("utf-8")) > self.metadata_max_bytes:
            results[tp] = OFFSET_METADATA_TOO_LARGE
            continue
        # Kafka's OffsetAndMetadata.fromRequest for TxnOffsetCommit: no expire timestamp
        ov = OffsetValue(offset, epoch if epoch is not None else -1, meta, now, -1)
        entries.append((rec.encode_offset_key(group_id, tp[0], tp[1]), rec.encode_offset_value(ov)))
        accepted.append((tp, ov))
    if not accepted:
        return results
    registered: list[tuple[tuple[str, int], OffsetValue]] = []
    opened: list[bool] = []
    txn_key = (rec.partition_for(group_id, self.num_partitions), producer_id)

    def register(first: int) -> None:
        # as soon as the batch is in the log (Kafka replays a write when it is appended): a marker appended
        # after it must find these offsets, even while the ISR is still catching up
        g = self._group(group_id, create=True)
        assert g is not None
        opened.append(producer_id not in g.pending_txn_offsets)
        pending = g.pending_txn_offsets.setdefault(producer_id, {})
        for i, (tp, ov) in enumerate(accepted):
            ov.record_offset = first + i
            pending[tp] = ov
            registered.append((tp, ov))
        self._open_txns.setdefault(txn_key, set()).add(group_id)

    code = await self._append(group_id, entries, producer_id=producer_id, producer_epoch=producer_epoch,
                              on_appended=register)
    if code and registered:
        # not acknowledged (Kafka's failPendingTxnOffsetCommit): only these very offsets are withdrawn
        g = self.groups.get(group_id)
        pending = g.pending_txn_offsets.get(producer_id) if g is not None else None
        for tp, ov in registered:
            if pending is not None and pending.get(tp) is ov:
                del pending[tp]
        if g is not None and pending == {} and opened[0]:
            # this write opened the group's transaction: it is not open after all
            del g.pending_txn_offsets[producer_id]
            self._open_txns.get(txn_key, set()).discard(group_id)
    for tp, _ in accepted:
        results[tp] = code
    log.debug("transactional offsets written", extra={"kv": {
        "group": group_id, "transactional_id": transactional_id, "producer_id": producer_id,
        "count": len(accepted), "error": code}})
    return results


async def _verify_txn(self: TxnOffsetsHost, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                      api_version: int) -> int:
    """KIP-890 part 1: the transaction coordinator, when this broker runs one (and
    ``transaction.partition.verification.enable``), must have the group's offsets partition in the producer's
    ongoing transaction (AddOffsetsToTxn); its error code, else NONE, mapped as Kafka's
    AddPartitionsToTxnManager and coordinator runtime map it for TxnOffsetCommit: PRODUCER_FENCED ->
    INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE (partition not in the transaction) -> INVALID_TXN_STATE
    before v5 (which added TRANSACTION_ABORTABLE); a transaction coordinator not there (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE) -> COORDINATOR_NOT_AVAILABLE; not reachable -> COORDINATOR_LOAD_IN_PROGRESS."""
    coord = getattr(self.broker, "txn_coordinator", None)
    verify = getattr(coord, "verify_transaction", None)
    implicit = tv2.implicit_add(self.broker, api_version, tv2.TXN_OFFSET_COMMIT_V2_VERSION)
    if verify is None or not (getattr(coord, "verification_enabled", True) or implicit):
        return NONE
    tp = (OFFSETS_TOPIC, rec.partition_for(group_id, self.num_partitions))
    try:
        if implicit:
            # transactions v2 (KIP-890 part 2): v5 adds the offsets partition itself (no AddOffsetsToTxn)
            codes = await tv2.add_partitions(coord, transactional_id, producer_id, producer_epoch, [tp])  # type: ignore[arg-type]
        else:
            codes = await verify(transactional_id, producer_id, producer_epoch, [tp])
    except Exception as exc:
        # the transaction coordinator could not be asked: retriable, as Kafka's NETWORK_EXCEPTION here
        log.warning("transaction verification failed", extra={"kv": {"group": group_id, "error": repr(exc)}})
        return COORDINATOR_LOAD_IN_PROGRESS
    code = int(codes.get(tp, NONE))
    if code == NETWORK_EXCEPTION:
        # Kafka 4.x (handleOperationException): retried by older clients without a coordinator lookup
        return COORDINATOR_LOAD_IN_PROGRESS
    if code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
        return COORDINATOR_NOT_AVAILABLE  # not this group coordinator's fault: no group coordinator lookup
    if code == PRODUCER_FENCED:
        return INVALID_PRODUCER_EPOCH
    if code == TRANSACTION_ABORTABLE and api_version < 5:
        return INVALID_TXN_STATE
    return code


def _validate_txn_commit(self: TxnOffsetsHost, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
    """Kafka 4.x ``validateTransactionalOffsetCommit`` + ``ClassicGroup.validateOffsetCommit(isTransactional)``:
    an unknown group is created as a simple group for generation < 0, else ILLEGAL_GENERATION; a Dead group
    is COORDINATOR_NOT_AVAILABLE; generation < 0 on an Empty group needs nothing; with a generation >= 0, a
    member id or an instance id the member must exist (static: its instance id must name this member id,
    UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) and the generation must be the group's (ILLEGAL_GENERATION);
    without any of the three (TxnOffsetCommit v0-2) nothing is checked. Unlike OffsetCommit, no
    REBALANCE_IN_PROGRESS and the member's session is not extended."""
    g = self.groups.get(group_id)
    if g is None:
        if generation_id < 0:
            self._group(group_id, create=True)
            return NONE
        return ILLEGAL_GENERATION
    if g.state == GroupState.DEAD:
        return COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and g.state == GroupState.EMPTY:
        return NONE
    if generation_id >= 0 or member_id or instance_id is not None:
        if instance_id is not None:
            known = g.static_members.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if known != member_id:
                return FENCED_INSTANCE_ID
        elif member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        if generation_id != g.generation:
            return ILLEGAL_GENERATION
    return NONE


def on_txn_marker(self: TxnOffsetsHost, offsets_partition: int, producer_id: int, commit: bool) -> None:
    """A COMMIT/ABORT marker of ``producer_id`` was appended to ``__consumer_offsets-<offsets_partition>``
    (called on the event loop by whoever appended it, after the append succeeded). COMMIT: the producer's
    pending offsets of the groups of that partition become the committed ones, each only if its record lies
    later in the log than the committed offset it would replace (Kafka's replayEndTransactionMarker: the
    higher record offset wins, so a plain commit written after the transactional one stays). ABORT: they are
    dropped. A marker for a partition still loading is applied once its groups are installed."""
    if offsets_partition in self.loading_partitions:
        self._deferred_markers.setdefault(offsets_partition, []).append((producer_id, commit))
        return
    gids = self._open_txns.pop((offsets_partition, producer_id), None)
    if not gids:
        log.debug("transaction marker without pending offsets", extra={"kv": {
            "partition": offsets_partition, "producer_id": producer_id, "commit": commit}})
        return
    for gid in sorted(gids):
        g = self.groups.get(gid)
        pending = g.pending_txn_offsets.pop(producer_id, None) if g is not None else None
        if g is None or not pending or not commit:
            continue
        _materialize(g.offsets, pending)
        log.debug("transactional offsets committed", extra={"kv": {
            "group": gid, "producer_id": producer_id, "count": len(pending)}})


def _install_pending(self: TxnOffsetsHost, pending: dict[int, dict[int, dict[tuple[str, str, int], OffsetValue]]]) -> None:
    for partition, by_producer in pending.items():
        for producer_id, offsets in by_producer.items():
            for (gid, topic, part), ov in offsets.items():
                g = self._group(gid, create=True)
                assert g is not None
                g.pending_txn_offsets.setdefault(producer_id, {})[(topic, part)] = ov
                self._open_txns.setdefault((partition, producer_id), set()).add(gid)


def _apply_deferred_markers(self: TxnOffsetsHost, partition: int) -> None:
    for producer_id, commit in self._deferred_markers.pop(partition, ()):
        on_txn_marker(self, partition, producer_id, commit)

