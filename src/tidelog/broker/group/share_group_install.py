"""Installing the share groups replayed from ``__consumer_offsets`` (:class:`share_group_store.ShareGroupReplay`)
into the broker's share-group manager when a partition loads, and dropping them when it unloads (the coordinator
moved: ZooKeeper mode's failover)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidelog.broker.group import records as rec
from tidelog.broker.group import share_group_cleanup
from tidelog.broker.group import share_group_records as srec
from tidelog.broker.group.consumer_install import NamedPartitions
from tidelog.broker.group.share_group import ShareGroup, ShareMember, share_manager
from tidelog.broker.group.share_group_store import ShareGroupReplay

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.group.share")


def install(broker: Broker, replayed: ShareGroupReplay) -> int:
    """Build the replayed share groups in the broker's share-group manager (on the loop); the number installed.
    A group exists if its ShareGroupMetadata record does; members come from their member metadata and current
    assignment records (topic ids resolved to names; a partition of a topic that no longer exists is dropped);
    their session timers start anew, so a member that does not heartbeat within the session timeout after the
    load is removed, as Kafka's ``onLoaded`` does."""
    if not replayed.groups:
        return 0
    mgr = share_manager(broker)
    tps = NamedPartitions(broker.topics)
    installed = 0
    loaded: list[str] = []
    for gid, recs in replayed.groups.items():
        decoded: dict[int, dict[str | None, bytes]] = {}
        for kb, vb in recs.items():
            k = srec.decode_key(kb)
            decoded.setdefault(k.type, {})[k.member_id] = vb
        try:
            meta = decoded.get(srec.GROUP_METADATA, {}).get(None)
            if meta is None:
                continue
            g = ShareGroup(gid)
            g.epoch = srec.decode_epoch(meta)
            tmeta = decoded.get(srec.TARGET_METADATA, {}).get(None)
            g.assignment_epoch = srec.decode_epoch(tmeta) if tmeta is not None else 0
            for mid, vb in decoded.get(srec.MEMBER_METADATA, {}).items():
                mm = srec.decode_member_metadata(vb)
                m = ShareMember(mid or "", mm.client_id, mm.client_host, mm.rack_id,
                                sorted(set(mm.subscribed_topic_names)))
                g.members[m.member_id] = m
            for mid, vb in decoded.get(srec.CURRENT_ASSIGNMENT, {}).items():
                m0 = g.members.get(mid or "")
                if m0 is None:
                    continue
                ca = srec.decode_current_assignment(vb)
                m0.epoch, m0.previous_epoch = ca.member_epoch, ca.previous_member_epoch
                m0.assigned = tps(ca.assigned)
            state = decoded.get(srec.STATE_PARTITION_METADATA, {}).get(None)
            state_meta = srec.decode_state_partition_metadata(state) if state is not None else None
        except srec.SchemaError as exc:
            log.warning("skipping undecodable share group records", extra={"kv": {"group": gid, "error": str(exc)}})
            continue
        old = mgr.groups.pop(gid, None)
        if old is not None:
            for om in old.members.values():
                if om.timer is not None:
                    om.timer.cancel()
        mgr.groups[gid] = g
        store = mgr.records
        store.written[gid] = {kb: vb for kb, vb in recs.items() if srec.key_type(kb) != srec.PARTITION_METADATA}
        if state_meta is not None:
            store.state_meta[gid] = state_meta
        g.partitions_seen = mgr._topic_partitions(gid, {t for x in g.members.values() for t in x.subscribed})
        loaded.append(gid)
        for m in g.members.values():
            mgr._touch(g, m)
        installed += 1
    if installed:
        log.info("loaded share groups", extra={"kv": {"groups": installed}})
        # unfinished topic-state deletes resumed; topics deleted while loading (or away) get theirs deleted
        share_group_cleanup.on_loaded(broker, loaded)
    return installed


def unload_partition(broker: Broker, partition: int, num_partitions: int) -> None:
    """This broker no longer coordinates ``__consumer_offsets-<partition>``: its share groups leave memory (the new
    coordinator loads them from the log)."""
    mgr = share_manager(broker)
    for gid in [gid for gid in mgr.groups if rec.partition_for(gid, num_partitions) == partition]:
        g = mgr.groups.pop(gid)
        for m in g.members.values():
            if m.timer is not None:
                m.timer.cancel()
        mgr.records.forget(gid)
