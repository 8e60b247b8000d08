"""``tidelog acls add | list | remove``: ACLs, as Kafka's ``kafka-acls.sh --add | --list | --remove`` manages them.

Through a broker (CreateAcls / DescribeAcls / DeleteAcls v3 with tidelog's own protocol client, as ``tidelog
transactions``; any Kafka broker with an authorizer; ``--command-config`` for a secured one). Kafka's option names: ``--allow-principal`` / ``--deny-principal`` (repeatable, ``User:name``),
``--allow-host`` / ``--deny-host`` (default ``*``), ``--operation`` (repeatable, default ALL), resources
``--topic``, ``--group``, ``--cluster``, ``--transactional-id`` (repeatable), ``--resource-pattern-type``
(LITERAL or PREFIXED to add; also ANY and MATCH to list and remove), and the conveniences ``--producer`` (WRITE,
DESCRIBE, CREATE on the topics; with ``--idempotent`` IDEMPOTENT_WRITE on the cluster; with
``--transactional-id`` WRITE and DESCRIBE on it) and ``--consumer`` (READ, DESCRIBE on the topics, READ on the
groups). The output is kafka-acls.sh's (``Current ACLs for resource `ResourcePattern(...)`:``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import click

from tidelog.broker.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    parse_enum,
)
from tidelog.cli._client import bootstrap_option, echo_json, fail, output_is_json, output_option, peer_request
from tidelog.protocol.errors import error_for_code

_OPERATIONS = [op.name for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]


DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
VERSION = 3


def _request(bootstrap: str, api_key: int, body: dict, timeout: float) -> dict:
    """One request to the first reachable broker of ``bootstrap`` (any broker serves the ACL APIs)."""
    last: Exception | None = None
    for hp in bootstrap.split(","):
        if not hp.strip():
            continue
        host, _, port = hp.strip().rpartition(":")
        try:
            return asyncio.run(peer_request(host.strip("[]"), int(port), api_key, VERSION, body, timeout))
        except (OSError, TimeoutError) as exc:
            last = exc
    fail(f"no broker reachable at {bootstrap} ({last})")


def _error(code: int, message: str | None) -> str:
    name = error_for_code(code).name
    return f"{name}: {message}" if message else f"{name}: {error_for_code(code).message}"


def _operation(value: str) -> AclOperation:
    try:
        op = parse_enum(AclOperation, value)
    except ValueError:
        fail(f"unknown operation {value!r} (one of {', '.join(_OPERATIONS)})", 2)
    return op


def _pattern_type(value: str, allowed: Iterable[PatternType]) -> PatternType:
    try:
        pt = parse_enum(PatternType, value)
    except ValueError:
        pt = PatternType.UNKNOWN
    if pt not in allowed:
        fail(f"--resource-pattern-type {value}: one of {', '.join(p.name for p in allowed)}", 2)
    return pt


def _principal(value: str) -> str:
    if ":" not in value or not value.split(":", 1)[1]:
        fail(f"principal {value!r}: expected Type:name, e.g. User:alice", 2)
    return value


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
               txn_ids: tuple[str, ...]) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
            + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else [])
            + [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids])


def _pattern_text(rt: int, name: str, pt: int) -> str:
    return (f"ResourcePattern(resourceType={ResourceType(rt).name}, name={name}, "
            f"patternType={PatternType(pt).name})")


def _entry_text(principal: str, host: str, op: int, perm: int) -> str:
    return (f"(principal={principal}, host={host}, operation={AclOperation(op).name}, "
            f"permissionType={PermissionType(perm).name})")


def _print_grouped(bindings: Iterable[AclBinding], header: str) -> None:
    """kafka-acls.sh's lines, byte for byte (AclCommand: ``s"$header `$resource`: $nl ${acls.map("\t" +
    _).mkString(nl)} $nl"``): a space after the colon, a space before the first entry's tab and after the last
    entry, then a blank line."""
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        groups.setdefault((int(b.resource_type), b.name, int(b.pattern_type)), []).append(b)
    for (rt, name, pt), bs in sorted(groups.items()):
        entries = [_entry_text(b.principal, b.host, int(b.operation), int(b.permission))
                   for b in sorted(bs, key=lambda b: (b.principal, b.host, int(b.operation), int(b.permission)))]
        click.echo(f"{header} `{_pattern_text(rt, name, pt)}`: \n " + "\n".join("\t" + e for e in entries) + " \n")


def _binding(rt: int, name: str, pt: int, principal: str, host: str, op: int, perm: int) -> AclBinding:
    return AclBinding(ResourceType(rt), name, PatternType(pt), principal, host, AclOperation(op),
                      PermissionType(perm))


_timeout_option = click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")


def _common(fn: Any) -> Any:
    for opt in reversed([
        click.option("--topic", "topics", multiple=True, help="Topic (repeatable); '*' is every topic."),
        click.option("--group", "groups", multiple=True, help="Consumer group (repeatable); '*' is every group."),
        click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster)."),
        click.option("--transactional-id", "txn_ids", multiple=True, help="Transactional id (repeatable)."),
    ]):
        fn = opt(fn)
    return _timeout_option(bootstrap_option(fn))


@click.group()
def acls() -> None:
    """Manage ACLs (the authorizer of the broker must be on: authorizer.class.name)."""


@acls.command("add")
@click.option("--allow-principal", "allow_principals", multiple=True, help="Principal allowed, e.g. User:alice.")
@click.option("--deny-principal", "deny_principals", multiple=True, help="Principal denied.")
@click.option("--allow-host", "allow_hosts", multiple=True, help="Host allowed (default *).")
@click.option("--deny-host", "deny_hosts", multiple=True, help="Host denied (default *).")
@click.option("--operation", "operations", multiple=True, help=f"Operation (repeatable; default ALL): "
                                                               f"{', '.join(_OPERATIONS)}.")
@click.option("--resource-pattern-type", "pattern", default="LITERAL", show_default=True,
              help="LITERAL or PREFIXED.")
@click.option("--producer", is_flag=True, help="WRITE, DESCRIBE, CREATE on the topics (and see --idempotent).")
@click.option("--consumer", is_flag=True, help="READ, DESCRIBE on the topics, READ on the groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IDEMPOTENT_WRITE on the cluster.")
@_common
def add(allow_principals: tuple[str, ...], deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...],
        deny_hosts: tuple[str, ...], operations: tuple[str, ...], pattern: str, producer: bool, consumer: bool,
        idempotent: bool, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, txn_ids: tuple[str, ...],
        bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Add ACLs: each principal x host x operation on each resource."""
    pt = _pattern_type(pattern, (PatternType.LITERAL, PatternType.PREFIXED))
    if not allow_principals and not deny_principals:
        fail("--allow-principal or --deny-principal is required", 2)
    entries: list[tuple[str, str, PermissionType]] = []
    for p in allow_principals:
        entries += [(_principal(p), h, PermissionType.ALLOW) for h in (allow_hosts or ("*",))]
    for p in deny_principals:
        entries += [(_principal(p), h, PermissionType.DENY) for h in (deny_hosts or ("*",))]
    wanted: list[tuple[ResourceType, str, AclOperation]] = []
    if producer or consumer:
        if operations:
            fail("--operation cannot be used with --producer or --consumer", 2)
        if not topics:
            fail("--producer and --consumer need --topic", 2)
        if producer:
            wanted += [(ResourceType.TOPIC, t, op) for t in topics
                       for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)]
            wanted += [(ResourceType.TRANSACTIONAL_ID, t, op) for t in txn_ids
                       for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
            if idempotent:
                wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE))
        if consumer:
            if not groups:
                fail("--consumer needs --group", 2)
            wanted += [(ResourceType.TOPIC, t, op) for t in topics for op in (AclOperation.READ, AclOperation.DESCRIBE)]
            wanted += [(ResourceType.GROUP, g, AclOperation.READ) for g in groups]
    else:
        resources = _resources(topics, groups, cluster, txn_ids)
        if not resources:
            fail("a resource is required: --topic, --group, --cluster or --transactional-id", 2)
        ops = [_operation(o) for o in operations] or [AclOperation.ALL]
        wanted = [(rt, name, op) for rt, name in resources for op in ops]
    bindings = [AclBinding(rt, name, pt if rt != ResourceType.CLUSTER else PatternType.LITERAL, principal, host, op,
                           perm)
                for rt, name, op in dict.fromkeys(wanted) for principal, host, perm in entries]
    body = {"creations": [{"resource_type": int(b.resource_type), "resource_name": b.name,
                           "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
                           "operation": int(b.operation), "permission_type": int(b.permission)} for b in bindings]}
    resp = _request(bootstrap, CREATE_ACLS, body, timeout)
    failed = [(b, _error(r["error_code"], r.get("error_message")))
              for b, r in zip(bindings, resp.get("results") or [], strict=False) if r["error_code"]]
    if failed:
        errors = list(dict.fromkeys(e for _, e in failed))
        if len(errors) == 1:
            fail(f"{errors[0]} ({len(failed)} of {len(bindings)} ACLs not created)")
        fail("; ".join(f"{_entry_text(b.principal, b.host, int(b.operation), int(b.permission))} on "
                       f"{_pattern_text(int(b.resource_type), b.name, int(b.pattern_type))}: {e}" for b, e in failed))
    _print_grouped(bindings, "Adding ACLs for resource")


