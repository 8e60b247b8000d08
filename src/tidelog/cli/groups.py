"""``tidelog groups``: list, describe (with per-partition lag), reset offsets of and delete consumer groups.

Like ``kafka-consumer-groups``, over the Kafka protocol (a confluent-kafka AdminClient plus a Consumer for log
end offsets), so it works against any Kafka-compatible broker. ``reset-offsets`` prints the plan and changes
nothing unless ``--execute`` is given; offsets can only be reset while the group is empty (the broker refuses
commits without a member otherwise, as Kafka does).
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import click

from tidelog.cli._client import (
    bootstrap_option,
    client_config,
    fail,
    kafka_error_text,
    output_is_json,
    output_option,
    print_table,
    safe_echo,
)
from tidelog.cli._tables import (
    DELETE_OFFSETS_WIDTHS,
    GROUP_MEMBERS_INSTANCE_WIDTHS,
    GROUP_MEMBERS_WIDTHS,
    GROUP_OFFSETS_WIDTHS,
    RESET_OFFSETS_WIDTHS,
    group_list_widths,
    group_state_name,
    group_state_widths,
)
from tidelog.cli.group_admin import delete_offsets
from tidelog.cli.group_kip848 import (
    LISTABLE_TYPES,
    REBALANCING_STATES,
    ConsumerGroup,
    describe_consumer_group,
    list_groups,
    members_view,
    owners_of,
    parse_types,
    state_view,
)
from tidelog.cli.group_offsets import SpecError, choose_spec, export_csv, parse_offsets_file, target

timeout_option = click.option("--timeout", type=float, default=30.0, show_default=True,
                              help="Seconds to wait for the broker(s).")


def _admin(bootstrap: str, properties: tuple[str, ...]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(bootstrap, properties))


def _end_offsets(bootstrap: str, properties: tuple[str, ...], tps: list[Any], timeout: float,
                 earliest: bool = False) -> dict[tuple[str, int], int]:
    """Log end (or start) offsets through a plain consumer's watermark query."""
    from confluent_kafka import Consumer

    c = Consumer(client_config(bootstrap, properties, **{"group.id": "tidelog-groups-cli", "enable.auto.commit": False}))
    try:
        out = {}
        for tp in tps:
            lo, hi = c.get_watermark_offsets(tp, timeout=timeout)
            out[(tp.topic, tp.partition)] = lo if earliest else hi
        return out
    finally:
        c.close()


def _committed(admin: Any, group: str, timeout: float) -> list[Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return list(fut.result(timeout).topic_partitions or [])


def _describe(admin: Any, group: str, timeout: float) -> Any:
    return admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)


@click.group()
def groups() -> None:
    """Consumer groups: list, describe with lag, reset offsets, delete."""


@groups.command("list")
@click.option("--type", "types", is_flag=False, flag_value="all", default=None, metavar="[classic,consumer]",
              help="Kafka's --list --type: show each group's type (Classic, Consumer), only those of the types given "
                   "(a comma list; none: every type). Through ListGroups v5 at every broker.")
