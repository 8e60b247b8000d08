"""InitProducerId (API key 22): producer ids for idempotent producers (transactional ones are routed to txn.py).

* ``transactional_id`` null, no producer id given: a new producer id (never used before, see
  :mod:`tidelog.broker.producer_ids`) with epoch 0. This is what Kafka's ``TransactionCoordinator`` answers a
  non-transactional InitProducerId with.
* ``transactional_id`` null, ``producer_id``/``producer_epoch`` given (v3+, KIP-360): the idempotent producer
  asks for an epoch bump after a fatal-for-the-sequence error (e.g. UNKNOWN_PRODUCER_ID, an expired batch). We
  answer the same producer id with ``epoch + 1`` when the id was issued here and the epoch is the latest we gave
  out; otherwise (unknown id, stale epoch, epoch exhausted) a fresh id with epoch 0, Kafka's answer for any
  non-transactional request. Bumping keeps the producer id, so batches still in flight under the old epoch are
  fenced by the log (INVALID_PRODUCER_EPOCH) instead of being accepted as another producer's.
* ``transactional_id`` set: the transaction coordinator's (``handlers/txn.py``,
  :mod:`tidelog.broker.txn.coordinator`): epoch bumps, fencing, KIP-360 bumps with the producer id given.
* no block of ids can be reserved (ZooKeeper unreachable in cluster mode, a disk error): the retriable
  ``COORDINATOR_LOAD_IN_PROGRESS``, Kafka's answer while its next producer id block is not available.
"""

from __future__ import annotations

import asyncio
import logging

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.txn import init_transactional_producer_id
from tidelog.broker.producer_ids import ProducerIdManager
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

log = logging.getLogger("tidelog.broker.producer_id")

INIT_PRODUCER_ID = ApiKey.INIT_PRODUCER_ID


def _manager(ctx: RequestContext) -> ProducerIdManager:
    mgr = ctx.broker.producer_ids
    if mgr is None:
        # The broker core constructs one at start; this covers brokers built without it (tests, tools).
        mgr = ProducerIdManager(ctx.broker.config.log_dirs)
        ctx.broker.producer_ids = mgr
    return mgr


@handles(INIT_PRODUCER_ID)
async def init_producer_id(ctx: RequestContext, request: dict) -> dict:
    if request.get("transactional_id") is not None:
        return await init_transactional_producer_id(ctx, request)

    auth = ctx.broker.authorizer
    if auth is not None and not (ctx.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
                                 or auth.authorize_any(ctx.principal, ctx.client_host, AclOperation.WRITE,
                                                       ResourceType.TOPIC)):
        # KafkaApis (KIP-679): an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                "producer_epoch": -1}
    mgr = _manager(ctx)
    producer_id = int(request.get("producer_id", -1) if ctx.api_version >= 3 else -1)
    producer_epoch = int(request.get("producer_epoch", -1) if ctx.api_version >= 3 else -1)
    if (producer_id >= 0 and producer_epoch < 0) or (producer_id < 0 and producer_epoch >= 0):
        # Kafka: "Either both or neither of producerId and producerEpoch must be set"
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.INVALID_REQUEST,
            "producer_id": -1,
            "producer_epoch": -1,
        }

    # Reserving a new block fsyncs a file (one node) or writes ZooKeeper (cluster): keep that off the event loop.
    try:
        if producer_id >= 0:
            got = mgr.bump_epoch_nowait(producer_id, producer_epoch)
            if got is None:
                got = await asyncio.to_thread(mgr.bump_epoch, producer_id, producer_epoch)
        else:
            pid_now = mgr.allocate_nowait()
            got = (pid_now if pid_now is not None else await asyncio.to_thread(mgr.allocate), 0)
    except Exception as exc:
        # The next block could not be reserved (ZooKeeper unreachable, disk error). Kafka answers
        # COORDINATOR_LOAD_IN_PROGRESS while no block is available; clients retry it.
        log.warning("no producer id block available: %s", exc)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    pid, epoch = got
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch}
