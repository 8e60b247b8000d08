"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546: ``kafka-configs.sh --entity-type users|clients``,
``Admin.describeClientQuotas`` / ``alterClientQuotas``.

As Kafka 4.1's controller (``ClientQuotaControlManager``, ``ClientQuotasImage.describe``):

* Describe: filter components (entity type; match exact name, the default, or any specified name); ``strict``
  keeps only entities with no other entity type; no components and not strict: every entity. A bad filter is
  INVALID_REQUEST in the response's error code (an unknown entity type: UNSUPPORTED_VERSION).
* Alter: per entity, validated then applied (all of its ops or none): an empty entity, an entity type twice or
  an unknown one, an empty name, an unknown key, a duplicate key, or a non-integral value for a byte rate is
  INVALID_REQUEST with Kafka's message; the same entity twice: the second is refused ("Ignoring duplicate
  entity"). ``validate_only`` checks and changes nothing. The store is written on a request handler thread.
"""

from __future__ import annotations

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.bodies import AlterEntryData, AlterEntryResult, DescribeEntryData
from tidelog.broker.quotas import (
    Entity,
    QuotaError,
    alteration,
    describe,
    entity_from_protocol,
    entity_label,
    entity_to_protocol,
)
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

INVALID_REQUEST = ErrorCode.INVALID_REQUEST
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_CLUSTER_AUTH_MESSAGE = "Cluster authorization failed."


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(ctx: RequestContext, request: dict) -> dict:
    # KafkaApis: DESCRIBE_CONFIGS on the cluster
    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": _CLUSTER_AUTH_MESSAGE, "entries": None}
    entities = ctx.broker.client_quotas.entities
    try:
        selected = describe(entities, list(request.get("components") or ()), bool(request.get("strict")))
    except QuotaError as exc:
        return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "entries": None}
    entries: list[DescribeEntryData] = [{"entity": entity_to_protocol(e),
                "values": [{"key": k, "value": v} for k, v in sorted(entities[e].items())]}
               for e in selected]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


@handles(ApiKey.ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(ctx: RequestContext, request: dict) -> dict:
    results: list[AlterEntryResult] = []
    changes: list[tuple[Entity, dict[str, float | None]]] = []
    seen: set[Entity] = set()
    allowed = ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)  # KafkaApis
    entry: AlterEntryData
    for entry in request.get("entries") or ():
        parts = list(entry.get("entity") or ())
        result: AlterEntryResult = {"error_code": 0, "error_message": None,
                  "entity": [{"entity_type": p.get("entity_type") or "", "entity_name": p.get("entity_name")}
                             for p in parts]}
        results.append(result)
        if not allowed:
            result["error_code"], result["error_message"] = CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_MESSAGE
            continue
        try:
            entity = entity_from_protocol(parts)
            if entity in seen:
                raise QuotaError(INVALID_REQUEST, f"Ignoring duplicate entity {entity_label(entity)}")
            seen.add(entity)
            ops = alteration(list(entry.get("ops") or ()))
        except QuotaError as exc:
            result["error_code"], result["error_message"] = exc.code, exc.message
            continue
        changes.append((entity, ops))
    if changes and not request.get("validate_only"):
        store = ctx.broker.quota_store
        assert store is not None  # made when the broker opens storage, before any request
        await ctx.broker.request_pool.run(store.alter, changes)
    return {"throttle_time_ms": 0, "entries": results}
