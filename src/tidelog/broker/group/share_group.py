"""Share groups of KIP-932 (ShareGroupHeartbeat 76, ShareGroupDescribe 77) and the share-partition state and share
sessions a broker keeps for ShareFetch (78) / ShareAcknowledge (79).

**Membership** (on the group coordinator): a member joins with epoch 0 and its subscribed topic names, heartbeats
with its epoch, leaves with -1; ``group.share.session.timeout.ms`` without a heartbeat removes it. Any change of
membership, subscriptions or the subscribed topics' partition counts bumps the group epoch and recomputes the
assignment with Kafka's *simple* assignor: per topic, with P partitions and M subscribed members (sorted by id),
partition i goes to member i mod M when P >= M, else member j gets partition j mod P, so a partition may be shared
by several members (records, not partitions, are what members exclusively hold). No revocation step: a member's
epoch is the group's as soon as it heartbeats, and the response carries its assignment when it changed.

**Share partitions** (on the partition leader): one :class:`SharePartition` per (group, topic id, partition),
created on the first ShareFetch, starting at ``share.auto.offset.reset`` (latest: the high watermark; earliest:
the log start). A member leaving or expiring releases the records it holds.

**Share sessions** (KIP-932's incremental ShareFetch sessions): keyed by (group, member), epoch 0 opens (replacing
the member's previous one), -1 closes (releasing what the member holds), otherwise the epoch must be the session's
next one (INVALID_SHARE_SESSION_EPOCH) or SHARE_SESSION_NOT_FOUND; at most ``group.share.max.share.sessions``
(SHARE_SESSION_LIMIT_REACHED).

Lock expiry: a sweep every ``SWEEP_S`` releases expired locks (a SIGKILLed member's records come back after the
lock duration), besides the check on every fetch.

The share partitions' state is persisted in ``__share_group_state`` through the share coordinator
(``share_state_store``: read when a share partition is first used here, written on every acknowledgement); group
membership in ``__consumer_offsets`` as Kafka's ShareGroup* records (``share_group_store``). See
docs/decisions/0067-share-groups.md and 0073-share-group-records.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidelog.broker.group import share_group_init, share_metrics
from tidelog.broker.group.share_group_store import ShareGroupStore
from tidelog.broker.group.share_partition import SharePartition
from tidelog.broker.group.share_settings import ShareSettings, TimeIndexed
from tidelog.broker.group.share_state_store import ShareStateStore
from tidelog.broker.group_configs import parse_auto_offset_reset
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

log = logging.getLogger("tidelog.broker.group.share")

NONE = 0
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
FENCED_MEMBER_EPOCH = ErrorCode.FENCED_MEMBER_EPOCH
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
SHARE_SESSION_NOT_FOUND = ErrorCode.SHARE_SESSION_NOT_FOUND
INVALID_SHARE_SESSION_EPOCH = ErrorCode.INVALID_SHARE_SESSION_EPOCH
SHARE_SESSION_LIMIT_REACHED = ErrorCode.SHARE_SESSION_LIMIT_REACHED

LEAVE_EPOCH = -1
SWEEP_S = 0.5
ASSIGNOR = "simple"

DEFAULTS = {
    "group.share.session.timeout.ms": 45000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.max.size": 200,
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
    "group.share.delivery.count.limit": 5,
    "group.share.partition.max.record.locks": 2000,
    "group.share.max.share.sessions": 2000,
}
# Kafka's bounds of the delivery count limit and the record locks per partition (ShareGroupConfig)
DELIVERY_LIMIT_RANGE = (2, 10)
MAX_LOCKS_RANGE = (100, 10000)

TP = tuple[str, int]  # (topic name, partition)
INIT_KEY = "_initialize"  # the heartbeat's partitions to initialize (share_group_init), popped by the handler


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed: list[str] = field(default_factory=list)
    epoch: int = 0
    assigned: set[TP] = field(default_factory=set)
    sent: frozenset[TP] | None = None  # the assignment last told to the member
    timer: asyncio.TimerHandle | None = None
    previous_epoch: int = 0  # ShareGroupCurrentMemberAssignment.PreviousMemberEpoch


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # subscribed topic -> its initialized partitions at the last assignment (share_group_init.assignable)
    partitions_seen: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def state(self) -> str:
        if not self.members:
            return "Empty"
        return "Stable"


@dataclass(slots=True)
class ShareSession:
    epoch: int = 1  # the next epoch expected
    partitions: set[tuple[bytes, int]] = field(default_factory=set)


def _conf(props: Any, name: str) -> int:
    return int(props.get(name, str(DEFAULTS[name])))


def simple_assign(members: dict[str, ShareMember], partitions: dict[str, tuple[int, ...]]) -> dict[str, set[TP]]:
    """Kafka's simple share assignor (homogeneous case per topic) over the assignable (initialized) partitions of
    each topic: every partition to at least one member, every member at least one partition of each topic it
    subscribes to that has assignable partitions."""
    out: dict[str, set[TP]] = {mid: set() for mid in members}
    for topic in sorted(partitions):
        parts = sorted(partitions[topic])
        n = len(parts)
        subs = sorted(mid for mid, m in members.items() if topic in m.subscribed)
        if not subs or n <= 0:
            continue
        if n >= len(subs):
            for i, p in enumerate(parts):
                out[subs[i % len(subs)]].add((topic, p))
        else:
            for j, mid in enumerate(subs):
                out[mid].add((topic, parts[j % n]))
    return out


def share_manager(broker: Broker) -> ShareGroupManager:
    """The broker's share-group manager, made on first use."""
    mgr: ShareGroupManager | None = getattr(broker, "share_groups", None)
    if mgr is None:
        mgr = ShareGroupManager(broker)
        broker.share_groups = mgr  # type: ignore[attr-defined]
        made = mgr
        broker.metrics.add_rows_source(lambda: share_metrics.rows(made))  # share_metrics: the Prometheus rows
    return mgr


class ShareGroupManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        props = broker.config.props
        self.session_ms = _conf(props, "group.share.session.timeout.ms")
        self.heartbeat_ms = min(_conf(props, "group.share.heartbeat.interval.ms"), max(self.session_ms // 3, 1))
        self.max_size = _conf(props, "group.share.max.size")
        lo = _conf(props, "group.share.min.record.lock.duration.ms")
        hi = _conf(props, "group.share.max.record.lock.duration.ms")
        self.lock_ms = min(max(_conf(props, "group.share.record.lock.duration.ms"), lo), hi)
        self.delivery_limit = min(max(_conf(props, "group.share.delivery.count.limit"), DELIVERY_LIMIT_RANGE[0]),
                                  DELIVERY_LIMIT_RANGE[1])
        self.max_locks = min(max(_conf(props, "group.share.partition.max.record.locks"), MAX_LOCKS_RANGE[0]),
                             MAX_LOCKS_RANGE[1])
        self.max_sessions = _conf(props, "group.share.max.share.sessions")
        reset = str(props.get("share.auto.offset.reset", "latest")).lower()
        self.reset_earliest = reset == "earliest"
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[tuple[str, bytes, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self.changed = asyncio.Event()  # set when records become available again (release, expiry)
        self.store = ShareStateStore(self)  # share-partition state through the share coordinator
        self.records = ShareGroupStore(self)  # the groups' ShareGroup* records in __consumer_offsets
        self.counters = share_metrics.ShareCounters()  # share_metrics: the Prometheus rows

    # ================================================================================= membership

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def _topic_partitions(self, gid: str, names: set[str]) -> dict[str, tuple[int, ...]]:
        """The partitions of ``names`` the group may assign: those initialized (share_group_init)."""
        return share_group_init.assignable(self, gid, names)

    def reassign_if_needed(self, g: ShareGroup, changed: bool = False) -> bool:
        """Recompute the assignment (new group epoch) when membership changed or the assignable partitions of the
        subscribed topics did (Kafka's metadata hash / ``initializedAssignmentPending``); whether it did."""
        wanted = self._topic_partitions(g.group_id, {t for x in g.members.values() for t in x.subscribed})
        if not changed and wanted == g.partitions_seen:
            return False
        g.epoch += 1
        self.counters.rebalances += 1
        g.partitions_seen = wanted
        for member_id, tps in simple_assign(g.members, wanted).items():
            g.members[member_id].assigned = tps
        g.assignment_epoch = g.epoch
        return True

    def heartbeat(self, req: dict[str, Any], client_id: str, client_host: str) -> dict[str, Any]:
        gid = req.get("group_id") or ""
        mid = req.get("member_id") or ""
        epoch = int(req.get("member_epoch", 0))
        subscribed = req.get("subscribed_topic_names")
        if not gid:
            return _hb_error(INVALID_REQUEST, "GroupId can't be empty.")
        if not mid:
            return _hb_error(INVALID_REQUEST, "MemberId can't be empty.")
        if epoch == 0 and not subscribed:
            return _hb_error(INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if epoch < LEAVE_EPOCH:
            return _hb_error(INVALID_REQUEST, f"MemberEpoch is {epoch}, but must be greater than or equal to -1.")
        coord = getattr(self.broker, "group_coordinator", None)
        if gid not in self.groups and coord is not None and (
                (gid in coord.groups and coord.groups[gid].members) or coord.consumer.is_consumer_group(gid)):
            return _hb_error(GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        g = self.groups.get(gid)
        if epoch == LEAVE_EPOCH:
            if g is not None and mid in g.members:
                # the member's final ShareAcknowledge / ShareFetch (session epoch -1) may still be on its way on
                # another connection: its session closes then, or after a lock duration at the latest
                self._remove(g, mid, close=False)
                asyncio.get_running_loop().call_later(self.settings(gid).lock_ms / 1000.0, self._left, gid, mid)
            return {"error_code": NONE, "error_message": None, "member_id": mid, "member_epoch": LEAVE_EPOCH,
                    "heartbeat_interval_ms": 0, "assignment": None}
        if g is None:
            if epoch != 0:
                return _hb_error(UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            g = self.groups[gid] = ShareGroup(gid)
        m = g.members.get(mid)
        changed = False
        if m is None:
            if epoch != 0:
                return _hb_error(UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            if len(g.members) >= self.max_size:
                return _hb_error(GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum capacity of "
                                 f"{self.max_size} members.")
            m = g.members[mid] = ShareMember(mid)
            changed = True
        elif epoch != 0 and epoch != m.epoch:
            return _hb_error(FENCED_MEMBER_EPOCH, f"The share group member has an epoch {epoch} which is "
                                                  f"different from the expected {m.epoch}.")
        elif epoch == 0:
            m.sent = None  # a rejoin with the same id: tell the assignment again
        m.client_id, m.client_host = client_id, client_host
        if req.get("rack_id") is not None:
            m.rack_id = req.get("rack_id")
        if subscribed is not None and sorted(subscribed) != sorted(m.subscribed):
            m.subscribed = sorted(set(subscribed))
            changed = True
        todo = share_group_init.mark_initializing(self, g)
        self.reassign_if_needed(g, changed)
        if m.epoch != g.epoch:
            m.previous_epoch, m.epoch = m.epoch, g.epoch
        self._touch(g, m)
        send = m.sent is None or m.sent != frozenset(m.assigned)
        if send:
            m.sent = frozenset(m.assigned)
        return {"error_code": NONE, "error_message": None, "member_id": mid, "member_epoch": m.epoch,
                "heartbeat_interval_ms": self.settings(gid).heartbeat_ms,
                "assignment": {"topic_partitions": self._by_topic_id(m.assigned)} if send else None,
                INIT_KEY: todo}

    def _by_topic_id(self, tps: set[TP], names: bool = False) -> list[dict[str, Any]]:
        by: dict[str, list[int]] = {}
        for t, p in tps:
            by.setdefault(t, []).append(p)
        out = []
        for t in sorted(by):
            info = self.broker.topics.get(t)
            if info is None:
                continue
            entry: dict[str, Any] = {"topic_id": info.topic_id, "partitions": sorted(by[t])}
            if names:
                entry["topic_name"] = t
            out.append(entry)
        return out

    def _touch(self, g: ShareGroup, m: ShareMember) -> None:
        if m.timer is not None:
            m.timer.cancel()
        loop = asyncio.get_running_loop()
        m.timer = loop.call_later(self.settings(g.group_id).session_ms / 1000.0, self._expired, g.group_id,
                                  m.member_id)
        self._ensure_sweeper()

    def _expired(self, gid: str, mid: str) -> None:
        g = self.groups.get(gid)
        if g is not None and mid in g.members:
            log.info("share group member session expired", extra={"kv": {"group": gid, "member": mid}})
            self._remove(g, mid)

    def _left(self, gid: str, mid: str) -> None:
        g = self.groups.get(gid)
        if (gid, mid) in self.sessions and (g is None or mid not in g.members):
            self.close_session(gid, mid)

    def _remove(self, g: ShareGroup, mid: str, close: bool = True) -> None:
        m = g.members.pop(mid, None)
        if m is not None and m.timer is not None:
            m.timer.cancel()
        if close:
            self.close_session(g.group_id, mid)
        self.reassign_if_needed(g, changed=True)
        self.records.schedule(g.group_id)  # the member's records tombstoned (share_group_store)

    def list_groups(self, states: set[str], types: set[str]) -> list[dict[str, Any]]:
        if types and "share" not in types:
            return []
        return [{"group_id": g.group_id, "protocol_type": "share", "group_state": g.state(), "group_type": "share"}
                for g in self.groups.values() if not states or g.state().lower() in states]

    def describe(self, gid: str) -> dict[str, Any]:
        g = self.groups.get(gid)
        if g is None:
            return {"error_code": GROUP_ID_NOT_FOUND, "error_message": f"Group {gid} not found.", "group_id": gid,
                    "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                    "members": []}
        members = [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                    "client_id": m.client_id, "client_host": m.client_host, "subscribed_topic_names": m.subscribed,
                    "assignment": {"topic_partitions": self._by_topic_id(m.assigned, names=True)}}
                   for m in g.members.values()]
        return {"error_code": NONE, "error_message": None, "group_id": gid, "group_state": g.state(),
                "group_epoch": g.epoch, "assignment_epoch": g.assignment_epoch, "assignor_name": ASSIGNOR,
                "members": members}

    # ================================================================================ share sessions

    def session(self, gid: str, mid: str, epoch: int) -> tuple[int, ShareSession | None]:
        """The member's session for a request of share session ``epoch`` (0 opens a new one)."""
        key = (gid, mid)
        if epoch == 0:
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                return SHARE_SESSION_LIMIT_REACHED, None
            new = self.sessions[key] = ShareSession()
            return NONE, new
        s = self.sessions.get(key)
        if s is None:
            return SHARE_SESSION_NOT_FOUND, None
        if epoch != LEAVE_EPOCH and epoch != s.epoch:
            return INVALID_SHARE_SESSION_EPOCH, None
        return NONE, s

    def close_session(self, gid: str, mid: str) -> None:
        """The member's session ends (epoch -1, or it left the group): it releases every record it holds."""
        self.sessions.pop((gid, mid), None)
        released = 0
        for key, sp in self.partitions.items():
            if key[0] == gid:
                n = sp.release_member(mid)
                if n:
                    self.store.persist_soon(key)  # released records: their state written (as Kafka)
                released += n
        if released:
            self._wake()

    # ============================================================================ per-group settings

    def settings(self, gid: str) -> ShareSettings:
        """The group's share settings: its GROUP configs (``share.*``, Kafka 4's group config resource,
        broker/group_configs.py) over the broker's ``group.share.*`` values."""
        configs = self.broker.group_configs
        if configs is None:
            return ShareSettings(self.session_ms, self.heartbeat_ms, self.lock_ms, self.delivery_limit,
                                 self.max_locks, "earliest" if self.reset_earliest else "latest", None)
        e = configs.effective(gid)
        kind, back_ms = parse_auto_offset_reset(e.share_auto_offset_reset)
        return ShareSettings(e.share_session_timeout_ms, e.share_heartbeat_interval_ms,
                             e.share_record_lock_duration_ms,
                             min(max(e.share_delivery_count_limit, DELIVERY_LIMIT_RANGE[0]), DELIVERY_LIMIT_RANGE[1]),
                             min(max(e.share_partition_max_record_locks, MAX_LOCKS_RANGE[0]), MAX_LOCKS_RANGE[1]),
                             kind, back_ms)

    def lock_ms_of(self, gid: str) -> int:
        """The group's current ``share.record.lock.duration.ms`` (cheap: the effective configs are cached)."""
        configs = self.broker.group_configs
        return self.lock_ms if configs is None else configs.effective(gid).share_record_lock_duration_ms

    # ============================================================================ share partitions

    def share_partition(self, gid: str, topic_id: bytes, partition: int, log_start: int, high_watermark: int,
                        plog: TimeIndexed | None = None) -> SharePartition:
        key = (gid, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            s = self.settings(gid)
            start = s.start_offset(log_start, high_watermark, plog)
            sp = self.partitions[key] = SharePartition(start, s.lock_ms, s.delivery_limit, s.max_locks)
            self._ensure_sweeper()  # the leader of a partition may not be the group's coordinator
        else:
            sp.reset_start(log_start)
            # the group's current share.record.lock.duration.ms for this acquisition (Kafka's SharePartition reads
            # the group config at every acquire; RENEW uses the same value)
            sp.lock_ms = self.lock_ms_of(gid)
        return sp

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        if getattr(self.broker, "stopping", False):
            return
        now = time.monotonic()
        expired = [key for key, sp in self.partitions.items() if sp.expire(now)]
        for key in expired:
            self.store.persist_soon(key)  # expired locks: the records' state written (as Kafka)
        if expired:
            self._wake()
        if self.partitions or any(g.members for g in self.groups.values()):
            self._ensure_sweeper()

    def shutdown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for g in self.groups.values():
            for m in g.members.values():
                if m.timer is not None:
                    m.timer.cancel()


def _hb_error(code: int, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "member_id": None, "member_epoch": -1,
            "heartbeat_interval_ms": 0, "assignment": None}
