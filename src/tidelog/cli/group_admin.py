"""Group administration that confluent-kafka's AdminClient does not offer, through tidelog's own client:
OffsetDelete (``kafka-consumer-groups.sh --delete-offsets``), sent to the group's coordinator
(:func:`tidelog.client.admin_ops.delete_offsets`, which the console uses too)."""

from __future__ import annotations

import uuid

from tidelog.cli._client import CliTransport
from tidelog.client import admin_ops
from tidelog.protocol.api_keys import ApiKey


async def delete_offsets(bootstrap: str, group: str, topics: tuple[str, ...],
                         timeout: float) -> tuple[list[tuple[str, int, str]], str | None]:
    """OffsetDelete of ``group`` for ``topics`` (``name`` or ``name:p1,p2``; every partition of a named topic
    without a list). Returns Kafka's rows ``(topic, partition, "Successful" | "Error: <reason>")`` and the
    request's own error, if any."""
    t = CliTransport(bootstrap, timeout)
    wanted: dict[str, list[int] | None] = {}
    for spec in topics:
        name, _, parts = spec.partition(":")
        wanted[name] = [int(p) for p in parts.split(",")] if parts else None
    if any(v is None for v in wanted.values()):
        md = await t.any_broker(ApiKey.METADATA, 12, {
            "topics": [{"name": x, "topic_id": uuid.UUID(int=0)} for x, v in wanted.items() if v is None],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        for x in md["topics"]:
            if x["error_code"]:
                return [], f"topic {x['name']}: {admin_ops.error_name(x['error_code'])}"
            wanted[x["name"]] = sorted(p["partition_index"] for p in x["partitions"])
    try:
        rows = await admin_ops.delete_offsets(t, group, {x: ps or [] for x, ps in wanted.items()})
    except admin_ops.AdminError as exc:
        return [], (f"no coordinator for the group: {exc.name}" if exc.what.startswith("no coordinator")
                    else exc.name)
    return [(x, p, "Successful" if not code else f"Error: {admin_ops.error_name(code)}") for x, p, code in rows], None
