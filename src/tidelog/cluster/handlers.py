"""Handlers only served in cluster mode: OffsetForLeaderEpoch (KIP-101/KIP-279), AlterPartitionReassignments and
ListPartitionReassignments (KIP-455), ElectLeaders (KIP-183/KIP-460).

AlterPartitionReassignments is answered by the controller only (NOT_CONTROLLER elsewhere, as Kafka's ZK mode;
clients send it to the controller named in Metadata): the handler hands the request to the controller's event
thread and answers with its per-partition results once the new assignments are written (the reassignment itself
goes on; ListPartitionReassignments shows it). ListPartitionReassignments is read from ZooKeeper's topic
znodes by any broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tidelog.broker.errors import PartitionError, error_of
from tidelog.broker.handlers import Handler, RequestContext, handles
from tidelog.broker.handlers.bodies import (
    EpochEndOffset,
    OffsetForLeaderTopicResult,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    PartitionResult,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.cluster import zkdata as zd
from tidelog.cluster.zk_async import ZooKeeperGone, zk_await
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_code

# the APIs only a broker in ZooKeeper mode serves (its replica manager brings them to the broker's handlers)
CLUSTER_HANDLERS: dict[int, Handler] = {}

#: per partition: None (done) or (Kafka error name, message)
PartitionResults = dict[tuple[str, int], tuple[ErrorCode, str | None] | None]


class ClusterController(Protocol):
    """What these handlers need of the controller (``tidelog.cluster.controller.Controller``): whether it is the
    active one, and its event queue for reassignments and elections (``reply`` is called on its thread with the
    per-partition results, or None when it is not, or no longer, the controller)."""

    active: bool

    def submit_alter_reassignments(self, wanted: dict[tuple[str, int], list[int] | None], allow_rf_change: bool,
                                   reply: Callable[[PartitionResults | None], None]) -> None: ...

    def submit_elect_leaders(self, wanted: set[tuple[str, int]] | None, election_type: int,
                             reply: Callable[[PartitionResults | None], None]) -> None: ...


class ZkReader(Protocol):
    """The reads ListPartitionReassignments makes of the ZooKeeper session (kazoo's ``KazooClient``; its
    asynchronous calls return an ``IAsyncResult``, awaited with :func:`~tidelog.cluster.zk_async.zk_await`)."""

    def get_children_async(self, path: str) -> Any: ...

    def get_async(self, path: str) -> Any: ...


@runtime_checkable
class ClusterReplicaManager(Protocol):
    """What these handlers need of ZooKeeper mode's replica manager (``tidelog.cluster.replica_manager``)."""

    controller: ClusterController | None
    zk: ZkReader | None

    def check_leader_epoch(self, topic: str, partition: int, requested: int | None) -> None: ...


