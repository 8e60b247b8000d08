"""Consumer groups of the KIP-848 protocol (ConsumerGroupHeartbeat, API 68): members, epochs, target assignment
and incremental reconciliation, as Kafka 4's group coordinator has them.

* The **group epoch** moves whenever the group's membership or subscriptions change, or when the partitions of the
  topics it subscribes to change (checked on heartbeats, at most every ``METADATA_CHECK_S``). A new group epoch
  makes the broker compute a **target assignment** with a server-side assignor (``tidelog.broker.group.
  assignors``); its epoch is the **assignment epoch**.
* Each member reconciles towards its target on its own heartbeats (Kafka's CurrentAssignmentBuilder):
  partitions it owns that the target takes away are *revoked* first: the member keeps its epoch and is told its
  new, smaller assignment; only once a heartbeat's owned partitions no longer hold them (or the rebalance timeout
  fences it) is the revocation done. Then it gets the target's epoch and the new partitions that no other member
  still holds (assigned or pending revocation); the others (*unreleased*) come on a later heartbeat. A partition
  is therefore never owned by two members.
* Liveness: ``group.consumer.session.timeout.ms`` without a heartbeat removes the member;
  ``group.consumer.heartbeat.interval.ms`` is told to the member in every response (broker-side values, Kafka's
  bounds ``group.consumer.min/max.*``).
* Fencing: an unknown member id gets UNKNOWN_MEMBER_ID, an epoch ahead of the member's or behind it (except the
  previous epoch with owned partitions within the assignment: a lost response) FENCED_MEMBER_EPOCH; the member
  rejoins with epoch 0.
* Static membership: a member with an ``InstanceId`` leaving with epoch -2 keeps its assignment until its session
  times out; a new member with the same instance id takes its place (and partitions). An instance id held by a
  live member answers UNRELEASED_INSTANCE_ID; a heartbeat naming another member's instance id FENCED_INSTANCE_ID.
* ``group.consumer.max.size``: GROUP_MAX_SIZE_REACHED for a member beyond it.

Durability: members, epochs and assignments are written to ``__consumer_offsets`` as Kafka's ConsumerGroup* records
(``tidelog.broker.group.consumer_store``) and replayed when a partition loads, so members keep their id, epoch and
assignment across a restart or a coordinator move; committed offsets go there as for classic groups (they live in
the coordinator's ``Group`` of the same id).

Everything runs on the broker's event loop; timers are ``loop.call_later``. The assignor runs on the loop too: it
is linear in the group's partitions and members, both bounded (``group.consumer.max.size``, the topics' partitions).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from tidelog.broker.group import consumer_install, consumer_regex, migration
from tidelog.broker.group import records as rec
from tidelog.broker.group.assignors import ASSIGNORS, MemberSubscription, TopicPartition
from tidelog.broker.group.consumer_model import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    ConsumerGroupError,
    ConsumerMember,
)
from tidelog.broker.group.consumer_regex_async import RegexResolver
from tidelog.broker.group.consumer_store import ConsumerGroupStore, ConsumerReplay
from tidelog.broker.re2j import Pattern, PatternError, compile_pattern
from tidelog.errors import ErrorCode

if TYPE_CHECKING:

    from tidelog.broker.group.results import ListedGroup


log = logging.getLogger("tidelog.broker.group.consumer")

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID
FENCED_MEMBER_EPOCH = ErrorCode.FENCED_MEMBER_EPOCH
UNRELEASED_INSTANCE_ID = ErrorCode.UNRELEASED_INSTANCE_ID
UNSUPPORTED_ASSIGNOR = ErrorCode.UNSUPPORTED_ASSIGNOR
STALE_MEMBER_EPOCH = ErrorCode.STALE_MEMBER_EPOCH
UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
INVALID_REGULAR_EXPRESSION = ErrorCode.INVALID_REGULAR_EXPRESSION

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
METADATA_CHECK_S = 1.0
TOPICS_CACHE_S = 0.5
MAX_REGEX_LEN = 1024
REGEX_CACHE = 64  # compiled regexes kept (each up to re2j.MAX_MEM of RE2 memory: at most 512 MiB in all)

# Kafka's GroupCoordinatorConfig defaults
DEFAULTS = {
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.min.heartbeat.interval.ms": 5000,
    "group.consumer.max.heartbeat.interval.ms": 15000,
    "group.consumer.max.size": 2**31 - 1,
    "group.consumer.regex.refresh.interval.ms": 600000,  # Kafka 4.1 (KAFKA-18961)
}
MIN_REGEX_REFRESH_MS = 1000

def _regex(pattern: str) -> Pattern:
    """KIP-848's RE2J syntax, compiled with RE2 (linear-time matching, no backreferences nor lookaround,
    :mod:`tidelog.broker.re2j`); a full match of the topic name, as Kafka's ``Pattern.matcher(topic).matches()``.
    Raises :class:`PatternError`."""
    return compile_pattern(pattern)


def _conf(props: Any, name: str) -> int:
    return int(props.get(name, str(DEFAULTS[name])))


class ConsumerGroupManager:
    """The consumer (KIP-848) groups coordinated by this broker; owned by the :class:`GroupCoordinator`."""

    def __init__(self, coordinator: migration.MigrationCoordinator) -> None:
        self.coordinator = coordinator
        props = coordinator.broker.config.props
        self.min_session_ms = _conf(props, "group.consumer.min.session.timeout.ms")
        self.max_session_ms = _conf(props, "group.consumer.max.session.timeout.ms")
        self.session_ms = min(max(_conf(props, "group.consumer.session.timeout.ms"), self.min_session_ms),
                              self.max_session_ms)
        self.min_heartbeat_ms = _conf(props, "group.consumer.min.heartbeat.interval.ms")
        self.max_heartbeat_ms = _conf(props, "group.consumer.max.heartbeat.interval.ms")
        self.heartbeat_ms = min(max(_conf(props, "group.consumer.heartbeat.interval.ms"), self.min_heartbeat_ms),
                                self.max_heartbeat_ms)
        if self.heartbeat_ms >= self.session_ms:  # Kafka: the interval must be lower than the session timeout
            self.heartbeat_ms = max(self.session_ms // 3, 1)
        self.max_size = _conf(props, "group.consumer.max.size")
        self.migration_policy = migration.policy(props)  # group.consumer.migration.policy (migration.py)
        names = [a.strip() for a in str(props.get("group.consumer.assignors", "uniform")).split(",") if a.strip()]
        self.assignors = [a for a in names if a in ASSIGNORS] or ["uniform"]
        unknown = [a for a in names if a not in ASSIGNORS]
        if unknown:
            log.warning("unknown group.consumer.assignors ignored", extra={"kv": {"assignors": unknown}})
        self.groups: dict[str, ConsumerGroup] = {}
        self._regex_cache: dict[str, Pattern] = {}
        self._topics: dict[str, int] | None = None
        self._topics_at = 0.0
        self._regex_matches: dict[str, frozenset[str]] = {}
        self.topics_version = 0  # changes to the topic set seen (a regex resolution's Version, consumer_regex.py)
        # a group's regexes are resolved again at least this often (ACL changes show then, consumer_regex.py)
        self.regex_refresh_ms = max(_conf(props, "group.consumer.regex.refresh.interval.ms"), MIN_REGEX_REFRESH_MS)
        # (principal, host) of the request being served: the regexes are resolved with its DESCRIBE rights
        self.auth_context: tuple[str, str] | None = None
        self.regex_resolver = RegexResolver(self)  # the resolutions, off the loop (consumer_regex_async.py)
        coordinator.broker.metrics.add_rows_source(self.regex_resolver.rows)
        self.store = ConsumerGroupStore(self)  # ConsumerGroup* records in __consumer_offsets

    def timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a group: its ``consumer.session.timeout.ms`` /
        ``consumer.heartbeat.interval.ms`` group configs (Kafka 4's GROUP config resource) when it has them,
        else the broker's."""
        configs = self.coordinator.broker.group_configs
        if configs is None:
            return self.session_ms, self.heartbeat_ms
        eff = configs.effective(group_id)
        return eff.consumer_session_timeout_ms, eff.consumer_heartbeat_interval_ms

    # ---------------------------------------------------------------------------------------- queries

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def active(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the group's members subscribe to (names and regex matches)."""
        g = self.groups.get(group_id)
        if g is None:
            return set()
        existing = self._existing_topics()
        out: set[str] = set()
        for m in g.members.values():
            out |= self._subscribed_topics(g, m, existing)
        return out

    def list_groups(self, states: set[str], types: set[str]) -> list[ListedGroup]:
        """ListGroups rows (v5: group_type "consumer"; states lower-cased as the filter)."""
        if types and "consumer" not in types:
            return []
        out: list[ListedGroup] = []
        for g in self.groups.values():
            state = g.state()
            if states and state.lower() not in states:
                continue
            out.append({"group_id": g.group_id, "protocol_type": "consumer", "group_state": state,
                        "group_type": "consumer"})
        return out

    def unload_partition(self, partition: int, num_partitions: int) -> None:
        """ZooKeeper mode, leadership of a ``__consumer_offsets`` partition lost: its groups are forgotten here (the
        members find the new coordinator and rejoin there)."""
        for gid in [gid for gid in self.groups if rec.partition_for(gid, num_partitions) == partition]:
            self.drop(gid)

    def restore(self, group_id: str, written: dict[bytes, bytes] | None) -> None:
        """A failed write rolled back (consumer_store.py): the group as its records last written make it, as a load
        builds it (members, epochs, assignments, regex resolutions; session timers anew); a group never written is
        dropped from memory (its creation undone)."""
        g = self.groups.pop(group_id, None)
        if g is not None:
            for m in g.members.values():
                m.cancel_timers()
        if not written:
            return
        replay = ConsumerReplay()
        replay.groups[group_id] = dict(written)
        consumer_install.install(self, replay)

    def drop(self, group_id: str) -> None:
        g = self.groups.pop(group_id, None)
        self.store.forget(group_id)
        if g is not None:
            for m in g.members.values():
                m.cancel_timers()

    def _set_metadata(self, g: ConsumerGroup) -> None:
        """The group's metadata: its members' subscribed topics with their partition counts, as they are now."""
        existing = self._existing_topics()
        topics: set[str] = set()
        for m in g.members.values():
            topics |= self._subscribed_topics(g, m, existing)
        g.metadata = tuple(sorted((t, existing[t]) for t in topics))
        g.metadata_checked = time.monotonic()

    def loaded_group(self, g: ConsumerGroup) -> None:
        """A group replayed from ``__consumer_offsets`` (:func:`consumer_install.install`): its subscribed topics'
        partitions as they are now, a session timer per member (one that does not heartbeat in time is removed,
        as in Kafka after a load) and a revocation timer per member still revoking."""
        self._set_metadata(g)
        loop = asyncio.get_running_loop()
        for m in g.members.values():
            self._touch(g, m)
            if m.state == UNREVOKED:
                m.revocation_timer = loop.call_later(max(m.rebalance_timeout_ms, 1) / 1000.0, self._revocation_expired,
                                                     g.group_id, m.member_id, m.epoch)

    def shutdown(self) -> None:
        self.regex_resolver.shutdown()
        for gid in list(self.groups):
            self.drop(gid)

    # ---------------------------------------------------------------------------------------- offsets

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int, api_version: int,
                        transactional: bool = False) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit: epoch < 0 commits only into an empty group; otherwise the
        member must exist (UNKNOWN_MEMBER_ID), commit with OffsetCommit v9+ (UNSUPPORTED_VERSION) and carry its
        current epoch (STALE_MEMBER_EPOCH)."""
        g = self.groups[group_id]
        if member_epoch < 0 and not g.members:
            return NONE
        m = g.members.get(member_id)
        if m is None:
            return UNKNOWN_MEMBER_ID
        if m.classic is not None:  # a classic member commits with generation = its epoch (ILLEGAL_GENERATION)
            return NONE if member_epoch == m.epoch else ErrorCode.ILLEGAL_GENERATION
        if not transactional and api_version < 9:
            return UNSUPPORTED_VERSION
        if member_epoch == m.epoch or 0 <= member_epoch < m.epoch:  # an older epoch: per partition, below
            return NONE
        return STALE_MEMBER_EPOCH

    def stale_commit_partitions(self, group_id: str, member_id: str, member_epoch: int,
                                partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """KIP-1251 (Kafka's per-partition commit validator): a commit carrying a member epoch older than the
        member's current one (it raced the heartbeat that moved the epoch) is accepted for each partition the member
        still owns (assigned or pending revocation) since an epoch no newer than the commit's; the others are
        STALE_MEMBER_EPOCH. Call after ``validate_commit`` answered NONE."""
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if m is None or member_epoch >= m.epoch:
            return set()
        stale: set[tuple[str, int]] = set()
        for t, p in partitions:
            tp = (t, p)
            owned = tp in m.assigned or tp in m.pending_revocation
            if not owned or m.assignment_epochs.get(tp, m.epoch) > member_epoch:
                stale.add((t, p))
        return stale

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9 with a member id and epoch)."""
        g = self.groups.get(group_id)
        if g is None or (member_id is None and member_epoch < 0):
            return NONE
        m = g.members.get(member_id or "")
        if m is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch != m.epoch:
            return ErrorCode.ILLEGAL_GENERATION if m.classic is not None else STALE_MEMBER_EPOCH
        return NONE

    # ---------------------------------------------------------------------------------------- heartbeat

    def heartbeat(self, version: int, req: dict[str, Any], client_id: str, client_host: str,
                  auth_context: tuple[str, str] | None = None) -> dict[str, Any]:
        """One ConsumerGroupHeartbeat; the response body (without throttle time). Raises nothing for client
        errors: they are answered with the Kafka error code and message. ``auth_context`` (principal, host): the
        regexes this heartbeat resolves keep only the topics that principal may DESCRIBE (consumer_regex.py)."""
        self.auth_context = auth_context
        gid = str(req.get("group_id") or "")
        upgrading = gid in self.store.upgrades  # an earlier request's upgrade, its write under way
        try:
            return self._heartbeat(version, req, client_id, client_host)
        except ConsumerGroupError as exc:
            if not upgrading:  # this request's upgrade of a classic group is undone with it (as Kafka reverts)
                self.store.undo_upgrade(gid)
            return {"error_code": exc.code, "error_message": exc.message, "member_id": None, "member_epoch": -1,
                    "heartbeat_interval_ms": 0, "assignment": None}
        finally:
            self.auth_context = None

    def _validate(self, version: int, req: dict[str, Any]) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (v1: the member id is the client's)."""
        def empty(value: Any, what: str) -> None:
            if value is not None and not str(value).strip():
                raise ConsumerGroupError(INVALID_REQUEST, f"{what} can't be empty.")

        empty(req.get("group_id"), "GroupId")
        if not req.get("group_id"):
            raise ConsumerGroupError(INVALID_REQUEST, "GroupId can't be empty.")
        empty(req.get("instance_id"), "InstanceId")
        empty(req.get("rack_id"), "RackId")
        epoch = int(req.get("member_epoch", 0))
        member_id = req.get("member_id") or ""
        if version >= 1 and not member_id.strip():
            raise ConsumerGroupError(INVALID_REQUEST, "MemberId can't be empty.")
        if epoch > 0 or epoch == LEAVE_EPOCH:
            if not member_id:
                raise ConsumerGroupError(INVALID_REQUEST, "MemberId can't be empty.")
        elif epoch == 0:
            if int(req.get("rebalance_timeout_ms", -1)) == -1:
                raise ConsumerGroupError(INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            owned = req.get("topic_partitions")
            if owned is None or len(owned) > 0:
                raise ConsumerGroupError(INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if not req.get("subscribed_topic_names") and req.get("subscribed_topic_regex") is None:
                raise ConsumerGroupError(INVALID_REQUEST,
                                         "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if not member_id:
                raise ConsumerGroupError(INVALID_REQUEST, "MemberId can't be empty.")
            if req.get("instance_id") is None:
                raise ConsumerGroupError(INVALID_REQUEST, "InstanceId can't be null.")
        else:
            raise ConsumerGroupError(INVALID_REQUEST, "MemberEpoch is invalid.")
        assignor = req.get("server_assignor")
        if assignor is not None and assignor not in self.assignors:
            raise ConsumerGroupError(
                UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {assignor} is not supported. Supported assignors: {', '.join(self.assignors)}.")

    def _check_regex(self, regex: str) -> None:
        """Kafka's throwIfRegularExpressionIsInvalid (RE2J there, RE2 here), where Kafka calls it: when a joining or
        existing member's regex changes, after the group and member checks (not on a leave)."""
        if len(regex) > MAX_REGEX_LEN:  # tidelog's bound (Kafka has none)
            raise ConsumerGroupError(INVALID_REGULAR_EXPRESSION, "SubscribedTopicRegex is too long.")
        try:
            self._compiled(regex)
        except PatternError as exc:
            raise ConsumerGroupError(
                INVALID_REGULAR_EXPRESSION,
                f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc.description}.") from None

    def _compiled(self, pattern: str) -> Pattern:
        """``pattern`` compiled (cached; at most REGEX_CACHE of them); raises :class:`PatternError`."""
        rx = self._regex_cache.get(pattern)
        if rx is None:
            if len(self._regex_cache) >= REGEX_CACHE:
                self._regex_cache.clear()
            rx = self._regex_cache[pattern] = _regex(pattern)
        return rx

    def _group_for_join(self, group_id: str) -> ConsumerGroup:
        g = self.groups.get(group_id)
        if g is not None:
            return g
        classic = self.coordinator.groups.get(group_id)
        if classic is not None and classic.members:
            # group.consumer.migration.policy: converted (migration.py), or GROUP_ID_NOT_FOUND
            return migration.upgrade(self, classic)
        g = self.groups[group_id] = ConsumerGroup(group_id, assignor=self.assignors[0])
        if classic is not None:  # an empty classic group (offsets only) becomes a consumer group
            classic.protocol_type = "consumer"
        return g

    def _heartbeat(self, version: int, req: dict[str, Any], client_id: str, client_host: str) -> dict[str, Any]:
        self._validate(version, req)
        group_id = str(req["group_id"])
        epoch = int(req.get("member_epoch", 0))
        member_id = str(req.get("member_id") or "")
        instance_id = req.get("instance_id")
        regex = req.get("subscribed_topic_regex") if version >= 1 else None
        if epoch == 0:
            if regex:  # before the join changes anything (Kafka: after its group checks, then reverted)
                self._check_regex(regex)
            g = self._group_for_join(group_id)
            if not member_id:
                member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        else:
            g0 = self.groups.get(group_id)
            if g0 is None:
                raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            g = g0
        if epoch == LEAVE_EPOCH:
            return self._leave(g, member_id, instance_id)
        if epoch == STATIC_LEAVE_EPOCH:
            return self._static_leave(g, member_id, instance_id)

        changed = False  # the group epoch must move
        if epoch == 0:
            m, changed = self._join(g, member_id, instance_id)
        else:
            m = self._existing(g, member_id, instance_id, epoch, req.get("topic_partitions"))
            if regex and regex != m.subscribed_regex:
                self._check_regex(regex)
        before = (m.epoch, frozenset(m.assigned))
        # fields a heartbeat may change (null = unchanged)
        m.client_id, m.client_host = client_id, client_host
        if req.get("rack_id") is not None:
            m.rack_id = req["rack_id"]
        if int(req.get("rebalance_timeout_ms", -1)) >= 0:
            m.rebalance_timeout_ms = int(req["rebalance_timeout_ms"])
        names = req.get("subscribed_topic_names")
        if names is not None and sorted(set(names)) != sorted(set(m.subscribed_names)):
            m.subscribed_names = sorted(set(names))
            changed = True
        if version >= 1 and "subscribed_topic_regex" in req and req["subscribed_topic_regex"] is not None:
            regex = req["subscribed_topic_regex"] or None
            if regex != m.subscribed_regex:
                m.subscribed_regex = regex
                changed = True
        if req.get("server_assignor") is not None and req["server_assignor"] != m.server_assignor:
            m.server_assignor = req["server_assignor"]
            changed = True
        self._touch(g, m)
        if self._metadata_changed(g, force=changed):
            changed = True
        if changed:
            g.group_epoch += 1
        if g.group_epoch != g.assignment_epoch:
            self._compute_target(g)
        owned = self._owned(req.get("topic_partitions"))
        self._reconcile(g, m, owned)
        after = (m.epoch, frozenset(m.assigned))
        send = epoch == 0 or before != after or (owned is not None and owned != m.assigned)
        return {"error_code": NONE, "error_message": None, "member_id": m.member_id, "member_epoch": m.epoch,
                "heartbeat_interval_ms": self.timeouts(g.group_id)[1],
                "assignment": {"topic_partitions": self._by_topic_id(m.assigned)} if send else None}

    def _join(self, g: ConsumerGroup, member_id: str, instance_id: str | None) -> tuple[ConsumerMember, bool]:
        if instance_id is not None:
            old_id = g.static_members.get(instance_id)
            old = g.members.get(old_id) if old_id is not None else None
            if old is not None and old.member_id != member_id:
                if old.epoch != STATIC_LEAVE_EPOCH and old.classic is None:  # a classic one is replaced at once
                    raise ConsumerGroupError(
                        UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {instance_id} cannot join the group because "
                        f"the instance id is owned by {old.member_id} member.")
                # the new member takes the old one's place and partitions (Kafka's replaceMember)
                old.cancel_timers()
                del g.members[old.member_id]
                m = ConsumerMember(member_id, instance_id, old.rack_id, rebalance_timeout_ms=old.rebalance_timeout_ms,
                                   subscribed_names=list(old.subscribed_names), subscribed_regex=old.subscribed_regex,
                                   server_assignor=old.server_assignor, assigned=set(old.assigned),
                                   pending_revocation=set(old.pending_revocation))
                # KIP-1251: the partitions it takes over count as assigned at epoch 0 (Kafka resets a static
                # member's assignment epochs when it is replaced)
                m.assignment_epochs = dict.fromkeys(m.assigned | m.pending_revocation, 0)
                if old.member_id in g.target:
                    g.target[member_id] = g.target.pop(old.member_id)
                g.members[member_id] = m
                g.static_members[instance_id] = member_id
                m.state = UNREVOKED if m.pending_revocation else STABLE
                return m, False
        m0 = g.members.get(member_id)
        if m0 is not None:
            # rejoining with epoch 0 (after a fence): it owns nothing now; its partitions are free again
            m0.assigned.clear()
            m0.pending_revocation.clear()
            m0.state = STABLE
            m0.epoch = m0.previous_epoch = 0
            if m0.revocation_timer is not None:
                m0.revocation_timer.cancel()
                m0.revocation_timer = None
            return m0, False
        if len(g.members) >= self.max_size:
            raise ConsumerGroupError(GROUP_MAX_SIZE_REACHED,
                                     f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        m = ConsumerMember(member_id, instance_id)
        g.members[member_id] = m
        if instance_id is not None:
            g.static_members[instance_id] = member_id
        log.info("consumer group member joined", extra={"kv": {"group": g.group_id, "member": member_id,
                                                                "instance": instance_id}})
        return m, True

    def _existing(self, g: ConsumerGroup, member_id: str, instance_id: str | None, epoch: int,
                  owned_raw: list[dict] | None) -> ConsumerMember:
        if instance_id is not None:
            holder = g.static_members.get(instance_id)
            if holder is None:
                raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if holder != member_id:
                raise ConsumerGroupError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                         f"{instance_id} was fenced by member {holder}.")
        m = g.members.get(member_id)
        if m is None:
            raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {g.group_id}.")
        if epoch > m.epoch:
            raise ConsumerGroupError(FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                                     f"({epoch}) than the one known by the group coordinator ({m.epoch}). The "
                                     "member must abandon all its partitions and rejoin.")
        if epoch < m.epoch:
            owned = self._owned(owned_raw)
            if not (epoch == m.previous_epoch and owned is not None and owned <= m.assigned):
                raise ConsumerGroupError(FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                                         f"({epoch}) than the one known by the group coordinator ({m.epoch}). The "
                                         "member must abandon all its partitions and rejoin.")
        return m

    def _leave(self, g: ConsumerGroup, member_id: str, instance_id: str | None) -> dict[str, Any]:
        m = g.members.get(member_id)
        if m is None and instance_id is not None:
            holder = g.static_members.get(instance_id)
            m = g.members.get(holder) if holder is not None else None
        if m is None:
            raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {g.group_id}.")
        self.remove_member(g, m, "left")
        return {"error_code": NONE, "error_message": None, "member_id": member_id, "member_epoch": LEAVE_EPOCH,
                "heartbeat_interval_ms": 0, "assignment": None}

    def _static_leave(self, g: ConsumerGroup, member_id: str, instance_id: str | None) -> dict[str, Any]:
        holder = g.static_members.get(instance_id or "")
        if holder is None:
            raise ConsumerGroupError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if holder != member_id:
            raise ConsumerGroupError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                     f"{instance_id} was fenced by member {holder}.")
        m = g.members[holder]
        # keeps its assignment (nobody else gets it) until it comes back or its session times out
        m.epoch = STATIC_LEAVE_EPOCH
        if m.revocation_timer is not None:
            m.revocation_timer.cancel()
            m.revocation_timer = None
        self._touch(g, m)
        return {"error_code": NONE, "error_message": None, "member_id": member_id, "member_epoch": STATIC_LEAVE_EPOCH,
                "heartbeat_interval_ms": 0, "assignment": None}

    # ---------------------------------------------------------------------------------------- membership

    def remove_member(self, g: ConsumerGroup, m: ConsumerMember, why: str, downgrade: bool = True) -> None:
        """Remove ``m``; when the others all use the classic protocol the group may become classic instead
        (``downgrade``, migration.py)."""
        m.cancel_timers()
        if g.members.get(m.member_id) is not m:
            return
        if downgrade and migration.maybe_downgrade(self, g, m):
            return
        del g.members[m.member_id]
        if m.instance_id is not None and g.static_members.get(m.instance_id) == m.member_id:
            del g.static_members[m.instance_id]
        g.target.pop(m.member_id, None)
        consumer_regex.prune(g)  # a regex nobody subscribes to any more: its record is tombstoned
        g.group_epoch += 1
        log.info("consumer group member removed", extra={"kv": {"group": g.group_id, "member": m.member_id,
                                                                 "reason": why, "group_epoch": g.group_epoch}})
        if g.members:
            self._compute_target(g)
        self.store.schedule(g.group_id)

    def _touch(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        if m.session_timer is not None:
            m.session_timer.cancel()
        loop = asyncio.get_running_loop()
        session_ms = m.classic.session_timeout_ms if m.classic is not None else self.timeouts(g.group_id)[0]
        m.session_timer = loop.call_later(session_ms / 1000.0, self._session_expired, g.group_id, m.member_id)

    def _session_expired(self, group_id: str, member_id: str) -> None:
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if g is not None and m is not None:
            self.remove_member(g, m, "session timeout")

    def _revocation_expired(self, group_id: str, member_id: str, epoch: int) -> None:
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if g is not None and m is not None and m.state == UNREVOKED and m.epoch == epoch:
            self.remove_member(g, m, "rebalance timeout (partitions not revoked)")

    # ---------------------------------------------------------------------------------------- assignment

    def _subscribed_topics(self, g: ConsumerGroup, m: ConsumerMember, existing: dict[str, int]) -> frozenset[str]:
        out = {t for t in m.subscribed_names if t in existing}
        if m.subscribed_regex:  # the group's resolution of the regex (consumer_regex.py)
            out.update(t for t in consumer_regex.topics(g, m.subscribed_regex) if t in existing)
        return frozenset(out)

    def _existing_topics(self) -> dict[str, int]:
        """Topic -> partition count, shared by every group for TOPICS_CACHE_S (and the regex matches with it): a
        metadata check costs a dict lookup per subscribed topic, not a scan of every topic per member."""
        now = time.monotonic()
        if self._topics is None or now - self._topics_at >= TOPICS_CACHE_S:
            before = self._topics
            self._topics = {info.name: info.num_partitions for info in self.coordinator.broker.topics.all_topics()}
            self._topics_at = now
            if before is None or before.keys() != self._topics.keys():
                self._regex_matches = {}  # the matches depend on the names only
                self.topics_version += 1
        return self._topics

    def _metadata_changed(self, g: ConsumerGroup, force: bool) -> bool:
        """Whether the subscribed topics' partitions changed since the target was computed (checked at most every
        METADATA_CHECK_S per group, and whenever the subscriptions changed)."""
        now = time.monotonic()
        if not force and now - g.metadata_checked < METADATA_CHECK_S:
            return False
        g.metadata_checked = now
        existing = self._existing_topics()
        consumer_regex.refresh(self, g, existing)  # the regexes resolved again (their topics change the metadata)
        topics: set[str] = set()
        for m in g.members.values():
            topics |= self._subscribed_topics(g, m, existing)
        md = tuple(sorted((t, existing[t]) for t in topics))
        if md != g.metadata:
            g.metadata = md
            return True
        return False

    def regexes_applied(self, g: ConsumerGroup) -> None:
        """A resolution whose topics changed was applied (consumer_regex_async.py): a new group epoch (Kafka's
        handleRegularExpressionsResult), the metadata and target with it; members see it on their next heartbeat."""
        self._set_metadata(g)
        g.group_epoch += 1
        self._compute_target(g)

    def _compute_target(self, g: ConsumerGroup) -> None:
        existing = self._existing_topics()
        subs = {mid: MemberSubscription(self._subscribed_topics(g, m, existing), set(m.assigned | m.pending_revocation))
                for mid, m in g.members.items()}
        picks = [m.server_assignor for m in g.members.values() if m.server_assignor]
        name = max(set(picks), key=lambda a: (picks.count(a), a)) if picks else self.assignors[0]
        g.assignor = name
        g.target = ASSIGNORS[name](subs, existing)
        g.assignment_epoch = g.group_epoch

    def _reconcile(self, g: ConsumerGroup, m: ConsumerMember, owned: set[TopicPartition] | None) -> None:
        """Kafka's CurrentAssignmentBuilder for one member, on its heartbeat."""
        target = g.target.get(m.member_id, set())
        if m.state == UNREVOKED:
            if owned is None or owned & m.pending_revocation:
                return  # still revoking (or the heartbeat did not say): the smaller assignment stands
            m.pending_revocation = set()
            if m.revocation_timer is not None:
                m.revocation_timer.cancel()
                m.revocation_timer = None
            m.state = STABLE
        if m.epoch == g.assignment_epoch and m.state == STABLE and m.assigned == target:
            return
        revoke = m.assigned - target
        if revoke:
            m.assigned -= revoke
            m.pending_revocation = revoke
            m.state = UNREVOKED
            m.revocation_timer = asyncio.get_running_loop().call_later(
                max(m.rebalance_timeout_ms, 1) / 1000.0, self._revocation_expired, g.group_id, m.member_id, m.epoch)
            return
        held: set[TopicPartition] = set()
        for other in g.members.values():
            if other is not m:
                held |= other.assigned
                held |= other.pending_revocation
        new = target - m.assigned
        free = new - held
        m.assigned |= free
        if m.epoch != g.assignment_epoch:
            m.previous_epoch, m.epoch = m.epoch, g.assignment_epoch
        kept = m.assigned | m.pending_revocation
        m.assignment_epochs = {tp: e for tp, e in m.assignment_epochs.items() if tp in kept and tp not in free}
        m.assignment_epochs.update((tp, m.epoch) for tp in free)
        m.state = UNRELEASED if new - free else STABLE

    # ---------------------------------------------------------------------------------------- topic ids

    def _owned(self, raw: list[dict] | None) -> set[TopicPartition] | None:
        if raw is None:
            return None
        topics = self.coordinator.broker.topics
        out: set[TopicPartition] = set()
        for t in raw:
            tid = t.get("topic_id")
            info = topics.by_id(tid.bytes if isinstance(tid, uuid.UUID) else bytes(tid or b""))
            if info is None:
                continue
            out.update((info.name, int(p)) for p in t.get("partitions") or ())
        return out

    def _by_topic_id(self, tps: set[TopicPartition], names: bool = False) -> list[dict[str, Any]]:
        topics = self.coordinator.broker.topics
        by: dict[str, list[int]] = {}
        for t, p in tps:
            by.setdefault(t, []).append(p)
        out = []
        for t in sorted(by):
            info = topics.get(t)
            if info is None:
                continue
            entry: dict[str, Any] = {"topic_id": info.topic_id, "partitions": sorted(by[t])}
            if names:
                entry["topic_name"] = t
            out.append(entry)
        return out

    # ---------------------------------------------------------------------------------------- describe

    def describe(self, group_id: str, version: int) -> dict[str, Any]:
        g = self.groups.get(group_id)
        if g is None:
            return {"error_code": GROUP_ID_NOT_FOUND, "error_message": f"Group {group_id} not found.",
                    "group_id": group_id, "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
                    "assignor_name": "", "members": []}
        return {
            "error_code": NONE, "error_message": None, "group_id": group_id, "group_state": g.state(),
            "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch, "assignor_name": g.assignor,
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_names), "subscribed_topic_regex": m.subscribed_regex,
                "assignment": {"topic_partitions": self._by_topic_id(m.assigned, names=True)},
                "target_assignment": {"topic_partitions": self._by_topic_id(g.target.get(m.member_id, set()),
                                                                            names=True)},
                "member_type": 0 if m.classic is not None else 1,  # classic protocol / consumer protocol
            } for m in g.members.values()],
        }
