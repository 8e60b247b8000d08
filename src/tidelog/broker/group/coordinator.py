"""The group coordinator (classic protocol) and the offsets store in ``__consumer_offsets``.

Runs entirely on the broker's event loop: state changes are synchronous, JoinGroup/SyncGroup wait on futures
and timers (``loop.call_later``), never on sleeps. Every durable change is one batch appended to the group's
``__consumer_offsets`` partition through ``PartitionLog.append_as_leader``, acknowledged by the ISR before the
client is answered.

Startup: :meth:`GroupCoordinator.start` reads every ``__consumer_offsets`` partition in a worker thread
(latest record per key wins, tombstones delete) and installs the result; until then group requests are answered
COORDINATOR_LOAD_IN_PROGRESS. Records of a group found outside its partition (data written before tidelog placed
groups by Kafka's ``Utils.abs``) are kept for keys its own partition has no record of, and moved there once
(appended to the group's partition, tombstoned where found) before the load completes (see ``_read_partitions``
and ``GroupCoordinator._migrate``).
The topic is created lazily (compacted, ``offsets.topic.num.partitions``) on the first FindCoordinator or write,
as Kafka does.

ZooKeeper mode (``zookeeper.connect``): ``__consumer_offsets`` is a replicated topic created through ZooKeeper
(RF ``offsets.topic.replication.factor``; not while fewer brokers are alive). This broker coordinates exactly the
groups of the partitions it leads: the cluster broker calls :meth:`GroupCoordinator.on_leadership_change`, which
loads a partition's groups when leadership arrives and unloads them when it goes; other groups get
NOT_COORDINATOR, and FindCoordinator names the partition's leader. Writes wait until the ISR has them (acks=-1,
``offsets.commit.timeout.ms``) and fail with Kafka's GroupMetadataManager mapping. On one node the same wait
completes at once (HW = LEO after the append).

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
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from tidelog.broker.errors import code_of
from tidelog.broker.group import describe
from tidelog.broker.group import records as rec
from tidelog.broker.group.consumer_group import ConsumerGroupManager
from tidelog.broker.group.deleted_topics import drop_topics
from tidelog.broker.group.records import OFFSETS_TOPIC, GroupValue, OffsetValue
from tidelog.broker.group.state import Group, GroupState, Member
from tidelog.broker.internal_topics import append_and_wait
from tidelog.protocol.errors import error_code
from tidelog.records.batch import ControlRecordType, decode_batches, parse_control_record
from tidelog.records.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.group")


NONE = error_code("NONE")
UNKNOWN_SERVER_ERROR = error_code("UNKNOWN_SERVER_ERROR")
UNKNOWN_TOPIC_OR_PARTITION = error_code("UNKNOWN_TOPIC_OR_PARTITION")
OFFSET_METADATA_TOO_LARGE = error_code("OFFSET_METADATA_TOO_LARGE")
COORDINATOR_LOAD_IN_PROGRESS = error_code("COORDINATOR_LOAD_IN_PROGRESS")
COORDINATOR_NOT_AVAILABLE = error_code("COORDINATOR_NOT_AVAILABLE")
NOT_COORDINATOR = error_code("NOT_COORDINATOR")
ILLEGAL_GENERATION = error_code("ILLEGAL_GENERATION")
INCONSISTENT_GROUP_PROTOCOL = error_code("INCONSISTENT_GROUP_PROTOCOL")
INVALID_GROUP_ID = error_code("INVALID_GROUP_ID")
UNKNOWN_MEMBER_ID = error_code("UNKNOWN_MEMBER_ID")
INVALID_SESSION_TIMEOUT = error_code("INVALID_SESSION_TIMEOUT")
REBALANCE_IN_PROGRESS = error_code("REBALANCE_IN_PROGRESS")
INVALID_COMMIT_OFFSET_SIZE = error_code("INVALID_COMMIT_OFFSET_SIZE")
NON_EMPTY_GROUP = error_code("NON_EMPTY_GROUP")
GROUP_ID_NOT_FOUND = error_code("GROUP_ID_NOT_FOUND")
MEMBER_ID_REQUIRED = error_code("MEMBER_ID_REQUIRED")
GROUP_MAX_SIZE_REACHED = error_code("GROUP_MAX_SIZE_REACHED")
FENCED_INSTANCE_ID = error_code("FENCED_INSTANCE_ID")
GROUP_SUBSCRIBED_TO_TOPIC = error_code("GROUP_SUBSCRIBED_TO_TOPIC")
INVALID_REQUEST = error_code("INVALID_REQUEST")
REQUEST_TIMED_OUT = error_code("REQUEST_TIMED_OUT")
UNSTABLE_OFFSET_COMMIT = error_code("UNSTABLE_OFFSET_COMMIT")
NETWORK_EXCEPTION = error_code("NETWORK_EXCEPTION")
PRODUCER_FENCED = error_code("PRODUCER_FENCED")
INVALID_PRODUCER_EPOCH = error_code("INVALID_PRODUCER_EPOCH")
INVALID_TXN_STATE = error_code("INVALID_TXN_STATE")
TRANSACTION_ABORTABLE = error_code("TRANSACTION_ABORTABLE")
INVALID_PRODUCER_ID_MAPPING = error_code("INVALID_PRODUCER_ID_MAPPING")

OFFSET_METADATA_MAX_BYTES = 4096
_LOAD_CHUNK = 1 << 20


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CoordinatorError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _join_error(code: int, member_id: str = "") -> dict[str, Any]:
    return {
        "error_code": code,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


class GroupCoordinator:
    """All groups of this broker. Public methods are called by ``tidelog.broker.handlers.group``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.groups: dict[str, Group] = {}
        self.loading = True
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
        # ZooKeeper mode: this broker coordinates only the groups of the __consumer_offsets partitions it leads
        self.cluster = bool(props.get("zookeeper.connect"))
        self.owned: dict[int, int] = {}  # partition -> leader epoch (cluster mode)
        self.loading_partitions: set[int] = set()
        self._load_generation: dict[int, int] = {}
        self._creating: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self.loaded = asyncio.Event()
        # (__consumer_offsets partition, producer id) -> groups holding pending transactional offsets of it
        # (Kafka's openTransactionsByGroup, inverted: a marker names the partition and the producer)
        self._open_txns: dict[tuple[int, int], set[str]] = {}
        # markers reported while their partition was loading: applied once its groups are installed
        self._deferred_markers: dict[int, list[tuple[int, bool]]] = {}
        # topics deleted while a __consumer_offsets partition was loading (-1: all of them, single node): their
        # offsets are removed from that partition's groups once installed
        self._deleted_while_loading: dict[int, set[str]] = {}
        # KIP-848 consumer groups (members in memory; their offsets live in ``groups`` as a classic group's)
        self.consumer = ConsumerGroupManager(self)

    # ============================================================== lifecycle

    @property
    def num_partitions(self) -> int:
        info = self.broker.topics.get(OFFSETS_TOPIC) if self.broker.topics is not None else None
        return info.num_partitions if info is not None else self.configured_partitions

    async def start(self) -> None:
        """Begin loading ``__consumer_offsets`` in the background; requests get LOAD_IN_PROGRESS meanwhile."""
        self._loop = asyncio.get_running_loop()
        self.active = True
        if self.cluster:
            # nothing is coordinated until ZooKeeper makes this broker leader of __consumer_offsets partitions
            # (:meth:`on_leadership_change`); each is loaded on its own then
            self.loading = False
            self.loaded.set()
        else:
            self._tasks.append(self._loop.create_task(self._load_all()))
        self._tasks.append(self._loop.create_task(self._expiry_loop()))

    async def _load_all(self) -> None:
        t0 = time.monotonic()
        logs = []
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is not None:
            for p in range(info.num_partitions):
                lg = self.broker.topics.get_log(OFFSETS_TOPIC, p)
                if lg is not None:
                    logs.append(lg)
        try:
            state = await asyncio.to_thread(_read_partitions, logs, self.num_partitions, adopt_misplaced=True)
        except Exception:
            log.exception("loading __consumer_offsets failed; groups start empty")
            state = Replay({}, {}, set(), Migration(), {})
        groups_v, offsets_v, _, migration, pending_v = state
        if migration:
            # written before tidelog placed groups as Kafka does (Utils.abs, not & 0x7fffffff): moved to the
            # group's own partition before any request sees the groups
            try:
                await self._migrate(migration)
            except Exception:
                log.exception("moving misplaced __consumer_offsets records failed; retried at the next start")
        now = _now_ms()
        for gid, gv in groups_v.items():
            self._install_group(gid, gv, now)
        for (gid, topic, part), ov in offsets_v.items():
            self._group(gid, create=True).offsets[(topic, part)] = ov  # type: ignore[union-attr]
        self._install_pending(pending_v)
        deleted = self._deleted_while_loading.pop(-1, None)
        if deleted:
            drop_topics(self, deleted, self.groups.values())
        self.loading = False
        for partition in list(self._deferred_markers):
            self._apply_deferred_markers(partition)
        self.loaded.set()
        log.info(
            "group coordinator loaded",
            extra={"kv": {"partitions": len(logs), "groups": len(self.groups),
                          "offsets": len(offsets_v), "seconds": round(time.monotonic() - t0, 3)}},
        )

    def _install_group(self, gid: str, gv: GroupValue, now: int) -> None:
        g = Group(gid)
        g.protocol_type = gv.protocol_type or None
        g.generation = gv.generation
        g.protocol_name = gv.protocol
        g.leader_id = gv.leader
        g.current_state_timestamp = gv.current_state_timestamp
        g.persisted = True
        for mv in gv.members:
            m = Member(
                mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host, mv.rebalance_timeout,
                mv.session_timeout, gv.protocol_type, [(gv.protocol or "", mv.subscription)], mv.assignment,
            )
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        self.groups[gid] = g
        for m in g.members.values():
            self._schedule_heartbeat(g, m)

    async def _migrate(self, migration: Migration) -> None:
        """Single node, at load: move misplaced records (tidelog's pre-Kafka placement) to their group's partition,
        Kafka's layout: first the records adopted, appended as they are (same key and value bytes) to the group's
        partition and flushed; only then a tombstone for every misplaced key still holding a value where it was
        found, so the cleaner removes it there. A crash in between leaves the records in both places; the next
        start finds them in the group's partition, adopts nothing and writes only the tombstones."""
        t0 = time.monotonic()
        failed = False
        for partition, entries in sorted(migration.moves.items()):
            for chunk in self._chunks(partition, entries):
                failed |= await self._append_to(partition, list(chunk), off_loop=True) != NONE
        if failed:  # the old records stay (and are adopted again at the next start): nothing may be lost
            log.warning("misplaced __consumer_offsets records not moved; retried at the next start",
                        extra={"kv": {"groups": len(migration.groups)}})
            return
        homes = [self.broker.topics.get_log(OFFSETS_TOPIC, p) for p in migration.moves]
        await asyncio.to_thread(lambda: [lg.flush() for lg in homes if lg is not None])
        for partition, keys in sorted(migration.tombstones.items()):
            tombstones: list[tuple[bytes, bytes | None]] = [(k, None) for k in keys]
            for chunk in self._chunks(partition, tombstones):
                failed |= await self._append_to(partition, list(chunk), off_loop=True) != NONE
        log.info(
            "moved misplaced __consumer_offsets records to their groups' partitions (pre-Kafka placement)",
            extra={"kv": {"groups": len(migration.groups), "records": migration.moved,
                          "tombstones": migration.tombstoned, "complete": not failed,
                          "seconds": round(time.monotonic() - t0, 3)}},
        )

    def _chunks(self, partition: int, entries: list[Any]) -> Iterable[list[Any]]:
        """``entries`` cut into batches that stay well under the partition's ``max.message.bytes``."""
        lg = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
        budget = max((lg.config.max_message_bytes if lg is not None else 1 << 20) // 2, 1)
        chunk: list[Any] = []
        size = 0
        for k, v in entries:
            n = len(k) + (len(v) if v is not None else 0) + 32
            if chunk and size + n > budget:
                yield chunk
                chunk, size = [], 0
            chunk.append((k, v))
            size += n
        if chunk:
            yield chunk

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
                m.join_future.set_result(_join_error(NOT_COORDINATOR, m.member_id))  # type: ignore[union-attr]
            if m.awaiting_sync:
                m.sync_future.set_result(self._sync_result(NOT_COORDINATOR, g))  # type: ignore[union-attr]

    # ============================================================== ZooKeeper mode: partition leadership

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """Called (on the loop) by the cluster broker whenever it becomes or stops being leader of a partition.

        Leader of a ``__consumer_offsets`` partition: load its groups from the local log in a worker thread
        (COORDINATOR_LOAD_IN_PROGRESS meanwhile), as Kafka's ``onElection``/``loadGroupsForPartition``. No longer
        leader: unload its groups (Kafka's ``onResignation``): waiting joins/syncs get NOT_COORDINATOR and the
        clients find the new coordinator."""
        if topic != OFFSETS_TOPIC or not self.cluster:
            return
        if is_leader:
            if partition in self.owned:
                self.owned[partition] = leader_epoch  # same leadership, newer epoch: nothing to reload
                return
            self.owned[partition] = leader_epoch
            self.loading_partitions.add(partition)
            gen = self._load_generation.get(partition, 0) + 1
            self._load_generation[partition] = gen
            self._spawn(self._load_partition(partition, gen))
            return
        if partition not in self.owned:
            return
        del self.owned[partition]
        self.loading_partitions.discard(partition)
        self._load_generation[partition] = self._load_generation.get(partition, 0) + 1  # a running load is stale
        n = self.num_partitions
        self.consumer.unload_partition(partition, n)
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

    async def _load_partition(self, partition: int, gen: int) -> None:
        t0 = time.monotonic()
        plog = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
        try:
            groups_v, offsets_v, misplaced, _, pending_v = await asyncio.to_thread(
                _read_partitions, [plog] if plog is not None else [], self.num_partitions, adopt_misplaced=False)
        except Exception:
            log.exception("loading __consumer_offsets partition failed; its groups start empty",
                          extra={"kv": {"partition": partition}})
            groups_v, offsets_v, misplaced, pending_v = {}, {}, set(), {}
        if misplaced:
            # records of groups another partition coordinates (tidelog's pre-Kafka placement): not installed here
            log.warning("skipped misplaced __consumer_offsets records of groups this partition does not coordinate",
                        extra={"kv": {"partition": partition, "groups": len(misplaced)}})
        if self._load_generation.get(partition) != gen or partition not in self.loading_partitions:
            return  # leadership lost (or changed) while loading
        now = _now_ms()
        for gid, gv in groups_v.items():
            old = self.groups.pop(gid, None)
            if old is not None:
                self._release_group(old)
            self._install_group(gid, gv, now)
        for (gid, topic, part), ov in offsets_v.items():
            self._group(gid, create=True).offsets[(topic, part)] = ov  # type: ignore[union-attr]
        for key in [k for k in self._open_txns if k[0] == partition]:
            del self._open_txns[key]
        self._install_pending(pending_v)
        deleted = self._deleted_while_loading.pop(partition, None)
        if deleted:
            n = self.num_partitions
            drop_topics(self, deleted, [g for gid, g in self.groups.items() if rec.partition_for(gid, n) == partition])
        self.loading_partitions.discard(partition)
        self._apply_deferred_markers(partition)
        log.info("loaded groups of __consumer_offsets partition", extra={"kv": {
            "partition": partition, "leader_epoch": self.owned.get(partition), "groups": len(groups_v),
            "offsets": len(offsets_v), "seconds": round(time.monotonic() - t0, 3)}})

    # ============================================================== deleted topics

    def on_topic_deleted(self, topic: str) -> None:
        """On the loop, once ``topic`` is deleted (one node: by DeleteTopics; ZooKeeper mode: when this broker sees
        it gone): its offsets leave every group coordinated here, tombstones written (``deleted_topics``), as
        Kafka's ``onPartitionsDeleted``. Partitions still loading get the same once their groups are installed."""
        if not self.active or topic == OFFSETS_TOPIC:
            return
        if self.loading and not self.cluster:
            self._deleted_while_loading.setdefault(-1, set()).add(topic)
        for p in self.loading_partitions:
            self._deleted_while_loading.setdefault(p, set()).add(topic)
        drop_topics(self, {topic}, self.groups.values())

    def _spawn(self, coro: Any) -> None:
        task = self._loop_().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def find_coordinator(self, group_id: str) -> tuple[int, str | None, tuple[int, str, int] | None]:
        """ZooKeeper mode: (error, message, (node id, host, port)) of the leader of the group's partition.
        Creates ``__consumer_offsets`` (through ZooKeeper; the controller elects its leaders) if it does not
        exist, answering COORDINATOR_NOT_AVAILABLE until it has a leader, as Kafka does."""
        unavailable = (COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", None)
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is None:
            if self._creating is None or self._creating.done():
                self._creating = self._loop_().create_task(self._create_offsets_topic())
            return unavailable
        md = self.broker.partition_metadata(OFFSETS_TOPIC, rec.partition_for(group_id, info.num_partitions))
        leader = md.get("leader_id", -1) if md else -1
        for b in self.broker.metadata_brokers() or ():
            if b["node_id"] == leader >= 0:
                return NONE, None, (b["node_id"], b["host"], b["port"])
        return unavailable

    async def _create_offsets_topic(self) -> None:
        live = len(self.broker.replica_manager.live_brokers())
        if live < self.replication_factor:
            log.warning("__consumer_offsets not created: fewer live brokers than offsets.topic.replication.factor",
                        extra={"kv": {"live": live, "replication_factor": self.replication_factor}})
            return
        try:
            await asyncio.to_thread(self._create_topic, self.replication_factor)
            log.info("__consumer_offsets created", extra={"kv": {"partitions": self.configured_partitions,
                                                                  "replication_factor": self.replication_factor}})
        except Exception as exc:
            if getattr(exc, "kafka_error", None) != "TOPIC_ALREADY_EXISTS":
                log.warning("cannot create __consumer_offsets", extra={"kv": {"error": repr(exc)}})

    # ============================================================== helpers

    def check(self, group_id: str | None) -> int:
        """The coordinator-level error for a request about ``group_id`` (0 = go ahead)."""
        if not self.active or self.broker.stopping:
            return NOT_COORDINATOR
        if self.cluster:
            if group_id is None:
                return INVALID_GROUP_ID
            info = self.broker.topics.get(OFFSETS_TOPIC)
            p = rec.partition_for(group_id, info.num_partitions) if info is not None else -1
            if p not in self.owned:
                return NOT_COORDINATOR
            return COORDINATOR_LOAD_IN_PROGRESS if p in self.loading_partitions else NONE
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        if group_id is None:
            return INVALID_GROUP_ID
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is not None:
            p = rec.partition_for(group_id, info.num_partitions)
            if self.broker.topics.get_log(OFFSETS_TOPIC, p) is None:
                return NOT_COORDINATOR
        return NONE

    def ensure_offsets_topic(self) -> Any:
        """Single node: the topic, created here (RF 1) on first use. ZooKeeper mode: the topic if known here."""
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is None and not self.cluster:
            info = self._create_topic(1)
        return info

    def _create_topic(self, replication_factor: int) -> Any:
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
            info = self.ensure_offsets_topic()
            if info is None:
                return COORDINATOR_NOT_AVAILABLE
            partition = rec.partition_for(group_id, info.num_partitions)
        except Exception as exc:
            return self._append_error(getattr(exc, "kafka_error", None) or repr(exc), offsets, group_id)
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
    def _append_error(name: str, offsets: bool, group_id: str) -> int:
        """Kafka's mapping of a failed ``__consumer_offsets`` append to the error the client gets."""
        log.warning("__consumer_offsets append failed", extra={"kv": {"group": group_id, "error": name}})
        if name in ("UNKNOWN_TOPIC_OR_PARTITION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"):
            return COORDINATOR_NOT_AVAILABLE
        if name in ("NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR", "FENCED_LEADER_EPOCH"):
            return NOT_COORDINATOR
        if name in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE"):
            return INVALID_COMMIT_OFFSET_SIZE if offsets else UNKNOWN_SERVER_ERROR
        if name == "REQUEST_TIMED_OUT":
            return REQUEST_TIMED_OUT if offsets else REBALANCE_IN_PROGRESS
        return code_of(name) if offsets else UNKNOWN_SERVER_ERROR

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

    def _new_member_id(self, prefix: str | None) -> str:
        return f"{prefix or ''}-{uuid.uuid4()}"

    def _loop_(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # ============================================================== heartbeats and expiry

    def _schedule_heartbeat(self, g: Group, m: Member) -> None:
        m.cancel_timer()
        m.heartbeat_timer = self._loop_().call_later(
            m.session_timeout_ms / 1000.0, self._heartbeat_expired, g.group_id, m.member_id
        )

    def _heartbeat_expired(self, group_id: str, member_id: str) -> None:
        g = self.groups.get(group_id)
        if g is None:
            return
        m = g.members.get(member_id)
        if m is None:
            return
        m.heartbeat_timer = None
        if m.awaiting_join or m.awaiting_sync:
            self._schedule_heartbeat(g, m)  # a member waiting on us is alive
            return
        log.info("member session expired", extra={"kv": {"group": group_id, "member": member_id,
                                                         "generation": g.generation}})
        self._remove_member_and_update(g, m)

    def _remove_member(self, g: Group, m: Member, code: int = UNKNOWN_MEMBER_ID) -> None:
        m.cancel_timer()
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
            g.static_members.pop(m.group_instance_id, None)
        if m.awaiting_join:
            m.join_future.set_result(_join_error(code, m.member_id))  # type: ignore[union-attr]
        if m.awaiting_sync:
            m.sync_future.set_result(self._sync_result(code, g))  # type: ignore[union-attr]
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _remove_member_and_update(self, g: Group, m: Member) -> None:
        self._remove_member(g, m)
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, f"member {m.member_id} left or expired")
        elif g.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(g)

    def _add_pending(self, g: Group, member_id: str, session_timeout_ms: int) -> None:
        def expire() -> None:
            if g.pending_members.pop(member_id, "gone") != "gone" and g.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(g)

        g.pending_members[member_id] = self._loop_().call_later(session_timeout_ms / 1000.0, expire)

    # ============================================================== rebalancing

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        now = _now_ms()
        if g.state == GroupState.COMPLETING_REBALANCE:
            # members waiting for their assignment must rejoin
            for m in g.members.values():
                m.assignment = b""
                if m.awaiting_sync:
                    m.sync_future.set_result(self._sync_result(REBALANCE_IN_PROGRESS, g))  # type: ignore[union-attr]
        if g.join_timer is not None:
            g.join_timer.cancel()
        rebalance_timeout = g.rebalance_timeout_ms()
        if g.state == GroupState.EMPTY and self.initial_rebalance_delay_ms > 0:
            delay = min(self.initial_rebalance_delay_ms, rebalance_timeout)
            g.initial_delay_active = True
            g.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
            g.new_member_added = False
            g.join_timer = self._loop_().call_later(delay / 1000.0, self._initial_delay_expired, g)
        else:
            g.initial_delay_active = False
            g.join_timer = self._loop_().call_later(rebalance_timeout / 1000.0, self._complete_join, g)
        g.transition(GroupState.PREPARING_REBALANCE, now)
        log.info("preparing to rebalance group", extra={"kv": {"group": g.group_id, "generation": g.generation,
                                                               "reason": reason}})
        # Kafka's tryCompleteElseWatch: when every member has already joined (a one-member group, a leader's
        # rejoin, no initial delay, the last member gone) the join completes now, not at the rebalance timeout
        self._maybe_complete_join(g)

    def _initial_delay_expired(self, g: Group) -> None:
        g.join_timer = None
        if g.new_member_added and g.initial_delay_remaining_ms > 0:
            g.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, g.initial_delay_remaining_ms)
            g.initial_delay_remaining_ms -= delay
            g.join_timer = self._loop_().call_later(delay / 1000.0, self._initial_delay_expired, g)
            return
        g.initial_delay_active = False
        self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state == GroupState.PREPARING_REBALANCE and not g.initial_delay_active and g.all_members_joined():
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None
        g.initial_delay_active = False
        for m in [m for m in g.members.values() if not m.awaiting_join]:
            log.info("removing member that did not rejoin", extra={"kv": {"group": g.group_id, "member": m.member_id}})
            self._remove_member(g, m)
        now = _now_ms()
        g.generation += 1
        if g.is_empty():
            g.protocol_name = None
            g.leader_id = None
            g.transition(GroupState.EMPTY, now)
            self._spawn(self._store_group(g))  # nobody waits for it (Kafka neither)
            log.info("group is empty", extra={"kv": {"group": g.group_id, "generation": g.generation}})
            return
        g.protocol_name = g.select_protocol()
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.transition(GroupState.COMPLETING_REBALANCE, now)
        log.info("group rebalanced", extra={"kv": {"group": g.group_id, "generation": g.generation,
                                                   "members": len(g.members), "protocol": g.protocol_name}})
        for m in g.members.values():
            members = []
            if m.member_id == g.leader_id:
                members = [
                    {"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                     "metadata": o.metadata_for(g.protocol_name)}
                    for o in g.members.values()
                ]
            result = {
                "error_code": NONE,
                "generation_id": g.generation,
                "protocol_type": g.protocol_type,
                "protocol_name": g.protocol_name,
                "leader": g.leader_id,
                "skip_assignment": False,
                "member_id": m.member_id,
                "members": members,
            }
            m.is_new = False
            assert m.join_future is not None
            m.join_future.set_result(result)
            self._schedule_heartbeat(g, m)

    # ============================================================== JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> dict[str, Any]:
        err = self.check(group_id)
        if err:
            return _join_error(err, member_id)
        if not group_id:
            return _join_error(INVALID_GROUP_ID, member_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return _join_error(INVALID_SESSION_TIMEOUT, member_id)
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                return _join_error(UNKNOWN_MEMBER_ID, member_id)
            g = self._group(group_id, create=True)
            assert g is not None
        if g.state == GroupState.DEAD:
            return _join_error(COORDINATOR_NOT_AVAILABLE if not member_id else UNKNOWN_MEMBER_ID, member_id)
        if not g.supports(protocol_type, protocols):
            return _join_error(INCONSISTENT_GROUP_PROTOCOL, member_id)
        loop = self._loop_()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()

        if not member_id:
            if group_instance_id is not None and group_instance_id in g.static_members:
                return await self._replace_static_member(
                    g, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                    protocol_type, protocols,
                )
            if len(g.members) + len(g.pending_members) >= self.group_max_size:
                return _join_error(GROUP_MAX_SIZE_REACHED)
            new_id = self._new_member_id(group_instance_id if group_instance_id is not None else client_id)
            if require_known_member_id and group_instance_id is None:
                self._add_pending(g, new_id, session_timeout_ms)
                return _join_error(MEMBER_ID_REQUIRED, new_id)
            m = Member(new_id, group_instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                       protocol_type, list(protocols))
            self._add_member(g, m, fut)
            return await fut

        # a known (or pending) member id
        if member_id in g.pending_members:
            timer = g.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            if group_instance_id is not None and group_instance_id in g.static_members:
                return _join_error(FENCED_INSTANCE_ID, member_id)
            m = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                       session_timeout_ms, protocol_type, list(protocols))
            self._add_member(g, m, fut)
            return await fut
        m_or_none = g.members.get(member_id)
        if group_instance_id is not None:
            known = g.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return _join_error(FENCED_INSTANCE_ID, member_id)
        if m_or_none is None:
            return _join_error(UNKNOWN_MEMBER_ID, member_id)
        m = m_or_none
        if g.state == GroupState.PREPARING_REBALANCE:
            self._update_member(g, m, protocols, session_timeout_ms, rebalance_timeout_ms, fut)
            self._maybe_complete_join(g)
            return await fut
        if g.state == GroupState.COMPLETING_REBALANCE:
            if m.matches(protocols):
                return self._current_join_result(g, m)  # a retried join: same answer, no new rebalance
            self._update_member(g, m, protocols, session_timeout_ms, rebalance_timeout_ms, fut)
            self._prepare_rebalance(g, f"member {member_id} changed its protocols")
            return await fut
        if g.state == GroupState.STABLE:
            if m.member_id != g.leader_id and m.matches(protocols):
                return self._current_join_result(g, m)
            self._update_member(g, m, protocols, session_timeout_ms, rebalance_timeout_ms, fut)
            self._prepare_rebalance(g, f"member {member_id} rejoined" + (" (leader)" if m.member_id == g.leader_id else ""))
            return await fut
        return _join_error(UNKNOWN_MEMBER_ID, member_id)

    def _current_join_result(self, g: Group, m: Member) -> dict[str, Any]:
        members = []
        if m.member_id == g.leader_id:
            members = [{"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                        "metadata": o.metadata_for(g.protocol_name)} for o in g.members.values()]
        self._schedule_heartbeat(g, m)
        return {
            "error_code": NONE,
            "generation_id": g.generation,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol_name,
            "leader": g.leader_id or "",
            "skip_assignment": False,
            "member_id": m.member_id,
            "members": members,
        }

    def _add_member(self, g: Group, m: Member, fut: asyncio.Future[dict[str, Any]]) -> None:
        if g.is_empty():
            g.protocol_type = m.protocol_type
        m.join_future = fut
        m.is_new = True
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
        if g.leader_id is None:
            g.leader_id = m.member_id
        g.new_member_added = True
        if g.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, f"adding new member {m.member_id}")
        else:
            self._maybe_complete_join(g)
        self._schedule_heartbeat(g, m)

    def _update_member(
        self, g: Group, m: Member, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
        rebalance_timeout_ms: int, fut: asyncio.Future[dict[str, Any]],
    ) -> None:
        m.protocols = list(protocols)
        m.session_timeout_ms = session_timeout_ms
        m.rebalance_timeout_ms = rebalance_timeout_ms
        if m.awaiting_join:
            # a duplicate join from the same member: the older request gets the rebalance error
            m.join_future.set_result(_join_error(REBALANCE_IN_PROGRESS, m.member_id))  # type: ignore[union-attr]
        m.join_future = fut

    async def _replace_static_member(
        self, g: Group, instance_id: str, client_id: str, client_host: str, session_timeout_ms: int,
        rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> dict[str, Any]:
        old_id = g.static_members[instance_id]
        old = g.members[old_id]
        new_id = self._new_member_id(instance_id)
        old.cancel_timer()
        if old.awaiting_join:
            old.join_future.set_result(_join_error(FENCED_INSTANCE_ID, old_id))  # type: ignore[union-attr]
        if old.awaiting_sync:
            old.sync_future.set_result(self._sync_result(FENCED_INSTANCE_ID, g))  # type: ignore[union-attr]
        del g.members[old_id]
        same_protocols = old.matches(protocols)
        m = Member(new_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                   protocol_type, list(protocols), old.assignment)
        g.members[new_id] = m
        g.static_members[instance_id] = new_id
        if g.leader_id == old_id:
            g.leader_id = new_id
        log.info("static member replaced", extra={"kv": {"group": g.group_id, "instance": instance_id,
                                                         "old": old_id, "new": new_id}})
        if g.state == GroupState.STABLE and same_protocols:
            err = await self._store_group(g)
            if err or self.groups.get(g.group_id) is not g:
                return _join_error(err or NOT_COORDINATOR, new_id)
            result = self._current_join_result(g, m)
            result["members"] = []  # the static leader keeps the current assignment: nothing to compute
            return result
        fut: asyncio.Future[dict[str, Any]] = self._loop_().create_future()
        m.join_future = fut
        if g.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        else:
            self._prepare_rebalance(g, f"static member {instance_id} rejoined with new protocols")
        self._schedule_heartbeat(g, m)
        return await fut

    # ============================================================== SyncGroup

    def _sync_result(self, code: int, g: Group | None, assignment: bytes = b"") -> dict[str, Any]:
        return {
            "error_code": code,
            "protocol_type": g.protocol_type if g is not None and code == NONE else None,
            "protocol_name": g.protocol_name if g is not None and code == NONE else None,
            "assignment": assignment,
        }

    def _validate_member(self, g: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            known = g.static_members.get(instance_id)
            if known is not None and known != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        return NONE

    async def sync_group(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]],
    ) -> dict[str, Any]:
        err = self.check(group_id)
        if err:
            return self._sync_result(err, None)
        g = self.groups.get(group_id)
        if g is None:
            return self._sync_result(UNKNOWN_MEMBER_ID, None)
        if g.state == GroupState.DEAD:
            return self._sync_result(COORDINATOR_NOT_AVAILABLE, None)
        err = self._validate_member(g, member_id, group_instance_id)
        if err:
            return self._sync_result(err, None)
        if generation_id != g.generation:
            return self._sync_result(ILLEGAL_GENERATION, None)
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != g.protocol_name
        ):
            return self._sync_result(INCONSISTENT_GROUP_PROTOCOL, None)
        m = g.members[member_id]
        if g.state == GroupState.PREPARING_REBALANCE:
            return self._sync_result(REBALANCE_IN_PROGRESS, None)
        if g.state == GroupState.STABLE:
            self._schedule_heartbeat(g, m)
            return self._sync_result(NONE, g, m.assignment)
        if g.state != GroupState.COMPLETING_REBALANCE:
            return self._sync_result(UNKNOWN_MEMBER_ID, None)
        fut: asyncio.Future[dict[str, Any]] = self._loop_().create_future()
        if m.awaiting_sync:
            m.sync_future.set_result(self._sync_result(REBALANCE_IN_PROGRESS, None))  # type: ignore[union-attr]
        m.sync_future = fut
        self._schedule_heartbeat(g, m)
        if member_id == g.leader_id:
            given = {mid: bytes(a) for mid, a in assignments}
            for mem in g.members.values():
                mem.assignment = given.get(mem.member_id, b"")
            generation = g.generation
            err = await self._store_group(g)
            if self.groups.get(group_id) is not g:
                return await fut  # unloaded meanwhile (leadership moved): answered NOT_COORDINATOR
            if g.state == GroupState.COMPLETING_REBALANCE and g.generation == generation:
                if err:
                    for mem in g.members.values():
                        mem.assignment = b""
                        if mem.awaiting_sync:
                            mem.sync_future.set_result(self._sync_result(err, None))  # type: ignore[union-attr]
                    self._prepare_rebalance(g, "storing the assignment failed")
                else:
                    g.transition(GroupState.STABLE, _now_ms())
                    for mem in g.members.values():
                        if mem.awaiting_sync:
                            mem.sync_future.set_result(self._sync_result(NONE, g, mem.assignment))  # type: ignore[union-attr]
                    log.info("group stable", extra={"kv": {"group": g.group_id, "generation": g.generation,
                                                           "members": len(g.members)}})
        return await fut

    # ============================================================== Heartbeat / LeaveGroup

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        err = self.check(group_id)
        if err:
            return err
        g = self.groups.get(group_id)
        if g is None:
            return UNKNOWN_MEMBER_ID
        if g.state == GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if g.state == GroupState.EMPTY:
            return UNKNOWN_MEMBER_ID
        err = self._validate_member(g, member_id, group_instance_id)
        if err:
            return err
        m = g.members[member_id]
        if g.state == GroupState.PREPARING_REBALANCE:
            self._schedule_heartbeat(g, m)
            return REBALANCE_IN_PROGRESS
        if generation_id != g.generation:
            return ILLEGAL_GENERATION
        self._schedule_heartbeat(g, m)
        return NONE

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[dict[str, Any]]]:
        """``members`` = [(member_id, group_instance_id)]; returns (top-level error, per-member results)."""
        err = self.check(group_id)
        if err:
            return err, []
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return UNKNOWN_MEMBER_ID, [
                {"member_id": mid, "group_instance_id": iid, "error_code": UNKNOWN_MEMBER_ID} for mid, iid in members
            ]
        results = []
        left: list[Member] = []
        for mid, iid in members:
            code = NONE
            target: Member | None = None
            if iid is not None:
                known = g.static_members.get(iid)
                if known is None:
                    code = UNKNOWN_MEMBER_ID
                elif mid and mid != known:
                    code = FENCED_INSTANCE_ID
                else:
                    target = g.members.get(known)
            elif mid in g.pending_members:
                timer = g.pending_members.pop(mid)
                if timer is not None:
                    timer.cancel()
            else:
                target = g.members.get(mid)
                if target is None:
                    code = UNKNOWN_MEMBER_ID
            if target is not None:
                left.append(target)
            results.append({"member_id": mid, "group_instance_id": iid, "error_code": code})
        for m in left:
            log.info("member left group", extra={"kv": {"group": group_id, "member": m.member_id}})
            self._remove_member_and_update(g, m)
        if g.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        return NONE, results

    # ============================================================== offsets

    async def commit_offsets(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
        retention_time_ms: int, offsets: list[tuple[str, int, int, int, str | None]], api_version: int = 8,
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """``offsets`` = [(topic, partition, offset, leader_epoch, metadata)]. Returns (group error, per-tp)."""
        err = self.check(group_id)
        if not err and not group_id:
            err = INVALID_GROUP_ID
        if not err and self.consumer.is_consumer_group(group_id):  # KIP-848: member id and member epoch
            err = self.consumer.validate_commit(group_id, member_id, generation_id, api_version)
        elif not err:
            err = self._validate_commit(group_id, generation_id, member_id, group_instance_id)
        if err:
            return err, {(t, p): err for t, p, *_ in offsets}
        g = self._group(group_id, create=True)
        assert g is not None
        now = _now_ms()
        expire = now + retention_time_ms if retention_time_ms is not None and retention_time_ms >= 0 else -1
        results: dict[tuple[str, int], int] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[tuple[str, int], OffsetValue]] = []
        topics = self.broker.topics
        for topic, part, offset, epoch, metadata in offsets:
            info = topics.get(topic)
            if info is None or not 0 <= part < info.num_partitions:
                results[(topic, part)] = UNKNOWN_TOPIC_OR_PARTITION
                continue
            meta = metadata or ""
            if len(meta.encode("utf-8")) > self.metadata_max_bytes:
                results[(topic, part)] = OFFSET_METADATA_TOO_LARGE
                continue
            ov = OffsetValue(offset, epoch if epoch is not None else -1, meta, now, expire)
            entries.append((rec.encode_offset_key(group_id, topic, part), rec.encode_offset_value(ov)))
            accepted.append(((topic, part), ov))
        def positions(first: int) -> None:
            for i, (_, ov) in enumerate(accepted):
                ov.record_offset = first + i

        code = await self._append(group_id, entries, on_appended=positions)
        current = self.groups.get(group_id)
        for tp, ov in accepted:
            results[tp] = code
            if code == NONE and current is not None:
                # a transaction committed while this write waited for the ISR keeps its offset if written later
                _materialize(current.offsets, {tp: ov})
        return NONE, results

    def _validate_commit(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        g = self.groups.get(group_id)
        if g is None:
            return NONE if generation_id < 0 else ILLEGAL_GENERATION
        if g.state == GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and g.state == GroupState.EMPTY:
            return NONE  # an admin / simple-consumer commit
        if g.state == GroupState.EMPTY and generation_id >= 0 and not g.members:
            return ILLEGAL_GENERATION if member_id == "" else UNKNOWN_MEMBER_ID
        err = self._validate_member(g, member_id, instance_id)
        if err:
            return err
        if generation_id != g.generation:
            return ILLEGAL_GENERATION
        if g.state == GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        m = g.members[member_id]
        self._schedule_heartbeat(g, m)  # a commit proves the member is alive (Kafka does the same)
        return NONE

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, *, require_stable: bool = False,
    ) -> tuple[int, list[tuple[str, int, OffsetValue | None, int]]]:
        """(group error, [(topic, partition, committed value or None, partition error)]); ``partitions`` None =
        all committed. ``require_stable`` (OffsetFetch v7+, KIP-447): a partition with a pending transactional
        offset of the group answers UNSTABLE_OFFSET_COMMIT and no offset (Kafka's OffsetMetadataManager.
        fetchOffsets / fetchAllOffsets); without it, the last committed offset is answered."""
        err = self.check(group_id)
        if err:
            return err, [(t, p, None, NONE) for t, p in partitions or ()]
        g = self.groups.get(group_id)
        stored = g.offsets if g is not None else {}
        wanted = sorted(stored) if partitions is None else partitions
        rows: list[tuple[str, int, OffsetValue | None, int]] = []
        for t, p in wanted:
            if require_stable and g is not None and g.has_pending_txn_offset((t, p)):
                rows.append((t, p, None, UNSTABLE_OFFSET_COMMIT))
            else:
                rows.append((t, p, stored.get((t, p)), NONE))
        return NONE, rows

    # ============================================================== transactional offsets (KIP-98, KIP-447)

    async def commit_txn_offsets(
        self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
        generation_id: int, group_instance_id: str | None, offsets: dict[tuple[str, int], Any], *,
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
        known: list[tuple[tuple[str, int], Any]] = []
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
            err = await self._verify_txn(transactional_id, group_id, producer_id, producer_epoch, api_version)
        if not err and self.consumer.is_consumer_group(group_id):  # KIP-848 member id and epoch
            err = self.consumer.validate_commit(group_id, member_id, generation_id, api_version, transactional=True)
        elif not err:
            err = self._validate_txn_commit(group_id, generation_id, member_id, group_instance_id)
        if err:
            results.update((tp, err) for tp, _ in known)
            return results
        now = _now_ms()
        entries: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[tuple[str, int], OffsetValue]] = []
        for tp, value in known:
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

    async def _verify_txn(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
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
        if verify is None or not getattr(coord, "verification_enabled", True):
            return NONE
        tp = (OFFSETS_TOPIC, rec.partition_for(group_id, self.num_partitions))
        try:
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

    def _validate_txn_commit(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
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

    def on_txn_marker(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` was appended to ``__consumer_offsets-<offsets_partition>``
        (called on the event loop by whoever appended it, after the append succeeded). COMMIT: the producer's
        pending offsets of the groups of that partition become the committed ones, each only if its record lies
        later in the log than the committed offset it would replace (Kafka's replayEndTransactionMarker: the
        higher record offset wins, so a plain commit written after the transactional one stays). ABORT: they are
        dropped. A marker for a partition still loading is applied once its groups are installed."""
        if (self.loading and not self.cluster) or offsets_partition in self.loading_partitions:
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

    def _install_pending(self, pending: dict[int, dict[int, dict[tuple[str, str, int], OffsetValue]]]) -> None:
        for partition, by_producer in pending.items():
            for producer_id, offsets in by_producer.items():
                for (gid, topic, part), ov in offsets.items():
                    g = self._group(gid, create=True)
                    assert g is not None
                    g.pending_txn_offsets.setdefault(producer_id, {})[(topic, part)] = ov
                    self._open_txns.setdefault((partition, producer_id), set()).add(gid)

    def _apply_deferred_markers(self, partition: int) -> None:
        for producer_id, commit in self._deferred_markers.pop(partition, ()):
            self.on_txn_marker(partition, producer_id, commit)

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        err = self.check(group_id)
        if err:
            return err, {}
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return GROUP_ID_NOT_FOUND, {}
        results: dict[tuple[str, int], int] = {}
        subscribed: set[str] | None = set()
        if self.consumer.active(group_id):
            subscribed = self.consumer.subscribed_topics(group_id)
        elif g.state != GroupState.EMPTY:
            if g.protocol_type != "consumer":
                return NON_EMPTY_GROUP, {}
            subscribed = g.subscribed_topics()
        entries = []
        to_delete = []
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                results[tp] = GROUP_SUBSCRIBED_TO_TOPIC
                continue
            results[tp] = NONE
            # Kafka: a tombstone if the partition has a committed or a pending transactional offset; replayed, a
            # tombstone removes both
            if tp in g.offsets or g.has_pending_txn_offset(tp):
                entries.append((rec.encode_offset_key(group_id, tp[0], tp[1]), None))
                to_delete.append(tp)
        code = await self._append(group_id, entries)
        if code:
            return code, {}
        for tp in to_delete:
            g.offsets.pop(tp, None)
            g.drop_pending_txn_offset(tp)
        return NONE, results

    # ============================================================== describe / list / delete

    def describe_group(self, group_id: str) -> dict[str, Any]:
        return describe.describe_group(self, group_id)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[dict[str, Any]]]:
        return describe.list_groups(self, states, types)

    async def delete_group(self, group_id: str) -> int:
        err = self.check(group_id)
        if err:
            return err
        if self.consumer.active(group_id):
            return NON_EMPTY_GROUP
        g = self.groups.get(group_id)
        if (g is None or g.state == GroupState.DEAD) and self.consumer.is_consumer_group(group_id):
            self.consumer.drop(group_id)  # an empty KIP-848 group without offsets
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

    async def expire_offsets(self, now_ms: int) -> int:
        """Remove expired offsets (and Empty groups left with none); returns how many offsets expired."""
        removed = 0
        for g in list(self.groups.values()):
            if g.state != GroupState.EMPTY or self.consumer.active(g.group_id):
                continue
            expired = []
            for tp, ov in g.offsets.items():
                if g.has_pending_txn_offset(tp):
                    continue  # Kafka: not while a transactional offset of the partition is pending
                if ov.expire_timestamp >= 0:
                    due = now_ms >= ov.expire_timestamp
                else:
                    base = max(ov.commit_timestamp, g.current_state_timestamp)
                    due = now_ms - base >= self.retention_ms
                if due:
                    expired.append(tp)
            entries: list[tuple[bytes, bytes | None]] = [
                (rec.encode_offset_key(g.group_id, t, p), None) for t, p in expired
            ]
            # a member id handed out with MEMBER_ID_REQUIRED keeps the group: its join must find it
            # ... and not while a transaction of the group is open (Kafka's cleanupExpiredOffsets)
            drop_group = (len(expired) == len(g.offsets) and not g.members and not g.pending_members
                          and not g.pending_txn_offsets)
            if drop_group:
                entries.append((rec.encode_group_key(g.group_id), None))
            if not entries:
                continue
            # as Kafka's cleanupGroupMetadata: out of the cache first, then the tombstones (a failed write only
            # means the offsets come back on the next load and expire again)
            for tp in expired:
                g.offsets.pop(tp, None)
            removed += len(expired)
            if drop_group:
                g.transition(GroupState.DEAD, now_ms)
                self.groups.pop(g.group_id, None)
                self.consumer.drop(g.group_id)
            await self._append(g.group_id, entries)
            if expired:
                log.info("offsets expired", extra={"kv": {"group": g.group_id, "count": len(expired),
                                                          "group_removed": drop_group}})
        return removed


# ------------------------------------------------------------------------------------------------ loading


@dataclass(slots=True)
class Migration:
    """What moves misplaced ``__consumer_offsets`` records to their group's partition (single node, see
    :func:`_read_partitions`): ``moves`` = home partition -> ``(key, value)`` records to append there (the key and
    value bytes as found), ``tombstones`` = partition found in -> keys whose latest record there is a value (a
    tombstone is appended for each), ``groups`` = the groups concerned."""

    moves: dict[int, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    tombstones: dict[int, list[bytes]] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.moves or self.tombstones)

    @property
    def moved(self) -> int:
        return sum(len(v) for v in self.moves.values())

    @property
    def tombstoned(self) -> int:
        return sum(len(v) for v in self.tombstones.values())


class Replay(NamedTuple):
    groups: dict[str, GroupValue]
    offsets: dict[tuple[str, str, int], OffsetValue]
    misplaced: set[str]  # groups read from (adopt_misplaced) or skipped as (otherwise) misplaced records
    migration: Migration
    # transactional offsets whose transaction has no marker yet: partition -> producer id -> (group, topic,
    # partition) -> value
    pending: dict[int, dict[int, dict[tuple[str, str, int], OffsetValue]]]


def _materialize(offsets: dict[Any, OffsetValue], pending: dict[Any, OffsetValue]) -> None:
    """Committed offsets take ``pending`` ones whose record lies later in the log (Kafka's rule when a
    transaction commits: the offset with the higher record offset wins, whatever order they reach memory in)."""
    for key, ov in pending.items():
        current = offsets.get(key)
        if current is None or ov.record_offset > current.record_offset:
            offsets[key] = ov


def _read_partitions(logs: list[Any], num_partitions: int, *, adopt_misplaced: bool) -> Replay:
    """Blocking: replay ``__consumer_offsets`` partitions (latest record per key wins, tombstones delete).

    A record in a partition that is not its group's (:func:`records.partition_for`) is *misplaced*: tidelog placed
    groups by ``hashCode & 0x7fffffff`` before it followed Kafka's ``Utils.abs``. With ``adopt_misplaced`` (single
    node, every partition replayed) a misplaced record is applied only for a key (group metadata key, offset key)
    that has no record at all, value or tombstone, in the group's own partition, so whatever was written there
    since the upgrade wins and a deletion since is not undone; and the returned :class:`Migration` says how to
    move them for good (the coordinator applies it before it reports loaded): the latest record of every key
    adopted is appended, same key and value bytes, to the group's partition, and every key whose latest record
    in a partition not its group's is a value gets a tombstone there (adopted or not), so the cleaner removes it
    and no old record can come back once a later deletion's tombstone is compacted away. A key whose latest
    misplaced record is already a tombstone needs nothing, which makes a second replay find no work. Without
    ``adopt_misplaced`` (ZooKeeper mode, one partition loaded on its own) misplaced records are skipped: this
    partition does not coordinate their groups. Returns the groups, the offsets, the ids of the groups read from
    (``adopt_misplaced``) or skipped as (otherwise) misplaced records, and the migration (empty without
    ``adopt_misplaced``).

    Transactions, as Kafka's loader (``OffsetMetadataManager.replay``/``replayEndTransactionMarker``): an offset
    record in a batch with a producer id is pending for that producer; its COMMIT marker (a control batch of the
    producer in the same partition) makes it committed if its record offset is higher than the committed one's,
    its ABORT marker drops it; a tombstone removes the committed and every pending offset of its key. Pending
    offsets whose transaction has no marker by the end of the log stay pending (returned in ``pending``); the
    transaction coordinator writes the marker later. Transactional records outside their group's partition are
    never adopted (tidelog wrote none before the upgrade)."""
    groups: dict[str, GroupValue] = {}
    offsets: dict[tuple[str, str, int], OffsetValue] = {}
    pending: dict[int, dict[int, dict[tuple[str, str, int], OffsetValue]]] = {}
    # misplaced records, replayed apart (with their key and value bytes); keys written in the group's own
    # partition (value or tombstone)
    stray_groups: dict[str, tuple[GroupValue, bytes, bytes]] = {}
    stray_offsets: dict[tuple[str, str, int], tuple[OffsetValue, bytes, bytes]] = {}
    # (partition, key bytes) of misplaced records -> (group, latest record there is a value); by key bytes as
    # the cleaner compacts by them
    stray_live: dict[tuple[int, bytes], tuple[str, bool]] = {}
    own_group_keys: set[str] = set()
    own_offset_keys: set[tuple[str, str, int]] = set()
    skipped: set[str] = set()
    home: dict[str, int] = {}  # group -> its partition (Java's hashCode per record would be slow)
    for lg in logs:
        partition = lg.partition
        open_txns = pending.setdefault(partition, {})
        offset = lg.log_start_offset
        end = lg.log_end_offset
        while offset < end:
            info = lg.read(offset, _LOAD_CHUNK, max_offset=end, min_one_batch=True)
            if info.size == 0:
                break
            data = info.read_bytes()
            advanced = False
            for _, header, records in decode_batches(data, max_decompressed=64 << 20):
                offset = max(offset, header.last_offset + 1)
                advanced = True
                producer_id = header.producer_id
                if header.is_control:
                    marker = None
                    for r in records:
                        try:
                            marker = parse_control_record(r)
                        except Exception as exc:
                            log.warning("skipping undecodable control record in __consumer_offsets", extra={
                                "kv": {"partition": partition, "offset": r.offset, "error": str(exc)}})
                        break
                    if marker is not None and marker.type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                        txn = open_txns.pop(producer_id, None)
                        if txn and marker.type == ControlRecordType.COMMIT:
                            _materialize(offsets, txn)
                    continue
                for r in records:
                    if r.key is None:
                        continue
                    try:
                        key = rec.decode_key(r.key)
                        p = home.get(key.group)
                        if p is None:
                            p = home[key.group] = rec.partition_for(key.group, num_partitions)
                        own = p == partition
                        if not own and not adopt_misplaced:
                            skipped.add(key.group)
                            continue
                        if not own and producer_id >= 0:
                            continue
                        # a misplaced record's bytes, to move it as it is
                        raw_key = b"" if own else bytes(r.key)
                        raw_value = None if own or r.value is None else bytes(r.value)
                        if isinstance(key, rec.OffsetKey):
                            k = (key.group, key.topic, key.partition)
                            ov = None if r.value is None else rec.decode_offset_value(r.value)
                            if own:
                                own_offset_keys.add(k)
                                if ov is None:
                                    offsets.pop(k, None)
                                    for txn in open_txns.values():
                                        txn.pop(k, None)
                                elif producer_id >= 0:
                                    ov.record_offset = r.offset
                                    open_txns.setdefault(producer_id, {})[k] = ov
                                else:
                                    ov.record_offset = r.offset
                                    offsets[k] = ov
                            elif ov is None or raw_value is None:
                                stray_offsets.pop(k, None)
                            else:
                                stray_offsets[k] = (ov, raw_key, raw_value)
                        else:
                            gv = None if r.value is None else rec.decode_group_value(r.value)
                            if own:
                                own_group_keys.add(key.group)
                                if gv is None:
                                    groups.pop(key.group, None)
                                else:
                                    groups[key.group] = gv
                            elif gv is None or raw_value is None:
                                stray_groups.pop(key.group, None)
                            else:
                                stray_groups[key.group] = (gv, raw_key, raw_value)
                        if not own:
                            stray_live[(partition, raw_key)] = (key.group, raw_value is not None)
                    except rec.SchemaError as exc:
                        log.warning("skipping undecodable __consumer_offsets record",
                                    extra={"kv": {"partition": partition, "offset": r.offset, "error": str(exc)}})
            if not advanced:
                break
    pending = {p: {pid: offs for pid, offs in txns.items() if offs} for p, txns in pending.items()}
    pending = {p: txns for p, txns in pending.items() if txns}
    if not adopt_misplaced:
        return Replay(groups, offsets, skipped, Migration(), pending)
    adopted: set[str] = set()
    migration = Migration()
    for gid, (gv, raw_key, raw_value) in stray_groups.items():
        if gid not in own_group_keys:
            groups[gid] = gv
            adopted.add(gid)
            migration.moves.setdefault(home[gid], []).append((raw_key, raw_value))
    for k, (ov, raw_key, raw_value) in stray_offsets.items():
        if k not in own_offset_keys:
            offsets[k] = ov
            adopted.add(k[0])
            migration.moves.setdefault(home[k[0]], []).append((raw_key, raw_value))
    for (partition, raw_key), (gid, live) in stray_live.items():
        if live:
            migration.tombstones.setdefault(partition, []).append(raw_key)
            migration.groups.add(gid)
    migration.groups |= adopted
    return Replay(groups, offsets, adopted, migration, pending)
