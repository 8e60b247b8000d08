"""Admin requests that confluent-kafka's AdminClient lacks (or gets wrong), spoken through tidelog's own protocol
client, shared by the command line (``tidelog transactions | groups delete-offsets | quotas``) and the web console.

Click-free and UI-free: every function takes a :class:`Transport` (how a request reaches a broker, with whose
credentials) and returns the broker's answer as plain data; a broker's refusal is an :class:`AdminError` with
Kafka's error code, which the CLI prints and exits on and the console shows on its page. What fails on the way
(no broker reachable, a refused login) is the transport's own exception.
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol

from tidelog.client.scram import MECHANISMS, MIN_ITERATIONS, salted_password
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

#: SCRAM mechanism names and their type numbers in Describe/AlterUserScramCredentials (Kafka's ScramMechanism)
SCRAM_TYPES = {name: number for name, (_alg, number) in MECHANISMS.items()}
SCRAM_NAMES = {v: k for k, v in SCRAM_TYPES.items()}


class Transport(Protocol):
    """One request to a named broker, or to whichever bootstrap server answers first."""

    async def call(self, host: str, port: int, api_key: int, version: int, body: dict) -> dict: ...

    async def any_broker(self, api_key: int, version: int, body: dict) -> dict: ...


class AdminError(Exception):
    """A broker refused: ``what`` was asked, Kafka's error ``code`` and the broker's ``message`` (or None)."""

    def __init__(self, what: str, code: int, message: str | None = None) -> None:
        self.what, self.code, self.message = what, code, message
        self.name = error_name(code)
        self.detail = f"{self.name}: {message}" if message else self.name  # Kafka tools' "NAME: message"
        super().__init__(f"{what}: {self.detail}")


def error_name(code: int) -> str:
    err = error_for_code(code)
    return err.name if err is not None else f"error {code}"


def check(code: int, what: str, message: str | None = None) -> None:
    if code:
        raise AdminError(what, code, message)


async def brokers(t: Transport) -> dict[int, tuple[str, int]]:
    """Every broker of the cluster (node id -> host, port), from Metadata v12 at a bootstrap server."""
    md = await t.any_broker(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
    return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}


# -- transactions (kafka-transactions.sh) ----------------------------------------------------------------------

async def list_transactions(t: Transport, nodes: dict[int, tuple[str, int]], states: list[str] | None = None,
                            pids: list[int] | None = None, duration_ms: int = -1) -> list[tuple[int, dict]]:
    """ListTransactions v1 on every broker of ``nodes`` (each answers for the ids it coordinates):
    (coordinator node, transaction state entry)."""
    body = {"state_filters": states or [], "producer_id_filters": pids or [], "duration_filter": duration_ms}
    out: list[tuple[int, dict]] = []
    for node, (host, port) in sorted(nodes.items()):
        resp = await t.call(host, port, ApiKey.LIST_TRANSACTIONS, 1, body)
        check(resp["error_code"], f"ListTransactions on broker {node}")
        if resp.get("unknown_state_filters"):
            raise AdminError(f"unknown transaction states: {', '.join(resp['unknown_state_filters'])}", 0)
        out.extend((node, s) for s in resp["transaction_states"])
    return out


async def describe_transaction(t: Transport, tid: str) -> tuple[int, dict]:
    """FindCoordinator(TRANSACTION) then DescribeTransactions at the coordinator: (coordinator node, state)."""
    found = await t.any_broker(ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
    check(found["error_code"], f"FindCoordinator {tid}", found.get("error_message"))
    resp = await t.call(found["host"], found["port"], ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
    state = resp["transaction_states"][0]
    check(state["error_code"], f"DescribeTransactions {tid}")
    return found["node_id"], state


async def describe_producers(t: Transport, host: str, port: int,
                             parts: dict[str, list[int]]) -> list[tuple[str, int, dict]]:
    """DescribeProducers at a partition leader: (topic, partition, active producer) for each partition asked."""
    body = {"topics": [{"name": name, "partition_indexes": ps} for name, ps in parts.items()]}
    resp = await t.call(host, port, ApiKey.DESCRIBE_PRODUCERS, 0, body)
    out: list[tuple[str, int, dict]] = []
    for x in resp["topics"]:
        for p in x["partitions"]:
            check(p["error_code"], f"DescribeProducers {x['name']}-{p['partition_index']}", p.get("error_message"))
            out.extend((x["name"], p["partition_index"], a) for a in p["active_producers"])
    return out


async def write_abort_marker(t: Transport, host: str, port: int, topic: str, partition: int, producer_id: int,
                             producer_epoch: int, coordinator_epoch: int) -> None:
    """An ABORT marker for the producer's open transaction in one partition, written by WriteTxnMarkers v1 at
    the partition's leader (Kafka's ``Admin.abortTransaction``)."""
    body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
                         "topics": [{"name": topic, "partition_indexes": [partition]}],
                         "coordinator_epoch": max(coordinator_epoch, 0)}]}
    resp = await t.call(host, port, ApiKey.WRITE_TXN_MARKERS, 1, body)
    check(resp["markers"][0]["topics"][0]["partitions"][0]["error_code"],
          f"abort of producer {producer_id} in {topic}-{partition}")


# -- groups ----------------------------------------------------------------------------------------------------

async def delete_offsets(t: Transport, group: str, parts: dict[str, list[int]]) -> list[tuple[str, int, int]]:
    """OffsetDelete (``kafka-consumer-groups.sh --delete-offsets``) at the group's coordinator: (topic,
    partition, error code) per partition; a refusal of the whole request (or of finding the coordinator) raises."""
    found = await t.any_broker(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    check(found["error_code"], f"no coordinator for the group {group}", found.get("error_message"))
    body = {"group_id": group, "topics": [{"name": name, "partitions": [{"partition_index": p} for p in ps]}
                                          for name, ps in parts.items()]}
    resp = await t.call(found["host"], found["port"], ApiKey.OFFSET_DELETE, 0, body)
    check(resp["error_code"], f"OffsetDelete {group}")
    return sorted((x["name"], p["partition_index"], p["error_code"]) for x in resp["topics"] for p in x["partitions"])


# -- client quotas (KIP-546) -----------------------------------------------------------------------------------

async def describe_quotas(t: Transport, components: list[dict], strict: bool = False
                          ) -> list[tuple[dict[str, str | None], list[tuple[str, float]]]]:
    """DescribeClientQuotas v1 (no components: every entity): per entity {entity type: name (None: the
    default)} and its (key, value) quotas, sorted."""
    resp = await t.any_broker(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": strict})
    check(resp["error_code"], "DescribeClientQuotas", resp.get("error_message"))
    out = [({e["entity_type"]: e["entity_name"] for e in entry["entity"]},
            sorted((v["key"], v["value"]) for v in entry["values"])) for entry in resp.get("entries") or ()]
    return sorted(out, key=lambda e: sorted((k, v or "") for k, v in e[0].items()))


async def alter_quotas(t: Transport, entity: list[dict], ops: list[dict], validate_only: bool = False) -> None:
    """AlterClientQuotas v1 of one entity (``[{"entity_type", "entity_name"}]``, None: the default) with ops
    ``[{"key", "value", "remove"}]``."""
    body = {"entries": [{"entity": entity, "ops": ops}], "validate_only": validate_only}
    resp = await t.any_broker(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)
    for entry in resp.get("entries") or ():
        check(entry["error_code"], "AlterClientQuotas", entry.get("error_message"))


# -- SCRAM credentials (KIP-554) -------------------------------------------------------------------------------

async def describe_scram(t: Transport) -> list[tuple[str, list[tuple[str, int]]]]:
    """DescribeUserScramCredentials v0 of every user: (user, [(mechanism, iterations)]), sorted. (confluent-kafka
    2.16's AdminClient aborts the process when the broker refuses this request: hence tidelog's client.)"""
    resp = await t.any_broker(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    check(resp["error_code"], "DescribeUserScramCredentials", resp.get("error_message"))
    return [(r["user"], [(SCRAM_NAMES.get(i["mechanism"], str(i["mechanism"])), i["iterations"])
                         for i in r["credential_infos"]])
            for r in sorted(resp["results"], key=lambda r: r["user"]) if not r["error_code"]]


def scram_upsertion(user: str, mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> dict:
    """One AlterUserScramCredentials upsertion: the salted password is computed here, so the password itself
    never leaves the client (as Kafka's Admin client does)."""
    mech = mechanism.upper()
    if mech not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(SCRAM_TYPES)})")
    salt = secrets.token_bytes(32)
    return {"name": user, "mechanism": SCRAM_TYPES[mech], "iterations": iterations, "salt": salt,
            "salted_password": salted_password(MECHANISMS[mech][0], password, salt, iterations)}


