"""Handlers only served in cluster mode: OffsetForLeaderEpoch (KIP-101/KIP-279)."""

from __future__ import annotations

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.server import PartitionError

OFFSET_FOR_LEADER_EPOCH = 23


@handles(OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(ctx: RequestContext, request: dict) -> dict:
    from tidelog.broker.handlers.core import error_of

    broker = ctx.broker
    topics_out = []
    for t in request.get("topics") or ():
        name = t.get("topic")
        parts = []
        topics_out.append({"topic": name, "partitions": parts})
        for p in t.get("partitions") or ():
            index = p.get("partition", 0)
            out = {"error_code": 0, "partition": index, "leader_epoch": -1, "end_offset": -1}
            parts.append(out)
            try:
                plog = broker.leader_log(name, index)
                broker.check_leader_epoch(name, index, p.get("current_leader_epoch", -1))
                cache = plog.epoch_cache
                if cache is None:
                    continue
                epoch, end = cache.end_offset_for(p.get("leader_epoch", -1), plog.log_end_offset)
                out["leader_epoch"], out["end_offset"] = epoch, end
            except PartitionError as exc:
                out["error_code"], _ = error_of(exc)
    return {"throttle_time_ms": 0, "topics": topics_out}
