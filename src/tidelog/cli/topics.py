"""``tidelog topics``: create, list, describe, delete topics and change their configs, over the Kafka protocol.

Works against any Kafka-compatible broker (it is a confluent-kafka AdminClient). Output is a table on a
terminal and tab-separated lines otherwise, so it pipes into ``cut``/``awk``.
"""

from __future__ import annotations

import base64
import struct
import sys
from typing import Any

import click

from tidelog.cli._client import (
    bootstrap_option,
    client_config,
    echo_json,
    fail,
    is_tty,
    kafka_error_name,
    kafka_error_text,
    output_is_json,
    output_option,
    parse_key_values,
    print_table,
    safe_echo,
    wait_all,
)

timeout_option = click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the broker(s).",
)


def _admin(bootstrap: str, properties: tuple[str, ...]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(bootstrap, properties))


def _metadata(admin: Any, timeout: float, topic: str | None = None) -> Any:
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        fail(f"cannot fetch metadata: {kafka_error_text(exc)}")
    raise AssertionError("unreachable")


@click.group()
def topics() -> None:
    """Create, list, describe, delete topics; change topic configs."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=None, help="Partition count (default: the broker's num.partitions).")
@click.option(
    "--replication-factor", "-r", type=int, default=None, help="Replicas per partition (default: the broker's)."
)
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly when the topic already exists.")
@click.option("--validate-only", is_flag=True, help="Ask the broker to check the request without creating.")
@bootstrap_option
@timeout_option
def create(
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    validate_only: bool,
    bootstrap: str,
    properties: tuple[str, ...],
    timeout: float,
) -> None:
    """Create topic NAME."""
    from confluent_kafka.admin import NewTopic

    # left out: the broker's default (the protocol's -1); given, at least 1 (kafka-topics.sh's rule)
    if partitions is not None and partitions < 1:
        raise click.BadParameter(f"must be at least 1, got {partitions}", param_hint="--partitions")
    if replication_factor is not None and replication_factor < 1:
        raise click.BadParameter(f"must be at least 1, got {replication_factor}", param_hint="--replication-factor")
    partitions = -1 if partitions is None else partitions
    replication_factor = -1 if replication_factor is None else replication_factor
    cfg = dict(parse_key_values(configs, "--config"))
    admin = _admin(bootstrap, properties)
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=cfg)
    futures = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout, validate_only=validate_only)
    errors = wait_all(futures, timeout + 5)
    exc = errors[name]
    if exc is not None:
        if if_not_exists and kafka_error_name(exc) == "TOPIC_ALREADY_EXISTS":
            return
        fail(f"cannot create topic {name!r}: {kafka_error_text(exc)}")
    safe_echo(f"{'Validated' if validate_only else 'Created'} topic {name}.")


@topics.command("list")
@click.option("--all", "-a", "show_all", is_flag=True, help="Include internal topics (__consumer_offsets ...).")
@output_option
@bootstrap_option
@timeout_option
def list_(show_all: bool, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Print topic names, one per line."""
    md = _metadata(_admin(bootstrap, properties), timeout)
    names = [name for name in sorted(md.topics) if show_all or not name.startswith("__")]
    if output_is_json():
        echo_json(names)
        return
    for name in names:
        safe_echo(name)


def _offsets(admin: Any, partitions: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], tuple[Any, Any]]:
    """(log start offset, log end offset) per partition through ListOffsets; "?" when unavailable."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    result: dict[tuple[str, int], list[Any]] = {tp: ["?", "?"] for tp in partitions}
    if not partitions:
        return {}
    for slot, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
        req = {TopicPartition(t, p): spec for t, p in partitions}
        try:
            futs = admin.list_offsets(req, request_timeout=timeout)
        except Exception:  # old broker or client: leave "?"
            continue
        for tp, fut in futs.items():
            try:
                result[(tp.topic, tp.partition)][slot] = fut.result(timeout=timeout).offset
            except Exception:
                pass
    return {k: (v[0], v[1]) for k, v in result.items()}


def _overrides(admin: Any, names: list[str], timeout: float) -> dict[str, list[tuple[str, str]]]:
    """Each topic's configs that are not defaults (set on the topic or in the broker's properties), as
    kafka-topics.sh --describe lists them in ``Configs:`` (``ConfigEntry.isDefault()`` false)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    out: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
    if not names:
        return out
    futs = admin.describe_configs([ConfigResource("topic", n) for n in names], request_timeout=timeout)
    for res, fut in futs.items():
        try:
            entries = fut.result(timeout=timeout)
        except Exception:
            continue
        out[res.name] = sorted(
            (e.name, "" if e.value is None else e.value)
            for e in entries.values()
            if e.source != ConfigSource.DEFAULT_CONFIG.value
        )
    return out


