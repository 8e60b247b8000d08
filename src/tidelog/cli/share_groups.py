"""``tidelog share-groups``: share groups (KIP-932) as Kafka 4's ``kafka-share-groups.sh`` shows them.

Listed with ListGroups v5 (type ``share``) at every broker, described with ShareGroupDescribe (API 77) at the
group's coordinator, through tidelog's own client. Kafka's layouts (ShareGroupCommand):

* ``--list``: one group id a line; with ``--state``: ``GROUP STATE``;
* ``--describe --state [--verbose]``: ``GROUP COORDINATOR (ID) STATE [GROUP-EPOCH ASSIGNMENT-EPOCH] #MEMBERS``;
* ``--describe --members [--verbose]``: ``GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS [MEMBER-EPOCH] ASSIGNMENT``
  (an assignment ``topic:0,1;other:2``, ``-`` when empty).

``reset-offsets`` / ``delete-offsets``: ``cli/share_offsets.py``. Not here yet: the offsets view (``--describe`` alone: ``START-OFFSET`` and lag per partition, from
DescribeShareGroupOffsets, API 90) (docs/decisions/0067-share-groups.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tidelog.cli._client import (
    CliTransport,
    bootstrap_option,
    broker_addresses,
    fail,
    output_option,
    peer_request,
    print_table,
    safe_echo,
)
from tidelog.cli.group_kip848 import assignment_text
from tidelog.cli.share_offsets import register
from tidelog.client import admin_ops
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

LIST_GROUPS_VERSION = 5


async def _list(bootstrap: str, timeout: float) -> tuple[dict[str, str], list[str]]:
    brokers = await broker_addresses(bootstrap, timeout)
    groups: dict[str, str] = {}
    errors: list[str] = []
    for node, (host, port) in sorted(brokers.items()):
        try:
            resp = await peer_request(host, port, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                                      {"states_filter": [], "types_filter": ["share"]}, timeout)
        except (OSError, TimeoutError) as exc:
            errors.append(f"broker {node} ({host}:{port}): {exc}")
            continue
        if resp.get("error_code"):
            errors.append(error_for_code(resp["error_code"]).name)
            continue
        for g in resp.get("groups") or []:
            if (g.get("group_type") or "").lower() == "share":
                groups[g["group_id"]] = g.get("group_state") or "Unknown"
    return groups, errors


async def _describe(bootstrap: str, group: str, timeout: float) -> tuple[dict[str, Any] | None, str, str | None]:
    """(the described group, "host:port (id)" of its coordinator, the error's name), by
    :func:`tidelog.client.admin_ops.describe_share_group` (which the web console uses too)."""
    try:
        found, g = await admin_ops.describe_share_group(CliTransport(bootstrap, timeout), group)
    except admin_ops.AdminError as exc:
        return None, "", exc.name
    return g, f"{found['host']}:{found['port']} ({found['node_id']})", None


def state_rows(g: dict[str, Any], coordinator: str, verbose: bool) -> tuple[list[str], list[list[Any]]]:
    headers = ["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else [])
    row: list[Any] = [g["group_id"], coordinator, g["group_state"]]
    if verbose:
        row += [g["group_epoch"], g["assignment_epoch"]]
    return headers + ["#MEMBERS"], [row + [len(g["members"])]]


def member_rows(g: dict[str, Any], verbose: bool) -> tuple[list[str], list[list[Any]]]:
    headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["MEMBER-EPOCH"] if verbose else [])
    rows = []
    for m in sorted(g["members"], key=lambda m: m["member_id"]):
        tps = admin_ops.share_assignment(m)
        row: list[Any] = [g["group_id"], m["member_id"], m["client_host"], m["client_id"], len(tps)]
        if verbose:
            row.append(m["member_epoch"])
        rows.append(row + [assignment_text(tps)])
    return headers + ["ASSIGNMENT"], rows


@click.group("share-groups")
def share_groups() -> None:
    """Share groups (KIP-932, kafka-share-groups.sh): list, describe state and members."""


@share_groups.command("list")
@click.option("--state", "with_state", is_flag=True, help="Also print each group's state (GROUP STATE).")
@output_option
@bootstrap_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the brokers.")
def list_cmd(with_state: bool, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """List the share groups of every broker, as kafka-share-groups.sh --list [--state]."""
    del properties
    try:
        groups, errors = asyncio.run(_list(bootstrap, timeout))
    except (OSError, TimeoutError) as exc:
        fail(f"no broker answered: {exc}")
    for e in errors:
        click.echo(f"warning: {e}", err=True)
    if with_state:
        print_table(["GROUP", "STATE"], [[g, s] for g, s in sorted(groups.items())])
    else:
        for g in sorted(groups):
            safe_echo(g)


@share_groups.command("describe")
@click.argument("group")
@click.option("--members", "view", flag_value="members", help="Members with their assignments.")
@click.option("--state", "view", flag_value="state", default=True, help="The group's state (the default view).")
@click.option("--verbose", is_flag=True, help="Also epochs (GROUP-EPOCH ASSIGNMENT-EPOCH, MEMBER-EPOCH).")
@output_option
@bootstrap_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the brokers.")
def describe_cmd(group: str, view: str, verbose: bool, bootstrap: str, properties: tuple[str, ...],
                 timeout: float) -> None:
    """Describe GROUP as kafka-share-groups.sh --describe --state | --members [--verbose]."""
    del properties
    try:
        g, coordinator, err = asyncio.run(_describe(bootstrap, group, timeout))
    except (OSError, TimeoutError) as exc:
        fail(f"no broker answered: {exc}")
    if g is None:
        fail(f"Share group '{group}': {err}")
    headers, rows = member_rows(g, verbose) if view == "members" else state_rows(g, coordinator, verbose)
    print_table(headers, rows, blank_before=True)


register(share_groups)  # reset-offsets, delete-offsets (cli/share_offsets.py)
