"""The group coordinator (classic protocol) and the offsets store in ``__consumer_offsets``.

Runs entirely on the broker's event loop: state changes are synchronous, JoinGroup/SyncGroup wait on futures
and timers (``loop.call_later``), never on sleeps. Every durable change is one batch appended to the group's
``__consumer_offsets`` partition through ``PartitionLog.append_as_leader``, acknowledged by the ISR before the
client is answered.

Partition leadership drives it, in both modes (Kafka's ``onElection`` / ``onResignation``;
docs/decisions/0065-coordinators-driven-by-partition-leadership.md): this broker coordinates exactly the groups of
the ``__consumer_offsets`` partitions it leads. The replica manager calls :meth:`GroupCoordinator.on_leadership_change`
(one node: for every partition at start and on creation; ZooKeeper mode: on each election); the partitions elected
together are read in a worker thread (latest record per key wins, tombstones delete) and installed, requests for
their groups are answered COORDINATOR_LOAD_IN_PROGRESS meanwhile; a partition no longer led unloads its groups;
other groups get NOT_COORDINATOR and FindCoordinator names the partition's leader. When one load covers every
partition (one node at start), records of a group found outside its partition (data written before tidelog placed
groups by Kafka's ``Utils.abs``) are kept for keys its own partition has no record of, and moved there once
(appended to the group's partition, tombstoned where found) before the load completes (see
:func:`replay._read_partitions` and :func:`loading._migrate`).
The topic is created on the first FindCoordinator (compacted, ``offsets.topic.num.partitions``, the replica
manager's replication factor for internal topics: 1 on one node, ``offsets.topic.replication.factor`` in ZooKeeper
mode, not while fewer brokers are alive), as Kafka does. Writes wait until the ISR has them (acks=-1,
``offsets.commit.timeout.ms``) and fail with Kafka's GroupMetadataManager mapping. On one node the same wait
completes at once (HW = LEO after the append).

Rooms (each sees this class through a Protocol it states, and none imports this module): :mod:`membership`
(join/sync/heartbeat/leave, rebalance and session timers; ``MembershipHost``), :mod:`offsets` (OffsetCommit,
OffsetFetch, OffsetDelete, retention; ``OffsetsHost``), :mod:`txn_offsets` (TxnOffsetCommit and markers;
``TxnOffsetsHost``), :mod:`loading` (installing ``__consumer_offsets`` partitions; ``LoadingHost``), :mod:`replay`
(the blocking replay of the log), :mod:`describe`, :mod:`deleted_topics`, :mod:`consumer_group` (KIP-848). This
module keeps the state they share, the lifecycle, partition leadership, FindCoordinator, the request check and
the ``__consumer_offsets`` writer; the rooms' public functions are bound here as methods.

Kafka behaviours reproduced (facts from Kafka's classic ``GroupCoordinator``/``GroupMetadataManager``):

* JoinGroup v4+ without a member id and without ``group.instance.id``: MEMBER_ID_REQUIRED with a fresh member
  id, kept pending for one session timeout.
* ``group.initial.rebalance.delay.ms``: the first rebalance of an Empty group waits that long, extended by each
  new member up to the rebalance timeout. Other rebalances complete as soon as every member rejoined, or after
  the largest rebalance timeout; members that did not rejoin are removed (this is where max.poll.interval bites).
* Session timeout: a member without a heartbeat (or pending join/sync) for ``session.timeout.ms`` is removed and
  the group rebalances. Static members (``group.instance.id``) rejoining with a new member id replace the old
  one; in a Stable group with unchanged protocols this needs no rebalance; the old id is FENCED_INSTANCE_ID.
* OffsetCommit from a member needs the current generation (ILLEGAL_GENERATION), a known member
  (UNKNOWN_MEMBER_ID) and no CompletingRebalance (REBALANCE_IN_PROGRESS); generation -1 commits (admin, simple
  consumers) are allowed only while the group is Empty. Unknown partitions: UNKNOWN_TOPIC_OR_PARTITION;
  metadata above ``offset.metadata.max.bytes`` (4096): OFFSET_METADATA_TOO_LARGE.
* Offset retention (``offsets.retention.minutes``): offsets of an Empty group expire that long after the group
  emptied (or after the commit, if later); an explicit expire timestamp (OffsetCommit v2-4) wins. A group that
  is Empty with no offsets left is removed (tombstone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from tidelog.broker.group import describe, loading, membership, offsets, txn_offsets
from tidelog.broker.group import records as rec
from tidelog.broker.group.consumer_group import ConsumerGroupManager
from tidelog.broker.group.deleted_topics import drop_topics
from tidelog.broker.group.membership import _join_error
from tidelog.broker.group.records import OFFSETS_TOPIC, GroupValue
from tidelog.broker.group.replay import Migration, Replay, _read_partitions  # noqa: F401 (tests import them here)
from tidelog.broker.group.results import DescribedGroup, ListedGroup
from tidelog.broker.group.share_group_cleanup import on_topic_deleted as share_topic_deleted
from tidelog.broker.group.share_group_install import unload_partition as unload_share_groups
from tidelog.broker.group.state import Group, GroupState
from tidelog.broker.group.state import now_ms as _now_ms
from tidelog.broker.internal_topics import append_and_wait
from tidelog.errors import ApiError, ErrorCode, error_code
from tidelog.records.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.topic_model import TopicInfo

log = logging.getLogger("tidelog.broker.group")


NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
UNKNOWN_SERVER_ERROR = ErrorCode.UNKNOWN_SERVER_ERROR
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
OFFSET_METADATA_TOO_LARGE = ErrorCode.OFFSET_METADATA_TOO_LARGE
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
INVALID_GROUP_ID = ErrorCode.INVALID_GROUP_ID
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
INVALID_SESSION_TIMEOUT = ErrorCode.INVALID_SESSION_TIMEOUT
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
INVALID_COMMIT_OFFSET_SIZE = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
NON_EMPTY_GROUP = ErrorCode.NON_EMPTY_GROUP
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
REQUEST_TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT
UNSTABLE_OFFSET_COMMIT = ErrorCode.UNSTABLE_OFFSET_COMMIT
NETWORK_EXCEPTION = ErrorCode.NETWORK_EXCEPTION
PRODUCER_FENCED = ErrorCode.PRODUCER_FENCED
INVALID_PRODUCER_EPOCH = ErrorCode.INVALID_PRODUCER_EPOCH
INVALID_TXN_STATE = ErrorCode.INVALID_TXN_STATE
TRANSACTION_ABORTABLE = ErrorCode.TRANSACTION_ABORTABLE
INVALID_PRODUCER_ID_MAPPING = ErrorCode.INVALID_PRODUCER_ID_MAPPING

OFFSET_METADATA_MAX_BYTES = 4096




class CoordinatorError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class GroupCoordinator:
    """All groups of this broker. Public methods are called by ``tidelog.broker.handlers.group``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.groups: dict[str, Group] = {}
        self.active = False
        self.initial_rebalance_delay_ms = int(cfg.get("group.initial.rebalance.delay.ms"))
        self.min_session_timeout_ms = int(cfg.get("group.min.session.timeout.ms"))
        self.max_session_timeout_ms = int(cfg.get("group.max.session.timeout.ms"))
        self.configured_partitions = int(cfg.get("offsets.topic.num.partitions"))
        self.retention_ms = int(cfg.get("offsets.retention.minutes")) * 60_000
        props = cfg.props
        self.retention_check_interval_ms = int(props.get("offsets.retention.check.interval.ms", "600000"))
        self.group_max_size = int(props.get("group.max.size", str(2**31 - 1)))
        self.metadata_max_bytes = int(props.get("offset.metadata.max.bytes", str(OFFSET_METADATA_MAX_BYTES)))
        # offsets.commit.timeout.ms: how long a write waits for the ISR (Kafka's acks=-1 append of the coordinator)
        self.commit_timeout_ms = int(props.get("offsets.commit.timeout.ms", "5000"))
        self.replication_factor = int(cfg.get("offsets.topic.replication.factor"))
        # this broker coordinates only the groups of the __consumer_offsets partitions it leads
        self.owned: dict[int, int] = {}  # partition -> leader epoch
        self.loading_partitions: set[int] = set()
        self._load_generation: dict[int, int] = {}
        self._elected: dict[int, int] = {}  # elected, not yet loading: partition -> load generation (one batch)
        self._creating: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self.loaded = asyncio.Event()  # set while no partition is loading
        # (__consumer_offsets partition, producer id) -> groups holding pending transactional offsets of it
        # (Kafka's openTransactionsByGroup, inverted: a marker names the partition and the producer)
        self._open_txns: dict[tuple[int, int], set[str]] = {}
        # markers reported while their partition was loading: applied once its groups are installed
        self._deferred_markers: dict[int, list[tuple[int, bool]]] = {}
        # topics deleted while a __consumer_offsets partition was loading: their
        # offsets are removed from that partition's groups once installed
        self._deleted_while_loading: dict[int, set[str]] = {}
        # KIP-848 consumer groups (ConsumerGroup* records; their offsets live in ``groups`` as a classic group's)
        self.consumer = ConsumerGroupManager(self)

    # ============================================================== lifecycle

    @property
    def num_partitions(self) -> int:
        info = self.broker.topics.get(OFFSETS_TOPIC) if self.broker.topics is not None else None
        return info.num_partitions if info is not None else self.configured_partitions

    async def start(self) -> None:
        """Start the timers. Nothing is coordinated until the replica manager names this broker leader of
        ``__consumer_offsets`` partitions (:meth:`on_leadership_change`)."""
        self._loop = asyncio.get_running_loop()
        self.active = True
        self.loaded.set()
        self._tasks.append(self._loop.create_task(self._expiry_loop()))

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR and stop timers (broker stopping)."""
        self.active = False
        for t in self._tasks:
            t.cancel()
        for g in self.groups.values():
            self._release_group(g)
        self.consumer.shutdown()

    def _release_group(self, g: Group) -> None:
        """Stop the group's timers; its waiting JoinGroup/SyncGroup get NOT_COORDINATOR (Kafka's onGroupUnloaded)."""
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None
        for timer in g.pending_members.values():
            if timer is not None:
                timer.cancel()
        for m in g.members.values():
            m.cancel_timer()
            if m.awaiting_join:
                m.answer_join(_join_error(NOT_COORDINATOR, m.member_id))
            if m.awaiting_sync:
                m.answer_sync(membership._sync_result(self, NOT_COORDINATOR, g))

    # ============================================================== partition leadership

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """Called (on the loop) by the replica manager whenever this broker becomes or stops being leader of a
        partition (:class:`~tidelog.broker.leadership.LeadershipListener`).

        Leader of a ``__consumer_offsets`` partition: load its groups from the local log in a worker thread
        (COORDINATOR_LOAD_IN_PROGRESS meanwhile), as Kafka's ``onElection``/``loadGroupsForPartition``; the
        partitions elected in one turn of the loop load together, and a partition holding nothing (just created)
        is coordinated at once. No longer leader: unload its groups (Kafka's ``onResignation``): waiting
        joins/syncs get NOT_COORDINATOR and the clients find the new coordinator."""
        if topic != OFFSETS_TOPIC:
            return
        if is_leader:
            if partition in self.owned:
                self.owned[partition] = leader_epoch  # same leadership, newer epoch: nothing to reload
                return
            self.owned[partition] = leader_epoch
            gen = self._load_generation.get(partition, 0) + 1
            self._load_generation[partition] = gen
            plog = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
            if plog is not None and plog.log_end_offset == 0:
                return  # nothing to replay: coordinated now
            self.loading_partitions.add(partition)
            self.loaded.clear()
            if not self._elected:
                self._spawn(self._load_elected())
            self._elected[partition] = gen
            return
        if partition not in self.owned:
            return
        del self.owned[partition]
        self.loading_partitions.discard(partition)
        self._elected.pop(partition, None)
        if not self.loading_partitions:
            self.loaded.set()
        self._load_generation[partition] = self._load_generation.get(partition, 0) + 1  # a running load is stale
        n = self.num_partitions
        self.consumer.unload_partition(partition, n)
        unload_share_groups(self.broker, partition, n)
        gone = [g for gid, g in self.groups.items() if rec.partition_for(gid, n) == partition]
        for g in gone:
            self._release_group(g)
            self.groups.pop(g.group_id, None)
        for key in [k for k in self._open_txns if k[0] == partition]:
            del self._open_txns[key]
        self._deferred_markers.pop(partition, None)
        self._deleted_while_loading.pop(partition, None)
        log.info("unloaded groups of __consumer_offsets partition",
                 extra={"kv": {"partition": partition, "groups": len(gone)}})

    async def _load_elected(self) -> None:
        """The partitions elected in the turn of the loop that spawned this, loaded as one batch."""
        batch, self._elected = self._elected, {}
        try:
            await loading._load_partitions(self, batch)
        finally:
            if not self.loading_partitions:
                self.loaded.set()

    # ============================================================== deleted topics

    def on_topic_deleted(self, topic: str) -> None:
        """On the loop, once ``topic`` is deleted (one node: by DeleteTopics; ZooKeeper mode: when this broker sees
        it gone): its offsets leave every group coordinated here, tombstones written (``deleted_topics``), as
        Kafka's ``onPartitionsDeleted``. Partitions still loading get the same once their groups are installed."""
        if not self.active or topic == OFFSETS_TOPIC:
            return
        for p in self.loading_partitions:
            self._deleted_while_loading.setdefault(p, set()).add(topic)
        drop_topics(self, {topic}, self.groups.values())
        share_topic_deleted(self.broker, topic)  # share groups' state of the topic

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self._loop_().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def find_coordinator(self, group_id: str) -> tuple[int, str | None, tuple[int, str, int] | None]:
        """(error, message, (node id, host, port)) of the leader of the group's partition: this broker if it
        leads it. Creates ``__consumer_offsets`` if it does not exist (one node: here, led at once; ZooKeeper
        mode: through ZooKeeper, the controller elects its leaders), answering COORDINATOR_NOT_AVAILABLE until
        it has a leader, as Kafka does."""
        unavailable = (COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", None)
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is None:
            if self._creating is None or self._creating.done():
                self._creating = self._loop_().create_task(self._create_offsets_topic())
            await asyncio.shield(self._creating)  # one node: led once created (ZooKeeper mode: after an election)
            info = self.broker.topics.get(OFFSETS_TOPIC)
            if info is None:
                return unavailable
        p = rec.partition_for(group_id, info.num_partitions)
        if p in self.owned:
            return NONE, None, (self.broker.node_id, self.broker.host, self.broker.port)
        md = self.broker.partition_metadata(OFFSETS_TOPIC, p)
        leader = md.get("leader_id", -1) if md else -1
        for b in self.broker.metadata_brokers() or ():
            if b["node_id"] == leader >= 0:
                return NONE, None, (b["node_id"], b["host"], b["port"])
        return unavailable

    async def _create_offsets_topic(self) -> None:
        rm = self.broker.replica_manager
        rf = rm.internal_topic_replication_factor(self.replication_factor)
        live = len(rm.live_brokers())
        if live < rf:
            log.warning("__consumer_offsets not created: fewer live brokers than offsets.topic.replication.factor",
                        extra={"kv": {"live": live, "replication_factor": rf}})
            return
        try:
            await self.broker.request_pool.run(self._create_topic, rf)
            log.info("__consumer_offsets created", extra={"kv": {"partitions": self.configured_partitions,
                                                                  "replication_factor": rf}})
        except Exception as exc:
            if not (isinstance(exc, ApiError) and exc.kafka_error == ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create __consumer_offsets", extra={"kv": {"error": repr(exc)}})

    # ============================================================== helpers

    def check(self, group_id: str | None) -> int:
        """The coordinator-level error for a request about ``group_id`` (0 = go ahead)."""
        if not self.active or self.broker.stopping or not self.broker.replica_manager.coordinating:
            return NOT_COORDINATOR
        if group_id is None:
            return INVALID_GROUP_ID
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is None:
            # created on first write (:meth:`_offsets_topic`) where that makes this broker its leader at once
            return NONE if self.broker.replica_manager.internal_topics_led_on_creation else NOT_COORDINATOR
        p = rec.partition_for(group_id, info.num_partitions)
        if p not in self.owned:
            return NOT_COORDINATOR
        return COORDINATOR_LOAD_IN_PROGRESS if p in self.loading_partitions else NONE

    def _offsets_topic(self) -> TopicInfo | None:
        """The topic; created here now (on the loop, as before leadership drove the coordinator) when that makes
        this broker the leader of every partition at once (one node), else None until it exists."""
        info = self.broker.topics.get(OFFSETS_TOPIC)
        rm = self.broker.replica_manager
        if info is None and rm.internal_topics_led_on_creation:
            info = self._create_topic(rm.internal_topic_replication_factor(self.replication_factor))
        return info

    def _create_topic(self, replication_factor: int) -> TopicInfo:
        # Kafka's offsets topic configs: compacted, its own segment size, the producer's compression. Its
        # min.insync.replicas is the broker default (Kafka sets none for it).
        return self.broker.topics.create_topic(
            OFFSETS_TOPIC,
            self.configured_partitions,
            replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.broker.config.get("offsets.topic.segment.bytes")),
                "compression.type": "producer",
            },
        )

    def _group(self, group_id: str, create: bool = False) -> Group | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = Group(group_id)
            g.current_state_timestamp = _now_ms()
        return g

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int:
        """Append ``(key, value)`` records for ``group_id`` as one batch to its partition and wait until the ISR has
        it (acks=-1, ``offsets.commit.timeout.ms``); returns an error code, mapped as Kafka's GroupMetadataManager
        does for offset writes (``offsets``) or group metadata writes."""
        if not entries:
            return NONE
        try:
            info = self._offsets_topic()
            if info is None:
                return COORDINATOR_NOT_AVAILABLE
            partition = rec.partition_for(group_id, info.num_partitions)
        except Exception as exc:
            if not isinstance(exc, ApiError):
                log.warning("__consumer_offsets unavailable", extra={"kv": {"group": group_id, "error": repr(exc)}})
            err = exc.kafka_error if isinstance(exc, ApiError) else ErrorCode.UNKNOWN_SERVER_ERROR
            return self._append_error(err, offsets, group_id)
        return await self._append_to(partition, entries, offsets=offsets, group_id=group_id, **kw)

    async def _append_to(
        self, partition: int, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
        group_id: str = "", off_loop: bool = False, producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH, on_appended: Callable[[int], None] | None = None,
    ) -> int:
        """Append ``entries`` as one batch to ``__consumer_offsets-<partition>`` and wait until the ISR has it.
        ``off_loop``: build and append the batch in a worker thread (loading, where the batches can be many).
        ``producer_id`` >= 0: a transactional batch of that producer (TxnOffsetCommit), written as Kafka's
        coordinator writes it: producer id and epoch, transactional attribute, base sequence -1.
        ``on_appended(first offset)`` is called (on the loop) as soon as the batch is in the local log, before
        the wait for the ISR."""
        if not entries:
            return NONE
        err = await append_and_wait(self.broker, OFFSETS_TOPIC, partition, entries, self.commit_timeout_ms,
                                    off_loop=off_loop, producer_id=producer_id, producer_epoch=producer_epoch,
                                    on_appended=on_appended)
        return NONE if err is None else self._append_error(err, offsets, group_id)

    @staticmethod
    def _append_error(name: ErrorCode, offsets: bool, group_id: str) -> int:
        """Kafka's mapping of a failed ``__consumer_offsets`` append to the error the client gets."""
        log.warning("__consumer_offsets append failed", extra={"kv": {"group": group_id, "error": name}})
        if name in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
            return COORDINATOR_NOT_AVAILABLE
        if name in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH):
            return NOT_COORDINATOR
        if name in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
            return INVALID_COMMIT_OFFSET_SIZE if offsets else UNKNOWN_SERVER_ERROR
        if name == ErrorCode.REQUEST_TIMED_OUT:
            return REQUEST_TIMED_OUT if offsets else REBALANCE_IN_PROGRESS
        return error_code(name) if offsets else UNKNOWN_SERVER_ERROR

    async def _store_group(self, g: Group) -> int:
        value = GroupValue(
            g.protocol_type or "", g.generation, g.protocol_name, g.leader_id, g.current_state_timestamp,
            g.member_values(),
        )
        err = await self._append(g.group_id, [(rec.encode_group_key(g.group_id), rec.encode_group_value(value))],
                                 offsets=False)
        if err == NONE:
            g.persisted = True
        return err

    def _loop_(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # ============================================================== heartbeats and expiry

    _schedule_heartbeat = membership._schedule_heartbeat

    # ============================================================== rebalancing

    # ============================================================== JoinGroup

    join_group = membership.join_group

    # ============================================================== SyncGroup

    _validate_member = membership._validate_member

    sync_group = membership.sync_group

    # ============================================================== Heartbeat / LeaveGroup

    heartbeat = membership.heartbeat

    leave_group = membership.leave_group

    # ============================================================== offsets

    commit_offsets = offsets.commit_offsets

    fetch_offsets = offsets.fetch_offsets

    # ============================================================== transactional offsets (KIP-98, KIP-447)

    commit_txn_offsets = txn_offsets.commit_txn_offsets

    on_txn_marker = txn_offsets.on_txn_marker

    _install_pending = txn_offsets._install_pending

    _apply_deferred_markers = txn_offsets._apply_deferred_markers

    delete_offsets = offsets.delete_offsets

    # ============================================================== describe / list / delete

    def describe_group(self, group_id: str) -> DescribedGroup:
        return describe.describe_group(self, group_id)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[ListedGroup]]:
        return describe.list_groups(self, states, types)

    async def delete_group(self, group_id: str) -> int:
        err = self.check(group_id)
        if err:
            return err
        if self.consumer.active(group_id):
            return NON_EMPTY_GROUP
        g = self.groups.get(group_id)
        if (g is None or g.state == GroupState.DEAD) and self.consumer.is_consumer_group(group_id):
            # an empty KIP-848 group without offsets: tombstones for its ConsumerGroup* records
            code = await self._append(group_id, self.consumer.store.tombstones(group_id), offsets=False)
            if code:
                return code
            self.consumer.drop(group_id)
            return NONE
        if g is None or g.state == GroupState.DEAD:
            return GROUP_ID_NOT_FOUND
        if g.state != GroupState.EMPTY:
            return NON_EMPTY_GROUP
        entries: list[tuple[bytes, bytes | None]] = [
            (rec.encode_offset_key(group_id, t, p), None) for (t, p) in g.offsets
        ]
        # Kafka's deleteAllOffsets: pending transactional offsets are deleted too (one tombstone per partition)
        pending_only = {tp for offs in g.pending_txn_offsets.values() for tp in offs if tp not in g.offsets}
        entries += [(rec.encode_offset_key(group_id, t, p), None) for (t, p) in sorted(pending_only)]
        entries.append((rec.encode_group_key(group_id), None))
        entries += self.consumer.store.tombstones(group_id)  # KIP-848 group records, if any
        code = await self._append(group_id, entries)
        if code:
            return code
        if self.groups.get(group_id) is not g or g.state != GroupState.EMPTY:
            return NON_EMPTY_GROUP if group_id in self.groups else NONE  # changed while the ISR caught up
        g.transition(GroupState.DEAD, _now_ms())
        g.offsets.clear()
        g.pending_txn_offsets.clear()
        self.groups.pop(group_id, None)
        self.consumer.drop(group_id)
        log.info("group deleted", extra={"kv": {"group": group_id}})
        return NONE

    # ============================================================== retention

    async def _expiry_loop(self) -> None:
        await self.loaded.wait()
        interval = max(self.retention_check_interval_ms, 10) / 1000.0
        while self.active:
            await asyncio.sleep(interval)  # a periodic task, like Kafka's offsets-retention scheduler
            with contextlib.suppress(Exception):
                await self.expire_offsets(_now_ms())

    expire_offsets = offsets.expire_offsets


if TYPE_CHECKING:
    from tidelog.broker.group.consumer_model import GroupOwner
    from tidelog.broker.group.deleted_topics import TopicOffsetsOwner
    from tidelog.broker.group.describe import DescribedCoordinator
    from tidelog.broker.group.loading import LoadingHost
    from tidelog.broker.group.membership import MembershipHost
    from tidelog.broker.group.offsets import OffsetsHost
    from tidelog.broker.group.txn_offsets import TxnOffsetsHost

    def _states_every_interface(c: GroupCoordinator) -> tuple[
        MembershipHost, OffsetsHost, TxnOffsetsHost, LoadingHost, DescribedCoordinator, GroupOwner, TopicOffsetsOwner,
    ]:
        """For mypy only: the coordinator is every Protocol its rooms state (checked here, not only where called)."""
        return c, c, c, c, c, c, c
