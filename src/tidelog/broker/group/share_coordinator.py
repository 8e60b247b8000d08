"""The share coordinator (Kafka's ``ShareCoordinatorService`` / ``ShareCoordinatorShard``): the persisted state of
share partitions in ``__share_group_state``, served through Initialize/Read/Write/DeleteShareGroupState and
ReadShareGroupStateSummary (APIs 83-87) to the share-partition leaders (``share_persister``).

* **Driven by partition leadership** as the group coordinator (decision 0065): the leader of a
  ``__share_group_state`` partition coordinates the share partitions whose coordinator key
  (``"group:topicId:partition"``) hashes to it; on election it replays the partition's log in a worker thread
  (COORDINATOR_LOAD_IN_PROGRESS meanwhile), on resignation it forgets them (NOT_COORDINATOR).
* **Records** (``share_state_records``): a ShareSnapshot (the whole state) when a share partition is initialized,
  when a write carries a higher state epoch, and after ``share.coordinator.snapshot.update.records.per.snapshot``
  updates; a ShareUpdate (the written batches, merged over the snapshot on replay) otherwise. Every write is
  appended with acks=-1 and answered once the ISR has it (``share.coordinator.write.timeout.ms``); the in-memory
  state changes only then.
* **Fencing** as Kafka: a Read sets the leader epoch (a higher one is persisted with an update), a Write with a
  lower leader epoch is FENCED_LEADER_EPOCH, a lower state epoch FENCED_STATE_EPOCH; Initialize sets the state
  epoch (a lower one: FENCED_STATE_EPOCH); Read and Write of a share partition never initialized answer
  UNKNOWN_TOPIC_OR_PARTITION (Kafka 4.1, KAFKA-19338).
* ``__share_group_state`` is created on first use (``share.coordinator.state.topic.*``: partitions 50,
  replication factor 3 (1 on one node), compacted, ``segment.bytes`` 100 MiB, ``min.insync.replicas`` 2).
  Compaction keeps the latest ShareSnapshot and the latest ShareUpdate of each key: that is enough because every
  update tidelog writes carries the whole state of the share partition's window (``share_state_store``), and the
  update a Read writes for a new leader epoch carries the whole merged state.

Bounded: one entry per share partition a group ever read (as Kafka; removed by DeleteShareGroupState), at most
``MAX_BATCHES`` state batches per write (INVALID_REQUEST beyond).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from tidelog.broker.group.share_state_records import (
    SNAPSHOT,
    STATE_TOPIC,
    UPDATE,
    ShareKey,
    ShareState,
    StateBatch,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
    merge_batches,
    state_partition,
)
from tidelog.broker.internal_topics import append_and_wait, replay_log
from tidelog.errors import ApiError, ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.topic_model import TopicInfo

log = logging.getLogger("tidelog.broker.group.share_coordinator")

NONE = 0
NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
COORDINATOR_LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
FENCED_LEADER_EPOCH = int(ErrorCode.FENCED_LEADER_EPOCH)
FENCED_STATE_EPOCH = int(ErrorCode.FENCED_STATE_EPOCH)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
REQUEST_TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)
MAX_BATCHES = 100_000  # state batches in one write (a share partition has at most max.record.locks in flight)

DEFAULTS = {
    "share.coordinator.state.topic.num.partitions": "50",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.segment.bytes": "104857600",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.snapshot.update.records.per.snapshot": "500",
    "share.coordinator.write.timeout.ms": "5000",
}

Result = tuple[int, str | None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _conf(props: Any, name: str) -> int:
    return int(props.get(name, DEFAULTS[name]))


class ShareCoordinator:
    """One per broker; coordinates the share partitions of the ``__share_group_state`` partitions it leads."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        props = broker.config.props
        self.configured_partitions = _conf(props, "share.coordinator.state.topic.num.partitions")
        self.replication_factor = _conf(props, "share.coordinator.state.topic.replication.factor")
        self.segment_bytes = _conf(props, "share.coordinator.state.topic.segment.bytes")
        self.min_isr = _conf(props, "share.coordinator.state.topic.min.isr")
        self.per_snapshot = max(_conf(props, "share.coordinator.snapshot.update.records.per.snapshot"), 0)
        self.write_timeout_ms = _conf(props, "share.coordinator.write.timeout.ms")
        self.owned: dict[int, int] = {}  # state partition -> leader epoch
        self.loading: set[int] = set()
        self._generation: dict[int, int] = {}
        self.states: dict[ShareKey, ShareState] = {}
        self.updates: dict[ShareKey, int] = {}  # ShareUpdates since the key's last snapshot
        self._locks: dict[ShareKey, asyncio.Lock] = {}
        self._creating: asyncio.Task[TopicInfo | None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.writes = 0  # records appended (snapshots + updates), for tests and metrics
        self.snapshots = 0

    # ================================================================== leadership and loading

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, leader_epoch: int) -> None:
        if topic != STATE_TOPIC:
            return
        gen = self._generation.get(partition, 0) + 1
        self._generation[partition] = gen
        if is_leader:
            if partition in self.owned:
                self.owned[partition] = leader_epoch
                return
            self.owned[partition] = leader_epoch
            plog = self.broker.topics.get_log(STATE_TOPIC, partition)
            if plog is None or plog.log_end_offset == 0:
                return
            self.loading.add(partition)
            task = asyncio.get_running_loop().create_task(self._load(partition, gen))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        self.owned.pop(partition, None)
        self.loading.discard(partition)
        n = self.num_partitions
        for k in [k for k in self.states if state_partition(k, n) == partition]:
            del self.states[k]
            self.updates.pop(k, None)
        log.info("unloaded share state partition", extra={"kv": {"partition": partition}})

    async def _load(self, partition: int, gen: int) -> None:
        try:
            plog = self.broker.topics.get_log(STATE_TOPIC, partition)
            states, updates = await asyncio.to_thread(replay_state, plog) if plog is not None else ({}, {})
        except Exception:
            log.exception("loading __share_group_state failed; its share partitions start empty",
                          extra={"kv": {"partition": partition}})
            states, updates = {}, {}
        if self._generation.get(partition) != gen:
            return  # resigned (or re-elected) meanwhile: stale
        self.states.update(states)
        self.updates.update(updates)
        self.loading.discard(partition)
        log.info("loaded share state partition", extra={"kv": {"partition": partition, "keys": len(states)}})

    @property
    def num_partitions(self) -> int:
        info = self.broker.topics.get(STATE_TOPIC) if self.broker.topics is not None else None
        return info.num_partitions if info is not None else self.configured_partitions

    # ================================================================== the topic

    async def state_topic(self) -> TopicInfo | None:
        """The topic, created on first use (one node: led at once; ZooKeeper mode: once the controller elects)."""
        info = self.broker.topics.get(STATE_TOPIC)
        if info is not None:
            return info
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create())
        return await asyncio.shield(self._creating)

    async def _create(self) -> TopicInfo | None:
        rm = self.broker.replica_manager
        rf = rm.internal_topic_replication_factor(self.replication_factor)
        if len(rm.live_brokers()) < rf:
            log.warning("__share_group_state not created: fewer live brokers than its replication factor",
                        extra={"kv": {"replication_factor": rf}})
            return None
        configs: dict[str, str | None] = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                                          "compression.type": "producer",
                                          "min.insync.replicas": str(min(self.min_isr, rf))}
        try:
            await self.broker.request_pool.run(self.broker.topics.create_topic, STATE_TOPIC,
                                               self.configured_partitions, rf, configs)
            log.info("__share_group_state created", extra={"kv": {"partitions": self.configured_partitions,
                                                                  "replication_factor": rf}})
        except Exception as exc:
            if not (isinstance(exc, ApiError) and exc.kafka_error == ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create __share_group_state", extra={"kv": {"error": repr(exc)}})
        return self.broker.topics.get(STATE_TOPIC)

    def partition_of(self, key: ShareKey) -> int:
        return state_partition(key, self.num_partitions)

    def check(self, key: ShareKey) -> int:
        """NOT_COORDINATOR unless this broker leads the key's partition and has loaded it."""
        if (self.broker.stopping or not self.broker.replica_manager.coordinating
                or self.broker.topics.get(STATE_TOPIC) is None):
            return NOT_COORDINATOR
        p = self.partition_of(key)
        if p not in self.owned:
            return NOT_COORDINATOR
        return COORDINATOR_LOAD_IN_PROGRESS if p in self.loading else NONE

    # ================================================================== the operations

    def _lock(self, key: ShareKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _append(self, key: ShareKey, entries: list[tuple[bytes, bytes | None]]) -> int:
        err = await append_and_wait(self.broker, STATE_TOPIC, self.partition_of(key), entries,
                                    self.write_timeout_ms)
        if err is None:
            self.writes += len(entries)
            return NONE
        log.warning("__share_group_state append failed", extra={"kv": {"key": key.coordinator_key(),
                                                                         "error": err}})
        if err in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH):
            return NOT_COORDINATOR
        if err == ErrorCode.REQUEST_TIMED_OUT:
            return REQUEST_TIMED_OUT
        return COORDINATOR_NOT_AVAILABLE

    async def _snapshot(self, key: ShareKey, new: ShareState) -> int:
        new.snapshot_epoch = (self.states[key].snapshot_epoch + 1) if key in self.states else 0
        new.write_ts = _now_ms()
        err = await self._append(key, [(encode_key(SNAPSHOT, key), encode_snapshot(new))])
        if err == NONE:
            self.states[key] = new
            self.updates[key] = 0
            self.snapshots += 1
        return err

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> Result:
        err = self.check(key)
        if err:
            return err, None
        async with self._lock(key):
            cur = self.states.get(key)
            if cur is not None and state_epoch < cur.state_epoch:
                return FENCED_STATE_EPOCH, f"State epoch {state_epoch} is older than {cur.state_epoch}."
            now = _now_ms()
            new = ShareState(state_epoch=state_epoch, leader_epoch=cur.leader_epoch if cur else -1,
                             start_offset=start_offset, create_ts=now)
            return await self._snapshot(key, new), None

    async def read(self, key: ShareKey, leader_epoch: int) -> tuple[int, str | None, ShareState | None]:
        err = self.check(key)
        if err:
            return err, None, None
        async with self._lock(key):
            cur = self.states.get(key)
            if cur is None:
                return UNKNOWN_TOPIC_OR_PARTITION, "The share partition's state is not initialized.", None
            if leader_epoch >= 0 and leader_epoch < cur.leader_epoch:
                return FENCED_LEADER_EPOCH, f"Leader epoch {leader_epoch} is older than {cur.leader_epoch}.", None
            if leader_epoch > cur.leader_epoch:  # a new share-partition leader: its epoch fences the older one
                # (the whole state again: under compaction the latest ShareUpdate of a key is all that stays)
                err = await self._update(key, cur, leader_epoch, cur.start_offset, list(cur.batches))
                if err:
                    return err, None, None
            return NONE, None, self.states[key]

    async def _update(self, key: ShareKey, cur: ShareState, leader_epoch: int, start_offset: int,
                      batches: list[StateBatch]) -> int:
        start = start_offset if start_offset >= 0 else cur.start_offset
        merged = merge_batches(cur.batches, batches, start)
        if self.updates.get(key, 0) >= self.per_snapshot:
            return await self._snapshot(key, ShareState(0, cur.state_epoch, leader_epoch, start, merged,
                                                        cur.create_ts))
        value = encode_update(cur.snapshot_epoch, leader_epoch, start_offset, batches)
        err = await self._append(key, [(encode_key(UPDATE, key), value)])
        if err == NONE:
            self.states[key] = ShareState(cur.snapshot_epoch, cur.state_epoch, leader_epoch, start, merged,
                                          cur.create_ts, cur.write_ts)
            self.updates[key] = self.updates.get(key, 0) + 1
        return err

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> Result:
        err = self.check(key)
        if err:
            return err, None
        if len(batches) > MAX_BATCHES or any(b[1] < b[0] or b[2] not in (0, 2, 4) for b in batches):
            return INVALID_REQUEST, "Invalid state batches."
        async with self._lock(key):
            cur = self.states.get(key)
            if cur is None:
                return UNKNOWN_TOPIC_OR_PARTITION, "The share partition's state is not initialized."
            if leader_epoch < cur.leader_epoch:
                return FENCED_LEADER_EPOCH, f"Leader epoch {leader_epoch} is older than {cur.leader_epoch}."
            if state_epoch < cur.state_epoch:
                return FENCED_STATE_EPOCH, f"State epoch {state_epoch} is older than {cur.state_epoch}."
            if state_epoch > cur.state_epoch:  # only a snapshot records a state epoch
                start = start_offset if start_offset >= 0 else cur.start_offset
                return await self._snapshot(key, ShareState(0, state_epoch, leader_epoch, start,
                                                            merge_batches(cur.batches, batches, start),
                                                            cur.create_ts)), None
            return await self._update(key, cur, max(leader_epoch, cur.leader_epoch), start_offset, batches), None

    async def delete(self, key: ShareKey) -> Result:
        err = self.check(key)
        if err:
            return err, None
        async with self._lock(key):
            if key not in self.states:
                return NONE, None
            err = await self._append(key, [(encode_key(SNAPSHOT, key), None), (encode_key(UPDATE, key), None)])
            if err == NONE:
                self.states.pop(key, None)
                self.updates.pop(key, None)
            return err, None

    def summary(self, key: ShareKey) -> tuple[int, str | None, ShareState | None]:
        err = self.check(key)
        if err:
            return err, None, None
        cur = self.states.get(key)
        if cur is None:  # Kafka answers a summary of an uninitialized share partition with its defaults
            return NONE, None, ShareState(state_epoch=0, start_offset=-1)
        return NONE, None, cur


def replay_state(plog: Any) -> tuple[dict[ShareKey, ShareState], dict[ShareKey, int]]:
    """Blocking: the share partitions' states of one ``__share_group_state`` partition, from its log (the last
    snapshot of each key with the updates of the same snapshot epoch merged over it; tombstones delete)."""
    states: dict[ShareKey, ShareState] = {}
    updates: dict[ShareKey, int] = {}
    for header, records in replay_log(plog):
        if header.is_control:
            continue
        for r in records:
            if r.key is None:
                continue
            try:
                t, key = decode_key(bytes(r.key))
                if r.value is None:
                    states.pop(key, None)
                    updates.pop(key, None)
                elif t == SNAPSHOT:
                    states[key] = decode_snapshot(bytes(r.value))
                    updates[key] = 0
                else:
                    se, le, start, batches = decode_update(bytes(r.value))
                    cur = states.get(key)
                    if cur is None or se != cur.snapshot_epoch:
                        continue
                    new_start = start if start >= 0 else cur.start_offset
                    cur.batches = merge_batches(cur.batches, batches, new_start)
                    cur.start_offset = new_start
                    cur.leader_epoch = max(cur.leader_epoch, le)
                    updates[key] = updates.get(key, 0) + 1
            except (ValueError, IndexError) as exc:
                log.warning("undecodable __share_group_state record skipped", extra={"kv": {"error": repr(exc)}})
    return states, updates