@output_option
@bootstrap_option
@timeout_option
def list_cmd(types: str | None, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """List consumer groups with their state (as kafka-consumer-groups --list --state: Kafka's state names,
    Stable, Empty...) and whether they are consumer groups or simple (offsets only); with --type, as
    kafka-consumer-groups --list --type --state: GROUP TYPE STATE."""
    if types is not None:
        _list_typed(types, bootstrap, timeout)
        return
    admin = _admin(bootstrap, properties)
    try:
        res = admin.list_consumer_groups(request_timeout=timeout).result(timeout)
    except Exception as exc:
        fail(kafka_error_text(exc))
    rows = sorted((g.group_id, group_state_name(g.state), "consumer" if g.is_simple_consumer_group is False
                   else "simple") for g in res.valid)
    print_table(["GROUP", "STATE", "TYPE"], rows, minimums=group_list_widths([r[0] for r in rows]))
    for err in res.errors:
        click.echo(f"Warning: {err}", err=True)


def _list_typed(types: str, bootstrap: str, timeout: float) -> None:
    import asyncio

    try:
        # every type means classic and consumer, as kafka-consumer-groups.sh (share groups: tidelog share-groups)
        wanted = parse_types(types) or set(LISTABLE_TYPES)
    except ValueError as exc:
        fail(str(exc), 2)
    try:
        rows, errors = asyncio.run(list_groups(bootstrap, sorted(wanted), timeout))
    except (OSError, TimeoutError) as exc:
        fail(f"cannot list the groups: {exc}")
    print_table(["GROUP", "TYPE", "STATE"], [[r["group"], r["type"], r["state"]] for r in rows],
                minimums=group_list_widths([r["group"] for r in rows]))
    for err in errors:
        click.echo(f"Warning: {err}", err=True)


@groups.command("describe")
@click.argument("group")
@click.option("--members", "view", flag_value="members", help="The members: id, host, client id, partitions.")
@click.option("--state", "view", flag_value="state", help="The group: coordinator, assignor, state, members.")
@click.option("--offsets", "view", flag_value="offsets", default=True, help="Offsets and lag (the default).")
@click.option("--verbose", is_flag=True, help="With --members: each member's assignment (and, for a consumer "
              "(KIP-848) group, its epoch and target assignment); with --state of a consumer group: its epochs.")
@output_option
@bootstrap_option
@timeout_option
def describe_cmd(group: str, view: str, verbose: bool, bootstrap: str, properties: tuple[str, ...],
                 timeout: float) -> None:
    """Per-partition committed offset, log end offset, lag and owner of GROUP (like kafka-consumer-groups);
    --members and --state give kafka-consumer-groups' other views."""
    admin = _admin(bootstrap, properties)
    try:
        desc = _describe(admin, group, timeout)
        committed = _committed(admin, group, timeout)
    except Exception as exc:
        fail(kafka_error_text(exc))
    kip = _kip848(desc, bootstrap, group, timeout)
    raw_state = getattr(desc.state, "name", str(desc.state))
    if kip is None and raw_state == "DEAD" and not desc.members and not committed:
        fail(f"consumer group {group!r} does not exist")  # Kafka's kafka-consumer-groups says the same
    state = kip.state if kip is not None else group_state_name(desc.state)
    if not output_is_json():  # kafka-consumer-groups' notes, on stderr as it prints them
        if state == "Empty":
            click.echo(f"\nConsumer group '{group}' has no active members.", err=True)
        elif state in REBALANCING_STATES:
            click.echo(f"\nWarning: Consumer group '{group}' is rebalancing.", err=True)
    if kip is not None and view in ("state", "members"):
        _describe_kip848(kip, desc, view, verbose)
        return
    if view == "state":
        c = desc.coordinator
        coordinator = f"{c.host}:{c.port}  ({c.id})" if c is not None else "-"  # two spaces, as Kafka's
        print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [[group, coordinator, desc.partition_assignor or "", state, len(desc.members)]],
                    minimums=group_state_widths(coordinator), blank_before=True)
        return
    if view == "members":
        with_instance = any(getattr(m, "group_instance_id", None) for m in desc.members)
        headers = (["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else [])
                   + ["HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else []))
        rows = []
        for m in sorted(desc.members, key=lambda m: m.member_id):
            parts = list(m.assignment.topic_partitions) if m.assignment else []
            row = ([group, m.member_id] + ([getattr(m, "group_instance_id", None) or ""] if with_instance else [])
                   + [m.host, m.client_id, len(parts)])
            if verbose:
                by_topic: dict[str, list[int]] = {}
                for tp in parts:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                row.append(", ".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))
                           or "-")
            rows.append(row)
        if not rows and not output_is_json():
            return  # Kafka prints only the note above
        print_table(headers, rows, minimums=GROUP_MEMBERS_INSTANCE_WIDTHS if with_instance else GROUP_MEMBERS_WIDTHS,
                    blank_before=True)
        return
    owners: dict[tuple[str, int], Any] = {}
    if kip is not None:
        owners = {tp: _Owner(m.member_id, m.host, m.client_id) for tp, m in owners_of(kip).items()}
    for m in desc.members if kip is None else ():
        for tp in (m.assignment.topic_partitions if m.assignment else []):
            owners[(tp.topic, tp.partition)] = m
    tps = {(tp.topic, tp.partition): tp for tp in committed}
    from confluent_kafka import TopicPartition

    for key in owners:
        tps.setdefault(key, TopicPartition(key[0], key[1], -1001))
    try:
        # offsets may name a topic (or partition) that is not there (deleted; kept by an older broker): no log end
        # offset and no lag for those, as kafka-consumer-groups shows them, instead of failing on the whole group.
        # All topics' metadata: naming one may auto-create it.
        known = admin.list_topics(timeout=timeout).topics if tps else {}
        present = [TopicPartition(t, p) for t, p in tps
                   if (md := known.get(t)) is not None and md.error is None and p in md.partitions]
        ends = _end_offsets(bootstrap, properties, present, timeout) if present else {}
    except Exception as exc:
        fail(kafka_error_text(exc))
    rows = []
    for key in sorted(tps):
        off = tps[key].offset
        end = ends.get(key)
        cur = off if off is not None and off >= 0 else None
        lag = end - cur if cur is not None and end is not None and end >= 0 else None
        m = owners.get(key)
        rows.append([group, key[0], key[1], "-" if cur is None else cur, "-" if end is None else end,
                     "-" if lag is None else lag,
                     m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"])
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID"], rows,
                title=f"{group} ({state}, {len(kip.members if kip is not None else desc.members)} members)",
                minimums=GROUP_OFFSETS_WIDTHS, blank_before=True)


class _Owner(NamedTuple):
    member_id: str
    host: str
    client_id: str


def _kip848(desc: Any, bootstrap: str, group: str, timeout: float) -> ConsumerGroup | None:
    """A consumer (KIP-848) group described with ConsumerGroupDescribe (epochs, target assignments, its own state
    names); None for a classic group, or when the group stopped being a consumer group meanwhile."""
    if getattr(getattr(desc, "type", None), "name", "") != "CONSUMER":
        return None
    import asyncio

    try:
        kip, _error = asyncio.run(describe_consumer_group(bootstrap, group, timeout))
    except (OSError, TimeoutError) as exc:
        fail(f"cannot describe consumer group {group!r}: {exc}")
    return kip


def _describe_kip848(kip: ConsumerGroup, desc: Any, view: str, verbose: bool) -> None:
    """Kafka 4's --state and --members views of a consumer group."""
    if view == "state":
        c = desc.coordinator
        coordinator = f"{c.host}:{c.port}  ({c.id})" if c is not None else "-"  # two spaces, as Kafka's
        headers, row, widths = state_view(kip, coordinator, verbose)
        print_table(headers, [row], minimums=widths, blank_before=True)
        return
    headers, rows, widths = members_view(kip, verbose)
    if not rows and not output_is_json():
        return  # Kafka prints only the note above
    print_table(headers, rows, minimums=widths, blank_before=True)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, help="Topic (or topic:p1,p2) to reset; repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-current", is_flag=True, help="Reset to the committed offset (the log start without one).")
@click.option("--to-offset", type=int, default=None, help="Reset to this offset.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (may be negative).")
@click.option("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss",
              help="Reset to the first offset at or after this time (local time unless a zone is given).")
@click.option("--by-duration", default=None, metavar="PnDTnHnMnS",
              help="Reset to the first offset at or after now minus this ISO-8601 duration (e.g. PT1H).")
@click.option("--from-file", "from_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Reset to the offsets of a CSV file (topic,partition,offset lines, as --export prints).")
@click.option("--export", "export", is_flag=True, help="Print the plan as CSV (topic,partition,offset).")
@click.option("--dry-run", is_flag=True, help="Only print the plan (the default).")
@click.option("--execute", is_flag=True, help="Apply the plan (default: only print it).")
@output_option
@bootstrap_option
@timeout_option
def reset_cmd(group: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool, to_latest: bool,
              to_current: bool, to_offset: int | None, shift_by: int | None, to_datetime: str | None,
              by_duration: str | None, from_file: str | None, export: bool, dry_run: bool, execute: bool,
              bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Compute new offsets for GROUP and (with --execute) commit them, as kafka-consumer-groups --reset-offsets.
    The group must be empty. A new offset outside a partition's log is set to its start or end, with a warning
    (as kafka-consumer-groups does)."""
    import time

    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    if dry_run and execute:
        fail("give --dry-run or --execute, not both", 2)
    scopes = [name for name, on in (("--topic", bool(topics)), ("--all-topics", all_topics),
                                    ("--from-file", from_file is not None)) if on]
    if len(scopes) > 1 and scopes != ["--from-file"]:
        fail(f"give one of --topic, --all-topics (got {', '.join(scopes)})", 2)
    if not scopes:
        fail("give --topic, --all-topics or --from-file", 2)
    try:
        file_offsets = None
        if from_file is not None:
            with open(from_file, encoding="utf-8") as f:
                file_offsets = parse_offsets_file(f.read(), group)
        spec = choose_spec(to_earliest=to_earliest, to_latest=to_latest, to_current=to_current, to_offset=to_offset,
                           shift_by=shift_by, to_datetime=to_datetime, by_duration=by_duration,
                           from_file=file_offsets, now_ms=int(time.time() * 1000))
    except SpecError as exc:
        fail(str(exc), 2)
    except OSError as exc:
        fail(f"--from-file {from_file}: {exc.strerror or exc}", 2)
    if file_offsets is not None and (topics or all_topics):
        fail("--from-file names its partitions: no --topic or --all-topics with it", 2)
    admin = _admin(bootstrap, properties)
    tps: list[Any] = []
    try:
        # all topics' metadata, not list_topics(topic=name): a named topic in an AdminClient's Metadata request
        # may auto-create it (librdkafka's producer-side allow.auto.create.topics)
        known = admin.list_topics(timeout=timeout).topics
        committed = _committed(admin, group, timeout)
        current = {(tp.topic, tp.partition): tp.offset for tp in committed}
        if file_offsets is not None:
            specs = [f"{t}:{p}" for t, p in sorted(file_offsets)]
        elif all_topics:
            specs = sorted({t for t, _ in current})
            if not specs:
                fail(f"group {group!r} has no committed offsets (--all-topics takes the topics it has)")
        else:
            specs = list(topics)
        for item in specs:
            name, _, parts = item.partition(":")
            md = known.get(name)
            if md is None or md.error is not None:
                fail(f"unknown topic {name}")
            if parts:
                wanted = [int(p) for p in parts.split(",")]
                if any(p not in md.partitions for p in wanted):
                    fail(f"topic {name} has partitions {sorted(md.partitions)}, not all of {wanted}")
                tps += [TopicPartition(name, p) for p in wanted]
            else:
                tps += [TopicPartition(name, p) for p in sorted(md.partitions)]
        lows = _end_offsets(bootstrap, properties, tps, timeout, earliest=True)
        highs = _end_offsets(bootstrap, properties, tps, timeout)
        by_time = _offsets_for_time(bootstrap, properties, tps, spec.value, timeout) if spec.needs_times else {}
    except ValueError as exc:
        fail(f"--topic: {exc}", 2)
    except Exception as exc:
        fail(kafka_error_text(exc))
    plan = []
    for tp in tps:
        key = (tp.topic, tp.partition)
        lo, hi = lows[key], highs[key]
        new = target(spec, key, lo, hi, current.get(key), by_time.get(key))
        # clamped like Kafka's tool, which says so
        if new > hi:
            click.echo(f"Warning: new offset ({new}) is higher than latest offset for topic partition "
                       f"{tp.topic}-{tp.partition}. Value will be set to {hi}", err=True)
        elif new < lo:
            click.echo(f"Warning: new offset ({new}) is lower than earliest offset for topic partition "
                       f"{tp.topic}-{tp.partition}. Value will be set to {lo}", err=True)
        plan.append(TopicPartition(tp.topic, tp.partition, max(lo, min(hi, new))))
    if export:
        safe_echo(export_csv((t.topic, t.partition, t.offset) for t in plan).rstrip("\n"))
    else:
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [[group, t.topic, t.partition, t.offset] for t in plan], minimums=RESET_OFFSETS_WIDTHS,
                    blank_before=True)
    if not execute:
        if not export:
            click.echo("(dry run: add --execute to apply)", err=output_is_json())
        return
    hint = "offsets can only be reset while the group has no active members"
    try:
        res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, plan)])[group].result(timeout)
    except Exception as exc:
        fail(f"{kafka_error_text(exc)} ({hint})")
    errors = [f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in res.topic_partitions or [] if tp.error]
    if errors:
        fail("; ".join(errors) + f" ({hint})")


def _offsets_for_time(bootstrap: str, properties: tuple[str, ...], tps: list[Any], when_ms: int,
                      timeout: float) -> dict[tuple[str, int], int]:
    """The earliest offset of each partition whose timestamp is at or after ``when_ms`` (ListOffsets by time);
    -1 where there is none."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(client_config(bootstrap, properties, **{"group.id": "tidelog-groups-cli", "enable.auto.commit": False}))
    try:
        found = c.offsets_for_times([TopicPartition(tp.topic, tp.partition, when_ms) for tp in tps], timeout=timeout)
        return {(tp.topic, tp.partition): tp.offset for tp in found}
    finally:
        c.close()


@groups.command("delete-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, help="Topic (or topic:p1,p2); repeatable.")
@output_option
@bootstrap_option
@timeout_option
def delete_offsets_cmd(group: str, topics: tuple[str, ...], bootstrap: str, properties: tuple[str, ...],
                       timeout: float) -> None:
    """Delete GROUP's committed offsets of the topics (partitions) given, as kafka-consumer-groups
    --delete-offsets (OffsetDelete; refused for topics the group is subscribed to while it has members)."""
    import asyncio

    try:
        rows, top_error = asyncio.run(delete_offsets(bootstrap, group, topics, timeout))
    except (OSError, TimeoutError) as exc:
        fail(f"cannot reach the group coordinator: {exc}")
    if top_error:
        fail(f"deleting offsets of group {group!r} failed: {top_error}")
    print_table(["TOPIC", "PARTITION", "STATUS"], rows, minimums=DELETE_OFFSETS_WIDTHS, blank_before=True)
    if any(status != "Successful" for _, _, status in rows):
        sys.exit(1)


@groups.command("delete")
@click.argument("group_ids", nargs=-1, required=True)
@bootstrap_option
@timeout_option
def delete_cmd(group_ids: tuple[str, ...], bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Delete empty consumer groups and their committed offsets."""
    admin = _admin(bootstrap, properties)
    failed = False
    for gid, fut in admin.delete_consumer_groups(list(group_ids), request_timeout=timeout).items():
        try:
            fut.result(timeout)
            safe_echo(f"Deleted group {gid}")
        except Exception as exc:
            failed = True
            click.echo(f"Error: group {gid}: {kafka_error_text(exc)}", err=True)
    if failed:
        sys.exit(1)
