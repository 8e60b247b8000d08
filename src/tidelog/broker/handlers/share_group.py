"""KIP-932 share group APIs: ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78) and
ShareAcknowledge (79), versions 1 (Kafka 4.1's, the one librdkafka 2.16's share consumer speaks) and, for the last
two, 2 (Kafka 4.2/4.3's: the RENEW acknowledge type and the acquire mode, ``broker/group/share_renew.py``), and
DescribeShareGroupOffsets (90) v0.

Adapters to :class:`tidelog.broker.group.share_group.ShareGroupManager`. Authorization as Kafka's KafkaApis: READ on
the group for a heartbeat, a fetch and an acknowledgement (GROUP_AUTHORIZATION_FAILED), DESCRIBE on the group to
describe it, READ on each topic fetched or acknowledged (TOPIC_AUTHORIZATION_FAILED for that partition).

ShareFetch: acknowledgements first (per partition ``AcknowledgeErrorCode``), then records are acquired from every
partition of the share session; when nothing was acquired and ``MaxWaitMs`` > 0 the fetch waits until the deadline,
acquiring again as soon as a partition of the session gets new records (its high watermark moves: a delayed
operation in the Fetch purgatory, ``broker/group/share_wait.py``) or records are released or acknowledged (the
manager's ``changed`` event), and at the latest every ``WAIT_STEP_S``. Records are read on the request
pool (as the Fetch path does), at most ``MaxBytes`` per partition and ``MaxRecords`` acquired per request: only
batch headers are read, up to the batch completing ``MaxRecords``, and the acquired batches are answered as slices of
the segment files sent by ``sendfile`` (``broker/group/share_read.py``), never copied. A share
partition's state is loaded from its share coordinator on first use and written after every acknowledgement
(``broker/group/share_state_store.py``); the acknowledgement's answer waits for the write.
"""

from __future__ import annotations

import time
from typing import Any

from tidelog.broker.errors import error_of
from tidelog.broker.group import share_group_cleanup, share_group_init, share_renew
from tidelog.broker.group.share_group import INIT_KEY, LEAVE_EPOCH, ShareGroupManager, share_manager
from tidelog.broker.group.share_partition import AckError
from tidelog.broker.group.share_read import read_batches, regions_of
from tidelog.broker.group.share_state_records import ShareKey
from tidelog.broker.group.share_wait import wait_for_records
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.core_shared import _uuid_bytes
from tidelog.broker.handlers.group import fit
from tidelog.broker.security.acls import AclOperation, ResourceType
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.compiler import RecordsChunks
from tidelog.protocol.errors import error_code
from tidelog.storage.file_handles import FileRegion

SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
DESCRIBE_SHARE_GROUP_OFFSETS = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
NONE = 0
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
GROUP_AUTHORIZATION_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
READ, DESCRIBE = AclOperation.READ, AclOperation.DESCRIBE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
ALL_GROUP_OPS = sum(1 << op for op in (3, 6, 8))
WAIT_STEP_S = 0.5  # a waiting ShareFetch is woken by events (share_wait.py); this is only a safety net
MAX_READS_PER_PARTITION = 8  # reads of one partition in one ShareFetch (skipping records others hold)
DEFAULT_MAX_RECORDS = 500
MAX_SESSION_PARTITIONS = 10000  # partitions of one share session


def _err(code: int) -> str | None:
    messages: dict[int, str] = {
        GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
        TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    }
    return None if code == NONE else messages.get(code)


# ============================================================================= heartbeat / describe