def _filters(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, txn_ids: tuple[str, ...],
             pt: PatternType, principals: tuple[str | None, ...], operations: tuple[str, ...], hosts: tuple[str, ...],
             perm: PermissionType = PermissionType.ANY) -> list[dict]:
    """DescribeAcls / DeleteAcls filters: every combination of the resources, principals, hosts and operations."""
    resources: list[tuple[ResourceType, str | None]] = list(_resources(topics, groups, cluster, txn_ids))
    if not resources:
        resources = [(ResourceType.ANY, None)]
    ops = [_operation(o) for o in operations] or [AclOperation.ANY]
    out = []
    for rt, name in resources:
        for principal in principals or (None,):
            for host in hosts or (None,):
                for op in ops:
                    out.append({"resource_type_filter": int(rt), "resource_name_filter": name,
                                "pattern_type_filter": int(pt), "principal_filter": principal, "host_filter": host,
                                "operation": int(op), "permission_type": int(perm)})
    return out


def _bindings_of(resources: list[dict]) -> list[AclBinding]:
    return [_binding(r["resource_type"], r["resource_name"], r["pattern_type"], a["principal"], a["host"],
                     a["operation"], a["permission_type"]) for r in resources for a in r.get("acls") or []]


@acls.command("list")
@click.option("--principal", "principals", multiple=True, help="Only ACLs of this principal (repeatable).")
@click.option("--resource-pattern-type", "pattern", default="ANY", show_default=True,
              help="ANY, MATCH, LITERAL or PREFIXED.")
