"""Initializing a share group's share partitions as Kafka's group coordinator does (Kafka 4.1+
``GroupMetadataManager.subscribedTopicsChangeMap`` / ``maybeCreateInitializeShareGroupStateRequest``,
``GroupCoordinatorService.persisterInitialize``, ``initializeShareGroupState`` / ``uninitializeShareGroupState``).

* **Which partitions**: on a heartbeat, every partition of the group's subscribed topics that is neither in the
  group's ``InitializedTopics`` nor in its ``InitializingTopics`` since less than
  ``group.share.initialize.retry.interval.ms`` (Kafka's default 30 s, never below ``offsets.commit.timeout.ms``) is
  added to ``InitializingTopics`` with the time, and written (ShareGroupStatePartitionMetadata) with the heartbeat's
  records. A partition left initializing longer than that (the coordinator crashed or moved in between) is tried again.
* **The handshake**: once that record is in the log, InitializeShareGroupState (API 83) for each of them through the
  share coordinator (the persister: in process, or the inter-broker request), with the group epoch as state epoch and
  start offset -1 (the share-partition leader then starts at ``share.auto.offset.reset``). All succeeded: they move to
  ``InitializedTopics`` (record written); any failed: they all leave ``InitializingTopics`` (record written), so the
  next heartbeat asks again, as Kafka.
* **Assignment**: only initialized partitions are assigned to members (Kafka 4.1+'s
  ``withTopicAssignablePartitionsMap``); a change of the initialized partitions of a subscribed topic recomputes the
  assignment with a new group epoch (``initializedAssignmentPending``).

Difference: Kafka answers the heartbeat right after the initializing record and initializes in the background, so a
member gets a new partition at its next heartbeat; tidelog initializes before answering (bounded by the persister's
``share.coordinator.write.timeout.ms``) and answers with the assignment that follows, so a member gets it at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group.consumer_records import topic_uuid
from tidelog.broker.group.share_group_records import StatePartitionMetadata, TopicPartitionsInfo
from tidelog.broker.group.share_group_store import ShareGroup, ShareGroupStore
from tidelog.broker.group.share_metrics import ShareCounters
from tidelog.broker.group.share_state_records import ShareKey
from tidelog.broker.group.share_state_store import ShareStateStore

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker


class ShareGroupManager(Protocol):
    """What the initialisation reads and calls of :class:`~tidelog.broker.group.share_group.ShareGroupManager`
    (Protocols: that module calls this one, so this one does not import it back)."""

    broker: Broker
    counters: ShareCounters
    records: ShareGroupStore
    store: ShareStateStore

    @property
    def groups(self) -> MutableMapping[str, Any]: ...

    def reassign_if_needed(self, g: Any, changed: bool = False) -> bool: ...

    def _by_topic_id(self, tps: set[tuple[str, int]], names: bool = False) -> list[dict[str, Any]]: ...

log = logging.getLogger("tidelog.broker.group.share")

NONE = 0
RETRY_DEFAULT_MS = 30000
MAX_PARALLEL = 32
Todo = dict[bytes, TopicPartitionsInfo]


def now_ms() -> int:
    return int(time.time() * 1000)


def retry_interval_ms(props: Any) -> int:
    """``group.share.initialize.retry.interval.ms``, at least ``offsets.commit.timeout.ms`` (Kafka's rule)."""
    return max(int(props.get("group.share.initialize.retry.interval.ms", RETRY_DEFAULT_MS)),
               int(props.get("offsets.commit.timeout.ms", 5000)))


def assignable(mgr: ShareGroupManager, gid: str, names: set[str]) -> dict[str, tuple[int, ...]]:
    """Subscribed topic -> its initialized partitions (those a member may be assigned)."""
    meta = mgr.records.state_meta.get(gid)
    out: dict[str, tuple[int, ...]] = {}
    if meta is None:
        return out
    topics = mgr.broker.topics
    for n in names:
        info = topics.get(n)
        if info is None:
            continue
        tid = topic_uuid(info.topic_id)
        entry = meta.initialized.get(tid)
        if entry is None or tid in meta.deleting:
            continue
        parts = tuple(sorted(p for p in set(entry.partitions) if 0 <= p < info.num_partitions))
        if parts:
            out[n] = parts
    return out


def mark_initializing(mgr: ShareGroupManager, g: ShareGroup) -> Todo:
    """The subscribed partitions to initialize now, added to the group's InitializingTopics (not yet written)."""
    names = {t for m in g.members.values() for t in m.subscribed}
    if not names:
        return {}
    meta = mgr.records.state_meta.setdefault(g.group_id, StatePartitionMetadata())
    now = now_ms()
    retry = retry_interval_ms(mgr.broker.config.props)
    topics = mgr.broker.topics
    todo: Todo = {}
    for n in sorted(names):
        info = topics.get(n)
        if info is None:
            continue
        tid = topic_uuid(info.topic_id)
        have = set(meta.initialized[tid].partitions) if tid in meta.initialized else set()
        ing = meta.initializing.get(tid)
        if ing is not None and now - ing.create_ts < retry:
            have |= set(ing.partitions)
        missing = [p for p in range(info.num_partitions) if p not in have]
        if not missing:
            continue
        todo[tid] = TopicPartitionsInfo(n, missing, now)
        parts = sorted(set(ing.partitions) | set(missing)) if ing is not None else missing
        meta.initializing[tid] = TopicPartitionsInfo(n, parts, now)
        if meta.deleting.pop(tid, None) is not None:
            log.warning("initializing topic found deleting, removed from deleting", extra={"kv": {
                "group": g.group_id, "topic": n}})
    return todo


async def initialize(mgr: ShareGroupManager, gid: str, state_epoch: int, todo: Todo) -> int:
    """InitializeShareGroupState of ``todo`` (its InitializingTopics record already written), then the metadata moved
    on in memory: to InitializedTopics when all succeeded, else out of InitializingTopics. The first error."""
    persister = mgr.store.persister
    sem = asyncio.Semaphore(MAX_PARALLEL)

    async def one(tid: bytes, p: int) -> int:
        key = ShareKey(gid, tid, p)
        async with sem:
            # a state the share-partition leader's first-use fallback already wrote (a fetch before any heartbeat)
            # is kept, not initialized over (tidelog's check; Kafka has no such fallback to protect)
            err, start = await persister.summary(key)
            if err == NONE and start >= 0:
                return NONE
            err, _ = await persister.initialize(key, state_epoch, -1)
        if err == NONE:
            mgr.store.drop((gid, tid, p))  # a share partition held here reloads the new state
        return int(err)

    errors = await asyncio.gather(*(one(tid, p) for tid, e in todo.items() for p in e.partitions))
    err = next((e for e in errors if e), NONE)
    mgr.counters.initialized(err == NONE, len(errors))
    meta = mgr.records.state_meta.get(gid)
    if meta is None:  # the group went meanwhile
        return err
    now = now_ms()
    for tid, entry in todo.items():
        ing = meta.initializing.get(tid)
        if ing is not None:
            left = [p for p in ing.partitions if p not in entry.partitions]
            if left:
                ing.partitions = left
            else:
                del meta.initializing[tid]
        if err == NONE:
            done = meta.initialized.get(tid)
            parts = sorted(set(done.partitions if done else []) | set(entry.partitions))
            meta.initialized[tid] = TopicPartitionsInfo(entry.name, parts, now)
    if err:
        log.warning("share partitions not initialized (retried at a next heartbeat)", extra={"kv": {
            "group": gid, "partitions": sum(len(e.partitions) for e in todo.values()), "error": err}})
    return err


async def complete_heartbeat(mgr: ShareGroupManager, gid: str, mid: str, body: dict[str, Any], todo: Todo) -> int:
    """After the heartbeat's records (InitializingTopics) are written: initialize, write the metadata, and let the
    member's answer carry the assignment of what is now initialized. An error code of a failed write."""
    g = mgr.groups.get(gid)
    if g is None:
        return NONE
    await initialize(mgr, gid, g.epoch, todo)
    err = await mgr.records.persist(gid)
    if err:
        return err
    g = mgr.groups.get(gid)
    m = g.members.get(mid) if g is not None else None
    if g is None or m is None:
        return NONE
    if mgr.reassign_if_needed(g):
        if m.epoch != g.epoch:
            m.previous_epoch, m.epoch = m.epoch, g.epoch
        err = await mgr.records.persist(gid)
        if err:
            return err
    body["member_epoch"] = m.epoch
    if m.sent is None or m.sent != frozenset(m.assigned) or body.get("assignment") is not None:
        m.sent = frozenset(m.assigned)
        body["assignment"] = {"topic_partitions": mgr._by_topic_id(m.assigned)}
    return NONE