def _replica_manager(ctx: RequestContext) -> ClusterReplicaManager:
    # CLUSTER_HANDLERS are served only by a broker whose replica manager is ZooKeeper mode's (it adds them)
    rm = ctx.broker.replica_manager
    if not isinstance(rm, ClusterReplicaManager):
        raise TypeError(f"{type(rm).__name__} does not serve the cluster-only APIs")
    return rm


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, CLUSTER_HANDLERS)
async def offset_for_leader_epoch(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    topics_out: list[OffsetForLeaderTopicResult] = []
    # KafkaApis: a follower (replica_id >= 0) needs CLUSTER_ACTION on the cluster, a client DESCRIBE on the topic
    follower_ok = None
    if broker.authorizer is not None and request.get("replica_id", -1) >= 0:
        follower_ok = ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    for t in request.get("topics") or ():
        name = t.get("topic")
        parts: list[EpochEndOffset] = []
        topics_out.append({"topic": name, "partitions": parts})
        allowed = follower_ok if follower_ok is not None else ctx.authorize(AclOperation.DESCRIBE,
                                                                            ResourceType.TOPIC, name or "")
        for p in t.get("partitions") or ():
            index = p.get("partition", 0)
            out: EpochEndOffset = {"error_code": 0, "partition": index, "leader_epoch": -1, "end_offset": -1}
            parts.append(out)
            if not allowed:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                plog = broker.leader_log(name, index)
                _replica_manager(ctx).check_leader_epoch(name, index, p.get("current_leader_epoch", -1))
                cache = plog.epoch_cache
                if cache is None:
                    continue
                epoch, end = cache.end_offset_for(p.get("leader_epoch", -1), plog.log_end_offset)
                out["leader_epoch"], out["end_offset"] = epoch, end
            except PartitionError as exc:
                out["error_code"], _ = error_of(exc)
    return {"throttle_time_ms": 0, "topics": topics_out}


def _alter_response(ctx: RequestContext, request: dict, error: ErrorCode | None, message: str | None,
                    per_partition: PartitionResults) -> dict:
    out: dict[str, object] = {"throttle_time_ms": 0, "error_code": error_code(error) if error else 0,
                           "error_message": message, "responses": []}
    if ctx.api_version >= 1:
        out["allow_replication_factor_change"] = bool(request.get("allow_replication_factor_change", True))
    responses: list[ReassignableTopicResponse] = []
    for t in request.get("topics") or ():
        parts: list[ReassignablePartitionResponse] = []
        for p in t.get("partitions") or ():
            tp = (t.get("name"), int(p.get("partition_index", -1)))
            r = per_partition.get(tp)
            parts.append({"partition_index": tp[1], "error_code": error_code(r[0]) if r else 0,
                          "error_message": r[1] if r else None})
        responses.append({"name": t.get("name"), "partitions": parts})
    out["responses"] = responses
    return out


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, CLUSTER_HANDLERS)
async def alter_partition_reassignments(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _alter_response(ctx, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, {})
    controller = _replica_manager(ctx).controller
    if controller is None or not controller.active:
        return _alter_response(ctx, request, ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.",
                               {})
    wanted: dict[tuple[str, int], list[int] | None] = {}
    dup: set[tuple[str, int]] = set()
    for t in request.get("topics") or ():
        for p in t.get("partitions") or ():
            tp = (t.get("name"), int(p.get("partition_index", -1)))
            if tp in wanted:
                dup.add(tp)
            replicas = p.get("replicas")
            wanted[tp] = None if replicas is None else [int(b) for b in replicas]
    if dup:
        return _alter_response(ctx, request, ErrorCode.INVALID_REQUEST,
                               f"Duplicate partitions in the request: {sorted(dup)}", {})
    allow_rf = bool(request.get("allow_replication_factor_change", True)) if ctx.api_version >= 1 else True
    try:
        results = await _controller_answer(
            lambda reply: controller.submit_alter_reassignments(wanted, allow_rf, reply), request)
    except TimeoutError:
        return _alter_response(ctx, request, ErrorCode.REQUEST_TIMED_OUT, "The controller did not answer in time.", {})
    if results is None:
        return _alter_response(ctx, request, ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.",
                               {})
    return _alter_response(ctx, request, None, None, results)


async def _controller_answer(submit: Callable[[Callable[[PartitionResults | None], None]], None],
                             request: dict) -> PartitionResults | None:
    """Hand a request to the controller's thread (``submit(reply)``) and wait for its ``reply`` (None: not the
    controller) within the request's ``timeout_ms`` (librdkafka sends 0 when the caller set no operation timeout:
    the spec's default, 60 s, then); TimeoutError when it does not answer in time."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[PartitionResults | None] = loop.create_future()

    def answer(results: PartitionResults | None) -> None:  # on the loop
        if not done.done():
            done.set_result(results)

    def reply(results: PartitionResults | None) -> None:  # on the controller's thread
        loop.call_soon_threadsafe(answer, results)

    submit(reply)
    timeout_ms = int(request.get("timeout_ms") or 0)
    return await asyncio.wait_for(done, (timeout_ms if timeout_ms > 0 else 60000) / 1000)  # 0: the spec's default


def _elect_response(top_error: ErrorCode | None, results: PartitionResults) -> dict:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (t, p), r in sorted(results.items()):
        by_topic.setdefault(t, []).append({"partition_id": p, "error_code": error_code(r[0]) if r else 0,
                                           "error_message": r[1] if r else None})
    return {"throttle_time_ms": 0, "error_code": error_code(top_error) if top_error else 0,
            "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}


@handles(ApiKey.ELECT_LEADERS, CLUSTER_HANDLERS)
async def elect_leaders(ctx: RequestContext, request: dict) -> dict:
    """ElectLeaders (KIP-183, KIP-460): answered by the controller (NOT_CONTROLLER elsewhere), which runs the
    election on its thread (:mod:`tidelog.cluster.elections`)."""
    topics = request.get("topic_partitions")
    wanted = None if topics is None else {(t.get("topic"), int(p)) for t in topics for p in t.get("partitions") or ()}

    def every(error: ErrorCode, message: str | None) -> PartitionResults:
        return dict.fromkeys(wanted or (), (error, message))

    # KafkaApis: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top and for every partition
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _elect_response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
    election_type = int(request.get("election_type", 0)) if ctx.api_version >= 1 else 0
    if election_type not in (0, 1):
        return _elect_response(None, every(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}"))
    # elsewhere than on the controller each partition answers NOT_CONTROLLER, as Kafka's processReplicaLeaderElection
    not_controller = every(ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.")
    controller = _replica_manager(ctx).controller
    if controller is None or not controller.active:
        return _elect_response(None, not_controller)
    try:
        results = await _controller_answer(
            lambda reply: controller.submit_elect_leaders(wanted, election_type, reply), request)
    except TimeoutError:
        return _elect_response(None, every(ErrorCode.REQUEST_TIMED_OUT, "The controller did not answer in time."))
    return _elect_response(None, not_controller if results is None else results)


async def list_reassignments(zk: ZkReader, wanted: dict[str, list[int]] | None,
                             timeout_s: float) -> list[OngoingTopicReassignment]:
    """The ongoing reassignments as ListPartitionReassignments topics, read from ZooKeeper on the loop (no worker
    thread waits) within ``timeout_s`` in all: :class:`~tidelog.cluster.zk_async.ZooKeeperGone` after it. The
    topics' znodes are requested at once (kazoo pipelines them on its one connection)."""
    from kazoo.exceptions import NoNodeError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    names = (sorted(wanted) if wanted is not None
             else sorted(await zk_await(zk.get_children_async(zd.BROKER_TOPICS), timeout_s)))
    pending = [(name, zk.get_async(zd.topic_path(name))) for name in names]
    out: list[OngoingTopicReassignment] = []
    for name, result in pending:
        try:
            a = zd.decode_topic((await zk_await(result, deadline - loop.time()))[0])
        except NoNodeError:
            continue
        parts: list[OngoingPartitionReassignment] = [{"partition_index": p, "replicas": list(a.partitions[p]), "adding_replicas": a.adding.get(p, []),
                  "removing_replicas": a.removing.get(p, [])}
                 for p in sorted(a.partitions)
                 if a.reassigning(p) and (wanted is None or p in wanted[name])]
        if parts:
            out.append({"name": name, "partitions": parts})
    return out


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, CLUSTER_HANDLERS)
async def list_partition_reassignments(ctx: RequestContext, request: dict) -> dict:
    topics = request.get("topics")
    wanted = None if topics is None else {t.get("name"): [int(i) for i in t.get("partition_indexes") or ()]
                                           for t in topics}
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None, "topics": []}
    zk = _replica_manager(ctx).zk
    if zk is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.BROKER_NOT_AVAILABLE,
                "error_message": "Not connected to ZooKeeper.", "topics": []}
    from kazoo.exceptions import KazooException

    timeout_ms = int(request.get("timeout_ms") or 0)  # 0 or absent: the spec's default, 60000
    try:
        found = await list_reassignments(zk, wanted, (timeout_ms if timeout_ms > 0 else 60000) / 1000)
    except (ZooKeeperGone, KazooException) as exc:  # no answer in time; ConnectionLoss, SessionExpiredError...
        reason = str(exc) if isinstance(exc, ZooKeeperGone) else type(exc).__name__
        return {"throttle_time_ms": 0, "error_code": ErrorCode.REQUEST_TIMED_OUT,
                "error_message": f"ZooKeeper: {reason}.", "topics": []}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": found}