def _topic_ids(admin: Any, names: list[str], timeout: float) -> dict[str, str]:
    """Each topic's id as Kafka prints it (URL-safe base64), through DescribeTopics' Metadata; none for a topic whose
    description fails or whose id is zero (an older broker), as kafka-topics.sh then leaves ``TopicId:`` out."""
    from confluent_kafka import TopicCollection

    if not names:
        return {}
    try:
        futs = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    except Exception:
        return {}
    out: dict[str, str] = {}
    for name, fut in futs.items():
        try:
            tid = fut.result(timeout=timeout).topic_id
        except Exception:
            continue
        if tid is not None and (tid.get_most_significant_bits() or tid.get_least_significant_bits()):
            out[name] = kafka_uuid(tid.get_most_significant_bits(), tid.get_least_significant_bits())
    return out


def kafka_uuid(most: int, least: int) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding. (librdkafka's own string of a
    ``Uuid`` is standard base64, with ``+`` and ``/``: an id printed from it would differ from kafka-topics.sh's.)"""
    return base64.urlsafe_b64encode(struct.pack(">qq", most, least)).rstrip(b"=").decode("ascii")


def _print_kafka_description(md: Any, present: list[str], tps: list[tuple[str, int]], rows: list[list[Any]],
                             columns: list[str], overrides: dict[str, list[tuple[str, str]]], topic_ids: dict[str, str],
                             with_topic_lines: bool) -> None:
    """kafka-topics.sh --describe's lines: ``Topic: t\tTopicId: ...\tPartitionCount: ...\tReplicationFactor:
    ...\tConfigs: k=v,...`` per topic (not with a partition filter, as Kafka), then ``\tTopic: t\tPartition: p\t
    Leader: ...\tReplicas: ...\tIsr: ...\tElr: N/A\tLastKnownElr: N/A`` per partition; tidelog appends the
    partition's offsets (and cleaner state) as more ``Name: value`` fields."""
    extra = {"log_start_offset": "LogStartOffset", "log_end_offset": "LogEndOffset", "dirty_ratio": "DirtyRatio",
             "first_dirty_offset": "FirstDirtyOffset", "cleaner_runs": "CleanerRuns"}
    by_tp = {(r[0], r[1]): dict(zip(columns, r)) for r in rows}
    for n in present:
        parts = md.topics[n].partitions
        if with_topic_lines:
            first = parts[min(parts)] if parts else None
            line = f"Topic: {n}"
            if n in topic_ids:
                line += f"\tTopicId: {topic_ids[n]}"
            line += f"\tPartitionCount: {len(parts)}\tReplicationFactor: {len(first.replicas) if first else 0}"
            line += "\tConfigs: " + ",".join(f"{k}={v}" for k, v in overrides.get(n, []))
            safe_echo(line)
        for t, p in tps:
            if t != n:
                continue
            pmd = parts[p]
            row = by_tp[(t, p)]
            line = (f"\tTopic: {t}\tPartition: {p}\tLeader: {pmd.leader if pmd.leader >= 0 else 'none'}"
                    f"\tReplicas: {','.join(map(str, pmd.replicas))}\tIsr: {','.join(map(str, pmd.isrs))}"
                    "\tElr: N/A\tLastKnownElr: N/A")
            line += "".join(f"\t{label}: {row[k]}" for k, label in extra.items() if k in row)
            safe_echo(line)


def _leader_metrics_urls(admin: Any, md: Any, leaders: set[int], timeout: float) -> dict[int, str]:
    """Each leader's own metrics endpoint, from its ``tidelog.metrics.listener`` broker config (DescribeConfigs of
    the BROKER resource, which a tidelog broker answers with the address it bound). A broker without the key
    (another Kafka) or with metrics off has none."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    out: dict[int, str] = {}
    for node in sorted(n for n in leaders if n is not None and n >= 0):
        try:
            res = ConfigResource(ResourceType.BROKER, str(node))
            entries = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout)
        except Exception:  # another Kafka, an authorizer saying no, a broker gone: no cleaner columns for it
            continue
        entry = entries.get("tidelog.metrics.listener")
        value = (entry.value or "").strip() if entry is not None else ""
        if not value or value.lower() == "off" or ":" not in value:
            continue
        host, port = value.rsplit(":", 1)
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::") and node in md.brokers:
            host = md.brokers[node].host
        out[node] = f"http://{host}:{port}/metrics"
    return out


def _cleaner_state(url: str | None, bootstrap: str) -> dict[tuple[str, int], dict[str, str]]:
    """Per-partition log-cleaner gauges from a tidelog broker's Prometheus endpoint (``host:port`` or a URL;
    empty when unavailable)."""
    import re
    import urllib.request

    if url is None:
        return {}
    if "://" not in url:
        url = f"http://{url}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return {}
    wanted = {
        "tidelog_cleaner_dirty_ratio": "dirty_ratio",
        "tidelog_cleaner_first_dirty_offset": "first_dirty_offset",
        "tidelog_cleaner_log_runs_total": "cleaner_runs",
    }
    pattern = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")
    out: dict[tuple[str, int], dict[str, str]] = {}
    for line in text.splitlines():
        m = pattern.match(line)
        if not m or m.group(1) not in wanted:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if "topic" not in labels or not labels.get("partition", "").isdigit():
            continue
        value = float(m.group(3))
        shown = f"{value:.3f}" if m.group(1) == "tidelog_cleaner_dirty_ratio" else str(int(value))
        out.setdefault((labels["topic"], int(labels["partition"])), {})[wanted[m.group(1)]] = shown
    return out


def _min_isr(admin: Any, names: list[str], timeout: float) -> dict[str, int]:
    """Each topic's effective ``min.insync.replicas`` (its override, else the broker's), through DescribeConfigs."""
    from confluent_kafka.admin import ConfigResource

    out: dict[str, int] = {}
    if not names:
        return out
    futs = admin.describe_configs([ConfigResource("topic", n) for n in names], request_timeout=timeout)
    for res, fut in futs.items():
        try:
            entry = fut.result(timeout=timeout).get("min.insync.replicas")
        except Exception as exc:
            fail(f"cannot read min.insync.replicas of {res.name!r}: {kafka_error_text(exc)}")
        if entry is not None and entry.value is not None:
            out[res.name] = int(entry.value)
    return out


def _partition_filter(admin: Any, md: Any, names: list[str], only: str, timeout: float,
                      tps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The partitions of ``tps`` in the state kafka-topics.sh's filter option names."""
    min_isr = _min_isr(admin, names, timeout) if only in ("under-min-isr", "at-min-isr") else {}
    kept = []
    for n, p in tps:
        pmd = md.topics[n].partitions[p]
        isr, replicas = len(pmd.isrs), len(pmd.replicas)
        state = {
            "under-replicated": isr < replicas,
            "unavailable": pmd.leader < 0 or pmd.leader not in md.brokers,
            "under-min-isr": n in min_isr and isr < min_isr[n],
            "at-min-isr": n in min_isr and isr == min_isr[n],
        }
        if state[only]:
            kept.append((n, p))
    return kept


