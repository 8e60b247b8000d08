"""Installing the KIP-848 groups replayed from ``__consumer_offsets`` (:class:`consumer_store.ConsumerReplay`) into
the group manager, when a partition of the topic loads."""

from __future__ import annotations

from typing import Any, Protocol

from tidelog.broker.group import consumer_records as crec
from tidelog.broker.group.assignors import TopicPartition
from tidelog.broker.group.consumer_model import ConsumerGroup, ConsumerMember
from tidelog.broker.group.consumer_store import ConsumerGroupStore, ConsumerReplay, log
from tidelog.broker.topic_model import TopicInfo


class _TopicsById(Protocol):
    def by_id(self, topic_id: bytes) -> TopicInfo | None: ...


class InstallHost(Protocol):
    """What installing replayed groups reads and changes of the group manager (``ConsumerGroupManager``)."""

    coordinator: Any  # its broker's topics resolve the records' topic ids
    assignors: list[str]
    groups: dict[str, ConsumerGroup]
    topics_version: int
    store: ConsumerGroupStore

    def loaded_group(self, g: ConsumerGroup) -> None: ...


class NamedPartitions:
    """A replayed assignment (topic ids) as topic-partition names, each id looked up once; a partition of a topic
    that no longer exists is dropped (the consumer and the share group loads alike)."""

    def __init__(self, topics: _TopicsById) -> None:
        self._topics = topics
        self._names: dict[bytes, str | None] = {}

    def name(self, topic_id: bytes) -> str | None:
        if topic_id not in self._names:
            info = self._topics.by_id(topic_id)
            self._names[topic_id] = info.name if info is not None else None
        return self._names[topic_id]

    def __call__(self, assignment: crec.TopicAssignment) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for tid, ps in assignment.items():
            name = self.name(tid)
            if name is not None:
                out.update((name, p) for p in ps)
        return out


def install(mgr: InstallHost, replayed: ConsumerReplay) -> int:
    """Build the replayed groups in ``mgr`` (on the loop); the number installed."""
    tps = NamedPartitions(mgr.coordinator.broker.topics)
    installed = 0
    for gid, recs in replayed.groups.items():
        decoded: dict[int, dict[str | None, bytes]] = {}
        for kb, vb in recs.items():
            k = crec.decode_key(kb)
            decoded.setdefault(k.type, {})[k.regex if k.type == crec.REGULAR_EXPRESSION else k.member_id] = vb
        try:
            meta = decoded.get(crec.GROUP_METADATA, {}).get(None)
            if meta is None:
                continue  # member records without their group's: not a group (Kafka would fail the load)
            g = ConsumerGroup(gid, assignor=mgr.assignors[0])
            g.group_epoch = crec.decode_epoch(meta)
            tmeta = decoded.get(crec.TARGET_METADATA, {}).get(None)
            g.assignment_epoch = crec.decode_epoch(tmeta) if tmeta is not None else 0
            for mid, vb in decoded.get(crec.MEMBER_METADATA, {}).items():
                mm = crec.decode_member_metadata(vb)
                m = ConsumerMember(mid or "", mm.instance_id, mm.rack_id, mm.client_id, mm.client_host,
                                   mm.rebalance_timeout_ms if mm.rebalance_timeout_ms >= 0 else 300000,
                                   list(mm.subscribed_topic_names), mm.subscribed_topic_regex,
                                   mm.server_assignor if mm.server_assignor in mgr.assignors else None)
                m.classic = mm.classic  # a member using the classic protocol (its ClassicMemberMetadata)
                g.members[m.member_id] = m
                if m.instance_id is not None:
                    g.static_members[m.instance_id] = m.member_id
            for mid, vb in decoded.get(crec.TARGET_MEMBER, {}).items():
                if mid in g.members:
                    g.target[mid] = tps(crec.decode_target_member(vb))
            for mid, vb in decoded.get(crec.CURRENT_ASSIGNMENT, {}).items():
                m0 = g.members.get(mid or "")
                if m0 is None:
                    continue
                ca = crec.decode_current_assignment(vb)
                m0.epoch, m0.previous_epoch = ca.member_epoch, ca.previous_member_epoch
                m0.state = crec.STATE_NAMES.get(ca.state, "stable")
                m0.assigned = tps(ca.assigned)
                m0.pending_revocation = tps(ca.pending_revocation)
                # KIP-1251: each partition's AssignmentEpochs entry, else the member epoch (not below 0)
                m0.assignment_epochs = {}
                for part in (ca.assigned, ca.pending_revocation):
                    for tid, ps in part.items():
                        name = tps.name(tid)
                        if name is not None:
                            m0.assignment_epochs.update(((name, p), ca.epoch_of(tid, p)) for p in ps)
            for regex, vb in decoded.get(crec.REGULAR_EXPRESSION, {}).items():
                if regex is not None:  # the group's regex resolutions (consumer_regex.py)
                    r = crec.decode_regex_value(vb)
                    g.resolved[regex] = r
                    mgr.topics_version = max(mgr.topics_version, r.version)
                    # the group's last refresh: the oldest of its resolutions (the refresh interval counts from it)
                    g.regex_version = r.version if g.regex_version < 0 else min(g.regex_version, r.version)
                    g.regex_refreshed_ms = r.timestamp if not g.regex_refreshed_ms else min(g.regex_refreshed_ms,
                                                                                            r.timestamp)
        except crec.SchemaError as exc:
            log.warning("skipping undecodable consumer group records", extra={"kv": {"group": gid, "error": str(exc)}})
            continue
        picks = [m.server_assignor for m in g.members.values() if m.server_assignor]
        if picks:
            g.assignor = max(set(picks), key=lambda a: (picks.count(a), a))
        old = mgr.groups.pop(gid, None)
        if old is not None:
            for om in old.members.values():
                om.cancel_timers()
        mgr.groups[gid] = g
        mgr.store.written[gid] = {kb: vb for kb, vb in recs.items()
                                  if crec.key_type(kb) != crec.PARTITION_METADATA}
        mgr.loaded_group(g)
        installed += 1
    return installed
