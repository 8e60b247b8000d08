"""Fetch: parse the request and the incremental fetch session (KIP-227), hand reads to the read service."""

from __future__ import annotations

import time
from collections import OrderedDict

from tidelog.broker.fetch import MAX_INT32, FetchParams, FetchPartition, response_entry
from tidelog.broker.fetch_session import INITIAL_EPOCH, CachedPartition
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.core_shared import (
    _CLUSTER,
    _TOPIC,
    FENCED_LEADER_EPOCH,
    FETCH,
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    _resolve_topic,
)
from tidelog.broker.quotas import fetch_throttle
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation


@handles(FETCH)
async def fetch(ctx: RequestContext, request: dict) -> dict:
    """Parse the request (and the consumer's fetch session) into FetchParams and FetchPartitions, read them
    through the broker's read service (:mod:`tidelog.broker.fetch`, the one read path for consumers and
    followers), answer (a session only with the partitions that have news)."""
    broker = ctx.broker
    v = ctx.api_version
    replica_id = request.get("replica_id", -1)
    if v >= 15:
        state = request.get("replica_state") or {}
        replica_id = state.get("replica_id", -1) if isinstance(state, dict) else -1
    session_id = request.get("session_id", 0)
    session_epoch = request.get("session_epoch", -1)
    isolation = request.get("isolation_level", 0)
    response_max = request.get("max_bytes", MAX_INT32)
    if response_max <= 0:
        response_max = MAX_INT32
    max_bytes = min(response_max, broker.config.get("fetch.max.bytes"))
    quotas = broker.client_quotas
    if quotas.enabled:
        if replica_id >= 0:
            ctx.throttle_ms = -1  # replication is exempt from client quotas
        else:  # consumer_byte_rate: no more than the quota window can take (Kafka's maxValueInQuotaWindow)
            # (infinite without a fetch quota for this client: min first, then int)
            max_bytes = int(min(max_bytes, quotas.max_value_in_window(quotas.fetch, ctx.principal, ctx.client_id)))
    params = FetchParams(
        replica_id=replica_id,
        max_wait_ms=request.get("max_wait_ms", 0),
        min_bytes=min(request.get("min_bytes", 1), max_bytes),
        max_bytes=max_bytes,
        isolation_level=isolation,
        hard_max_bytes_limit=v <= 2,
    )
    # KIP-320's divergence check serves followers; a consumer's last_fetched_epoch is not checked (Kafka checks it)
    from_follower = replica_id >= 0 and v >= 12

    sessions = broker.fetch_sessions
    session = None
    if session_epoch > 0:  # incremental: the session's partitions, updated by this request
        session = sessions.get(session_id) if sessions is not None else None
        if session is None:
            return _session_error(FETCH_SESSION_ID_NOT_FOUND)
        if session_epoch != session.next_epoch:
            return _session_error(INVALID_FETCH_SESSION_EPOCH)
        session.advance()
    elif session_id != 0 and sessions is not None:  # a full request naming a session: -1 closes it, 0 replaces it
        sessions.remove(session_id)

    parts: list[FetchPartition] = []
    responses: list[dict] = []
    if session is not None:
        cached = session.partitions
        for t in request.get("topics") or ():
            name, tid, _ = _resolve_topic(ctx, {"name": t.get("topic"), "topic_id": t.get("topic_id")})
            for p in t.get("partitions") or ():
                key = (name or "", p.get("partition", 0))
                cp = cached.get(key)
                if cp is None:
                    cached[key] = CachedPartition(tid, p.get("fetch_offset", 0), p.get("partition_max_bytes", 1 << 20),
                                                  p.get("current_leader_epoch", -1),
                                                  p.get("last_fetched_epoch", -1) if from_follower else -1)
                else:
                    cp.fetch_offset = p.get("fetch_offset", 0)
                    cp.max_bytes = p.get("partition_max_bytes", 1 << 20)
                    cp.current_leader_epoch = p.get("current_leader_epoch", -1)
                    cp.last_fetched_epoch = p.get("last_fetched_epoch", -1) if from_follower else -1
        for t in request.get("forgotten_topics_data") or ():
            name, _, _ = _resolve_topic(ctx, {"name": t.get("topic"), "topic_id": t.get("topic_id")})
            for index in t.get("partitions") or ():
                cached.pop((name or "", index), None)
        for (name, index), cp in cached.items():
            fp = FetchPartition(name, cp.topic_id, index, cp.fetch_offset, cp.max_bytes,
                                response_entry(index, isolation), cp.current_leader_epoch, cp.last_fetched_epoch)
            if not name:
                fp.error = UNKNOWN_TOPIC_ID if v >= 13 else UNKNOWN_TOPIC_OR_PARTITION
            parts.append(fp)
    else:
        for t in request.get("topics") or ():
            name, tid, topic_err = _resolve_topic(ctx, {"name": t.get("topic"), "topic_id": t.get("topic_id")})
            parts_out: list[dict] = []
            responses.append({"topic": name or "", "topic_id": tid, "partitions": parts_out})
            for p in t.get("partitions") or ():
                index = p.get("partition", 0)
                entry = response_entry(index, isolation)
                parts_out.append(entry)
                fp = FetchPartition(name, tid, index, p.get("fetch_offset", 0), p.get("partition_max_bytes", 1 << 20),
                                    entry, p.get("current_leader_epoch", -1),
                                    p.get("last_fetched_epoch", -1) if from_follower else -1)
                fp.error = topic_err
                parts.append(fp)

    if broker.authorizer is not None:
        # KafkaApis: a follower needs CLUSTER_ACTION on the cluster (else every partition is refused), a consumer
        # READ on each topic; refused partitions are answered TOPIC_AUTHORIZATION_FAILED and never read
        if replica_id >= 0:
            if not ctx.authorize(AclOperation.CLUSTER_ACTION, _CLUSTER, CLUSTER_NAME):
                for fp in parts:
                    fp.error = TOPIC_AUTHORIZATION_FAILED
        else:
            for fp in parts:
                if fp.name and not fp.error and not ctx.authorize(AclOperation.READ, _TOPIC, fp.name):
                    fp.error = TOPIC_AUTHORIZATION_FAILED
    body = {"throttle_time_ms": 0, "error_code": NONE, "session_id": 0, "responses": responses}
    if quotas.enabled and replica_id < 0:
        started = waited = time.perf_counter()
        total = await broker.read_service.fetch_messages(params, parts)
        if params.max_wait_ms > 0:
            ctx.wait_s = time.perf_counter() - waited  # a long poll is not handler time (request_percentage)
        throttle = fetch_throttle(quotas, ctx, total, time.perf_counter() - started)
        if throttle:
            # Kafka: a throttled fetch (bandwidth or request quota) answers no data (the bytes are taken back from
            # the rate) and the same session, whose cached state is left as it was
            ctx.throttle_ms = throttle
            return {"throttle_time_ms": throttle, "error_code": NONE,
                    "session_id": session.session_id if session is not None else 0, "responses": []}
    else:
        await broker.read_service.fetch_messages(params, parts)

    if v >= 16:
        _leader_hints(ctx, parts, body)
    if session is not None:  # only what the client does not know yet, grouped by topic in session order
        body["session_id"] = session.session_id
        by_topic: dict[str, dict] = {}
        for fp in parts:
            if session.partitions[(fp.name, fp.index)].must_respond(fp.entry):  # type: ignore[index]
                t = by_topic.get(fp.name)  # type: ignore[arg-type]
                if t is None:
                    t = by_topic[fp.name] = {"topic": fp.name, "topic_id": fp.topic_id, "partitions": []}  # type: ignore[index]
                    responses.append(t)
                t["partitions"].append(fp.entry)
    elif session_epoch == INITIAL_EPOCH and sessions is not None:  # consumers and followers (issue 30)
        cached = OrderedDict()
        for fp in parts:
            if fp.name:
                cp = CachedPartition(fp.topic_id, fp.fetch_offset, fp.max_bytes,
                                     fp.current_leader_epoch if replica_id >= 0 else -1, fp.last_fetched_epoch)
                cp.must_respond(fp.entry)  # the full response told the client everything
                cached[(fp.name, fp.index)] = cp
        new = sessions.create(cached)
        if new is not None:
            body["session_id"] = new.session_id
    return body