@handles(SHARE_GROUP_HEARTBEAT)
async def share_group_heartbeat(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    gid = request.get("group_id") or ""
    base = {"throttle_time_ms": 0, "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0,
            "assignment": None}
    if not ctx.authorize(READ, GROUP, gid):
        return fit(SHARE_GROUP_HEARTBEAT, v, {**base, "error_code": GROUP_AUTHORIZATION_FAILED,
                                              "error_message": _err(GROUP_AUTHORIZATION_FAILED)})
    for t in request.get("subscribed_topic_names") or ():
        if not ctx.authorize(DESCRIBE, TOPIC, t or ""):
            return fit(SHARE_GROUP_HEARTBEAT, v, {**base, "error_code": TOPIC_AUTHORIZATION_FAILED,
                                                  "error_message": _err(TOPIC_AUTHORIZATION_FAILED)})
    coord: Any = getattr(ctx.broker, "group_coordinator", None)
    if coord is None:
        return fit(SHARE_GROUP_HEARTBEAT, v, {**base, "error_code": COORDINATOR_NOT_AVAILABLE})
    err = coord.check(gid) if gid else 0
    if err:
        return fit(SHARE_GROUP_HEARTBEAT, v, {**base, "error_code": err})
    host = ("/" + ctx.client_host) if ctx.client_host else ""
    mgr = share_manager(ctx.broker)
    body = mgr.heartbeat(request, ctx.client_id or "", host)
    todo = body.pop(INIT_KEY, None)
    if not body.get("error_code") and gid:
        err = await mgr.records.persist(gid)  # ShareGroup* records written before the answer, as Kafka
        if not err and todo:  # InitializeShareGroupState of new share partitions, then their assignment
            err = await share_group_init.complete_heartbeat(mgr, gid, body.get("member_id") or "", body, todo)
        if not err:
            share_group_cleanup.resume_deleting(ctx.broker, gid)  # a topic-state delete left unfinished
        if err:
            return fit(SHARE_GROUP_HEARTBEAT, v, {**base, "error_code": err})
    body["throttle_time_ms"] = 0
    return fit(SHARE_GROUP_HEARTBEAT, v, body)


@handles(SHARE_GROUP_DESCRIBE)
async def share_group_describe(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    coord: Any = getattr(ctx.broker, "group_coordinator", None)
    auth = ctx.broker.authorizer
    mgr = share_manager(ctx.broker)
    groups: list[dict[str, Any]] = []
    for gid in request.get("group_ids") or ():
        gid = gid or ""
        empty: dict[str, Any] = {"group_id": gid, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                 "assignor_name": "", "members": []}
        if not ctx.authorize(DESCRIBE, GROUP, gid):
            groups.append({**empty, "error_code": GROUP_AUTHORIZATION_FAILED,
                           "error_message": _err(GROUP_AUTHORIZATION_FAILED)})
            continue
        err = coord.check(gid) if coord is not None else COORDINATOR_NOT_AVAILABLE
        if err:
            groups.append({**empty, "error_code": err})
            continue
        d = mgr.describe(gid)
        if d["error_code"] and coord is not None and (gid in coord.groups or coord.consumer.is_consumer_group(gid)):
            d["error_message"] = f"Group {gid} is not a share group."
        if request.get("include_authorized_operations"):
            d["authorized_operations"] = (ALL_GROUP_OPS if auth is None else
                                          auth.authorized_operations(ctx.principal, ctx.client_host, GROUP, gid))
        groups.append(d)
    return fit(SHARE_GROUP_DESCRIBE, v, {"throttle_time_ms": 0, "groups": groups})


# ======================================================================================== fetch / ack


def _top_error(api: int, v: int, code: int, message: str | None = None) -> dict:
    body: dict[str, Any] = {"throttle_time_ms": 0, "error_code": code, "error_message": message or _err(code),
                            "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}
    return fit(api, v, body)


def _partition_entry(index: int, leader: int) -> dict[str, Any]:
    return {"partition_index": index, "error_code": NONE, "error_message": None, "acknowledge_error_code": NONE,
            "acknowledge_error_message": None, "current_leader": {"leader_id": leader, "leader_epoch": 0},
            "records": b"", "acquired_records": []}


class _Topics:
    """Resolves topic ids of a request and checks READ on each topic once."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.cache: dict[bytes, tuple[str | None, int]] = {}

    def resolve(self, tid: bytes) -> tuple[str | None, int]:
        got = self.cache.get(tid)
        if got is None:
            info = self.ctx.broker.topics.by_id(tid)
            if info is None:
                got = (None, UNKNOWN_TOPIC_ID)
            elif not self.ctx.authorize(READ, TOPIC, info.name):
                got = (info.name, TOPIC_AUTHORIZATION_FAILED)
            else:
                got = (info.name, NONE)
            self.cache[tid] = got
        return got


async def _acknowledge(ctx: RequestContext, mgr: ShareGroupManager, gid: str, mid: str, topics: _Topics,
                       tid: bytes, index: int, batches: list[dict]) -> tuple[int, str | None]:
    """Apply one partition's acknowledgements, then persist the share partition's state: the answer follows the
    write (WriteShareGroupState), as Kafka's."""
    name, err = topics.resolve(tid)
    if err:
        return err, _err(err)
    assert name is not None
    refused = share_renew.batches_refusal(ctx.api_version, batches)
    if refused:
        return refused
    try:
        plog = ctx.broker.leader_log(name, index)
    except Exception as exc:  # not the leader, unknown partition, offline: Kafka's partition error
        return error_of(exc)
    code, msg = await mgr.store.load(gid, tid, index, name, plog)
    if code:
        return code, msg
    sp = mgr.share_partition(gid, tid, index, plog.log_start_offset, plog.high_watermark, plog)
    renew_until = share_renew.renew_until(ctx.broker.group_configs, gid, mgr.settings(gid).lock_ms, time.monotonic())
    try:
        for b in batches:
            sp.acknowledge(mid, int(b["first_offset"]), int(b["last_offset"]),
                           [int(t) for t in b.get("acknowledge_types") or ()], renew_until)
    except AckError as e:
        return error_code(e.name), e.message
    finally:
        mgr.store.changed((gid, tid, index))
        mgr._wake()  # released records, or room in the window: a waiting ShareFetch may acquire now
    mgr.counters.acked(batches)
    return await mgr.store.persist((gid, tid, index))


async def _acquire(ctx: RequestContext, mgr: ShareGroupManager, gid: str, mid: str, name: str, tid: bytes,
                   index: int, entry: dict[str, Any], budget: int, max_records: int,
                   record_limit: bool = False) -> tuple[int, int]:
    """Acquire records of one partition into ``entry``. Returns (bytes, records) acquired. The log is read on the
    request pool (as Fetch reads); the share partition's state changes on the loop, after each read."""
    plog = ctx.broker.leader_log(name, index)
    code, msg = await mgr.store.load(gid, tid, index, name, plog)
    if code:
        entry["error_code"], entry["error_message"] = code, msg
        return 0, 0
    regions: list[FileRegion] = []  # the acquired batches: slices of the segment files, sent by sendfile
    ranges: list[tuple[int, int, int]] = []
    size = taken = 0
    for _ in range(MAX_READS_PER_PARTITION):
        hw = plog.high_watermark
        sp = mgr.share_partition(gid, tid, index, plog.log_start_offset, hw, plog)
        now = time.monotonic()
        if sp.expire(now):
            mgr.store.persist_soon((gid, tid, index))
            mgr._wake()
        start = sp.fetch_offset()
        if start is None or start >= hw or taken >= max_records or size >= budget:
            break
        batches = await ctx.broker.request_pool.run(read_batches, plog, start, max(budget - size, 1), hw,
                                                    max_records - taken)
        if not batches:
            break
        sp = mgr.partitions.get((gid, tid, index), sp)  # (replaced if the partition was reloaded meanwhile)
        got = sp.acquire(mid, [(b.base, b.last, b.control) for b in batches], max_records - taken,
                         time.monotonic(), hw, record_limit)
        if got:
            lo, hi = got[0][0], got[-1][1]
            keep = [b for b in batches if b.last >= lo and b.base <= hi]
            regions += regions_of(keep)
            size += sum(b.length for b in keep)
            ranges += got
            taken += sum(r[1] - r[0] + 1 for r in got)
        elif sp.first_available() is None and sp.speo >= hw:
            break
    if ranges:
        mgr.counters.records_acquired += taken
        entry["records"] = RecordsChunks(list(regions), size)
        entry["acquired_records"] = [{"first_offset": f, "last_offset": la, "delivery_count": d}
                                     for f, la, d in ranges]
    return size, taken


@handles(SHARE_FETCH)
async def share_fetch(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    gid = request.get("group_id") or ""
    mid = request.get("member_id") or ""
    epoch = int(request.get("share_session_epoch", 0))
    if not ctx.authorize(READ, GROUP, gid):
        return _top_error(SHARE_FETCH, v, GROUP_AUTHORIZATION_FAILED)
    if not gid or not mid:
        return _top_error(SHARE_FETCH, v, INVALID_REQUEST, "GroupId and MemberId must be set.")
    topics_in = request.get("topics") or []
    has_acks = any(p.get("acknowledgement_batches") for t in topics_in for p in t.get("partitions") or ())
    if epoch == 0 and has_acks:
        return _top_error(SHARE_FETCH, v, INVALID_REQUEST,
                          "Acknowledge data present on initial fetch request.")
    refused = share_renew.fetch_refusal(v, request)
    if refused:
        return _top_error(SHARE_FETCH, v, *refused)
    record_limit = share_renew.record_limit(v, request)
    mgr = share_manager(ctx.broker)
    mgr.counters.fetch_requests += 1
    err, session = mgr.session(gid, mid, epoch)
    if err or session is None:
        return _top_error(SHARE_FETCH, v, err)
    topics = _Topics(ctx)
    node = int(ctx.broker.node_id)
    out: dict[tuple[bytes, int], dict[str, Any]] = {}
    for t in topics_in:
        tid = _uuid_bytes(t.get("topic_id"))
        for p in t.get("partitions") or ():
            index = int(p.get("partition_index", 0))
            if epoch != LEAVE_EPOCH:
                session.partitions.add((tid, index))
            batches = p.get("acknowledgement_batches") or []
            if batches:
                entry = out.setdefault((tid, index), _partition_entry(index, node))
                code, msg = await _acknowledge(ctx, mgr, gid, mid, topics, tid, index, batches)
                entry["acknowledge_error_code"], entry["acknowledge_error_message"] = code, msg
    for t in request.get("forgotten_topics_data") or ():
        tid = _uuid_bytes(t.get("topic_id"))
        for index in t.get("partitions") or ():
            session.partitions.discard((tid, int(index)))
    if len(session.partitions) > MAX_SESSION_PARTITIONS:  # a resource the client makes the broker hold: bounded
        mgr.close_session(gid, mid)
        return _top_error(SHARE_FETCH, v, INVALID_REQUEST,
                          f"A share session holds at most {MAX_SESSION_PARTITIONS} partitions.")
    if epoch == LEAVE_EPOCH:
        mgr.close_session(gid, mid)
    else:
        session.epoch = epoch + 1 if epoch > 0 else 1
        max_bytes = int(request.get("max_bytes") or 0x7FFFFFFF)
        # v1 MaxRecords: 0 asks for acknowledgements only (no acquisition)
        max_records = max(int(request.get("max_records", DEFAULT_MAX_RECORDS)), 0)
        deadline = time.monotonic() + max(int(request.get("max_wait_ms") or 0), 0) / 1000.0
        while max_records > 0:
            taken = size = 0
            failed = False
            changed = mgr.changed  # (taken before acquiring: a wake during the pass is not missed)
            seen: dict[tuple[str, int], tuple[Any, int]] = {}
            for tid, index in sorted(session.partitions):
                name, perr = topics.resolve(tid)
                if name is not None and not perr:
                    try:
                        plog = ctx.broker.leader_log(name, index)
                        seen[(name, index)] = (plog, plog.high_watermark)
                    except Exception:  # answered by _acquire below with the partition's error
                        pass
                acked = out.get((tid, index))
                if perr or name is None:
                    bad = out.setdefault((tid, index), _partition_entry(index, node))
                    bad["error_code"], bad["error_message"] = perr, _err(perr)
                    failed = True
                    continue
                fresh = _partition_entry(index, node)
                try:
                    got_bytes, got = await _acquire(ctx, mgr, gid, mid, name, tid, index, fresh,
                                              max(max_bytes - size, 1), max_records - taken, record_limit)
                except Exception as exc:  # not the leader, unknown partition, offline: Kafka's partition error
                    fresh["error_code"], fresh["error_message"] = error_of(exc)
                    got_bytes, got = 0, 0
                failed = failed or bool(fresh["error_code"])
                if got or fresh["error_code"]:
                    if acked is not None:
                        fresh["acknowledge_error_code"] = acked["acknowledge_error_code"]
                        fresh["acknowledge_error_message"] = acked["acknowledge_error_message"]
                    out[(tid, index)] = fresh
                taken += got
                size += got_bytes
                if taken >= max_records or size >= max_bytes:
                    break
            left = deadline - time.monotonic()
            if taken or failed or left <= 0 or not session.partitions:
                break
            await wait_for_records(ctx.broker.purgatory.fetch, seen, changed, min(left, WAIT_STEP_S))
            if mgr.sessions.get((gid, mid)) is not session:  # closed or replaced meanwhile
                break
    by_topic: dict[bytes, list[dict[str, Any]]] = {}
    for (tid, _index), entry in sorted(out.items(), key=lambda kv: kv[0]):
        by_topic.setdefault(tid, []).append(entry)
    body = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
            "acquisition_lock_timeout_ms": mgr.settings(gid).lock_ms,
            "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()],
            "node_endpoints": []}
    return fit(SHARE_FETCH, v, body)


@handles(SHARE_ACKNOWLEDGE)
async def share_acknowledge(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    gid = request.get("group_id") or ""
    mid = request.get("member_id") or ""
    epoch = int(request.get("share_session_epoch", 0))
    if not ctx.authorize(READ, GROUP, gid):
        return _top_error(SHARE_ACKNOWLEDGE, v, GROUP_AUTHORIZATION_FAILED)
    if not gid or not mid:
        return _top_error(SHARE_ACKNOWLEDGE, v, INVALID_REQUEST, "GroupId and MemberId must be set.")
    if epoch == 0:  # Kafka: a ShareAcknowledge cannot open a share session
        return _top_error(SHARE_ACKNOWLEDGE, v, ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    mgr = share_manager(ctx.broker)
    mgr.counters.acknowledge_requests += 1
    err, session = mgr.session(gid, mid, epoch)
    if err or session is None:
        return _top_error(SHARE_ACKNOWLEDGE, v, err)
    topics = _Topics(ctx)
    node = int(ctx.broker.node_id)
    responses = []
    for t in request.get("topics") or []:
        tid = _uuid_bytes(t.get("topic_id"))
        parts = []
        for p in t.get("partitions") or ():
            index = int(p.get("partition_index", 0))
            code, msg = await _acknowledge(ctx, mgr, gid, mid, topics, tid, index,
                                           p.get("acknowledgement_batches") or [])
            parts.append({"partition_index": index, "error_code": code, "error_message": msg,
                          "current_leader": {"leader_id": node, "leader_epoch": 0}})
        responses.append({"topic_id": tid, "partitions": parts})
    if epoch == LEAVE_EPOCH:
        mgr.close_session(gid, mid)
    else:
        session.epoch = epoch + 1
    return fit(SHARE_ACKNOWLEDGE, v, {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                                      "acquisition_lock_timeout_ms": mgr.settings(gid).lock_ms,
                                      "responses": responses, "node_endpoints": []})


# ================================================================================ share group offsets


async def _offsets_partition(ctx: RequestContext, mgr: ShareGroupManager, gid: str, name: str, tid: bytes,
                             index: int) -> dict[str, Any]:
    """The SPSO of one partition: the share partition's own when this broker leads it (the most recent), else the
    persisted one from the share coordinator (ReadShareGroupStateSummary, as Kafka's group coordinator asks it)."""
    sp = mgr.partitions.get((gid, tid, index))
    try:
        epoch = int(ctx.broker.leader_epoch(name, index))
    except Exception:  # not led here (cluster mode): the state is on the leader
        epoch = -1
    if sp is not None and epoch >= 0:
        return {"partition_index": index, "start_offset": sp.spso, "leader_epoch": epoch, "error_code": NONE,
                "error_message": None}
    err, start = await mgr.store.persister.summary(ShareKey(gid, tid, index))
    return {"partition_index": index, "start_offset": start if not err else -1, "leader_epoch": epoch,
            "error_code": err, "error_message": None}


@handles(DESCRIBE_SHARE_GROUP_OFFSETS)
async def describe_share_group_offsets(ctx: RequestContext, request: dict) -> dict:
    """DescribeShareGroupOffsets v0: each partition's share-partition start offset (SPSO) on this broker, -1 where
    the group has no state for it here. DESCRIBE on the group, then on each topic (as Kafka's KafkaApis)."""
    coord: Any = getattr(ctx.broker, "group_coordinator", None)
    mgr = share_manager(ctx.broker)
    topics_mgr = ctx.broker.topics
    groups = []
    for g in request.get("groups") or ():
        gid = g.get("group_id") or ""
        entry: dict[str, Any] = {"group_id": gid, "topics": [], "error_code": NONE, "error_message": None}
        groups.append(entry)
        if not ctx.authorize(DESCRIBE, GROUP, gid):
            entry["error_code"], entry["error_message"] = GROUP_AUTHORIZATION_FAILED, _err(GROUP_AUTHORIZATION_FAILED)
            continue
        err = coord.check(gid) if coord is not None else COORDINATOR_NOT_AVAILABLE
        if err:
            entry["error_code"] = err
            continue
        wanted = g.get("topics")
        if not mgr.is_share_group(gid):
            # as Kafka's KafkaApis: the topics are authorized first (their refusals are answered), then the group
            entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            entry["error_message"] = f"Group {gid} not found."
            for t in wanted or ():
                name = t.get("topic_name") or ""
                if not ctx.authorize(DESCRIBE, TOPIC, name):
                    info = topics_mgr.get(name)
                    entry["topics"].append({
                        "topic_name": name, "topic_id": info.topic_id if info is not None else b"\0" * 16,
                        "partitions": [{"partition_index": i, "start_offset": -1, "leader_epoch": -1,
                                        "error_code": TOPIC_AUTHORIZATION_FAILED,
                                        "error_message": _err(TOPIC_AUTHORIZATION_FAILED)}
                                       for i in t.get("partitions") or ()]})
            continue
        if wanted is None:  # the group's subscribed topics and every partition it has state for here
            by_tid: dict[bytes, set[int]] = {}
            for g_id, tid, index in list(mgr.partitions):
                if g_id == gid:
                    by_tid.setdefault(tid, set()).add(index)
            for topic in {t for m in mgr.groups[gid].members.values() for t in m.subscribed}:
                sub = topics_mgr.get(topic)
                if sub is not None:
                    by_tid.setdefault(sub.topic_id, set()).update(range(sub.num_partitions))
            wanted = []
            for tid, indexes in by_tid.items():
                info = topics_mgr.by_id(tid)
                if info is not None and ctx.authorize(DESCRIBE, TOPIC, info.name):
                    wanted.append({"topic_name": info.name, "partitions": sorted(indexes)})
        for t in wanted:
            name = t.get("topic_name") or ""
            info = topics_mgr.get(name)
            parts = []
            for index in t.get("partitions") or ():
                if not ctx.authorize(DESCRIBE, TOPIC, name):
                    parts.append({"partition_index": index, "start_offset": -1, "leader_epoch": -1,
                                  "error_code": TOPIC_AUTHORIZATION_FAILED,
                                  "error_message": _err(TOPIC_AUTHORIZATION_FAILED)})
                elif info is None or not 0 <= index < info.num_partitions:
                    parts.append({"partition_index": index, "start_offset": -1, "leader_epoch": -1,
                                  "error_code": UNKNOWN_TOPIC_OR_PARTITION, "error_message": None})
                else:
                    parts.append(await _offsets_partition(ctx, mgr, gid, name, info.topic_id, int(index)))
            entry["topics"].append({"topic_name": name, "topic_id": info.topic_id if info is not None else b"\0" * 16,
                                    "partitions": parts})
    return fit(DESCRIBE_SHARE_GROUP_OFFSETS, ctx.api_version, {"throttle_time_ms": 0, "groups": groups})
