"""KIP-848 APIs: ConsumerGroupHeartbeat (68, v0-1) and ConsumerGroupDescribe (69, v0-1).

Adapters to :class:`tidelog.broker.group.consumer_group.ConsumerGroupManager` (``coordinator.consumer``). As Kafka's
KafkaApis: READ on the group for a heartbeat (GROUP_AUTHORIZATION_FAILED), DESCRIBE on the group to describe it;
subscribed topic names must all be describable (TOPIC_AUTHORIZATION_FAILED otherwise, Kafka 4's KAFKA-18813), and the
topics a regex matches are filtered by the heartbeating principal's DESCRIBE rights (broker/group/consumer_regex.py);
a described group whose (target) assignments name a topic the caller may not describe is answered
TOPIC_AUTHORIZATION_FAILED (KAFKA-18813).
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.group import fit
from tidelog.broker.security.acls import AclOperation, ResourceType
from tidelog.errors import ErrorCode

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
GROUP_AUTHORIZATION_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED
READ, DESCRIBE = AclOperation.READ, AclOperation.DESCRIBE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
# Kafka's authorized operations of a group without an authorizer: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS,
# ALTER_CONFIGS
ALL_GROUP_OPS = sum(1 << op for op in (3, 6, 8))


def _error(code: int, message: str | None = None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}


@handles(CONSUMER_GROUP_HEARTBEAT)
async def consumer_group_heartbeat(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    group_id = request.get("group_id") or ""
    if not ctx.authorize(READ, GROUP, group_id):
        return fit(CONSUMER_GROUP_HEARTBEAT, v, _error(GROUP_AUTHORIZATION_FAILED, "Group authorization failed."))
    coord = ctx.broker.group_coordinator  # None until the broker starts
    if coord is None:
        return fit(CONSUMER_GROUP_HEARTBEAT, v, _error(COORDINATOR_NOT_AVAILABLE))
    err = coord.check(group_id) if group_id else 0
    if err:
        return fit(CONSUMER_GROUP_HEARTBEAT, v, _error(err))
    host = ("/" + ctx.client_host) if ctx.client_host else ""
    names = request.get("subscribed_topic_names")
    if names and ctx.broker.authorizer is not None and not all(ctx.authorize(DESCRIBE, TOPIC, n) for n in names):
        # Kafka 4 (KAFKA-18813): every subscribed topic name must be describable
        return fit(CONSUMER_GROUP_HEARTBEAT, v, _error(TOPIC_AUTHORIZATION_FAILED))
    body = coord.consumer.heartbeat(v, request, ctx.client_id or "", host, (ctx.principal, ctx.client_host))
    if not body["error_code"]:  # the group's ConsumerGroup* records, written before the answer
        err = await coord.consumer.store.persist(group_id, body["member_id"])
        if err:
            body = _error(err)
    body["throttle_time_ms"] = 0
    return fit(CONSUMER_GROUP_HEARTBEAT, v, body)


def _topics_describable(ctx: RequestContext, described: dict[str, Any]) -> bool:
    """May the caller DESCRIBE every topic of the group's members' assignments and target assignments?"""
    names = {tp["topic_name"] for m in described["members"] for a in (m["assignment"], m["target_assignment"])
             for tp in a["topic_partitions"]}
    return all(ctx.authorize(DESCRIBE, TOPIC, n) for n in names)


@handles(CONSUMER_GROUP_DESCRIBE)
async def consumer_group_describe(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    coord = ctx.broker.group_coordinator  # None until the broker starts
    auth = ctx.broker.authorizer
    groups: list[dict[str, Any]] = []
    for gid in request.get("group_ids") or ():
        gid = gid or ""
        if not ctx.authorize(DESCRIBE, GROUP, gid):
            groups.append({"error_code": GROUP_AUTHORIZATION_FAILED, "error_message": "Group authorization failed.",
                           "group_id": gid, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                           "assignor_name": "", "members": []})
            continue
        if coord is None:
            groups.append({"error_code": COORDINATOR_NOT_AVAILABLE, "group_id": gid, "group_state": "",
                           "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []})
            continue
        err = coord.check(gid)
        if err:
            groups.append({"error_code": err, "group_id": gid, "group_state": "", "group_epoch": -1,
                           "assignment_epoch": -1, "assignor_name": "", "members": []})
            continue
        d = coord.consumer.describe(gid, v)
        if d["error_code"] and gid in coord.groups and coord.groups[gid].members:
            d["error_message"] = f"Group {gid} is not a consumer group."
        if auth is not None and not d["error_code"] and not _topics_describable(ctx, d):
            # Kafka 4 (KAFKA-18813): a group whose assignments name a topic the caller may not describe is not shown
            groups.append({"error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": "Topic authorization failed.",
                           "group_id": gid, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                           "assignor_name": "", "members": []})
            continue
        if request.get("include_authorized_operations"):
            d["authorized_operations"] = (ALL_GROUP_OPS if auth is None else
                                          auth.authorized_operations(ctx.principal, ctx.client_host, GROUP, gid))
        groups.append(d)
    return fit(CONSUMER_GROUP_DESCRIBE, v, {"throttle_time_ms": 0, "groups": groups})
