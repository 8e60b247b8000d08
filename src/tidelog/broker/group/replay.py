"""Reading ``__consumer_offsets`` back (Kafka's ``GroupMetadataManager.loadGroupsAndOffsets``): a blocking replay
of partitions into group and offset values (latest record per key wins, tombstones delete, transactional offsets
pending until their marker), run in a worker thread by :mod:`loading`. No coordinator state: pure functions of
the logs read."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tidelog.broker.group import consumer_records as crec
from tidelog.broker.group import records as rec
from tidelog.broker.group import share_group_records as srec
from tidelog.broker.group.consumer_store import ConsumerReplay
from tidelog.broker.group.records import GroupValue, OffsetValue
from tidelog.broker.group.share_group_store import ShareGroupReplay
from tidelog.broker.internal_topics import replay_log
from tidelog.records.batch import ControlRecordType, parse_control_record

log = logging.getLogger("tidelog.broker.group")



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


def _read_partitions(logs: list[Any], num_partitions: int, *, adopt_misplaced: bool,
                     consumer: ConsumerReplay | None = None, share: ShareGroupReplay | None = None) -> Replay:
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
        for header, records in replay_log(lg):
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
                    if share is not None and srec.is_share_group_key(r.key):
                        # KIP-932 share-group records (types 9-15), their group's own partition only
                        if rec.partition_for(srec.decode_key(r.key).group, num_partitions) == partition:
                            share.add(r.key, None if r.value is None else bytes(r.value))
                        continue
                    if consumer is not None and crec.is_consumer_key(r.key):
                        # KIP-848 group records (types 3-8), their group's own partition only
                        if rec.partition_for(crec.decode_key(r.key).group, num_partitions) == partition:
                            consumer.add(r.key, None if r.value is None else bytes(r.value))
                        continue
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
