"""``tidelog delete-records``: kafka-delete-records.sh through the bootstrap server (DeleteRecords).

Takes Kafka's ``--offset-json-file`` (``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}],
"version": 1}``; offset -1 is the high watermark) or one ``--topic T --partition P --offset O``, and prints the new
low watermark of each partition as Kafka's tool does (``partition: t-0\tlow_watermark: 3``).
"""

from __future__ import annotations

import json
from typing import Any

import click

from tidelog.cli._client import (
    bootstrap_option,
    echo_json,
    fail,
    kafka_error_text,
    output_is_json,
    output_option,
    repeated,
    safe_echo,
)
from tidelog.cli.topics import _admin, timeout_option


def read_offset_json(path: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of Kafka's offset JSON; a duplicated partition is an error, as in Kafka."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        if not isinstance(value, dict) or "partitions" not in value:
            fail(f"{path}: Missing partitions field")
        out = [(str(e["topic"]), int(e["partition"]), int(e["offset"])) for e in value["partitions"]]
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    except (ValueError, KeyError, TypeError) as exc:
        fail(f"{path} is not Kafka's offset JSON ({type(exc).__name__}: {exc})")
    dups = repeated(f"{t}-{p}" for t, p, _ in out)
    if dups:
        fail(f"Offset json file contains duplicate topic partitions: {','.join(dups)}")
    return out


@click.command("delete-records")
@click.option("--offset-json-file", type=click.Path(dir_okay=False), default=None,
              help='{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}')
@click.option("--topic", default=None, help="One partition's topic (instead of --offset-json-file).")
@click.option("--partition", type=int, default=None, help="With --topic.")
@click.option("--offset", type=int, default=None, help="With --topic: delete records before it (-1: all).")
@output_option
@bootstrap_option
@timeout_option
def delete_records(offset_json_file: str | None, topic: str | None, partition: int | None, offset: int | None,
                   bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Delete the records of partitions before the offsets given (kafka-delete-records.sh)."""
    from confluent_kafka import TopicPartition

    single = (topic, partition, offset)
    if offset_json_file is not None and any(v is not None for v in single):
        fail("give either --offset-json-file or --topic/--partition/--offset", 2)
    if offset_json_file is None:
        if any(v is None for v in single):
            fail("give --offset-json-file, or all of --topic, --partition and --offset", 2)
        wanted = [(str(topic), int(partition or 0), int(offset or 0))]
    else:
        wanted = read_offset_json(offset_json_file)
    admin = _admin(bootstrap, properties)
    as_json = output_is_json()  # then one array: {topic, partition, lowWatermark} or {topic, partition, error}
    if not as_json:
        safe_echo("Executing records delete operation")
    futures: dict[Any, Any] = admin.delete_records([TopicPartition(t, p, o) for t, p, o in wanted],
                                                   request_timeout=timeout, operation_timeout=timeout)
    if not as_json:
        safe_echo("Records delete operation completed:")
    failed = 0
    results: list[dict[str, Any]] = []
    for tp, fut in futures.items():
        try:
            low = fut.result(timeout + 5).low_watermark
            results.append({"topic": tp.topic, "partition": tp.partition, "lowWatermark": low})
            if not as_json:
                safe_echo(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {low}")
        except Exception as exc:
            failed += 1
            results.append({"topic": tp.topic, "partition": tp.partition, "error": kafka_error_text(exc)})
            if not as_json:
                safe_echo(f"partition: {tp.topic}-{tp.partition}\terror: {kafka_error_text(exc)}")
    if as_json:
        echo_json(results)
    if failed:
        fail(f"records of {failed} of {len(futures)} partition(s) could not be deleted")
