"""Group APIs (classic protocol): FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, TxnOffsetCommit.

Thin adapters between request/response versions and :class:`tidelog.broker.group.coordinator.GroupCoordinator`
(``ctx.broker.group_coordinator``). Version notes:

* FindCoordinator v0-3 carries one ``key``; v4+ a batch of ``coordinator_keys``. Key type 0 = group (single
  node: this broker; ZooKeeper mode: the leader of the group's ``__consumer_offsets`` partition); type 1
  (transaction) the transaction coordinator of the id (``broker.txn_coordinator.find_coordinator``); 2 (share,
  v6+, CLUSTER_ACTION) the share coordinator of ``groupId:topicId:partition`` (``group/share_find.py``); other
  key types get INVALID_REQUEST.
* JoinGroup v0 has no rebalance timeout (the session timeout is used); v4+ needs a known member id
  (MEMBER_ID_REQUIRED round trip) unless the member is static (v5+ ``group_instance_id``).
* LeaveGroup v0-2 name one ``member_id``; v3+ a batch of members with per-member errors.
* OffsetFetch v0-1 report errors per partition, v2-7 at the top, v8 per group; v7+ ``require_stable``
  (KIP-447): a partition with a pending transactional offset answers UNSTABLE_OFFSET_COMMIT in its own
  error code (every version that has the flag), as Kafka.
* OffsetCommit / OffsetFetch v10 name topics by id: resolved at the entry (``group_topic_ids.py``).
* TxnOffsetCommit v0-2 name the producer only; v2+ carry the committed leader epoch; v3+ (KIP-447) the member's
  generation, member id and group instance id, checked as Kafka does (an empty member id with generation -1
  skips the check).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tidelog.broker.group import classic_in_consumer
from tidelog.broker.group.coordinator import _join_error
from tidelog.broker.group.share_find import MIN_VERSION as SHARE_MIN_VERSION
from tidelog.broker.group.share_find import find_share_coordinator
from tidelog.broker.group.share_group_cleanup import delete_share_group
from tidelog.broker.handlers import Handler, RequestContext, handles
from tidelog.broker.handlers.group_bodies import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from tidelog.broker.handlers.group_topic_ids import (
    ResolvedTopics,
    commit_response_topics,
    fetch_response_topics,
)
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.errors import ErrorCode, error_code
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.schema import spec_index

if TYPE_CHECKING:
    from tidelog.broker.group.coordinator import GroupCoordinator
    from tidelog.broker.group.records import OffsetValue
    from tidelog.broker.group.results import DescribedGroup, JoinResult
    from tidelog.protocol.schema import FieldSpec

log = logging.getLogger("tidelog.broker.handlers.group")

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
TXN_OFFSET_COMMIT = ApiKey.TXN_OFFSET_COMMIT

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_AUTHORIZATION_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
SHARE_KEY_TYPE = 2  # FindCoordinator's CoordinatorType.SHARE
READ, DESCRIBE, DELETE, WRITE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.WRITE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


Body = dict[str, Any]  # a response body as the encoder takes it
_Req = TypeVar("_Req", bound=Mapping[str, Any])
OffsetRow = tuple[str, int, "OffsetValue | None", int]  # topic, partition, committed value, partition error


def _drop_absent(fields: list[FieldSpec], version: int, body: Mapping[str, Any]) -> Body:
    """Remove the keys ``version`` does not carry (the encoder rejects non-default values there)."""
    out: Body = {}
    for f in fields:
        lo, hi = f.versions
        if f.key not in body or not lo <= version <= hi:
            continue
        value = body[f.key]
        if f.fields and isinstance(value, list):
            value = [_drop_absent(f.fields, version, v) if isinstance(v, dict) else v for v in value]
        elif f.fields and isinstance(value, dict):
            value = _drop_absent(f.fields, version, value)
        out[f.key] = value
    return out


def fit(api_key: int, version: int, body: Mapping[str, Any]) -> Body:
    """``body`` reduced to the fields of the ``api_key`` response at ``version``."""
    spec = spec_index()[(api_key, "response")]
    return _drop_absent(spec.fields, version, body)


def _fitted(api_key: int) -> Callable[[Callable[[RequestContext, _Req], Awaitable[Body]]], Handler]:
    """Decorator: the handler gets the decoded request typed as it declares it (a TypedDict of
    ``group_bodies``: the codec's dict as it is), and its response is passed through :func:`fit` for the request's
    version."""

    def wrap(fn: Callable[[RequestContext, _Req], Awaitable[Body]]) -> Handler:
        async def handler(ctx: RequestContext, request: dict[str, Any]) -> Body:
            return fit(api_key, ctx.api_version, await fn(ctx, cast(_Req, request)))

        handler.__name__ = fn.__name__
        handler.__doc__ = fn.__doc__
        return handler

    return wrap


def _coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    return ctx.broker.group_coordinator  # None until the broker starts


def _str(value: object) -> str:
    return "" if value is None else str(value)


# ------------------------------------------------------------------------------------------ FindCoordinator


async def _find_one(ctx: RequestContext, key: str, key_type: int) -> tuple[int, str | None, tuple[int, str, int]]:
    """(error, message, (node id, host, port)) for one coordinator key."""
    b = ctx.broker
    nowhere = (-1, "", -1)
    coord = _coordinator(ctx)
    # KafkaApis: DESCRIBE on the group / transactional id before anything else
    if key_type == 0 and not ctx.authorize(DESCRIBE, GROUP, key):
        return GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", nowhere
    if key_type == 1 and not ctx.authorize(DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.", nowhere
    if key_type == 1:
        # the transaction coordinator: this broker once __transaction_state exists and is loaded (one node), the
        # leader of the id's partition (ZooKeeper mode)
        if not key:
            return INVALID_REQUEST, "The transactional id must not be empty.", nowhere
        tc = b.txn_coordinator
        if tc is None:
            return COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", nowhere
        err, node = await tc.find_coordinator(key)
        if err is not None or node is None:
            return error_code(err or ErrorCode.COORDINATOR_NOT_AVAILABLE), "The coordinator is not available.", nowhere
        return NONE, None, b.node_endpoint(node, ctx.listener)
    if key_type == SHARE_KEY_TYPE:
        # KafkaApis: v6+ only, CLUSTER_ACTION on the cluster (brokers ask it), then the __share_group_state leader
        if ctx.api_version < SHARE_MIN_VERSION:
            return INVALID_REQUEST, "Share coordinator keys need FindCoordinator v6 or later.", nowhere
        if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", nowhere
        err, msg, node = await find_share_coordinator(b, key)
        return err, msg, b.node_endpoint(node, ctx.listener) if node is not None else nowhere
    if key_type != 0:
        return INVALID_REQUEST, f"Unknown coordinator key type {key_type}", nowhere
    if coord is None or not coord.active or b.stopping:
        return COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", nowhere
    if not key:
        return INVALID_REQUEST, "The group id must not be empty.", nowhere  # Kafka: invalid group id
    # the leader of the group's __consumer_offsets partition (this broker if it leads it), wherever the request
    # landed; the topic is created on first use
    err, msg, node = await coord.find_coordinator(key)
    return err, msg, b.node_endpoint(node, ctx.listener) if node is not None else nowhere


@handles(FIND_COORDINATOR)
@_fitted(FIND_COORDINATOR)
async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> Body:
    key_type = request.get("key_type", 0) or 0
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.get("coordinator_keys") or ():
            err, msg, (node, host, port) = await _find_one(ctx, key, key_type)
            coordinators.append({"key": key, "node_id": node, "host": host, "port": port, "error_code": err,
                                 "error_message": msg})
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    err, msg, (node, host, port) = await _find_one(ctx, _str(request.get("key")), key_type)
    return {
        "throttle_time_ms": 0, "error_code": err, "error_message": msg if ctx.api_version >= 1 else None,
        "node_id": node, "host": host, "port": port,
    }


# ------------------------------------------------------------------------------------------ membership


def _join_response(v: int, res: JoinResult) -> Body:
    out: Body = dict(res)
    if v < 7:
        out["protocol_name"] = _str(out.get("protocol_name"))
    out["leader"] = _str(out.get("leader"))
    out["throttle_time_ms"] = 0
    return out


@handles(JOIN_GROUP)
@_fitted(JOIN_GROUP)
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> Body:
    v = ctx.api_version
    coord = _coordinator(ctx)
    member_id = _str(request.get("member_id"))
    if not ctx.authorize(READ, GROUP, _str(request.get("group_id"))):
        return _join_response(v, _join_error(GROUP_AUTHORIZATION_FAILED, member_id))
    if coord is None:
        return _join_response(v, _join_error(COORDINATOR_NOT_AVAILABLE, member_id))
    gid = _str(request.get("group_id"))
    session = int(request.get("session_timeout_ms", 0))
    rebalance = int(request.get("rebalance_timeout_ms", -1)) if v >= 1 else session
    if rebalance < 0:
        rebalance = session
    protocols = [(_str(p.get("name")), bytes(p.get("metadata") or b"")) for p in request.get("protocols") or ()]
    if coord.consumer.active(gid):  # a KIP-848 group with members: a member using the classic protocol
        return _join_response(v, await _join_consumer_group(ctx, coord, request, gid, member_id, session, rebalance,
                                                            protocols))
    if coord.consumer.is_consumer_group(gid):  # an empty one becomes a classic one
        err = await coord.consumer.store.delete(gid)  # its ConsumerGroup* tombstones
        if err:
            return _join_response(v, _join_error(err, member_id))
    coord.consumer.drop(gid)
    res = await coord.join_group(
        _str(request.get("group_id")),
        member_id,
        request.get("group_instance_id") if v >= 5 else None,
        _str(ctx.client_id),
        "/" + ctx.client_host if ctx.client_host else "",
        session,
        rebalance,
        _str(request.get("protocol_type")),
        protocols,
        require_known_member_id=v >= 4,
    )
    return _join_response(v, res)


async def _join_consumer_group(ctx: RequestContext, coord: GroupCoordinator, request: JoinGroupRequest, gid: str,
                               member_id: str, session: int, rebalance: int,
                               protocols: list[tuple[str, bytes]]) -> JoinResult:
    """JoinGroup into a consumer group with members (classic_in_consumer.py), answered once its records are
    written."""
    err = coord.check(gid)
    if err:
        return _join_error(err, member_id)
    if not coord.min_session_timeout_ms <= session <= coord.max_session_timeout_ms:
        return _join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
    v = ctx.api_version
    coord.consumer.auth_context = (ctx.principal, ctx.client_host)  # the group's regexes resolve with its rights
    try:
        res = classic_in_consumer.join(
            coord.consumer, gid, member_id, request.get("group_instance_id") if v >= 5 else None,
            _str(ctx.client_id), "/" + ctx.client_host if ctx.client_host else "", session, rebalance,
            _str(request.get("protocol_type")), protocols, require_known_member_id=v >= 4)
    finally:
        coord.consumer.auth_context = None
    if not res["error_code"]:
        err = await coord.consumer.store.persist(gid)
        if err:
            return _join_error(err, res["member_id"])
    return res


@handles(SYNC_GROUP)
@_fitted(SYNC_GROUP)
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> Body:
    v = ctx.api_version
    coord = _coordinator(ctx)
    if not ctx.authorize(READ, GROUP, _str(request.get("group_id"))):
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "assignment": b""}
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE, "assignment": b""}
    assignments = [(_str(a.get("member_id")), bytes(a.get("assignment") or b"")) for a in request.get("assignments") or ()]
    gid = _str(request.get("group_id"))
    if coord.consumer.is_consumer_group(gid) and not coord.check(gid):  # a classic member of a consumer group
        return {**classic_in_consumer.sync(
            coord.consumer, gid, int(request.get("generation_id", -1)), _str(request.get("member_id")),
            request.get("group_instance_id") if v >= 3 else None, request.get("protocol_type") if v >= 5 else None,
            request.get("protocol_name") if v >= 5 else None), "throttle_time_ms": 0}
    res = await coord.sync_group(
        _str(request.get("group_id")),
        int(request.get("generation_id", -1)),
        _str(request.get("member_id")),
        request.get("group_instance_id") if v >= 3 else None,
        request.get("protocol_type") if v >= 5 else None,
        request.get("protocol_name") if v >= 5 else None,
        assignments,
    )
    return {**res, "throttle_time_ms": 0}


@handles(HEARTBEAT)
@_fitted(HEARTBEAT)
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> Body:
    coord = _coordinator(ctx)
    if not ctx.authorize(READ, GROUP, _str(request.get("group_id"))):
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE}
    gid = _str(request.get("group_id"))
    if coord.consumer.is_consumer_group(gid) and not coord.check(gid):  # a classic member of a consumer group
        return {"throttle_time_ms": 0, "error_code": classic_in_consumer.heartbeat(
            coord.consumer, gid, int(request.get("generation_id", -1)), _str(request.get("member_id")),
            request.get("group_instance_id") if ctx.api_version >= 3 else None)}
    err = coord.heartbeat(
        _str(request.get("group_id")),
        int(request.get("generation_id", -1)),
        _str(request.get("member_id")),
        request.get("group_instance_id") if ctx.api_version >= 3 else None,
    )
    return {"throttle_time_ms": 0, "error_code": err}


@handles(LEAVE_GROUP)
@_fitted(LEAVE_GROUP)
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> Body:
    v = ctx.api_version
    coord = _coordinator(ctx)
    if v >= 3:
        members = [(_str(m.get("member_id")), m.get("group_instance_id")) for m in request.get("members") or ()]
    else:
        members = [(_str(request.get("member_id")), None)]
    if not ctx.authorize(READ, GROUP, _str(request.get("group_id"))):
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "members": []}
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE, "members": []}
    gid = _str(request.get("group_id"))
    if coord.consumer.is_consumer_group(gid) and not coord.check(gid):  # classic members of a consumer group
        err, results = classic_in_consumer.leave(coord.consumer, gid, members)
        err = err or await coord.consumer.store.persist(gid)
    else:
        err, results = coord.leave_group(gid, members)
    if v < 3 and not err and results:
        err = results[0]["error_code"]
    return {"throttle_time_ms": 0, "error_code": err, "members": results if v >= 3 else []}


# ------------------------------------------------------------------------------------------ offsets


@handles(OFFSET_COMMIT)
@_fitted(OFFSET_COMMIT)
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> Body:
    v = ctx.api_version
    coord = _coordinator(ctx)
    resolved = None
    if v >= 10:  # topics by id: resolved to names here, unknown ids answered UNKNOWN_TOPIC_ID (group_topic_ids.py)
        resolved = ResolvedTopics(ctx, request.get("topics") or ())
        request = cast(OffsetCommitRequest, {**request, "topics": resolved.named})
    group_refused = NONE
    wanted: list[tuple[str, int, int, int, str | None]] = []
    for t in request.get("topics") or ():
        for p in t.get("partitions") or ():
            wanted.append((
                _str(t.get("name")),
                int(p.get("partition_index", 0)),
                int(p.get("committed_offset", -1)),
                int(p.get("committed_leader_epoch", -1)) if v >= 6 else -1,
                p.get("committed_metadata"),
            ))
    refused: dict[tuple[str, int], int] = {}
    if ctx.broker.authorizer is not None:
        if not ctx.authorize(READ, GROUP, _str(request.get("group_id"))):
            refused = {(t, p): GROUP_AUTHORIZATION_FAILED for t, p, *_ in wanted}
            group_refused = GROUP_AUTHORIZATION_FAILED
        else:
            refused = _topic_refusals(ctx, READ, [(t, p) for t, p, *_ in wanted])
        wanted = [w for w in wanted if (w[0], w[1]) not in refused]
    if not wanted:
        results: dict[tuple[str, int], int] = {}
    elif coord is None:
        results = {(t, p): COORDINATOR_NOT_AVAILABLE for t, p, *_ in wanted}
    else:
        retention = int(request.get("retention_time_ms", -1)) if 2 <= v <= 4 else -1
        _, results = await coord.commit_offsets(
            _str(request.get("group_id")),
            int(request.get("generation_id_or_member_epoch", -1)),
            _str(request.get("member_id")),
            request.get("group_instance_id") if v >= 7 else None,
            retention,
            wanted,
            api_version=v,
        )
    topics = _partition_results(request, {**results, **refused})
    if resolved is not None:
        topics = commit_response_topics(resolved, topics, group_refused)
    return {"throttle_time_ms": 0, "topics": topics}


def _partition_results(request: OffsetCommitRequest | TxnOffsetCommitRequest, results: dict[tuple[str, int], int],
                       once: bool = False) -> list[Body]:
    """Per requested partition, in request order, its error code (``once``: a partition named twice answered
    once)."""
    topics: dict[str, list[Body]] = {}
    seen: set[tuple[str, int]] = set()
    for t in request.get("topics") or ():
        for p in t.get("partitions") or ():
            tp = (_str(t.get("name")), int(p.get("partition_index", 0)))
            if once and tp in seen:
                continue
            seen.add(tp)
            topics.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": results.get(tp, NONE)})
    return [{"name": n, "partitions": ps} for n, ps in topics.items()]


def _topic_refusals(ctx: RequestContext, op: AclOperation, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The partitions of topics the principal may not ``op``: TOPIC_AUTHORIZATION_FAILED; then, as Kafka, partitions
    of topics that do not exist: UNKNOWN_TOPIC_OR_PARTITION."""
    out: dict[tuple[str, int], int] = {}
    topics = ctx.broker.topics
    for t, p in tps:
        if not ctx.authorize(op, TOPIC, t):
            out[(t, p)] = TOPIC_AUTHORIZATION_FAILED
        elif topics.get(t) is None:
            out[(t, p)] = UNKNOWN_TOPIC_OR_PARTITION
    return out


def _fetch_group(coord: GroupCoordinator | None, group_id: str, topics: list[OffsetFetchRequestTopic] | None,
                 require_stable: bool = False, ctx: RequestContext | None = None) -> tuple[int, list[Body]]:
    partitions: list[tuple[str, int]] | None = None
    rows: list[OffsetRow]
    if topics is not None:
        partitions = [(_str(t.get("name")), int(p)) for t in topics for p in t.get("partition_indexes") or ()]
    if ctx is not None and ctx.broker.authorizer is not None:
        # DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED, nothing read), DESCRIBE on each topic: named
        # partitions of a refused topic answer TOPIC_AUTHORIZATION_FAILED, "all topics" leaves them out
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            rows = [(t, p, None, GROUP_AUTHORIZATION_FAILED) for t, p in partitions or ()]
            return GROUP_AUTHORIZATION_FAILED, _offset_rows(rows, GROUP_AUTHORIZATION_FAILED)
        if partitions is not None:
            refused = [(t, p) for t, p in partitions if not ctx.authorize(DESCRIBE, TOPIC, t)]
            allowed = [tp for tp in partitions if tp not in set(refused)]
            if coord is None:
                err: int
                err, rows = COORDINATOR_NOT_AVAILABLE, [(t, p, None, NONE) for t, p in allowed]
            else:
                err, rows = coord.fetch_offsets(group_id, allowed, require_stable=require_stable)
            by_tp = {(r[0], r[1]): r for r in rows}
            rows = [by_tp.get(tp) or (tp[0], tp[1], None, TOPIC_AUTHORIZATION_FAILED) for tp in partitions
                    if tp in by_tp or tp in refused]
            return err, _offset_rows(rows, err)
        if coord is None:
            return COORDINATOR_NOT_AVAILABLE, []
        err, rows = coord.fetch_offsets(group_id, None, require_stable=require_stable)
        rows = [r for r in rows if ctx.authorize(DESCRIBE, TOPIC, r[0])]
        return err, _offset_rows(rows, err)
    if coord is None:
        err, rows = COORDINATOR_NOT_AVAILABLE, [(t, p, None, NONE) for t, p in partitions or ()]
    else:
        err, rows = coord.fetch_offsets(group_id, partitions, require_stable=require_stable)
    return err, _offset_rows(rows, err)


def _offset_rows(rows: list[OffsetRow], err: int) -> list[Body]:
    by_topic: dict[str, list[Body]] = {}
    for t, p, ov, code in rows:
        by_topic.setdefault(t, []).append({
            "partition_index": p,
            "committed_offset": ov.offset if ov is not None else -1,
            "committed_leader_epoch": ov.leader_epoch if ov is not None else -1,
            "metadata": ov.metadata if ov is not None else "",
            "error_code": code or err,
        })
    return [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


@handles(OFFSET_FETCH)
@_fitted(OFFSET_FETCH)
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> Body:
    v = ctx.api_version
    coord = _coordinator(ctx)
    stable = bool(request.get("require_stable")) if v >= 7 else False
    if v >= 8:
        groups = []
        for grp in request.get("groups") or ():
            gid = _str(grp.get("group_id"))
            # v9 (KIP-848): a consumer group's member id and epoch are checked (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH)
            bad = coord.consumer.validate_fetch(gid, grp.get("member_id"), int(grp.get("member_epoch", -1))) \
                if coord is not None and v >= 9 and not coord.check(gid) else NONE
            if bad:
                groups.append({"group_id": gid, "topics": [], "error_code": bad})
                continue
            wanted = grp.get("topics")
            resolved = ResolvedTopics(ctx, wanted) if v >= 10 and wanted is not None else None
            if resolved is not None:  # v10: topics by id (group_topic_ids.py)
                wanted = cast("list[OffsetFetchRequestTopic]", resolved.named)
            err, topics = _fetch_group(coord, gid, wanted, stable, ctx)
            if v >= 10:
                topics = fetch_response_topics(ctx, resolved, topics, err)
            groups.append({"group_id": gid, "topics": topics, "error_code": err})
        return {"throttle_time_ms": 0, "groups": groups}
    topics_req = request.get("topics")
    if v < 2 and topics_req is None:
        topics_req = []
    err, topics = _fetch_group(coord, _str(request.get("group_id")), topics_req, stable, ctx)
    if v >= 2:
        for t in topics:  # the group's error is reported once, at the top; UNSTABLE_OFFSET_COMMIT stays per partition
            for p in t["partitions"]:
                if err:
                    p["error_code"] = NONE
    return {"throttle_time_ms": 0, "topics": topics, "error_code": err}


@handles(TXN_OFFSET_COMMIT)
@_fitted(TXN_OFFSET_COMMIT)
async def txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> Body:
    v = ctx.api_version
    coord = _coordinator(ctx)
    wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    for t in request.get("topics") or ():
        for p in t.get("partitions") or ():
            wanted[(_str(t.get("name")), int(p.get("partition_index", 0)))] = (
                int(p.get("committed_offset", -1)),
                int(p.get("committed_leader_epoch", -1)) if v >= 2 else -1,
                p.get("committed_metadata"),
            )
    refused: dict[tuple[str, int], int] = {}
    if ctx.broker.authorizer is not None:
        # KafkaApis: WRITE on the transactional id, then READ on the group, then READ on each topic
        if not ctx.authorize(WRITE, ResourceType.TRANSACTIONAL_ID, _str(request.get("transactional_id"))):
            refused = dict.fromkeys(wanted, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not ctx.authorize(READ, GROUP, _str(request.get("group_id"))):
            refused = dict.fromkeys(wanted, GROUP_AUTHORIZATION_FAILED)
        else:
            refused = _topic_refusals(ctx, READ, list(wanted))
        wanted = {tp: w for tp, w in wanted.items() if tp not in refused}
    if not wanted:
        results: dict[tuple[str, int], int] = {}
    elif coord is None:
        results = dict.fromkeys(wanted, COORDINATOR_NOT_AVAILABLE)
    else:
        results = await coord.commit_txn_offsets(
            _str(request.get("transactional_id")),
            _str(request.get("group_id")),
            int(request.get("producer_id", -1)),
            int(request.get("producer_epoch", -1)),
            _str(request.get("member_id")) if v >= 3 else "",
            int(request.get("generation_id", -1)) if v >= 3 else -1,
            request.get("group_instance_id") if v >= 3 else None,
            wanted,
            api_version=v,
        )
    return {"throttle_time_ms": 0, "topics": _partition_results(request, {**results, **refused}, once=True)}


@handles(OFFSET_DELETE)
@_fitted(OFFSET_DELETE)
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> Body:
    coord = _coordinator(ctx)
    wanted = [(_str(t.get("name")), int(p.get("partition_index", 0)))
              for t in request.get("topics") or () for p in t.get("partitions") or ()]
    refused: dict[tuple[str, int], int] = {}
    if ctx.broker.authorizer is not None:
        if not ctx.authorize(DELETE, GROUP, _str(request.get("group_id"))):
            return {"error_code": GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
        refused = _topic_refusals(ctx, READ, wanted)
        wanted = [tp for tp in wanted if tp not in refused]
    if coord is None:
        return {"error_code": COORDINATOR_NOT_AVAILABLE, "throttle_time_ms": 0, "topics": []}
    if wanted or not refused:
        err, results = await coord.delete_offsets(_str(request.get("group_id")), wanted)
    else:
        err, results = NONE, {}
    if refused and not err:
        results = {**results, **refused}
        wanted = [(_str(t.get("name")), int(p.get("partition_index", 0)))
                  for t in request.get("topics") or () for p in t.get("partitions") or ()]
    topics: dict[str, list[Body]] = {}
    if not err:
        for t, p in wanted:
            topics.setdefault(t, []).append({"partition_index": p, "error_code": results.get((t, p), NONE)})
    return {"error_code": err, "throttle_time_ms": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


# ------------------------------------------------------------------------------------------ admin


@handles(DESCRIBE_GROUPS)
@_fitted(DESCRIBE_GROUPS)
async def describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> Body:
    coord = _coordinator(ctx)
    out: list[DescribedGroup] = []
    auth = ctx.broker.authorizer
    for gid in request.get("groups") or ():
        if not ctx.authorize(DESCRIBE, GROUP, _str(gid)):
            out.append({"error_code": GROUP_AUTHORIZATION_FAILED, "group_id": gid, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        if coord is None:
            out.append({"error_code": COORDINATOR_NOT_AVAILABLE, "group_id": gid, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        d = coord.describe_group(_str(gid))
        if ctx.api_version >= 6 and d["group_state"] == "Dead" and not d["error_code"]:
            # Kafka 4 (KIP-1043): an unknown group, or one that is not a classic group, is GROUP_ID_NOT_FOUND
            d["error_code"] = GROUP_ID_NOT_FOUND
            d["error_message"] = d.get("error_message") or f"Group {gid} not found."
        if request.get("include_authorized_operations"):
            d["authorized_operations"] = (sum(1 << op for op in (3, 6, 8)) if auth is None  # READ, DELETE, DESCRIBE
                                          else auth.authorized_operations(ctx.principal, ctx.client_host, GROUP,
                                                                          _str(gid)))
        out.append(d)
    return {"throttle_time_ms": 0, "groups": out}


@handles(LIST_GROUPS)
@_fitted(LIST_GROUPS)
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> Body:
    coord = _coordinator(ctx)
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE, "groups": []}
    err, groups = coord.list_groups(request.get("states_filter") or (), request.get("types_filter") or ())
    if ctx.broker.authorizer is not None and not ctx.authorize(DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        groups = [g for g in groups if ctx.authorize(DESCRIBE, GROUP, _str(g.get("group_id")))]  # KafkaApis
    return {"throttle_time_ms": 0, "error_code": err, "groups": groups}


@handles(DELETE_GROUPS)
@_fitted(DELETE_GROUPS)
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> Body:
    coord = _coordinator(ctx)
    results = []
    for gid in request.get("groups_names") or ():
        if not ctx.authorize(DELETE, GROUP, _str(gid)):
            err: int = GROUP_AUTHORIZATION_FAILED
        elif coord is None:
            err = COORDINATOR_NOT_AVAILABLE
        else:
            err = coord.check(_str(gid))
            share_err = None if err else await delete_share_group(ctx.broker, _str(gid))
            if share_err is not None:
                err = share_err  # a share group: its share state, then its records (share_group_cleanup)
            elif not err:
                err = await coord.delete_group(_str(gid))
        results.append({"group_id": gid, "error_code": err})
    return {"throttle_time_ms": 0, "results": results}
