"""Loading the groups of ``__consumer_offsets`` into the coordinator (Kafka's ``GroupMetadataManager`` load path):
the partitions this broker was elected leader of in one turn of the loop, as one batch (one node at start: every
partition, with the one-time move of misplaced records). The replay itself runs in a worker thread (:mod:`replay`); installing
the result runs on the loop. ``self`` is the group coordinator, seen through :class:`LoadingHost`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group import records as rec
from tidelog.broker.group.consumer_install import install as install_consumer_groups
from tidelog.broker.group.consumer_store import ConsumerReplay
from tidelog.broker.group.deleted_topics import drop_topics
from tidelog.broker.group.records import OFFSETS_TOPIC, GroupValue, OffsetValue
from tidelog.broker.group.replay import Migration, Replay, _read_partitions
from tidelog.broker.group.share_group_install import install as install_share_groups
from tidelog.broker.group.share_group_store import ShareGroupReplay
from tidelog.broker.group.state import Group, GroupState, Member
from tidelog.broker.group.state import now_ms as _now_ms

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.group.consumer_group import ConsumerGroupManager

log = logging.getLogger("tidelog.broker.group")

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)


class LoadingHost(Protocol):
    """What loading reads, fills and calls of the group coordinator."""

    broker: Broker
    groups: dict[str, Group]
    consumer: ConsumerGroupManager
    loaded: asyncio.Event
    loading_partitions: set[int]
    owned: dict[int, int]
    _open_txns: dict[tuple[int, int], set[str]]
    _deferred_markers: dict[int, list[tuple[int, bool]]]
    _deleted_while_loading: dict[int, set[str]]
    _load_generation: dict[int, int]

    @property
    def num_partitions(self) -> int: ...

    def _group(self, group_id: str, create: bool = False) -> Group | None: ...

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    async def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, offsets: bool = True,
                      **kw: Any) -> int: ...

    async def _append_to(self, partition: int, entries: list[tuple[bytes, bytes | None]], *,
                         off_loop: bool = False) -> int: ...

    def _release_group(self, g: Group) -> None: ...

    def _schedule_heartbeat(self, g: Group, m: Member) -> None: ...

    def _install_pending(self, pending: dict[int, dict[int, dict[tuple[str, str, int], OffsetValue]]]) -> None: ...

    def _apply_deferred_markers(self, partition: int) -> None: ...


async def _load_partitions(self: LoadingHost, batch: dict[int, int]) -> None:
    """Load the partitions of ``batch`` (partition -> load generation), elected together. A batch holding every
    partition that holds anything, of a topic whose every partition this broker leads (one node at start), also adopts the records of groups found outside their own partition and moves
    them there (:func:`_migrate`); otherwise those are skipped, another leader may coordinate them."""
    if not batch:
        return
    n = self.num_partitions
    if not _leads_all(self, batch, n):
        await asyncio.gather(*(_load_partition(self, p, gen) for p, gen in sorted(batch.items())))
        return
    t0 = time.monotonic()
    consumer, share = ConsumerReplay(), ShareGroupReplay()
    logs = [lg for p in sorted(batch) if (lg := self.broker.topics.get_log(OFFSETS_TOPIC, p)) is not None]
    try:
        state = await asyncio.to_thread(_read_partitions, logs, n, adopt_misplaced=True, consumer=consumer,
                                        share=share)
    except Exception:
        log.exception("loading __consumer_offsets failed; groups start empty")
        state = Replay({}, {}, set(), Migration(), {})
        consumer, share = ConsumerReplay(), ShareGroupReplay()
    current = {p: gen for p, gen in batch.items()
               if self._load_generation.get(p) == gen and p in self.loading_partitions}
    if len(current) < len(batch):
        # leadership of some moved while reading (a later election loads those again): the others load on their
        # own, without adopting records from partitions no longer led here
        await asyncio.gather(*(_load_partition(self, p, gen) for p, gen in sorted(current.items())))
        return
    groups_v, offsets_v, _, migration, pending_v = state
    if migration:
        # written before tidelog placed groups as Kafka does (Utils.abs, not & 0x7fffffff): moved to the
        # group's own partition before any request sees the groups
        try:
            await _migrate(self, migration)
        except Exception:
            log.exception("moving misplaced __consumer_offsets records failed; retried at the next start")
    now = _now_ms()
    for gid, gv in groups_v.items():
        old = self.groups.pop(gid, None)
        if old is not None:
            self._release_group(old)
        _install_group(self, gid, gv, now)
    for (gid, topic, part), ov in offsets_v.items():
        g = self._group(gid, create=True)
        assert g is not None
        g.offsets[(topic, part)] = ov
    self._install_pending(pending_v)
    install_consumer_groups(self.consumer, consumer)
    install_share_groups(self.broker, share)
    deleted: set[str] = set()
    for p in batch:
        deleted |= self._deleted_while_loading.pop(p, set())
    if deleted:
        drop_topics(self, deleted, self.groups.values())
    self.loading_partitions.difference_update(batch)
    for partition in sorted(batch):
        self._apply_deferred_markers(partition)
    log.info(
        "group coordinator loaded",
        extra={"kv": {"partitions": len(logs), "groups": len(self.groups),
                      "offsets": len(offsets_v), "seconds": round(time.monotonic() - t0, 3)}},
    )


def _leads_all(self: LoadingHost, batch: dict[int, int], n: int) -> bool:
    """Does this broker lead every partition, and ``batch`` hold every one that is not empty? Then a group's
    records found outside its own partition can be adopted: no other leader coordinates them."""
    if len(self.owned) < n:
        return False
    for p in range(n):
        if p in batch:
            continue
        lg = self.broker.topics.get_log(OFFSETS_TOPIC, p)
        if p not in self.owned or lg is None or lg.log_end_offset != 0:
            return False
    return True


def _install_group(self: LoadingHost, gid: str, gv: GroupValue, now: int) -> None:
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


async def _migrate(self: LoadingHost, migration: Migration) -> None:
    """Single node, at load: move misplaced records (tidelog's pre-Kafka placement) to their group's partition,
    Kafka's layout: first the records adopted, appended as they are (same key and value bytes) to the group's
    partition and flushed; only then a tombstone for every misplaced key still holding a value where it was
    found, so the cleaner removes it there. A crash in between leaves the records in both places; the next
    start finds them in the group's partition, adopts nothing and writes only the tombstones."""
    t0 = time.monotonic()
    failed = False
    for partition, entries in sorted(migration.moves.items()):
        for chunk in _chunks(self, partition, entries):
            failed |= await self._append_to(partition, list(chunk), off_loop=True) != NONE
    if failed:  # the old records stay (and are adopted again at the next start): nothing may be lost
        log.warning("misplaced __consumer_offsets records not moved; retried at the next start",
                    extra={"kv": {"groups": len(migration.groups)}})
        return
    homes = [self.broker.topics.get_log(OFFSETS_TOPIC, p) for p in migration.moves]
    await asyncio.to_thread(lambda: [lg.flush() for lg in homes if lg is not None])
    for partition, keys in sorted(migration.tombstones.items()):
        tombstones: list[tuple[bytes, bytes | None]] = [(k, None) for k in keys]
        for chunk in _chunks(self, partition, tombstones):
            failed |= await self._append_to(partition, list(chunk), off_loop=True) != NONE
    log.info(
        "moved misplaced __consumer_offsets records to their groups' partitions (pre-Kafka placement)",
        extra={"kv": {"groups": len(migration.groups), "records": migration.moved,
                      "tombstones": migration.tombstoned, "complete": not failed,
                      "seconds": round(time.monotonic() - t0, 3)}},
    )


def _chunks(self: LoadingHost, partition: int, entries: Sequence[tuple[bytes, bytes | None]],
            ) -> Iterable[list[tuple[bytes, bytes | None]]]:
    """``entries`` cut into batches that stay well under the partition's ``max.message.bytes``."""
    lg = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
    budget = max((lg.config.max_message_bytes if lg is not None else 1 << 20) // 2, 1)
    chunk: list[tuple[bytes, bytes | None]] = []
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


async def _load_partition(self: LoadingHost, partition: int, gen: int) -> None:
    t0 = time.monotonic()
    plog = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
    consumer, share = ConsumerReplay(), ShareGroupReplay()
    try:
        groups_v, offsets_v, misplaced, _, pending_v = await asyncio.to_thread(
            _read_partitions, [plog] if plog is not None else [], self.num_partitions, adopt_misplaced=False,
            consumer=consumer, share=share)
    except Exception:
        log.exception("loading __consumer_offsets partition failed; its groups start empty",
                      extra={"kv": {"partition": partition}})
        groups_v, offsets_v, misplaced, pending_v = {}, {}, set(), {}
        consumer, share = ConsumerReplay(), ShareGroupReplay()
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
        _install_group(self, gid, gv, now)
    for (gid, topic, part), ov in offsets_v.items():
        g = self._group(gid, create=True)
        assert g is not None
        g.offsets[(topic, part)] = ov
    for key in [k for k in self._open_txns if k[0] == partition]:
        del self._open_txns[key]
    self._install_pending(pending_v)
    install_consumer_groups(self.consumer, consumer)
    install_share_groups(self.broker, share)
    deleted = self._deleted_while_loading.pop(partition, None)
    if deleted:
        n = self.num_partitions
        drop_topics(self, deleted, [g for gid, g in self.groups.items() if rec.partition_for(gid, n) == partition])
    self.loading_partitions.discard(partition)
    self._apply_deferred_markers(partition)
    log.info("loaded groups of __consumer_offsets partition", extra={"kv": {
        "partition": partition, "leader_epoch": self.owned.get(partition), "groups": len(groups_v),
        "offsets": len(offsets_v), "seconds": round(time.monotonic() - t0, 3)}})

