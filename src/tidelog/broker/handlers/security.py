"""Security APIs: SaslHandshake / SaslAuthenticate after authentication (or on a listener without SASL),
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554, ``kafka-configs.sh --entity-type users``).

Kafka's behaviours (``KafkaApis.handleSaslHandshakeRequest`` / ``handleSaslAuthenticateRequest``,
``ZkAdminManager.describeUserScramCredentials`` / ``alterUserScramCredentials``):

* SaslHandshake and SaslAuthenticate reach the API layer only once a connection is authenticated, or on a
  listener without SASL: both are answered ILLEGAL_SASL_STATE (the SASL exchange itself is the connection's,
  ``tidelog.broker.server.Connection.authenticate``).
* Describe: no users (null or empty) describes everyone with a credential; a named user without one is
  RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE.
* Alter: per user, all or nothing: an unknown mechanism UNSUPPORTED_SASL_MECHANISM, an empty name, empty salt or
  salted password, or iterations outside [4096, 16384] UNACCEPTABLE_CREDENTIAL, the same (user, mechanism)
  twice DUPLICATE_RESOURCE, deleting a credential that does not exist RESOURCE_NOT_FOUND. The server derives
  StoredKey and ServerKey from the client's salted password; the password never travels.
"""

from __future__ import annotations

from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
)
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

ILLEGAL_SASL_STATE = ErrorCode.ILLEGAL_SASL_STATE
RESOURCE_NOT_FOUND = ErrorCode.RESOURCE_NOT_FOUND
DUPLICATE_RESOURCE = ErrorCode.DUPLICATE_RESOURCE
UNACCEPTABLE_CREDENTIAL = ErrorCode.UNACCEPTABLE_CREDENTIAL
UNSUPPORTED_SASL_MECHANISM = ErrorCode.UNSUPPORTED_SASL_MECHANISM
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@handles(ApiKey.SASL_HANDSHAKE)
async def sasl_handshake(ctx: RequestContext, request: dict) -> dict:
    listener = next((s.listener for s in ctx.broker.socket_servers if s.listener.name == ctx.listener), None)
    mechanisms = list(listener.sasl_mechanisms) if listener is not None else []
    return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": mechanisms}


@handles(ApiKey.SASL_AUTHENTICATE)
async def sasl_authenticate(ctx: RequestContext, request: dict) -> dict:
    return {"error_code": ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime_ms": 0}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
async def describe_user_scram_credentials(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
                "results": []}
    store = ctx.broker.scram_credentials
    users = await ctx.broker.request_pool.run(store.describe)
    wanted = [u["name"] for u in request.get("users") or []]
    results = []

    def infos(name: str) -> list[dict]:
        return [{"mechanism": MECHANISMS[m][1], "iterations": c.iterations} for m, c in sorted(users[name].items())]

    if not wanted:
        for name in sorted(users):
            results.append({"user": name, "error_code": 0, "error_message": None, "credential_infos": infos(name)})
    else:
        counts: dict[str, int] = {}
        for name in wanted:
            counts[name] = counts.get(name, 0) + 1
        for name in dict.fromkeys(wanted):
            if counts[name] > 1:
                results.append({"user": name, "error_code": DUPLICATE_RESOURCE, "credential_infos": [],
                                "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                                 "single request"})
            elif name not in users:
                results.append({"user": name, "error_code": RESOURCE_NOT_FOUND, "credential_infos": [],
                                "error_message": "Attempt to describe a user credential that does not exist"})
            else:
                results.append({"user": name, "error_code": 0, "error_message": None,
                                "credential_infos": infos(name)})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
async def alter_user_scram_credentials(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        users = dict.fromkeys(op["name"] for op in [*(request.get("deletions") or []),
                                                     *(request.get("upsertions") or [])])
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None} for u in users]}
    store = ctx.broker.scram_credentials
    existing = await ctx.broker.request_pool.run(store.describe)
    deletions = request.get("deletions") or []
    upsertions = request.get("upsertions") or []
    errors: dict[str, tuple[int, str]] = {}
    seen: dict[tuple[str, int], int] = {}
    order: list[str] = []
    for op in [*deletions, *upsertions]:
        seen[(op["name"], op["mechanism"])] = seen.get((op["name"], op["mechanism"]), 0) + 1
        order.append(op["name"])

    def refuse(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    for (user, _mech), n in seen.items():
        if n > 1:
            refuse(user, DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for op in deletions:
        user, mech = op["name"], MECHANISM_BY_TYPE.get(op["mechanism"])
        if not user:
            refuse(user, UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            refuse(user, UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif mech not in existing.get(user, {}):
            refuse(user, RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    for op in upsertions:
        user, mech = op["name"], MECHANISM_BY_TYPE.get(op["mechanism"])
        if not user:
            refuse(user, UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            refuse(user, UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif op["iterations"] < MIN_ITERATIONS:
            refuse(user, UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif op["iterations"] > MAX_ITERATIONS:
            refuse(user, UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not op.get("salt") or not op.get("salted_password"):
            refuse(user, UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    deletes = [(op["name"], MECHANISM_BY_TYPE[op["mechanism"]]) for op in deletions if op["name"] not in errors]
    upserts = [
        (op["name"], MECHANISM_BY_TYPE[op["mechanism"]],
         ScramCredential.from_salted(MECHANISM_BY_TYPE[op["mechanism"]], bytes(op["salt"]),
                                     bytes(op["salted_password"]), op["iterations"]))
        for op in upsertions if op["name"] not in errors
    ]
    if deletes or upserts:
        await ctx.broker.request_pool.run(store.alter, upserts, deletes)
    results = []
    for user in dict.fromkeys(order):
        code, message = errors.get(user, (0, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