def _leader_hints(ctx: RequestContext, parts: list[FetchPartition], body: dict) -> None:
    """KIP-951 (Fetch v16+): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its current
    leader and epoch, and the response lists those leaders' endpoints, so the client moves without a Metadata
    round trip (Kafka's ``KafkaApis.handleFetchRequest``)."""
    broker = ctx.broker
    leaders: set[int] = set()
    for fp in parts:
        if fp.entry.get("error_code") not in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) or not fp.name:
            continue
        md = broker.partition_metadata(fp.name, fp.index)
        if md is None:  # one node: this broker leads every partition
            leader, epoch = broker.node_id, broker.leader_epoch(fp.name, fp.index)
        else:
            leader, epoch = md["leader_id"], md["leader_epoch"]
        fp.entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        if leader >= 0:
            leaders.add(leader)
    if not leaders:
        return
    listed = broker.metadata_brokers(ctx.listener)
    if listed is None:
        host, port = broker.endpoint(ctx.listener)
        listed = [{"node_id": broker.node_id, "host": host, "port": port, "rack": broker.config.props.get("broker.rack")}]
    body["node_endpoints"] = [{"node_id": b["node_id"], "host": b["host"], "port": int(b["port"]), "rack": b["rack"]}
                              for b in listed if b["node_id"] in leaders]


def _session_error(code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}


