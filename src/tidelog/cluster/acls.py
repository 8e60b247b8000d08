"""ACLs in ZooKeeper, where Kafka's ``AclAuthorizer`` keeps them (``ZkData.scala``: ``ZkAclStore``,
``ZkAclChangeStore``):

============================================================ ===============================================
``/kafka-acl/<ResourceType>/<name>``                          LITERAL patterns: ``{"version":1,"acls":[{"principal":
                                                              "User:alice","permissionType":"Allow","operation":"Read",
                                                              "host":"*"}]}`` (``Topic``, ``Group``, ``Cluster``,
                                                              ``TransactionalId``, ``DelegationToken``, ``User``)
``/kafka-acl-extended/prefixed/<ResourceType>/<name>``        PREFIXED patterns, same JSON
``/kafka-acl-changes/acl_changes_<seq>``                      a LITERAL pattern changed: ``TOPIC:<name>``
``/kafka-acl-extended-changes/acl_changes_<seq>``             a PREFIXED one: ``{"version":1,"resourceType":"TOPIC",
                                                              "name":...,"patternType":"PREFIXED"}``
============================================================ ===============================================

Every broker loads all ACLs at start and watches both change paths; a new notification makes it re-read the
one resource named in it, so an ACL created through any broker (or Kafka's tools against the same ZooKeeper) is
enforced by all. A resource znode is rewritten conditionally on the version read (retried on a race) and
removed when its last ACL goes; notifications older than 15 minutes are purged by the writer (Kafka's
``ZkNodeChangeNotificationListener`` rule).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from tidelog.broker.security.acls import (
    AclBinding,
    AclEntry,
    PatternType,
    ResourceType,
    entry_from_zk,
    parse_enum,
    zk_entry,
    zk_resource_type_name,
)
from tidelog.broker.security.authorizer import AclListener

log = logging.getLogger("tidelog.cluster.acls")

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRY_MS = 15 * 60 * 1000

Pattern = tuple[ResourceType, str, PatternType]


def resource_path(rt: ResourceType, name: str, pt: PatternType) -> str:
    root = LITERAL_ROOT if pt == PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{zk_resource_type_name(rt)}/{name}"


def encode_acls(entries: set[AclEntry]) -> bytes:
    rows = sorted((zk_entry(e) for e in entries), key=lambda d: (d["principal"], d["host"], d["operation"],
                                                                  d["permissionType"]))
    return json.dumps({"version": 1, "acls": rows}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> set[AclEntry]:
    if not data:
        return set()
    out = set()
    for d in json.loads(data).get("acls") or []:
        try:
            out.add(entry_from_zk(d))
        except (KeyError, ValueError):
            log.error("unreadable ACL in ZooKeeper", extra={"kv": {"acl": str(d)[:200]}})
    return out


def encode_change(pattern: Pattern) -> tuple[str, bytes]:
    rt, name, pt = pattern
    if pt == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{rt.name}:{name}".encode()
    return EXTENDED_CHANGES, json.dumps({"version": 1, "resourceType": rt.name, "name": name,
                                         "patternType": pt.name}, separators=(",", ":")).encode()


def decode_change(path: str, data: bytes) -> Pattern:
    text = data.decode()
    if path == LITERAL_CHANGES:
        rt, name = text.split(":", 1)
        return parse_enum(ResourceType, rt), name, PatternType.LITERAL  # type: ignore[return-value]
    d = json.loads(text)
    return (parse_enum(ResourceType, d["resourceType"]), d["name"],  # type: ignore[return-value]
            parse_enum(PatternType, d["patternType"]))


class ZkAclStore:
    def __init__(self, zk: Any, changes: AclListener) -> None:
        self.zk = zk
        self.changes = changes  # where the content is announced (the authorizer listens)
        self._lock = threading.Lock()
        self._seen: dict[str, set[str] | None] = {LITERAL_CHANGES: None, EXTENDED_CHANGES: None}
        for path in (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES):
            zk.retry(zk.ensure_path, path)  # at start: across a connection loss (KazooRetry)

    def start(self) -> None:
        """Watch both change paths, then announce every ACL (a change after the watch is set is not missed)."""
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self.zk.ChildrenWatch(path, self._changes(path))
        self.changes.reload(self.load_all())

    def load_all(self) -> list[AclBinding]:
        out = []
        for root, pt in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
            for type_name in self.zk.retry(self.zk.get_children, root):
                try:
                    rt = parse_enum(ResourceType, type_name)
                except ValueError:
                    continue
                for name in self.zk.retry(self.zk.get_children, f"{root}/{type_name}"):
                    for e in self._read((rt, name, pt))[0]:  # type: ignore[arg-type]
                        out.append(AclBinding(rt, name, pt, e.principal, e.host, e.operation, e.permission))  # type: ignore[arg-type]
        return out

    def _read(self, pattern: Pattern) -> tuple[set[AclEntry], int]:
        try:
            data, stat = self.zk.retry(self.zk.get, resource_path(*pattern))
        except NoNodeError:
            return set(), -1
        return decode_acls(data), stat.version

    # -- change notifications (kazoo's thread) -----------------------------------------------------------------

    def _changes(self, path: str) -> Any:
        def children(names: list[str]) -> None:
            with self._lock:
                seen = self._seen[path]
                if seen is None:  # the first call: what exists now is covered by the full load that follows
                    self._seen[path] = set(names)
                    return
                new = sorted(n for n in names if n not in seen)
                self._seen[path] = set(names)
            for n in new:
                try:
                    data, _ = self.zk.get(f"{path}/{n}")
                    pattern = decode_change(path, data)
                except Exception:
                    continue  # purged meanwhile, or not readable
                entries, _ = self._read(pattern)
                self.changes.update(pattern, entries)
        return children

    # -- the store's interface (blocking: ZooKeeper round trips) -----------------------------------------------

    def change(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        by_pattern: dict[Pattern, tuple[set[AclEntry], set[AclEntry]]] = {}
        for b in add:
            by_pattern.setdefault(b.pattern, (set(), set()))[0].add(b.entry)
        for b in remove:
            by_pattern.setdefault(b.pattern, (set(), set()))[1].add(b.entry)
        for pattern, (ups, downs) in by_pattern.items():
            path = resource_path(*pattern)
            while True:
                current, version = self._read(pattern)
                new = (current - downs) | ups
                if new == current:
                    break
                change_path, change_data = encode_change(pattern)
                t = self.zk.transaction()
                if not new:
                    t.delete(path, version=version)
                elif version < 0:
                    self.zk.ensure_path(path.rsplit("/", 1)[0])
                    t.create(path, encode_acls(new))
                else:
                    t.set_data(path, encode_acls(new), version=version)
                t.create(f"{change_path}/{CHANGE_PREFIX}", change_data, sequence=True)
                results = t.commit()
                if not any(isinstance(r, Exception) for r in results):
                    break
                if not any(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError, NotEmptyError))
                           for r in results):
                    raise next(r for r in results if isinstance(r, Exception))
            self.changes.update(pattern, new)  # seen at once here; the other brokers by notification
        self._purge()

    def _purge(self) -> None:
        now_ms = time.time() * 1000
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            try:
                for n in self.zk.get_children(path):
                    stat = self.zk.exists(f"{path}/{n}")
                    if stat is not None and now_ms - stat.ctime > CHANGE_EXPIRY_MS:
                        self.zk.delete(f"{path}/{n}")
            except Exception:
                log.debug("purging ACL change notifications failed", exc_info=True)
