"""``tidelog share-groups reset-offsets / delete-offsets``: kafka-share-groups.sh ``--reset-offsets`` and
``--delete-offsets``, through AlterShareGroupOffsets (91) / DeleteShareGroupOffsets (92) at the group's coordinator.

* ``reset-offsets --group G --topic T[:P,...] --to-earliest|--to-latest|--to-offset N [--dry-run|--execute]``:
  prints ``GROUP TOPIC PARTITION NEW-START-OFFSET`` (Kafka's layout); only ``--execute`` changes anything (the group
  must be empty). The earliest / latest offsets come from ListOffsets.
* ``delete-offsets --group G --topic T [--topic T2]``: deletes the group's state of every partition of the topics;
  prints ``TOPIC STATUS`` (``Successful`` or the error's name).
* ``delete --group G [--group G2]``: DeleteGroups of empty share groups (their share state deleted by the coordinator,
  decision 0073); prints kafka-share-groups.sh --delete's lines.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tidelog.cli._client import CliTransport, bootstrap_option, fail, output_option, print_table
from tidelog.cli.offsets import list_offsets
from tidelog.cli.topics import _admin, _metadata
from tidelog.client.admin_ops import AdminError, check
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code


async def _coordinator(t: CliTransport, group: str) -> tuple[str, int]:
    found = await t.any_broker(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    check(found["error_code"], f"FindCoordinator {group}", found.get("error_message"))
    return found["host"], found["port"]


async def alter(t: CliTransport, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """AlterShareGroupOffsets: the error code of each partition (a top-level refusal raises)."""
    host, port = await _coordinator(t, group)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, p), off in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append({"partition_index": p, "start_offset": off})
    resp = await t.call(host, port, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [
        {"topic_name": x, "partitions": ps} for x, ps in by_topic.items()]})
    check(resp["error_code"], f"AlterShareGroupOffsets {group}", resp.get("error_message"))
    return {(x["topic_name"], p["partition_index"]): p["error_code"] for x in resp["responses"]
            for p in x["partitions"]}


async def delete(t: CliTransport, group: str, topics: list[str]) -> dict[str, int]:
    host, port = await _coordinator(t, group)
    resp = await t.call(host, port, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [
        {"topic_name": x} for x in topics]})
    check(resp["error_code"], f"DeleteShareGroupOffsets {group}", resp.get("error_message"))
    return {x["topic_name"]: x["error_code"] for x in resp["responses"]}


async def delete_groups(t: CliTransport, groups: list[str]) -> dict[str, str | None]:
    """DeleteGroups of each share group at its coordinator (which deletes its share state too): ``None`` or the
    error's text per group. A group that is not a share group is refused, as kafka-share-groups.sh does."""
    out: dict[str, str | None] = {}
    for g in groups:
        try:
            host, port = await _coordinator(t, g)
        except AdminError as exc:
            out[g] = exc.detail
            continue
        d = (await t.call(host, port, ApiKey.SHARE_GROUP_DESCRIBE, 1, {
            "group_ids": [g], "include_authorized_operations": False}))["groups"][0]
        code = d["error_code"] or (await t.call(host, port, ApiKey.DELETE_GROUPS, 2, {
            "groups_names": [g]}))["results"][0]["error_code"]
        out[g] = None if not code else f"{error_for_code(code).name}: {d.get('error_message') or ''}".rstrip(": ")
    return out


def _partitions(admin: Any, specs: tuple[str, ...], timeout: float) -> list[tuple[str, int]]:
    md = _metadata(admin, timeout)
    out: list[tuple[str, int]] = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            fail(f"Topic {topic} does not exist")
        wanted = sorted(tmd.partitions) if not parts else [int(p) for p in parts.split(",")]
        out += [(topic, p) for p in wanted]
    return out


