"""The share coordinator's APIs (KIP-932, inter-broker): InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87), version 0 (Kafka 4.1's).

Adapters to :class:`tidelog.broker.group.share_coordinator.ShareCoordinator`. As Kafka's KafkaApis: CLUSTER_ACTION
on the cluster, else every partition is answered CLUSTER_AUTHORIZATION_FAILED; per partition NOT_COORDINATOR
where this broker does not lead the state partition of its key, COORDINATOR_LOAD_IN_PROGRESS while it loads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.broker.group.share_persister import share_coordinator
from tidelog.broker.group.share_state_records import STATE_TOPIC, ShareKey
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.core_shared import _CLUSTER, _uuid_bytes
from tidelog.broker.handlers.group import fit
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.error_response import error_response

INITIALIZE = ApiKey.INITIALIZE_SHARE_GROUP_STATE
READ = ApiKey.READ_SHARE_GROUP_STATE
WRITE = ApiKey.WRITE_SHARE_GROUP_STATE
DELETE = ApiKey.DELETE_SHARE_GROUP_STATE
SUMMARY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
MAX_PARTITIONS = 10_000  # share partitions in one request


PartFn = Callable[[ShareKey, dict[str, Any]], Awaitable[dict[str, Any]]]


async def _serve(ctx: RequestContext, api_key: int, request: dict, fn: PartFn) -> dict:
    v = ctx.api_version
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, _CLUSTER, CLUSTER_NAME):
        return fit(api_key, v, error_response(api_key, v, request, int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
    gid = request.get("group_id") or ""
    topics = request.get("topics") or []
    if not gid or sum(len(t.get("partitions") or ()) for t in topics) > MAX_PARTITIONS:
        return fit(api_key, v, error_response(api_key, v, request, INVALID_REQUEST,
                                              "Group id must be set; at most 10000 partitions."))
    coord = share_coordinator(ctx.broker)
    if ctx.broker.topics.get(STATE_TOPIC) is None and ctx.broker.replica_manager.internal_topics_led_on_creation:
        await coord.state_topic()  # one node: created on first use, led here at once
    results = []
    for t in topics:
        tid = _uuid_bytes(t.get("topic_id"))
        parts = []
        for p in t.get("partitions") or ():
            index = int(p.get("partition", 0))
            out = await fn(ShareKey(gid, tid, index), p)
            parts.append({"partition": index, "error_message": None, **out})
        results.append({"topic_id": tid, "partitions": parts})
    return fit(api_key, v, {"results": results})


def _batches(p: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    return [(int(b["first_offset"]), int(b["last_offset"]), int(b["delivery_state"]), int(b["delivery_count"]))
            for b in p.get("state_batches") or ()]


@handles(INITIALIZE)
async def initialize_share_group_state(ctx: RequestContext, request: dict) -> dict:
    coord = share_coordinator(ctx.broker)

    async def one(key: ShareKey, p: dict[str, Any]) -> dict[str, Any]:
        err, msg = await coord.initialize(key, int(p.get("state_epoch", 0)), int(p.get("start_offset", -1)))
        return {"error_code": err, "error_message": msg}

    return await _serve(ctx, INITIALIZE, request, one)


@handles(READ)
async def read_share_group_state(ctx: RequestContext, request: dict) -> dict:
    coord = share_coordinator(ctx.broker)

    async def one(key: ShareKey, p: dict[str, Any]) -> dict[str, Any]:
        err, msg, st = await coord.read(key, int(p.get("leader_epoch", -1)))
        if st is None:
            return {"error_code": err, "error_message": msg, "state_epoch": 0, "start_offset": -1,
                    "state_batches": []}
        return {"error_code": 0, "state_epoch": st.state_epoch, "start_offset": st.start_offset,
                "state_batches": [{"first_offset": a, "last_offset": b, "delivery_state": s, "delivery_count": c}
                                  for a, b, s, c in st.batches]}

    return await _serve(ctx, READ, request, one)


@handles(WRITE)
async def write_share_group_state(ctx: RequestContext, request: dict) -> dict:
    coord = share_coordinator(ctx.broker)

    async def one(key: ShareKey, p: dict[str, Any]) -> dict[str, Any]:
        err, msg = await coord.write(key, int(p.get("state_epoch", 0)), int(p.get("leader_epoch", -1)),
                                     int(p.get("start_offset", -1)), _batches(p))
        return {"error_code": err, "error_message": msg}

    return await _serve(ctx, WRITE, request, one)


@handles(DELETE)
async def delete_share_group_state(ctx: RequestContext, request: dict) -> dict:
    coord = share_coordinator(ctx.broker)

    async def one(key: ShareKey, p: dict[str, Any]) -> dict[str, Any]:
        err, msg = await coord.delete(key)
        return {"error_code": err, "error_message": msg}

    return await _serve(ctx, DELETE, request, one)


@handles(SUMMARY)
async def read_share_group_state_summary(ctx: RequestContext, request: dict) -> dict:
    coord = share_coordinator(ctx.broker)

    async def one(key: ShareKey, p: dict[str, Any]) -> dict[str, Any]:
        err, msg, st = coord.summary(key)
        if st is None:
            return {"error_code": err, "error_message": msg, "state_epoch": 0, "start_offset": -1}
        return {"error_code": 0, "state_epoch": st.state_epoch, "start_offset": st.start_offset}

    return await _serve(ctx, SUMMARY, request, one)
