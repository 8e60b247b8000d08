"""Kafka's ACL authorizer (``kafka.security.authorizer.AclAuthorizer`` / ``StandardAuthorizer`` semantics).

Switched on by ``authorizer.class.name`` (Kafka's two class names, or ``tidelog.AclAuthorizer``); empty, the
default, means no authorizer: every request is allowed and ``broker.authorizer`` is ``None``, so the hot paths
pay one attribute test.

A decision (``authorize(principal, host, operation, resource_type, name)``), as Kafka's:

* a principal in ``super.users`` (``User:a;User:b``) is allowed everything;
* the ACLs that apply to the resource are the LITERAL ones on its name, the LITERAL ones on ``*`` and the
  PREFIXED ones on every prefix of its name; if there are none at all, ``allow.everyone.if.no.acl.found``
  decides (default false);
* an entry applies to the request if its principal is the request's or ``User:*`` and its host the client's
  address or ``*``;
* a DENY for the operation (or ALL) wins; otherwise an ALLOW for the operation (or ALL) allows, and an ALLOW of
  READ, WRITE, DELETE or ALTER implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.

Cost: the ACLs are indexed by (resource type, name) for LITERAL and per resource type by name for PREFIXED,
with the set of prefix lengths in use, so a decision looks up the name, ``*`` and one slice per distinct
prefix length, never scanning all ACLs; decisions are also cached per (principal, host, operation, resource)
until the ACLs change. Reads take no lock: every change builds new index dicts and swaps them in.

The ACLs live in a store: ``FileAclStore`` (one node, ``tidelog-acls.json`` in the first log dir, written
atomically) or ZooKeeper mode's ``tidelog.cluster.acls.ZkAclStore`` (Kafka's ``/kafka-acl`` layout with change
notifications). A store announces its content through :class:`AclChanges`, given to it at construction:
``reload(bindings)`` (all) or ``update(pattern, entries)`` (one resource pattern) whenever it changes, here or on
another broker; the authorizer listens to the same object and asks the store to ``start`` (publish what it holds,
then every change).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tidelog.broker.security.acls import (
    CLUSTER_NAME,
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclEntry,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    binding_problem,
    operations_mask,
)
from tidelog.storage.checkpoints import atomic_write

log = logging.getLogger("tidelog.broker.authorizer")

AUTHORIZER_CLASSES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "tidelog.AclAuthorizer",
})
ACLS_FILE = "tidelog-acls.json"
_CACHE_LIMIT = 100_000
_ALL = AclOperation.ALL
_DENY = PermissionType.DENY
_ALLOW = PermissionType.ALLOW

Pattern = tuple[ResourceType, str, PatternType]


def parse_super_users(value: str) -> frozenset[str]:
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


def authorizer_enabled(class_name: str | None) -> bool:
    """True for an ACL authorizer's class name, False for empty; anything else is a configuration error."""
    name = (class_name or "").strip()
    if not name:
        return False
    if name not in AUTHORIZER_CLASSES:
        raise ValueError(f"authorizer.class.name: unknown authorizer {name!r} (known: "
                         f"{', '.join(sorted(AUTHORIZER_CLASSES))})")
    return True


class AclListener(Protocol):
    """What follows an ACL store's content (the authorizer)."""

    def reload(self, bindings: Iterable[AclBinding]) -> None:
        """The store holds exactly ``bindings`` now."""
        ...

    def update(self, pattern: Pattern, entries: Iterable[AclEntry]) -> None:
        """The ACLs of one resource pattern are ``entries`` now (none: the pattern has no ACL left)."""
        ...


class AclChanges:
    """Where an ACL store announces its content; the authorizer listens. Made first, by whoever builds the two
    (the broker), because the dependency is a real cycle: the authorizer writes CreateAcls / DeleteAcls through
    the store, and the store tells the authorizer what it holds (its own writes and, in ZooKeeper mode, another
    broker's, seen by its watches). The store is given this object at construction, the authorizer listens to
    it: neither is handed the other afterwards. An announcement before anyone listens is dropped (the store's
    ``start``, called by the authorizer once it listens, publishes everything)."""

    def __init__(self) -> None:
        self._listener: AclListener | None = None

    def listen(self, listener: AclListener) -> None:
        self._listener = listener

    def reload(self, bindings: Iterable[AclBinding]) -> None:
        if self._listener is not None:
            self._listener.reload(bindings)

    def update(self, pattern: Pattern, entries: Iterable[AclEntry]) -> None:
        if self._listener is not None:
            self._listener.update(pattern, entries)


