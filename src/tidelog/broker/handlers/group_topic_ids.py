"""Topic ids in OffsetCommit v10 / OffsetFetch v10 (KIP-848's move from topic names to topic ids).

From v10 a request names its topics by ``topic_id`` only and the response carries the id instead of the name.
As Kafka's ``KafkaApis`` does, the ids are resolved to names at the entry and the rest of the handler works on
names, as for v9:

* a known id becomes its topic's name; the topic's ACLs (READ for OffsetCommit, DESCRIBE for OffsetFetch) are
  checked on that name afterwards, as for the older versions;
* an id no topic has (never existed, or deleted, or the zero uuid) answers UNKNOWN_TOPIC_ID for each of its
  partitions (OffsetFetch: committed offset -1, leader epoch -1, metadata ""), before any topic ACL is asked
  (there is no name to ask it for); a group-level refusal (GROUP_AUTHORIZATION_FAILED, coordinator errors)
  still covers them;
* response topics carry the id of the topic; an OffsetFetch of "all topics" (``topics`` null) leaves out the
  committed offsets of topics that no longer exist, since they have no id to answer with (Kafka does the same).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tidelog.broker.handlers import RequestContext
from tidelog.broker.handlers.core_shared import UNKNOWN_TOPIC_ID, ZERO_UUID, _uuid_bytes

Body = dict[str, Any]


class ResolvedTopics:
    """The topics of one v10 request (or request group): ``named`` is the request's topic list with names filled
    in for known ids (unknown ones removed), ``unknown`` the entries whose id no topic has, in request order."""

    __slots__ = ("ids", "named", "order", "unknown")

    def __init__(self, ctx: RequestContext, topics: Iterable[Mapping[str, Any]]) -> None:
        self.named: list[dict[str, Any]] = []
        self.unknown: list[Mapping[str, Any]] = []
        self.ids: dict[str, bytes] = {}
        self.order: list[tuple[bool, str | bytes]] = []  # (known, name or id) in request order
        by_id = ctx.broker.topics.by_id
        for t in topics:
            tid = _uuid_bytes(t.get("topic_id"))
            info = by_id(tid) if tid != ZERO_UUID else None
            if info is None:
                self.unknown.append(t)
                self.order.append((False, tid))
            else:
                self.named.append({**t, "name": info.name})
                self.ids[info.name] = tid
                self.order.append((True, info.name))


def topic_id_of(ctx: RequestContext, name: str) -> bytes | None:
    info = ctx.broker.topics.get(name)
    return info.topic_id if info is not None else None


def _in_request_order(resolved: ResolvedTopics, topics: list[Body],
                      unknown_partitions: Callable[[Mapping[str, Any], int], list[Body]], group_error: int) -> list[Body]:
    """``topics`` (answered by name for the known ids) with their ids, and each unknown id answered by
    ``unknown_partitions(its request entry, error code)`` — UNKNOWN_TOPIC_ID, or ``group_error`` when the whole
    group was refused — in request order."""
    by_name: dict[str, Body] = {t["name"]: t for t in topics}
    out: list[Body] = []
    unknown = iter(resolved.unknown)
    for known, key in resolved.order:
        if known:
            hit = by_name.pop(str(key), None)
            if hit is not None:
                out.append({**hit, "topic_id": resolved.ids[str(key)]})
            continue
        u = next(unknown)
        out.append({"name": "", "topic_id": u.get("topic_id") or uuid.UUID(int=0),
                    "partitions": unknown_partitions(u, group_error or UNKNOWN_TOPIC_ID)})
    return out


def commit_response_topics(resolved: ResolvedTopics, topics: list[Body], group_error: int = 0) -> list[Body]:
    """OffsetCommit v10 response topics (see :func:`_in_request_order`)."""
    return _in_request_order(resolved, topics, lambda u, code: [
        {"partition_index": int(p.get("partition_index", 0)), "error_code": code}
        for p in u.get("partitions") or ()], group_error)


def fetch_response_topics(ctx: RequestContext, resolved: ResolvedTopics | None, topics: list[Body],
                          group_error: int = 0) -> list[Body]:
    """OffsetFetch v10 response topics of one group. ``resolved`` None: "all topics", every topic answered gets
    its id, the ones without (deleted) are left out."""
    if resolved is None:
        out: list[Body] = []
        for t in topics:
            tid = topic_id_of(ctx, t["name"])
            if tid is not None:
                out.append({**t, "topic_id": tid})
        return out
    # a group error covers the unknown ids too, as the named partitions (_offset_rows)
    return _in_request_order(resolved, topics, lambda u, code: [
        {"partition_index": int(p), "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": code}
        for p in u.get("partition_indexes") or ()], group_error)
