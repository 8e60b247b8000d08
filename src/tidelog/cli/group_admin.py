"""Group administration that confluent-kafka's AdminClient does not offer, through tidelog's own client:
OffsetDelete (``kafka-consumer-groups.sh --delete-offsets``), sent to the group's coordinator."""

from __future__ import annotations

import uuid

from tidelog.cli._client import bootstrap_request, peer_request
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code


def _error_name(code: int) -> str:
    err = error_for_code(code)
    return err.name if err is not None else f"error {code}"


async def delete_offsets(bootstrap: str, group: str, topics: tuple[str, ...],
                         timeout: float) -> tuple[list[tuple[str, int, str]], str | None]:
    """OffsetDelete of ``group`` for ``topics`` (``name`` or ``name:p1,p2``; every partition of a named topic
    without a list). Returns Kafka's rows ``(topic, partition, "Successful" | "Error: <reason>")`` and the
    request's own error, if any."""
    wanted: dict[str, list[int] | None] = {}
    for spec in topics:
        name, _, parts = spec.partition(":")
        wanted[name] = [int(p) for p in parts.split(",")] if parts else None
    if any(v is None for v in wanted.values()):
        md = await bootstrap_request(bootstrap, ApiKey.METADATA, 12, {
            "topics": [{"name": t, "topic_id": uuid.UUID(int=0)} for t, v in wanted.items() if v is None],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}, timeout)
        for t in md["topics"]:
            if t["error_code"]:
                return [], f"topic {t['name']}: {_error_name(t['error_code'])}"
            wanted[t["name"]] = sorted(p["partition_index"] for p in t["partitions"])
    found = await bootstrap_request(bootstrap, ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0}, timeout)
    if found["error_code"]:
        return [], f"no coordinator for the group: {_error_name(found['error_code'])}"
    body = {"group_id": group,
            "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps or []]} for t, ps in wanted.items()]}
    resp = await peer_request(found["host"], found["port"], ApiKey.OFFSET_DELETE, 0, body, timeout)
    if resp["error_code"]:
        return [], _error_name(resp["error_code"])
    rows = [(t["name"], p["partition_index"],
             "Successful" if not p["error_code"] else f"Error: {_error_name(p['error_code'])}")
            for t in resp["topics"] for p in t["partitions"]]
    return sorted(rows), None
