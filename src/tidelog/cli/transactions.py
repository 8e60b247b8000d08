"""``tidelog transactions``: the jobs of Kafka's ``kafka-transactions.sh``.

* ``list`` — ListTransactions on every broker (each answers for the transactional ids it coordinates), with the
  state / producer id / duration filters of the API;
* ``describe --transactional-id ID`` — FindCoordinator(TRANSACTION), then DescribeTransactions at the coordinator;
* ``abort --topic T --partition P (--start-offset O | --producer-id ID --producer-epoch E --coordinator-epoch C)`` —
  writes an ABORT marker to the partition's leader (WriteTxnMarkers, as Kafka's ``Admin.abortTransaction``); with
  ``--start-offset`` the producer is found with DescribeProducers (the one whose open transaction starts there);
* ``find-hanging (--broker-id N | --topic T [--partition P])`` — open transactions in partitions (DescribeProducers)
  older than ``--max-transaction-timeout`` minutes whose coordinator no longer has them in an ongoing transaction
  on that partition (ListTransactions by producer id, DescribeTransactions): the candidates for ``abort``.

confluent-kafka's AdminClient has no transaction APIs, so these speak the protocol through tidelog's own codec
(:class:`tidelog.cluster.peer.Peer`, as ``tidelog cluster`` does).
"""

from __future__ import annotations

import json
import time
import uuid

import click

from tidelog.cli._client import CliTransport, bootstrap_option, fail, output_option, print_table, run_admin
from tidelog.client import admin_ops
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

METADATA = ApiKey.METADATA


def _err(code: int) -> str:
    return error_for_code(code).name


async def _metadata(t: CliTransport, topics: list[str] | None) -> dict:
    body = {"topics": None if topics is None else [{"name": x, "topic_id": uuid.UUID(int=0)} for x in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    return await t.any_broker(METADATA, 12, body)


def _brokers(md: dict) -> dict[int, tuple[str, int]]:
    return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}


async def _leader(t: CliTransport, topic: str, partition: int) -> tuple[str, int]:
    md = await _metadata(t, [topic])
    for x in md["topics"]:
        if x["error_code"]:
            fail(f"topic {topic}: {_err(x['error_code'])}")
        for p in x["partitions"]:
            if p["partition_index"] == partition:
                node = _brokers(md).get(p["leader_id"])
                if node is None:
                    fail(f"{topic}-{partition} has no leader now")
                return node
    fail(f"{topic}-{partition} does not exist")


async def _list(t: CliTransport, states: list[str], pids: list[int], duration_ms: int) -> list[tuple[int, dict]]:
    return await admin_ops.list_transactions(t, _brokers(await _metadata(t, [])), states, pids, duration_ms)


@click.group("transactions")
def transactions() -> None:
    """List, describe and abort transactions; find hanging ones (kafka-transactions.sh)."""


@transactions.command("list")
@output_option
@bootstrap_option
@click.option("--state", "states", multiple=True, help="Only transactions in this state (repeatable), e.g. Ongoing.")
@click.option("--producer-id", "pids", multiple=True, type=int, help="Only this producer id (repeatable).")
@click.option("--duration-filter", "duration_ms", type=int, default=-1,
              help="Only transactions running longer than this many ms.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def list_cmd(bootstrap: str, properties: tuple[str, ...], states: tuple[str, ...], pids: tuple[int, ...],
             duration_ms: int, as_json: bool, timeout: float) -> None:
    """Every transactional id the brokers coordinate."""
    rows = run_admin(_list(CliTransport(bootstrap, timeout), list(states), list(pids), duration_ms))
    if as_json:
        click.echo(json.dumps([{"transactionalId": t["transactional_id"], "coordinator": node,
                                "producerId": t["producer_id"], "state": t["transaction_state"]} for node, t in rows]))
        return
    print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                [(t["transactional_id"], node, t["producer_id"], t["transaction_state"]) for node, t in rows], layout="tabbed")


@transactions.command("describe")
@output_option
@bootstrap_option
@click.option("--transactional-id", "tid", required=True)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def describe_cmd(bootstrap: str, properties: tuple[str, ...], tid: str, as_json: bool, timeout: float) -> None:
    """The state of one transactional id at its coordinator."""
    node, s = run_admin(admin_ops.describe_transaction(CliTransport(bootstrap, timeout), tid))
    start = s["transaction_start_time_ms"]
    duration = int(time.time() * 1000) - start if start >= 0 else None
    parts = ",".join(f"{t['topic']}-{p}" for t in s["topics"] for p in t["partitions"])
    if as_json:
        click.echo(json.dumps({"coordinator": node, "transactionalId": tid, "producerId": s["producer_id"],
                               "producerEpoch": s["producer_epoch"], "state": s["transaction_state"],
                               "timeoutMs": s["transaction_timeout_ms"], "startTimeMs": start,
                               "durationMs": duration, "partitions": parts}))
        return
    print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
                [(node, tid, s["producer_id"], s["producer_epoch"], s["transaction_state"],
                  s["transaction_timeout_ms"], start if start >= 0 else "None",
                  duration if duration is not None else "None", parts or "None")], layout="tabbed")


