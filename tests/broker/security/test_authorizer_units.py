"""The authorizer's decisions, on its own (no broker): Kafka's AclAuthorizer semantics, the index (LITERAL, the
``*`` wildcard, PREFIXED by walking prefixes), the decision cache being dropped on change, filters (ANY, MATCH),
authorizeByResourceType, the file store and the configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidelog.broker.config import BrokerConfig, ConfigException
from tidelog.broker.security.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    binding_problem,
    entry_from_zk,
    zk_entry,
)
from tidelog.broker.security.authorizer import (
    AclChanges,
    Authorizer,
    FileAclStore,
    authorizer_enabled,
    parse_super_users,
)

Op, RT, PT, Perm = AclOperation, ResourceType, PatternType, PermissionType


def b(rt: RT, name: str, principal: str, op: Op, perm: Perm = Perm.ALLOW, pt: PT = PT.LITERAL,
      host: str = "*") -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


def make(tmp_path: Path, *bindings: AclBinding, super_users: str = "", allow_empty: bool = False) -> Authorizer:
    changes = AclChanges()  # made first: the store announces into it, the authorizer listens
    auth = Authorizer(FileAclStore(tmp_path / "acls.json", changes), changes, parse_super_users(super_users),
                      allow_empty)
    if bindings:
        assert auth.create(list(bindings)) == [None] * len(bindings)
    return auth


def test_no_acl_denies_unless_allow_everyone(tmp_path: Path) -> None:
    assert not make(tmp_path).authorize("User:a", "1.2.3.4", Op.READ, RT.TOPIC, "t")
    assert make(tmp_path / "x", allow_empty=True).authorize("User:a", "1.2.3.4", Op.READ, RT.TOPIC, "t")
    # an ACL on the resource for someone else: no longer "no ACL found"
    auth = make(tmp_path / "y", b(RT.TOPIC, "t", "User:b", Op.READ), allow_empty=True)
    assert not auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "t")
    assert auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "u")


def test_super_users(tmp_path: Path) -> None:
    assert parse_super_users(" User:a ; User:b;") == {"User:a", "User:b"}
    auth = make(tmp_path, b(RT.TOPIC, "t", "User:a", Op.ALL, Perm.DENY), super_users="User:a;User:b")
    assert auth.authorize("User:a", "h", Op.WRITE, RT.TOPIC, "t")  # even against a DENY
    assert not auth.authorize("User:c", "h", Op.WRITE, RT.TOPIC, "t")


def test_deny_wins_and_wildcards(tmp_path: Path) -> None:
    auth = make(tmp_path,
                b(RT.TOPIC, "*", "User:*", Op.ALL),
                b(RT.TOPIC, "secret", "User:a", Op.READ, Perm.DENY),
                b(RT.TOPIC, "pay", "User:*", Op.WRITE, Perm.DENY, PT.PREFIXED),
                b(RT.GROUP, "g", "User:a", Op.READ, host="10.0.0.1"))
    assert auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "anything")
    assert not auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "secret")
    assert auth.authorize("User:a", "h", Op.WRITE, RT.TOPIC, "secret")
    assert auth.authorize("User:b", "h", Op.READ, RT.TOPIC, "secret")
    assert not auth.authorize("User:b", "h", Op.WRITE, RT.TOPIC, "payments")
    assert auth.authorize("User:b", "h", Op.WRITE, RT.TOPIC, "pa")
    assert auth.authorize("User:a", "10.0.0.1", Op.READ, RT.GROUP, "g")
    assert not auth.authorize("User:a", "10.0.0.2", Op.READ, RT.GROUP, "g")


def test_implied_operations(tmp_path: Path) -> None:
    auth = make(tmp_path, *(b(RT.TOPIC, f"t{op.name}", "User:a", op)
                            for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALTER_CONFIGS, Op.CREATE)))
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert auth.authorize("User:a", "h", Op.DESCRIBE, RT.TOPIC, f"t{op.name}")
    assert not auth.authorize("User:a", "h", Op.DESCRIBE, RT.TOPIC, "tCREATE")
    assert auth.authorize("User:a", "h", Op.DESCRIBE_CONFIGS, RT.TOPIC, "tALTER_CONFIGS")
    assert not auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "tWRITE")
    # a DENY of DESCRIBE is not implied by anything: READ stays allowed, DESCRIBE is denied
    auth = make(tmp_path / "d", b(RT.TOPIC, "t", "User:a", Op.READ), b(RT.TOPIC, "t", "User:a", Op.DESCRIBE, Perm.DENY))
    assert auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "t")
    assert not auth.authorize("User:a", "h", Op.DESCRIBE, RT.TOPIC, "t")


def test_prefixes_of_every_length_and_cache_invalidation(tmp_path: Path) -> None:
    auth = make(tmp_path, b(RT.TOPIC, "a", "User:x", Op.READ, pt=PT.PREFIXED),
                b(RT.TOPIC, "abc-", "User:y", Op.READ, pt=PT.PREFIXED))
    assert auth.authorize("User:x", "h", Op.READ, RT.TOPIC, "abc-1")
    assert auth.authorize("User:y", "h", Op.READ, RT.TOPIC, "abc-1")
    assert not auth.authorize("User:y", "h", Op.READ, RT.TOPIC, "abc")
    assert not auth.authorize("User:y", "h", Op.READ, RT.GROUP, "abc-1")  # another resource type
    # the cached decision is dropped when ACLs change
    assert auth.delete([AclFilter(principal="User:x")])[0]
    assert not auth.authorize("User:x", "h", Op.READ, RT.TOPIC, "abc-1")
    assert auth.create([b(RT.TOPIC, "abc-1", "User:x", Op.READ)]) == [None]
    assert auth.authorize("User:x", "h", Op.READ, RT.TOPIC, "abc-1")


def test_authorize_any(tmp_path: Path) -> None:
    auth = make(tmp_path, b(RT.TOPIC, "t", "User:a", Op.WRITE), b(RT.TOPIC, "p-", "User:b", Op.WRITE, pt=PT.PREFIXED),
                b(RT.TOPIC, "p-", "User:b", Op.WRITE, Perm.DENY, PT.PREFIXED),
                b(RT.TOPIC, "*", "User:c", Op.WRITE, Perm.DENY), b(RT.TOPIC, "u", "User:c", Op.WRITE))
    assert auth.authorize_any("User:a", "h", Op.WRITE, RT.TOPIC)
    assert not auth.authorize_any("User:b", "h", Op.WRITE, RT.TOPIC)  # every allow covered by a deny
    assert not auth.authorize_any("User:c", "h", Op.WRITE, RT.TOPIC)  # DENY on LITERAL *
    assert not auth.authorize_any("User:d", "h", Op.WRITE, RT.TOPIC)


def test_authorized_operations(tmp_path: Path) -> None:
    auth = make(tmp_path, b(RT.GROUP, "g", "User:a", Op.READ))
    assert auth.authorized_operations("User:a", "h", RT.GROUP, "g") == (1 << 3) | (1 << 8)  # READ, DESCRIBE
    assert auth.authorized_operations("User:b", "h", RT.GROUP, "g") == 0


def test_filters() -> None:
    lit = b(RT.TOPIC, "orders", "User:a", Op.READ)
    star = b(RT.TOPIC, "*", "User:a", Op.READ)
    pre = b(RT.TOPIC, "ord", "User:a", Op.READ, pt=PT.PREFIXED)
    other = b(RT.TOPIC, "x", "User:a", Op.READ, pt=PT.PREFIXED)
    match = AclFilter(RT.TOPIC, "orders", PT.MATCH)
    assert [x for x in (lit, star, pre, other) if match.matches(x)] == [lit, star, pre]
    assert [x for x in (lit, star, pre, other) if AclFilter(pattern_type=PT.PREFIXED).matches(x)] == [pre, other]
    assert [x for x in (lit, star, pre) if AclFilter(RT.TOPIC, "orders", PT.LITERAL).matches(x)] == [lit]
    assert AclFilter(operation=Op.WRITE).matches(lit) is False
    assert AclFilter(RT.UNKNOWN).problem() is not None and AclFilter().problem() is None


def test_binding_problems() -> None:
    assert binding_problem(b(RT.TOPIC, "t", "User:a", Op.READ)) is None
    assert binding_problem(b(RT.CLUSTER, "c", "User:a", Op.ALTER)) is not None  # only kafka-cluster
    assert binding_problem(b(RT.TOPIC, "", "User:a", Op.READ)) is not None
    assert binding_problem(b(RT.TOPIC, "t", "alice", Op.READ)) is not None
    assert binding_problem(b(RT.ANY, "t", "User:a", Op.READ)) is not None
    assert binding_problem(b(RT.TOPIC, "t", "User:a", Op.ANY)) is not None
    assert binding_problem(b(RT.TOPIC, "t", "User:a", Op.READ, pt=PT.MATCH)) is not None


def test_file_store_round_trip(tmp_path: Path) -> None:
    auth = make(tmp_path, b(RT.TRANSACTIONAL_ID, "tx-", "User:a", Op.WRITE, pt=PT.PREFIXED))
    raw = json.loads((tmp_path / "acls.json").read_text())
    assert raw == {"version": 1, "acls": [{"resourceType": "TRANSACTIONAL_ID", "name": "tx-", "patternType": "PREFIXED",
                                          "principal": "User:a", "host": "*", "operation": "WRITE",
                                          "permissionType": "ALLOW"}]}
    changes = AclChanges()
    again = Authorizer(FileAclStore(tmp_path / "acls.json", changes), changes)
    assert again.authorize("User:a", "h", Op.WRITE, RT.TRANSACTIONAL_ID, "tx-1")
    assert auth.bindings() == again.bindings()


def test_zookeeper_entry_text() -> None:
    e = b(RT.TOPIC, "t", "User:a", Op.CLUSTER_ACTION, Perm.DENY).entry
    assert zk_entry(e) == {"principal": "User:a", "permissionType": "Deny", "operation": "ClusterAction", "host": "*"}
    assert entry_from_zk(zk_entry(e)) == e
    assert entry_from_zk({"principal": "User:a", "permissionType": "Allow", "operation": "IdempotentWrite",
                          "host": "*"}).operation == Op.IDEMPOTENT_WRITE


def test_configuration() -> None:
    assert not authorizer_enabled("")
    for name in ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "tidelog.AclAuthorizer"):
        assert authorizer_enabled(name)
    with pytest.raises((ValueError, ConfigException)):
        BrokerConfig.from_properties({"authorizer.class.name": "com.example.Mine"})
    cfg = BrokerConfig.from_properties({})
    assert cfg.get("authorizer.class.name") == "" and cfg.get("allow.everyone.if.no.acl.found") is False
