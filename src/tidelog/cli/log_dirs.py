"""``tidelog log-dirs describe``: kafka-log-dirs.sh --describe through the bootstrap server (DescribeLogDirs sent to
each broker named in Metadata).

Default output is Kafka's: ``Querying brokers for log directories information``, ``Received log directory
information from brokers 0,1``, then one JSON line (``{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":
...,"error":null,"partitions":[{"partition":"t-0","size":0,"offsetLag":0,"isFuture":false}]}]}]}``), with
``totalBytes``/``usableBytes`` added where the broker reports them (DescribeLogDirs v4). ``--table`` prints a
readable table of the same facts instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from tidelog.cli._client import (
    bootstrap_option,
    broker_addresses,
    echo_json,
    fail,
    output_is_json,
    output_option,
    peer_request,
    print_table,
    safe_echo,
)
from tidelog.cli.topics import timeout_option
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

DESCRIBE_LOG_DIRS_VERSION = 4
# the Java exception Kafka's tool names for the log dir errors a broker answers
_ERROR_CLASSES = {56: "org.apache.kafka.common.errors.KafkaStorageException"}


def _int_list(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{what} expects comma separated broker ids, got {text!r}", 2)


async def _describe(bootstrap: str, wanted: list[int] | None, timeout: float) -> dict[int, list[dict]]:
    nodes = await broker_addresses(bootstrap, timeout)
    missing = sorted(set(wanted or ()) - set(nodes))
    if missing:
        fail(f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
             f"Current existent brokers: {','.join(map(str, sorted(nodes)))}")
    out: dict[int, list[dict]] = {}
    for node in sorted(wanted if wanted is not None else nodes):
        host, port = nodes[node]
        try:
            resp = await peer_request(host, port, ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION,
                                      {"topics": None}, timeout)
        except (OSError, TimeoutError) as exc:
            fail(f"broker {node} ({host}:{port}) did not answer DescribeLogDirs: {exc}")
        if resp.get("error_code"):
            fail(f"broker {node}: {error_for_code(resp['error_code']).name}")
        out[node] = resp["results"]
    return out


def as_kafka_json(results: dict[int, list[dict]], topics: set[str] | None) -> dict[str, Any]:
    """Kafka's LogDirsCommand JSON (brokers, log dirs, partitions), plus total/usable bytes when reported."""
    brokers = []
    for node, dirs in sorted(results.items()):
        log_dirs = []
        for d in dirs:
            code = d["error_code"]
            entry: dict[str, Any] = {
                "logDir": d["log_dir"],
                "error": _ERROR_CLASSES.get(code, error_for_code(code).name) if code else None,
                "partitions": [
                    {"partition": f"{t['name']}-{p['partition_index']}", "size": p["partition_size"],
                     "offsetLag": p["offset_lag"], "isFuture": p["is_future_key"]}
                    for t in d["topics"] if topics is None or t["name"] in topics
                    for p in t["partitions"]],
            }
            for key, field in (("totalBytes", "total_bytes"), ("usableBytes", "usable_bytes")):
                if d.get(field, -1) >= 0:
                    entry[key] = d[field]
            log_dirs.append(entry)
        brokers.append({"broker": node, "logDirs": log_dirs})
    return {"version": 1, "brokers": brokers}


@click.group("log-dirs")
def log_dirs() -> None:
    """Log directories of the brokers (kafka-log-dirs.sh)."""


@log_dirs.command("describe")
@click.option("--broker-list", default=None, metavar="ID[,ID...]", help="Brokers to ask (default: all).")
@click.option("--topic-list", default=None, metavar="T[,T...]", help="Only these topics' partitions (default: all).")
@click.option("--table", "as_table", is_flag=True, help="A readable table instead of Kafka's JSON.")
@output_option
@bootstrap_option
@timeout_option
def describe(broker_list: str | None, topic_list: str | None, as_table: bool, bootstrap: str,
             properties: tuple[str, ...], timeout: float) -> None:
    """Each broker's log dirs: error (offline), total and usable bytes, and each partition's size, offset lag and
    whether it is a future replica (being moved between log dirs)."""
    wanted = _int_list(broker_list, "--broker-list")
    topics = {t.strip() for t in topic_list.split(",") if t.strip()} if topic_list else None
    if output_is_json():  # only Kafka's JSON document, without the lines around it
        echo_json(as_kafka_json(asyncio.run(_describe(bootstrap, wanted, timeout)), topics))
        return
    if not as_table:
        safe_echo("Querying brokers for log directories information")
    results = asyncio.run(_describe(bootstrap, wanted, timeout))
    info = as_kafka_json(results, topics)
    if not as_table:
        safe_echo(f"Received log directory information from brokers {','.join(map(str, sorted(results)))}")
        safe_echo(json.dumps(info, separators=(",", ":")))
        return
    dir_rows = []
    part_rows = []
    for b in info["brokers"]:
        for d in b["logDirs"]:
            dir_rows.append([b["broker"], d["logDir"], d["error"] or "online", d.get("totalBytes", "-"),
                             d.get("usableBytes", "-"), len(d["partitions"])])
            part_rows += [[b["broker"], d["logDir"], p["partition"], p["size"], p["offsetLag"],
                           str(p["isFuture"]).lower()] for p in d["partitions"]]
    print_table(["broker", "log_dir", "state", "total_bytes", "usable_bytes", "partitions"], dir_rows)
    if part_rows:
        safe_echo("")
        print_table(["broker", "log_dir", "partition", "size", "offset_lag", "is_future"], part_rows)
