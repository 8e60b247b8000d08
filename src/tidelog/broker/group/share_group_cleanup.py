"""Removing share state that no longer has an owner, as Kafka's group coordinator does:

* **DeleteGroups of a share group** (Kafka's ``GroupCoordinatorService.deleteGroups`` for share groups): refused
  with NON_EMPTY_GROUP while it has members; else the state of every share partition the group has in
  ``__share_group_state`` (its ShareGroupStatePartitionMetadata, and any share partition held on this broker) is
  deleted through the share coordinators (DeleteShareGroupState: tombstones for the ShareSnapshot and ShareUpdate
  keys), then the group's ShareGroup* records are tombstoned. A failed state delete answers its error and keeps the
  group (a retry deletes what is left).
* **A deleted topic** (Kafka's ``onTopicsDeleted`` → ``maybeCleanupShareGroupState``): for each share group coordinated
  here whose state-partition metadata holds the topic's id, the topic is added to ``DeletingTopics`` (record written;
  its entry in ``InitializedTopics`` is kept meanwhile: it is the list of partitions to delete, which
  ``DeletingTopics`` does not hold), the state of each of its share partitions is deleted, and the topic leaves the
  record. A topic created again with the same name has a new topic id, so its share partitions start afresh
  (``share.auto.offset.reset``) and never see the old state.
* **An interrupted delete is resumed** (:func:`resume_deleting`): a topic still in ``DeletingTopics`` (the coordinator
  moved or restarted, the share coordinator was unavailable past ``share.coordinator.write.timeout.ms``) is deleted
  again when the group is loaded and at the group's next heartbeat; DeleteGroups deletes its state too (Kafka's
  ``shareGroupBuildPartitionDeleteRequest`` retries ``DeletingTopics``, with the partition count of a topic that still
  exists: a ``DeletingTopics`` entry without partitions and without its topic is left as Kafka leaves it).
* **A topic deleted while the coordinator was loading or away** (:func:`on_loaded`): once the groups of a
  ``__consumer_offsets`` partition are installed, a topic id in a group's metadata that names no topic any more has
  its state deleted as above (as the classic offsets of a topic deleted during the load are, decision 0039).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from tidelog.broker.group.consumer_records import topic_uuid
from tidelog.broker.group.share_group import ShareGroupManager, share_manager
from tidelog.broker.group.share_group_records import StatePartitionMetadata, TopicPartitionsInfo
from tidelog.broker.group.share_state_records import ShareKey
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.group.share")

NONE = 0
NON_EMPTY_GROUP = int(ErrorCode.NON_EMPTY_GROUP)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
MAX_PARALLEL = 32  # state deletes in flight for one group


def _manager(broker: Broker) -> ShareGroupManager:
    return share_manager(broker)


async def _delete_states(mgr: ShareGroupManager, keys: list[ShareKey]) -> int:
    """DeleteShareGroupState for ``keys``; the first error (a key without state is not one)."""
    persister = mgr.store.persister
    sem = asyncio.Semaphore(MAX_PARALLEL)

    async def one(key: ShareKey) -> int:
        async with sem:
            err, _ = await persister.delete(key)
        if err in (NONE, UNKNOWN_TOPIC_OR_PARTITION):
            mgr.partitions.pop((key.group, key.topic_id, key.partition), None)
            return NONE
        return int(err)

    errors = await asyncio.gather(*(one(k) for k in keys))
    return next((e for e in errors if e), NONE)


def state_keys(mgr: ShareGroupManager, gid: str) -> list[ShareKey]:
    """Every share partition of ``gid`` that may have state: its state-partition metadata and those held here."""
    keys: set[ShareKey] = set()
    meta = mgr.records.state_meta.get(gid)
    if meta is not None:
        for infos in (meta.initializing, meta.initialized):
            for tid, info in infos.items():
                keys.update(ShareKey(gid, tid, p) for p in info.partitions)
        for tid in meta.deleting:
            keys.update(ShareKey(gid, tid, p) for p in _deleting_partitions(mgr, meta, tid))
    for g, tid, p in mgr.partitions:
        if g == gid:
            keys.add(ShareKey(gid, tid, p))
    return sorted(keys, key=lambda k: (k.topic_id, k.partition))


async def delete_share_group(broker: Broker, gid: str) -> int | None:
    """DeleteGroups of ``gid`` if it is a share group coordinated here: an error code, or ``None`` when it is not a
    share group (the classic / consumer path answers)."""
    mgr = _manager(broker)
    if gid not in mgr.groups:
        return None
    g = mgr.groups[gid]
    if g.members:
        return NON_EMPTY_GROUP
    err = await _delete_states(mgr, state_keys(mgr, gid))
    if err:
        log.warning("share group state not deleted", extra={"kv": {"group": gid, "error": err}})
        return err
    err = await mgr.records.delete(g)  # NON_EMPTY_GROUP if a member joined meanwhile
    if err:
        return err
    for key in [k for k in mgr.sessions if k[0] == gid]:
        mgr.sessions.pop(key, None)
    log.info("share group deleted", extra={"kv": {"group": gid}})
    return NONE


def on_topic_deleted(broker: Broker, topic: str) -> None:
    """On the loop, once ``topic`` is gone: delete the share state the groups coordinated here have of it."""
    mgr = _manager(broker)
    mgr.records._cache.clear()  # cached target records name topics by id: a topic made again has a new one
    info = broker.topics.get(topic) if broker.topics is not None else None
    live = topic_uuid(info.topic_id) if info is not None else None  # created again already: keep the new one's
    for gid, meta in list(mgr.records.state_meta.items()):
        for tid, entry in list(meta.initialized.items()) + list(meta.initializing.items()):
            if entry.name == topic and tid != live:
                _spawn(mgr, _delete_topic_state(mgr, gid, tid, topic))
    for key in [k for k in mgr.partitions if k[1] != live and _name_of(mgr, k[0], k[1]) == topic]:
        mgr.partitions.pop(key, None)


def _name_of(mgr: ShareGroupManager, gid: str, tid: bytes) -> str | None:
    meta = mgr.records.state_meta.get(gid)
    entry = meta.initialized.get(tid) if meta is not None else None
    return entry.name if entry is not None else None


def _spawn(mgr: ShareGroupManager, coro: Any) -> None:
    try:
        task = asyncio.get_running_loop().create_task(coro)
    except RuntimeError:
        coro.close()
        return
    mgr.records._tasks.add(task)
    task.add_done_callback(mgr.records._tasks.discard)


def _deleting_partitions(mgr: ShareGroupManager, meta: StatePartitionMetadata, tid: bytes) -> list[int]:
    """The partitions whose state a topic in DeletingTopics may have: its InitializedTopics / InitializingTopics
    entries (kept while deleting), else every partition of the topic when it still exists (Kafka's retry)."""
    parts: set[int] = set()
    for infos in (meta.initialized, meta.initializing):
        entry = infos.get(tid)
        if entry is not None:
            parts.update(entry.partitions)
    if not parts and mgr.broker.topics is not None:
        for info in mgr.broker.topics.all_topics():
            if topic_uuid(info.topic_id) == tid:
                parts.update(range(info.num_partitions))
    return sorted(parts)


async def _delete_topic_state(mgr: ShareGroupManager, gid: str, tid: bytes, name: str) -> None:
    store = mgr.records
    if (gid, tid) in store.deleting_now:
        return
    meta = store.state_meta.get(gid)
    if meta is None:
        return
    store.deleting_now.add((gid, tid))
    try:
        parts = _deleting_partitions(mgr, meta, tid)
        if not parts and tid not in meta.deleting:
            return
        if meta.deleting.get(tid) != name:
            meta.deleting[tid] = name
            await mgr.records.persist(gid)  # DeletingTopics recorded before the deletes (Kafka's order)
        err = await _delete_states(mgr, [ShareKey(gid, tid, p) for p in parts])
        if err:
            log.warning("share state of a deleted topic not deleted", extra={"kv": {
                "group": gid, "topic": name, "error": err}})
            return  # stays in DeletingTopics: resumed at the next load or heartbeat, or by DeleteGroups
        if not parts:
            log.warning("a topic in DeletingTopics without partitions nor topic: left", extra={"kv": {
                "group": gid, "topic": name}})
            return
        meta = store.state_meta.get(gid)
        if meta is None:
            return
        meta.deleting.pop(tid, None)
        meta.initialized.pop(tid, None)
        meta.initializing.pop(tid, None)
        err = await mgr.records.persist(gid)
        log.info("share state of a deleted topic deleted", extra={"kv": {
            "group": gid, "topic": name, "partitions": len(parts), "error": err}})
    finally:
        store.deleting_now.discard((gid, tid))


def resume_deleting(broker: Broker, gid: str) -> None:
    """Delete again (in the background) the state of each topic the group still has in DeletingTopics."""
    mgr = _manager(broker)
    meta = mgr.records.state_meta.get(gid)
    if meta is None or not meta.deleting:
        return
    for tid, name in list(meta.deleting.items()):
        if (gid, tid) not in mgr.records.deleting_now and _deleting_partitions(mgr, meta, tid):
            _spawn(mgr, _delete_topic_state(mgr, gid, tid, name))


def on_loaded(broker: Broker, gids: list[str]) -> None:
    """The groups ``gids`` were just installed from the log: resume their unfinished deletes, and delete the state of
    topics deleted while this coordinator was loading them (or not coordinating them)."""
    mgr = _manager(broker)
    topics = broker.topics
    if topics is None:
        return
    live = {topic_uuid(info.topic_id) for info in topics.all_topics()}
    for gid in gids:
        meta = mgr.records.state_meta.get(gid)
        if meta is None:
            continue
        for tid, entry in list(meta.initialized.items()) + list(meta.initializing.items()):
            if tid not in live and tid not in meta.deleting:
                log.info("share state of a topic deleted meanwhile to delete", extra={"kv": {
                    "group": gid, "topic": entry.name}})
                _spawn(mgr, _delete_topic_state(mgr, gid, tid, entry.name))
        resume_deleting(broker, gid)


# ----------------------------------------------------------------------------------------------- offsets admin


def note_initialized(mgr: ShareGroupManager, gid: str, name: str, tid: bytes, partition: int) -> None:
    """AlterShareGroupOffsets initialized a share partition's state: recorded in the group's state-partition
    metadata (a group this coordinator knows)."""
    if gid not in mgr.groups:
        return
    meta = mgr.records.state_meta.setdefault(gid, StatePartitionMetadata())
    tid = topic_uuid(tid)
    entry = meta.initialized.get(tid)
    if entry is None:
        entry = meta.initialized[tid] = TopicPartitionsInfo(name, [], int(time.time() * 1000))
    if partition not in entry.partitions:
        entry.partitions.append(partition)
        entry.partitions.sort()


def note_deleted(mgr: ShareGroupManager, gid: str, tid: bytes) -> None:
    """DeleteShareGroupOffsets deleted every share partition's state of a topic: it leaves the metadata."""
    meta = mgr.records.state_meta.get(gid)
    if meta is not None:
        tid = topic_uuid(tid)
        meta.initialized.pop(tid, None)
        meta.initializing.pop(tid, None)