@transactions.command("abort")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, default=None, help="Offset where the transaction to abort begins.")
@click.option("--producer-id", type=int, default=None)
@click.option("--producer-epoch", type=int, default=None)
@click.option("--coordinator-epoch", type=int, default=None)
@click.option("--timeout", type=float, default=30.0, show_default=True)
def abort_cmd(bootstrap: str, properties: tuple[str, ...], topic: str, partition: int, start_offset: int | None,
              producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None,
              timeout: float) -> None:
    """Write an ABORT marker for a (hanging) transaction in one partition."""
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None and None in explicit:
        fail("give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch", 2)

    async def run() -> str:
        t = CliTransport(bootstrap, timeout)
        host, port = await _leader(t, topic, partition)
        pid, epoch, cepoch = explicit
        if start_offset is not None:
            found = [a for _, _, a in await admin_ops.describe_producers(t, host, port, {topic: [partition]})
                     if a["current_txn_start_offset"] == start_offset]
            if not found:
                fail(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
            a = found[0]
            pid, epoch, cepoch = a["producer_id"], a["producer_epoch"], a["coordinator_epoch"]
        assert pid is not None and epoch is not None
        await admin_ops.write_abort_marker(t, host, port, topic, partition, pid, epoch, cepoch or 0)
        return f"aborted the transaction of producer {pid} (epoch {epoch}) in {topic}-{partition}"

    click.echo(run_admin(run()))


@transactions.command("find-hanging")
@output_option
@bootstrap_option
@click.option("--broker-id", type=int, default=None, help="Every partition this broker leads.")
@click.option("--topic", default=None)
@click.option("--partition", type=int, default=None)
@click.option("--max-transaction-timeout", "max_minutes", type=int, default=15, show_default=True,
              help="transaction.max.timeout.ms of the cluster, in minutes.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def find_hanging_cmd(bootstrap: str, properties: tuple[str, ...], broker_id: int | None, topic: str | None,
                     partition: int | None, max_minutes: int, timeout: float) -> None:
    """Open transactions older than the maximum timeout that their coordinator no longer tracks."""
    if (broker_id is None) == (topic is None):
        fail("give --broker-id or --topic", 2)

    async def run() -> list[tuple]:
        t = CliTransport(bootstrap, timeout)
        md = await _metadata(t, None if topic is None else [topic])
        nodes = _brokers(md)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for tp in md["topics"]:
            if tp["error_code"]:
                fail(f"topic {tp['name']}: {_err(tp['error_code'])}")
            for p in tp["partitions"]:
                if partition is not None and p["partition_index"] != partition:
                    continue
                if broker_id is not None and p["leader_id"] != broker_id:
                    continue
                by_leader.setdefault(p["leader_id"], {}).setdefault(tp["name"], []).append(p["partition_index"])
        now = int(time.time() * 1000)
        limit = max_minutes * 60_000
        open_txns = []
        for leader, parts in by_leader.items():
            if leader not in nodes:
                continue
            for name, idx, a in await admin_ops.describe_producers(t, *nodes[leader], parts):
                if a["current_txn_start_offset"] >= 0 and now - a["last_timestamp"] > limit:
                    open_txns.append((name, idx, a))
        hanging = []
        for name, idx, a in open_txns:
            listed = [x for _, x in await _list(t, [], [a["producer_id"]], -1)]
            ongoing = False
            for entry in listed:
                _, s = await admin_ops.describe_transaction(t, entry["transactional_id"])
                in_txn = any(x["topic"] == name and idx in x["partitions"] for x in s["topics"])
                if s["producer_id"] == a["producer_id"] and s["transaction_state"] != "CompleteAbort" and in_txn:
                    ongoing = True
            if not ongoing:
                hanging.append((name, idx, a["producer_id"], a["producer_epoch"], a["coordinator_epoch"],
                                a["current_txn_start_offset"], a["last_timestamp"],
                                (now - a["last_timestamp"]) // 60_000))
        return hanging

    rows = run_admin(run())
    print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                 "LastTimestamp", "Duration(min)"], rows, layout="tabbed")