class AclStore(Protocol):
    """Where the ACLs live (:class:`FileAclStore`; ZooKeeper mode's ``tidelog.cluster.acls.ZkAclStore``), made with
    the :class:`AclChanges` it announces to."""

    def start(self) -> None:
        """Announce everything held now (``reload``), then every change (blocking: ZooKeeper reads and watches)."""
        ...

    def change(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        """Store ``add`` and remove ``remove`` in one write (blocking), announcing the result."""
        ...


class Authorizer:
    def __init__(self, store: AclStore, changes: AclChanges, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False):
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_empty = allow_everyone_if_no_acl_found
        self._lock = threading.Lock()  # writers only
        self._acls: dict[Pattern, frozenset[AclEntry]] = {}
        # (LITERAL by (type, name), PREFIXED by type -> name, prefix lengths in use by type): swapped as one
        self._index: tuple[dict, dict, dict] = ({}, {}, {})
        self._cache: dict[tuple, bool] = {}
        changes.listen(self)  # the store was made with ``changes``: what it announces from now on comes here
        store.start()

    # -- content (from the store) ------------------------------------------------------------------------------

    def reload(self, bindings: Iterable[AclBinding]) -> None:
        acls: dict[Pattern, set[AclEntry]] = {}
        for b in bindings:
            acls.setdefault(b.pattern, set()).add(b.entry)
        with self._lock:
            self._rebuild({p: frozenset(es) for p, es in acls.items()})

    def update(self, pattern: Pattern, entries: Iterable[AclEntry]) -> None:
        entries = frozenset(entries)
        with self._lock:
            acls = dict(self._acls)
            if entries:
                acls[pattern] = entries
            else:
                acls.pop(pattern, None)
            self._rebuild(acls)

    def _rebuild(self, acls: dict[Pattern, frozenset[AclEntry]]) -> None:
        literal: dict[tuple[ResourceType, str], frozenset[AclEntry]] = {}
        prefixed: dict[ResourceType, dict[str, frozenset[AclEntry]]] = {}
        for (rt, name, pt), entries in acls.items():
            if pt == PatternType.LITERAL:
                literal[(rt, name)] = entries
            else:
                prefixed.setdefault(rt, {})[name] = entries
        lengths = {rt: tuple(sorted({len(n) for n in names})) for rt, names in prefixed.items()}
        self._acls, self._index = acls, (literal, prefixed, lengths)
        self._cache = {}

    def bindings(self) -> list[AclBinding]:
        return [AclBinding(rt, name, pt, e.principal, e.host, e.operation, e.permission)
                for (rt, name, pt), entries in self._acls.items() for e in entries]

    # -- decisions ---------------------------------------------------------------------------------------------

    def matching_entries(self, rt: ResourceType, name: str) -> list[frozenset[AclEntry]]:
        out = []
        literal, prefixed, lengths = self._index
        es = literal.get((rt, name))
        if es:
            out.append(es)
        if name != WILDCARD:
            es = literal.get((rt, WILDCARD))
            if es:
                out.append(es)
        by_name = prefixed.get(rt)
        if by_name:
            n = len(name)
            for length in lengths[rt]:
                if length > n:
                    break
                es = by_name.get(name[:length])
                if es:
                    out.append(es)
        return out

    def authorize(self, principal: str, host: str, op: AclOperation, rt: ResourceType, name: str) -> bool:
        key = (principal, host, op, rt, name)
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            return hit
        allowed = self._decide(principal, host, op, rt, name)
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = allowed
        return allowed

    def _decide(self, principal: str, host: str, op: AclOperation, rt: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        groups = self.matching_entries(rt, name)
        if not groups:
            return self.allow_if_empty
        allow_ops = IMPLIED_BY.get(op) or (op, _ALL)
        allowed = False
        for entries in groups:
            for e in entries:
                if (e.principal != principal and e.principal != WILDCARD_PRINCIPAL) or (e.host != host and e.host != WILDCARD):
                    continue
                if e.permission == _DENY:
                    if e.operation == op or e.operation == _ALL:
                        return False
                elif e.operation in allow_ops:
                    allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, op: AclOperation, rt: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: may the principal do ``op`` on at least one resource of the type?
        Allowed by an ALLOW (of the operation, or ALL) on a LITERAL or PREFIXED pattern that no DENY of the same
        principal covers (a DENY on LITERAL ``*``, on the same literal name or on a prefix of the pattern)."""
        if principal in self.super_users:
            return True
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        allow: list[tuple[str, PatternType]] = []
        any_acl = False
        for (prt, name, pt), entries in self._acls.items():
            if prt != rt:
                continue
            any_acl = True
            for e in entries:
                if (e.principal != principal and e.principal != WILDCARD_PRINCIPAL) or (e.host != host and e.host != WILDCARD):
                    continue
                if e.operation != op and e.operation != _ALL:
                    continue
                if e.permission == _DENY:
                    (deny_literal if pt == PatternType.LITERAL else deny_prefix).add(name)
                else:
                    allow.append((name, pt))
        if WILDCARD in deny_literal:
            return False
        if not any_acl and self.allow_if_empty:
            return True
        for name, pt in allow:
            if pt == PatternType.LITERAL and name == WILDCARD:
                return True
            if pt == PatternType.LITERAL and name in deny_literal:
                continue
            if any(name.startswith(p) for p in deny_prefix):
                continue
            return True
        return False

    def authorized_operations(self, principal: str, host: str, rt: ResourceType, name: str) -> int:
        """KIP-430: the bit field of the operations of the resource type the principal may do on the resource."""
        ops = [op for op in SUPPORTED_OPERATIONS.get(rt, ()) if self.authorize(principal, host, op, rt, name)]
        return operations_mask(ops)

    # -- CreateAcls / DescribeAcls / DeleteAcls (blocking: the store writes) -----------------------------------

    def describe(self, flt: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if flt.matches(b)]

    def create(self, bindings: list[AclBinding]) -> list[str | None]:
        """One error message (or None) per binding; the valid ones are stored in one write."""
        problems = [binding_problem(b) for b in bindings]
        good = [b for b, p in zip(bindings, problems, strict=True) if p is None]
        if good:
            with self._lock:
                existing = set(self.bindings())
            new = [b for b in dict.fromkeys(good) if b not in existing]
            if new:
                self.store.change(add=new, remove=[])
        return problems

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Per filter, the bindings it matched (and which are removed, in one write)."""
        current = self.bindings()
        matched = [[b for b in current if f.matches(b)] for f in filters]
        gone = list(dict.fromkeys(b for group in matched for b in group))
        if gone:
            self.store.change(add=[], remove=gone)
        return matched


class FileAclStore:
    """One node: the ACLs in ``tidelog-acls.json`` of the first log dir (``{"version": 1, "acls": [binding...]}``,
    each binding with Kafka's enum names), written atomically (temporary file, fsync, rename, directory fsync)."""

    def __init__(self, path: str | Path, changes: AclListener) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._bindings: set[AclBinding] = set()
        self.changes = changes  # where the content is announced (the authorizer listens)
        if self.path.exists():
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self._bindings = {AclBinding.from_json(d) for d in raw.get("acls") or []}

    def start(self) -> None:
        with self._lock:
            self.changes.reload(self._bindings)

    def change(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        with self._lock:
            new = (self._bindings - set(remove)) | set(add)
            self._persist(new)
            self._bindings = new
            self.changes.reload(new)

    def _persist(self, bindings: set[AclBinding]) -> None:
        rows = sorted((b.to_json() for b in bindings),
                      key=lambda d: (d["resourceType"], d["patternType"], d["name"], d["principal"], d["host"],
                                     d["operation"], d["permissionType"]))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"version": 1, "acls": rows}, indent=1).encode())


def cluster_resource() -> tuple[ResourceType, str]:
    return ResourceType.CLUSTER, CLUSTER_NAME