@topics.command("describe")
@click.argument("names", nargs=-1)
@click.option("--all", "-a", "show_all", is_flag=True, help="Include internal topics when no NAME is given.")
@click.option(
    "--metrics",
    "metrics_url",
    default=None,
    help="tidelog metrics endpoint (host:port or URL) for log-cleaner columns; default: each partition leader's "
    "own endpoint (its tidelog.metrics.listener).",
)
@click.option("--under-replicated-partitions", "only", flag_value="under-replicated",
              help="Only partitions whose ISR is smaller than their replica set.")
@click.option("--unavailable-partitions", "only", flag_value="unavailable",
              help="Only partitions without a live leader.")
@click.option("--under-min-isr-partitions", "only", flag_value="under-min-isr",
              help="Only partitions whose ISR is smaller than the topic's min.insync.replicas.")
@click.option("--at-min-isr-partitions", "only", flag_value="at-min-isr",
              help="Only partitions whose ISR is exactly the topic's min.insync.replicas.")
@output_option
@bootstrap_option
@timeout_option
def describe(
    names: tuple[str, ...],
    show_all: bool,
    metrics_url: str | None,
    only: str | None,
    bootstrap: str,
    properties: tuple[str, ...],
    timeout: float,
) -> None:
    """Describe topics (all when no NAME): partitions, leader, replicas, ISR, offsets, config overrides;
    for compacted topics on a tidelog broker also the cleaner's dirty ratio, first dirty offset and runs.
    A filter (--under-replicated-partitions ...) keeps only the partitions in that state, as kafka-topics.sh."""
    admin = _admin(bootstrap, properties)
    md = _metadata(admin, timeout)
    wanted = list(names) if names else sorted(n for n in md.topics if show_all or not n.startswith("__"))
    missing = [n for n in wanted if n not in md.topics or md.topics[n].error is not None]
    present = [n for n in wanted if n not in missing]
    tps = [(n, p) for n in present for p in sorted(md.topics[n].partitions)]
    if only is not None:
        tps = _partition_filter(admin, md, present, only, timeout, tps)
        present = sorted({n for n, _ in tps})
    offsets = _offsets(admin, tps, timeout)
    overrides = _overrides(admin, present, timeout)

    rows = []
    for n, p in tps:
        pmd = md.topics[n].partitions[p]
        start, end = offsets.get((n, p), ("?", "?"))
        rows.append(
            [
                n,
                p,
                pmd.leader,
                ",".join(str(r) for r in pmd.replicas),
                ",".join(str(r) for r in pmd.isrs),
                start,
                end,
            ]
        )
    columns = ["topic", "partition", "leader", "replicas", "isr", "log_start_offset", "log_end_offset"]
    cleaner: dict[tuple[str, int], dict[str, str]] = {}
    if present and metrics_url is not None:
        cleaner = _cleaner_state(metrics_url, bootstrap)
    elif present:  # each partition's cleaner state as its leader reports it
        leaders = {md.topics[n].partitions[p].leader for n, p in tps}
        for node, url in _leader_metrics_urls(admin, md, leaders, timeout).items():
            for (t, p), values in _cleaner_state(url, bootstrap).items():
                part = md.topics[t].partitions.get(p) if t in md.topics else None
                if part is not None and part.leader == node:  # a follower's cleaner state is its own copy's
                    cleaner[(t, p)] = values
    if any((n, p) in cleaner for n in present for p in md.topics[n].partitions):
        extra = ["dirty_ratio", "first_dirty_offset", "cleaner_runs"]
        columns += extra
        for row in rows:
            state = cleaner.get((row[0], row[1]), {})
            row.extend(state.get(k, "-") for k in extra)
    if not output_is_json() and not is_tty():
        _print_kafka_description(md, present, tps, rows, columns, overrides, _topic_ids(admin, present, timeout),
                                 only is None)
    elif present:
        print_table(columns, rows)
    cfg_rows = [[n, k, v] for n in present for k, v in overrides.get(n, [])] if only is None else []
    if cfg_rows and (output_is_json() or is_tty()):
        if not output_is_json():
            safe_echo("")
        print_table(["topic", "config", "value"], cfg_rows)
    if missing:
        for n in missing:
            err = md.topics[n].error if n in md.topics else None
            click.echo(f"Error: topic {n!r} does not exist{f' ({err})' if err else ''}", err=True)
        sys.exit(1)


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed quietly when a topic does not exist.")
@bootstrap_option
@timeout_option
def delete(names: tuple[str, ...], if_exists: bool, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Delete topics."""
    admin = _admin(bootstrap, properties)
    futures = admin.delete_topics(list(names), operation_timeout=timeout, request_timeout=timeout)
    failed = False
    for name, exc in wait_all(futures, timeout + 5).items():
        if exc is None:
            safe_echo(f"Deleted topic {name}.")
        elif if_exists and kafka_error_name(exc) == "UNKNOWN_TOPIC_OR_PART":
            continue
        else:
            failed = True
            click.echo(f"Error: cannot delete topic {name!r}: {kafka_error_text(exc)}", err=True)
    if failed:
        sys.exit(1)


@topics.command("alter-config")
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a topic config (repeatable).")
@click.option("--delete", "deletes", multiple=True, metavar="KEY", help="Remove an override (repeatable).")
@bootstrap_option
@timeout_option
def alter_config(
    name: str, sets: tuple[str, ...], deletes: tuple[str, ...], bootstrap: str, properties: tuple[str, ...], timeout: float
) -> None:
    """Change topic NAME's config overrides (IncrementalAlterConfigs)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    if not sets and not deletes:
        raise click.UsageError("nothing to do: give --set KEY=VALUE and/or --delete KEY")
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in parse_key_values(sets, "--set")
    ]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    admin = _admin(bootstrap, properties)
    futures = admin.incremental_alter_configs(
        [ConfigResource("topic", name, incremental_configs=entries)], request_timeout=timeout
    )
    for _res, exc in wait_all(futures, timeout + 5).items():
        if exc is not None:
            fail(f"cannot alter configs of {name!r}: {kafka_error_text(exc)}")
    safe_echo(f"Updated config of topic {name}.")


@topics.command("add-partitions")
@click.argument("name")
@click.option("--partitions", "-p", type=int, required=True, help="The new total partition count.")
@bootstrap_option
@timeout_option
def add_partitions(name: str, partitions: int, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Grow topic NAME to PARTITIONS partitions (CreatePartitions)."""
    from confluent_kafka.admin import NewPartitions

    admin = _admin(bootstrap, properties)
    futures = admin.create_partitions([NewPartitions(name, partitions)], operation_timeout=timeout, request_timeout=timeout)
    for _n, exc in wait_all(futures, timeout + 5).items():
        if exc is not None:
            fail(f"cannot add partitions to {name!r}: {kafka_error_text(exc)}")
    safe_echo(f"Topic {name} now has {partitions} partitions.")
