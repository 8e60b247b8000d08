"""Loading and persisting the share partitions a broker leads (Kafka's ``SharePartition.maybeInitialize`` and
``writeShareGroupState``), through the :class:`SharePersister`.

* **Load** (the first ShareFetch / ShareAcknowledge of a share partition here, or the first after the partition's
  leader epoch changed): ReadShareGroupState with this broker's leader epoch of the partition. The group coordinator
  initializes a share partition before assigning it (``share_group_init``, start offset -1: the leader starts at
  ``share.auto.offset.reset``, latest: the high watermark; earliest: the log start). A share partition fetched
  without having been initialized (a client fetching what it was not assigned) is still initialized here (state
  epoch 0) as a fallback Kafka 4.1+ does not have (decision 0073). The persisted batches become the window
  (``SharePartition.restore``): acknowledged and archived records stay done, the others are available again with
  their delivery counts kept, so they are redelivered with the count + 1.
* **Persist** after every acknowledgement that changed a share partition (its answer waits for it, as Kafka's),
  and in the background when a closing share session released records or locks expired:
  WriteShareGroupState with the SPSO and the whole window (every in-flight run with its state and delivery count;
  Kafka writes the changed batches only). Writes of one share partition are serialized and coalesced: a write
  waiting behind another returns at once when the other already carried its change.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group.share_coordinator import FENCED_STATE_EPOCH, NONE, UNKNOWN_TOPIC_OR_PARTITION
from tidelog.broker.group.share_partition import SharePartition
from tidelog.broker.group.share_persister import SharePersister
from tidelog.broker.group.share_settings import ShareSettings
from tidelog.broker.group.share_state_records import ShareKey

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.group.share_state_store")

PKey = tuple[str, bytes, int]  # (group, topic id, partition)


@dataclass(slots=True)
class _Held:
    leader_epoch: int
    state_epoch: int
    version: int = 0  # bumped by every change to persist
    written: int = 0  # the version the last successful write carried
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ShareHost(Protocol):
    """What the store needs of the share group manager (``ShareGroupManager``, which builds this store)."""

    broker: Broker
    partitions: dict[PKey, SharePartition]

    def settings(self, gid: str) -> ShareSettings: ...

    def _ensure_sweeper(self) -> None: ...


class ShareStateStore:
    def __init__(self, mgr: ShareHost) -> None:
        self.mgr = mgr
        self.broker = mgr.broker
        self.persister = SharePersister(mgr.broker)
        self.held: dict[PKey, _Held] = {}
        self._loading: dict[PKey, asyncio.Lock] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def load(self, gid: str, tid: bytes, index: int, name: str, plog: Any) -> tuple[int, str | None]:
        """Make sure the share partition is here, as persisted, for the current leadership (0 when it is)."""
        key = (gid, tid, index)
        epoch = int(self.broker.leader_epoch(name, index))
        held = self.held.get(key)
        if held is not None and held.leader_epoch == epoch and key in self.mgr.partitions:
            return NONE, None
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            held = self.held.get(key)
            if held is not None and held.leader_epoch == epoch and key in self.mgr.partitions:
                return NONE, None
            skey = ShareKey(gid, tid, index)
            err, msg, st = await self.persister.read(skey, epoch)
            settings = self.mgr.settings(gid)
            if err == UNKNOWN_TOPIC_OR_PARTITION:
                start = settings.start_offset(plog.log_start_offset, plog.high_watermark, plog)
                err, msg = await self.persister.initialize(skey, 0, start)
                if err:
                    return err, msg
                state_epoch, start_offset, batches = 0, start, []
            elif err or st is None:
                return err, msg
            else:
                state_epoch, start_offset, batches = st.state_epoch, st.start_offset, list(st.batches)
            if start_offset < 0:  # initialized without a start offset: share.auto.offset.reset
                start_offset = settings.start_offset(plog.log_start_offset, plog.high_watermark, plog)
                batches = []
            self.mgr.partitions[key] = SharePartition.restore(start_offset, batches, settings.lock_ms,
                                                              settings.delivery_limit, settings.max_locks)
            self.held[key] = _Held(epoch, state_epoch)
            self.mgr._ensure_sweeper()
            return NONE, None

    def changed(self, key: PKey) -> None:
        held = self.held.get(key)
        if held is not None:
            held.version += 1

    async def persist(self, key: PKey) -> tuple[int, str | None]:
        """Write the share partition's state (WriteShareGroupState) if it changed since the last write."""
        held = self.held.get(key)
        if held is None:
            return NONE, None
        mine = held.version
        async with held.lock:
            if held.written >= mine:
                return NONE, None  # a write queued before this one carried the change
            sp = self.mgr.partitions.get(key)
            if sp is None:
                return NONE, None
            version = held.version
            err, msg = await self.persister.write(ShareKey(*key), held.state_epoch, held.leader_epoch, sp.spso,
                                                  sp.persisted_batches())
            if err == NONE:
                held.written = max(held.written, version)
            elif err in (FENCED_STATE_EPOCH, UNKNOWN_TOPIC_OR_PARTITION):  # offsets altered or deleted: reloaded
                self.drop(key)
            return err, msg

    def persist_soon(self, key: PKey) -> None:
        """A change nobody waits for (records released by a closing session, expired locks): written in the
        background, coalesced with the writes around it; a failure is logged (the next write carries it)."""
        self.changed(key)
        if key not in self.held:
            return
        task = asyncio.get_running_loop().create_task(self._persist_logged(key))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _persist_logged(self, key: PKey) -> None:
        try:
            err, msg = await self.persist(key)
        except Exception as exc:  # the broker stopping, the loop closing
            err, msg = -1, repr(exc)
        if err:
            log.warning("share partition state not written", extra={"kv": {
                "group": key[0], "partition": key[2], "error": err, "message": msg}})

    def drop(self, key: PKey) -> None:
        """Forget the share partition here (its persisted state was altered or deleted): loaded again on next use."""
        self.held.pop(key, None)
        self._loading.pop(key, None)
        self.mgr.partitions.pop(key, None)