def register(group: click.Group) -> None:
    @group.command("reset-offsets")
    @click.option("--group", "group_id", required=True, help="The share group.")
    @click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,P...]",
                  help="A topic, or some of its partitions (repeatable).")
    @click.option("--to-earliest", is_flag=True, help="Reset to the earliest offset.")
    @click.option("--to-latest", is_flag=True, help="Reset to the latest offset.")
    @click.option("--to-offset", type=int, default=None, help="Reset to this offset.")
    @click.option("--execute", is_flag=True, help="Apply the reset (default: --dry-run, print only).")
    @click.option("--dry-run", is_flag=True, help="Print the new start offsets only (the default).")
    @output_option
    @bootstrap_option
    @click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the brokers.")
    def reset_offsets(group_id: str, topics: tuple[str, ...], to_earliest: bool, to_latest: bool,
                      to_offset: int | None, execute: bool, dry_run: bool, bootstrap: str,
                      properties: tuple[str, ...], timeout: float) -> None:
        """Reset a share group's start offsets, as kafka-share-groups.sh --reset-offsets."""
        if sum((to_earliest, to_latest, to_offset is not None)) != 1:
            fail("exactly one of --to-earliest, --to-latest, --to-offset is needed", 2)
        if execute and dry_run:
            fail("--execute and --dry-run cannot be used together", 2)
        admin = _admin(bootstrap, properties)
        parts = _partitions(admin, topics, timeout)
        if to_offset is not None:
            offsets = dict.fromkeys(parts, to_offset)
        else:
            found = list_offsets(admin, parts, -2 if to_earliest else -1, timeout)
            bad = {tp: r for tp, r in found.items() if isinstance(r, BaseException)}
            if bad:
                fail(f"cannot list offsets: {bad}")
            offsets = {tp: int(r) for tp, r in found.items() if not isinstance(r, BaseException)}
        failed: dict[tuple[str, int], int] = {}
        if execute:
            try:
                errors = asyncio.run(alter(CliTransport(bootstrap, timeout), group_id, offsets))
            except AdminError as exc:
                fail(f"Share group '{group_id}': {exc.detail}")
            failed = {tp: e for tp, e in errors.items() if e}
            for (t, p), e in sorted(failed.items()):
                click.echo(f"Error: {t}-{p}: {error_for_code(e).name}", err=True)
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"],
                    [[group_id, t, p, off] for (t, p), off in sorted(offsets.items())], blank_before=True)
        if execute and failed:
            raise SystemExit(1)

    @group.command("delete-offsets")
    @click.option("--group", "group_id", required=True, help="The share group.")
    @click.option("--topic", "topics", multiple=True, required=True, help="A topic (repeatable).")
    @output_option
    @bootstrap_option
    @click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the brokers.")
    def delete_offsets(group_id: str, topics: tuple[str, ...], bootstrap: str, properties: tuple[str, ...],
                       timeout: float) -> None:
        """Delete a share group's state of whole topics, as kafka-share-groups.sh --delete-offsets."""
        del properties
        try:
            errors = asyncio.run(delete(CliTransport(bootstrap, timeout), group_id, list(topics)))
        except AdminError as exc:
            fail(f"Share group '{group_id}': {exc.detail}")
        print_table(["TOPIC", "STATUS"], [[t, "Successful" if not e else error_for_code(e).name]
                                          for t, e in sorted(errors.items())], blank_before=True)
        if any(errors.values()):
            raise SystemExit(1)

    @group.command("delete")
    @click.option("--group", "group_ids", multiple=True, required=True, help="A share group (repeatable).")
    @bootstrap_option
    @click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the brokers.")
    def delete_groups_cmd(group_ids: tuple[str, ...], bootstrap: str, properties: tuple[str, ...],
                          timeout: float) -> None:
        """Delete empty share groups and their share-partition state, as kafka-share-groups.sh --delete."""
        del properties
        result = asyncio.run(delete_groups(CliTransport(bootstrap, timeout), list(group_ids)))
        ok = [g for g, e in result.items() if e is None]
        failed = {g: e for g, e in result.items() if e is not None}
        if not failed:
            click.echo("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
            return
        click.echo("\nError: Deletion of some share groups failed:", err=True)
        for g, e in failed.items():
            click.echo(f"* Share group '{g}' could not be deleted due to: {e}")
        if ok:
            click.echo("\nThese share groups were deleted successfully: " + ",".join(f"'{g}'" for g in ok))
        raise SystemExit(1)
