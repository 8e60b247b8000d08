"""ACL APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's ``AclApis``.

* No authorizer (``authorizer.class.name`` empty): SECURITY_DISABLED ("No Authorizer is configured.").
* DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED (and nothing is read or changed).
* CreateAcls: each creation is checked (no UNKNOWN/ANY, a LITERAL or PREFIXED pattern, a name, the cluster
  named ``kafka-cluster``, a principal ``Type:name``); a bad one is INVALID_REQUEST with the reason, the others
  are stored. DeleteAcls: per filter the bindings it matched, all removed at once. A filter with an UNKNOWN
  element is INVALID_REQUEST. The store write runs on the request handler threads (a file fsync, or ZooKeeper).
"""

from __future__ import annotations

from enum import IntEnum

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

SECURITY_DISABLED = ErrorCode.SECURITY_DISABLED
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
NO_AUTHORIZER = "No Authorizer is configured."
DENIED = "Cluster authorization failed."
_CLUSTER = ResourceType.CLUSTER


def _enum(enum: type[IntEnum], value: int) -> IntEnum:
    try:
        return enum(value)
    except ValueError:
        return enum(0)  # UNKNOWN


def _filter(d: dict) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, d["resource_type_filter"]),  # type: ignore[arg-type]
        d.get("resource_name_filter"),
        _enum(PatternType, d.get("pattern_type_filter", 3)),  # type: ignore[arg-type]
        d.get("principal_filter"),
        d.get("host_filter"),
        _enum(AclOperation, d["operation"]),  # type: ignore[arg-type]
        _enum(PermissionType, d["permission_type"]),  # type: ignore[arg-type]
    )


@handles(ApiKey.DESCRIBE_ACLS)
async def describe_acls(ctx: RequestContext, request: dict) -> dict:
    auth = ctx.broker.authorizer
    if auth is None:
        return {"throttle_time_ms": 0, "error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER,
                "resources": []}
    if not ctx.authorize(AclOperation.DESCRIBE, _CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": DENIED,
                "resources": []}
    flt = _filter(request)
    problem = flt.problem()
    if problem is not None:
        return {"throttle_time_ms": 0, "error_code": INVALID_REQUEST, "error_message": problem, "resources": []}
    by_pattern: dict[tuple, list[AclBinding]] = {}
    for b in auth.describe(flt):
        by_pattern.setdefault(b.pattern, []).append(b)
    resources = []
    for (rt, name, pt), bindings in sorted(by_pattern.items()):
        resources.append({
            "resource_type": int(rt), "resource_name": name, "pattern_type": int(pt),
            "acls": [{"principal": b.principal, "host": b.host, "operation": int(b.operation),
                      "permission_type": int(b.permission)}
                     for b in sorted(bindings, key=lambda b: (b.principal, b.host, b.operation, b.permission))],
        })
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": resources}


@handles(ApiKey.CREATE_ACLS)
async def create_acls(ctx: RequestContext, request: dict) -> dict:
    creations = request.get("creations") or []
    auth = ctx.broker.authorizer
    if auth is None:
        return {"throttle_time_ms": 0,
                "results": [{"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER} for _ in creations]}
    if not ctx.authorize(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0,
                "results": [{"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": DENIED} for _ in creations]}
    bindings = [
        AclBinding(_enum(ResourceType, c["resource_type"]), c["resource_name"],  # type: ignore[arg-type]
                   _enum(PatternType, c.get("resource_pattern_type", 3)), c["principal"],  # type: ignore[arg-type]
                   c["host"], _enum(AclOperation, c["operation"]),  # type: ignore[arg-type]
                   _enum(PermissionType, c["permission_type"]))  # type: ignore[arg-type]
        for c in creations
    ]
    problems = await ctx.broker.request_pool.run(auth.create, bindings) if bindings else []
    return {"throttle_time_ms": 0,
            "results": [{"error_code": 0, "error_message": None} if p is None
                        else {"error_code": INVALID_REQUEST, "error_message": p} for p in problems]}


@handles(ApiKey.DELETE_ACLS)
async def delete_acls(ctx: RequestContext, request: dict) -> dict:
    filters = request.get("filters") or []
    auth = ctx.broker.authorizer
    if auth is None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER, "matching_acls": []} for _ in filters]}
    if not ctx.authorize(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": DENIED, "matching_acls": []}
            for _ in filters]}
    parsed = [_filter(f) for f in filters]
    problems = [f.problem() for f in parsed]
    valid = [f for f, p in zip(parsed, problems, strict=True) if p is None]
    matched = iter(await ctx.broker.request_pool.run(auth.delete, valid) if valid else [])
    results = []
    for p in problems:
        if p is not None:
            results.append({"error_code": INVALID_REQUEST, "error_message": p, "matching_acls": []})
            continue
        results.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": int(b.resource_type),
             "resource_name": b.name, "pattern_type": int(b.pattern_type), "principal": b.principal,
             "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)}
            for b in next(matched)]})
    return {"throttle_time_ms": 0, "filter_results": results}