async def alter_scram(t: Transport, upsertions: list[dict], deletions: list[tuple[str, str]]) -> None:
    """AlterUserScramCredentials v0: ``upsertions`` from :func:`scram_upsertion`, ``deletions`` (user,
    mechanism name); the first user the broker refuses raises."""
    body: dict[str, Any] = {"deletions": [{"name": u, "mechanism": SCRAM_TYPES.get(m.upper(), 0)}
                                          for u, m in deletions], "upsertions": upsertions}
    resp = await t.any_broker(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, body)
    for r in resp["results"]:
        check(r["error_code"], f"AlterUserScramCredentials {r['user']}", r.get("error_message"))


# -- share groups (KIP-932, kafka-share-groups.sh) -------------------------------------------------------------

SHARE_GROUP_DESCRIBE_VERSION = 1
DESCRIBE_SHARE_GROUP_OFFSETS_VERSION = 0


async def describe_share_group(t: Transport, group: str) -> tuple[dict, dict]:
    """FindCoordinator(GROUP) then ShareGroupDescribe (API 77) at the coordinator: (the coordinator's
    ``FindCoordinator`` answer: node_id, host, port; the described group). A refusal (GROUP_AUTHORIZATION_FAILED,
    GROUP_ID_NOT_FOUND for a group that is not a share group...) raises."""
    found = await t.any_broker(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    check(found["error_code"], f"FindCoordinator {group}", found.get("error_message"))
    resp = await t.call(found["host"], found["port"], ApiKey.SHARE_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE_VERSION,
                        {"group_ids": [group], "include_authorized_operations": False})
    (g,) = resp["groups"]
    check(g["error_code"], f"ShareGroupDescribe {group}", g.get("error_message"))
    return found, g


def share_assignment(member: dict) -> list[tuple[str, int]]:
    """A ShareGroupDescribe member's assigned partitions: (topic, partition), in the broker's order."""
    return [(x.get("topic_name") or "", p) for x in (member.get("assignment") or {}).get("topic_partitions") or ()
            for p in x.get("partitions") or ()]


async def share_group_offsets(t: Transport, host: str, port: int, group: str,
                              parts: dict[str, list[int]] | None = None) -> list[tuple[str, int, int, int]]:
    """DescribeShareGroupOffsets (API 90) at ``host:port`` (the group's coordinator): (topic, partition,
    share-partition start offset or -1, error code) per partition, sorted; ``parts`` None: every partition the
    group has state for there. A refusal of the group raises; a partition's own error is in its row."""
    topics = None if parts is None else [{"topic_name": x, "partitions": ps} for x, ps in sorted(parts.items())]
    resp = await t.call(host, port, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, DESCRIBE_SHARE_GROUP_OFFSETS_VERSION,
                        {"groups": [{"group_id": group, "topics": topics}]})
    (g,) = resp["groups"]
    check(g["error_code"], f"DescribeShareGroupOffsets {group}", g.get("error_message"))
    return sorted((x["topic_name"], p["partition_index"], p["start_offset"], p["error_code"])
                  for x in g.get("topics") or () for p in x.get("partitions") or ())
