"""``tidelog configs describe | alter``: kafka-configs.sh through the bootstrap server.

Topics and brokers through DescribeConfigs (with synonyms) and IncrementalAlterConfigs, printed as Kafka's
ConfigCommand prints them (``Dynamic configs for topic t are:``, ``  k=v sensitive=false synonyms={SOURCE:k=v,
...}``; ``--all`` every value with its source). A broker resource goes to that broker; ``--entity-default`` with
brokers is the cluster-wide default (resource name ""). Users and clients are client quotas
(DescribeClientQuotas / AlterClientQuotas, the code of ``tidelog quotas``), and a user's description also lists its
SCRAM credentials (DescribeUserScramCredentials, the code of ``tidelog users``). Whatever the broker refuses (a
tidelog broker's configs are static) ends the command with the broker's own error message.
"""

from __future__ import annotations

import asyncio
import decimal
from typing import Any

import click

from tidelog.cli._client import (
    bootstrap_option,
    bootstrap_request,
    broker_addresses,
    echo_json,
    fail,
    kafka_error_text,
    output_is_json,
    output_option,
    parse_config_list,
    peer_request,
    safe_echo,
)
from tidelog.cli.quotas import alter_quotas, describe_quotas, quota_ops
from tidelog.cli.topics import timeout_option
from tidelog.cli.users import scram_credentials
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

TOPIC, BROKER, GROUP = 2, 4, 32  # ConfigResource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DESCRIBE_VERSION, ALTER_VERSION = 4, 1
# Kafka's ConfigEntry.ConfigSource names by DescribeConfigs config_source
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
ENTITY_TYPES = ("topics", "brokers", "clients", "users", "groups")


def _error(code: int, message: str | None) -> str:
    name = error_for_code(code).name
    return f"{name}: {message}" if message else name


async def _resource_request(bootstrap: str, rtype: int, name: str, api_key: int, version: int, body: dict,
                            timeout: float) -> dict:
    """A topic (or the broker default) to any broker; a broker's own configs to that broker."""
    if rtype == BROKER and name:
        nodes = await broker_addresses(bootstrap, timeout)
        if int(name) not in nodes:
            fail(f"no broker {name} in the cluster (brokers: {','.join(map(str, sorted(nodes)))})")
        host, port = nodes[int(name)]
        return await peer_request(host, port, api_key, version, body, timeout)
    return await bootstrap_request(bootstrap, api_key, version, body, timeout)


def describe_resource(bootstrap: str, rtype: int, name: str, timeout: float) -> list[dict]:
    """Every config entry of a topic or broker resource (with synonyms), sorted by name."""
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False}
    resp = asyncio.run(_resource_request(bootstrap, rtype, name, ApiKey.DESCRIBE_CONFIGS, DESCRIBE_VERSION, body,
                                         timeout))
    result = resp["results"][0]
    if result["error_code"]:
        fail(_error(result["error_code"], result.get("error_message")))
    return sorted(result["configs"], key=lambda c: c["name"])


def _dynamic_source(rtype: int, name: str) -> int:
    if rtype == TOPIC:
        return 1
    if rtype == GROUP:
        return 8
    return 2 if name else 3


def _entry_line(c: dict) -> str:
    synonyms = ", ".join(f"{SOURCES.get(s['source'], s['source'])}:{s['name']}={s['value']}"
                         for s in c.get("synonyms") or ())
    value = "null" if c["value"] is None else c["value"]
    return f"  {c['name']}={value} sensitive={str(c['is_sensitive']).lower()} synonyms={{{synonyms}}}"


def _resource(entity_type: str, names: tuple[str, ...], default: bool) -> tuple[int, str | None]:
    if entity_type in ("topics", "groups"):
        if default:
            fail(f"--entity-default applies to brokers, clients and users, not {entity_type}", 2)
        return (TOPIC if entity_type == "topics" else GROUP), names[0] if names else None
    if default:
        return BROKER, ""
    if names and not names[0].isdigit():
        fail(f"The entity name for brokers must be a valid integer broker id, found: {names[0]}", 2)
    return BROKER, names[0] if names else None


