"""Shared by the ACL suites (test_acls.py, test_zk_acls.py): SASL PLAIN users, Kafka's ACL codes, one raw request as
a user with tidelog's own protocol client."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tidelog.client.security import ClientSecurity
from tidelog.cluster.peer import Peer

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}

# Kafka's codes
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
T_TOPIC, T_GROUP, T_CLUSTER, T_TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALLOW, DENY = 3, 2


def plain_jaas(users: dict[str, str]) -> str:
    entries = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="admin-secret" {entries};')


def acl_overrides(**extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        **extra,
    }


def sasl_port(b: Any) -> int:
    found = re.findall(r"SASL_PLAINTEXT\(SASL_PLAINTEXT\)://[^:]+:(\d+)", b.log_text())
    assert found, "no SASL listener in the broker log"
    return int(found[-1])


def call(b: Any, user: str | None, api_key: int, version: int, body: dict) -> dict:
    """One raw request as ``user`` (SASL PLAIN) or anonymous (PLAINTEXT, user None)."""
    if user is None:
        peer = Peer("127.0.0.1", b.port, "acl-test")
    else:
        peer = Peer("127.0.0.1", b.sasl_port, "acl-test",
                    ClientSecurity("client", "SASL_PLAINTEXT", None, "PLAIN", user, USERS[user]))

    async def run() -> dict:
        try:
            return await peer.request(api_key, version, body, 20)
        finally:
            peer.close()

    return asyncio.run(run())


def acl(rt: int, name: str, principal: str, op: int, perm: int = 3, pt: int = 3) -> dict:
    """A CreateAcls creation (ALLOW, LITERAL by default)."""
    return {"resource_type": rt, "resource_name": name, "resource_pattern_type": pt, "principal": principal,
            "host": "*", "operation": op, "permission_type": perm}
