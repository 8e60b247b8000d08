"""AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), v0 (Kafka 4.1's layouts): the group coordinator
resets or deletes a share group's share-partition state through the share coordinators (``SharePersister``:
InitializeShareGroupState with the next state epoch and the new start offset, or DeleteShareGroupState), as Kafka's
``GroupCoordinatorService`` does; ``tidelog share-groups reset-offsets / delete-offsets`` call them.

As Kafka: the group must be empty (NON_EMPTY_GROUP); a group of another type is GROUP_ID_NOT_FOUND (top-level, and
on every authorized topic / partition). A group id this
broker does not know is taken as an empty share group (one whose ShareGroup* records were never written). The group's
ShareGroupStatePartitionMetadata follows (decision 0073). Authorization as KafkaApis: READ (alter) or
DELETE (delete) on the group first, then READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions / the
topic), then the group coordinator's checks (skipped when no topic is authorized).

A share partition this broker leads is dropped from memory at once (loaded again from its new state on next use);
one led by another broker notices at its next state write (FENCED_STATE_EPOCH, or UNKNOWN_TOPIC_OR_PARTITION after
a delete) and is loaded again then.
"""

from __future__ import annotations

from tidelog.broker.group.share_group import share_manager
from tidelog.broker.group.share_group_cleanup import note_deleted, note_initialized
from tidelog.broker.group.share_state_records import ShareKey
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.group import fit
from tidelog.broker.security.acls import AclOperation, ResourceType
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.error_response import error_response

ALTER = ApiKey.ALTER_SHARE_GROUP_OFFSETS
DELETE = ApiKey.DELETE_SHARE_GROUP_OFFSETS
NONE = 0
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
MAX_PARTITIONS = 10_000  # share partitions one request may reset or delete


def _group_error(ctx: RequestContext, gid: str) -> tuple[int, str | None]:
    """The group coordinator's refusal (after the group and topic ACLs were checked, as KafkaApis does)."""
    if not gid:
        return int(ErrorCode.INVALID_REQUEST), "The group id must be set."
    coord = ctx.broker.group_coordinator
    err = coord.check(gid) if coord is not None else int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if err:
        return err, None
    mgr = share_manager(ctx.broker)
    if not mgr.is_share_group(gid) and (
            (gid in coord.groups and coord.groups[gid].members) or coord.consumer.is_consumer_group(gid)):
        return int(ErrorCode.GROUP_ID_NOT_FOUND), f"Group {gid} is not a share group."
    g = mgr.groups.get(gid)
    if g is not None and g.members:
        return int(ErrorCode.NON_EMPTY_GROUP), "The group is not empty."
    return NONE, None


@handles(ALTER)
async def alter_share_group_offsets(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    gid = request.get("group_id") or ""
    topics_in = request.get("topics") or []
    if not ctx.authorize(AclOperation.READ, GROUP, gid):
        return fit(ALTER, v, error_response(ALTER, v, request, int(ErrorCode.GROUP_AUTHORIZATION_FAILED)))
    if sum(len(t.get("partitions") or ()) for t in topics_in) > MAX_PARTITIONS:
        return fit(ALTER, v, error_response(ALTER, v, request, int(ErrorCode.INVALID_REQUEST),
                                            f"At most {MAX_PARTITIONS} partitions."))
    authorized = any(ctx.authorize(AclOperation.READ, TOPIC, t.get("topic_name") or "") for t in topics_in)
    err, msg = _group_error(ctx, gid) if authorized else (NONE, None)  # nothing to do: no group check
    mgr = share_manager(ctx.broker)
    persister = mgr.store.persister
    responses = []
    for t in topics_in:
        name = t.get("topic_name") or ""
        info = ctx.broker.topics.get(name)
        allowed = ctx.authorize(AclOperation.READ, TOPIC, name)
        parts = []
        for p in t.get("partitions") or ():
            index, start = int(p.get("partition_index", 0)), int(p.get("start_offset", -1))
            code, text = NONE, None
            if not allowed:
                code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif err:
                code, text = err, msg
            elif info is None or not 0 <= index < info.num_partitions:
                code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif start < 0:
                code, text = int(ErrorCode.INVALID_REQUEST), "The start offset must not be negative."
            else:
                key = ShareKey(gid, info.topic_id, index)
                code, epoch = await persister.summary_epoch(key)
                if not code:
                    code, text = await persister.initialize(key, epoch + 1, start)
                    if not code:
                        note_initialized(mgr, gid, name, info.topic_id, index)
                mgr.store.drop((gid, info.topic_id, index))
            parts.append({"partition_index": index, "error_code": code, "error_message": text})
        responses.append({"topic_name": name, "topic_id": info.topic_id if info is not None and allowed
                          else b"\0" * 16, "partitions": parts})
    if authorized and not err:
        await mgr.records.persist(gid)  # ShareGroupStatePartitionMetadata (share_group_cleanup)
    return fit(ALTER, v, {"throttle_time_ms": 0, "error_code": err, "error_message": msg,
                          "responses": responses})


@handles(DELETE)
async def delete_share_group_offsets(ctx: RequestContext, request: dict) -> dict:
    v = ctx.api_version
    gid = request.get("group_id") or ""
    topics_in = request.get("topics") or []
    if not ctx.authorize(AclOperation.DELETE, GROUP, gid):
        return fit(DELETE, v, error_response(DELETE, v, request, int(ErrorCode.GROUP_AUTHORIZATION_FAILED)))
    authorized = any(ctx.authorize(AclOperation.READ, TOPIC, t.get("topic_name") or "") for t in topics_in)
    err, msg = _group_error(ctx, gid) if authorized else (NONE, None)
    mgr = share_manager(ctx.broker)
    persister = mgr.store.persister
    responses = []
    budget = MAX_PARTITIONS
    for t in topics_in:
        name = t.get("topic_name") or ""
        info = ctx.broker.topics.get(name)
        code, text = NONE, None
        if not ctx.authorize(AclOperation.READ, TOPIC, name):
            code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif err:
            code, text = err, msg
        elif info is None:
            code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        elif info.num_partitions > budget:
            code, text = int(ErrorCode.INVALID_REQUEST), f"At most {MAX_PARTITIONS} partitions."
        else:
            budget -= info.num_partitions
            for index in range(info.num_partitions):
                perr, ptext = await persister.delete(ShareKey(gid, info.topic_id, index))
                mgr.store.drop((gid, info.topic_id, index))
                if perr and not code:
                    code, text = perr, ptext
            if not code:
                note_deleted(mgr, gid, info.topic_id)
        shown = info is not None and code != ErrorCode.TOPIC_AUTHORIZATION_FAILED
        responses.append({"topic_name": name, "topic_id": info.topic_id if shown and info else b"\0" * 16,
                          "error_code": code, "error_message": text})
    if authorized and not err:
        await mgr.records.persist(gid)  # ShareGroupStatePartitionMetadata (share_group_cleanup)
    return fit(DELETE, v, {"throttle_time_ms": 0, "error_code": err, "error_message": msg,
                           "responses": responses})
