"""Kafka's ACL model (``org.apache.kafka.common.acl`` / ``org.apache.kafka.common.resource``), with Kafka's codes.

An ACL binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED) and an access
control entry (principal, host, operation, permission type ALLOW/DENY). Filters (DescribeAcls, DeleteAcls) may
say ANY for every enum and null for every string, and MATCH for the pattern type: every pattern that matches
a name (the literal name, the literal wildcard ``*`` and every prefix of it).

The text forms are Kafka's: the enum names on the wire tools (``READ``, ``TOPIC``, ``PREFIXED``), and in
ZooKeeper the PascalCase names of ``SecurityUtils`` (``Read``, ``ClusterAction``, ``Topic``,
``TransactionalId``, ``Allow``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # the literal resource name, principal (User:*) and host matching all
WILDCARD_PRINCIPAL = "User:*"

# an ALLOW of any of these grants the key (Kafka's AclEntry.supportedOperations / implied operations)
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALL}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                              AclOperation.ALL}),
}

# the operations each resource type knows (Kafka's AclEntry.supportedOperations): KIP-430's authorized_operations
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),  # the configs: Kafka 4's GROUP config resource
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

SPECIFIC_RESOURCE_TYPES = tuple(SUPPORTED_OPERATIONS)


def pascal(name: str) -> str:
    """``CLUSTER_ACTION`` -> ``ClusterAction`` (Kafka's SecurityUtils.toPascalCase)."""
    return "".join(part.capitalize() for part in name.split("_"))


_E = TypeVar("_E", bound=IntEnum)


def parse_enum(enum: type[_E], text: str) -> _E:
    """Kafka's fromString: the enum name in any case, with or without underscores (``ClusterAction``,
    ``cluster_action``, ``CLUSTER_ACTION``)."""
    key = text.strip().replace("-", "_")
    for member in enum:
        if member.name == key.upper() or member.name.replace("_", "") == key.upper().replace("_", ""):
            return member
    raise ValueError(f"unknown {enum.__name__}: {text!r}")


def operations_mask(ops: list[AclOperation] | tuple[AclOperation, ...]) -> int:
    """KIP-430's int32 bit field: bit ``code`` set for each operation."""
    mask = 0
    for op in ops:
        mask |= 1 << int(op)
    return mask


@dataclass(frozen=True, slots=True)
class AclEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    @property
    def entry(self) -> AclEntry:
        return AclEntry(self.principal, self.host, self.operation, self.permission)

    @property
    def pattern(self) -> tuple[ResourceType, str, PatternType]:
        return (self.resource_type, self.name, self.pattern_type)

    def to_json(self) -> dict:
        return {"resourceType": self.resource_type.name, "name": self.name, "patternType": self.pattern_type.name,
                "principal": self.principal, "host": self.host, "operation": self.operation.name,
                "permissionType": self.permission.name}

    @classmethod
    def from_json(cls, d: dict) -> AclBinding:
        return cls(ResourceType[d["resourceType"]], d["name"], PatternType[d["patternType"]], d["principal"],
                   d["host"], AclOperation[d["operation"]], PermissionType[d["permissionType"]])

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


def binding_problem(b: AclBinding) -> str | None:
    """Why CreateAcls refuses a binding (Kafka's AclControlManager.validateNewAcl / AclAuthorizer checks), or None."""
    if b.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "Invalid resourceType " + b.resource_type.name
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + b.pattern_type.name
    if b.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return "Invalid operation " + b.operation.name
    if b.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return "Invalid permissionType " + b.permission.name
    if not b.name:
        return "Resource name should not be empty"
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
    if b.principal is None or ":" not in b.principal or not b.principal.split(":", 1)[1]:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal type " \
               "from the principal name)"
    if not b.host:
        return "Host should not be empty"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: ANY / None match everything; MATCH matches every pattern that applies to
    the name (literal equal, literal ``*``, prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY

    def problem(self) -> str | None:
        for v, label in ((self.resource_type, "resourceType"), (self.pattern_type, "patternType"),
                         (self.operation, "operation"), (self.permission, "permissionType")):
            if int(v) == 0:
                return f"Filter contains UNKNOWN elements ({label})"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        pt = self.pattern_type
        if pt == PatternType.MATCH:
            if self.name is not None:
                if b.pattern_type == PatternType.LITERAL:
                    if b.name != self.name and b.name != WILDCARD:
                        return False
                elif not self.name.startswith(b.name):
                    return False
        else:
            if pt != PatternType.ANY and b.pattern_type != pt:
                return False
            if self.name is not None and b.name != self.name:
                return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != AclOperation.ANY and b.operation != self.operation:
            return False
        return self.permission == PermissionType.ANY or b.permission == self.permission


# ZooKeeper text forms (AclAuthorizer's ZooKeeper layout)


def zk_resource_type_name(rt: ResourceType) -> str:
    return pascal(rt.name)  # Topic, Group, Cluster, TransactionalId, DelegationToken, User


def zk_entry(e: AclEntry) -> dict:
    return {"principal": e.principal, "permissionType": pascal(e.permission.name),
            "operation": pascal(e.operation.name), "host": e.host}


def entry_from_zk(d: dict) -> AclEntry:
    return AclEntry(str(d["principal"]), str(d["host"]),
                    parse_enum(AclOperation, str(d["operation"])),  # type: ignore[arg-type]
                    parse_enum(PermissionType, str(d["permissionType"])))  # type: ignore[arg-type]
