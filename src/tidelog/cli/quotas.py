"""``tidelog quotas describe | alter``: client quotas, as ``kafka-configs.sh --entity-type users|clients`` (its
``--user``, ``--client``, ``--user-defaults``, ``--client-defaults`` shortcuts, ``--add-config`` and
``--delete-config``) manages them, through DescribeClientQuotas / AlterClientQuotas (KIP-546) on any Kafka
broker; ``--command-config`` for a secured one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from tidelog.broker.quotas import QUOTA_KEYS
from tidelog.cli._client import (
    CliTransport,
    bootstrap_option,
    fail,
    output_option,
    parse_config_list,
    print_table,
    run_admin,
)
from tidelog.client import admin_ops

DEFAULT = "<default>"


def quota_entity(user: str | None, user_defaults: bool, client: str | None, client_defaults: bool) -> list[dict]:
    """The ClientQuotaEntity of ``--user``/``--user-defaults`` and/or ``--client``/``--client-defaults``."""
    if user is not None and user_defaults:
        fail("--user and --user-defaults exclude each other", 2)
    if client is not None and client_defaults:
        fail("--client and --client-defaults exclude each other", 2)
    out = []
    if user is not None or user_defaults:
        out.append({"entity_type": "user", "entity_name": user})
    if client is not None or client_defaults:
        out.append({"entity_type": "client-id", "entity_name": client})
    return out


def _entity_options(fn: Any) -> Any:
    fn = click.option("--client-defaults", is_flag=True, help="The default client id (<default>).")(fn)
    fn = click.option("--client", metavar="CLIENT_ID", help="A client id.")(fn)
    fn = click.option("--user-defaults", is_flag=True, help="The default user (<default>).")(fn)
    fn = click.option("--user", metavar="NAME", help="A user principal name (User:NAME, without the type).")(fn)
    return fn


@click.group()
def quotas() -> None:
    """Client quotas by user and/or client id (producer_byte_rate, consumer_byte_rate, request_percentage,
    controller_mutation_rate)."""


def describe_quotas(bootstrap: str, entity: list[dict], strict: bool, timeout: float,
                    any_of: Sequence[str] = ()) -> list[tuple[dict[str, str | None], list[tuple[str, float]]]]:
    """DescribeClientQuotas for the entity given (exact names or defaults, plus any entity of the ``any_of``
    types; every entity when both are empty): per entity its {entity type: name (None: the default)} and its
    (key, value) quotas, sorted."""
    components = [{"entity_type": e["entity_type"], "match_type": 1 if e["entity_name"] is None else 0,
                   "match": e["entity_name"]} for e in entity]
    components += [{"entity_type": t, "match_type": 2, "match": None} for t in any_of]
    return run_admin(admin_ops.describe_quotas(CliTransport(bootstrap, timeout), components, strict), name_request=False)


def quota_ops(add: list[tuple[str, str]], delete: list[str]) -> list[dict]:
    """AlterClientQuotas ops: ``add`` (key, number as text) set, ``delete`` keys removed; a value that is not a
    number is a usage error."""
    ops = []
    for key, value in add:
        try:
            number = float(value)
        except ValueError:
            fail(f"--add-config: {key} needs a number, got {value!r}", 2)
        ops.append({"key": key, "value": number, "remove": False})
    return ops + [{"key": k, "value": 0.0, "remove": True} for k in delete]


def alter_quotas(bootstrap: str, entity: list[dict], ops: list[dict], validate_only: bool, timeout: float) -> None:
    """AlterClientQuotas of one entity; a refusal ends the command with the broker's error."""
    run_admin(admin_ops.alter_quotas(CliTransport(bootstrap, timeout), entity, ops, validate_only), name_request=False)


@quotas.command("describe")
@_entity_options
@click.option("--strict", is_flag=True, help="Only entities with no entity type besides those given.")
@output_option
@bootstrap_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")
def describe(user: str | None, user_defaults: bool, client: str | None, client_defaults: bool, strict: bool,
             bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """The quotas of the entities given (exact names or the defaults), or of every entity."""
    rows = []
    for names, values in describe_quotas(bootstrap, quota_entity(user, user_defaults, client, client_defaults), strict,
                                         timeout):
        shown = {k: DEFAULT if v is None else v for k, v in names.items()}
        for key, value in values:
            number = int(value) if QUOTA_KEYS.get(key) == "LONG" else float(value)  # printed as 1048576, 50.0
            rows.append((shown.get("user", ""), shown.get("client-id", ""), key, number))
    print_table(["USER", "CLIENT-ID", "KEY", "VALUE"], sorted(rows))


@quotas.command("alter")
@_entity_options
@click.option("--add-config", "add", metavar="K=V[,K=V]", help="Quotas to set, e.g. producer_byte_rate=1048576.")
@click.option("--delete-config", "delete", metavar="K[,K]", help="Quotas to remove.")
@click.option("--validate-only", is_flag=True, help="Check the change on the broker without making it.")
@bootstrap_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")
def alter(user: str | None, user_defaults: bool, client: str | None, client_defaults: bool, add: str | None,
          delete: str | None, validate_only: bool, bootstrap: str, properties: tuple[str, ...],
          timeout: float) -> None:
    """Set or remove quotas of one entity (a user, a client id, or both)."""
    entity = quota_entity(user, user_defaults, client, client_defaults)
    if not entity:
        fail("name an entity: --user/--user-defaults and/or --client/--client-defaults", 2)
    ops = quota_ops(parse_config_list(add, "--add-config"), [k.strip() for k in (delete or "").split(",") if k.strip()])
    if not ops:
        fail("nothing to change: give --add-config and/or --delete-config", 2)
    alter_quotas(bootstrap, entity, ops, validate_only, timeout)
    label = ", ".join(f"{e['entity_type']} {DEFAULT if e['entity_name'] is None else repr(e['entity_name'])}"
                      for e in entity)
    click.echo(f"{'Validated' if validate_only else 'Completed'} updating quotas for {label}.")