def _quota_entity(types: tuple[str, ...], names: tuple[str, ...], default: bool) -> tuple[list[dict], list[str]]:
    """users and/or clients with the names given in order; a type without a name is its default with
    ``--entity-default``, else (describe) any entity of that type. Returns (entity, types to match any of)."""
    if len(names) > len(types):
        fail("more --entity-name than --entity-type", 2)
    named = dict(zip(types, names, strict=False))
    entity: list[dict] = []
    any_of: list[str] = []
    for t in types:
        etype = "user" if t == "users" else "client-id"
        if t in named or default:
            entity.append({"entity_type": etype, "entity_name": named.get(t)})
        else:
            any_of.append(etype)
    return entity, any_of


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` prints it (Kafka's tool prints quotas so): ``1048576.0``, ``1.0E9``."""
    x = float(x)
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(x)
    t = decimal.Decimal(repr(x)).normalize().as_tuple()
    digits = "".join(map(str, t.digits))
    exponent = len(t.digits) - 1 + int(t.exponent)
    return f"{'-' if t.sign else ''}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _quota_label(names: dict[str, str | None]) -> str:
    parts = []
    for key, label in (("user", "user-principal"), ("client-id", "client-id")):
        if key in names:
            parts.append(f"the default {label}" if names[key] is None else f"{label} '{names[key]}'")
    return ", ".join(parts)


def _entity_options(fn: Any) -> Any:
    fn = click.option("--entity-default", is_flag=True,
                      help="The default entity: the cluster-wide broker default, the default user or client id.")(fn)
    fn = click.option("--entity-name", "entity_names", multiple=True,
                      help="Topic name, broker id, group id, client id or user principal (one per --entity-type).")(fn)
    fn = click.option("--entity-type", "entity_types", multiple=True, required=True,
                      type=click.Choice(ENTITY_TYPES),
                      help="topics, brokers, groups, clients or users (users and clients may be given together).")(fn)
    return fn


def _check_types(types: tuple[str, ...]) -> None:
    if len(types) > 1 and set(types) != {"users", "clients"}:
        fail("only users and clients may be combined in one command", 2)


@click.group()
def configs() -> None:
    """Describe and alter topic, broker, group, client and user configs (kafka-configs.sh)."""


@configs.command("describe")
@_entity_options
@click.option("--all", "show_all", is_flag=True, help="Every config with its source, not only dynamic ones.")
@output_option
@bootstrap_option
@timeout_option
def describe(entity_types: tuple[str, ...], entity_names: tuple[str, ...], entity_default: bool, show_all: bool,
             bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Configs of an entity (every topic or broker when no --entity-name), as kafka-configs.sh --describe.
    With --output json: one array, an object per entity (its configs, or its quotas and SCRAM credentials)."""
    _check_types(entity_types)
    as_json = output_is_json()
    found: list[dict[str, Any]] = []
    if entity_types[0] in ("users", "clients"):
        entity, any_of = _quota_entity(entity_types, entity_names, entity_default)
        for names, values in describe_quotas(bootstrap, entity, False, timeout, any_of):
            if as_json:
                found.append({"entity": names, "quotas": {k: float(v) for k, v in values}})
                continue
            safe_echo(f"Quota configs for {_quota_label(names)} are "
                      + ", ".join(f"{k}={java_double(v)}" for k, v in values))
        if "clients" not in entity_types and not entity_default:  # as Kafka: a user's SCRAM credentials too
            found += _describe_scram(bootstrap, properties, timeout, list(entity_names) or None, as_json)
        if as_json:
            echo_json(found)
        return
    rtype, name = _resource(entity_types[0], entity_names, entity_default)
    resources: list[str]
    if name is None:
        if rtype == TOPIC:
            md = asyncio.run(_metadata(bootstrap, timeout))
            resources = sorted(t["name"] for t in md["topics"])
        elif rtype == GROUP:  # the groups that have configs (ListConfigResources v1, Kafka 4.1's kafka-configs.sh)
            listed = asyncio.run(bootstrap_request(bootstrap, ApiKey.LIST_CONFIG_RESOURCES, 1,
                                                   {"resource_types": [GROUP]}, timeout))
            if listed["error_code"]:
                fail(_error(listed["error_code"], None))
            resources = sorted(r["resource_name"] for r in listed["config_resources"])
        else:
            resources = [*map(str, sorted(asyncio.run(broker_addresses(bootstrap, timeout)))), ""]
    else:
        resources = [name]
    for n in resources:
        kind = entity_types[0][:-1]
        wanted = _dynamic_source(rtype, n)
        shown = [c for c in describe_resource(bootstrap, rtype, n, timeout) if show_all or c["config_source"] == wanted]
        if as_json:
            found.append({"entityType": entity_types[0], "entityName": n if n or rtype != BROKER else None,
                          "configs": [_entry_json(c) for c in shown]})
            continue
        if rtype == BROKER and not n:
            safe_echo("Default configs for brokers in the cluster are:")
        else:
            safe_echo(f"{'All' if show_all else 'Dynamic'} configs for {kind} {n} are:")
        for c in shown:
            safe_echo(_entry_line(c))
    if as_json:
        echo_json(found)


def _entry_json(c: dict) -> dict[str, Any]:
    """One config entry for ``--output json``, with Kafka's ConfigEntry field and source names."""
    return {"name": c["name"], "value": c["value"], "source": SOURCES.get(c["config_source"], c["config_source"]),
            "sensitive": c["is_sensitive"], "readOnly": c["read_only"],
            "synonyms": [{"name": s["name"], "value": s["value"], "source": SOURCES.get(s["source"], s["source"])}
                         for s in c.get("synonyms") or ()]}


def _describe_scram(bootstrap: str, properties: tuple[str, ...], timeout: float, names: list[str] | None,
                    as_json: bool = False) -> list[dict[str, Any]]:
    """A user's SCRAM credentials as kafka-configs.sh prints them (or, ``as_json``, returned as objects)."""
    found: list[dict[str, Any]] = []
    for user, creds in sorted(scram_credentials(bootstrap, properties, timeout, names).items()):
        if isinstance(creds, BaseException):
            if as_json:
                found.append({"entity": {"user": user}, "error": kafka_error_text(creds)})
                continue
            safe_echo(f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                      f"{kafka_error_text(creds)}")
        elif as_json:
            found.append({"entity": {"user": user}, "scram": [{"mechanism": m, "iterations": i} for m, i in creds]})
        else:
            safe_echo(f"SCRAM credential configs for user-principal '{user}' are "
                      + ", ".join(f"{m}=iterations={i}" for m, i in creds))
    return found


async def _metadata(bootstrap: str, timeout: float) -> dict:
    return await bootstrap_request(bootstrap, ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                                   "include_topic_authorized_operations": False},
                                   timeout)


@configs.command("alter")
@_entity_options
@click.option("--add-config", "add", metavar="K=V[,K=V]", help="Configs to set: k1=v1,k2=[v1,v2],k3=v3.")
@click.option("--delete-config", "delete", metavar="K[,K]", help="Configs to remove.")
@bootstrap_option
@timeout_option
def alter(entity_types: tuple[str, ...], entity_names: tuple[str, ...], entity_default: bool, add: str | None,
          delete: str | None, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Set or remove configs of one entity, as kafka-configs.sh --alter."""
    _check_types(entity_types)
    added = parse_config_list(add, "--add-config")
    deleted = [k.strip() for k in (delete or "").split(",") if k.strip()]
    if not added and not deleted:
        fail("nothing to change: give --add-config and/or --delete-config", 2)
    if not entity_names and not entity_default:
        fail("--alter needs --entity-name or --entity-default", 2)
    kind = entity_types[0]
    if kind in ("users", "clients"):
        if any(k.upper().startswith("SCRAM-") for k in [*dict(added), *deleted]):
            fail("SCRAM credentials are managed with tidelog users add|remove", 2)
        entity, any_of = _quota_entity(entity_types, entity_names, entity_default)
        if any_of:
            fail("--alter needs an --entity-name (or --entity-default) for each --entity-type", 2)
        alter_quotas(bootstrap, entity, quota_ops(added, deleted), False, timeout)
    else:
        rtype, name = _resource(kind, entity_names, entity_default)
        assert name is not None
        current = {c["name"] for c in describe_resource(bootstrap, rtype, name, timeout)
                   if c["config_source"] == _dynamic_source(rtype, name)}
        invalid = [k for k in deleted if k not in current]
        if invalid:
            fail(f"Invalid config(s): {','.join(invalid)}")
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in added]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in deleted]
        body = {"resources": [{"resource_type": rtype, "resource_name": name, "configs": ops}], "validate_only": False}
        resp = asyncio.run(_resource_request(bootstrap, rtype, name, ApiKey.INCREMENTAL_ALTER_CONFIGS, ALTER_VERSION,
                                             body, timeout))
        result = resp["responses"][0]
        if result["error_code"]:
            fail(_error(result["error_code"], result.get("error_message")))
    if entity_names:
        safe_echo(f"Completed updating config for {kind[:-1]} {entity_names[0]}.")
    else:
        safe_echo(f"Completed updating default config for {kind} in the cluster.")
