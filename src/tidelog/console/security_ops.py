"""The Security page's changes (issue 28): SCRAM users (AlterUserScramCredentials, KIP-554) and client quotas
(AlterClientQuotas, KIP-546), sent with the console's credentials through the same requests as ``tidelog users``
and ``tidelog quotas`` (:mod:`tidelog.client.admin_ops`); the broker's authorizer decides (ALTER on the cluster).

Input checked here before anything is sent: user names and client ids (printable, at most 255 characters, as
Kafka's principal names), SCRAM mechanisms and iteration counts (Kafka's 4,096 to 16,384), quota keys (Kafka's
four) and values (numbers; the LONG ones whole). The password is turned into a salted password here and never
stored, logged or sent back.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.quotas import QUOTA_KEYS
from tidelog.broker.security.scram import MAX_ITERATIONS
from tidelog.client import admin_ops
from tidelog.client.scram import MECHANISMS, MIN_ITERATIONS
from tidelog.console.kafka import Cluster, ConsoleError

ENTITY_TYPES = ("user", "client-id")
DEFAULT = "<default>"


def entity_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 255 or not value.isprintable():
        raise ConsoleError(f"{what}: expected 1 to 255 printable characters", 400)
    return value


def set_scram_user(cluster: Cluster, user: str, mechanism: Any, password: Any, iterations: Any) -> None:
    mech = str(mechanism or "").upper()
    if mech not in MECHANISMS:
        raise ConsoleError(f"mechanism: one of {', '.join(sorted(MECHANISMS))}", 400)
    if not isinstance(password, str) or not password:
        raise ConsoleError("password: must not be empty", 400)
    try:
        n = int(iterations if iterations not in (None, "") else MIN_ITERATIONS)
    except (TypeError, ValueError):
        raise ConsoleError("iterations: expected a whole number", 400) from None
    if not MIN_ITERATIONS <= n <= MAX_ITERATIONS:
        raise ConsoleError(f"iterations: {MIN_ITERATIONS} to {MAX_ITERATIONS}", 400)
    upsert = admin_ops.scram_upsertion(user, mech, password, n)
    cluster.run(admin_ops.alter_scram(cluster.transport, [upsert], []))


def delete_scram_user(cluster: Cluster, user: str, mechanism: Any) -> list[str]:
    """Delete one mechanism's credential of ``user``, or (no mechanism) every one it has."""
    if mechanism:
        mech = str(mechanism).upper()
        if mech not in MECHANISMS:
            raise ConsoleError(f"mechanism: one of {', '.join(sorted(MECHANISMS))}", 400)
        mechs = [mech]
    else:
        have = dict(cluster.run(admin_ops.describe_scram(cluster.transport)))
        mechs = [m for m, _ in have.get(user, [])]
        if not mechs:
            raise ConsoleError(f"user {user} has no SCRAM credential", 404)
    cluster.run(admin_ops.alter_scram(cluster.transport, [], [(user, m) for m in mechs]))
    return mechs


def quota_entity(data: Any) -> list[dict[str, str | None]]:
    """``{"user": name | null, "client-id": name | null}`` (null: the default entity) as a ClientQuotaEntity."""
    if not isinstance(data, dict) or not data or any(k not in ENTITY_TYPES for k in data):
        raise ConsoleError(f"entity: an object of {' and/or '.join(ENTITY_TYPES)} (null for the default)", 400)
    return [{"entity_type": k, "entity_name": None if data[k] is None else entity_name(data[k], k)}
            for k in ENTITY_TYPES if k in data]


def entity_label(entity: list[dict[str, str | None]]) -> str:
    return ",".join(f"{e['entity_type']}={DEFAULT if e['entity_name'] is None else e['entity_name']}" for e in entity)


def quota_ops(set_: Any, remove: Any) -> list[dict[str, Any]]:
    if not isinstance(set_ or {}, dict) or not isinstance(remove or [], list):
        raise ConsoleError("set: an object of quota values; remove: a list of quota names", 400)
    ops: list[dict[str, Any]] = []
    for key, value in (set_ or {}).items():
        if key not in QUOTA_KEYS:
            raise ConsoleError(f"quota {key!r}: one of {', '.join(QUOTA_KEYS)}", 400)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConsoleError(f"quota {key}: expected a number, got {value!r}", 400) from None
        if number <= 0 or (QUOTA_KEYS[key] == "LONG" and not number.is_integer()):
            raise ConsoleError(f"quota {key}: expected a positive {QUOTA_KEYS[key].lower()}", 400)
        ops.append({"key": key, "value": number, "remove": False})
    for key in remove or []:
        if key not in QUOTA_KEYS:
            raise ConsoleError(f"quota {key!r}: one of {', '.join(QUOTA_KEYS)}", 400)
        ops.append({"key": key, "value": 0.0, "remove": True})
    if not ops:
        raise ConsoleError("nothing to change: give set and/or remove", 400)
    return ops


def alter_quotas(cluster: Cluster, entity: list[dict[str, str | None]], ops: list[dict[str, Any]]) -> None:
    cluster.run(admin_ops.alter_quotas(cluster.transport, entity, ops))