@output_option
@_common
def list_(principals: tuple[str, ...], pattern: str, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
          txn_ids: tuple[str, ...], bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """List ACLs (of the resources given, else all)."""
    pt = _pattern_type(pattern, (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED))
    found: dict[AclBinding, None] = {}
    for flt in _filters(topics, groups, cluster, txn_ids, pt, tuple(_principal(p) for p in principals), (), ()):
        resp = _request(bootstrap, DESCRIBE_ACLS, flt, timeout)
        if resp["error_code"]:
            fail(_error(resp["error_code"], resp.get("error_message")))
        found.update(dict.fromkeys(_bindings_of(resp.get("resources") or [])))
    if output_is_json():
        echo_json(bindings_json(found))
        return
    if not principals:
        _print_grouped(found, "Current ACLs for resource")
    for p in principals:  # kafka-acls.sh --list --principal: a heading, then that principal's ACLs
        click.echo(f"ACLs for principal `{_principal(p)}`")
        _print_grouped([b for b in found if b.principal == _principal(p)], "Current ACLs for resource")


def bindings_json(bindings: Iterable[AclBinding]) -> list[dict[str, str]]:
    """ACL bindings for ``--output json``: one object each, with Kafka's names (AclBinding's pattern and entry
    fields) and enum names, in the order the text lists them."""
    return [{"resourceType": ResourceType(int(b.resource_type)).name, "name": b.name,
             "patternType": PatternType(int(b.pattern_type)).name, "principal": b.principal, "host": b.host,
             "operation": AclOperation(int(b.operation)).name,
             "permissionType": PermissionType(int(b.permission)).name}
            for b in sorted(bindings, key=lambda b: (int(b.resource_type), b.name, int(b.pattern_type), b.principal,
                                                     b.host, int(b.operation), int(b.permission)))]


@acls.command("remove")
@click.option("--allow-principal", "allow_principals", multiple=True, help="Only ALLOW ACLs of this principal.")
@click.option("--deny-principal", "deny_principals", multiple=True, help="Only DENY ACLs of this principal.")
@click.option("--principal", "principals", multiple=True, help="ACLs of this principal, either permission.")
@click.option("--operation", "operations", multiple=True, help="Only this operation (repeatable).")
@click.option("--host", "hosts", multiple=True, help="Only this host.")
@click.option("--resource-pattern-type", "pattern", default="LITERAL", show_default=True,
              help="LITERAL, PREFIXED, ANY or MATCH.")
@click.option("--force", is_flag=True, help="Accepted for kafka-acls.sh compatibility (no prompt is asked).")
@_common
def remove(allow_principals: tuple[str, ...], deny_principals: tuple[str, ...], principals: tuple[str, ...],
           operations: tuple[str, ...], hosts: tuple[str, ...], pattern: str, force: bool, topics: tuple[str, ...],
           groups: tuple[str, ...], cluster: bool, txn_ids: tuple[str, ...], bootstrap: str,
           properties: tuple[str, ...], timeout: float) -> None:
    """Remove the ACLs of the resources given that match the principals, hosts and operations given."""
    pt = _pattern_type(pattern, (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED))
    if not _resources(topics, groups, cluster, txn_ids):
        fail("a resource is required: --topic, --group, --cluster or --transactional-id", 2)
    wanted: list[tuple[str | None, PermissionType]] = []
    wanted += [(_principal(p), PermissionType.ALLOW) for p in allow_principals]
    wanted += [(_principal(p), PermissionType.DENY) for p in deny_principals]
    wanted += [(_principal(p), PermissionType.ANY) for p in principals]
    wanted = wanted or [(None, PermissionType.ANY)]
    filters = [flt for principal, perm in wanted
               for flt in _filters(topics, groups, cluster, txn_ids, pt, (principal,), operations, hosts, perm)]
    resp = _request(bootstrap, DELETE_ACLS, {"filters": filters}, timeout)
    removed: dict[AclBinding, None] = {}
    for r in resp.get("filter_results") or []:
        if r["error_code"]:
            fail(_error(r["error_code"], r.get("error_message")))
        for m in r.get("matching_acls") or []:
            removed[_binding(m["resource_type"], m["resource_name"], m["pattern_type"], m["principal"], m["host"],
                             m["operation"], m["permission_type"])] = None
    _print_grouped(removed, "Removed ACLs for resource")
